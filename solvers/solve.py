"""One entry point for every method, in the shape of ``scipy.optimize.minimize``.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([3., 1., 2.])
>>> [solve(p, method=m).choice for m in ("dp", "ilp", "pbqp", "brute")]
[[1], [1], [1], [1]]
"""
from __future__ import annotations

from .problem import Problem
from .solution import Solution

METHODS = ("dp", "ilp", "pbqp", "brute")


def solve(p: Problem, method: str = "dp", time_limit: float | None = None, **options) -> Solution:
    """Minimise ``p.evaluate`` over all choices.

    ``method``: ``"dp"`` (exact bucket elimination; option ``max_table_entries``, raises
    :class:`~solvers.TableTooLarge` above it), ``"ilp"`` (exact MILP via HiGHS),
    ``"pbqp"`` (Scholz-Eckstein reductions; heuristic on dense graphs) or ``"brute"``
    (tiny problems only).  ``time_limit`` (seconds) is honoured by ``ilp``, which then
    returns its incumbent with ``optimal=False``; the other methods run to completion.
    Raises :class:`~solvers.Infeasible` when every assignment costs inf.
    """
    if method == "dp":
        from .dp import solve_dp
        return solve_dp(p, **options)
    if method == "ilp":
        from .ilp import solve_ilp
        return solve_ilp(p, time_limit=time_limit, **options)
    if method == "pbqp":
        from .pbqp import solve_pbqp
        return solve_pbqp(p, **options)
    if method == "brute":
        from .brute import solve_brute
        return solve_brute(p, **options)
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
