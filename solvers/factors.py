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

import math
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
    """Group positions by the tuple of their keys: returns (inverse, first-index).

    >>> inv, first = group(np.array([0, 1, 0, 1]), np.array([2, 2, 2, 3]))
    >>> inv.tolist(), first.tolist()
    ([0, 1, 0, 2], [0, 1, 3])
    """
    key = np.zeros(len(keys[0]), dtype=np.int64)
    span = 1
    for n, k in enumerate(keys):
        r = int(radices[n]) if radices is not None else int(k.max()) + 1
        if span * r > 2**50:  # renumber before the mixed-radix key could overflow
            _, key = np.unique(key, return_inverse=True)
            span = int(key.max()) + 1
        key = key * r + k
        span *= r
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


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
    roles = [(conv.src, True, conv.src_class)] + [(d, False, c) for d, c in zip(conv.dsts, conv.dst_classes)]
    scope = list(dict.fromkeys(r[0] for r in roles))
    k = conv.table.shape[0]
    idx, role_classes = [], []
    for axis, node in enumerate(scope):
        mine = [r for r in roles if r[0] == node]
        inv, first = group(*(r[2] for r in mine), radices=[k] * len(mine))
        idx.append(inv)
        role_classes += [(axis, is_src, c[first]) for _, is_src, c in mine]
    return tuple(scope), idx, role_classes


def conversion_factor(conv: Conversion) -> Factor:
    """Exact factor over (src, distinct dsts) for a shared conversion.

    For each class b some consumer can need, ``needed_b`` is the OR over consumers of
    ``class == b``; the table adds ``table[a][b]`` where needed (a = src class, b != a).
    """
    scope, idx, role_classes = conversion_roles(conv)
    shape = tuple(int(i.max()) + 1 for i in idx)
    ndim = len(shape)

    def along(axis, values):
        s = [1] * ndim
        s[axis] = len(values)
        return values.reshape(s)

    (src_axis, _, a), = [r for r in role_classes if r[1]]
    total = np.zeros(shape)
    consumers = [(ax, c) for ax, is_src, c in role_classes if not is_src]
    for b in np.unique(np.concatenate([c for _, c in consumers])) if consumers else []:
        needed = np.zeros(shape, dtype=bool)
        for ax, c in consumers:
            needed = needed | along(ax, c == b)
        price = along(src_axis, conv.table[a, b])  # table diagonal is 0, so a == b is free
        total = total + np.where(needed, price, 0.0)
    return Factor(scope, idx, total)


def conversion_size(conv: Conversion) -> int:
    """Number of entries of :func:`conversion_factor` without building it."""
    _, idx, _ = conversion_roles(conv)
    return math.prod(int(i.max()) + 1 for i in idx)
