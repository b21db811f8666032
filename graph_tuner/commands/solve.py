"""``graph-tuner solve``: records in, one optimal record per conv layer out."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from graph_tuner.commands import check_paths, model_inputs, nonnegative_int, nonnegative_seconds, positive_int
from graph_tuner.errors import GraphTunerError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "solve",
        help="choose one schedule per conv layer minimising kernels + layout transforms",
        description="Read AutoTVM tuning records, choose each conv layer's schedule and layout "
        "minimising total kernel + layout-transform time, and write the chosen records "
        "(x86: one per conv layer, in conv order; cuda: the best per distinct workload).",
    )
    p.add_argument("model", help="zoo name (see `graph-tuner models`) or an .onnx file")
    p.add_argument("--records", metavar="LOG", help="AutoTVM tuning log, or a folder of one log per CPU "
                   "(DIR/<cpu>/MODEL.log, as `tune -o DIR/ --cluster` writes): this CPU's (default: for zoo models, "
                   "the log shipped in data/ for this CPU, else another CPU's)")
    p.add_argument("--target", default="llvm", help="'llvm ...' (x86, default) or 'cuda ...'")
    p.add_argument("-o", "--output", metavar="OUT", help="output log (default: MODEL.opt.log)")
    p.add_argument("--solver", choices=("auto", "dp", "ilp", "pbqp"), default="auto",
                   help="default auto: dp (exact) if its tables fit its memory cap, else ilp (exact, OR-Tools "
                        "CP-SAT; anytime with --time-limit)")
    p.add_argument("--time-limit", type=nonnegative_seconds, metavar="SECONDS",
                   help="ilp time limit: the best plan found and a proven bound (its gap is printed); "
                        "0: the PBQP warm start and its bound")
    p.add_argument("--top-k", type=positive_int, default=20, metavar="K", help="candidates kept per layer (default 20)")
    p.add_argument("--transform-records", metavar="F", help="AutoTVM layout_transform records to use instead of measuring")
    p.add_argument("--estimate-transforms", action="store_true", help="estimate missing transform costs from the known ones (per-element model)")
    p.add_argument("--calibrate", type=nonnegative_int, default=0, metavar="RUNS",
                   help="run the plan on this CPU up to RUNS times (2-5 usually suffice), each time re-costing what it "
                        "uses with its time inside the network, and solve again: the plan and its records then carry "
                        "the times the network pays (default 0: times taken alone, from the log)")
    p.add_argument("--report", metavar="R", help="also write the report as JSON to R")
    p.add_argument("--format", choices=("v0.1", "v0.2"), help="record format to write (default: as read)")
    p.add_argument("--fallback", action="store_true", help="use a default schedule (with a warning) for layers with no record")
    p.add_argument("--skip-bad-lines", action="store_true", help="skip malformed log lines with a warning instead of failing")
    p.add_argument("--batch", type=positive_int, default=None, help="batch size (default: the model's; 1 for zoo models)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def default_records(model: str) -> Path:
    from graph_tuner.shipped import shipped_log, shipped_models

    path = shipped_log(model)
    if path is None:
        raise GraphTunerError(
            f"no shipped tuning log for '{model}' (shipped: {', '.join(shipped_models()) or 'none'}); "
            f"pass --records LOG or tune first: graph-tuner tune {model} -o {model}.log"
        )
    return path


def run(args: argparse.Namespace) -> int:
    from graph_tuner.api import GraphTuner
    from graph_tuner.atomic import atomic_write_all

    records = args.records or default_records(args.model)
    if args.records and not Path(args.records).exists():
        raise GraphTunerError(f"{args.records}: no such file; pass the AutoTVM log written by tuning")
    stem = Path(args.model).stem if args.model.endswith(".onnx") else args.model
    if args.records and Path(args.records).is_dir():  # one log per CPU: this CPU's
        from graph_tuner.cluster import log_name  # the name `tune -o DIR/` gave it
        from graph_tuner.shipped import folder_log

        records = folder_log(args.records, log_name(args.model))
    out = Path(args.output or f"{stem}.opt.log")
    # Before anything runs: an output over an input would destroy hours of measurements.
    check_paths({"--records": records, "--transform-records": args.transform_records, **model_inputs(args.model)},
                {"-o": out, "--report": args.report})

    gt = GraphTuner(
        args.model,
        records,
        target=args.target,
        top_k=args.top_k,
        fallback=args.fallback,
        skip_bad_lines=args.skip_bad_lines,
        batch=args.batch,
    )
    for w in gt.warnings:
        print(f"graph-tuner: warning: {w}", file=sys.stderr)
    own = not args.transform_records  # measuring on this machine
    if gt.kind == "llvm":
        _transform_costs(gt, args)
        if own:
            gt.benchmark_steps()
    try:
        plan = gt.solve(solver=args.solver, time_limit=args.time_limit, measure=own, calibrate=args.calibrate)
    except GraphTunerError as e:
        if not own and "transform cost(s) unknown" in str(e):  # say which options help
            raise GraphTunerError(f"{e}: not in {args.transform_records}; pass --estimate-transforms or drop "
                                  "--transform-records to measure") from None
        raise
    try:
        outputs = {out: plan.records_text(version=args.format)}
    except ValueError as e:  # v0.2 records have no v0.1 form
        raise GraphTunerError(f"--format {args.format}: {e}") from None
    if args.report:
        outputs[Path(args.report)] = plan.report_json()
    atomic_write_all(outputs)  # both or neither
    print(plan.report())
    print(f"wrote {len(plan.records)} records to {out}")
    if gt.kind == "llvm":  # with the tuning log, `run` prices the transforms and steps as this solve did
        batch = f" --batch {args.batch}" if args.batch else ""
        q = shlex.quote
        print(f"run it: graph-tuner run {q(args.model)} --records {q(str(out))} --transform-records "
              f"{q(str(records))}{batch}")
    return 0


def _transform_costs(gt, args) -> None:
    """Log's own transform records, then --transform-records F; without F, this CPU's cache
    and measuring; --estimate-transforms fills the rest from the known ones."""
    if args.transform_records:
        if not Path(args.transform_records).exists():
            raise GraphTunerError(f"{args.transform_records}: no such file")
        n = gt.load_transform_records(args.transform_records, skip_bad_lines=args.skip_bad_lines)
        print(f"read {n} layout-transform records from {args.transform_records}")
    own = not args.transform_records
    # The cache and the estimate now; the solve measures (own) only what a best plan needs.
    gt.transforms.fill(gt.required_transforms(), cache=own, measure=False, estimate=args.estimate_transforms,
                       progress=not args.no_progress, say=print)
