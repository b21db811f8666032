"""One entry point for every method, in the shape of ``scipy.optimize.minimize``.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([3., 1., 2.])
>>> [solve(p, method=m).choice for m in ("auto", "dp", "ilp", "pbqp", "brute")]
[[1], [1], [1], [1], [1]]
>>> s = solve(p); s.method, s.stats["auto"]
('dp', "dp's tables fit its memory cap")
"""
from __future__ import annotations

from .problem import Problem
from .solution import Solution, TableTooLarge

METHODS = ("auto", "dp", "ilp", "pbqp", "brute")


def solve(p: Problem, method: str = "auto", time_limit: float | None = None,
          **options) -> Solution:
    """Minimise ``p.evaluate`` over all choices.

    ``method``:

    * ``"auto"`` (default): ``dp`` when its tables fit its cap (its options
      ``max_table_entries``, ``direct_conversion_entries``), else ``ilp`` (warm-started from
      PBQP; the other options go to it); ``stats["auto"]`` says which ran and why.
    * ``"dp"``: exact bucket elimination (option ``max_table_entries``; raises
      :class:`~solvers.TableTooLarge` above it);
    * ``"ilp"``: exact 0-1 ILP on OR-Tools (options ``backend="cp-sat" | "scip"``,
      ``workers``, ``warm_start``); anytime with ``time_limit``: the best solution found
      and a proven ``bound``, ``optimal`` only when the gap is closed;
    * ``"pbqp"``: Scholz-Eckstein reductions (heuristic on dense graphs);
    * ``"brute"``: tiny problems only.

    ``time_limit`` (seconds) is honoured by ``ilp``; the other methods run to completion.
    Raises :class:`~solvers.Infeasible` when every assignment costs inf.
    """
    if method == "auto":
        from .dp import MAX_TABLE_ENTRIES, solve_dp
        from .ilp import solve_ilp
        dp_options = {k: options.pop(k) for k in ("max_table_entries", "direct_conversion_entries") if k in options}
        try:
            s = solve_dp(p, **{"max_table_entries": MAX_TABLE_ENTRIES, **dp_options})
            s.stats["auto"] = "dp's tables fit its memory cap"
        except TableTooLarge as e:
            s = solve_ilp(p, time_limit=time_limit, **options)
            why = str(e).split(";")[0]  # drop its advice to use ilp: that is what runs
            s.stats["auto"] = f"dp's table cap was hit: {why}"
        return s
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
