"""How fast this (shared) host is right now: each CPU's compute speed and the DRAM read rate.

A cloud host's speed drifts while a benchmark runs: in session 7 a one-thread 3x3 conv
ran at 53-95 GFLOP/s per vCPU on the same EPYC, and ResNet-50's end-to-end ratio to
onnxruntime followed it (0.997x calm, 0.86x on cores at 53-65 GFLOP/s). ``graph-tuner
bench`` records this probe before and after each model's runs, so a results file says
what host it was measured on, and a slowdown on slower cores is not taken for a
regression of the code (:func:`graph_tuner.bench.find_regressions`).

The probe runs in a child process (``python -m graph_tuner.host_state``) that pins
itself to one CPU at a time: pinning this process would pin the kernel thread pool's
workers with it.

>>> speed({"before": {"conv_gflops": [80.0, 90.0]}, "after": {"conv_gflops": [70.0, 70.0]}})
77.5
>>> speed({"before": None, "after": None}) is None
True
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

PROBE_SECONDS = 60  # give up on a probe after this long (a wedged child must not stall the bench)


def _conv_gflops(cpu: int) -> float:
    """One thread on ``cpu``: a 256-channel 14x14 3x3 conv (a ResNet layer), median of 7 repeats."""
    from kernels import Conv2DConfig, Conv2DWorkload, build_conv2d, measure, random_array

    os.sched_setaffinity(0, {cpu})
    wl = Conv2DWorkload((1, 256, 14, 14), (256, 256, 3, 3), padding=(1, 1, 1, 1))
    k = build_conv2d(wl, Conv2DConfig(ic_bn=32, oc_bn=32, ow_bn=3))
    arrays = {a: random_array(s, i) for i, (a, s) in enumerate(k.arg_shapes.items()) if s is not None}
    t = measure(k.bind(**arrays, nthreads=1), min_repeat_ms=20, repeat=7, warmup=2).median_s
    return wl.flops / t / 1e9


def _dram_read_gbs() -> float:
    """One thread summing 128 MiB (4x a large L3), median of 7."""
    import numpy as np

    a = np.random.default_rng(0).random(16 << 20)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        a.sum()
        times.append(time.perf_counter() - t0)
    return a.nbytes / statistics.median(times) / 1e9


def probe() -> dict:
    """``{"conv_gflops": [per CPU this process may run on], "dram_read_gbs": x}``, measured here
    (it changes this process's CPU affinity: :func:`probe_host` runs it in a child)."""
    cpus = sorted(os.sched_getaffinity(0))
    try:
        gflops = [round(_conv_gflops(c), 1) for c in cpus]
    finally:
        os.sched_setaffinity(0, set(cpus))
    return {"conv_gflops": gflops, "dram_read_gbs": round(_dram_read_gbs(), 1)}


def probe_host() -> dict | str:
    """:func:`probe` in a child process; a one-line reason instead when it cannot run."""
    try:
        done = subprocess.run([sys.executable, "-m", "graph_tuner.host_state"], capture_output=True, text=True,
                              timeout=PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"host probe failed: {e}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"host probe failed: {last}"
    return json.loads(done.stdout)


def speed(host: dict) -> float | None:
    """One figure for a model's runs: the mean per-CPU conv GFLOP/s, averaged over the probes
    before and after them (None when neither ran)."""
    probes = [p for p in (host.get("before"), host.get("after")) if isinstance(p, dict) and p.get("conv_gflops")]
    if not probes:
        return None
    return statistics.mean(statistics.mean(p["conv_gflops"]) for p in probes)


def describe(host: dict) -> str:
    """``"conv GFLOP/s per CPU 88/86 -> 70/89, DRAM read 11.9 -> 10.2 GB/s"``."""
    def part(key: str, fmt) -> str:
        vals = [fmt(p[key]) if isinstance(p, dict) else "?" for p in (host.get("before"), host.get("after"))]
        return " -> ".join(vals)

    return (f"conv GFLOP/s per CPU {part('conv_gflops', lambda g: '/'.join(f'{x:.0f}' for x in g))}, "
            f"DRAM read {part('dram_read_gbs', lambda x: f'{x:.1f}')} GB/s")


if __name__ == "__main__":
    print(json.dumps(probe()))
