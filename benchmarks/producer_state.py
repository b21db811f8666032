"""Hand-run: each conv's candidates timed with their input as the producer leaves it.

    python benchmarks/producer_state.py resnet-50 [--log LOG] [-o PRODUCER.log] [--hot-out HOT.log]

The tuner times a config with its input hot (``kernels.tuner.KernelTimer``: weights from
memory, activations in cache, as if written a moment ago by this thread). In the network the
producer has just written the input on every thread, so each core first reads lines the others
hold modified, and what that costs depends on the config (its input block, its tile). Here
every candidate a solve of ``LOG`` (default: the log shipped for this CPU) considers (each
layer's ``top_k`` 20) is timed both ways, in interleaved rounds, with the tuner's epilogue and
weights from memory: back to back ("hot"), and right after an elementwise pass over its input
on every thread in the config's input layout ("after write"). Each call is timed on its own
(:func:`kernels.timing.per_call`: a few microseconds of the interpreter's, alike for a
workload's candidates: convs of tens of microseconds and up are what this is for).

Printed per workload (a layer's Winograd candidates apart, under their GEMM's): the fastest
config each way, and how much slower than the best after a write the hot timing's pick runs
then. ``-o`` writes a log of the after-write times: those candidates' conv records (no others:
a solve with a larger ``--top-k`` sees no more), the log's transforms and step timings, no
in-network ratios. Then ``graph-tuner solve MODEL --records PRODUCER.log -o P.log`` and
``python benchmarks/log_ab.py MODEL SHIPPED_PLAN.log P.log --plans`` run the two plans side by
side. ``--hot-out`` writes the hot times the same way, for a plan solved with the same protocol.
"""
from __future__ import annotations

import argparse
import statistics
import sys

from graph_tuner.api import GraphTuner
from graph_tuner.atomic import atomic_write_all
from graph_tuner.candidates import match_key
from graph_tuner.commands import check_paths
from graph_tuner.errors import GraphTunerError
from graph_tuner.loading import load_model
from graph_tuner.records import format_record, with_costs
from graph_tuner.shipped import shipped_logs
from graph_tuner.tuning import model_timer
from kernels.elementwise import build_elementwise
from kernels.jit import host_cpu
from kernels.timing import cold_arrays, per_call
from kernels.tuner import PARAMETERS, kernel_arguments

ROUNDS, CALLS, WARMUP = 3, 22, 3  # per state: rounds interleaving a workload's candidates; calls a round


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--log", help="tuning log (default: the one shipped for this CPU)")
    ap.add_argument("-o", "--out", help="write the after-write times as a tuning log")
    ap.add_argument("--hot-out", help="write the hot times as a tuning log")
    args = ap.parse_args()
    try:
        model = load_model(args.model)
        log = args.log or shipped_logs(model.name).get(host_cpu().name)
        if log is None:
            ap.error(f"no log shipped for {model.name} on this CPU ({host_cpu().name}); pass --log")
        check_paths({"--log": log}, {"-o": args.out, "--hot-out": args.hot_out})
        gt = GraphTuner(model, log)
    except GraphTunerError as e:
        ap.error(str(e))
    for w in gt.warnings:
        print(f"warning: {w}", file=sys.stderr)
    timer = model_timer(model)
    by_workload: dict = {}  # what a record times (a Winograd GEMM for its candidates) -> config -> candidate
    skipped = 0
    for name, cs in gt.candidates.items():
        for c in cs:
            w = match_key(c.record.workload)  # the model's (float32) spelling, as the timer's tables key it
            if w != match_key(gt.flow.workloads[name]) and w not in timer.winograd:
                skipped += 1  # a GEMM two of the model's conv workloads share: no one conv times it
                continue
            by_workload.setdefault(w, {}).setdefault(c.config, (c, gt.flow.workloads[name]))
    print(f"{model.name} ({host_cpu().name}): {sum(map(len, by_workload.values()))} candidates of "
          f"{len(by_workload)} workloads" + (f", {skipped} of shared Winograd GEMMs left out" if skipped else ""),
          flush=True)
    timed = {}
    for w, configs in by_workload.items():
        times = _time_both(timer, w, configs)
        timed.update({(w, cfg): (configs[cfg][0], t) for cfg, t in times.items()})
        hot = min(times, key=lambda c: times[c][0])
        after = min(times, key=lambda c: times[c][1])
        layer = configs[hot][1]
        print(f"  {layer.data_shape} -> {layer.out_channels} k{layer.kernel_shape[2]}x{layer.kernel_shape[3]}"
              f"{'' if w == match_key(layer) else ' Winograd'}: "
              f"{len(times)} configs; hot's pick {_name(hot)} {times[hot][0] * 1e3:.3f} ms, after a write "
              f"{times[hot][1] * 1e3:.3f} ({times[hot][1] / times[after][1]:.3f}x the best then, {_name(after)} "
              f"{times[after][1] * 1e3:.3f})", flush=True)
    outputs = {path: _log_text(gt.log, {k: (c, t[state]) for k, (c, t) in timed.items()})
               for path, state in ((args.out, 1), (args.hot_out, 0)) if path}
    atomic_write_all(outputs)
    for path in outputs:
        print(f"wrote {path}")


def _time_both(timer, w, configs) -> dict:
    """config -> (hot seconds, after-write seconds): medians of the rounds' medians."""
    setups = []
    for cfg, (c, layer) in configs.items():
        k = timer.kernel(w, cfg)
        arrays = kernel_arguments(k)
        run = cold_arrays(k.bind, arrays, PARAMETERS)
        ew = build_elementwise(layer.data_shape, cfg.ic_bn if cfg.ic_bn > 1 else None, "relu", affine=False)
        data = arrays["data"].reshape(ew.input_shape)  # relu in place: the values stay valid inputs
        setups.append((cfg, run, ew.bind(x=data, out=data)))
    rounds = {cfg: ([], []) for cfg, _, _ in setups}
    for _ in range(ROUNDS):
        for cfg, run, write in setups:
            for state, before in enumerate((_nothing, write)):
                rounds[cfg][state].append(per_call(run, before, CALLS, warmup=WARMUP))
    return {cfg: (statistics.median(h), statistics.median(a)) for cfg, (h, a) in rounds.items()}


def _nothing() -> None:
    pass


def _name(cfg) -> str:
    return f"({cfg.ic_bn}, {cfg.oc_bn}, ow {cfg.ow_bn}" + (f", oh {cfg.oh_bn})" if cfg.oh_bn > 1 else ")")


def _log_text(log, timed: dict) -> str:
    """The log's transform and step records, then each timed candidate's conv record at its new time."""
    records = [*log.transforms, *log.steps] + [with_costs(c.record, [seconds]) for c, seconds in timed.values()]
    return "".join(format_record(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
