"""Float32 buffers in transparent huge pages: activations and scratch that kernels stream through.

A kernel that streams 36 planes of a Winograd scratch at once ran 0.40-0.43 ms with the
scratch in 4 KiB pages and 0.36-0.38 in 2 MiB pages (DenseNet-121's 56x56 layer, znver4,
4 processes each; fewer TLB misses, and physical placement that does not change from
process to process, are the likely reasons, not measured apart; benchmarks/README.md).
numpy asks for huge pages only from 4 MB up, and only the 2 MiB-aligned part of a buffer
can get them, so :func:`zeros` aligns the buffer to 2 MiB itself and asks the kernel
(``madvise(MADV_HUGEPAGE)``; Linux with THP in ``madvise`` or ``always`` mode). Elsewhere,
or below ``MIN_BYTES``, it is in 4 KiB pages, starting on a cache line (:data:`SMALL_ALIGN`).

>>> a = zeros(3 << 20)
>>> a.dtype, a.shape, float(a.max()), a.ctypes.data % HUGE_PAGE == 0 or not sys.platform.startswith("linux")
(dtype('float32'), (3145728,), 0.0, True)
>>> zeros(10).shape, zeros(10).ctypes.data % 64
((10,), 0)
"""
from __future__ import annotations

import ctypes
import sys

import numpy as np

HUGE_PAGE = 2 << 20  # bytes (x86-64)
# Smaller buffers stay in 4 KiB pages; one of 1-2 MiB takes a whole 2 MiB page (at most 2x its
# size, for the few largest activations of a network: the A/B in benchmarks/README.md used this).
MIN_BYTES = 1 << 20
# Bytes: every buffer starts on a cache line, as the kernels' vector loads and stores assume
# (NCHW16c rows are whole lines). numpy's own start (16-48 bytes into a line, as malloc
# gives it) split every 64-byte vector load and store across two lines.
SMALL_ALIGN = 64
_MADV_HUGEPAGE = 14
_libc = None


def zeros(size: int) -> np.ndarray:
    """A zero-filled float32 array of ``size`` elements, in huge pages where it can be."""
    out = empty(size)
    out[:] = 0  # first touch after the advice, so the pages faulted in are huge ones
    return out


def empty(shape: int | tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array of ``shape`` (a size, or a tuple as numpy takes it), in
    huge pages where it can be: memory is committed only as it is first written (a
    reservation that may stay mostly unused costs address space, not memory).

    >>> empty((2, 3)).shape, empty((2, 3)).ctypes.data % SMALL_ALIGN
    ((2, 3), 0)
    """
    size = int(np.prod(shape))
    if 4 * size < MIN_BYTES or not sys.platform.startswith("linux"):
        return aligned_empty(size, SMALL_ALIGN).reshape(shape)
    out = aligned_empty(size, HUGE_PAGE)
    _advise(out.ctypes.data, -(-4 * size // HUGE_PAGE) * HUGE_PAGE)
    return out.reshape(shape)


def aligned_empty(size: int, align: int) -> np.ndarray:
    """An uninitialised float32 array of ``size`` elements starting on an ``align``-byte
    boundary (a multiple of 4), the whole ``align``-rounded span its own.

    >>> aligned_empty(5, 64).ctypes.data % 64, aligned_empty(5, 64).size
    (0, 5)
    """
    span = -(-4 * size // align) * align
    raw = np.empty((span + align) // 4, np.float32)  # room to align the start
    start = (-raw.ctypes.data % align) // 4
    return raw[start:start + size]


def _advise(address: int, nbytes: int) -> None:
    """Ask for huge pages; where the kernel refuses (THP off) or has no madvise, the buffer
    simply stays in 4 KiB pages: nothing to report."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), ctypes.c_int(_MADV_HUGEPAGE))
    except (OSError, AttributeError):
        pass
