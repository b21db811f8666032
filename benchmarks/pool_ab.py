"""Hand-run A/B of the thread pool's item claiming: per-thread bands (the default) against
one shared cursor (the pool before bands), on the same compiled plans, end to end.

    python benchmarks/pool_ab.py mobilenet-v2 inception-v3 [--rounds 40] [--calls 4]

Each model's plan is solved from the log shipped for this CPU (or another CPU's), compiled
once and run both ways: the switch (``kernels.jit.set_pool_banded``) is a flag the pool
reads at each job, so the two runners share every kernel and buffer. Rounds interleave the
runners in rotating order (``graph_tuner.rounds.timed_rounds``) and the ratio pairs them
round by round (``paired_ratio``): above 1, one cursor took longer than bands.
"""
from __future__ import annotations

import argparse

import numpy as np

from graph_tuner.api import GraphTuner
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from graph_tuner.shipped import shipped_log
from kernels.jit import host_cpu, set_pool_banded
from kernels.threads import num_threads


def runner(program, banded: bool):
    def run() -> None:
        set_pool_banded(banded)
        program.execute()
    return run


def ab(name: str, rounds: int, calls: int) -> None:
    model = load_model(name)
    log = shipped_log(name)
    gt = GraphTuner(model, log, top_k=20)
    gt.benchmark_steps()  # the whole network in the objective, as graph-tuner bench solves it
    plan = gt.solve(measure=True)
    program = compile_model(model, plan, model.params(seed=0))
    x = seeded_input(model)
    set_pool_banded(True)
    ref = program.run(x)[0].copy()
    set_pool_banded(False)
    np.testing.assert_array_equal(program.run(x)[0], ref)  # same kernels, same items: same bits
    times = timed_rounds({"bands": runner(program, True), "one cursor": runner(program, False)},
                         rounds * calls, rounds=rounds)
    set_pool_banded(True)
    med = {k: median_ms(v) for k, v in times.items()}
    ratio, lo, hi = paired_ratio(times["one cursor"], times["bands"])
    print(f"{name} ({log.parent.name} log, {host_cpu().name}, {num_threads()} threads): bands "
          f"{med['bands']:.3f} ms, one cursor {med['one cursor']:.3f} ms; one cursor / bands "
          f"{ratio:.3f}x (90% interval {lo:.3f}-{hi:.3f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--calls", type=int, default=4, help="calls per runner per round")
    args = ap.parse_args()
    for name in args.models:
        ab(name, args.rounds, args.calls)


if __name__ == "__main__":
    main()
