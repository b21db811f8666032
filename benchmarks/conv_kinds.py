"""Hand-run: where a plan's conv time goes, by kind of conv, against the FMA peak and memory.

    python benchmarks/conv_kinds.py inception-v3 [--records OPT.log] [--repeat 30]

The model's plan (``--records``, else solved from the log shipped for this CPU) is run and
profiled here (:func:`graph_tuner.plan_run.measure_plan`: each step's time inside the native
run). Each conv step is put in a kind (kernel, stride, grouped or depthwise, Winograd), and per
kind the table gives its steps' time, GFLOP/s and share of the FMA peak on the threads the
kernels use (:func:`kernels.peak.fma_peak`). A Winograd conv's rate counts the direct conv's
FLOPs, so it can read over 100%.

Then the weight-bound convs: those whose weights, read at 10 GB/s, take longer than their FLOPs
at the peak (Winograd convs left out: their weights are transformed tiles, their FLOPs fewer).
For them it prints their time, the weights' bytes, the rate those bytes came at over that time, and what they would take with their FMAs at 80% of the peak and their weights read at
the memory bandwidth measured here (every thread reading 256 MB, :mod:`kernels.sharing`): the
most a better weight stream could win. Session 33 sized its lead so (benchmarks/README.md):
Inception-v3's 20 weight-bound convs took 5.70 ms where 4.11 would do, ResNeXt-50's 9 took 4.60
where 3.53 would. Run nothing else meanwhile.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from graph_tuner.commands import positive_int
from graph_tuner.plan_run import measure_plan
from graph_tuner.winograd import runs_winograd
from kernels.jit import host_cpu
from kernels.peak import fma_peak
from kernels.sharing import ITEMS, build_reader
from kernels.threads import num_threads
from kernels.timing import measure, random_array
from plan_args import add_plan_args, model_and_plan

WEIGHT_BOUND_GBS = 10.0  # a conv is weight-bound when its weights at this rate outlast its FMAs at the peak
FMA_SHARE = 0.8  # the FMA efficiency the "would take" column allows a conv


def memory_gbs(megabytes: int = 256) -> float:
    """GB/s of every thread reading a buffer too large for the caches (the best of 5 calls)."""
    floats = megabytes * (1 << 20) // 4
    run = build_reader(floats).bind(random_array((floats,), 1), np.zeros(64, np.float32))
    best = min(measure(run, number=1, repeat=5, warmup=1).results)
    return ITEMS * floats * 4 / best / 1e9  # each of the reader's items reads the whole buffer


def kind(workload, winograd: bool) -> str:
    """``"3x3 s1 g1"``, ``"3x3 s2 depthwise"``, ``"3x3 s1 g1 winograd"``...

    >>> from kernels import Conv2DWorkload
    >>> kind(Conv2DWorkload((1, 32, 8, 8), (32, 1, 3, 3), strides=(2, 2), groups=32), False)
    '3x3 s2 depthwise'
    """
    kh, kw = workload.kernel_shape[2:]
    groups = "depthwise" if workload.is_depthwise else f"g{'>1' if workload.groups > 1 else '1'}"
    return f"{kh}x{kw} s{workload.strides[0]} {groups}" + (" winograd" if winograd else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_plan_args(ap)
    ap.add_argument("--repeat", type=positive_int, default=30, help="timed runs (default 30)")
    args = ap.parse_args()
    model, plan = model_and_plan(ap, args)
    peak = fma_peak(num_threads())
    mem = memory_gbs()
    run = measure_plan(model, plan, repeat=args.repeat)
    layers = {lc.name: lc for lc in plan.layers}
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])  # steps, ms, FLOPs
    bound = [0, 0.0, 0.0, 0.0]  # steps, ms, weight bytes, ms at FMA_SHARE / memory
    convs = [s for s in run.profile.steps if s.category == "conv"]
    for s in convs:
        # A step may run two convs (a depthwise conv and the 1x1 projection fused with it):
        # its kind is its first's, its FLOPs and weights both's.
        choices = [layers[op] for op in s.ops if op in layers]
        lc = choices[0]
        record = lc.candidate.record.workload if lc.candidate.record else None
        winograd = runs_winograd(lc.workload, record)
        name = kind(lc.workload, winograd) + (" + 1x1" if len(choices) > 1 else "")
        flops = sum(c.workload.flops for c in choices)
        row = kinds[name]
        row[0] += 1
        row[1] += s.median_ms
        row[2] += flops
        weights = sum(float(np.prod(c.workload.kernel_shape)) * 4 for c in choices)
        fma_ms = flops / (peak * 1e9) * 1e3
        # A Winograd conv's weights are its transformed tiles and its FLOPs fewer: not sized here.
        if not winograd and weights / (WEIGHT_BOUND_GBS * 1e9) * 1e3 > fma_ms:
            bound[0] += 1
            bound[1] += s.median_ms
            bound[2] += weights
            bound[3] += max(fma_ms / FMA_SHARE, weights / (mem * 1e9) * 1e3)
    total = sum(s.median_ms for s in convs)
    print(f"{args.model} on {host_cpu().name}, {num_threads()} threads: median run {run.median_ms:.2f} ms, "
          f"convs {total:.2f} ms; FMA peak {peak:.0f} GFLOP/s, memory {mem:.1f} GB/s")
    print(f"  {'kind':<22} {'steps':>5} {'ms':>8} {'share':>6} {'GFLOP/s':>8} {'of peak':>7}")
    for name, (n, ms, flops) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        rate = flops / ms / 1e6
        print(f"  {name:<22} {n:>5} {ms:>8.3f} {ms / total:>6.1%} {rate:>8.0f} {rate / peak:>7.0%}")
    n, ms, weights, would = bound
    if n:
        print(f"weight-bound ({WEIGHT_BOUND_GBS:.0f} GB/s of weights outlast the FMAs at the peak): {n} of "
              f"{len(convs)} conv steps, {ms:.2f} ms, {weights / 1e6:.1f} MB of weights at "
              f"{weights / ms / 1e6:.1f} GB/s; "
              f"with FMAs at {FMA_SHARE:.0%} of the peak and weights at {mem:.0f} GB/s: {would:.2f} ms")
    else:
        print("no weight-bound convs")


if __name__ == "__main__":
    main()
