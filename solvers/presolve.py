"""Exact shrinking of a problem before ILP / PBQP.

* A choice with infinite unary cost can never be used: drop it.
* Two choices of a node that have identical rows in every incident edge matrix and
  identical classes in every conversion role are interchangeable everywhere except
  their own cost: keep the cheaper.  For a conv whose 64 schedule candidates differ
  only by (in block, out block) as far as the rest of the graph can see, this leaves
  at most 49 choices.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([3., 1., 2.]); b = p.add_node([0., 0.])
>>> p.add_edge(a, b, [[0., 1.], [0., 1.], [5., 5.]])
>>> r = presolve(p); r.problem.sizes, r.keep[0].tolist()
([2, 2], [1, 2])
>>> r.expand([0, 1])
[1, 1]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .factors import group
from .problem import Problem
from .solution import Infeasible


@dataclass
class Presolved:
    problem: Problem
    keep: list[np.ndarray]  # per node: original index of each kept choice

    def expand(self, choice) -> list[int]:
        """Map a choice of the reduced problem back to the original problem."""
        return [int(k[x]) for k, x in zip(self.keep, choice)]


def presolve(p: Problem) -> Presolved:
    """Drop forbidden and interchangeable choices (exact); raises Infeasible if a node has none."""
    keys: list[list[np.ndarray]] = [[] for _ in range(p.num_nodes)]
    for (i, j), m in p.edges.items():
        keys[i].append(np.unique(m, axis=0, return_inverse=True)[1].reshape(-1))
        keys[j].append(np.unique(m, axis=1, return_inverse=True)[1].reshape(-1))
    for conv in p.conversions:
        keys[conv.src].append(conv.src_class)
        for d, c in zip(conv.dsts, conv.dst_classes):
            keys[d].append(c)
    keep = []
    for i, cost in enumerate(p.costs):
        finite = np.flatnonzero(np.isfinite(cost))
        if finite.size == 0:
            raise Infeasible(f"every choice of node {i} has infinite cost")
        if keys[i]:
            inv, _ = group(*(k[finite] for k in keys[i]))
            # cheapest member of each group (stable: first among equals)
            order = np.lexsort((cost[finite], inv))
            first = np.ones(len(order), dtype=bool)
            first[1:] = inv[order][1:] != inv[order][:-1]
            kept = np.sort(finite[order[first]])
        else:
            kept = finite[[np.argmin(cost[finite])]]
        keep.append(kept)
    q = Problem()
    for cost, k in zip(p.costs, keep):
        q.add_node(cost[k])
    for (i, j), m in p.edges.items():
        q.add_edge(i, j, m[np.ix_(keep[i], keep[j])])
    for conv in p.conversions:
        q.add_conversion(conv.src, conv.dsts, conv.src_class[keep[conv.src]],
                         [c[keep[d]] for d, c in zip(conv.dsts, conv.dst_classes)], conv.table)
    return Presolved(q, keep)
