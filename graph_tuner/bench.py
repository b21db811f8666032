"""End-to-end measurement of plans, and the regression benchmark behind ``graph-tuner bench``.

:func:`measure_plan` compiles one plan (:mod:`graph_tuner.executor`), times whole runs
(median, p90) and profiles every step, so the plan's prediction (conv kernels +
layout transforms) can be set against the measured time of the same steps.

:func:`bench_models` runs, per model and side by side in one process: the graph-tuned
plan, the history-best and default plans (same log, same cost model), OpenVINO and onnxruntime
on the same weights (the model exported to ONNX) and PyTorch when importable
(:mod:`graph_tuner.runtimes`). The runners
are timed in interleaved rounds so that load changes on the machine hit them alike, and
each is also compared with the graph-tuned plan round by round (:func:`paired_ratio`:
median ratio and a 90% interval), which a shared host's drift cannot fake.
Results go to ``<out>/<timestamp>.json`` with a PNG chart next to it, and every
median more than 5% above the previous results file's is flagged
(:func:`find_regressions`). Each plan's conv + transform time is reported three ways:
predicted from the log (``plan.cost``), predicted from the same kernels and transforms
re-timed alone now (:func:`retimed_cost_ms`), and measured inside the running network; the
last two alternate in a few rounds and report medians (:func:`prediction_checks`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from graph_tuner.errors import GraphTunerError
from graph_tuner.host_state import describe as describe_host, probe_call, speed as host_speed
from graph_tuner.runtimes import onnxruntime_runner, openvino_runner, pytorch_runner

REGRESSION_THRESHOLD = 0.05
OUR_PLANS = ("graph_tuned", "history_best", "default")
OTHER_RUNTIMES = ("openvino", "onnxruntime", "pytorch")
HOST_PROBE = "host_probe"  # a one-thread conv timed in the rounds next to the runtimes


@dataclass
class RunResult:
    """One plan run end to end: latency, profile, and the plan's prediction."""

    model: str
    batch: int
    threads: int
    median_ms: float
    p90_ms: float
    predicted_ms: float  # plan.cost: conv kernels + layout transforms
    profile: object  # graph_tuner.executor.Profile
    outputs: list = field(default_factory=list, repr=False)
    retimed_ms: float | None = None  # the same prediction, kernels and transforms re-timed alone now

    @property
    def measured_planned_ms(self) -> float:
        """Measured conv + transform time: what ``predicted_ms`` predicts."""
        return self.profile.measured_planned_ms

    def to_json(self, top: int | None = None) -> dict:
        steps = self.profile.steps if top is None else self.profile.top(top)
        return {
            "model": self.model,
            "batch": self.batch,
            "threads": self.threads,
            "median_ms": self.median_ms,
            "p90_ms": self.p90_ms,
            "predicted_ms": self.predicted_ms,
            "retimed_predicted_ms": self.retimed_ms,
            "measured_planned_ms": self.measured_planned_ms,
            "profile_total_ms": self.profile.total_ms,
            "by_category_ms": self.profile.by_category(),
            "layers": [{"name": s.name, "category": s.category, "ops": s.ops, "measured_ms": s.median_ms,
                        "predicted_ms": s.predicted_ms} for s in steps],
        }

    def report(self, top: int = 10) -> str:
        by = self.profile.by_category()
        err = (self.measured_planned_ms - self.predicted_ms) / self.predicted_ms if self.predicted_ms else float("nan")
        lines = [
            f"{self.model}  batch {self.batch}, {self.threads} threads",
            f"latency: median {self.median_ms:.3f} ms, p90 {self.p90_ms:.3f} ms",
            "profile (sum of per-step medians {:.3f} ms): ".format(self.profile.total_ms)
            + ", ".join(f"{c} {ms:.3f} ms ({sum(s.category == c for s in self.profile.steps)} steps)"
                        for c, ms in by.items()),
            f"predicted conv + transforms: {self.predicted_ms:.3f} ms; measured: {self.measured_planned_ms:.3f} ms "
            f"({err:+.1%})",
            *([f"  the same kernels and transforms re-timed alone now: {self.retimed_ms:.3f} ms (measured "
               f"{(self.measured_planned_ms - self.retimed_ms) / self.retimed_ms:+.1%}; a log timed when this "
               "machine was faster or slower shifts the first figure, not this one)"]
              if self.retimed_ms else []),
            f"slowest {top} steps:",
            f"  {'step':<36} {'kind':<10} {'measured ms':>11} {'predicted ms':>12}",
        ]
        for s in self.profile.top(top):
            pred = "" if s.predicted_ms is None else f"{s.predicted_ms:.4f}"
            lines.append(f"  {s.name[:36]:<36} {s.category:<10} {s.median_ms:>11.4f} {pred:>12}")
        return "\n".join(lines)


