"""Hand-run: where OpenVINO spends a network's time, next to where our plan does.

    python benchmarks/openvino_profile.py resnext-50-32x4d [--rounds 5] [--repeat 20]

OpenVINO's CPU plugin profiles every node it runs (``PERF_COUNT``; each node's time and the
primitive that ran it, e.g. oneDNN's ``brgconv_avx512_1x1_f32``). Its node names are those of
its fused graph, not the model's layers, so the two sides are summed by kind, not matched
node to node: OpenVINO's by the primitive, ours by the kernel size and grouping of the convs
a step runs (``1x1``, ``3x3 grouped``, ``3x3 depthwise + 1x1`` for a fused pair, ...) or the
step's category. Our plan is the one ``graph-tuner solve`` makes from the log shipped for this
CPU. Each round takes OpenVINO's profile over ``repeat`` runs (each node's median), our
program's (:meth:`Program.profile`), and both runs unprofiled; a figure is its median over the
rounds, so both sides see the host in the same states. Both profiles are scaled as ours is,
so that a profile's kinds sum to its own median profiled run.

``--layers KIND`` (e.g. ``1x1``) lists that kind's conv steps one by one as well: ours against the
OpenVINO node that ran the same conv (the node whose fused layers, its ``originalLayersNames``,
hold the conv or the first of its epilogue's ops: :func:`layer_rows`), with the ratio and both
sides' GFLOP/s, so a gap in a kind's sum can be traced to the shapes it comes from.
"""
from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

import numpy as np

from graph_tuner.api import solve_log
from graph_tuner.errors import GraphTunerError
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.runtimes import openvino_compiled, openvino_runner
from graph_tuner.shipped import shipped_log
from kernels.threads import num_threads
from kernels.timing import measure


def our_kind(model, step) -> str:
    """A profile step's kind: the kernel and grouping of the convs it runs, else its category."""
    kinds = []
    for name in step.ops:
        if model.op(name).kind == "conv2d":
            wl = model.workload(name)
            kh, kw = wl.kernel_shape[2:]
            kinds.append(f"{kh}x{kw}" + ("" if wl.groups == 1 else " depthwise" if wl.is_depthwise else " grouped"))
    return "conv " + " + ".join(kinds) if step.category == "conv" and kinds else step.category


def scaled(by_kind: dict[str, float], run_ms: float) -> dict[str, float]:
    """The kinds scaled to sum to ``run_ms``, as :meth:`Program.profile` scales our steps.

    >>> scaled({"a": 1.0, "b": 3.0}, 8.0)
    {'a': 2.0, 'b': 6.0}
    """
    total = sum(by_kind.values())
    return {k: ms * run_ms / total for k, ms in by_kind.items()} if total else by_kind


def openvino_profile(request, x, repeat: int) -> tuple[dict[str, float], float, dict[str, float]]:
    """``{primitive: ms}`` (each node's median over ``repeat`` runs, summed by primitive, scaled
    to the median run), the median profiled run and ``{node: median ms}`` (scaled alike, as our
    steps are)."""
    per_node, kind, walls = collections.defaultdict(list), {}, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        request.infer({0: x})
        walls.append(time.perf_counter() - t0)
        for p in request.get_profiling_info():
            per_node[p.node_name].append(p.real_time.total_seconds() * 1e3)
            kind[p.node_name] = p.exec_type
    medians = {node: float(np.median(ms)) for node, ms in per_node.items()}
    by_kind: dict[str, float] = collections.defaultdict(float)
    for node, ms in medians.items():
        by_kind[kind[node]] += ms
    run_ms = float(np.median(walls)) * 1e3
    return scaled(by_kind, run_ms), run_ms, scaled(medians, run_ms)


def fused_names(compiled) -> dict[str, tuple[str, set[str]]]:
    """``{node: (primitive, the model's layers fused into it)}`` from OpenVINO's runtime graph."""
    out = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        out[op.get_friendly_name()] = (rt["primitiveType"].astype(str),
                                       set(rt["originalLayersNames"].astype(str).split(",")))
    return out


