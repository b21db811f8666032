"""Honest kernel timing: the one routine the tuner, the transform benchmark and the executor use.

Rules (each from a real mistake): buffers are random-filled, never uninitialised
(AutoTVM timed a 0.49 ms kernel at 0.10 ms on ``tvm.nd.empty`` buffers); warm-up
runs first; each repeat lasts at least ``min_repeat_ms`` (the number of calls per
repeat is chosen from the warm-up) so timer resolution and call overhead vanish;
the median over repeats is reported, with p90 and the raw per-call times.
A kernel timed back to back keeps everything in cache; :func:`cold_arrays` makes chosen
arguments (a layer's weights) come from memory on every call, as inside a network.

>>> t = measure(lambda: sum(range(100)), min_repeat_ms=1, repeat=3)
>>> 0 < t.median_s <= t.p90_s and len(t.results) == 3
True
"""
from __future__ import annotations

import functools
import itertools
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from kernels import hugepages


__all__ = ["Timing", "cold_arrays", "measure", "per_call", "random_array"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and 90th percentile over repeats, and every repeat's value."""

    median_s: float
    p90_s: float
    results: tuple[float, ...]
    number: int  # calls per repeat

    @property
    def median_ms(self) -> float:
        return self.median_s * 1e3


def random_array(shape, seed: int = 0) -> np.ndarray:
    """A new C-contiguous float32 array of uniform random values in [-1, 1), none zero (never
    uninitialised memory), the same for the same shape and seed: a copy of the process's
    random source from a place the seed picks, the source repeated past its end (so arrays of
    nearby seeds are shifted copies of one sequence: random enough for timing, not for statistics). Drawing
    each array afresh (float64, then cast) took 11% of tuning Inception-v3 (session 23): the
    tuner asks for a kernel's every buffer at every measurement, and a copy is 4-8x cheaper.

    Allocated as the executor allocates (:func:`kernels.hugepages.empty`): on a cache line,
    in huge pages from 1 MiB. With numpy's own start (16-48 bytes into a line) the kernels'
    64-byte vector loads and stores split across two lines, which the network's weights
    (64-byte aligned in its arena) never do: hot, on one thread, with input, weights and
    output so placed, the host probe's 3x3 conv took 1.27-1.32x the time and 1x1 convs of
    ResNeXt-50's and ResNet-50's shapes 1.06-1.10x (session 30, benchmarks/README.md).

    >>> a = random_array((3, 5), seed=1)
    >>> a.shape, a.dtype, bool((a == random_array((3, 5), seed=1)).all()), bool((a == random_array((3, 5))).all())
    ((3, 5), dtype('float32'), True, False)
    >>> a.ctypes.data % 64
    0
    """
    out = hugepages.empty(shape)  # where and how the executor allocates
    _fill(out.reshape(-1), seed)
    return out


def _fill(flat: np.ndarray, seed: int = 0) -> None:
    """Fill a 1-d float32 array from the random source, starting where ``seed`` says."""
    source = _random_source()
    start, done = (seed * 7919) % source.size, 0  # a prime stride: seeds land apart
    while done < flat.size:
        n = min(flat.size - done, source.size - start)
        flat[done:done + n] = source[start:start + n]
        done, start = done + n, 0


_SOURCE_FLOATS = 1 << 21  # 8 MiB


@functools.cache
def _random_source() -> np.ndarray:
    a = np.random.default_rng(0).random(_SOURCE_FLOATS, dtype=np.float32)
    a[a == 0.5] = 0.25  # 2a - 1 is never 0
    a = a * 2 - 1
    a.flags.writeable = False  # every random_array is a copy of it
    return a


def cold_arrays(bind: Callable[..., Callable[[], None]], arrays: dict[str, np.ndarray], cold: Iterable[str],
                total_bytes: int | None = None, max_copies: int = 64) -> Callable[[], None]:
    """A call that runs ``bind(**arrays)`` with the ``cold`` arrays (a layer's weights) taken
    from the next of enough copies to overflow the last-level cache (``total_bytes``, default
    1.5x its size; at most ``max_copies``): back to back, those come from memory on every
    call while the other arrays (the activations) stay in cache, as inside a network,
    where each layer's input was just written and the weights were last read an inference
    ago. No flush: a 64 MiB flush left the caches full of dirty lines and read ResNet-50's
    convs 1.23x slower than they ran in the network (per layer 0.80-2.03x); this protocol
    read them at 1.02x (per layer 0.69-1.31x; benchmarks/README.md, session 6).

    >>> seen = []
    >>> bind = lambda w, x: (lambda: seen.append((w.ctypes.data, x.ctypes.data, w.shape)))
    >>> w = np.ones((2, 8), np.float32)
    >>> run = cold_arrays(bind, {"w": w, "x": np.ones(4, np.float32)}, ["w"], total_bytes=3 * 128)
    >>> for _ in range(4): run()
    >>> len({w for w, _, _ in seen}), len({x for _, x, _ in seen}), {s for _, _, s in seen}  # 3 places of w, one x
    (3, 1, {(2, 8)})
    >>> {a % 64 for a, _, _ in seen} == {w.ctypes.data % 64}  # each copy as far into a line as w
    True
    """
    if total_bytes is None:
        from kernels.jit import host_cpu

        total_bytes = host_cpu().l3_bytes * 3 // 2
    cold = [n for n in cold if arrays.get(n) is not None]
    nbytes = sum(_padded(arrays[n].size) * 4 for n in cold)
    copies = min(max_copies, max(1, -(-total_bytes // max(nbytes, 1))))
    pool = _cold_pool((copies - 1) * nbytes // 4)
    runs, offset = [bind(**arrays)], 0
    for _ in range(copies - 1):
        views = {}
        for n in cold:  # each copy at its own addresses, as far past a cache line as the original
            a = arrays[n]
            start = offset + (a.ctypes.data % (4 * _ALIGN)) // 4
            views[n] = pool[start:start + a.size].reshape(a.shape)
            offset += _padded(a.size)
        runs.append(bind(**{**arrays, **views}))
    turn = itertools.cycle(runs)

    def run() -> None:
        next(turn)()

    return run


_ALIGN = hugepages.SMALL_ALIGN // 4  # floats in a cache line
_pool = np.empty(0, np.float32)


def _padded(size: int) -> int:
    """Floats a copy takes in the pool: its own, up to a line of offset, rounded to lines."""
    return -(-(size + _ALIGN) // _ALIGN) * _ALIGN


def _cold_pool(floats: int) -> np.ndarray:
    """A float32 buffer of at least ``floats`` starting on a cache line, random-filled once and
    kept for the process: cold copies are views into it, not fresh copies a call (copying a
    layer's weights 30-60 times took 13% of tuning DenseNet-121's workloads). Its values are
    whatever was last written there (a transform's timed output, say): finite, not a pattern."""
    global _pool
    if _pool.size < floats:
        _pool = hugepages.aligned_empty(floats, 4 * _ALIGN)
        _fill(_pool)
    return _pool


def _calibrate(fn: Callable[[], object], target_s: float) -> int:
    """Smallest-ish call count whose run lasts ``target_s`` (grown from measured runs, as timeit)."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= target_s:
            return number
        # Aim 10% past the target; at least double so noisy tiny runs still converge.
        number = max(2 * number, int(np.ceil(number * 1.1 * target_s / max(elapsed, 1e-9))))


def measure(fn: Callable[[], object], *, min_repeat_ms: float = 20.0, repeat: int = 5, warmup: int = 2,
            number: int | None = None) -> Timing:
    """Time ``fn()`` (bind its arguments first, e.g. ``kernel.bind(...)``); see the module doc.

    ``number`` fixes the calls per repeat; by default it is calibrated after the
    warm-up: grown until one run of ``number`` calls lasts ``min_repeat_ms``.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    for _ in range(warmup):
        fn()
    if number is None:
        number = _calibrate(fn, min_repeat_ms * 1e-3)
    results = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        results.append((time.perf_counter() - t0) / number)
    return Timing(float(np.median(results)), float(np.percentile(results, 90)), tuple(results), number)


def per_call(fn: Callable[[], object], before: Callable[[], object], calls: int, warmup: int = 0) -> float:
    """Median seconds of ``fn()`` over ``calls`` calls, each timed alone right after ``before()``
    (which leaves the state the call is to find: a producer's write, another core's read), after
    ``warmup`` such calls. The clock is read around each call, so a few microseconds of the
    interpreter's are in every one: for calls of tens of microseconds and up.

    >>> seen = []
    >>> t = per_call(lambda: seen.append("f"), lambda: seen.append("b"), calls=2, warmup=1)
    >>> seen, t >= 0
    (['b', 'f', 'b', 'f', 'b', 'f'], True)
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    times = []
    for i in range(warmup + calls):
        before()
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))
