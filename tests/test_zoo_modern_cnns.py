"""EfficientNet-B0, MobileNetV3-Large, ResNeXt-50 (32x4d), RegNetY-800MF and YOLOv5s end to
end: published sizes, `inspect`, and `run` under a uniform plan against onnxruntime on the ONNX
export of the same weights."""
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
from graph_tuner.zoo.regnet import PYCLS_STAGES, regnet_y_800mf
from graph_tuner.zoo.resnext import resnext50_32x4d
from graph_tuner.zoo.yolo import yolov5s

ort = pytest.importorskip("onnxruntime")
TARGET = "llvm -mcpu=test"
MODELS = ["efficientnet-b0", "mobilenet-v3-large"]
# Built small for the end-to-end test (the smallest sizes that keep every stage at 2x2 or more):
# name -> builder at that size.
SMALL = {"resnext-50-32x4d": lambda: resnext50_32x4d(image_size=64),
         "regnet-y-800mf": lambda: regnet_y_800mf(image_size=64),
         "yolov5s": lambda: yolov5s(image_size=64)}


# (conv layers, published multiply-adds in G, params in M, tolerance): EfficientNet paper
# Table 2 (0.39B FLOPS = multiply-adds, 5.3M); MobileNetV3 paper Table 3 (219M MAdds, 5.4M).
@pytest.mark.parametrize("name,convs,gmacs,mparams,tol", [("efficientnet-b0", 81, 0.39, 5.3, 0.02),
                                                          ("mobilenet-v3-large", 62, 0.219, 5.4, 0.02)])
def test_conv_count_flops_and_params_match_published(name, convs, gmacs, mparams, tol):
    m = get_model(name)
    assert len(m.convs()) == convs
    assert m.flops() / 2e9 == pytest.approx(gmacs, rel=tol)
    assert _trainable_params(m) / 1e6 == pytest.approx(mparams, rel=tol)


def _trainable_params(m) -> int:
    """Weights, biases, BN scale and shift (not the running statistics): PyTorch's
    ``sum(p.numel() for p in model.parameters())``."""
    return sum(math.prod(s) for op in m.ops for k, s in op.weights.items() if k not in ("mean", "var"))


# (model, conv layers, exact parameter count, published multiply-adds in G, relative tolerance).
# torchvision's weights metadata (num_params; its "GFLOPS" are multiply-adds at 224x224):
# resnext50_32x4d 25,028,904 and 4.23; regnet_y_800mf 6,432,512 and 0.8 (one digit: 0.834 here).
# YOLOv5s (v6.0-v7.0, 640x640): Ultralytics' model summary before fusing, 7,235,389 parameters,
# and its README's 16.5 GFLOPs (FLOPs = 2 x multiply-adds, thop, with the bias adds; 16.4 fused).
@pytest.mark.parametrize("name,convs,params,gmacs,tol", [
    ("resnext-50-32x4d", 53, 25_028_904, 4.23, 0.005), ("regnet-y-800mf", 75, 6_432_512, 0.8, 0.05),
    ("yolov5s", 60, 7_235_389, 16.5 / 2, 0.01)])
def test_grouped_and_detection_models_match_published(name, convs, params, gmacs, tol):
    m = get_model(name)
    assert len(m.convs()) == convs
    assert _trainable_params(m) == params
    assert m.flops() / 2e9 == pytest.approx(gmacs, rel=tol)


def test_regnet_paper_figures_are_pycls_rounding():
    """The paper's RegNetY-800MF (0.8 G multiply-adds, 6.3 M parameters) is pycls's: its last
    stage rounds 776 channels to 768, torchvision's to 784 (the zoo's)."""
    m = regnet_y_800mf(stages=PYCLS_STAGES)
    assert _trainable_params(m) / 1e6 == pytest.approx(6.3, abs=0.05)
    assert m.flops() / 2e9 == pytest.approx(0.8, abs=0.05)


def test_yolov5s_fused_parameters_and_layout():
    m = get_model("yolov5s")
    # Ultralytics' fused count (each BN folded into a conv bias): 7,225,885.
    bn = sum(op.weights["gamma"][0] for op in m.ops if op.kind == "batch_norm")
    assert _trainable_params(m) - bn == 7_225_885
    assert [m.op(o).shape for o in m.outputs] == [(1, 255, 80, 80), (1, 255, 40, 40), (1, 255, 20, 20)]
    assert m.op("model_0").attrs["kernel_size"] == (6, 6) and m.op("model_0").shape == (1, 32, 320, 320)
    assert [op.attrs["pool_size"] for op in m.ops if op.kind == "max_pool"] == [(5, 5)] * 3
    assert [m.op(i).kind for i in m.op("model_12").inputs] == ["resize", "silu"]  # upsampled P5 + backbone P4
    assert m.op("model_11").attrs["mode"] == "nearest" and m.op("model_11").shape == (1, 256, 40, 40)


