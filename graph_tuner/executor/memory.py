"""Activation memory: which buffer each tensor lives in, views, and reuse.

A tensor's buffer is keyed by its name (in the layout it was written in) or, for a copy a
layout transform makes, by ``(name, block)``. Three rules decide the memory:

* **Concatenation in place** (:func:`plan_views`): at batch 1, a channel slice of an NCHW
  or NCHW[b]c tensor is one contiguous range, so each input of a concat can be written
  straight into its slice of the concat's buffer and the concat runs nothing. Chains of
  concats (DenseNet's blocks, each concat taking the previous one plus one new layer)
  share one buffer: the last concat's.
* **Reshapes as views**: a flatten/reshape of a plain tensor is the same bytes.
* **Reuse** (:func:`allocate`): a buffer is free once every tensor living in it has been
  read for the last time (tensors pinned by the caller never are), best fit.

Weights live apart, packed once into huge-page chunks in the order the program binds them
(:class:`WeightArena`).

>>> import numpy as np
>>> shapes = {"a": (1, 2, 1, 1), "b": (1, 2, 1, 1), "c": (1, 4, 1, 1)}
>>> place = {"a": ("c", 0), "b": ("c", 2), "c": ("c", 0)}
>>> arrays, owned = allocate([(["a"], []), (["b"], []), (["c"], ["a", "b"])], shapes, {"c"}, place)
>>> arrays["b"][...] = 7; arrays["c"].ravel().tolist(), [o.size for o in owned]
([0.0, 0.0, 7.0, 7.0], [4])
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

import numpy as np

from kernels import hugepages

Key = Hashable  # a tensor name, or (name, block) for a transformed copy
Place = dict  # key -> (root key, offset in elements)


class _Roots:
    """Keys grouped into shared buffers: each member at an element offset in its root;
    ``slots`` are the members written by a step into their range (the concat inputs)."""

    def __init__(self, sizes: dict):
        self.sizes = sizes
        self.place: dict = {}  # key -> (root, offset)
        self.members: dict = {}  # root -> [keys]
        self.slots: dict = {}  # root -> {leaf key: offset}

    def expand(self, k: Key, offset: int) -> list[tuple[Key, int]] | None:
        """The leaf slots that make up ``k`` placed at ``offset``: its own slots if ``k`` is a
        concat already laid out in place, else ``k`` itself; None if ``k`` is a view of
        something else (a reshape's output, a slot of another concat read whole)."""
        if k not in self.place:
            return [(k, offset)]
        root, at = self.place[k]
        slots = self.slots.get(root, {})
        if k in slots:
            return [(k, offset)]
        inside = [(leaf, offset + o - at) for leaf, o in slots.items()
                  if at <= o and o + self.sizes[leaf] <= at + self.sizes[k]]
        # k must be exactly covered by slots (a concat), not a reshape alias of one.
        return inside if sum(self.sizes[leaf] for leaf, _ in inside) == self.sizes[k] else None

    def concat(self, out: Key, inputs: list[Key]) -> bool:
        """Lay ``out`` = concat(inputs) out in place if every input can be its slot."""
        wanted: list[tuple[Key, int]] = []
        offset = 0
        for k in inputs:
            part = self.expand(k, offset)
            if part is None:
                return False
            wanted += part
            offset += self.sizes[k]
        leaves = [leaf for leaf, _ in wanted]
        if len(set(leaves)) != len(leaves) or out in self.place:
            return False
        at = dict(wanted)
        shifts: dict = {}  # root already holding some leaves -> where it goes in out
        for leaf, o in wanted:
            if leaf in self.place:
                root, p = self.place[leaf]
                shifts.setdefault(root, o - p)
                if shifts[root] != o - p:
                    return False
        for root, d in shifts.items():
            # The whole earlier buffer must land inside out, every slot where out wants it.
            if d < 0 or d + self.sizes[root] > self.sizes[out]:
                return False
            if any(at.get(leaf) != o + d for leaf, o in self.slots[root].items()):
                return False
        self._add(out, out, 0)
        self.slots[out] = {}
        for root, d in shifts.items():
            for m in self.members.pop(root):
                self._add(m, out, self.place[m][1] + d)
            self.slots[out].update({leaf: o + d for leaf, o in self.slots.pop(root).items()})
        for leaf, o in wanted:
            if leaf not in self.place:
                self._add(leaf, out, o)
                self.slots[out][leaf] = o
        return True

    def alias(self, out: Key, src: Key) -> None:
        """``out`` is ``src``'s bytes (a reshape)."""
        if src not in self.place:
            self._add(src, src, 0)
        root, at = self.place[src]
        self._add(out, root, at)

    def _add(self, k: Key, root: Key, offset: int) -> None:
        self.place[k] = (root, offset)
        self.members.setdefault(root, [])
        if k not in self.members[root]:
            self.members[root].append(k)


@dataclass
class Views:
    place: Place  # key -> (root key, element offset), for every key living in a shared buffer
    done: set  # outputs of the ops that became views (they run nothing)


def plan_views(ops: Iterable[tuple[str, Key, list[Key]]], shapes: dict, fixed: Iterable[Key] = ()) -> Views:
    """Placements for views: ``ops`` are ``(kind, out key, [in keys])`` in run order with kind
    ``"concat"`` (channels, batch 1, every input in the output's layout) or ``"reshape"``.
    Keys in ``fixed`` (the model's inputs: the caller's buffers) are never moved into another
    buffer. A concat whose inputs cannot all be its slices is not a view: it copies.

    >>> s = {"x": (1, 2, 4, 4), "y": (1, 2, 4, 4), "c": (1, 4, 4, 4), "z": (1, 2, 4, 4), "d": (1, 6, 4, 4)}
    >>> v = plan_views([("concat", "c", ["x", "y"]), ("concat", "d", ["c", "z"])], s)
    >>> sorted(v.place.items()), sorted(v.done)
    ([('c', ('d', 0)), ('d', ('d', 0)), ('x', ('d', 0)), ('y', ('d', 32)), ('z', ('d', 64))], ['c', 'd'])
    """
    fixed = set(fixed)
    roots = _Roots({k: math.prod(v) for k, v in shapes.items()})
    done = set()
    for kind, out, inputs in ops:
        if kind == "reshape":
            roots.alias(out, inputs[0])
            done.add(out)
        elif not fixed.intersection(inputs) and roots.concat(out, inputs):
            done.add(out)
    return Views(roots.place, done)


def allocate(actions: list[tuple], shapes: dict, pinned: set,
             place: Place | None = None) -> tuple[dict, list[np.ndarray]]:
    """Arrays for ``actions`` (``([written keys], [read keys])`` in run order), reusing memory,
    and the buffers they are views of (the memory allocated).

    A key in ``place`` is a view at its offset into its root's buffer; a root's buffer is free
    after the last read of any key living in it, unless one of them is pinned (inputs,
    outputs, kept tensors). A step's outputs never share memory with its own inputs
    (allocated before they are freed).
    """
    place = place or {}
    root_of: Callable[[Key], Key] = lambda k: place[k][0] if k in place else k  # noqa: E731
    last: dict = {}  # root -> the last action touching a key living in it
    for i, (written, reads) in enumerate(actions):
        for k in [*written, *reads]:
            last[root_of(k)] = i
    held = {root_of(k) for k in pinned}
    free: list[np.ndarray] = []  # whole owned buffers
    owner: dict = {}
    arrays: dict = {}
    for i, (written, reads) in enumerate(actions):
        for w in written:
            r = root_of(w)
            if r not in owner:
                size = math.prod(shapes[r])
                fits = [j for j, f in enumerate(free) if f.size >= size]
                # Best fit: the smallest free buffer that holds it, else a new one.
                owner[r] = free.pop(min(fits, key=lambda j: free[j].size)) if fits else hugepages.zeros(size)
            at = place[w][1] if w in place else 0
            arrays[w] = owner[r][at:at + math.prod(shapes[w])].reshape(shapes[w])
        for r in dict.fromkeys(root_of(k) for k in [*reads, *written]):
            if r not in held and last.get(r, i) == i:
                free.append(owner[r])
    return arrays, list({id(b): b for b in owner.values()}.values())


class WeightArena:
    """The program's packed weights, copied in the order they are kept (run order) into
    one huge-page reservation (:func:`kernels.hugepages.empty`: memory is committed as it
    is written), each weight 64-byte aligned from the reservation's start (2 MiB-aligned on
    Linux; elsewhere a cache line); a weight that does not fit starts another.

    At batch 1 every layer's weights stream from memory on every run (ResNeXt-50 has 95 MB
    of them). As numpy allocates them, most sit in 4 KiB pages (numpy asks for huge pages
    from 4 MB up, and only the 2 MiB-aligned part of an array can get them), so each 4 KiB
    of weights read costs a TLB miss. Without the arena, seven models took 1.027-1.056x the
    time (25 rounds each on the session-24 Xeon, benchmarks/README.md).

    >>> arena = WeightArena()
    >>> a = arena.keep(np.arange(6, dtype=np.float32).reshape(2, 3)); b = arena.keep(np.ones(5, np.float32))
    >>> a.tolist(), b.ctypes.data - a.ctypes.data, arena.nbytes
    ([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], 64, 84)
    """

    # Address space per reservation; only what is written becomes memory (under strict
    # overcommit, vm.overcommit_memory=2, the whole reservation counts against the limit).
    RESERVE_BYTES = 64 << 20

    def __init__(self):
        self.chunks: list[np.ndarray] = []  # the reservations
        self._used = 0  # floats used in the last one
        self._done = 0  # floats used in the ones before

    def keep(self, weight: np.ndarray) -> np.ndarray:
        """A copy of ``weight`` (float32) in the arena, of its shape."""
        weight = np.asarray(weight, np.float32)
        line = hugepages.SMALL_ALIGN // 4  # floats in a cache line
        start = -(-self._used // line) * line
        if not self.chunks or start + weight.size > self.chunks[-1].size:
            self._done += self._used
            self.chunks.append(hugepages.empty(max(self.RESERVE_BYTES // 4, weight.size)))
            start = 0
        out = self.chunks[-1][start:start + weight.size].reshape(weight.shape)
        out[...] = weight
        self._used = start + weight.size
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the reservations written (the weights and their alignment gaps)."""
        return 4 * (self._done + self._used)
