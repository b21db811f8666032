"""`graph-tuner tune`: a real run on a tiny ONNX model, resume, and clean one-line errors."""
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graph_tuner.cli import main
from graph_tuner.records import read_records


@pytest.fixture
def tiny_onnx(tmp_path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("w0", (16, 8, 3, 3)), ("w1", (16, 16, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Conv", ["r0", "w1"], ["y"], name="conv1")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], inits)
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_tune_tiny_model_then_resume(tiny_onnx, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "out" / "tiny.log"
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3"]) == 0
    out = capsys.readouterr().out
    assert "[1/2]" in out and "[2/2]" in out and "GFLOP/s" in out
    assert "host while tuning: one-thread conv " in out  # the host's speed, first and last
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


@pytest.mark.parametrize("args, message", [
    (["resnet-18", "--trials", "0"], "--trials must be >= 1"),
    (["resnet-18", "--time-budget", "-5"], "--time-budget must be > 0"),
    (["resnet-17"], "unknown model 'resnet-17'"),
    (["resnet-18", "--batch", "0"], "batch must be a positive integer"),
    (["resnet-18", "--retime", "--trials", "5"], "--retime does not search"),
])
def test_bad_arguments_exit_2_with_one_line(args, message, tmp_path, capsys):
    assert main(["tune", *args, "-o", str(tmp_path / "x.log")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.log").exists()


def test_unwritable_log_exits_2_without_traceback(tiny_onnx, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "graph_tuner", "tune", str(tiny_onnx), "-o", str(blocker / "t.log")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "cannot write the tuning log" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
