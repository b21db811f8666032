"""Exhaustive search over all assignments, for tests and tiny problems.

The whole cost tensor is built with numpy broadcasting, so a few million assignments
take well under a second.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> solve_brute(p).choice
[0, 0]
"""
from __future__ import annotations

import time

import numpy as np

from .factors import conversion_factor
from .problem import Problem
from .solution import Infeasible, Solution

MAX_ASSIGNMENTS = 2_000_000


def cost_tensor(p: Problem) -> np.ndarray:
    """Cost of every joint assignment, axis i = node i."""
    n = p.num_nodes
    sizes = p.sizes

    def place(scope, table):
        order = np.argsort(scope)
        shape = [1] * n
        for s in scope:
            shape[s] = sizes[s]
        return np.transpose(table, order).reshape(shape)

    total = np.zeros([1] * n)
    for i, c in enumerate(p.costs):
        total = total + place([i], c)
    for (i, j), m in p.edges.items():
        total = total + place([i, j], m)
    for conv in p.conversions:
        f = conversion_factor(conv)
        total = total + place(list(f.scope), f.full())
    return np.broadcast_to(total, sizes)


def solve_brute(p: Problem, *, max_assignments: int = MAX_ASSIGNMENTS) -> Solution:
    """Try every assignment; refuses problems with more than ``max_assignments``."""
    if p.num_assignments() > max_assignments:
        raise ValueError(
            f"brute force refuses {p.num_assignments():.3g} assignments (limit {max_assignments}); "
            "use method='dp' or 'ilp'"
        )
    start = time.perf_counter()
    if p.num_nodes == 0:
        return Solution([], 0.0, True, 0.0, "brute", {"assignments": 1})
    total = cost_tensor(p)
    flat = int(np.argmin(total))
    if not np.isfinite(total.flat[flat]):
        raise Infeasible("every assignment has infinite cost")
    choice = [int(x) for x in np.unravel_index(flat, total.shape)]
    cost = p.evaluate(choice)
    return Solution(choice, cost, True, cost, "brute",
                    {"assignments": total.size, "time": time.perf_counter() - start})
