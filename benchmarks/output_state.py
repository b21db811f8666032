"""Hand-run: what the memory a conv writes was last used for, and what that costs it.

    python benchmarks/output_state.py mobilenet-v2 [--records OPT.log] [--layers a,b] [--calls 300]

The model's plan (from ``--records``, else solved from the log shipped for this CPU) is
compiled, and each chosen conv step (default: the depthwise ones) is timed call by call,
its own kernel on the network's own buffers, after each of:

* ``own``: nothing: back to back, every line of its output is its own (as the tuner times);
* ``one-core``: numpy reads the output on the calling thread;
* ``all-cores``: every thread reads the output whole (:func:`kernels.sharing.build_reader`);
* ``consumer``: the next step of the program (for MobileNet-v2's depthwise convs, the 1x1 conv
  that reads the output);
* ``in network``: every other step of the network, those after it (the last run's) then
  those before it, as runs back to back have them.

Each column is the median of ``--calls`` calls in ms (the last: of a tenth of them, at least
20). Run nothing else meanwhile: the numbers are per call.
"""
from __future__ import annotations

import argparse

import numpy as np

from graph_tuner.commands import positive_int
from graph_tuner.executor import compile_model
from graph_tuner.plan_run import seeded_inputs
from kernels.jit import BoundKernel, host_cpu
from kernels import timing
from kernels.sharing import build_reader
from plan_args import add_plan_args, model_and_plan


def per_call(fn, before, calls: int) -> float:
    """Median ms of ``fn()`` over ``calls`` calls, each right after ``before()``."""
    return timing.per_call(fn, before, calls) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_plan_args(p)
    p.add_argument("--layers", help="comma-separated conv layers (default: the depthwise ones)")
    p.add_argument("--calls", type=positive_int, default=300)
    args = p.parse_args()
    model, plan = model_and_plan(p, args)
    prog = compile_model(model, plan, model.params(0))
    prog.set_inputs(*seeded_inputs(model))
    for _ in range(5):
        prog.execute()
    steps = prog.steps
    wanted = set(args.layers.split(",")) if args.layers else None
    print(f"{args.model} on {host_cpu().name}; per call ms (median of {args.calls})")
    print(f"{'step':28s} {'own':>7s} {'one-core':>9s} {'all-cores':>9s} {'consumer':>9s} {'in network':>10s}")
    for i, s in enumerate(steps):
        if s.category != "conv" or not isinstance(s.fn, BoundKernel) or i + 1 >= len(steps):
            continue
        if wanted is None and "depthwise" not in s.name or wanted is not None and s.name not in wanted:
            continue
        out = s.fn.keep[1]["out"].reshape(-1)
        sink = np.zeros(64, np.float32)
        reader = build_reader(out.size).bind(out, sink)
        others = [t.fn for t in steps[i + 1:] + steps[:i]]

        def network(others=others):
            for f in others:
                f()

        cols = [per_call(s.fn, lambda: None, args.calls), per_call(s.fn, out.sum, args.calls),
                per_call(s.fn, reader, args.calls), per_call(s.fn, steps[i + 1].fn, args.calls),
                per_call(s.fn, network, max(20, args.calls // 10))]
        print(f"{s.name[:28]:28s} {cols[0]:7.4f} {cols[1]:9.4f} {cols[2]:9.4f} {cols[3]:9.4f} {cols[4]:10.4f}",
              flush=True)


if __name__ == "__main__":
    main()
