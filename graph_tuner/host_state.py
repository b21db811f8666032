"""How fast this (shared) host is right now: one thread's speed on a ResNet conv layer.

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

import statistics
from typing import Callable


def probe_call() -> tuple[Callable[[], None], float]:
    """A one-thread call of the probe (a 256-channel 14x14 3x3 conv, about 2.3 ms at
    100 GFLOP/s) on random buffers, and the FLOPs of one call."""
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


def speed(host: dict) -> float | None:
    """The host's speed over a model's runs: the median of the probe's GFLOP/s per round
    (None when it was not measured)."""
    rounds = host.get("conv_gflops_rounds")
    return statistics.median(rounds) if rounds else None


def describe(host: dict) -> str:
    """``"one-thread conv 88 GFLOP/s (rounds 61-95)"``."""
    rounds = host.get("conv_gflops_rounds")
    if not rounds:
        return "not measured"
    return f"one-thread conv {speed(host):.0f} GFLOP/s (rounds {min(rounds):.0f}-{max(rounds):.0f})"
