"""Compressed cost factors shared by the exact solvers.

A :class:`Factor` is a cost function over a few nodes stored on *groups* of choices:
``value(x) = table[idx[0][x[scope[0]]], idx[1][x[scope[1]]], ...]``.  Choices that a
factor cannot tell apart (identical edge rows, identical conversion classes) share one
axis entry, which keeps tables small: an edge between two convs whose cost depends
only on the layout block is 7 x 7 however many schedules each conv has.

>>> f = edge_factor(0, 1, np.array([[0., 5., 5.], [0., 5., 5.]]))
>>> f.table.shape, f.idx[1].tolist()
((1, 2), [0, 1, 1])
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .problem import Conversion


@dataclass
class Factor:
    scope: tuple[int, ...]
    idx: list[np.ndarray]  # per scope var: choice -> axis entry
    table: np.ndarray

    def full(self) -> np.ndarray:
        """The table over full choice domains (axes in scope order)."""
        return self.table[np.ix_(*self.idx)]


def group(*keys: np.ndarray, radices=None) -> tuple[np.ndarray, np.ndarray]:
    """Group positions by the tuple of their keys (small non-negative ints).

    Returns ``(inverse, representative)``: group number of each position (groups in
    lexicographic key order) and one position of each group.

    >>> inv, rep = group(np.array([0, 1, 0, 1]), np.array([2, 2, 2, 3]))
    >>> inv.tolist(), sorted(inv[rep].tolist())
    ([0, 1, 0, 2], [0, 1, 2])
    """
    key, span = np.zeros(len(keys[0]), dtype=np.int64), 1
    for n, k in enumerate(keys):
        r = int(radices[n]) if radices is not None else int(k.max()) + 1
        if span * r > _DENSE:  # renumber before the mixed-radix key grows too wide
            key, span = _renumber(key, span)
        key = key * r + k
        span *= r
    key, _ = _renumber(key, span)
    rep = np.empty(int(key.max()) + 1 if len(key) else 0, dtype=np.intp)
    rep[key] = np.arange(len(key))  # any member represents its group
    return key, rep


_DENSE = 1 << 20


def _renumber(key: np.ndarray, span: int) -> tuple[np.ndarray, int]:
    """Map keys to 0..G-1 preserving order: a dense table when the span is small."""
    if span <= 16 * len(key) + 4096:
        present = np.zeros(span, dtype=bool)
        present[key] = True
        ids = np.cumsum(present) - 1
        return ids[key], int(ids[-1]) + 1
    _, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    return inv, int(inv.max()) + 1


def edge_factor(i: int, j: int, matrix: np.ndarray) -> Factor:
    """Factor for an edge matrix, grouping identical rows and identical columns."""
    rows, ri = np.unique(matrix, axis=0, return_inverse=True)
    cols, ci = np.unique(rows, axis=1, return_inverse=True)
    return Factor((i, j), [ri.reshape(-1), ci.reshape(-1)], cols)


def conversion_roles(conv: Conversion):
    """Scope (src first, each node once) and, per scope node, its class arrays by role.

    Returns ``(scope, idx, role_classes)``: ``idx[n]`` groups node n's choices by the
    tuple of classes it has in all its roles; ``role_classes`` lists
    ``(axis, is_src, classes_per_group)``.
    """
    roles = [(conv.src, True, conv.src_class)]
    roles += [(d, False, c) for d, c in zip(conv.dsts, conv.dst_classes)]
    scope = list(dict.fromkeys(r[0] for r in roles))
    k = conv.table.shape[0]
    idx, role_classes = [], []
    for axis, node in enumerate(scope):
        mine = [r for r in roles if r[0] == node]
        inv, rep = group(*(r[2] for r in mine), radices=[k] * len(mine))
        idx.append(inv)
        role_classes += [(axis, is_src, c[rep]) for _, is_src, c in mine]
    return tuple(scope), idx, role_classes


def conversion_factor(conv: Conversion, roles=None) -> Factor:
    """Exact factor over (src, distinct dsts) for a shared conversion.

    With ``needed[..., b]`` the OR over consumers of ``class == b``, the table is
    ``sum_b needed[..., b] * table[a][b]`` (a = src class; the table diagonal is 0).
    """
    scope, idx, role_classes = roles or conversion_roles(conv)
    shape = tuple(int(i.max()) + 1 for i in idx)
    (src_axis, _, a), = [r for r in role_classes if r[1]]
    consumers = [(ax, c) for ax, is_src, c in role_classes if not is_src]
    if len(consumers) == 1 and consumers[0][0] != src_axis:
        return Factor(scope, idx, conv.table[np.ix_(a, consumers[0][1])])
    ndim, k = len(shape), conv.table.shape[0]
    needed = np.zeros(shape + (k,), dtype=bool)
    for ax, c in consumers:
        s = [1] * (ndim + 1)
        s[ax], s[-1] = len(c), k
        needed = needed | (c[:, None] == np.arange(k)).reshape(s)
    s = [1] * (ndim + 1)
    s[src_axis], s[-1] = len(a), k
    price = conv.table[a].reshape(s)
    return Factor(scope, idx, np.where(needed, price, 0.0).sum(axis=-1))
