"""Hand-run: is a plan's prediction right once the host's phase is divided out?

A shared host runs 10-40% faster or slower from one minute to the next (benchmarks/README.md,
sessions 21-27), so a log's times, taken when it was tuned, predict a run taken later only as
well as the two phases agree. This separates the cost model from the phase: the plan solved
from the log (as ``graph-tuner bench`` solves it) is compiled once; each round times whole runs,
then re-times every step of the plan alone (the tuner's and step benchmark's own routines:
:func:`graph_tuner.plan_run.retimed_steps`), then whole runs again. The prediction *now* is each
step re-timed alone times the in-network ratio the plan was costed with
(:meth:`graph_tuner.calibration.InNetworkCosts.by_step`): the log's model, in this round's
phase (what ``graph-tuner run --transform-records`` reports as re-timed now). Prints per round
the whole-run median (mean of the two brackets) against that and against the log's own
prediction (``plan.cost``), per category the profile against the prediction now, then the
medians over rounds.

    python benchmarks/prediction_phase.py resnet-50 [--log LOG] [--rounds 5] [--calls 20]
"""
from __future__ import annotations

import argparse
import statistics

from graph_tuner.api import GraphTuner
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import _run_by, retimed_steps, seeded_input
from graph_tuner.shipped import shipped_log
from kernels.jit import host_cpu
from kernels.threads import num_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--log", help="tuning log (default: the one shipped for this CPU)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="whole runs per bracket")
    args = ap.parse_args()
    model = load_model(args.model)
    gt = GraphTuner(model, args.log or shipped_log(model.name), top_k=20)
    gt.benchmark_steps()
    plan = gt.solve(measure=True)
    ratio = gt.network.by_step(plan)  # each step's in-network ratio, as the plan was costed
    prog = compile_model(model, plan, model.params(seed=0))
    prog.run(seeded_input(model))

    def whole() -> float:
        return prog.benchmark(repeat=args.calls, warmup=3).median_s * 1e3

    print(f"{args.model} ({host_cpu().name}, {num_threads()} threads): {len(ratio)} steps, "
          f"log's prediction {plan.cost:.3f} ms")
    print(f"  {'round':>5} {'whole ms':>9} {'now pred':>9} {'err now':>8} {'err log':>8} {'alone now/log':>13}")
    errs_now, errs_log, cats = [], [], []
    category = {s.name: s.category for s in prog.steps}
    run_by = _run_by(prog, plan)  # layers that run inside another step (a depthwise conv and its projection)
    for i in range(args.rounds):
        before = whole()
        alone = retimed_steps(plan, model)
        profile = {s.name: s.median_ms for s in prog.profile(repeat=args.calls).steps}
        after = whole()
        missing = set(ratio) - set(alone)
        if missing:
            raise SystemExit(f"steps not re-timed: {sorted(missing)[:5]}")
        now = sum(ratio[n] * alone[n] for n in ratio)
        row = {}
        for c in ("conv", "transform", "other"):
            names = [n for n in ratio if category[run_by.get(n, n)] == c]
            own = [n for n in names if n not in run_by]  # a step that runs one timing, its ratio its own
            row[c] = (sum(ms for n, ms in profile.items() if category[n] == c),
                      sum(ratio[n] * alone[n] for n in names),
                      statistics.mean(profile[n] / alone[n] / ratio[n] for n in own) if own else 0.0)
        row["all steps"] = (sum(profile.values()), now, 0.0)
        cats.append(row)
        ms = (before + after) / 2
        errs_now.append(ms / now - 1)
        errs_log.append(ms / plan.cost - 1)
        print(f"  {i:>5} {ms:>9.3f} {now:>9.3f} {errs_now[-1]:>+8.1%} {errs_log[-1]:>+8.1%} "
              f"{now / plan.cost:>13.3f}   (brackets {before:.3f}, {after:.3f})")
    print("  per category, median over rounds: in the profile / predicted now (mean ratio now / log's)")
    for c in cats[0]:
        med = [statistics.median(r[c][j] for r in cats) for j in range(3)]
        print(f"    {c:<12} {med[0]:8.3f} / {med[1]:8.3f} ms ({med[0] / med[1] - 1:+.1%}; {med[2]:.3f})")
    print(f"  median error: now {statistics.median(errs_now):+.1%}, log {statistics.median(errs_log):+.1%}")


if __name__ == "__main__":
    main()
