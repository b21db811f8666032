"""numpy packing between plain NCHW/OIHW and the blocked layouts the kernels use.

Data ``NCHW[b]c`` has shape ``[N, C/b, H, W, b]``; plain NCHW is block ``None``/0.
Conv weights ``OIHW[i]i[o]o`` have shape ``[O/o, I/i, KH, KW, i, o]``.

>>> import numpy as np
>>> x = np.arange(2 * 6 * 1 * 2, dtype=np.float32).reshape(2, 6, 1, 2)
>>> to_blocked(x, 3).shape, bool((from_blocked(to_blocked(x, 3)) == x).all())
((2, 2, 1, 2, 3), True)
>>> pack_weight(np.zeros((8, 6, 3, 3), np.float32), ic_bn=2, oc_bn=4).shape
(2, 3, 3, 3, 2, 4)
"""
from __future__ import annotations

import numpy as np


def _check_block(channels: int, block: int, what: str) -> None:
    if block < 1 or channels % block:
        raise ValueError(f"{what} block {block} does not divide {channels} channels")


def to_blocked(x: np.ndarray, block: int | None) -> np.ndarray:
    """NCHW -> NCHW[block]c (a contiguous copy); ``block`` None/0 returns plain NCHW."""
    if not block:
        return np.ascontiguousarray(x)
    n, c, h, w = x.shape
    _check_block(c, block, "data")
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(x: np.ndarray) -> np.ndarray:
    """NCHW[b]c (5-d) -> NCHW; a 4-d array is returned as is (already plain)."""
    if x.ndim == 4:
        return np.ascontiguousarray(x)
    n, cb, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w))


def pack_weight(w: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """OIHW -> ``[O/oc_bn, I/ic_bn, KH, KW, ic_bn, oc_bn]`` (I = input channels per group)."""
    o, i, kh, kw = w.shape
    _check_block(o, oc_bn, "output-channel")
    _check_block(i, ic_bn, "input-channel")
    packed = w.reshape(o // oc_bn, oc_bn, i // ic_bn, ic_bn, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(packed, dtype=np.float32)


def unpack_weight(w: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_weight`."""
    ob, ib, kh, kw, ic_bn, oc_bn = w.shape
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(ob * oc_bn, ib * ic_bn, kh, kw))


def pack_depthwise_weight(w: np.ndarray, bn: int) -> np.ndarray:
    """Depthwise OIHW ``[C, 1, KH, KW]`` -> ``[C/bn, 1, KH, KW, 1, bn]``."""
    return pack_weight(w, 1, bn)
