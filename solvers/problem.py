"""A discrete selection problem: one choice per node, unary costs, pairwise edge costs
and shared conversions (one conversion paid once per distinct class its consumers need).

All costs are non-negative floats; ``math.inf`` forbids a choice or combination.

>>> p = Problem()
>>> a = p.add_node([1.0, 2.0])
>>> b = p.add_node([0.0, 0.0, 5.0])
>>> p.add_edge(a, b, [[0, 3, 3], [3, 0, 0]])
>>> c = p.add_node([0.0, 0.0])
>>> # a's choice 0 produces class 0, choice 1 class 1; b needs class 0 for choice 0, else 1,
>>> # c needs class 1 for either choice: converting 0 -> 1 costs 4, paid once for b and c.
>>> p.add_conversion(a, [b, c], [0, 1], [[0, 1, 1], [1, 1]], [[0, 4], [4, 0]])
>>> p.evaluate([0, 1, 0]), p.evaluate([1, 1, 0])
(8.0, 2.0)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Conversion:
    """A shared conversion (see :meth:`Problem.add_conversion`); arrays are int / float64."""

    src: int
    dsts: tuple[int, ...]
    src_class: np.ndarray
    dst_classes: tuple[np.ndarray, ...]
    table: np.ndarray  # diagonal zeroed: a class never converts to itself

    def cost(self, choice: Sequence[int]) -> float:
        """Cost of this conversion under ``choice`` (one entry per problem node)."""
        a = self.src_class[choice[self.src]]
        needed = {int(c[choice[d]]) for d, c in zip(self.dsts, self.dst_classes)}
        return float(sum(self.table[a, b] for b in needed))


def _costs(values, what: str) -> np.ndarray:
    arr = np.array(values, dtype=np.float64)
    if np.isnan(arr).any():
        raise ValueError(f"{what} contains NaN")
    if (arr < 0).any():
        raise ValueError(f"{what} contains a negative cost; costs must be >= 0 (inf = forbidden)")
    return arr


class Problem:
    """Nodes with per-choice costs, pairwise edges and shared conversions.

    Nodes are numbered 0, 1, 2, ... in the order added.  Adding an edge for a pair that
    already has one adds the costs; an edge from a node to itself adds the diagonal to
    the node's costs.
    """

    def __init__(self) -> None:
        self.costs: list[np.ndarray] = []
        self.edges: dict[tuple[int, int], np.ndarray] = {}  # key (i, j) with i < j
        self.conversions: list[Conversion] = []

    @property
    def num_nodes(self) -> int:
        return len(self.costs)

    @property
    def sizes(self) -> list[int]:
        """Number of choices of each node."""
        return [len(c) for c in self.costs]

    def _check_node(self, i) -> int:
        if not isinstance(i, (int, np.integer)) or not 0 <= i < len(self.costs):
            raise ValueError(f"unknown node {i!r} (problem has {len(self.costs)} nodes)")
        return int(i)

    def add_node(self, costs: Sequence[float]) -> int:
        """Add a node with one cost per choice; returns its index."""
        arr = _costs(costs, f"costs of node {len(self.costs)}")
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"costs of node {len(self.costs)} must be a non-empty 1-D sequence")
        self.costs.append(arr)
        return len(self.costs) - 1

    def add_edge(self, i: int, j: int, matrix) -> None:
        """Add ``matrix[choice_i][choice_j]`` to the objective."""
        i, j = self._check_node(i), self._check_node(j)
        m = _costs(matrix, f"edge ({i}, {j}) matrix")
        if m.shape != (len(self.costs[i]), len(self.costs[j])):
            raise ValueError(
                f"edge ({i}, {j}) matrix has shape {m.shape}, expected "
                f"({len(self.costs[i])}, {len(self.costs[j])})"
            )
        if i == j:
            self.costs[i] = self.costs[i] + np.diag(m)
            return
        if i > j:
            i, j, m = j, i, m.T
        old = self.edges.get((i, j))
        self.edges[(i, j)] = m if old is None else old + m

    def add_conversion(self, src: int, dsts: Sequence[int], src_class, dst_classes, table) -> None:
        """Add a shared conversion.

        Choice x of ``src`` produces class ``src_class[x]``; consumer ``dsts[k]`` with
        choice y needs class ``dst_classes[k][y]``.  ``table[a][b]`` is paid once per
        distinct needed class b != a, however many consumers need b.
        """
        src = self._check_node(src)
        dsts = tuple(self._check_node(d) for d in dsts)
        tab = np.array(table, dtype=np.float64)
        if tab.ndim != 2 or tab.shape[0] != tab.shape[1] or tab.size == 0:
            raise ValueError(f"conversion from node {src}: table must be square, got {tab.shape}")
        np.fill_diagonal(tab, 0.0)  # ignored by definition
        _costs(tab, f"conversion from node {src}: table")
        k = tab.shape[0]

        def classes(values, node, what):
            arr = np.asarray(values)
            if arr.shape != (len(self.costs[node]),):
                raise ValueError(
                    f"conversion from node {src}: {what} needs one class per choice of node {node}"
                )
            integral = np.issubdtype(arr.dtype, np.integer)
            if arr.size and (not integral or arr.min() < 0 or arr.max() >= k):
                raise ValueError(f"conversion from node {src}: {what} must be integers in [0, {k})")
            return arr.astype(np.intp)

        if len(dst_classes) != len(dsts):
            raise ValueError(
                f"conversion from node {src}: {len(dsts)} dsts but {len(dst_classes)} dst_classes"
            )
        self.conversions.append(
            Conversion(
                src,
                dsts,
                classes(src_class, src, "src_class"),
                tuple(classes(c, d, f"dst_classes[{n}]")
                      for n, (d, c) in enumerate(zip(dsts, dst_classes))),
                tab,
            )
        )

    def check_choice(self, choice: Sequence[int]) -> list[int]:
        if len(choice) != len(self.costs):
            raise ValueError(
                f"choice has {len(choice)} entries, problem has {len(self.costs)} nodes"
            )
        out = [int(x) for x in choice]
        for i, x in enumerate(out):
            if not 0 <= x < len(self.costs[i]):
                raise ValueError(
                    f"choice {x} out of range for node {i} ({len(self.costs[i])} choices)"
                )
        return out

    def evaluate(self, choice: Sequence[int]) -> float:
        """Total cost of ``choice`` (one choice index per node); may be ``inf``."""
        x = self.check_choice(choice)
        total = math.fsum(float(c[x[i]]) for i, c in enumerate(self.costs))
        total += math.fsum(float(m[x[i], x[j]]) for (i, j), m in self.edges.items())
        total += math.fsum(c.cost(x) for c in self.conversions)
        return float(total)

    def num_assignments(self) -> float:
        """Number of joint assignments (a float: it can be huge)."""
        return math.prod(float(len(c)) for c in self.costs)
