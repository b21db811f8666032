"""Hand-run A/B of two tuning logs of one model: the plans they solve to, end to end.

    python benchmarks/log_ab.py densenet-121 OLD.log[.gz] NEW.log [--rounds 30] [--calls 4] [--plans]
    python benchmarks/log_ab.py inception-v3 LOG --baseline history_best

Each log is solved as ``graph-tuner bench`` solves (the other steps costed, transforms
measured as the plan needs them), each plan compiled once, and the two run in interleaved
rounds in rotating order (``graph_tuner.rounds.timed_rounds``); the ratio pairs them round
by round: above 1, the first log's plan took longer. What a change to the tuner (fewer
trials, another search) costs or gains in the network. With ``--plans`` the two files are
graph-tuned logs (one record a conv layer, as ``graph-tuner solve -o`` writes), their convs run
as they are (the adds' and concats' layouts chosen by the cost model, as ``graph-tuner run``
does): what another way of solving (other costs, other candidates) gains on the same log.
With ``--baseline`` the second plan is the first log's ``history_best`` or ``default`` plan, as
``graph-tuner bench`` forms it: the two alone, paired more closely than the bench's seven
runtimes a round (session 35: Inception-v3's history-best read 0.93-0.99x the plan in three
benches, 1.035x (1.028-1.043) so).
"""
from __future__ import annotations

import argparse

import numpy as np

from graph_tuner.api import GraphTuner, apply_records, solve_log
from graph_tuner.errors import GraphTunerError
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from graph_tuner.shipped import shipped_log
from kernels.jit import host_cpu
from kernels.threads import num_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("first")
    ap.add_argument("second", nargs="?", help="the other log (none with --baseline)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--plans", action="store_true", help="the two files are graph-tuned logs: run them as they are")
    ap.add_argument("--baseline", choices=("history_best", "default"),
                    help="the second plan is FIRST's baseline of that name, as bench forms it")
    args = ap.parse_args()
    if (args.second is None) != (args.baseline is not None) or (args.baseline and args.plans):
        ap.error("give a second log, or --baseline (with one tuning log and no --plans)")
    try:
        model = load_model(args.model)
        if args.baseline:
            plans = dict(zip(("first", "second"), _with_baseline(model, args.first, args.baseline)))
            args.second = f"{args.baseline} of {args.first}"
        else:
            plans = {key: _plan(model, getattr(args, key), args.plans) for key in ("first", "second")}
    except GraphTunerError as e:
        ap.error(str(e))
    params, x = model.params(seed=0), seeded_input(model)
    programs = {key: compile_model(model, plan, params) for key, plan in plans.items()}
    ref = programs["first"].run(x)[0]
    np.testing.assert_allclose(programs["second"].run(x)[0], ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    times = timed_rounds({k: p.execute for k, p in programs.items()}, args.rounds * args.calls, rounds=args.rounds)
    med = {k: median_ms(v) for k, v in times.items()}
    ratio, lo, hi = paired_ratio(times["first"], times["second"])
    print(f"{args.model} ({host_cpu().name}, {num_threads()} threads)")
    for k in programs:
        print(f"  {k:<7} {getattr(args, k)}: median {med[k]:.3f} ms, predicted {plans[k].cost:.3f} ms")
    print(f"  first / second {ratio:.3f}x (90% interval {lo:.3f}-{hi:.3f})")


def _plan(model, path: str, as_plan: bool):
    """The plan a tuning log solves to as ``bench`` solves it, or (``as_plan``) the graph-tuned
    log's own, costed with the shipped log's transforms and ratios where there is one."""
    if as_plan:
        return apply_records(model, path, tuning=shipped_log(model.name), progress=False)
    return solve_log(model, path)


def _with_baseline(model, path: str, name: str):
    """The plan a tuning log solves to and its baseline ``name``, as ``bench`` forms both."""
    plans = GraphTuner(model, path).bench_plans((name,))
    if plans[name] is None:
        raise GraphTunerError(f"{path}: the log cannot form the {name} plan (a layer lacks its record)")
    return plans["graph_tuned"], plans[name]


if __name__ == "__main__":
    main()
