"""How fast this (shared) host is right now: one thread's speed on a ResNet conv layer, and
what a fork-join of the kernels' thread pool costs.

A cloud host's speed drifts while a benchmark runs, and not through steal time (this VM's
``/proc/stat`` shows almost none): its cores slow down. In session 7 a one-thread 3x3 conv
ran at 53-95 GFLOP/s on the same EPYC, and ResNet-50's end-to-end ratio to onnxruntime
followed it (0.997x calm, 0.86x on cores at 53-65 GFLOP/s). ``graph-tuner bench`` times
this probe in its interleaved rounds, next to the runtimes, so a results file says how fast
the host was while they ran, and a slowdown on slower cores is not taken for a regression
of the code (:func:`graph_tuner.bench_history.find_regressions`); ``graph-tuner tune`` prints it
at its start and end. A probe before and after a model's runs was not enough: at 17:47 in
session 8 it read the cores as fast while onnxruntime ran 19% slower in between.

>>> speed({"conv_gflops_rounds": [90.0, 60.0, 80.0]})
80.0
>>> speed({}) is None
True
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable


def probe_call() -> tuple[Callable[[], None], float]:
    """A one-thread call of the probe (a 256-channel 14x14 3x3 conv, about 2.3 ms at
    100 GFLOP/s) on random buffers, and the FLOPs of one call. Its buffers start on a cache
    line from session 30 (:data:`PROBE_VERSION`; :func:`kernels.timing.random_array`): on the
    rocketlake Xeon the conv took 0.76-0.78x the time it took on numpy's buffers."""
    from kernels import Conv2DConfig, Conv2DWorkload, build_conv2d, random_array

    wl = Conv2DWorkload((1, 256, 14, 14), (256, 256, 3, 3), padding=(1, 1, 1, 1))
    k = build_conv2d(wl, Conv2DConfig(ic_bn=32, oc_bn=32, ow_bn=3))
    arrays = {a: random_array(s, i) for i, (a, s) in enumerate(k.arg_shapes.items()) if s is not None}
    return k.bind(**arrays, nthreads=1), float(wl.flops)


def probe() -> float:
    """One thread's GFLOP/s on the probe now: the median of 7 repeats of at least 20 ms."""
    from kernels.timing import measure

    call, flops = probe_call()
    return flops / measure(call, min_repeat_ms=20, repeat=7, warmup=2).median_s / 1e9


# Calls of the fork-join probe per timing: one call takes 1.6-3.2 us on the Zen 4 VM, too short
# to time one at a time.
FORK_JOIN_CALLS = 100


def fork_join_call() -> Callable[[], None]:
    """:data:`FORK_JOIN_CALLS` calls of the kernels' thread pool, every thread, with almost no
    work (a 64-channel 8x8 layout transform): what handing work to the other cores and
    collecting it costs. On the 2-core Zen 4 VM one call took 1.6 us in some phases of the host
    and 3.2 us in others, which lasted seconds to minutes; Inception-v3 then ran 50.6 ms, not
    45.1, each step slower by a nearly constant 0.05-0.24 ms, none of which the one-thread
    conv or a copy in L3 or memory saw (session 21). Steps that run few or no FLOPs suffered
    most (pools 4x), as if the two cores no longer shared a cache."""
    import numpy as np

    from kernels.layout_transform import build_transform
    from kernels.timing import random_array

    k = build_transform((1, 64, 8, 8), 16, 8)
    call = k.bind(src=random_array((1, 4, 8, 8, 16), 0), dst=random_array((1, 8, 8, 8, 8), 1))

    def calls() -> None:
        for _ in range(FORK_JOIN_CALLS):
            call()

    return calls


# The fastest fork-join read in this process, per thread count (a fork-join of 1 thread is not
# one of 2).
_lowest_join: dict[int, float] = {}


def _threads() -> int:
    from kernels.threads import num_threads

    return num_threads()


def fork_join_us(call: Callable[[], None] | None = None) -> float:
    """Microseconds of one fork-join of the thread pool now (:func:`fork_join_call`): the
    median of 21 timings of :data:`FORK_JOIN_CALLS` calls.

    >>> fork_join_us() > 0 and lowest_fork_join_us() > 0
    True
    """
    from kernels.timing import measure

    call = call or fork_join_call()
    us = measure(call, number=1, repeat=21, warmup=2).median_s / FORK_JOIN_CALLS * 1e6
    threads = _threads()
    _lowest_join[threads] = min(_lowest_join.get(threads, us), us)
    return us


def lowest_fork_join_us() -> float | None:
    """The fastest fork-join :func:`fork_join_us` has read in this process at this thread
    count (None before any): the host's fast phase, as far as this process has seen it."""
    return _lowest_join.get(_threads())


