"""`graph-tuner solve` end to end, and its errors (one line, exit 2, no partial output)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from graph_tuner import GraphTuner
from graph_tuner.records import make_transform_record

DATA = Path(__file__).parent / "data"
X86 = DATA / "resnet18_x86_v01_typographic.log"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "graph_tuner", *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def transform_log(tmp_path_factory):
    gt = GraphTuner("resnet-18", X86)
    lines = []
    for shape, a, b in gt.required_transforms():
        blocked = [shape[0], shape[1] // a, shape[2], shape[3], a] if a > 1 else list(shape)
        src, dst = (f"NCHW{x}c" if x > 1 else "NCHW" for x in (a, b))
        lines.append(json.dumps(make_transform_record(blocked, src, dst, math.prod(shape) * 1e-10, "llvm")))
    path = tmp_path_factory.mktemp("t") / "transforms.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_solve_writes_21_records_and_a_json_report(tmp_path, transform_log):
    out, report = tmp_path / "opt.log", tmp_path / "report.json"
    p = run("solve", "resnet-18", "--records", X86, "--transform-records", transform_log, "-o", out, "--report", report)
    assert p.returncode == 0, p.stderr
    assert len(out.read_text().splitlines()) == 21
    r = json.loads(report.read_text())
    assert len(r["layers"]) == 21 and r["solver"]["optimal"] is True
    totals = r["totals_ms"]
    assert totals["graph_tuned"] == pytest.approx(totals["kernels"] + totals["transforms"])
    assert totals["history_best"] >= totals["graph_tuned"] - 1e-9
    assert "total:" in p.stdout


def test_default_output_name_is_model_opt_log(tmp_path, transform_log):
    p = run("solve", "resnet-18", "--records", X86, "--transform-records", transform_log, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "resnet-18.opt.log").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["solve", "no-such-net", "--records", X86], "no-such-net"),
        (["solve", "resnet-18", "--records", "missing.log"], "missing.log"),
        (["solve", "resnet-18", "--records", X86, "--top-k", "0"], "positive integer"),
        (["solve", "resnet-18", "--records", X86, "--solver", "magic"], "invalid choice"),
        (["solve", "resnet-18", "--records", X86, "--target", "opencl"], "unsupported target"),
        (["solve", "resnet-50", "--records", X86, "--transform-records", X86], "no tuning record"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, args, message):
    out = tmp_path / "out.log"
    p = run(*args, "-o", out)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert message in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_missing_transform_costs_without_estimate_fails_cleanly(tmp_path):
    empty = tmp_path / "none.log"
    empty.write_text("# no transform records\n")
    out = tmp_path / "out.log"
    p = run("solve", "resnet-18", "--records", X86, "--transform-records", empty, "-o", out)
    assert p.returncode == 2 and "--estimate-transforms" in p.stderr and not out.exists()


def test_malformed_log_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.log"
    good = X86.read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join(good[:3] + ["{not json"] + good[3:]) + "\n", encoding="utf-8")
    p = run("solve", "resnet-18", "--records", bad, "-o", tmp_path / "o.log")
    assert p.returncode == 2 and "bad.log:4" in p.stderr and "Traceback" not in p.stderr


def test_records_folder_takes_this_cpus_log(tmp_path, transform_log):
    """``--records DIR``: DIR/<this cpu>/MODEL.log, the layout ``tune -o DIR/ --cluster`` writes."""
    from kernels.jit import host_cpu

    logs = tmp_path / "logs"
    (logs / "othercpu").mkdir(parents=True)
    (logs / "othercpu" / "resnet-18.log").write_text(X86.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "opt.log"
    p = run("solve", "resnet-18", "--records", f"{logs}/", "--transform-records", transform_log, "-o", out)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and not out.exists()
    assert f"no log of resnet-18 for this CPU ({host_cpu().name})" in p.stderr and "othercpu" in p.stderr
    (logs / host_cpu().name).mkdir()
    (logs / host_cpu().name / "resnet-18.log").write_text(X86.read_text(encoding="utf-8"), encoding="utf-8")
    p = run("solve", "resnet-18", "--records", f"{logs}/", "--transform-records", transform_log, "-o", out)
    assert p.returncode == 0, p.stderr
    assert len(out.read_text().splitlines()) == 21


def test_main_job_uses_the_shipped_log(tmp_path):
    """The README's main command: no --records, the shipped data/<cpu>/resnet-18.log."""
    env = {**__import__("os").environ, "GRAPH_TUNER_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "graph_tuner", "solve", "resnet-18", "--no-progress"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    lines = (tmp_path / "resnet-18.opt.log").read_text().splitlines()
    assert len(lines) == 21
    assert "optimal (proven)" in p.stdout and "history best" in p.stdout
    # How to run the plan priced as this solve priced it: with the tuning log it came from.
    hint = p.stdout.splitlines()[-1].split()
    assert hint[:6] == ["run", "it:", "graph-tuner", "run", "resnet-18", "--records"] and hint[7] == "--transform-records"
    assert (tmp_path / hint[6]).exists() and Path(hint[8]).exists()


def test_fallback_fills_untuned_layers_with_flagged_records(tmp_path):
    """ResNet-50 from a ResNet-18 log: only the stem is tuned; the rest fall back."""
    out = tmp_path / "r50.opt.log"
    shipped = Path(__file__).parents[1] / "data" / "znver4" / "resnet-18.log"
    p = run("solve", "resnet-50", "--records", shipped, "--fallback", "--estimate-transforms",
            "--transform-records", shipped, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "warning" in p.stderr and "fallback" in p.stderr
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(records) == 53
    flagged = [i for i, r in enumerate(records) if r.get("graph_tuner", {}).get("fallback")]
    from graph_tuner.loading import load_model

    tuned = set(load_model("resnet-18").conv_workloads())
    untuned = [i for i, w in enumerate(load_model("resnet-50").conv_workloads()) if w not in tuned]
    assert flagged == untuned and 0 < len(untuned) < 53


def test_records_timed_on_another_cpu_draw_a_warning(tmp_path, transform_log):
    from kernels.jit import host_cpu

    host, out = host_cpu().name, tmp_path / "opt.log"
    for cpu, warned in [("not-" + host, True), (host, False), (None, False)]:  # None: a target without -mcpu
        log = tmp_path / f"{cpu}.log"
        log.write_text(X86.read_text().replace("\u201cllvm\u201d", f"\u201cllvm -mcpu={cpu}\u201d" if cpu else "\u201cllvm\u201d"))
        p = run("solve", "resnet-18", "--records", log, "--transform-records", transform_log, "-o", out)
        assert p.returncode == 0, p.stderr
        assert (f"timed on not-{host}, not on this CPU ({host})" in p.stderr) == warned, p.stderr


def test_plan_to_dev_null_stdout_or_through_a_link(tmp_path, transform_log):
    """Devices are written through, not renamed over (as root that replaced /dev/null with a
    regular file), and a link to the output stays a link to it."""
    import os
    import stat

    before = os.stat(os.devnull)
    p = run("solve", "resnet-18", "--records", X86, "--transform-records", transform_log, "-o", os.devnull)
    assert p.returncode == 0, p.stderr
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    if os.path.islink("/dev/stdout"):  # the plan on standard output (a pipe here)
        p = run("solve", "resnet-18", "--records", X86, "--transform-records", transform_log, "-o", "/dev/stdout")
        assert p.returncode == 0, p.stderr
        assert sum(line.startswith("{") for line in p.stdout.splitlines()) == 21  # one record a conv
    target = tmp_path / "plans" / "r18.log"
    target.parent.mkdir()
    target.write_text("old\n")
    (tmp_path / "latest.log").symlink_to(target)
    p = run("solve", "resnet-18", "--records", X86, "--transform-records", transform_log, "-o", tmp_path / "latest.log")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "latest.log").is_symlink() and len(target.read_text().splitlines()) == 21