def seeded_input(model, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(model.op(model.inputs[0]).shape, dtype=np.float32)


def measure_plan(model, plan, *, x: np.ndarray | None = None, params: dict | None = None, repeat: int = 30,
                 warmup: int = 3, retime: bool = False) -> RunResult:
    """Compile ``plan`` for ``model``, run it on ``x`` (default: seeded random), time and profile it;
    with ``retime`` also evaluate its prediction with every kernel and transform re-timed now
    (:func:`retimed_cost_ms`)."""
    from graph_tuner.executor import compile_model
    from kernels.threads import num_threads

    prog = compile_model(model, plan, params)
    outputs = prog.run(seeded_input(model) if x is None else x)
    timing = prog.benchmark(repeat=repeat, warmup=warmup)
    if retime:
        check = prediction_checks({"plan": prog}, {"plan": plan}, model, repeat)["plan"]
        profile, retimed = check["profile"], check["retimed_predicted_ms"]
    else:
        profile, retimed = prog.profile(repeat=max(5, repeat // 2)), None
    return RunResult(model.name, model.batch, num_threads(), timing.median_s * 1e3, timing.p90_s * 1e3, plan.cost,
                     profile, outputs, retimed)


def retimed_cost_ms(plan, model=None) -> float:
    """The plan's cost model evaluated now, on this machine: every layer's kernel and every
    transform timed alone (the tuner's and the transform benchmark's own routines), summed.
    With ``model``, each kernel is timed with the epilogue the executor fuses into that layer.

    ``plan.cost`` adds up times from the log, measured whenever and under whatever load the
    tuning ran; this separates "is the cost model additive?" from "is the log current?".
    """
    from graph_tuner.layout_flow import parse_layout
    from kernels.transform_bench import time_transform
    from kernels.tuner import KernelTimer

    epilogues = {}
    if model is not None:
        from graph_tuner.executor.compile import tensor_blocks
        from graph_tuner.executor.fold import conv_epilogues, plan_steps

        joins = {n: parse_layout(v) for n, v in plan.joins.items()}
        epilogues = conv_epilogues(model, plan_steps(model, tensor_blocks(model, plan), joins))
    timers: dict[tuple, KernelTimer] = {}
    seen: dict[tuple, float] = {}
    total = 0.0
    for lc in plan.layers:
        epi = tuple(sorted(epilogues.get(lc.name, {}).items()))
        key = (lc.workload, lc.candidate.config, epi)
        if key not in seen:
            timer = timers.setdefault(epi, KernelTimer())  # one per epilogue: its own reject baseline
            timer.epilogues[lc.workload] = dict(epi)
            seen[key] = timer(lc.workload, lc.candidate.config)
        total += seen[key]
    for t in plan.transforms:
        key = (tuple(t.shape), parse_layout(t.src_layout), parse_layout(t.dst_layout))
        if key not in seen:
            seen[key] = time_transform(key)
        total += seen[key]
    return total * 1e3


# -- regression flagging -------------------------------------------------------------

@dataclass
class Regression:
    model: str
    runtime: str
    previous_ms: float
    current_ms: float
    yardstick: float | None = None  # onnxruntime's change in the same runs (None: not measured both times)
    host_change: float | None = None  # the host probe's change (one-thread conv in the rounds: graph_tuner.host_state)

    @property
    def change(self) -> float:
        return self.current_ms / self.previous_ms - 1

    @property
    def relative_change(self) -> float | None:
        """The change measured against onnxruntime's in the same runs."""
        return None if self.yardstick is None else (1 + self.change) / (1 + self.yardstick) - 1

    def machine(self, threshold: float = REGRESSION_THRESHOLD) -> bool:
        """Not our code: another runtime, or onnxruntime slowed down about as much, or the host's
        cores did (our plans slowed more than onnxruntime on slower cores: session 7)."""
        rel = self.relative_change
        return (self.runtime not in OUR_PLANS or rel is not None and rel <= threshold
                or self.host_change is not None and self.host_change < -threshold)

    def __str__(self) -> str:
        text = f"{self.model} {self.runtime}: {self.previous_ms:.3f} -> {self.current_ms:.3f} ms ({self.change:+.1%})"
        if self.yardstick is not None and self.runtime != "onnxruntime":
            text += f"; onnxruntime {self.yardstick:+.1%} in the same runs, so {self.relative_change:+.1%} relative"
        if self.host_change is not None:
            text += f"; the host's cores {self.host_change:+.1%}"
        return text


def find_regressions(current: dict, previous: dict, threshold: float = REGRESSION_THRESHOLD) -> list[Regression]:
    """Runtimes whose median grew more than ``threshold`` since ``previous`` (results dicts).

    Each carries onnxruntime's change between the same two runs when both measured it:
    this shared host's speed drifts by tens of percent between runs, and onnxruntime, whose
    code did not change, is the yardstick (:meth:`Regression.machine`); and the change of
    the host's own speed (:mod:`graph_tuner.host_state`) when both files have it.

    >>> prev = {"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": 10.0}, "onnxruntime": {"median_ms": 20}}}}}
    >>> cur = {"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": 10.6}, "onnxruntime": {"median_ms": 20}}}}}
    >>> [str(r) for r in find_regressions(cur, prev)]
    ['m graph_tuned: 10.000 -> 10.600 ms (+6.0%); onnxruntime +0.0% in the same runs, so +6.0% relative']
    """
    out = []
    for model, entry in current.get("models", {}).items():
        then_entry = previous.get("models", {}).get(model, {})
        before = then_entry.get("runtimes", {})
        runtimes = entry.get("runtimes", {})
        yardstick = None
        ort_now, ort_then = runtimes.get("onnxruntime"), before.get("onnxruntime")
        if ort_now and ort_then and ort_then.get("median_ms"):
            yardstick = ort_now["median_ms"] / ort_then["median_ms"] - 1
        host_now, host_then = (host_speed(e.get("host") or {}) for e in (entry, then_entry))
        host_change = host_now / host_then - 1 if host_now and host_then else None
        for runtime, now in runtimes.items():
            then = before.get(runtime)
            if not now or not then or not then.get("median_ms"):
                continue
            if now["median_ms"] > then["median_ms"] * (1 + threshold):
                out.append(Regression(model, runtime, then["median_ms"], now["median_ms"],
                                      None if runtime == "onnxruntime" else yardstick, host_change))
    return out


def is_results(data: object) -> bool:
    """Whether ``data`` has the shape of a results file, as far as the regression check reads it.

    >>> is_results({"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": 1.0}}}}})
    True
    >>> is_results({"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": "fast"}}}}})
    False
    """
    def numbers(d: object, keys: tuple[str, ...]) -> bool:
        return isinstance(d, dict) and all(isinstance(d.get(k, 0.0), (int, float)) for k in keys)

    if not (isinstance(data, dict) and isinstance(data.get("models"), dict)
            and isinstance(data.get("machine") or {}, dict)):
        return False
    for entry in data["models"].values():
        if not (isinstance(entry, dict) and isinstance(entry.get("runtimes") or {}, dict)
                and isinstance(entry.get("host") or {}, dict)):
            return False
        if not all(r is None or numbers(r, ("median_ms",)) for r in (entry.get("runtimes") or {}).values()):
            return False
        if not numbers(entry.get("host") or {}, ("conv_gflops_rounds",)):
            return False
    return True


def previous_results(out_dir: str | os.PathLike, exclude: str | os.PathLike | None = None,
                     machine: dict | None = None) -> tuple[Path, dict] | None:
    """The newest readable results file in ``out_dir`` (names sort by time), other than ``exclude``.

    With ``machine``, only files measured on the same CPU with as many threads: another
    machine's latencies are no baseline for a regression.
    """
    folder = Path(out_dir)
    for path in sorted(folder.glob("*.json"), reverse=True):
        if exclude is not None and path.resolve() == Path(exclude).resolve():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not is_results(data):
            continue  # not ours, or damaged: no baseline
        theirs = data.get("machine") or {}
        if machine is None or all(theirs.get(k) == machine.get(k) for k in ("cpu", "threads")):
            return path, data
    return None


# -- the benchmark -------------------------------------------------------------------

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


# Pause between two runtimes' turns. A runtime's idle workers keep spinning after its last
# call (onnxruntime's, unless told to stop: see onnxruntime_runner), and the runtime timed next shared the
# cores with them: ResNet-18 graph-tuned ran 28.7 ms right after onnxruntime, 19.9 ms
# 20 ms later, 14.7 ms 100 ms later (benchmarks/README.md). Rounds used to start with
# graph-tuned, right after the previous round's last runtime, so this biased every ratio.
SETTLE_S = 0.25


def _timed_rounds(runners: dict[str, Callable[[], object]], repeat: int, rounds: int | None = None,
                  settle_s: float = SETTLE_S) -> dict[str, list[list[float]]]:
    """Per-call seconds of every runner, ``repeat`` calls each, in interleaved rounds of ~4 calls
    (a shared machine's speed drifts by tens of percent within a minute: short interleaved
    rounds make every runtime see the same drift); one list per round. The order rotates
    from round to round, so no runtime always runs first or right after another. Each turn starts
    ``settle_s`` after the previous one ended, so no runtime is timed while another's
    workers still spin (:data:`SETTLE_S`)."""
    from kernels.timing import measure

    samples: dict[str, list[list[float]]] = {k: [] for k in runners}
    rounds = rounds or max(3, repeat // 4)
    per_round = max(1, -(-repeat // rounds))
    names = list(runners)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:  # each runtime takes each place in turn
            time.sleep(settle_s)
            samples[k].append(list(measure(runners[k], number=1, repeat=per_round, warmup=1).results))
    return samples


def paired_ratio(rounds_a: list[list[float]], rounds_b: list[list[float]], seed: int = 0
                 ) -> tuple[float, float, float]:
    """How many times ``b``'s time ``a``'s is: the median over rounds of the ratio of the
    rounds' medians, with a 90% bootstrap interval over rounds. Pairing by round cancels
    the host's drift, which moves both alike within a round.

    >>> paired_ratio([[2.0], [4.0], [2.2]], [[1.0], [2.0], [1.0]])[0]
    2.0
    """
    r = np.array([np.median(a) / np.median(b) for a, b in zip(rounds_a, rounds_b)])
    boot = np.median(r[np.random.default_rng(seed).integers(0, len(r), (2000, len(r)))], axis=1)
    return float(np.median(r)), float(np.percentile(boot, 5)), float(np.percentile(boot, 95))


PREDICTION_ROUNDS = 3


def prediction_checks(programs: dict, plans: dict, model, repeat: int) -> dict[str, dict]:
    """Per plan: its conv + transform steps measured in the network (:meth:`Program.profile`)
    and its prediction re-timed now (:func:`retimed_cost_ms`), in :data:`PREDICTION_ROUNDS`
    alternating rounds over the plans: each step's median (``profile``), and the median
    re-timing. One profile after the timed rounds read ResNet-18's steps at 37.0 ms when the
    rounds' median run took 20.9 (session 8): a burst of load hit it."""
    from graph_tuner.executor import Profile

    measured: dict[str, list] = {k: [] for k in programs}
    retimed: dict[str, list[float]] = {k: [] for k in programs}
    for _ in range(PREDICTION_ROUNDS):
        for k, program in programs.items():
            measured[k].append(program.profile(repeat=max(3, repeat // (3 * PREDICTION_ROUNDS))))
            retimed[k].append(retimed_cost_ms(plans[k], model))
    out = {}
    for k in programs:
        profile = Profile.median(measured[k])
        out[k] = {"retimed_predicted_ms": float(np.median(retimed[k])), "profile": profile,
                  "measured_planned_ms": profile.measured_planned_ms, "by_category_ms": profile.by_category()}
    return out


def bench_model(name: str, *, work_dir: Path, trials: int = 40, repeat: int = 30, progress: bool = True,
                print_fn: Callable[[str], object] = print) -> dict:
    """One model's entry of the results file (see the module doc)."""
    from graph_tuner.api import GraphTuner
    from graph_tuner.executor import compile_model
    from graph_tuner.model import load_model
    from kernels.threads import num_threads

    model = load_model(name)
    log, log_note = tuning_log(name, work_dir, trials, progress)
    gt = GraphTuner(model, log, top_k=20)
    if gt.missing_transforms():
        gt.benchmark_layout_transforms(progress=progress)
    plans = {"graph_tuned": gt.solve()}
    notes = ([log_note] if log_note else []) + list(plans["graph_tuned"].notes)
    for base in ("history_best", "default"):
        plans[base] = gt.baseline_plan(base)
        if plans[base] is None:
            notes.append(f"{base}: the log cannot form this plan")
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
    for k, runner in (("openvino", openvino_runner(model, params, x, threads, work_dir)),
                      ("onnxruntime", onnxruntime_runner(model, params, x, threads, work_dir)),
                      ("pytorch", pytorch_runner(model, params, x, threads))):
        if isinstance(runner, str):
            notes.append(runner)
        else:
            runners[k], outputs[k] = runner
    ref = outputs["graph_tuned"]
    for k, out in outputs.items():  # every runtime computes the same function
        if out.shape != ref.shape:
            notes.append(f"{k}: output shape {out.shape}, graph_tuned's is {ref.shape}")
            continue
        err = float(np.abs(out - ref).max())
        if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
            notes.append(f"{k}: output differs from graph_tuned by {err:.3g}")

    probe, probe_flops = probe_call()  # the host's speed, timed in the same rounds (graph_tuner.host_state)
    by_round = _timed_rounds({**runners, HOST_PROBE: probe}, repeat)
    host = {"conv_gflops_rounds": [round(probe_flops / np.median(r) / 1e9, 1) for r in by_round.pop(HOST_PROBE)]}
    print_fn(f"{name:<14} host: {describe_host(host)}")
    checks = prediction_checks(programs, plans, model, repeat)
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
                 + (f"  conv+transforms: predicted {r['predicted_ms']:.3f} (log) / {r['retimed_predicted_ms']:.3f} "
                    f"(re-timed now), measured in the network {r['measured_planned_ms']:.3f} ms"
                    if k in programs else ""))
    return {"log": str(log), "threads": threads, "batch": model.batch, "runtimes": runtimes, "notes": notes,
            "host": host}


def write_chart(results: dict, path: str | os.PathLike) -> None:
    """Grouped bars: median latency per model and runtime, p90 as the error bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(results["models"])
    kinds = [k for k in (*OUR_PLANS, *OTHER_RUNTIMES)
             if any(results["models"][m]["runtimes"].get(k) for m in models)]
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(models) + 2), 4))
    width = 0.8 / max(1, len(kinds))
    for i, k in enumerate(kinds):
        med = [(results["models"][m]["runtimes"].get(k) or {}).get("median_ms", 0.0) for m in models]
        p90 = [(results["models"][m]["runtimes"].get(k) or {}).get("p90_ms", 0.0) for m in models]
        xs = [j + i * width for j in range(len(models))]
        ax.bar(xs, med, width, label=k.replace("_", " "),
               yerr=[[0] * len(med), [max(0.0, b - a) for a, b in zip(med, p90)]], capsize=2)
    ax.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(models))], models)
    ax.set_ylabel("latency, ms (median; bar to p90)")
    ax.set_title(f"end to end, batch 1, {results['machine']['threads']} threads, {results['machine']['cpu']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bench_models(names: list[str], out_dir: str | os.PathLike = "bench-results", *, trials: int = 40,
                 repeat: int = 30, progress: bool = True, print_fn: Callable[[str], object] = print,
                 now: _dt.datetime | None = None) -> tuple[Path, dict]:
    """Benchmark ``names``, write ``<out_dir>/<timestamp>.json`` and ``.png``; returns the path and results."""
    from graph_tuner.atomic import atomic_write_text
    from kernels.jit import host_cpu
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
    results = {"date": stamp, "machine": {"cpu": host_cpu().name, "lanes": host_cpu().lanes,
                                          "threads": num_threads(), "cores": os.cpu_count()},
               "models": {}}
    # The baseline is read before measuring, so the user learns at once what it is.
    prev = previous_results(folder, exclude=path, machine=results["machine"])
    print_fn(f"baseline: {prev[0]}" if prev else f"no earlier results from this machine in {folder}")
    for name in names:
        results["models"][name] = bench_model(name, work_dir=work, trials=trials, repeat=repeat, progress=progress,
                                              print_fn=print_fn)
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
