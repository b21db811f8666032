"""Hand-run A/B per step in the network: a model built twice (a module constant at another value,
as in ab_builds.py), each listed step of each build timed right after that build's other steps
(the cache state a run leaves it in), the builds interleaved round by round.

    python benchmarks/layer_ab.py resnext-50-32x4d --set L1_WEIGHT_SHARE=0.25 --layers layer4_1_conv1,layer3_2_conv1

Prints each step's median ms in both builds and the changed build's time over the current's
(paired by round, 90% interval), then the same for whole runs. Session 25 found the weight
prefetch's burst this way (benchmarks/README.md). Run nothing else meanwhile.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ab_builds import build, parse_change
from graph_tuner.api import solve_log
from graph_tuner.executor import compile_model
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import paired_ratio
from graph_tuner.shipped import shipped_log


def step_rounds(progs: dict, layers: list[str], rounds: int, calls: int) -> dict:
    """``{(build, step or "run"): [[seconds, ...] per round]}``: each step right after its own
    program's other steps, each whole run back to back; builds in rotating order each round."""
    clock, names = time.perf_counter, list(progs)
    out = {(b, s): [] for b in names for s in [*layers, "run"]}
    for r in range(rounds):
        for b in names[r % len(names):] + names[:r % len(names)]:
            steps = progs[b].steps
            for layer in layers:
                i = next(j for j, s in enumerate(steps) if s.name == layer)
                others, fn, times = [s.fn for s in steps[i + 1:] + steps[:i]], steps[i].fn, []
                for _ in range(calls):
                    for f in others:
                        f()
                    t = clock()
                    fn()
                    times.append(clock() - t)
                out[(b, layer)].append(times)
            times = []
            for _ in range(calls):
                t = clock()
                progs[b].execute()
                times.append(clock() - t)
            out[(b, "run")].append(times)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--set", dest="change", metavar="[MODULE.]NAME=VALUE", required=True,
                    help="build the changed build with this constant (a Python literal; default module kernels.conv2d)")
    ap.add_argument("--layers", required=True, help="steps to time, comma-separated (names as `run --json` shows)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=4, help="calls per step and build per round")
    args = ap.parse_args()
    module, name, value = parse_change(ap, args.change)
    model = load_model(args.model)
    plan = solve_log(model, shipped_log(args.model))
    params, x = model.params(seed=0), seeded_input(model)
    progs = {"current": compile_model(model, plan, params), args.change: build(model, plan, params, module, name, value)}
    ref = progs["current"].run(x)[0]
    np.testing.assert_allclose(progs[args.change].run(x)[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    layers = args.layers.split(",")
    for b, p in progs.items():
        missing = [s for s in layers if s not in {t.name for t in p.steps}]
        if missing:
            ap.error(f"no step {missing[0]!r} in the {b} build; its steps: {', '.join(t.name for t in p.steps)}")
    rounds = step_rounds(progs, layers, args.rounds, args.calls)
    print(f"{args.model}: {args.rounds} rounds x {args.calls} calls; time in ms, then {args.change}'s over current's")
    for s in [*layers, "run"]:
        cur, new = rounds[("current", s)], rounds[(args.change, s)]
        ratio, lo, hi = paired_ratio(new, cur)
        print(f"  {s:<26} current {np.median(cur) * 1e3:8.3f}  changed {np.median(new) * 1e3:8.3f}  "
              f"{ratio:.3f}x (90% interval {lo:.3f}-{hi:.3f})")


if __name__ == "__main__":
    main()
