"""Hand-run: every step of our plans that is not a dense conv, against onnxruntime's and
OpenVINO's ops on the same shapes, side by side in one process.

    python benchmarks/ops_vs_runtimes.py [MODELS...] [--rounds 20] [--calls 10]

Each model's plan is solved from the log shipped for this CPU. Its steps that are not dense
convs -- depthwise convs (alone, or fused with the 1x1 conv after them), pooling, global
pooling, dense, elementwise chains -- are each cut out as a one-input model of their own ops
(with the model's weights; steps reading two tensors, such as a residual add, are left
out), one per distinct shape and layout. Ours is the step's kernel in the compiled plan, on
its own buffers, in the layout the plan gives it; onnxruntime and OpenVINO run the cut-out
model exported to ONNX (NCHW, 2 threads, as ``graph-tuner bench`` sets them), outputs checked
equal to our executor's on the cut-out first where it has a conv. Each runtime's floor, a
call that does next to nothing, is timed first: a one-op time near it is the runtime's call,
which a network pays once, not per op. Concats written
in place and reshapes are no steps at all (counted). Rounds interleave the runners
(``graph_tuner.rounds.timed_rounds``); ratios pair them round by round: the other's time
over ours, a 90% interval.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from graph_tuner.api import solve_log
from graph_tuner.builder import GraphBuilder
from graph_tuner.executor import compile_model, plan_from_configs
from graph_tuner.loading import load_model
from graph_tuner.model import Model, Op
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from graph_tuner.runtimes import onnxruntime_runner, openvino_runner
from graph_tuner.shipped import shipped_log
from kernels.jit import host_cpu
from kernels.threads import num_threads

MODELS = ["resnet-18", "resnet-50", "mobilenet-v2", "inception-v3", "densenet-121"]


def cut_out(model: Model, ops: list[str]) -> Model | None:
    """The model of ``ops`` alone, reading the one tensor they read from outside as its input
    (None if they read more than one); op names kept, so the plan's blocks apply."""
    inside = set(ops)
    outer = list(dict.fromkeys(i for o in ops for i in model.op(o).inputs if i not in inside))
    if len(outer) != 1:
        return None
    x = model.op(outer[0])
    return Model(f"{model.name}.{ops[0]}", [Op(x.name, "input", [], {}, x.shape)] + [model.op(o) for o in ops],
                 [ops[-1]])


def signature(model: Model, plan, ops: list[str]) -> tuple:
    """What makes two steps the same benchmark: their ops' kinds, attributes, shapes and blocks."""
    return tuple((model.op(o).kind, repr(sorted(model.op(o).attrs.items())), tuple(model.op(o).shape),
                  plan.blocks.get(o), tuple(model.op(i).shape for i in model.op(o).inputs)) for o in ops)


def steps_to_time(model: Model, plan, params: dict) -> tuple[list, int]:
    """``([(step, ops)], steps that are views)``: the compiled plan's steps that are not dense
    convs, one per :func:`signature`, each a :class:`~graph_tuner.executor.program.ProgramStep`."""
    prog = compile_model(model, plan, params)
    prog.run(np.random.default_rng(1).standard_normal(model.op(model.inputs[0]).shape, dtype=np.float32))
    convs = {lc.name: lc for lc in plan.layers}
    out, seen = [], set()
    for s in prog.steps:
        layers = [o for o in s.ops if o in convs]
        if s.category == "transform" or layers and all(not convs[o].workload.is_depthwise for o in layers):
            continue  # layout transforms; dense convs (bench_kernels.py's)
        key = signature(model, plan, s.ops)
        if key not in seen:
            seen.add(key)
            out.append(s)
    planned = {o for s in prog.steps for o in s.ops}
    views = sum(1 for op in model.ops if op.kind in ("concat", "flatten", "reshape") and op.name not in planned)
    return out, views


def one(model: Model, plan, params: dict, step, rounds: int, calls: int, folder: Path) -> str:
    """One step: ours (the compiled plan's kernel, on its own buffers) against the other
    runtimes on the cut-out model, whose outputs are checked against our executor's where the
    cut-out has a conv to plan (else the whole network's check in ``bench`` covers it)."""
    sub = cut_out(model, step.ops)
    if sub is None:
        return f"{step.name[:44]:<44} skipped: reads two tensors"
    layers = {lc.name: lc for lc in plan.layers}
    sub_params = {o: params[o] for o in step.ops if o in params}
    x = np.random.default_rng(1).standard_normal(sub.op(sub.inputs[0]).shape, dtype=np.float32)
    ours = None
    if any(o in layers for o in step.ops):
        configs = {o: layers[o].candidate.config for o in step.ops if o in layers}
        joins = {o: plan.blocks[o] for o in step.ops
                 if o not in layers and o in plan.blocks and len(model.op(o).shape) == 4}
        ours = compile_model(sub, plan_from_configs(sub, configs, joins), sub_params).run(x)[0]
    runners, notes = {"ours": step.fn}, []
    for rt, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
        r = make(sub, sub_params, x, num_threads(), folder)
        if isinstance(r, str):
            notes.append(f"{rt}: {r}")
            continue
        runners[rt], ref = r
        if ours is not None:
            np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
    return _line(step.name, plan.blocks.get(step.ops[-1], 1), runners, rounds, calls) + "".join(f"; {n}" for n in notes)


def _line(name: str, block: int, runners: dict, rounds: int, calls: int) -> str:
    times = timed_rounds(runners, rounds * calls, rounds=rounds)
    line = f"{name[:44]:<44} {f'NCHW{block}c' if block > 1 else 'plain':<9} ours {median_ms(times['ours']):.4f} ms"
    for rt in runners:
        if rt != "ours":
            ratio, lo, hi = paired_ratio(times[rt], times["ours"])
            line += f" | {rt} {median_ms(times[rt]):.4f}, {ratio:.2f}x ({lo:.2f}-{hi:.2f})"
    return line


def floors(rounds: int, calls: int, folder: Path) -> str:
    """Each runtime's time for a call that does next to nothing (a ReLU of 16 floats): the
    floor under every one-op time below, which a network pays once, not per op."""
    from kernels.elementwise import build_elementwise

    b = GraphBuilder("floor")
    model = b.build(b.relu(b.input((1, 16, 1, 1))))
    x = np.ones((1, 16, 1, 1), np.float32)
    kernel = build_elementwise((1, 16, 1, 1), 16, "relu", affine=False)
    out = np.empty(kernel.output_shape, np.float32)
    runners = {"ours": kernel.bind(x.reshape(kernel.input_shape), None, None, out)}
    for rt, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
        r = make(model, {}, x, num_threads(), folder)
        if not isinstance(r, str):
            runners[rt] = r[0]
    return _line("call floor (ReLU of 16 floats)", 16, runners, rounds, calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    print(f"{host_cpu().name}, {num_threads()} threads; the other's time / ours, paired by round (90% interval)")
    with tempfile.TemporaryDirectory() as folder:
        print(floors(args.rounds, args.calls, Path(folder)), flush=True)
        for name in args.models:
            model = load_model(name)
            plan = solve_log(model, shipped_log(name))
            params = model.params(seed=0)
            todo, views = steps_to_time(model, plan, params)
            print(f"{name}: {len(todo)} distinct steps besides dense convs; {views} concats/reshapes written in place")
            for step in todo:
                print("  " + one(model, plan, params, step, args.rounds, args.calls, Path(folder)), flush=True)


if __name__ == "__main__":
    main()
