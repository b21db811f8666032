"""PBQP graph (cost vectors on nodes, cost matrices on edges) and the Scholz-Eckstein
reductions, each a small function that records how to recover the removed node's
choice.

* R0 (degree 0): nothing to fold; the node later takes its cheapest choice.
* RI (degree 1, neighbour v): ``c_v[y] += min_x (c_u[x] + M_uv[x, y])``.  Exact.
* RII (degree 2, neighbours v, w): ``M_vw[y, z] += min_x (c_u[x] + M_uv[x, y] +
  M_uw[x, z])``.  Exact.
* RN (any degree, heuristic): fix u to the choice minimising ``c_u[x] + sum_v min_y
  (M_uv[x, y] + c_v[y])`` and add row x of every incident matrix to the neighbour.

>>> g = Graph([np.array([0., 5.]), np.array([1., 0.])])
>>> g.add_edge(0, 1, np.array([[0., 3.], [0., 0.]]))
>>> step = reduce_ri(g, 1)
>>> g.vectors[0].tolist()
[1.0, 5.0]
>>> g.degree(0), recover(step, {0: 0})
(0, 0)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Graph:
    """Undirected PBQP graph; ``adj[u][v]`` is the matrix with u's choices as rows."""

    def __init__(self, vectors: list[np.ndarray]):
        self.vectors = [np.asarray(v, dtype=float).copy() for v in vectors]
        self.adj: dict[int, dict[int, np.ndarray]] = {u: {} for u in range(len(vectors))}

    def degree(self, u: int) -> int:
        return len(self.adj[u])

    def add_edge(self, u: int, v: int, m: np.ndarray) -> None:
        """Add ``m[x_u, x_v]`` (summed into an existing edge)."""
        old = self.adj[u].get(v)
        m = m if old is None else old + m
        self.adj[u][v] = m
        self.adj[v][u] = m.T

    def remove(self, u: int) -> dict[int, np.ndarray]:
        nbrs = self.adj.pop(u)
        for v in nbrs:
            del self.adj[v][u]
        return nbrs


@dataclass
class Step:
    """How to recover node u's choice: argmin of ``cost + sum_k mats[k][:, choice[nbrs[k]]]``."""

    kind: str
    node: int
    cost: np.ndarray
    nbrs: tuple[int, ...] = ()
    mats: tuple[np.ndarray, ...] = ()
    fixed: int | None = None  # RN


def recover(step: Step, choice: dict[int, int]) -> int:
    if step.fixed is not None:
        return step.fixed
    total = step.cost.copy()
    for v, m in zip(step.nbrs, step.mats):
        total += m[:, choice[v]]
    return int(np.argmin(total))


def reduce_r0(g: Graph, u: int) -> Step:
    assert g.degree(u) == 0
    g.remove(u)
    return Step("R0", u, g.vectors[u])


def reduce_ri(g: Graph, u: int) -> Step:
    (v, m), = g.remove(u).items()
    c = g.vectors[u]
    g.vectors[v] = g.vectors[v] + (c[:, None] + m).min(axis=0)
    return Step("RI", u, c, (v,), (m,))


def reduce_rii(g: Graph, u: int) -> Step:
    (v, mv), (w, mw) = g.remove(u).items()
    c = g.vectors[u]
    g.add_edge(v, w, (c[:, None, None] + mv[:, :, None] + mw[:, None, :]).min(axis=0))
    return Step("RII", u, c, (v, w), (mv, mw))


def reduce_rn(g: Graph, u: int) -> Step:
    c = g.vectors[u]
    nbrs = g.remove(u)
    local = c.copy()
    for v, m in nbrs.items():
        local += (m + g.vectors[v][None, :]).min(axis=1)
    x = int(np.argmin(local))
    for v, m in nbrs.items():
        g.vectors[v] = g.vectors[v] + m[x]
    return Step("RN", u, c, fixed=x)
