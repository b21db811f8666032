"""PBQP solver: Scholz-Eckstein reductions on the pairwise form of the problem.

Shared conversions are *approximated* by pairwise edges: each distinct consumer node
pays ``table[src class][b]`` for every class b it needs, as if it had its own
transform.  That is exact for a conversion whose consumers are one node, and an over-
estimate otherwise (two consumers needing the same class pay twice).  The reductions
R0/RI/RII are exact; RN (degree >= 3) is a heuristic.  So:

* ``cost`` is always ``p.evaluate(choice)``, the true objective;
* ``optimal`` is True only if no RN step ran *and* no conversion was approximated;
  then ``bound`` is the PBQP optimum, otherwise ``bound`` is None.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> s = solve_pbqp(p); s.choice, s.cost, s.optimal
([0, 0], 1.0, True)
"""
from __future__ import annotations

import time

import numpy as np

from .pbqp_graph import Graph, recover, reduce_r0, reduce_ri, reduce_rii, reduce_rn
from .presolve import presolve
from .problem import Problem
from .solution import Infeasible, NoSolutionFound, Solution


def pairwise_graph(p: Problem) -> tuple[Graph, int]:
    """PBQP graph of ``p``; returns it and the number of approximated conversions."""
    g = Graph(p.costs)
    for (i, j), m in p.edges.items():
        g.add_edge(i, j, m)
    approximated = 0
    for conv in p.conversions:
        nodes = list(dict.fromkeys(conv.dsts))
        approximated += len(nodes) > 1
        a = conv.src_class
        for d in nodes:
            # classes node d needs for each of its choices (d may be listed several times)
            mine = [c for dd, c in zip(conv.dsts, conv.dst_classes) if dd == d]
            cost = np.zeros((len(a), len(mine[0])))
            for b in np.unique(np.concatenate(mine)):
                needed = np.logical_or.reduce([c == b for c in mine])
                cost = cost + np.where(needed[None, :], conv.table[a, b][:, None], 0.0)
            if d == conv.src:
                g.vectors[d] = g.vectors[d] + np.diag(cost)
            else:
                g.add_edge(conv.src, d, cost)
    return g, approximated


def solve_pbqp(p: Problem) -> Solution:
    """Reduce, back-propagate, evaluate (see module docstring)."""
    t0 = time.perf_counter()
    pre = presolve(p)  # raises Infeasible if a node has no finite choice
    g, approximated = pairwise_graph(pre.problem)
    alive = set(range(pre.problem.num_nodes))
    low = {u for u in alive if g.degree(u) <= 2}
    steps = []
    counts = {"R0": 0, "RI": 0, "RII": 0, "RN": 0}
    reduce = {0: reduce_r0, 1: reduce_ri, 2: reduce_rii}
    while alive:
        if low:
            u = low.pop()
            nbrs = list(g.adj[u])
            step = reduce[g.degree(u)](g, u)
        else:
            u = max(alive, key=lambda n: (g.degree(n), -n))
            nbrs = list(g.adj[u])
            step = reduce_rn(g, u)
        alive.discard(u)
        counts[step.kind] += 1
        steps.append(step)
        for v in nbrs:
            if g.degree(v) <= 2:
                low.add(v)
    value = float(sum(s.cost.min() for s in steps if s.kind == "R0"))
    choice: dict[int, int] = {}
    for step in reversed(steps):
        choice[step.node] = recover(step, choice)
    full = pre.expand([choice[u] for u in range(pre.problem.num_nodes)])
    cost = p.evaluate(full)
    proven = counts["RN"] == 0 and approximated == 0
    stats = {**counts, "approximated_conversions": approximated, "time": time.perf_counter() - t0}
    if not np.isfinite(cost):
        if counts["RN"] == 0:  # exact reductions (the pairwise form has the same inf set)
            raise Infeasible("every assignment has infinite cost")
        raise NoSolutionFound(
            "pbqp heuristic (RN) found no finite-cost assignment; use method='dp' or 'ilp'"
        )
    # value: the reductions' sum, in another order than evaluate's fsum (the last bits may differ)
    return Solution(full, cost, proven, min(value, cost) if proven else None, "pbqp", stats)
