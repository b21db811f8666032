"""Hand-run: each conv's candidates timed with their input as the producer leaves it.

    python benchmarks/producer_state.py resnet-50 [--log LOG] [-o PRODUCER.log] [--hot-out HOT.log]

The tuner times a config with its input hot (``kernels.tuner.KernelTimer``: weights from
memory, activations in cache, as if written a moment ago by this thread). In the network the
producer has just written the input on every thread, so each core first reads lines the other
holds modified, and what that costs depends on the config (its input block, its tile). Here
every candidate a solve of ``LOG`` (default: the log shipped for this CPU) considers, for
every distinct workload, is timed both ways, in interleaved rounds, with the tuner's epilogue
and weights from memory: back to back ("hot"), and right after an elementwise pass over its
input on every thread in the config's input layout ("after write"). Each call is timed on its
own (``time.perf_counter`` around it; a few microseconds of the interpreter's, alike for a
workload's candidates: convs of tens of microseconds and up are what this is for).

Printed per workload (a layer's Winograd candidates apart, under their GEMM's): the fastest
config each way, and how much slower than the best after a write the hot timing's pick runs then. ``-o`` writes a log of the after-write times (the
conv records a solve needs, the log's transforms and step timings, no in-network ratios):
``graph-tuner solve MODEL --records PRODUCER.log -o P.log``, then ``python
benchmarks/log_ab.py MODEL SHIPPED_PLAN.log P.log --plans`` runs the two plans side by side.
``--hot-out`` writes the hot times the same way, for a plan solved with the same protocol.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from graph_tuner.api import GraphTuner
from graph_tuner.candidates import match_key
from graph_tuner.atomic import atomic_write_text
from graph_tuner.errors import GraphTunerError
from graph_tuner.loading import load_model
from graph_tuner.records import make_conv2d_record, read_records
from graph_tuner.shipped import shipped_log
from graph_tuner.tuning import model_timer
from kernels.elementwise import build_elementwise
from kernels.timing import cold_arrays, random_array
from kernels.tuner import PARAMETERS

ROUNDS, CALLS = 3, 25  # per state: rounds interleaving a workload's candidates, calls per round (3 warm-up)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--log", help="tuning log (default: the one shipped for this CPU)")
    ap.add_argument("-o", "--out", help="write the after-write times as a tuning log")
    ap.add_argument("--hot-out", help="write the hot times as a tuning log")
    args = ap.parse_args()
    try:
        model = load_model(args.model)
        log = args.log or shipped_log(model.name)
        if log is None:
            ap.error(f"no shipped log for {model.name}; pass --log")
        gt = GraphTuner(model, log)
    except GraphTunerError as e:
        ap.error(str(e))
    timer = model_timer(model)
    by_workload: dict = {}  # the record's workload (a Winograd GEMM's for its candidates) -> config -> candidate
    for name, cs in gt.candidates.items():
        for c in cs:
            by_workload.setdefault(c.record.workload, {}).setdefault(c.config, (c, gt.flow.workloads[name]))
    print(f"{model.name}: {sum(map(len, by_workload.values()))} candidates of {len(by_workload)} workloads", flush=True)
    timed = {}
    for w, configs in by_workload.items():
        times = _time_both(timer, w, configs)
        timed.update({(w, cfg): (configs[cfg][0], t) for cfg, t in times.items()})
        hot = min(times, key=lambda c: times[c][0])
        after = min(times, key=lambda c: times[c][1])
        layer = configs[hot][1]
        print(f"  {layer.data_shape} -> {layer.out_channels} k{layer.kernel_shape[2]}x{layer.kernel_shape[3]}"
              f"{'' if match_key(w) == match_key(layer) else ' Winograd'}: "
              f"{len(times)} configs; hot's pick {_name(hot)} {times[hot][0] * 1e3:.3f} ms, after a write "
              f"{times[hot][1] * 1e3:.3f} ({times[hot][1] / times[after][1]:.3f}x the best then, {_name(after)} "
              f"{times[after][1] * 1e3:.3f})", flush=True)
    for path, state in ((args.out, 1), (args.hot_out, 0)):
        if path:
            _write_log(path, log, {k: (c, t[state]) for k, (c, t) in timed.items()})
            print(f"wrote {path}")


def _time_both(timer, w, configs) -> dict:
    """config -> (hot seconds, after-write seconds): medians of the rounds' medians."""
    setups = []
    for cfg, (c, layer) in configs.items():
        k = timer._kernel(w, cfg)
        arrays = {n: random_array(s, i) for i, (n, s) in enumerate(k.arg_shapes.items()) if s is not None}
        run = cold_arrays(k.bind, arrays, PARAMETERS)
        ew = build_elementwise(layer.data_shape, cfg.ic_bn if cfg.ic_bn > 1 else None, "relu", affine=False)
        data = arrays["data"].reshape(ew.input_shape)  # relu in place: the values stay valid inputs
        setups.append((cfg, run, ew.bind(x=data, out=data)))
    rounds = {cfg: ([], []) for cfg, _, _ in setups}
    for _ in range(ROUNDS):
        for cfg, run, write in setups:
            for state, before in enumerate((None, write)):
                ts = []
                for _ in range(CALLS):
                    if before is not None:
                        before()
                    t0 = time.perf_counter()
                    run()
                    ts.append(time.perf_counter() - t0)
                rounds[cfg][state].append(statistics.median(ts[3:]))
    return {cfg: (statistics.median(h), statistics.median(a)) for cfg, (h, a) in rounds.items()}


def _name(cfg) -> str:
    return f"({cfg.ic_bn}, {cfg.oc_bn}, ow {cfg.ow_bn}" + (f", oh {cfg.oh_bn})" if cfg.oh_bn > 1 else ")")


def _write_log(path: str, source, timed: dict) -> None:
    """The log's transform and step records, then one conv record per timed config."""
    log = read_records(source)
    lines = [json.dumps(r.raw) for r in [*log.transforms, *log.steps]]
    for c, seconds in timed.values():
        d = make_conv2d_record(c.record.workload, c.record.entity, c.record.config_index, [seconds], c.record.target)
        d["input"][1] = c.record.task_name
        lines.append(json.dumps(d))
    atomic_write_text(path, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
