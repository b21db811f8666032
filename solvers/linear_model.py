"""The 0-1 linear model of a problem (local-polytope form), shared by every ILP backend.

Columns (all binary; an ``inf`` cost fixes its column to 0):

* ``x[i, a]``: node i takes choice a; one row ``sum_a x[i, a] = 1`` per node;
* per edge, its matrix grouped into identical rows r / columns c
  (:func:`~solvers.factors.edge_factor`), ``y[r, c]`` with marginals
  ``sum_c y[r, c] = sum_{a in r} x[i, a]`` and ``sum_r y[r, c] = sum_{b in c} x[j, b]``
  (the marginal / local-polytope linearisation, much tighter than
  ``y >= x_i + x_j - 1``);
* per shared conversion with src classes a and needed classes b:

  - one consumer: ``v[a, b]`` with the same marginal constraints against (class of
    src = a) and (consumer needs b), paying ``table[a][b] * v[a, b]``;
  - several consumers: ``w[a, b]`` ("src has class a and class b is needed") with
    ``w[a, b] <= X_src[a]`` and, for every consumer k and class b,
    ``sum_a w[a, b] >= X_k[b]``, paying ``table[a][b] * w[a, b]`` (0 when a == b).
    At an integral x only ``w[class(src), b]`` may be non-zero and it must be 1 for
    every needed b, so the cheapest w pays each needed class once: exact.  It is
    tighter than ``w >= X_src[a] + z_b - 1`` and needs A*B columns per conversion
    rather than per consumer (measured: DenseNet-like 10.7k instead of 36.8k columns).

Every row coefficient is +1 or -1, so the rows are exact in any backend (CP-SAT needs
integers); only the objective is float.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> m = linear_model(p); m.matrix.shape, float(m.cost @ m.values([0, 0]))
((6, 8), 1.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from .factors import edge_factor
from .problem import Conversion, Problem


@dataclass
class PairBlock:
    """Columns ``ids[r, c]`` of a pairwise block: ``r = rows[choice of i]``, ``c = cols[...]``."""

    ids: np.ndarray
    i: int
    rows: np.ndarray
    j: int
    cols: np.ndarray


@dataclass
class SharedBlock:
    """Columns ``ids[a, b]`` of a shared conversion (see the module docstring)."""

    ids: np.ndarray
    src: int
    a_of: np.ndarray  # src choice -> a
    consumers: list[tuple[int, np.ndarray]]  # (node, choice -> b)


@dataclass
class LinearModel:
    """``min cost @ v`` s.t. ``row_lo <= matrix @ v <= row_hi``, ``v`` binary, ``v <= upper``."""

    cost: np.ndarray
    upper: np.ndarray
    matrix: sparse.csr_array
    row_lo: np.ndarray
    row_hi: np.ndarray
    x: list[np.ndarray]  # column ids of each node's choices
    blocks: list[PairBlock | SharedBlock] = field(default_factory=list)  # for values()

    def values(self, choice) -> np.ndarray:
        """The column values of an integral ``choice`` (a complete hint / MIP start)."""
        v = np.zeros(len(self.cost))
        for i, ids in enumerate(self.x):
            v[ids[choice[i]]] = 1.0
        for b in self.blocks:
            if isinstance(b, PairBlock):
                v[b.ids[b.rows[choice[b.i]], b.cols[choice[b.j]]]] = 1.0
            else:
                a = b.a_of[choice[b.src]]
                v[b.ids[a, sorted({int(cls[choice[d]]) for d, cls in b.consumers})]] = 1.0
        return v

    def choice(self, values: np.ndarray) -> list[int]:
        """Each node's choice in a (near-)integral solution."""
        return [int(np.argmax(values[ids])) for ids in self.x]


