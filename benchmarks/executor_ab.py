"""Hand-run A/B of the executor's run-time structure on the shipped plans, in one process:

* ``stepwise``: every step called from Python, every concat a copy (the executor before
  kernels.sequence and executor.memory);
* ``views``: concats written in place and reshapes as views, steps still called from Python;
* ``native``: the same program as one native call per run (what ``compile_model`` builds).

    python benchmarks/executor_ab.py mobilenet-v2 densenet-121 inception-v3 [--repeat 200]

Plans are solved from this CPU's shipped logs (``data/<cpu>/``); the three programs share
weights and input and their outputs are checked equal first. Rounds interleave them
(``graph_tuner.rounds.timed_rounds``); each ratio pairs rounds, with a 90% interval: above 1,
that build took longer than ``native``. Also printed: a profile's median run (since session 28
timed inside the native call, the clock read between steps), against which the wall time shows
what the timing costs.
"""
from __future__ import annotations

import argparse
from unittest import mock

import numpy as np

from graph_tuner.api import solve_log
from graph_tuner.executor import compile as compile_mod
from graph_tuner.executor import compile_model
from graph_tuner.executor.memory import Views
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import paired_ratio, timed_rounds
from graph_tuner.shipped import shipped_log
from kernels.jit import host_cpu


def programs(name: str) -> dict:
    model = load_model(name)
    log = shipped_log(name)
    if log is None:
        raise SystemExit(f"no shipped log for {name} on {host_cpu().name}")
    plan = solve_log(model, log)
    params = model.params(0)
    native = compile_model(model, plan, params)
    with mock.patch.object(compile_mod, "_views", lambda *a: Views({}, set())):
        copies = compile_model(model, plan, params)
    x = seeded_input(model)
    want = native.run(x)[0]
    for p in (copies, native):
        p.set_inputs(x)
        p.execute_stepwise()
        np.testing.assert_allclose(p.outputs[0], want, rtol=1e-5, atol=1e-5)
    return {"stepwise": copies.execute_stepwise, "views": native.execute_stepwise, "native": native.execute}, native


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    print(f"CPU {host_cpu().name}; ratios: time / native's time, median over rounds [90% interval]")
    for name in args.models:
        runners, native = programs(name)
        t = timed_rounds(runners, args.repeat)
        med = {k: 1e3 * float(np.median([v for r in rounds for v in r])) for k, rounds in t.items()}
        prof = native.profile(repeat=50)
        cells = [f"{k} {med[k]:.3f} ms" + ("" if k == "native" else " ({:.3f} [{:.3f}-{:.3f}])".format(
            *paired_ratio(t[k], t["native"]))) for k in runners]
        print(f"{name}: {len(native.steps)} steps, {native.foreign_calls} native call(s); " + "; ".join(cells)
              + f"; profiled run {prof.total_ms:.3f} ms")


if __name__ == "__main__":
    main()
