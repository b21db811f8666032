"""Hand-run A/B of calibration: the plan solved with times taken alone against the plan solved
with the times its costs take in the network (``GraphTuner.solve(calibrate=N)``), end to end.

    python benchmarks/calibration_ab.py mobilenet-v2 resnet-50 [--rounds 30] [--calls 4] [--max-runs 6]

Both plans come from the log shipped for this CPU, with the other steps costed (as
``graph-tuner bench`` solves). Each is compiled once; rounds interleave them in rotating
order (``graph_tuner.rounds.timed_rounds``) and the ratio pairs them round by round: above
1, the alone-timed plan took longer. Each plan's prediction (``plan.cost``) is set against
its median whole run: the calibrated one should be within 5%.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from graph_tuner.api import GraphTuner
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from graph_tuner.shipped import shipped_log
from kernels.jit import host_cpu
from kernels.threads import num_threads


def ab(name: str, rounds: int, calls: int, max_runs: int) -> None:
    model = load_model(name)
    log = shipped_log(name)
    gt = GraphTuner(model, log, top_k=20)
    gt.benchmark_steps()
    plans = {"alone": gt.solve(measure=True)}
    t0 = time.perf_counter()
    plans["calibrated"] = gt.solve(measure=True, calibrate=max_runs)
    took = time.perf_counter() - t0
    params, x = model.params(seed=0), seeded_input(model)
    programs = {k: compile_model(model, p, params) for k, p in plans.items()}
    ref = programs["alone"].run(x)[0]
    np.testing.assert_allclose(programs["calibrated"].run(x)[0], ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    times = timed_rounds({k: p.execute for k, p in programs.items()}, rounds * calls, rounds=rounds)
    med = {k: median_ms(v) for k, v in times.items()}
    ratio, lo, hi = paired_ratio(times["alone"], times["calibrated"])
    changed = sum(a.candidate.config != b.candidate.config
                  for a, b in zip(plans["alone"].layers, plans["calibrated"].layers))
    print(f"{name} ({log.parent.name} log, {host_cpu().name}, {num_threads()} threads): calibration "
          f"{took:.1f} s, {changed} of {len(plans['alone'].layers)} layers changed; {plans['calibrated'].notes[-1]}")
    for k, p in plans.items():
        print(f"  {k:<10} median {med[k]:.3f} ms, predicted {p.cost:.3f} ms ({100 * (p.cost / med[k] - 1):+.1f}%)")
    print(f"  alone / calibrated {ratio:.3f}x (90% interval {lo:.3f}-{hi:.3f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--max-runs", type=int, default=6)
    args = ap.parse_args()
    for name in args.models:
        ab(name, args.rounds, args.calls, args.max_runs)


if __name__ == "__main__":
    main()
