"""The regression benchmark behind ``graph-tuner bench``: our plans against other runtimes.

:func:`bench_models` runs, per model and side by side in one process: the graph-tuned
plan, the history-best and default plans (same log, same cost model), OpenVINO and
onnxruntime on the same weights (the model exported to ONNX) and PyTorch when importable
(:mod:`graph_tuner.runtimes`). They are timed in interleaved rounds, so that load changes
on the machine hit them alike, with a one-thread conv probing the host's speed in the same
rounds, and each is compared with the graph-tuned plan round by round
(:mod:`graph_tuner.rounds`). Each plan's planned steps (convs, transforms and the other
steps solve costed) are reported three ways (:mod:`graph_tuner.plan_run`): predicted from the log, predicted from the same kernels and
transforms re-timed now, and measured inside the running network. Results go to
``<out>/<timestamp>.json`` with a PNG chart (:mod:`graph_tuner.bench_chart`), and medians
more than 5% above the previous results file's are flagged
(:mod:`graph_tuner.bench_history`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np

from graph_tuner.bench_chart import write_chart
from graph_tuner.bench_history import OUR_PLANS, find_regressions, previous_results
from graph_tuner.errors import GraphTunerError
from graph_tuner.host_state import (FORK_JOIN_CALLS, PROBE_VERSION, describe as describe_host, fork_join_call,
                                    probe_call)
from graph_tuner.plan import Plan
from graph_tuner.plan_run import prediction_checks, seeded_input
from graph_tuner.rounds import paired_ratio, timed_rounds
from graph_tuner.runtimes import OTHER_RUNTIMES, onnxruntime_runner, openvino_runner, pytorch_runner

HOST_PROBE = "host_probe"  # a one-thread conv timed in the rounds next to the runtimes
FORK_JOIN_PROBE = "fork_join_probe"  # the thread pool's fork-join, timed in the same rounds
# The goal (issue 19): graph-tuned at least this much faster than every other runtime, or,
# where that is faster than the cores allow, within ROOFLINE_SHARE of the FMA roofline.
TARGET_SPEEDUP, ROOFLINE_SHARE = 1.10, 0.95


def target(runtimes: dict, roofline_ms: float) -> dict:
    """The graph-tuned time the goal asks for and whether the run met it: ``TARGET_SPEEDUP``
    times faster than the closest other runtime, unless that is beyond ``ROOFLINE_SHARE`` of
    the roofline (the network's FLOPs at the FMA peak). A rival's speed is its paired ratio
    (``vs_graph_tuned``: round by round, so the host's drift cancels), else its median over
    ours; ``clear`` says the ratio's whole 90% interval meets the goal, not just its middle.

    >>> t = target({"graph_tuned": {"median_ms": 9.0}, "openvino": {"median_ms": 10.0},
    ...             "onnxruntime": {"median_ms": 12.0}}, roofline_ms=8.0)
    >>> round(t["target_ms"], 3), t["bound_by"], t["met"]
    (9.091, 'openvino', True)
    >>> t = target({"graph_tuned": {"median_ms": 26.76}, "openvino": {"median_ms": 29.34,
    ...             "vs_graph_tuned": {"ratio": 1.117, "interval90": [1.071, 1.137]}}}, roofline_ms=17.8)
    >>> t["met"], t["clear"], round(t["rival_ratio"], 3)
    (True, False, 1.117)
    >>> target({"graph_tuned": {"median_ms": 9.0}, "openvino": {"median_ms": 9.0}}, 8.8)["bound_by"]
    'roofline'
    """
    ours = runtimes["graph_tuned"]["median_ms"]

    def speed(r: dict) -> tuple[float, float]:  # (ratio, its interval's low end)
        vs = r.get("vs_graph_tuned")
        return (vs["ratio"], vs["interval90"][0]) if vs else (r["median_ms"] / ours,) * 2

    others = {k: speed(r) for k, r in runtimes.items() if r and k in OTHER_RUNTIMES}
    rival = min(others, key=lambda k: others[k][0]) if others else None
    want = ours * others[rival][0] / TARGET_SPEEDUP if rival else 0.0  # no rival measured: the roofline alone
    floor = roofline_ms / ROOFLINE_SHARE
    bound_by = "roofline" if floor > want else rival
    goal = max(want, floor)
    met = ours <= goal * (1 + 1e-12)
    clear = met if bound_by == "roofline" else others[rival][1] >= TARGET_SPEEDUP
    return {"target_ms": goal, "bound_by": bound_by, "met": met, "clear": clear, "roofline_ms": roofline_ms,
            "rival_ratio": others[rival][0] if rival else None, "peak_share": roofline_ms / ours}


def tuning_log(name: str, work_dir: Path, trials: int, progress: bool) -> tuple[Path, str | None]:
    """The log to plan with, and a note when it is not the shipped one.

    The shipped ``data/<cpu>/<name>.log`` of this CPU; else one tuned now
    into ``work_dir/<name>-<cpu>.log`` (resumable, so later runs reuse it): a plan made
    from another machine's times, measured here, benchmarks that machine, not ours.
    """
    from graph_tuner.shipped import shipped_logs
    from graph_tuner.tuning import tune_model
    from kernels.jit import host_cpu

    host = host_cpu().name
    shipped = shipped_logs(name)
    if host in shipped:
        return shipped[host], None
    note = (f"no shipped log for {name} tuned on this CPU ({host}; shipped: {', '.join(shipped) or 'none'}): "
            "tuned here")
    path = work_dir / f"{name}-{host}.log"
    tune_model(name, path, trials=trials, progress=progress)
    return path, f"{note} ({path}, {trials} trials per workload)"


def bench_model(name: str, *, work_dir: Path, trials: int = 40, repeat: int = 30, progress: bool = True,
                print_fn: Callable[[str], object] = print, peak_gflops: float | None = None) -> dict:
    """One model's entry of the results file (see the module doc); with ``peak_gflops`` (the
    machine's FMA peak on the bench's threads) also the roofline and the goal (:func:`target`)."""
    from graph_tuner.api import GraphTuner
    from graph_tuner.executor import compile_model
    from graph_tuner.loading import load_given, rewritten
    from kernels.threads import num_threads

    # The other runtimes get the network as it is given (its weights by op name), not as our
    # rewrites left it: each runtime makes its own graph optimisations, as a user would see.
    given = load_given(name)
    model = rewritten(given)
    log, log_note = tuning_log(name, work_dir, trials, progress)
    gt = GraphTuner(model, log, top_k=20)
    plans = gt.bench_plans()
    notes = ([log_note] if log_note else []) + list(plans["graph_tuned"].notes)
    notes += [f"{base}: the log cannot form this plan" for base, plan in plans.items() if plan is None]
    params, x = model.params(seed=0), seeded_input(model)
    threads = num_threads()

    runners: dict[str, Callable[[], object]] = {}
    programs, outputs = {}, {}
    for k, plan in plans.items():
        if plan is None:
            continue
        programs[k] = compile_model(model, plan, params)
        outputs[k] = programs[k].run(x)[0]
        runners[k] = programs[k].execute
    for k, runner in (("openvino", openvino_runner(given, params, x, threads, work_dir)),
                      ("onnxruntime", onnxruntime_runner(given, params, x, threads, work_dir)),
                      ("pytorch", pytorch_runner(given, params, x, threads))):
        if isinstance(runner, str):
            notes.append(runner)
        else:
            runners[k], outputs[k] = runner
    ref = outputs["graph_tuned"]
    differs = set()  # runtimes computing another function: timed, but no rival for the goal
    for k, out in outputs.items():  # every runtime computes the same function
        if out.shape != ref.shape:
            notes.append(f"{k}: output shape {out.shape}, graph_tuned's is {ref.shape}")
            differs.add(k)
            continue
        err = float(np.abs(out - ref).max())
        if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
            notes.append(f"{k}: output differs from graph_tuned by {err:.3g}")
            differs.add(k)

    probe, probe_flops = probe_call()  # the host's speed, timed in the same rounds (graph_tuner.host_state)
    by_round = timed_rounds({**runners, HOST_PROBE: probe, FORK_JOIN_PROBE: fork_join_call()}, repeat)
    host = {"probe_version": PROBE_VERSION,
            "conv_gflops_rounds": [round(probe_flops / np.median(r) / 1e9, 1) for r in by_round.pop(HOST_PROBE)],
            "fork_join_us_rounds": [round(np.median(r) / FORK_JOIN_CALLS * 1e6, 2)
                                    for r in by_round.pop(FORK_JOIN_PROBE)]}
    print_fn(f"{name:<14} host: {describe_host(host)}")
    # The plan re-timed now at the ratios it was costed with; the baselines are costed alone.
    checks = prediction_checks(programs, plans, model, repeat, {"graph_tuned": gt.network.by_step(plans["graph_tuned"])})
    runtimes: dict[str, dict | None] = {k: None for k in (*OUR_PLANS, *OTHER_RUNTIMES)}
    for k, rounds in by_round.items():
        s = [t for r in rounds for t in r]
        runtimes[k] = {"median_ms": float(np.median(s)) * 1e3, "p90_ms": float(np.percentile(s, 90)) * 1e3}
        if k != "graph_tuned":
            ratio, lo, hi = paired_ratio(rounds, by_round["graph_tuned"])
            runtimes[k]["vs_graph_tuned"] = {"ratio": ratio, "interval90": [lo, hi]}
        if k in programs:
            runtimes[k] |= {"predicted_ms": plans[k].cost, "transforms": len(plans[k].transforms),
                            **{c: v for c, v in checks[k].items() if c != "profile"}}
        r = runtimes[k]
        vs = r.get("vs_graph_tuned")
        print_fn(f"{name:<14} {k:<13} median {r['median_ms']:8.3f} ms  p90 {r['p90_ms']:8.3f} ms"
                 + (f"  {vs['ratio']:.3f}x graph-tuned's time, round by round (90% interval "
                    f"{vs['interval90'][0]:.3f}-{vs['interval90'][1]:.3f})" if vs else "")
                 + (f"  planned steps: predicted {r['predicted_ms']:.3f} (log) / {r['retimed_predicted_ms']:.3f} "
                    f"(re-timed now{' at its in-network ratios' if k == 'graph_tuned' else ''}), "
                    f"measured in the network {r['measured_planned_ms']:.3f} ms; the log's prediction "
                    f"{100 * (r['predicted_ms'] / r['median_ms'] - 1):+.1f}% of the whole run"
                    if k in programs else ""))
    entry = {"log": str(log), "threads": threads, "batch": model.batch, "runtimes": runtimes, "notes": notes,
             "host": host}
    if peak_gflops and runtimes.get("graph_tuned"):
        rivals = {k: r for k, r in runtimes.items() if k not in differs}
        t = entry["target"] = target(rivals, model.flops() / peak_gflops / 1e6)
        share = f"{100 * t['peak_share']:.0f}% of the FMA peak{winograd_note(plans['graph_tuned'])}"
        print_fn(f"{name:<14} roofline {t['roofline_ms']:.3f} ms ({model.flops() / 1e9:.2f} GFLOP at "
                 f"{peak_gflops:.0f} GFLOP/s): graph-tuned at {share}; goal {t['target_ms']:.3f} ms "
                 f"(bound by {t['bound_by']}): "
                 + ("missed" if not t["met"] else "met" if t["clear"] else
                    f"met, but its 90% interval reaches below {TARGET_SPEEDUP:.2f}x"))
    return entry


def winograd_note(plan: Plan) -> str:
    """What a share of the FMA peak means for a plan with Winograd convs: the roofline counts the
    FLOPs of direct convs, and Winograd F(4x4, 3x3) multiplies less (ResNet-18's plan read 160%)."""
    from graph_tuner.winograd import runs_winograd

    n = sum(runs_winograd(lc.workload, getattr(lc.candidate.record, "workload", None)) for lc in plan.layers)
    return (f" (counting direct convs: {n} of its {len(plan.layers)} run as Winograd, which multiplies less)"
            if n else "")


def bench_models(names: list[str], out_dir: str | os.PathLike = "bench-results", *, trials: int = 40,
                 repeat: int = 30, progress: bool = True, print_fn: Callable[[str], object] = print,
                 now: _dt.datetime | None = None) -> tuple[Path, dict]:
    """Benchmark ``names``, write ``<out_dir>/<timestamp>.json`` and ``.png``; returns the path and results."""
    from graph_tuner.atomic import atomic_write_text
    from kernels.jit import host_cpu
    from kernels.peak import fma_peak
    from kernels.threads import num_threads

    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "work").mkdir(exist_ok=True)
    except OSError as e:
        why = "it is a file" if folder.is_file() else e.strerror
        raise GraphTunerError(f"--out {folder}: cannot use it as the results folder ({why}); "
                              "choose another --out") from None
    if not os.access(folder, os.W_OK):
        raise GraphTunerError(f"--out {folder}: the results folder is not writable; choose another --out")
    stamp = (now or _dt.datetime.now()).strftime("%Y-%m-%dT%H%M%S")
    path = folder / f"{stamp}.json"
    work = folder / "work"
    peak = fma_peak(num_threads())
    results = {"date": stamp, "machine": {"cpu": host_cpu().name, "lanes": host_cpu().lanes,
                                          "threads": num_threads(), "cores": os.cpu_count(),
                                          "fma_peak_gflops": round(peak, 1)},
               "models": {}}
    # The baseline is read before measuring, so the user learns at once what it is.
    prev = previous_results(folder, exclude=path, machine=results["machine"])
    print_fn(f"baseline: {prev[0]}" if prev else f"no earlier results from this machine in {folder}")
    for name in names:
        results["models"][name] = bench_model(name, work_dir=work, trials=trials, repeat=repeat, progress=progress,
                                              print_fn=print_fn, peak_gflops=peak)
    regressions = find_regressions(results, prev[1]) if prev else []
    results["previous"] = str(prev[0]) if prev else None
    # Slower, but onnxruntime too (the host changed), or not our runtime: a note, not a regression.
    results["regressions"] = [str(r) for r in regressions if not r.machine()]
    results["machine_slower"] = [str(r) for r in regressions if r.machine()]
    try:
        import matplotlib  # noqa: F401  (an optional extra: the chart is a convenience)
    except ImportError:
        results["chart"] = None
        results.setdefault("notes", []).append("matplotlib not installed: no chart (pip install -e '.[bench]')")
    else:
        results["chart"] = str(path.with_suffix(".png"))
        write_chart(results, path.with_suffix(".png"))
    atomic_write_text(path, json.dumps(results, indent=2) + "\n")
    return path, results
