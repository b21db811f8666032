"""Greedy elimination order for bucket elimination.

networkx's ``treewidth_min_fill_in`` / ``treewidth_min_degree`` ignore domain sizes and
return a decomposition, not an order; what the DP pays for is the size of each table
it builds, so this picks, at every step, the variable whose elimination creates the
smallest table (sum of log domain sizes over it and its neighbours), breaking ties by
fill-in.  Lazy heap updates keep it near-linear on sparse CNN graphs.

>>> order = min_weight_order({0: {1}, 1: {0, 2}, 2: {1}}, {0: 4, 1: 50, 2: 4})
>>> order[0] != 1  # the big middle variable is never eliminated first
True
"""
from __future__ import annotations

import heapq
import math


def min_weight_order(adjacency: dict[int, set[int]], sizes: dict[int, int]) -> list[int]:
    """Elimination order for the graph ``adjacency`` (modified copy) with ``sizes``."""
    adj = {v: set(n) for v, n in adjacency.items()}
    logs = {v: math.log(max(s, 1)) for v, s in sizes.items()}

    def score(v):
        nbrs = adj[v]
        fill = sum(1 for u in nbrs for w in nbrs if u < w and w not in adj[u]) if len(nbrs) < 12 else len(nbrs) ** 2
        return (logs[v] + sum(logs[u] for u in nbrs), fill)

    current = {v: score(v) for v in adj}
    heap = [(s, v) for v, s in current.items()]
    heapq.heapify(heap)
    order = []
    while heap:
        s, v = heapq.heappop(heap)
        if v not in adj or current[v] != s:
            continue
        nbrs = adj.pop(v)
        order.append(v)
        for u in nbrs:
            adj[u].discard(v)
            adj[u] |= nbrs - {u}
        for u in nbrs:
            current[u] = score(u)
            heapq.heappush(heap, (current[u], u))
    return order