# A fork-join over this many times another marks another phase of the host: the probe read 1.6 us
# and 3.2 us in the two phases of the Zen 4 VM (session 21), within 10% of one value in a phase.
FORK_JOIN_MARGIN = 1.5
# How long a measurement that wants the fast phase waits for it (:func:`await_fast_phase`).
FAST_PHASE_WAIT_S = 15.0


def same_phase(a: float, b: float) -> bool:
    """Whether two fork-join readings (microseconds) are of one phase of the host.

    >>> same_phase(1.6, 1.7), same_phase(3.2, 1.6)
    (True, False)
    """
    return max(a, b) <= FORK_JOIN_MARGIN * min(a, b)


def in_slow_phase(us: float) -> bool:
    """Whether a fork-join of ``us`` microseconds is the host's slow phase, as far as this
    process has seen the fast one (:func:`lowest_fork_join_us`)."""
    lowest = lowest_fork_join_us()
    return lowest is not None and us > lowest and not same_phase(us, lowest)


def await_fast_phase(call: Callable[[], None], limit_s: float | None = None, every_s: float = 0.5) -> float:
    """Wait, up to ``limit_s`` seconds (:data:`FAST_PHASE_WAIT_S`), until the fork-join
    (:func:`fork_join_us` of ``call``) reads outside the host's slow phase; returns the last
    reading. A measurement that wants the fast phase waits out a short slow one instead of
    taking it, or taking twice as long."""
    us = fork_join_us(call)
    end = time.monotonic() + (FAST_PHASE_WAIT_S if limit_s is None else limit_s)
    while in_slow_phase(us) and time.monotonic() < end:
        time.sleep(every_s)
        us = fork_join_us(call)
    return us


# The probe's buffers start on a cache line from session 30 (version 2): it reads about 1.3x
# what version 1 read in the same host state. Results files without a version hold version 1.
PROBE_VERSION = 2


def comparable(a: dict, b: dict) -> bool:
    """Whether two results' ``host`` entries were read by the same probe.

    >>> comparable({"probe_version": 2}, {}), comparable({"probe_version": 2}, {"probe_version": 2})
    (False, True)
    """
    return a.get("probe_version", 1) == b.get("probe_version", 1)


def speed(host: dict) -> float | None:
    """The host's speed over a model's runs: the median of the probe's GFLOP/s per round
    (None when it was not measured)."""
    rounds = host.get("conv_gflops_rounds")
    return statistics.median(rounds) if rounds else None


def describe(host: dict) -> str:
    """``"one-thread conv 88 GFLOP/s (rounds 61-95), fork-join 1.6 us (rounds 1.6-3.2)"``.

    >>> describe({"conv_gflops_rounds": [61.0, 88.0, 95.0], "fork_join_us_rounds": [1.6, 1.6, 3.2]})
    'one-thread conv 88 GFLOP/s (rounds 61-95), fork-join 1.6 us (rounds 1.6-3.2)'
    """
    rounds = host.get("conv_gflops_rounds")
    if not rounds:
        return "not measured"
    text = f"one-thread conv {speed(host):.0f} GFLOP/s (rounds {min(rounds):.0f}-{max(rounds):.0f})"
    joins = host.get("fork_join_us_rounds")
    if joins:
        text += f", fork-join {statistics.median(joins):.1f} us (rounds {min(joins):.1f}-{max(joins):.1f})"
    return text


# Other processes' share of the cores above which a workload's times are suspect: a test run
# on the other core of this 2-core host logged Inception-v3's 80x73x73 3x3 conv at 12.9 ms,
# 6.0 re-timed alone (benchmarks/README.md, session 12), and the start/end probes read calm.
CONTENTION_WARN = 0.10


def _busy_seconds() -> float | None:
    """CPU seconds every process has used (``/proc/stat``'s busy jiffies); None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class OtherLoad:
    """How much of the cores other processes used between ``start()`` and ``share()``: the
    machine's busy CPU time less this process's (all its threads and compile helpers), over
    wall time x cores.
    A timing taken while it is high is not this machine's calm speed.

    >>> meter = OtherLoad().start()
    >>> 0.0 <= (meter.share() or 0.0) <= 1.0
    True
    """

    def start(self) -> "OtherLoad":
        self._busy, self._own, self._wall = _busy_seconds(), _own_seconds(), time.perf_counter()
        return self

    def share(self) -> float | None:
        busy = _busy_seconds()
        if busy is None or self._busy is None:
            return None
        wall = time.perf_counter() - self._wall
        from kernels.threads import usable_cores

        cores = usable_cores()
        others = (busy - self._busy) - (_own_seconds() - self._own)
        return min(1.0, max(0.0, others / (wall * cores))) if wall > 0 else 0.0


def _own_seconds() -> float:
    """CPU seconds of this process's threads and of its compile helpers."""
    from kernels.jit import helper_cpu_seconds

    t = os.times()
    return t.user + t.system + helper_cpu_seconds()
