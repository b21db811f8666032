"""Hand-run: the state the network leaves a step's memory in, and what each part of it costs.

    python benchmarks/output_state.py mobilenet-v2 [--records OPT.log] [--layers a,b] [--calls 300]

The model's plan (from ``--records``, else solved from the log shipped for this CPU) is
compiled, and each chosen step (``--layers``: any of its steps that is one generated kernel,
conv or not; default: the depthwise convs) is timed call by call, its own kernel on the
network's own buffers, after each of:

* ``own``: nothing: back to back, every line of its output is its own (as the tuner times);
* ``one-core``: numpy reads the output on the calling thread;
* ``all-cores``: every thread reads the output whole (:func:`kernels.sharing.build_reader`);
* ``producer``: the step before it, which has just written (the most of) its input (the first
  step's: the last one);
* ``flushed``: every thread reads 1.5x the last-level cache, then the step before it runs: the
  input as its producer leaves it, and everything else (its output, weights, code, page
  walks) as cold as a network's last run left it, or colder;
* ``consumer``: the next step of the program (for MobileNet-v2's depthwise convs, the 1x1 conv
  that reads the output; the last step's: the first);
* ``in network``: every other step of the network, those after it (the last run's) then
  those before it, as runs back to back have them.

``producer`` and ``flushed`` apart say whether a step's time in the network is its input's
state or the rest's: ResNeXt-50's max pool (session 50) took 0.066 ms after its producer,
0.111 flushed and 0.112 in the network, so the rest (its 0.8 MB output, written over lines
no cache holds) cost it the difference.

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
    chosen = [i for i, s in enumerate(steps) if isinstance(s.fn, BoundKernel)
              and (s.name in wanted if wanted else s.category == "conv" and "depthwise" in s.name)]
    missing = (wanted or set()) - {steps[i].name for i in chosen}
    if missing:
        p.error(f"no step of one generated kernel named {', '.join(sorted(missing))}")
    print(f"{args.model} on {host_cpu().name}; per call ms (median of {args.calls})")
    names = ("own", "one-core", "all-cores", "producer", "flushed", "consumer", "in network")
    print(f"{'step':28s} " + " ".join(f"{n:>10s}" for n in names))
    sink = np.zeros(64, np.float32)
    cold = np.ones(host_cpu().l3_bytes * 3 // 8, np.float32)  # 1.5x the last-level cache
    flush = build_reader(cold.size).bind(cold, sink)
    for i in chosen:
        s = steps[i]
        producer, others = steps[i - 1].fn, [t.fn for t in steps[i + 1:] + steps[:i]]

        def network(others=others):
            for f in others:
                f()

        def flushed(producer=producer):
            flush()
            producer()

        arrays = s.fn.keep[1]  # a kernel's arrays by name (a fused pair's: its own bound kernels)
        out = arrays.get("out") if isinstance(arrays, dict) else None
        readers = [None, None]
        if out is not None:
            out = out.reshape(-1)
            readers = [out.sum, build_reader(out.size).bind(out, sink)]
        befores = [lambda: None, *readers, producer, flushed, steps[(i + 1) % len(steps)].fn, network]
        calls = [args.calls] * 6 + [max(20, args.calls // 10)]
        cols = [per_call(s.fn, b, n) if b is not None else float("nan") for b, n in zip(befores, calls)]
        print(f"{s.name[:28]:28s} " + " ".join(f"{c:10.4f}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
