"""Exact 0-1 ILP: presolve, the local-polytope model, a PBQP warm start, a MILP backend.

Steps: :func:`~solvers.presolve.presolve` (exact shrinking), the model of
:mod:`~solvers.linear_model`, under a time limit the PBQP solution (milliseconds) as a
complete hint, then the backend (:mod:`~solvers.ilp_backends`): ``"cp-sat"`` (default:
OR-Tools CP-SAT on ``workers`` threads, default the machine's cores) or ``"scip"`` (SCIP
through OR-Tools, one thread).  On ``benchmarks/bench_solvers.py`` (2 cores) CP-SAT was
the faster on the large instances, where dp's tables may not fit (DenseNet-201-like 1.7 s
against 3.5 s), SCIP on those under 100 ms; HiGHS through scipy, this module's backend
before, was slower than CP-SAT on every instance.

Anytime: with ``time_limit`` the best solution found (never worse than the PBQP hint)
comes back with the backend's proven lower bound.  Without a time limit there is no hint:
it only slowed the proof (CP-SAT, DenseNet-201-like: 2.6 s instead of 1.6 s, the same
~220k branches either way, plus PBQP's 0.1 s).  ``optimal`` is True only when the gap
``cost - bound`` is closed, i.e. at most ``GAP_TOLERANCE * max(1, cost)`` (CP-SAT's
integer-scaled objective leaves a proven error far below that).

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> s = solve_ilp(p); s.choice, s.cost, s.optimal
([0, 0], 1.0, True)
"""
from __future__ import annotations

import os
import time

import numpy as np

from .ilp_backends import BACKENDS
from .linear_model import linear_model
from .pbqp import solve_pbqp
from .presolve import presolve
from .problem import Problem
from .solution import Infeasible, NoSolutionFound, Solution

DEFAULT_BACKEND = "cp-sat"
GAP_TOLERANCE = 1e-9


def solve_ilp(p: Problem, *, time_limit: float | None = None, backend: str = DEFAULT_BACKEND,
              workers: int | None = None, warm_start: bool | None = None) -> Solution:
    """Exact minimum (see the module docstring); ``time_limit`` in seconds.

    ``warm_start`` (default: when there is a time limit) starts from the PBQP solution.
    """
    if warm_start is None:
        warm_start = time_limit is not None
    if backend not in BACKENDS:
        raise ValueError(f"unknown ilp backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    t0 = time.perf_counter()
    if p.num_nodes == 0:
        return Solution([], 0.0, True, 0.0, "ilp", {"backend": backend})
    pre = presolve(p)
    q = pre.problem
    model = linear_model(q)
    hint = None
    if warm_start:
        try:
            hint = solve_pbqp(q).choice  # raises Infeasible only when it is exact
        except NoSolutionFound:
            pass
    t1 = time.perf_counter()
    values = None if hint is None else model.values(hint)
    # the limit covers the whole solve, presolve and warm start included
    left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    res = BACKENDS[backend](model, values, left, workers or os.cpu_count() or 1)
    t2 = time.perf_counter()
    if res.status == "infeasible":
        raise Infeasible("every assignment has infinite cost (ILP infeasible)")
    # the backend's best, or the hint if the backend did not beat it within the limits
    candidates = [model.choice(res.values)] if res.values is not None else []
    candidates += [hint] if hint is not None else []
    scored = [(p.evaluate(full), full) for full in map(pre.expand, candidates)]
    hint_cost = scored[-1][0] if hint is not None else None
    scored = [sc for sc in scored if np.isfinite(sc[0])]
    if not scored:
        raise NoSolutionFound(
            f"ilp found no finite-cost assignment within the limits ({res.stats.get('message')}); "
            "raise time_limit"
        )
    cost, choice = min(scored, key=lambda sc: sc[0])
    # costs are >= 0, so 0 is a valid bound when the backend has none (SCIP: -1e20)
    bound = min(max(res.bound or 0.0, 0.0), cost)
    optimal = cost - bound <= GAP_TOLERANCE * max(1.0, cost)
    stats = {**res.stats, "status": res.status, "variables": len(model.cost),
             "constraints": model.matrix.shape[0], "hint_cost": hint_cost,
             "build_time": t1 - t0, "solve_time": t2 - t1, "time": time.perf_counter() - t0}
    return Solution(choice, cost, optimal, bound, "ilp", stats)