def layer_rows(model, steps: dict[str, list[float]], profiled_steps: dict, kind: str,
               nodes: dict[str, list[float]], fused: dict[str, tuple[str, set[str]]]) -> None:
    """Print ``kind``'s conv steps against the OpenVINO nodes that ran their convs (medians over
    rounds); the sums cover the matched steps only."""
    owner: dict[str, list[str]] = collections.defaultdict(list)
    for node, (_, layers) in fused.items():
        for layer in layers:
            owner[layer].append(node)
    print(f"  {kind} convs one by one (ms, median over rounds; GFLOP/s; OpenVINO's time / ours):")
    ours_sum = theirs_sum = 0.0
    unmatched, shared = [], collections.Counter()
    rows = []
    for name, times in steps.items():
        step = profiled_steps[name]
        if our_kind(model, step) != f"conv {kind}":
            continue
        at = next(i for i, o in enumerate(step.ops) if model.op(o).kind == "conv2d")
        conv = step.ops[at]
        # The node that ran the conv: OpenVINO's names for a fused conv are its epilogue's (the
        # conv's own name is folded away), so the first of the conv's and its epilogue's ops that
        # a node holds names it (a residual add further on may be fused into the other branch's
        # conv), not a prologue's op before it (a separate eltwise node); a convolution first.
        first = next((o for o in step.ops[at:] if o in owner), None)
        held = sorted(owner.get(first, []), key=lambda n: "conv" not in fused[n][0])
        node = held[0] if held else None
        if node not in nodes or np.median(nodes[node]) <= 0:
            unmatched.append(conv)
            continue
        shared[node] += 1
        rows.append((conv, model.workload(conv), float(np.median(times)), float(np.median(nodes[node])), node))
    for conv, wl, ours, theirs, node in rows:
        gflop = wl.flops / 1e9
        ours_sum, theirs_sum = ours_sum + ours, theirs_sum + theirs
        shape = f"{wl.data_shape[1]}->{wl.kernel_shape[0]} @{wl.data_shape[2]}x{wl.data_shape[3]}"
        mark = "  (node shared)" if shared[node] > 1 else ""
        print(f"    {conv:<34} {shape:<20} ours {ours:7.3f} ({gflop / ours * 1e3:4.0f})  OpenVINO {theirs:7.3f} "
              f"({gflop / theirs * 1e3:4.0f}, {fused[node][0]})  {theirs / ours:5.2f}x{mark}")
    if rows:
        print(f"    sum of {len(rows)}: ours {ours_sum:.3f} ms, OpenVINO {theirs_sum:.3f} ({theirs_sum / ours_sum:.3f}x)")
    if unmatched:
        print(f"    no OpenVINO node timed for {len(unmatched)}: {', '.join(unmatched)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20, help="runs per profile (default 20)")
    ap.add_argument("--layers", metavar="KIND", help="also list this kind's conv steps one by one (e.g. 1x1)")
    args = ap.parse_args()
    try:
        model = load_model(args.model)
    except GraphTunerError as e:
        ap.error(str(e))
    params = model.params(0)
    x = seeded_input(model)
    prog = compile_model(model, solve_log(model, shipped_log(model.name)), params)
    if args.layers:  # before the rounds: a kind no step has is a typo, said now
        args.layers = args.layers.removeprefix("conv ")
        kinds = sorted({k.removeprefix("conv ") for k in (our_kind(model, s) for s in prog.steps)
                        if k.startswith("conv ")})
        if args.layers not in kinds:
            ap.error(f"--layers {args.layers}: no conv steps of that kind in {model.name}'s plan; "
                     f"its kinds: {', '.join(kinds)}")
    prog.set_inputs(x)
    with tempfile.TemporaryDirectory() as folder:
        profiled = openvino_compiled(model, params, num_threads(), Path(folder), PERF_COUNT=True)
        plain = openvino_runner(model, params, x, num_threads(), Path(folder))
    if isinstance(profiled, str) or isinstance(plain, str):
        raise SystemExit(profiled if isinstance(profiled, str) else plain)
    request = profiled.create_infer_request()
    request.infer({0: x})
    ours: dict[str, list[float]] = collections.defaultdict(list)
    theirs: dict[str, list[float]] = collections.defaultdict(list)
    runs: dict[str, list[float]] = collections.defaultdict(list)
    nodes: dict[str, list[float]] = collections.defaultdict(list)
    steps: dict[str, list[float]] = collections.defaultdict(list)
    profiled_steps: dict = {}  # name -> the step (its ops and category)
    for _ in range(args.rounds):
        by_kind, profiled_ms, per_node = openvino_profile(request, x, args.repeat)
        for node, ms in per_node.items():
            nodes[node].append(ms)
        runs["OpenVINO profiled"].append(profiled_ms)
        for k, ms in by_kind.items():
            theirs[k].append(ms)
        runs["OpenVINO"].append(measure(plain[0], repeat=args.repeat, number=1).median_s * 1e3)
        runs["ours"].append(prog.benchmark(repeat=args.repeat).median_s * 1e3)
        summed: dict[str, float] = collections.defaultdict(float)
        for s in prog.profile(repeat=args.repeat).steps:
            summed[our_kind(model, s)] += s.median_ms
            steps[s.name].append(s.median_ms)
            profiled_steps[s.name] = s
        for k, ms in summed.items():
            ours[k].append(ms)
    print(f"{model.name}: {args.rounds} rounds of {args.repeat} runs, {num_threads()} threads; medians over "
          f"rounds; runs: ours {np.median(runs['ours']):.3f} ms, OpenVINO {np.median(runs['OpenVINO']):.3f} "
          f"({np.median(runs['OpenVINO profiled']):.3f} profiled)")
    for side, table in (("ours", ours), ("OpenVINO", theirs)):
        rows = sorted(((k, float(np.median(v))) for k, v in table.items()), key=lambda kv: -kv[1])
        print(f"  {side}: profile {sum(ms for _, ms in rows):.3f} ms")
        for k, ms in rows:
            if ms >= 0.005:
                print(f"    {k:<34} {ms:8.3f} ms")
    if args.layers:
        layer_rows(model, steps, profiled_steps, args.layers, nodes, fused_names(profiled))


if __name__ == "__main__":
    main()
