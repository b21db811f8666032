"""``graph-tuner run``: run a graph-tuned plan end to end, with latency, a profile and predicted vs measured."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graph_tuner.commands import check_paths, model_inputs, positive_int
from graph_tuner.errors import GraphTunerError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a model with a graph-tuned log: latency, per-layer profile, predicted vs measured",
        description="Compile MODEL with the schedules and layouts of a graph-tuned log (one x86 record per "
        "conv layer, in conv order, as `graph-tuner solve` writes), run it on this CPU and report the "
        "median and p90 latency, a per-layer profile, and the plan's predicted conv + transform time next "
        "to the measured one. Zoo models get seeded random weights; ONNX models use their own.",
    )
    p.add_argument("model", help="zoo name (see `graph-tuner models`) or an .onnx file")
    p.add_argument("--records", metavar="LOG", required=True, help="graph-tuned log (one record per conv layer)")
    p.add_argument("--transform-records", metavar="F",
                   help="the tuning log the plan was solved from: its layout_transform and step timings and "
                        "in-network ratios cost the transforms and other steps as `solve` did (without it they "
                        "are times taken alone, from this CPU's cache or measured once)")
    p.add_argument("--skip-bad-lines", action="store_true",
                   help="skip the lines of --transform-records that are not valid records, as `solve` does with "
                        "the same option (default: stop at the first, naming it)")
    p.add_argument("--repeat", type=positive_int, default=30, metavar="N", help="timed runs (default 30)")
    p.add_argument("--input", metavar="X.npy", help="input array (default: seeded random normal)")
    p.add_argument("--save-output", metavar="Y.npy", help="write the (first) output to Y.npy")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.add_argument("--no-retime", action="store_true",
                   help="skip re-timing the plan's kernels and transforms alone (3 rounds, alternating with "
                        "the profile) for the prediction")
    p.add_argument("--batch", type=positive_int, default=None, help="batch size (default: the model's; 1 for zoo)")
    p.add_argument("--top", type=positive_int, default=10, metavar="K", help="slowest steps listed (default 10)")
    p.set_defaults(func=run)


def load_input(path: str, shape: tuple[int, ...]):
    """``path`` as a float32 array of ``shape`` (GraphTunerError naming the file otherwise)."""
    import numpy as np

    try:
        x = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise GraphTunerError(f"{path}: no such file; give a .npy array of shape {shape}") from None
    except (ValueError, OSError) as e:
        raise GraphTunerError(f"{path}: not a .npy array ({str(e).splitlines()[0]}); save one with numpy.save") from None
    if x.shape != tuple(shape):
        raise GraphTunerError(f"{path}: shape {x.shape}, but the model's input is {tuple(shape)}")
    if not np.issubdtype(x.dtype, np.number):
        raise GraphTunerError(f"{path}: dtype {x.dtype} is not numeric")
    return x.astype(np.float32)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from graph_tuner.plan_run import measure_plan
    from graph_tuner.loading import load_model

    if not Path(args.records).exists():
        raise GraphTunerError(f"{args.records}: no such file; write a graph-tuned log with `graph-tuner solve`")
    check_paths({"--records": args.records, "--transform-records": args.transform_records, "--input": args.input,
                 **model_inputs(args.model)},
                {"--save-output": args.save_output})
    model = load_model(args.model, batch=args.batch)
    shape = model.op(model.inputs[0]).shape
    x = load_input(args.input, shape) if args.input else None
    from graph_tuner.api import apply_records

    tuning = network = None
    if args.transform_records:
        from graph_tuner.calibration import InNetworkCosts
        from graph_tuner.records import read_records

        if not Path(args.transform_records).exists():
            raise GraphTunerError(f"{args.transform_records}: no such file; give a log with layout_transform records")
        tuning = read_records(args.transform_records, skip_bad_lines=args.skip_bad_lines)
        network = InNetworkCosts.from_records(tuning.network, model.name, model.digest)
        if not network:
            print(f"graph-tuner: warning: {args.transform_records}: no in-network ratios of {model.name} at this "
                  "batch size (another model's log, or tuned with --no-calibrate?): its transforms and other steps "
                  "are priced at their times taken alone", file=sys.stderr)
    plan = apply_records(model, args.records, None, batch=model.batch, progress=not args.json, tuning=tuning)
    # Re-timed now, each step times the ratio it was costed with: the prediction in this phase of the host.
    result = measure_plan(model, plan, x=x, repeat=args.repeat, retime=not args.no_retime,
                          ratios=network.by_step(plan) if network else None)
    if args.save_output:
        import io

        from graph_tuner.atomic import atomic_write_all

        buffer = io.BytesIO()
        np.save(buffer, result.outputs[0])
        atomic_write_all({args.save_output: buffer.getvalue()})
    if args.json:
        print(json.dumps(result.to_json(top=None)))
    else:
        print(result.report(top=args.top))
    return 0

