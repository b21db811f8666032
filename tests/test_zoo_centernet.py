"""CenterNet-DLA-34 (issue 23): its structure, its parts' sizes against their published figures,
`inspect`, and `run` against onnxruntime on the ONNX export of the same weights."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from graph_tuner.builder import GraphBuilder
from graph_tuner.cli import main
from graph_tuner.executor import uniform_plan
from graph_tuner.layout_flow import analyse
from graph_tuner.model import conv_transpose_macs
from graph_tuner.onnx_export import save_onnx
from graph_tuner.zoo import get_model
from graph_tuner.zoo.centernet import centernet_dla34, dla34_levels
from test_zoo_modern_cnns import _trainable_params, assert_runs_as

ort = pytest.importorskip("onnxruntime")


def _ups(m):
    return [op for op in m.ops if op.kind == "conv_transpose"]


def test_conv_count_sizes_and_heads():
    m = get_model("centernet-dla-34")
    assert len(m.convs()) == 59 and len(_ups(m)) == 8
    assert _trainable_params(m) == 18_994_436
    assert m.flops() == 61_413_924_864  # 61.41 GFLOPs: the transposed convs' real taps only
    # the three heads at stride 4 of the 512x512 input: 128x128 maps
    assert [(o, m.op(o).shape) for o in m.outputs] == [("hm_2", (1, 80, 128, 128)), ("wh_2", (1, 2, 128, 128)),
                                                       ("reg_2", (1, 2, 128, 128))]
    assert [m.op(f"{h}_0").weights for h in ("hm", "wh", "reg")] == [{"weight": (256, 64, 3, 3), "bias": (256,)}] * 3


def test_upsampling_is_centernets_depthwise_conv_transpose():
    """groups = channels, kernel 2f, stride f, padding f / 2, no bias; then node(up + previous)."""
    m = get_model("centernet-dla-34")
    factors = []
    for op in _ups(m):
        f = op.attrs["strides"][0]
        c = m.op(op.inputs[0]).shape[1]
        assert op.attrs["kernel_size"] == (2 * f, 2 * f) and op.attrs["padding"] == (f // 2,) * 4
        assert op.attrs["groups"] == op.attrs["channels"] == c and op.weights == {"weight": (c, 1, 2 * f, 2 * f)}
        assert op.shape[2:] == tuple(f * d for d in m.op(op.inputs[0]).shape[2:])
        (add,) = m.consumers(op.name)
        assert add.kind == "add" and add.inputs[0] == op.name and m.op(add.inputs[1]).kind == "relu"
        assert m.consumers(add.name)[0].kind == "conv2d"  # the node
        factors.append(f)
    assert factors == [2, 2, 2, 2, 2, 2, 2, 4]  # DLAUp's 6, then the final IDAUp's 2 and 4


def test_dla34_backbone_matches_published():
    """DLA-34 as published, a classifier (global pool, 1x1 conv fc to 1000 classes) at 224x224:
    timm's model card 15.74 M parameters and 3,070,105,576 multiply-adds (its counter, 0.3% over
    the convs), PaddleClas 15.8 M and 3.1 G."""
    b = GraphBuilder("dla34")
    levels = dla34_levels(b, b.input((1, 3, 224, 224)))
    m = b.build(b.conv(b.global_avg_pool(levels[-1]), 1000, 1, bias=True, name="fc"))
    assert [b.shape(x)[1:] for x in levels] == [(16, 224, 224), (32, 112, 112), (64, 56, 56), (128, 28, 28),
                                                (256, 14, 14), (512, 7, 7)]
    assert len(m.convs()) == 38
    assert _trainable_params(m) == 15_742_104
    assert m.flops() / 2 == pytest.approx(3_070_105_576, rel=0.005)


def test_dlav0_variant_matches_open_model_zoo():
    """``dlav0.py``'s CenterNet, OpenVINO's ``ctdet_coco_dlav0_512``: 17.911 M parameters (each
    BN folded into its conv) and 62.211 GFLOPs (a transposed conv counted as every output pixel
    times all its taps)."""
    m = centernet_dla34(neck="dlav0")
    assert len(m.convs()) == 55 and len(_ups(m)) == 6
    bn = sum(op.weights["gamma"][0] for op in m.ops if op.kind == "batch_norm")
    assert round((_trainable_params(m) - bn) / 1e6, 3) == 17.911
    all_taps = sum(2 * math.prod(op.shape) * math.prod(op.weights["weight"][2:]) for op in _ups(m))
    real_taps = sum(2 * conv_transpose_macs(op, m.op(op.inputs[0]).shape) for op in _ups(m))
    assert (m.flops() - real_taps + all_taps) / 1e9 == pytest.approx(62.211, rel=1e-4)


def test_each_up_sampling_keeps_its_inputs_block():
    """A transposed conv is a decision (one block dividing C_in and C_out); CenterNet's divide
    every block, so a uniform plan transforms nothing into or out of them."""
    m = centernet_dla34(image_size=128)
    flow = analyse(m)
    assert {n: d.channels_in for n, d in flow.decisions.items() if d.kind == "conv_transpose"} == {
        op.name: (op.shape[1], op.shape[1]) for op in _ups(m)}
    plan = uniform_plan(m, 16)
    ups = {op.name for op in _ups(m)}
    assert all(plan.joins[u] == 16 for u in ups)
    assert not [t for t in plan.transforms if t.tensor in ups or set(t.consumers) & ups]


def test_inspect(capsys):
    assert main(["inspect", "centernet-dla-34", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["layers"]) == 59 and sum(w["count"] for w in out["workloads"]) == 59
    assert out["layers"][0]["kernel_shape"] == [16, 3, 7, 7] and out["layers"][0]["data_shape"] == [1, 3, 512, 512]


def test_runs_as_onnxruntime(tmp_path, monkeypatch, capsys):
    """At 64x64 (stride 32 is 2x2): the uniform plan's outputs, all three, and `run` on the ONNX
    export (imported, with that file's weights), equal onnxruntime's on the export."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    m = centernet_dla34(image_size=64)
    onnx_path = tmp_path / "centernet.onnx"
    save_onnx(m, m.params(seed=0), onnx_path)
    x = np.random.default_rng(3).standard_normal(m.op("data").shape, dtype=np.float32)
    want = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"data": x})
    assert [w.shape for w in want] == [(1, 80, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16)]
    assert all(np.abs(w).max() > 0.1 for w in want)
    assert_runs_as(m, uniform_plan(m, 16), onnx_path, x, want, tmp_path, capsys)
