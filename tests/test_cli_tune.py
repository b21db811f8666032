"""`graph-tuner tune`: a real run on a tiny ONNX model, resume, and clean one-line errors."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graph_tuner.cli import main
from graph_tuner.records import read_records


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """`tune` checks (and creates) the transform cache before it runs: never the user's."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))


def test_tune_tiny_model_then_resume(tiny_onnx, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "out" / "tiny.log"
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3"]) == 0
    out = capsys.readouterr().out
    assert "[1/2]" in out and "[2/2]" in out and "GFLOP/s" in out
    assert out.count("3 new + 0 logged of 3 trials") == 2  # each workload's budget (the floor: all 3)
    assert "host while tuning: one-thread conv " in out  # the host's speed, first and last
    # the whole step's time, with the conv search's part of it (no larger than the whole)
    whole, search = map(float, re.search(r"tuned 2 workloads in ([\d.]+) s \(the conv search ([\d.]+) s\)", out).groups())
    assert 0 < search <= whole
    parsed = read_records(log)
    # 3 trials per workload, then each workload's winners (one per layout pair, <= 3) re-timed 3 times
    configs = {(r.workload, r.config_index) for r in parsed.records}
    assert len(configs) == 6 and 6 < len(parsed.records) <= 6 + 3 * 6
    assert {r.workload.kernel_shape for r in parsed.records} == {(16, 8, 3, 3), (16, 16, 1, 1)}
    assert parsed.transforms and all(t.time > 0 for t in parsed.transforms)
    n_lines = len(log.read_text().splitlines())
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3"]) == 0  # nothing left to do
    assert len(log.read_text().splitlines()) == n_lines
    assert "0 new + 3 logged" in capsys.readouterr().out
    before = read_records(log).records
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--retime", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "re-timed 6 configs" in out and "host while re-timing" in out  # every config is a finalist here
    after = read_records(log).records
    assert len(after) == 6 * 3 + len([r for r in before if not hasattr(r, "config_index")])
    assert {(r.workload, r.config_index) for r in after if hasattr(r, "config_index")} == configs


def exit_status(argv) -> int:
    """main's status, also for usage errors (argparse exits instead of returning)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("args, message", [
    *[(["resnet-18", "--trials", bad], "argument --trials: expected a positive integer")
      for bad in ("0", "-1", "abc", "1e3")],
    *[(["resnet-18", "--time-budget", bad],
       f"argument --time-budget: expected a positive number of seconds, got '{bad}'")
      for bad in ("-5", "nan", "inf", "0")],
    (["resnet-17"], "unknown model 'resnet-17'"),
    (["resnet-18", "--batch", "0"], "argument --batch: expected a positive integer"),
    (["resnet-18", "--batch", "99999999999999999999"],
     "argument --batch: expected a positive integer"),
    (["resnet-18", "--batch", "4096"], "batch must be"),
    (["resnet-18", "--retime", "--trials", "5"], "--retime does not search"),
])
def test_bad_arguments_exit_2_with_one_line(args, message, tmp_path, capsys):
    assert exit_status(["tune", *args, "-o", str(tmp_path / "x.log")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.log").exists()


NOT_LOGS = {
    "binary": bytes(range(256)) * 8,
    "text": b"conv1 0.52 ms\nconv2 0.31 ms\n",
    "json": b'{"layers": {"conv1": "NCHW16c"}}\n',
}


@pytest.mark.parametrize("kind", ["model", "other model", *NOT_LOGS])
def test_output_that_is_not_a_log_exits_2_and_is_left_byte_identical(kind, tiny_onnx, tmp_path,
                                                                      capsys):
    """`tune model.onnx -o model.onnx` once cut the model's tail off as a torn log line."""
    if kind == "model":
        out = tiny_onnx
    elif kind == "other model":
        out = tmp_path / "other.onnx"
        out.write_bytes(tiny_onnx.read_bytes())
    else:
        out = tmp_path / f"{kind}.log"
        out.write_bytes(NOT_LOGS[kind])
    before = out.read_bytes()
    assert main(["tune", str(tiny_onnx), "-o", str(out), "--trials", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graph-tuner: error: ") and str(out) in err
    assert ("is also MODEL" if kind == "model" else "not an AutoTVM tuning log") in err
    assert out.read_bytes() == before
    assert exit_status(["tune", str(tiny_onnx), "-o", str(out), "--retime"]) == 2
    assert out.read_bytes() == before


@pytest.mark.parametrize("command", [
    ["solve", "--fallback", "--records", "/dev/null", "-o"],
    ["solve", "--fallback", "--records", "/dev/null", "-o", "plan.log", "--report"],
    ["run", "--records", "/dev/null", "--save-output"],
    ["tune", "--trials", "1", "--no-progress", "-o"],
])
def test_an_output_over_the_models_weights_file_exits_2_and_leaves_it(command, tiny_onnx, tmp_path, capsys):
    """A model saved with external data is read with its weights file: `solve ext.onnx -o
    ext.weights` once cut that file to a plan's records, and the model would no longer load."""
    import onnx

    model = tmp_path / "ext.onnx"
    onnx.save(onnx.load(tiny_onnx), model, save_as_external_data=True, location="ext.weights", size_threshold=0)
    weights = tmp_path / "ext.weights"
    before = weights.read_bytes()
    assert main([command[0], str(model), *command[1:], str(weights)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{weights} is also MODEL's weights file ext.weights" in err
    assert weights.read_bytes() == before


def test_a_compressed_log_for_output_exits_2_naming_the_unpack_step(tiny_onnx, tmp_path, capsys):
    """A shipped ``.log.gz`` given to ``-o`` (to re-time it) was refused as "not an AutoTVM
    tuning log"; records cannot be appended to gzip, so the error says how to unpack it."""
    import gzip

    rec = b'{"input": ["llvm", "conv2d_NCHWc.x86", [], {}], "config": {}, "result": [[1e-4], 0, 0, 0]}\n'
    out = tmp_path / "resnet-18.log.gz"
    out.write_bytes(gzip.compress(rec))
    before = out.read_bytes()
    for extra in (["--trials", "1", "--no-progress"], ["--retime", "--no-progress"]):
        assert main(["tune", str(tiny_onnx), "-o", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"graph-tuner: error: {out}: a gzip-compressed log")
        assert f"gunzip -c {out} > {tmp_path / 'resnet-18.log'}" in err
        assert out.read_bytes() == before
    (tmp_path / "resnet-18.log").write_bytes(rec)  # unpacked before: never suggest overwriting it
    assert main(["tune", str(tiny_onnx), "-o", str(out), "--retime", "--no-progress"]) == 2
    assert f"> {tmp_path / 'resnet-18.unpacked.log'}" in capsys.readouterr().err
    (tmp_path / "resnet-18.unpacked.log").write_bytes(rec)  # and not that one either
    assert main(["tune", str(tiny_onnx), "-o", str(out), "--retime", "--no-progress"]) == 2
    assert f"> {tmp_path / 'resnet-18.unpacked2.log'}" in capsys.readouterr().err
    unnamed = tmp_path / "tuned"  # gzip data whatever the name
    unnamed.write_bytes(gzip.compress(rec))
    assert main(["tune", str(tiny_onnx), "-o", str(unnamed), "--trials", "1", "--no-progress"]) == 2
    assert f"> {tmp_path / 'tuned.log'}" in capsys.readouterr().err
    for name, data in (("new.log.gz", None), ("empty.log.gz", b"")):
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        assert main(["tune", str(tiny_onnx), "-o", str(path), "--trials", "1", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert f"-o ends in .gz" in err and f"name {path.with_suffix('')} for -o" in err
        assert path.exists() == (data is not None) and (data is None or path.read_bytes() == data)


def test_output_that_is_a_directory_exits_2_naming_it(tiny_onnx, tmp_path, capsys):
    assert main(["tune", str(tiny_onnx), "-o", str(tmp_path), "--trials", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"graph-tuner: error: -o {tmp_path} is a folder; give a file path"


@pytest.mark.parametrize("command", ["tune", "solve"])
def test_output_dash_exits_2_and_writes_no_file_named_dash(command, tiny_onnx, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.log").touch()  # refused before anything reads it
    args = ["--trials", "1"] if command == "tune" else ["--records", "t.log"]
    assert main([command, str(tiny_onnx), "-o", "-", *args, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graph-tuner: error: -o -: outputs are files") and "/dev/stdout" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "-").exists()


@pytest.fixture
def fake_tune(tiny_onnx, tmp_path, monkeypatch):
    """A log path and the `tune` arguments that fill it fast: conv and transform timings faked,
    no calibration."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("graph_tuner.tuning.model_timer", lambda m: lambda w, c: 1e-4 * c.ow_bn)
    monkeypatch.setattr("kernels.transform_bench.time_transform", lambda key: 1e-5)
    log = tmp_path / "t.log"
    tune = ["tune", str(tiny_onnx), "-o", str(log), "--trials", "2", "--no-progress", "--no-calibrate"]
    return log, tune


def test_a_log_with_a_torn_last_line_is_repaired_and_resumed(fake_tune):
    log, tune = fake_tune
    assert main(tune) == 0
    whole = log.read_text()
    lines = whole.splitlines(keepends=True)
    log.write_text("".join(lines[:-1]) + lines[-1][:40])  # killed while writing the last line
    assert main(tune) == 0
    again = log.read_text().splitlines()
    assert again[:-1] == whole.splitlines()[:-1]  # only the torn line was cut ...
    old, new = json.loads(lines[-1]), json.loads(again[-1])
    # ... and written again
    assert (new["input"], new["result"][0]) == (old["input"], old["result"][0])


def test_unwritable_log_exits_2_without_traceback(tiny_onnx, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "graph_tuner", "tune", str(tiny_onnx), "-o", str(blocker / "t.log")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{blocker} is a file, not a folder" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def read_only_folder(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        return folder
    return Path("/sys")  # root ignores permission bits; sysfs refuses new files even to root


@pytest.mark.parametrize("where", ["t.log", "missing/t.log"])
def test_output_in_a_read_only_folder_exits_2_naming_it(where, tiny_onnx, tmp_path, capsys):
    out = read_only_folder(tmp_path) / where
    assert main(["tune", str(tiny_onnx), "-o", str(out), "--trials", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graph-tuner: error: ") and str(out) in err
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("kind", ["file", "read-only folder"])
def test_unwritable_cache_dir_exits_2_naming_the_variable(kind, tiny_onnx, tmp_path, monkeypatch,
                                                          capsys):
    if kind == "file":
        cache = tmp_path / "cache"
        cache.write_text("not a folder")
    else:
        cache = read_only_folder(tmp_path)
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(cache))
    log = tmp_path / "t.log"
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    # cli.main's environment check names a file or a folder without write permission; tune's
    # own check what else cannot be written into (a folder root may not write either)
    assert err.startswith("graph-tuner: error: GRAPH_TUNER_CACHE_DIR=") and str(cache) in err
    assert len(err.splitlines()) == 1 and not log.exists()


def test_a_bad_line_in_the_log_is_named_by_tune(fake_tune, tiny_onnx, tmp_path, capsys):
    # tune only appends, so it reads past a bad line, but says which line `solve` will refuse.
    log, tune = fake_tune
    assert main(tune) == 0
    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"result": [[', '"result": [["x", ', 1)
    log.write_text("".join(lines))
    capsys.readouterr()
    assert main(tune) == 0
    out = capsys.readouterr().out
    assert f"warning: {log}:2: skipped, not a valid AutoTVM record" in out and "solve` refuses the log" in out
    assert main(["solve", str(tiny_onnx), "--records", str(log), "-o", str(tmp_path / "o.log")]) == 2


def test_ctrl_c_is_one_line_and_leaves_a_whole_log(tmp_path):
    """Ctrl-C while tuning: exit 130, one line (an interrupt inside llvmlite once added an
    "Exception ignored in: ObjectRef.__del__" traceback at exit), every line of the log a
    whole record (a rerun resumes from them: test_tune_resume), the lock let go."""
    import signal

    log = tmp_path / "t.log"
    env = {**os.environ, "GRAPH_TUNER_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "graph_tuner", "tune", "resnet-18", "-o", str(log),
                             "--trials", "40", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # minutes of work: the tiny model's is over too soon
    try:
        for _ in range(600):  # until it has logged a few records
            if log.exists() and log.read_text().count("\n") >= 3:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err == "graph-tuner: interrupted\n"
    assert all(json.loads(line) for line in log.read_text().splitlines())
    assert not (tmp_path / ".t.log.lock").exists()
    assert len(read_records(log).records) >= 3
