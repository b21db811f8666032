"""Honest kernel timing: the one routine the tuner, the transform benchmark and the executor use.

Rules (each from a real mistake): buffers are random-filled, never uninitialised
(AutoTVM timed a 0.49 ms kernel at 0.10 ms on ``tvm.nd.empty`` buffers); warm-up
runs first; each repeat lasts at least ``min_repeat_ms`` (the number of calls per
repeat is chosen from the warm-up) so timer resolution and call overhead vanish;
the median over repeats is reported, with p90 and the raw per-call times.
``flush_cache=True`` reads and writes ``flush_bytes`` of memory (64 MiB by default;
raise it above the last-level cache size) before every timed call, for cold-cache
numbers; the flush itself is not timed. The thread pool's workers fall asleep during
the flush, which never happens between a network's kernels, so they are woken after it
(:func:`kernels.threads.wake_workers`): cold caches, not a cold pool.

>>> t = measure(lambda: sum(range(100)), min_repeat_ms=1, repeat=3)
>>> 0 < t.median_s <= t.p90_s and len(t.results) == 3
True
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from kernels import threads

__all__ = ["Timing", "measure", "random_array"]


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


def random_array(shape, seed: int = 0, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """A C-contiguous float32 array of uniform random values (never uninitialised memory)."""
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


_flush_buffer: np.ndarray | None = None


def _flush(nbytes: int) -> None:
    global _flush_buffer
    if _flush_buffer is None or _flush_buffer.nbytes < nbytes:
        _flush_buffer = np.zeros(nbytes // 8, np.float64)
    _flush_buffer += 1.0  # read and write every line


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
            flush_cache: bool = False, flush_bytes: int = 64 << 20, number: int | None = None,
            before: Callable[[], object] | None = None) -> Timing:
    """Time ``fn()`` (bind its arguments first, e.g. ``kernel.bind(...)``); see the module doc.

    ``number`` fixes the calls per repeat; by default it is calibrated after the
    warm-up: grown until one run of ``number`` calls lasts ``min_repeat_ms``. With ``flush_cache``
    every call is preceded by an untimed cache flush, so ``number`` is 1. ``before`` runs
    untimed before each repeat (after the flush), e.g. to bring a kernel's input back into
    cache as the layer before it would have.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    for _ in range(warmup):
        fn()
    if flush_cache:
        number = 1
    elif number is None:
        number = _calibrate(fn, min_repeat_ms * 1e-3)
    results = []
    for _ in range(repeat):
        if flush_cache:
            _flush(flush_bytes)
            threads.wake_workers()  # the flush let them fall asleep; in a network they never do
        if before is not None:
            before()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        results.append((time.perf_counter() - t0) / number)
    return Timing(float(np.median(results)), float(np.percentile(results, 90)), tuple(results), number)
