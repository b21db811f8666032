"""Hand-run: where OpenVINO spends a network's time, next to where our plan does.

    python benchmarks/openvino_profile.py resnext-50-32x4d [--rounds 5] [--repeat 20]

OpenVINO's CPU plugin profiles every node it runs (``PERF_COUNT``; each node's time and the
primitive that ran it, e.g. oneDNN's ``brgconv_avx512_1x1_f32``). Its node names are those of
its fused graph, not the model's layers, so the two sides are summed by kind, not matched
node to node: OpenVINO's by the primitive, ours by the conv's kernel size and grouping
(1x1, 3x3 grouped, 3x3 depthwise, ...) or the step's category. Our plan is the one
``graph-tuner solve`` makes from the log shipped for this CPU. The rounds alternate the two:
in each, OpenVINO's profile over ``repeat`` runs (each node's median) and our program's
(:meth:`Program.profile`); a kind's figure is its median over the rounds, so both sides see
the host in the same states. The profiles' totals are printed with each side's whole-run
median, to show how much the profiling itself adds.
"""
from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

import numpy as np

from graph_tuner.api import solve_log
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.runtimes import onnx_file, openvino_config
from graph_tuner.shipped import shipped_log
from kernels.threads import num_threads


def our_kind(model, step) -> str:
    """A profile step's kind: its conv's kernel and grouping, else its category."""
    if step.category != "conv":
        return step.category
    kinds = []
    for name in step.name.split("+"):  # a fused step: "depthwise+project"
        wl = model.workload(name)
        kh, kw = wl.kernel_shape[2:]
        group = ("" if wl.groups == 1 else " depthwise" if wl.groups == wl.data_shape[1] else " grouped")
        kinds.append(f"{kh}x{kw}{group}")
    return "conv " + " + ".join(kinds)


def openvino_request(model, params, x, threads: int, folder: Path):
    """An infer request of the model in OpenVINO, profiled, run once."""
    import openvino as ov

    core = ov.Core()
    config = {**openvino_config(threads), "PERF_COUNT": True}  # as graph-tuner bench sets it, profiled
    request = core.compile_model(core.read_model(onnx_file(model, params, folder)), "CPU",
                                 config).create_infer_request()
    request.infer({0: x})
    return request


def openvino_profile(request, x, repeat: int) -> tuple[dict[str, float], float]:
    """``{primitive: ms}`` (each node's median over ``repeat`` runs, summed by primitive) and the median run."""
    per_node, kind, walls = collections.defaultdict(list), {}, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        request.infer({0: x})
        walls.append(time.perf_counter() - t0)
        for p in request.get_profiling_info():
            per_node[p.node_name].append(p.real_time.total_seconds() * 1e3)
            kind[p.node_name] = p.exec_type
    by_kind: dict[str, float] = collections.defaultdict(float)
    for node, ms in per_node.items():
        by_kind[kind[node]] += float(np.median(ms))
    return dict(by_kind), float(np.median(walls)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20, help="runs per profile (default 20)")
    args = ap.parse_args()
    model = load_model(args.model)
    params = model.params(0)
    x = seeded_input(model)
    prog = compile_model(model, solve_log(model, shipped_log(model.name)), params)
    prog.set_inputs(x)
    request = openvino_request(model, params, x, num_threads(), Path(tempfile.mkdtemp()))
    ours: dict[str, list[float]] = collections.defaultdict(list)
    theirs: dict[str, list[float]] = collections.defaultdict(list)
    walls = {"ours": [], "OpenVINO": []}
    for _ in range(args.rounds):
        by_kind, wall = openvino_profile(request, x, args.repeat)
        for k, ms in by_kind.items():
            theirs[k].append(ms)
        walls["OpenVINO"].append(wall)
        walls["ours"].append(prog.benchmark(repeat=args.repeat).median_s * 1e3)
        summed: dict[str, float] = collections.defaultdict(float)
        for s in prog.profile(repeat=args.repeat).steps:
            summed[our_kind(model, s)] += s.median_ms
        for k, ms in summed.items():
            ours[k].append(ms)
    print(f"{model.name}: {args.rounds} rounds of {args.repeat} runs, {num_threads()} threads; medians over rounds")
    for side, table in (("ours", ours), ("OpenVINO", theirs)):
        rows = sorted(((k, float(np.median(v))) for k, v in table.items()), key=lambda kv: -kv[1])
        total = sum(ms for _, ms in rows)
        print(f"  {side}: whole run {np.median(walls[side]):.3f} ms, profile {total:.3f} ms")
        for k, ms in rows:
            if ms >= 0.005:
                print(f"    {k:<34} {ms:8.3f} ms")


if __name__ == "__main__":
    main()
