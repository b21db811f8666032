"""Hand-run A/B: a model built twice, timed end to end side by side with onnxruntime and the
host probe: as shipped (the plan solved from the log shipped for this CPU, today's kernels),
and changed (the plan from another log, or a module constant at another value: a
``kernels.conv2d`` one by its name, any other by ``module.NAME``).

    python benchmarks/ab_builds.py resnet-50 --set L1_WEIGHT_SHARE=0.25 [--rounds 40] [--calls 4]
    python benchmarks/ab_builds.py mobilenet-v2 --set graph_tuner.executor.compile.FUSE_DW_PROJECT=False
    python benchmarks/ab_builds.py resnet-18 --log data/rocketlake/resnet-18.log.gz

Both builds run on the same seeded weights and input, their outputs checked equal first;
rounds interleave every runner in rotating order (``graph_tuner.rounds.timed_rounds``), and
each ratio pairs rounds (``paired_ratio``): above 1, that runner took longer than the current
build. The host probe (a one-thread conv) says whether the host was calm: about 100 GFLOP/s
on the Zen 3 EPYC, 115 on the Zen 4 one, before session 30 put its buffers on a cache line
(``graph_tuner.host_state.PROBE_VERSION``: on the rocketlake Xeon it then read about 1.3x).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import tempfile
from pathlib import Path

import numpy as np

import kernels.conv2d as conv
from graph_tuner.api import solve_log
from graph_tuner.bench import HOST_PROBE
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from graph_tuner.runtimes import onnxruntime_runner
from graph_tuner.executor import compile_model
from graph_tuner.host_state import probe_call
from graph_tuner.loading import load_model
from graph_tuner.shipped import shipped_log
from kernels.threads import num_threads
from kernels.jit import clear_kernel_caches


def build(model, plan, params, module, name: str, value) -> object:
    """The plan's program with ``module.<name>`` set to ``value`` while it compiles."""
    old = getattr(module, name)
    setattr(module, name, value)
    clear_kernel_caches()  # kernels built with the other value must not be reused
    try:
        return compile_model(model, plan, params)
    finally:
        setattr(module, name, old)
        clear_kernel_caches()


def parse_change(ap: argparse.ArgumentParser, change: str) -> tuple[object, str, object]:
    """``(module, name, value)`` of a ``--set [MODULE.]NAME=VALUE`` (default module kernels.conv2d;
    the value a Python literal, cast to the constant's type); ``ap.error`` if there is no such constant."""
    name, _, text = change.partition("=")
    where, _, name = name.rpartition(".")
    try:
        module = importlib.import_module(where) if where else conv
    except ImportError:
        ap.error(f"--set: no module {where!r}")
    if not hasattr(module, name):
        ap.error(f"{module.__name__} has no constant {name!r}")
    try:
        return module, name, type(getattr(module, name))(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        ap.error(f"--set {change}: the value is not a Python literal")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--log", help="solve the changed build's plan from this tuning log")
    ap.add_argument("--set", dest="change", metavar="[MODULE.]NAME=VALUE",
                    help="build the changed build with this constant (a Python literal; default module kernels.conv2d)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--calls", type=int, default=4, help="calls per runner per round")
    args = ap.parse_args()
    if not (args.log or args.change):
        ap.error("say what changes: --log, --set or both")
    module, name, value = parse_change(ap, args.change) if args.change else (None, "", None)

    model = load_model(args.model)
    plan = solve_log(model, shipped_log(args.model))
    params, x = model.params(seed=0), seeded_input(model)
    current = compile_model(model, plan, params)
    other = solve_log(model, args.log) if args.log else plan
    if args.change:
        changed = build(model, other, params, module, name, value)
    else:
        changed = compile_model(model, other, params)
    ref = current.run(x)[0]
    np.testing.assert_allclose(changed.run(x)[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    label = " ".join(filter(None, [args.log and Path(args.log).parent.name + " log", args.change]))
    print(f"predicted: current {plan.cost:.2f} ms, changed {other.cost:.2f} ms (each by its own log)")
    runners = {"current": current.execute, label: changed.execute}
    with tempfile.TemporaryDirectory() as tmp:
        ort = onnxruntime_runner(model, params, x, num_threads(), Path(tmp))
        if isinstance(ort, str):
            print(f"note: {ort}")
        else:
            runners["onnxruntime"] = ort[0]
        probe, flops = probe_call()
        rounds = timed_rounds({**runners, HOST_PROBE: probe}, args.rounds * args.calls, rounds=args.rounds)
    gflops = [flops / np.median(r) / 1e9 for r in rounds.pop(HOST_PROBE)]
    print(f"{args.model}: {args.rounds} rounds x {args.calls} calls, {num_threads()} threads; host probe "
          f"{np.median(gflops):.0f} GFLOP/s (range {min(gflops):.0f}-{max(gflops):.0f})")
    for k, r in rounds.items():
        med = median_ms(r)
        line = f"  {k:<24} median {med:8.3f} ms"
        if k != "current":
            ratio, lo, hi = paired_ratio(r, rounds["current"])
            line += f"  {ratio:.3f}x current's time (90% interval {lo:.3f}-{hi:.3f})"
        print(line)


if __name__ == "__main__":
    main()