class _Builder:
    """Columns with cost / upper bound, and rows as (row, col, value) triplets."""

    def __init__(self):
        self.cost, self.upper = [], []
        self.rows, self.cols, self.vals, self.lo, self.hi = [], [], [], [], []
        self.n = self.m = 0

    def columns(self, cost) -> np.ndarray:
        cost = np.asarray(cost, dtype=float)
        finite = np.isfinite(cost).reshape(-1)
        self.cost.append(np.where(finite, cost.reshape(-1), 0.0))
        self.upper.append(finite.astype(float))
        ids = np.arange(self.n, self.n + cost.size).reshape(cost.shape)
        self.n += cost.size
        return ids

    def marginals(self, ids: np.ndarray, axis: int, group_of: np.ndarray, x: np.ndarray):
        """Rows ``sum of ids along the other axis [g] = sum of x[group_of == g]``."""
        g = np.indices(ids.shape)[axis].reshape(-1)
        count = ids.shape[axis]
        self.rows += [self.m + g, self.m + np.asarray(group_of)]
        self.cols += [ids.reshape(-1), np.asarray(x)]
        self.vals += [np.ones(len(g)), -np.ones(len(x))]
        self.lo.append(np.zeros(count))
        self.hi.append(np.zeros(count))
        self.m += count

    def row(self, plus, minus, lo: float, hi: float):
        """One row ``lo <= sum(plus) - sum(minus) <= hi``."""
        plus, minus = np.asarray(plus).reshape(-1), np.asarray(minus).reshape(-1)
        self.rows.append(np.full(len(plus) + len(minus), self.m))
        self.cols.append(np.concatenate((plus, minus)))  # (np.r_ is 5x slower here)
        self.vals.append(np.concatenate((np.ones(len(plus)), -np.ones(len(minus)))))
        self.lo.append([lo])
        self.hi.append([hi])
        self.m += 1

    def model(self, x, blocks) -> LinearModel:
        a = sparse.csr_array(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.m, self.n),
        )
        return LinearModel(np.concatenate(self.cost), np.concatenate(self.upper), a,
                           np.concatenate(self.lo).astype(float),
                           np.concatenate(self.hi).astype(float), x, blocks)


def _conversion(b: _Builder, x: list[np.ndarray], conv: Conversion):
    a_vals, a_of = np.unique(conv.src_class, return_inverse=True)
    b_vals = np.unique(np.concatenate(conv.dst_classes))
    tab = conv.table[np.ix_(a_vals, b_vals)]
    consumers = list({(d, c.tobytes()): (d, np.searchsorted(b_vals, c))
                      for d, c in zip(conv.dsts, conv.dst_classes)}.values())
    if len(conv.dsts) == 1:  # the local polytope of the (src class, needed class) pair
        (d, b_of), = consumers
        v = b.columns(tab)
        b.marginals(v, 0, a_of, x[conv.src])
        b.marginals(v, 1, b_of, x[d])
        return PairBlock(v, conv.src, a_of, d, b_of)
    w = b.columns(tab)
    for aa in range(len(a_vals)):
        sel = x[conv.src][a_of == aa]
        for bb in range(len(b_vals)):
            if np.isfinite(tab[aa, bb]):
                b.row(sel, [w[aa, bb]], 0.0, np.inf)
    for d, b_of in consumers:
        for bb in np.unique(b_of):
            b.row(w[:, bb], x[d][b_of == bb], 0.0, np.inf)
    return SharedBlock(w, conv.src, a_of, consumers)


def linear_model(q: Problem) -> LinearModel:
    """The model of ``q`` (usually presolved; see :mod:`~solvers.presolve`)."""
    b = _Builder()
    unary = [c.copy() for c in q.costs]
    pending = []
    for (i, j), m in q.edges.items():
        f = edge_factor(i, j, m)
        if f.table.shape[0] == 1:  # depends on j only
            unary[j] += f.table[0, f.idx[1]]
        elif f.table.shape[1] == 1:
            unary[i] += f.table[f.idx[0], 0]
        else:
            pending.append(f)
    x = [b.columns(u) for u in unary]
    for ids in x:
        b.row(ids, [], 1.0, 1.0)
    blocks = []
    for f in pending:
        i, j = f.scope
        y = b.columns(f.table)
        b.marginals(y, 0, f.idx[0], x[i])
        b.marginals(y, 1, f.idx[1], x[j])
        blocks.append(PairBlock(y, i, f.idx[0], j, f.idx[1]))
    blocks += [_conversion(b, x, conv) for conv in q.conversions if conv.dsts]
    return b.model(x, blocks)
