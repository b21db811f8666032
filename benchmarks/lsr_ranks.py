"""Would a search whose kernels are compiled without LLVM's loop strength reduction (LSR) pick
the configs one with it picks? For a few workloads of a log, its fastest logged configs are
compiled both ways and timed in interleaved rounds (weights cold, as the tuner times them).

    python benchmarks/lsr_ranks.py data/znver4/resnet-50.log.gz --workloads 10 --configs 10 --rounds 6

Per workload: the build time (IR generation + LLVM, CPU seconds) each way; the no-LSR / LSR
time of each config (median over configs, and the range); the config each build would pick and
what the no-LSR pick costs when run with LSR, against the LSR pick ("loss"). The noise
baseline is the same loss between two halves of the LSR build's own rounds: a loss below it
is not a misranking this measurement can see. The builds are the tuner's and the executor's
own (``build_conv2d(..., search=True)`` and without), compiled in this process into an
object cache folder of its own.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ["GRAPH_TUNER_CACHE_DIR"] = tempfile.mkdtemp()  # before kernels picks its folder

from graph_tuner.records import read_records  # noqa: E402
from kernels.config_space import entity_config  # noqa: E402
from kernels.conv2d import build_conv2d, supported  # noqa: E402
from kernels.timing import measure  # noqa: E402
from kernels.tuner import _BoundCalls, kernel_arguments  # noqa: E402


def build(workload, config, lsr: bool):
    """The kernel built as a plan's (with LSR) or as the search's (:func:`kernels.jit.search_build`),
    and the CPU seconds it took (a text of its own: no cache holds it yet)."""
    t0 = time.process_time()
    kernel = build_conv2d(workload, config, search=not lsr)
    return kernel, time.process_time() - t0


def timing(calls) -> float:
    calls.warm()
    t0 = time.perf_counter()
    calls.warm()
    number = max(1, math.ceil(1.1e-3 / (time.perf_counter() - t0)))
    return measure(calls.cold(), repeat=5, warmup=0, number=number).median_s


def compare(workload, configs, rounds: int) -> dict:
    bound, spent = {}, {True: 0.0, False: 0.0}
    for i, config in enumerate(configs):
        for lsr in (True, False):
            kernel, seconds = build(workload, config, lsr)
            spent[lsr] += seconds
            bound[i, lsr] = _BoundCalls(kernel, kernel_arguments(kernel))
    times = {key: [] for key in bound}
    for r in range(rounds):
        for i in range(len(configs)):
            for lsr in ((True, False) if r % 2 else (False, True)):
                times[i, lsr].append(timing(bound[i, lsr]))
    n = range(len(configs))
    with_lsr = [statistics.median(times[i, True]) for i in n]
    without = [statistics.median(times[i, False]) for i in n]
    ratios = [b / a for a, b in zip(with_lsr, without)]
    even = [statistics.median(times[i, True][0::2]) for i in n]
    odd = [statistics.median(times[i, True][1::2]) for i in n]
    pick, pick_without = min(n, key=with_lsr.__getitem__), min(n, key=without.__getitem__)
    return {"build": (spent[True], spent[False]), "ratios": ratios, "picks": (pick, pick_without),
            "loss": with_lsr[pick_without] / with_lsr[pick], "noise": odd[min(n, key=even.__getitem__)] / min(odd)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--workloads", type=int, default=10)
    ap.add_argument("--configs", type=int, default=10, help="the log's fastest configs of each workload")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    logged: dict = {}
    for r in read_records(args.log).records:
        if not r.workload.is_depthwise:
            logged.setdefault(r.workload, []).append((r.time, entity_config(r.entity)))
    workloads = sorted(logged, key=str)
    random.Random(args.seed).shuffle(workloads)
    results = []
    for w in workloads:
        configs = [c for _, c in sorted(logged[w], key=lambda tc: tc[0]) if supported(w, c)][:args.configs]
        if len(configs) < args.configs:
            continue
        res = compare(w, configs, args.rounds)
        results.append(res)
        print(f"{w.data_shape} -> {w.kernel_shape[:2]} k{w.kernel_shape[2]}x{w.kernel_shape[3]} s{w.strides[0]}: "
              f"build {res['build'][0]:.2f} / {res['build'][1]:.2f} s; no-LSR / LSR time "
              f"{statistics.median(res['ratios']):.3f} ({min(res['ratios']):.3f}-{max(res['ratios']):.3f}); "
              f"picks #{res['picks'][0]} / #{res['picks'][1]}, loss {res['loss']:.3f}x, noise {res['noise']:.3f}x",
              flush=True)
        if len(results) == args.workloads:
            break
    geo = statistics.geometric_mean
    print(f"{len(results)} workloads: build {sum(r['build'][0] for r in results):.2f} s with LSR, "
          f"{sum(r['build'][1] for r in results):.2f} without; no-LSR / LSR time geomean "
          f"{geo([statistics.median(r['ratios']) for r in results]):.4f}; loss geomean "
          f"{geo([r['loss'] for r in results]):.4f} against a noise baseline of {geo([r['noise'] for r in results]):.4f}")


if __name__ == "__main__":
    main()
