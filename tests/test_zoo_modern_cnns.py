"""EfficientNet-B0 and MobileNetV3-Large end to end: published sizes, `inspect`, and `run`
under a uniform plan against onnxruntime on the ONNX export of the same weights."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from graph_tuner.cli import main
from graph_tuner.executor import compile_model, uniform_plan
from graph_tuner.layout_flow import layout_name
from graph_tuner.onnx_export import save_onnx
from graph_tuner.onnx_import import load_onnx
from graph_tuner.records import make_conv2d_record, make_transform_record
from graph_tuner.zoo import get_model

ort = pytest.importorskip("onnxruntime")
TARGET = "llvm -mcpu=test"
MODELS = ["efficientnet-b0", "mobilenet-v3-large"]


# (conv layers, published multiply-adds in G, params in M, tolerance): EfficientNet paper
# Table 2 (0.39B FLOPS = multiply-adds, 5.3M); MobileNetV3 paper Table 3 (219M MAdds, 5.4M).
@pytest.mark.parametrize("name,convs,gmacs,mparams,tol", [("efficientnet-b0", 81, 0.39, 5.3, 0.02),
                                                          ("mobilenet-v3-large", 62, 0.219, 5.4, 0.02)])
def test_conv_count_flops_and_params_match_published(name, convs, gmacs, mparams, tol):
    m = get_model(name)
    assert len(m.convs()) == convs
    assert m.flops() / 2e9 == pytest.approx(gmacs, rel=tol)
    # trainable parameters: weights, biases, BN scale and shift (not the running statistics)
    params = sum(math.prod(s) for op in m.ops for k, s in op.weights.items() if k not in ("mean", "var"))
    assert params / 1e6 == pytest.approx(mparams, rel=tol)


def test_squeeze_excite_shapes():
    eff, v3 = get_model("efficientnet-b0"), get_model("mobilenet-v3-large")
    # EfficientNet: a quarter of the block's input channels (40 -> 240 expanded -> 10)
    assert eff.op("features_4_0_se_fc1").shape == (1, 10, 1, 1)
    assert eff.op("features_4_0_se_scale").inputs == ["features_4_0_depthwise_silu", "features_4_0_se_gate"]
    # MobileNetV3: a quarter of the expansion channels, rounded to 8 (72 / 4 = 18 -> 24)
    assert v3.op("features_4_se_fc1").shape == (1, 24, 1, 1)
    assert v3.op("features_4_se_gate").kind == "hard_sigmoid"


@pytest.mark.parametrize("name", MODELS)
def test_inspect(name, capsys):
    assert main(["inspect", name, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m = get_model(name)
    assert len(out["layers"]) == len(m.convs())
    assert sum(w["count"] for w in out["workloads"]) == len(m.convs())
    assert any(layer["groups"] > 1 for layer in out["layers"])  # the depthwise convs


def _uniform_log(model, path, block=16):
    """The records of :func:`uniform_plan` (one per conv layer, in conv order) and 1 ns per 1000
    values layout-transform records, so that `run` measures nothing before it runs."""
    lines = []
    for lc in uniform_plan(model, block).layers:
        entity = {"tile_ic": [-1, lc.in_block], "tile_oc": [-1, lc.out_block], "tile_ow": [-1, lc.candidate.config.ow_bn],
                  "unroll_kw": True}
        lines.append(json.dumps(make_conv2d_record(lc.workload, entity, 0, [1e-4], TARGET, timestamp=0.0)))
    shapes = {op.shape for op in model.ops if len(op.shape) == 4}
    for shape in sorted(shapes):
        for a, b in itertools.permutations([d for d in (1, 2, 4, 8, 16) if shape[1] % d == 0], 2):
            rec = make_transform_record(shape, layout_name(a), layout_name(b), 1e-9 * math.prod(shape), TARGET,
                                        timestamp=0.0)
            lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name", MODELS)
def test_run_matches_onnxruntime(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    m = get_model(name)
    onnx_path = tmp_path / f"{name}.onnx"
    save_onnx(m, m.params(seed=0), onnx_path)  # `run` gives a zoo model the weights of seed 0
    x = np.random.default_rng(3).standard_normal(m.op("data").shape, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    assert np.abs(want).max() > 0.1  # weights scaled to keep activations alive through the depth
    log = _uniform_log(m, tmp_path / "opt.log")
    assert main(["run", name, "--records", str(log), "--transform-records", str(log), "--input",
                 str(tmp_path / "x.npy"), "--save-output", str(tmp_path / "y.npy"), "--repeat", "2",
                 "--no-retime", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["median_ms"] > 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)
    # The imported export runs in plain NCHW too, with the file's own weights.
    imported = load_onnx(onnx_path)
    got = compile_model(imported, uniform_plan(imported, 1)).run(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
