"""``graph-tuner tune``: measure a model's conv kernels (and layout transforms) into an AutoTVM log."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from graph_tuner.commands import check_paths, model_inputs, positive_int, positive_seconds


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune", help="tune a model's conv kernels into an AutoTVM log",
        description="For every distinct conv workload of MODEL, search AutoTVM's conv2d_NCHWc.x86 config "
                    "space (plus register-tile widths 3-16 it lacks) on this CPU and append one record per measurement to LOG (flushed line by line; "
                    "a rerun resumes where a run stopped), then append the layout transforms the model "
                    "can need and the plan's in-network ratios. The log is readable by TVM and by "
                    "`graph-tuner solve`.")
    p.add_argument("model", metavar="MODEL", help="a zoo model name (see `graph-tuner models`) or an .onnx file")
    p.add_argument("-o", "--output", metavar="LOG", required=True,
                   help="the tuning log to append to (created with its folders if missing; "
                        "a file that is not an AutoTVM log is refused and left as it is)")
    p.add_argument("--trials", type=positive_int, default=None, metavar="N",
                   help="measurements for a workload with at least the average share of the model's conv time, "
                        "fewer (down to 12) for smaller ones, counting those already in LOG (default 40)")
    p.add_argument("--time-budget", type=positive_seconds, default=None, metavar="SECONDS",
                   help="wall time for the conv search, split evenly over the workloads left "
                        "(time one does not use passes to the next; what is left then goes to the "
                        "siblings' exchange of their fastest configs)")
    p.add_argument("--batch", type=positive_int, default=None, metavar="N",
                   help="batch size (default: the model's, 1 for zoo)")
    p.add_argument("--retime", action="store_true",
                   help="no search: time LOG's finalists again (per workload, the config `solve` weighs for "
                        "each of the 20 fastest layout pairs) in 3 interleaved rounds and replace their records (and "
                        "its layout transforms' and the other steps' timings, then the in-network ratios), to refresh "
                        "a log after a kernel upgrade or on a calmer host")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the last step: running the plan `solve` picks here (6 rounds of profiles and alone "
                        "re-timings, 8-24 s on the bench models) and appending each of its steps' in-network / "
                        "alone ratio to LOG, so that `solve` costs the plan with what the network pays (a rerun on "
                        "a log that has them for the plan and times nothing new skips it too)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="tune on a Dask cluster: the scheduler's address (tcp://HOST:8786); each machine runs "
                        "`dask worker ADDRESS --nthreads 1 --resources measure=1`; this process writes the log. "
                        "-o DIR/ then writes one log per CPU, DIR/<cpu>/MODEL.log (needs the [cluster] extra: "
                        "pip install -e '.[cluster]')")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (summary lines only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graph_tuner.errors import GraphTunerError
    from graph_tuner.host_state import fork_join_us, probe
    from graph_tuner.loading import load_model
    from graph_tuner.environment import check_cache_dir
    from graph_tuner.tuning import DEFAULT_TRIALS, calibrate_log, check_log, retime_model, tune_model

    if args.retime and (args.trials is not None or args.time_budget is not None):
        raise GraphTunerError("--retime does not search: drop --trials and --time-budget")
    trials = DEFAULT_TRIALS if args.trials is None else args.trials
    if args.cluster:
        if args.retime:
            raise GraphTunerError("--retime runs on this machine: drop --cluster")
        return run_on_cluster(args, trials)
    # Before anything runs (loading a big model, probing the host): the log must be a log,
    # and never the model itself (`tune model.onnx -o model.onnx` once cut bytes off it).
    out = Path(args.output)
    check_paths(model_inputs(args.model), {"-o": out})
    check_log(out)
    if not args.retime:
        check_cache_dir()
    model = load_model(args.model, batch=args.batch)
    if not model.distinct_workloads():
        raise GraphTunerError(f"{args.model}: the model has no conv2d layers; nothing to tune")
    # The host's speed at the start and the end: a shared host's load moves the rankings of
    # configs (benchmarks/README.md, sessions 7-8), so say what host this log was tuned on.
    before, join = probe(), fork_join_us()
    if args.retime:
        n = retime_model(model, args.output, progress=not args.no_progress, print_fn=print)
        print(f"re-timed {n} configs; log: {args.output}")
        print(f"host while re-timing: one-thread conv {before:.0f} GFLOP/s at the start, {probe():.0f} at the end; "
              f"the thread pool's fork-join {join:.1f} us at the start, {fork_join_us():.1f} at the end")
        if not args.no_calibrate:  # the alone times changed: their ratios are taken again
            calibrate_log(model, args.output, print_fn=print)
        return 0
    start = time.perf_counter()
    summaries = tune_model(model, args.output, trials=trials, time_budget=args.time_budget,
                           progress=not args.no_progress, print_fn=print, calibrate=not args.no_calibrate)
    # The whole step a user waits for, not only the conv search (the transforms and the
    # in-network ratios have their own lines above).
    whole = time.perf_counter() - start
    after = probe()
    search = sum(s.wall_seconds for s in summaries)
    print(f"tuned {len(summaries)} workloads in {whole:.1f} s (the conv search {search:.1f} s); log: {args.output}")
    print(f"host while tuning: one-thread conv {before:.0f} GFLOP/s at the start, {after:.0f} at the end; "
          f"the thread pool's fork-join {join:.1f} us at the start, {fork_join_us():.1f} at the end")
    loaded = [s for s in summaries if s.contention_note()]
    if loaded:
        print(f"warning: {len(loaded)} of {len(summaries)} workloads were timed while other processes used the cores "
              f"(up to {100 * max(s.others_share for s in loaded):.0f}%); run `graph-tuner tune {args.model} -o "
              f"{args.output} --retime` on a quiet machine to re-time their finalists")
    return 0


def run_on_cluster(args: argparse.Namespace, trials: int) -> int:
    """``tune --cluster``: the workloads spread over a Dask cluster (:mod:`graph_tuner.cluster`)."""
    from graph_tuner.cluster import log_name, tune_on_cluster
    from graph_tuner.errors import GraphTunerError
    from graph_tuner.loading import load_model
    from graph_tuner.tuning import check_log, model_workloads

    out = Path(args.output)
    if args.output.endswith(("/", os.sep)) or out.is_dir():
        # DIR/<cpu>/MODEL.log: the folder (or its first existing parent) must be writable
        check_paths(model_inputs(args.model), {"-o": out / "MODEL.log"})
    else:
        check_paths(model_inputs(args.model), {"-o": out})
        check_log(out)
    model = load_model(args.model, batch=args.batch)
    if not model.distinct_workloads():
        raise GraphTunerError(f"{args.model}: the model has no conv2d layers; nothing to tune")
    result = tune_on_cluster(model, args.output, args.cluster, trials=trials, time_budget=args.time_budget,
                             progress=not args.no_progress, print_fn=print, name=log_name(args.model))
    logs = ", ".join(str(p) for p in result.logs.values())
    n = len(result.workers)
    print(f"tuned {len(model_workloads(model))} workloads on {n} worker{'s' if n != 1 else ''} in "
          f"{result.wall_seconds:.1f} s (the cluster's overhead: {100 * result.overhead():.1f}% of the measuring "
          f"time); log{'s' if len(result.logs) > 1 else ''}: {logs}")
    print(f"in-network ratios not taken (they are the machine's that runs the plan): `graph-tuner tune {args.model} "
          f"-o LOG` on a machine of the log's CPU adds them, timing nothing else")
    return 0