def test_grouped_conv_shapes():
    rx, rg = get_model("resnext-50-32x4d"), get_model("regnet-y-800mf")
    # ResNeXt: 32 groups of 4 channels at stage 1, of 32 at stage 4; stride on the grouped 3x3
    assert rx.workload(rx.op("layer1_0_conv2")).kernel_shape == (128, 4, 3, 3)
    assert rx.op("layer4_0_conv2").attrs["strides"] == (2, 2) and rx.op("layer4_0_conv2").weights["weight"][1] == 32
    # RegNetY: 16 channels a group; squeeze-excite on a quarter of the block's input (144 -> 36)
    assert [rg.op(f"trunk_output_block{i}_0_f_b").attrs["groups"] for i in (1, 2, 3, 4)] == [4, 9, 20, 49]
    assert rg.op("trunk_output_block3_1_f_se_fc1").shape == (1, 80, 1, 1)
    assert rg.op("trunk_output_block3_0_f_se_fc1").shape == (1, 36, 1, 1)


def test_squeeze_excite_shapes():
    eff, v3 = get_model("efficientnet-b0"), get_model("mobilenet-v3-large")
    # EfficientNet: a quarter of the block's input channels (40 -> 240 expanded -> 10)
    assert eff.op("features_4_0_se_fc1").shape == (1, 10, 1, 1)
    assert eff.op("features_4_0_se_scale").inputs == ["features_4_0_depthwise_silu", "features_4_0_se_gate"]
    # MobileNetV3: a quarter of the expansion channels, rounded to 8 (72 / 4 = 18 -> 24)
    assert v3.op("features_4_se_fc1").shape == (1, 24, 1, 1)
    assert v3.op("features_4_se_gate").kind == "hard_sigmoid"


@pytest.mark.parametrize("name", MODELS + list(SMALL))
def test_inspect(name, capsys):
    assert main(["inspect", name, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m = get_model(name)
    assert len(out["layers"]) == len(m.convs())
    assert sum(w["count"] for w in out["workloads"]) == len(m.convs())
    # the depthwise and grouped convs (YOLOv5s has none)
    assert any(layer["groups"] > 1 for layer in out["layers"]) == (name != "yolov5s")


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


def assert_runs_as(m, plan, onnx_path, x, want, tmp_path, capsys) -> None:
    """``plan``'s outputs, and `run` on the ONNX export with the uniform plan's log, equal
    onnxruntime's ``want`` on ``x`` (float32 sums of thousands of terms in another order: the
    errors scale with the outputs)."""
    for got, w in zip(compile_model(m, plan).run(x), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=2e-5 * np.abs(w).max())
    log = _uniform_log(m, tmp_path / "opt.log")
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(onnx_path), "--records", str(log), "--transform-records", str(log), "--input",
                 str(tmp_path / "x.npy"), "--save-output", str(tmp_path / "y.npy"), "--repeat", "2",
                 "--no-retime", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["median_ms"] > 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want[0], rtol=1e-4, atol=2e-5 * np.abs(want[0]).max())


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


@pytest.mark.parametrize("name", list(SMALL))
def test_small_build_runs_as_onnxruntime(name, tmp_path, monkeypatch, capsys):
    """The zoo model built at 64x64 under the uniform plan (grouped convs in blocks of their channels
    per group), and `run` on its ONNX export (imported, with that file's weights), against
    onnxruntime on the export; every output compared."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    m = SMALL[name]()
    onnx_path = tmp_path / f"{name}.onnx"
    save_onnx(m, m.params(seed=0), onnx_path)
    x = np.random.default_rng(3).standard_normal(m.op("data").shape, dtype=np.float32)
    want = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"data": x})
    assert len(want) == len(m.outputs) and all(np.abs(w).max() > 0.1 for w in want)
    plan = uniform_plan(m, 16)
    grouped = [lc for lc in plan.layers if 1 < lc.workload.groups < lc.workload.in_channels]
    assert all(lc.in_block > 1 and lc.workload.kernel_shape[1] % lc.in_block == 0 for lc in grouped)
    assert bool(grouped) == (name != "yolov5s")
    assert_runs_as(m, plan, onnx_path, x, want, tmp_path, capsys)
