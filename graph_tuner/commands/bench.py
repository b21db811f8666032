"""``graph-tuner bench``: the end-to-end regression benchmark (our plans vs other runtimes)."""
from __future__ import annotations

import argparse

from graph_tuner.commands import positive_int

# The networks a CPU deployment meets: plain and bottleneck residual, depthwise, multi-branch
# with concats, dense concats (issue 19).
DEFAULT_MODELS = ("resnet-18", "resnet-50", "mobilenet-v2", "inception-v3", "densenet-121")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="end-to-end latency: graph-tuned vs history-best vs default plans vs onnxruntime",
        description=f"For each MODEL (default: {', '.join(DEFAULT_MODELS)}): take the tuning log shipped for this CPU "
        "(data/CPU/MODEL.log) or tune one, solve, then run side by side in this process the graph-tuned, history-best and default plans, "
        "OpenVINO and onnxruntime (same weights, exported to ONNX) and PyTorch if importable. Writes OUT/<timestamp>.json "
        "and a PNG chart, and flags medians more than 5% slower than the previous results file in OUT.",
    )
    p.add_argument("models", nargs="*", default=list(DEFAULT_MODELS), metavar="MODEL",
                   help=f"zoo names (default {' '.join(DEFAULT_MODELS)}; a model without a log shipped "
                        "for this CPU is tuned first, minutes each)")
    p.add_argument("--out", default="bench-results", metavar="DIR", help="results folder (default bench-results)")
    p.add_argument("--trials", type=positive_int, default=40, metavar="N",
                   help="tuning trials per workload when a model has no shipped log (default 40)")
    p.add_argument("--repeat", type=positive_int, default=30, metavar="N", help="timed runs per runtime (default 30)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graph_tuner.bench import bench_models
    from graph_tuner.errors import GraphTunerError
    from graph_tuner.zoo import MODEL_NAMES

    for name in args.models:
        if name not in MODEL_NAMES:
            raise GraphTunerError(f"unknown model {name!r}; bench takes zoo names: {', '.join(MODEL_NAMES)}")
    path, results = bench_models(args.models, args.out, trials=args.trials, repeat=args.repeat,
                                 progress=not args.no_progress)
    print(f"results: {path}" + (f" (chart {results['chart']})" if results.get("chart") else ""))
    for note in results.get("notes", []):
        print(f"note: {note}")
    for model, entry in results["models"].items():
        for note in entry["notes"]:
            print(f"note: {model}: {note}")
    if results["previous"] is None:
        print("no previous results from this CPU and thread count in the folder: nothing to compare")
    for r in results["regressions"]:
        print(f"REGRESSION (> 5% slower than {results['previous']}): {r}")
    for r in results.get("machine_slower", []):
        print(f"note: slower than {results['previous']}, but so was onnxruntime or the host's cores: {r}")
    return 0
