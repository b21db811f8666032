"""Hand-run: the graph-tuned plan and the other runtimes in each of the host's phases.

A shared host has phases that the thread pool's fork-join tells apart
(:func:`graph_tuner.host_state.fork_join_us`: 1.6 us and 3.2 us on the 2-core Zen 4 VM, session
21). For ``--seconds``, each sample times the plan (the log shipped for this CPU) and the
other runtimes for 5 calls each, interleaved, between two readings of the fork-join; a sample
whose two readings fall on one side of ``--split`` counts for that phase (the others are
dropped). Prints per phase the medians and each runtime's time over ours (median of the
samples' ratios).

    python benchmarks/phases.py inception-v3 [--seconds 60] [--split 2.2]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from graph_tuner.api import GraphTuner
from graph_tuner.executor import compile_model
from graph_tuner.host_state import fork_join_call, fork_join_us
from graph_tuner.loading import load_given, rewritten
from graph_tuner.plan_run import seeded_input
from graph_tuner.runtimes import onnxruntime_runner, openvino_runner
from graph_tuner.shipped import shipped_log
from kernels.threads import num_threads


def median_ms(call, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--split", type=float, default=2.2, help="fork-join microseconds between the two phases")
    args = ap.parse_args()
    given = load_given(args.model)
    model = rewritten(given)
    gt = GraphTuner(model, shipped_log(args.model), top_k=20)
    gt.benchmark_steps()
    params, x = model.params(seed=0), seeded_input(model)
    ours = compile_model(model, gt.solve(measure=True), params)
    ours.run(x)
    runners = {"graph_tuned": ours.execute}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("openvino", openvino_runner), ("onnxruntime", onnxruntime_runner)):
            runner = make(given, params, x, num_threads(), Path(tmp))
            if isinstance(runner, str):
                print(f"note: {runner}")
            else:
                runners[name] = runner[0]
        probe = fork_join_call()
        samples: dict[str, list[dict[str, float]]] = {"fast": [], "slow": []}
        end = time.time() + args.seconds
        while time.time() < end:
            before = fork_join_us(probe)
            sample = {k: median_ms(call) for k, call in runners.items()}
            after = fork_join_us(probe)
            if max(before, after) < args.split:
                samples["fast"].append(sample)
            elif min(before, after) > args.split:
                samples["slow"].append(sample)
    for phase, rows in samples.items():
        if not rows:
            print(f"{args.model} {phase} phase: no sample")
            continue
        parts = [f"{k} {np.median([r[k] for r in rows]):.2f} ms"
                 + ("" if k == "graph_tuned" else f" ({np.median([r[k] / r['graph_tuned'] for r in rows]):.3f}x ours)")
                 for k in runners]
        print(f"{args.model} {phase} phase ({len(rows)} samples): " + ", ".join(parts))


if __name__ == "__main__":
    main()
