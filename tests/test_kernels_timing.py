"""The timing routine: adaptive call counts, statistics, random buffers, cache flush."""
import os

import numpy as np
import pytest

from kernels.threads import num_threads
from kernels.timing import Timing, measure, random_array


def test_number_per_repeat_reaches_min_repeat_time():
    calls = []
    t = measure(lambda: calls.append(1), min_repeat_ms=5, repeat=4, warmup=3)
    assert isinstance(t, Timing) and len(t.results) == 4
    assert t.number > 1 and len(calls) >= 3 + 4 * t.number + t.number  # warm-up, calibration, repeats
    assert t.median_s == pytest.approx(float(np.median(t.results)))
    assert min(t.results) <= t.median_s <= t.p90_s <= max(t.results)
    assert t.number * t.median_s >= 5e-3 * 0.5  # repeats last about min_repeat_ms (generous bound)


def test_flush_cache_times_single_calls():
    calls = []
    t = measure(lambda: calls.append(1), repeat=3, warmup=1, flush_cache=True, flush_bytes=1 << 20)
    assert t.number == 1 and len(calls) == 4


def test_random_array_is_filled():
    a = random_array((4, 1000), seed=3)
    assert a.dtype == np.float32 and a.flags.c_contiguous
    assert np.count_nonzero(a) == a.size and -1 <= a.min() < a.max() <= 1
    np.testing.assert_array_equal(a, random_array((4, 1000), seed=3))


def test_num_threads_from_env(monkeypatch):
    monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", "3")
    assert num_threads() == 3
    monkeypatch.delenv("GRAPH_TUNER_NUM_THREADS")
    assert num_threads() == len(os.sched_getaffinity(0))
    for bad in ("zero", "0"):
        monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="GRAPH_TUNER_NUM_THREADS"):
            num_threads()


def test_before_runs_untimed_once_per_repeat(monkeypatch):
    import kernels.timing as timing

    clock, calls = [0.0], []
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])

    def fn():
        calls.append("fn")
        clock[0] += 1.0  # every call "takes" 1 s

    def before():
        calls.append("before")
        clock[0] += 100.0  # and `before` 100 s, which must not be counted

    t = timing.measure(fn, repeat=4, warmup=1, number=1, before=before)
    assert calls == ["fn"] + ["before", "fn"] * 4
    assert t.results == (1.0, 1.0, 1.0, 1.0)


def test_flush_then_wake_workers_then_before(monkeypatch):
    """Cold caches, not a cold pool: after each flush the workers are woken before `before`."""
    import kernels.timing as timing

    calls = []
    monkeypatch.setattr(timing, "_flush", lambda n: calls.append("flush"))
    monkeypatch.setattr(timing.threads, "wake_workers", lambda: calls.append("wake"))
    timing.measure(lambda: calls.append("fn"), repeat=2, warmup=0, flush_cache=True,
                   before=lambda: calls.append("before"))
    assert calls == ["flush", "wake", "before", "fn"] * 2
