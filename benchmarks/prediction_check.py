"""Hand-run check of #19's deliverable 4: is a plan's prediction its run's median?

    python benchmarks/prediction_check.py [MODEL ...] [--checks 3] [--repeat 50] [--out FILE.json]

For each model (default: the five bench models), as a user would: copy this CPU's shipped log,
``graph-tuner tune MODEL -o LOG --retime`` (the log's times taken again now, and its
in-network ratios), ``graph-tuner solve``, then at once ``graph-tuner run --json
--transform-records LOG``. Each row is one such check: (predicted - median) / median, the
same with the plan's steps re-timed at once (``retimed_predicted_ms``), and whether the run
was steady; then deliverable 2's measure, the convs whose time in the run is within 10% of
what the log says (each conv step's ``predicted_ms`` against its ``measured_ms``), with the
worst. The summary counts the checks within 5%: all, and the steady ones.
``--checks N`` goes over the models N times, so the host's moods spread over every model.

Two more counts separate the convs' own errors from the host's speed, which moves every
step alike (on the rocketlake VM, two runs of one plan 30 s apart: their convs' sums 8.6%
apart, single convs -3% to +19%, most of them the same way):

* "at the run's level": each conv step's prediction scaled by the run's common factor (all the
  conv steps' measured time over all their predicted time), so a host slower than at the
  re-timing does not count against every conv;
* "run again": the plan is run a second time at once, and the conv steps whose time moved more
  than 10% between the two runs are counted: the floor under any per-conv check on this host
  (the summary counts only checks whose both runs were steady).

Counts are of conv steps: a depthwise conv and the 1x1 projection fused with it are one.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graph_tuner.atomic import atomic_write_text
from graph_tuner.commands import positive_int
from graph_tuner.shipped import shipped_log, shipped_models
from kernels.jit import host_cpu

TARGET = 0.05  # the issue's: whole-network prediction within 5% of the measured median
CONV_TARGET = 0.10  # the issue's: each conv's in-network time within 10% of what the log says
DEFAULT_MODELS = ["resnet-18", "resnet-50", "mobilenet-v2", "inception-v3", "densenet-121"]


def gt(*args: str, out: Path) -> str:
    """Run ``graph-tuner ARGS`` as a user would (its stdout and stderr kept in ``out``); its stdout."""
    done = subprocess.run([sys.executable, "-m", "graph_tuner", *args], capture_output=True, text=True)
    out.write_text(done.stdout + done.stderr)
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SystemExit(f"graph-tuner {' '.join(args)} failed ({done.returncode}): {tail}; see {out}")
    return done.stdout


def check(model: str, work: Path, repeat: int) -> dict:
    """One check of ``model`` in ``work``: re-time a copy of the shipped log, solve, run."""
    shipped = shipped_log(model)  # main checked there is one
    if shipped.parent.name != host_cpu().name:
        print(f"warning: {model}: no shipped log for {host_cpu().name}; re-timing {shipped.parent.name}'s",
              file=sys.stderr)
    log, opt = work / f"{model}.log", work / f"{model}.opt.log"
    with (gzip.open(shipped) if shipped.suffix == ".gz" else open(shipped, "rb")) as src, open(log, "wb") as dst:
        shutil.copyfileobj(src, dst)
    t0 = time.perf_counter()
    gt("tune", model, "-o", str(log), "--retime", "--no-progress", out=work / f"{model}.tune.txt")
    t1 = time.perf_counter()
    gt("solve", model, "--records", str(log), "-o", str(opt), out=work / f"{model}.solve.txt")
    run, again = (json.loads(gt("run", model, "--records", str(opt), "--transform-records", str(log), "--repeat",
                                str(repeat), "--json", out=work / f"{model}.run{i}.txt")) for i in (1, 2))
    keep = ("median_ms", "predicted_ms", "retimed_predicted_ms", "steady")
    steps = [(layer["name"], layer["predicted_ms"], layer["measured_ms"])
             for layer in run["layers"] if layer["category"] == "conv" and layer["predicted_ms"] is not None]
    level = sum(m for _, _, m in steps) / sum(p for _, p, _ in steps) if steps else 1.0
    second = {layer["name"]: layer["measured_ms"] for layer in again["layers"]}
    return {"model": model, "clock": time.strftime("%H:%M:%S"), "retime_s": t1 - t0,
            "convs": [(name, error(p, m)) for name, p, m in steps],
            "convs_at_level": [(name, error(p * level, m)) for name, p, m in steps], "level": level,
            "convs_run_again": [(name, error(second[name], m)) for name, _, m in steps if name in second],
            "again_steady": again["steady"],
            **{k: run[k] for k in keep}}


def error(predicted: float | None, measured: float) -> float:
    """(predicted - measured) / measured, the sign the docs use; NaN without a prediction."""
    return float("nan") if predicted is None else (predicted - measured) / measured


def row(c: dict) -> str:
    err, again = (error(c[k], c["median_ms"]) for k in ("predicted_ms", "retimed_predicted_ms"))
    return (f"{c['clock']}  {c['model']:<14} retime {c['retime_s']:5.0f} s  predicted {c['predicted_ms']:8.3f}  "
            f"median {c['median_ms']:8.3f}  ({err:+6.1%}; re-timed at once {again:+6.1%})  "
            f"{'steady' if c['steady'] else 'NOT steady'}  {conv_line(c['convs'])}\n"
            f"{'':10}at the run's level (x{c['level']:.3f}): {conv_line(c['convs_at_level'])}; "
            f"run again{'' if c['again_steady'] else ' (NOT steady)'}: {moved(c['convs_run_again'])}")


def moved(changes: list[tuple[str, float]]) -> str:
    """``"2 of 21 conv steps moved more than 10% (most conv3 -12.4%)"``: one run's against the other's."""
    if not changes:
        return "no convs"
    name, most = max(changes, key=lambda c: abs(c[1]))
    n = sum(abs(e) > CONV_TARGET for _, e in changes)
    return f"{n} of {len(changes)} conv steps moved more than {CONV_TARGET:.0%} (most {name} {most:+.1%})"


def conv_line(convs: list[tuple[str, float]]) -> str:
    """``"conv steps within 10%: 20 of 21 (worst conv3 +12.4%)"``."""
    if not convs:
        return "no conv predictions"
    name, worst = max(convs, key=lambda c: abs(c[1]))
    ok = sum(abs(e) <= CONV_TARGET for _, e in convs)
    return f"conv steps within {CONV_TARGET:.0%}: {ok} of {len(convs)} (worst {name} {worst:+.1%})"


def within(checks: list[dict]) -> str:
    ok = sum(abs(error(c["predicted_ms"], c["median_ms"])) <= TARGET for c in checks)
    return f"{ok} of {len(checks)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--checks", type=positive_int, default=1, help="times over the models (default 1)")
    ap.add_argument("--repeat", type=positive_int, default=50, help="timed runs of `run` (default 50)")
    ap.add_argument("--out", help="write every check as JSON here")
    args = ap.parse_args()
    unknown = [m for m in args.models if shipped_log(m) is None]
    if unknown:  # before the first check, not minutes into the run
        ap.error(f"no shipped log for {', '.join(unknown)}; the shipped models: {', '.join(shipped_models())}")
    done: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="prediction_check."))
    try:
        for _ in range(args.checks):
            for model in args.models:
                done.append(check(model, work, args.repeat))
                print(row(done[-1]), flush=True)
    finally:  # the checks done so far are kept, and on a failure the files it names
        if args.out:
            atomic_write_text(args.out, json.dumps(done, indent=1))
    shutil.rmtree(work)
    steady = [c for c in done if c["steady"]]
    print(f"within {TARGET:.0%}: {within(done)} checks; steady ones: {within(steady)}; in the steady "
          f"ones, {conv_line([e for c in steady for e in c['convs']])}; at their runs' levels, "
          f"{conv_line([e for c in steady for e in c['convs_at_level']])}; run again, "
          f"{moved([e for c in steady if c['again_steady'] for e in c['convs_run_again']])}")


if __name__ == "__main__":
    main()
