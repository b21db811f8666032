"""The timing routine: adaptive call counts, statistics, random buffers, cold arguments."""
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
