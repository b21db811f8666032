"""Each modern-CNN op (issue 23) as a small ONNX graph: imported, compiled in plain and blocked
layouts and run, against onnxruntime on the same file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graph_tuner.errors import GraphTunerError
from graph_tuner.executor import compile_model, plan_from_configs, uniform_plan
from graph_tuner.fusion import plan_steps
from graph_tuner.layout_flow import PLAIN, analyse
from graph_tuner.onnx_import import load_onnx
from kernels.config import Conv2DConfig

ort = pytest.importorskip("onnxruntime")

C, H, W = 32, 6, 7


def _conv(name: str, x: str, out: str, cin: int, cout: int, rng, bias: bool = False):
    inits = [numpy_helper.from_array((rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32),
                                     f"{name}_w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"{name}_b"))
    return helper.make_node("Conv", [x] + [i.name for i in inits], [out], name=name), inits


def _graph(middle, middle_inits=(), out_shapes=None, opset=13, after=True, seed=0):
    """``x -> conv c0 -> middle (reads "a", writes "m", or several outputs) -> 1x1 conv each -> outputs``:
    the convs around the op let a plan put it in any layout."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], list(middle_inits)
    n, i = _conv("c0", "x", "a", C, C, rng)
    nodes += [n] + list(middle)
    inits += i
    outs = []
    for k, (name, channels) in enumerate(out_shapes or [("m", C)]):
        if after:
            n, i = _conv(f"c{k + 1}", name, f"y{k}", channels, 16, rng)
            nodes.append(n)
            inits += i
            outs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
        else:
            outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                              outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(tmp_path, proto, blocks=(1, 8, 16), x_scale=3.0):
    """Import ``proto``, run it under a uniform plan of each block, compare with onnxruntime."""
    path = tmp_path / "op.onnx"
    onnx.save(proto, path)
    m = load_onnx(path)
    x = np.random.default_rng(1).standard_normal((1, C, H, W), dtype=np.float32) * np.float32(x_scale)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for block in blocks:
        got = compile_model(m, uniform_plan(m, block)).run(x)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))
    return m


def _unary(op_type, **attrs):
    return [helper.make_node(op_type, ["a"], ["m"], name="op", **attrs)]


@pytest.mark.parametrize("op_type,attrs,kind", [
    ("Sigmoid", {}, "sigmoid"),
    ("HardSigmoid", {}, "hard_sigmoid"),  # ONNX's default alpha 0.2
    ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, "hard_sigmoid"),
    ("LeakyRelu", {"alpha": 0.1}, "leaky_relu"),
    ("LeakyRelu", {}, "leaky_relu"),
])
def test_unary_activations(tmp_path, op_type, attrs, kind):
    m = _run(tmp_path, _graph(_unary(op_type, **attrs)))
    assert m.op("op").kind == kind
    step = next(s for s in plan_steps(m) if "op" in s.ops)
    assert step.kind == "conv" and step.ops == ["c0", "op"]  # run in c0's epilogue, its parameters too


def test_hard_swish_opset_14(tmp_path):
    m = _run(tmp_path, _graph(_unary("HardSwish"), opset=14))
    assert m.op("op").kind == "hard_swish"
    assert [s.ops for s in plan_steps(m)][0] == ["c0", "op"]  # in c0's epilogue


def test_silu_as_sigmoid_times_x_becomes_one_op(tmp_path):
    middle = [helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
              helper.make_node("Mul", ["s", "a"], ["m"], name="silu")]  # either operand order
    m = _run(tmp_path, _graph(middle))
    assert m.op("silu").kind == "silu" and m.op("silu").inputs == ["c0"] and "sig" not in m.graph
    assert [s.ops for s in plan_steps(m)][0] == ["c0", "silu"]  # in c0's epilogue


def test_hard_swish_as_hard_sigmoid_times_x(tmp_path):
    """PyTorch before opset 14 writes hardswish so."""
    middle = [helper.make_node("HardSigmoid", ["a"], ["s"], name="hs", alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", ["a", "s"], ["m"], name="hswish")]
    m = _run(tmp_path, _graph(middle))
    assert m.op("hswish").kind == "hard_swish"


def test_sigmoid_read_twice_stays_a_sigmoid_and_a_multiply(tmp_path):
    middle = [helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
              helper.make_node("Mul", ["a", "s"], ["m"], name="mul"),
              helper.make_node("Add", ["m", "s"], ["m2"], name="add")]
    m = _run(tmp_path, _graph(middle, out_shapes=[("m2", C)]))
    assert m.op("sig").kind == "sigmoid" and m.op("mul").kind == "multiply"
    # c0's output is read twice: the sigmoid is its epilogue's second output (not a pass of its own)
    c0 = next(s for s in plan_steps(m) if s.kind == "conv" and s.ops[0] == "c0")
    assert c0.ops == ["c0"] and c0.affine.ops == ["sig"] and c0.affine.fused


def _se_middle(rng):
    """Squeeze-excite: pool -> 1x1 conv (bias) -> relu -> 1x1 conv (bias) -> sigmoid -> x * s."""
    n1, i1 = _conv("fc1", "p", "f1", C, 8, rng, bias=True)
    n2, i2 = _conv("fc2", "r", "f2", 8, C, rng, bias=True)
    nodes = [helper.make_node("GlobalAveragePool", ["a"], ["p"], name="pool"), n1,
             helper.make_node("Relu", ["f1"], ["r"], name="relu"), n2,
             helper.make_node("Sigmoid", ["f2"], ["g"], name="gate"),
             helper.make_node("Mul", ["a", "g"], ["m"], name="scale")]
    return nodes, i1 + i2


def test_squeeze_excite_channel_multiply(tmp_path):
    nodes, inits = _se_middle(np.random.default_rng(5))
    m = _run(tmp_path, _graph(nodes, inits))
    assert m.op("scale").kind == "multiply" and m.op("gate").shape == (1, C, 1, 1)


def test_squeeze_excite_with_mixed_layouts(tmp_path):
    """The gate comes in NCHW8c, the feature map in NCHW16c, the multiply computes in NCHW4c:
    both operands are transformed, and the result still matches."""
    nodes, inits = _se_middle(np.random.default_rng(5))
    path = tmp_path / "se.onnx"
    onnx.save(_graph(nodes, inits), path)
    m = load_onnx(path)
    configs = {"c0": Conv2DConfig(1, 16, 7), "fc1": Conv2DConfig(16, 8, 1), "fc2": Conv2DConfig(8, 8, 1),
               "c1": Conv2DConfig(4, 16, 7)}
    plan = plan_from_configs(m, configs, joins={"scale": 4})
    assert {(t.tensor, t.dst_block) for t in plan.transforms} >= {("c0", 4), ("gate", 4)}
    x = np.random.default_rng(2).standard_normal((1, C, H, W), dtype=np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(compile_model(m, plan).run(x)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_mean_over_h_w(tmp_path, keepdims):
    nodes = [helper.make_node("ReduceMean", ["a"], ["m"], name="mean", axes=[2, 3], keepdims=keepdims)]
    if keepdims:
        m = _run(tmp_path, _graph(nodes))
        assert m.op("mean").kind == "global_avg_pool"
    else:  # (1, C): a dense layer after it
        w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((10, C)).astype(np.float32), "fw")
        nodes.append(helper.make_node("Gemm", ["m", "fw"], ["y"], name="fc", transB=1))
        m = _run(tmp_path, _graph(nodes, [w], out_shapes=[("y", 10)], after=False))
        assert m.op("mean").kind == "flatten" and m.op("mean").shape == (1, C)


def test_reduce_mean_opset_18_axes_input(tmp_path):
    axes = numpy_helper.from_array(np.array([-1, -2], np.int64), "axes")
    m = _run(tmp_path, _graph([helper.make_node("ReduceMean", ["a", "axes"], ["m"], name="mean")], [axes],
                              opset=18), blocks=(8,))
    assert m.op("mean").kind == "global_avg_pool"


def _resize(opset=13, scales=(2.0, 2.0), sizes=None, **attrs):
    inits = [numpy_helper.from_array(np.array((1, 1) + tuple(scales), np.float32), "scales")] if scales else []
    if sizes:
        inits.append(numpy_helper.from_array(np.array((1, C) + tuple(sizes), np.int64), "sizes"))
    inputs = ["a", "", "scales" if scales else "", "sizes" if sizes else ""]
    return [helper.make_node("Resize", inputs[:4 if sizes else 3], ["m"], name="up", **attrs)], inits


@pytest.mark.parametrize("attrs,scales", [
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, (2.0, 2.0)),
    ({"mode": "nearest"}, (2.0, 3.0)),  # half_pixel, round_prefer_floor (the defaults)
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, (1.5, 2.5)),
    ({"mode": "linear"}, (2.0, 2.0)),  # half_pixel: bilinear, align_corners=False
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, (2.0, 1.5)),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, (0.5, 2.0)),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, (3.0, 3.0)),
])
def test_resize(tmp_path, attrs, scales):
    nodes, inits = _resize(scales=scales, **attrs)
    m = _run(tmp_path, _graph(nodes, inits))
    assert m.op("up").kind == "resize" and m.op("up").shape == (1, C, int(H * scales[0]), int(W * scales[1]))


def test_resize_to_sizes(tmp_path):
    nodes, inits = _resize(scales=None, sizes=(13, 9), mode="linear")
    m = _run(tmp_path, _graph(nodes, inits))
    assert m.op("up").shape == (1, C, 13, 9)


@pytest.mark.parametrize("axes, given", [([2, 3], "scales"), ([3, -2], "sizes")])
def test_resize_opset_18_of_some_axes(tmp_path, axes, given):
    """Resize-18's ``axes``: its scales or sizes are of those axes only (it was refused, naming
    the modes, which were supported)."""
    value = {"scales": np.array([2.0, 3.0], np.float32), "sizes": np.array([9, 13], np.int64)}[given]
    inputs = ["a", "", "v", ""] if given == "scales" else ["a", "", "", "v"]
    node = helper.make_node("Resize", inputs, ["m"], name="up", mode="nearest", axes=axes)
    m = _run(tmp_path, _graph([node], [numpy_helper.from_array(value, "v")], opset=19))
    assert m.op("up").shape == ((1, C, 2 * H, 3 * W) if given == "scales" else (1, C, 13, 9))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opset_9(tmp_path, mode):
    scales = numpy_helper.from_array(np.array((1, 1, 2, 2), np.float32), "scales")
    nodes = [helper.make_node("Upsample", ["a", "scales"], ["m"], name="up", mode=mode)]
    m = _run(tmp_path, _graph(nodes, [scales], opset=9))
    assert m.op("up").attrs["coord"] == "asymmetric"


@pytest.mark.parametrize("pads, channels", [
    ([0, 0, 1, 2, 0, 0, 1, 0], C),  # spatial only: in its input's layout
    ([0, 4, 0, 0, 0, 0, 0, 0], C + 4),  # 32 -> 36 channels: no block of 16 or 8 divides them
    ([0, 2, 1, 0, 0, 2, 0, 1], C + 4),
])
def test_pad_in_every_plan_also_one_that_adds_channels(tmp_path, pads, channels):
    """A channel pad took its input's block (layout_flow): its output's 36 channels in blocks of
    16, which the executor cannot write (exit 1 from `solve`, `run`, `tune`). It runs plain."""
    pad = helper.make_node("Pad", ["a", "pads"], ["m"], name="pad", mode="constant")
    m = _run(tmp_path, _graph([pad], [numpy_helper.from_array(np.array(pads, np.int64), "pads")],
                              out_shapes=[("m", channels)]))
    flow = analyse(m)
    assert (flow.source["pad"] == PLAIN) == (channels != C)


def test_split_and_slice_on_channels(tmp_path):
    """Split 32 -> 8 + 24 and a Slice [16, 32). A slice computes in one block dividing its input's
    channels and its bounds: at block 16 the split's parts cannot be blocked 16."""
    split = numpy_helper.from_array(np.array([8, 24], np.int64), "split")
    consts = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in
              (("starts", 16), ("ends", 2 ** 62), ("axes", 1))]
    nodes = [helper.make_node("Split", ["a", "split"], ["s0", "s1"], name="split", axis=1),
             helper.make_node("Slice", ["a", "starts", "ends", "axes"], ["sl"], name="slice")]
    proto = _graph(nodes, [split] + consts, out_shapes=[("s0", 8), ("s1", 24), ("sl", 16)])
    m = _run(tmp_path, proto)
    assert [(m.op(n).attrs["begin"], m.op(n).attrs["end"]) for n in ("s0", "s1", "slice")] == [(0, 8), (8, 32),
                                                                                               (16, 32)]
    plan = uniform_plan(m, 16)
    assert (plan.joins["s0"], plan.joins["s1"], plan.joins["slice"]) == (1, 1, 16)  # 16 divides neither 8 nor 24
    assert ("c0", 1) in {(t.tensor, t.dst_block) for t in plan.transforms}
    # The parts in NCHW8c, read from c0's NCHW16c output through one transform.
    configs = {op.name: Conv2DConfig(8 if op.name in ("c1", "c2") else 16, 16, 7) for op in m.convs()}
    plan = plan_from_configs(m, configs, joins={"s0": 8, "s1": 8, "slice": 16})
    assert [t.dst_block for t in plan.transforms if t.tensor == "c0"] == [8]
    x = np.random.default_rng(2).standard_normal((1, C, H, W), dtype=np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(compile_model(m, plan).run(x), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("inputs, value", [
    (["bias", "a"], np.linspace(-1, 1, C, dtype=np.float32).reshape(1, C, 1, 1)),  # the constant first
    (["a", "bias"], np.float32(3.0)),  # one for every channel, as in a hand-written x * relu6(x + 3) / 6
])
def test_a_constant_added_either_side_is_a_bias(tmp_path, inputs, value):
    node = helper.make_node("Add", inputs, ["m"], name="addb")
    m = _run(tmp_path, _graph([node], [numpy_helper.from_array(value, "bias")]))
    assert m.op("addb").kind == "bias_add" or any(op.kind == "conv2d" and "bias" in op.weights for op in m.ops)


def test_split_opset_11_attribute(tmp_path):
    nodes = [helper.make_node("Split", ["a"], ["s0", "s1"], name="split", axis=1, split=[16, 16])]
    m = _run(tmp_path, _graph(nodes, out_shapes=[("s0", 16), ("s1", 16)], opset=11), blocks=(1, 16))
    assert m.op("s1").attrs == {"axis": 1, "begin": 16, "end": 32}


@pytest.mark.parametrize("node,inits,what", [
    (helper.make_node("Erf", ["a"], ["m"], name="erf1"), [], r"node 'erf1' \(Erf\): op Erf is not supported"),
    (helper.make_node("Slice", ["a", "st", "en", "ax"], ["m"], name="hcut"),
     [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("st", 1), ("en", 3), ("ax", 2))],
     r"node 'hcut' \(Slice\): only a slice of the channels"),
    (helper.make_node("Split", ["a"], ["m", "m2"], name="hsplit", axis=2, split=[3, 3]), [],
     r"node 'hsplit' \(Split\): only a split of the channels"),
    (helper.make_node("ReduceMean", ["a"], ["m"], name="cmean", axes=[1]), [],
     r"node 'cmean' \(ReduceMean\): only ReduceMean over H and W"),
    (helper.make_node("Resize", ["a", "", "sc"], ["m"], name="cubic", mode="cubic"),
     [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")],
     r"node 'cubic' \(Resize\): only 2-d nearest / linear resizing"),
    # a constant factor: said as such (it said "export with constant folding", which cannot remove it)
    (helper.make_node("Mul", ["a", "half"], ["m"], name="scale"), [numpy_helper.from_array(np.float32(0.5), "half")],
     r"node 'scale' \(Mul\): a constant operand \('half', shape \[\]\) is not supported here: .* fold it"),
    (helper.make_node("Add", ["a", "plane"], ["m"], name="addp"),
     [numpy_helper.from_array(np.ones((1, 1, H, W), np.float32), "plane")],
     r"node 'addp' \(Add\): a constant operand \('plane', shape \[1, 1, 6, 7\]\)"),
])
def test_unsupported_op_or_form_is_a_one_line_error(tmp_path, node, inits, what):
    path = tmp_path / "bad.onnx"
    onnx.save(_graph([node], inits, after=False), path)
    with pytest.raises(GraphTunerError, match=what) as e:
        load_onnx(path)
    assert "\n" not in str(e.value) and str(e.value).startswith("bad.onnx: ")


@pytest.mark.parametrize("groups,blocks", [(4, (1, 2, 16)), (2, (1, 8, 16))])
def test_grouped_conv(tmp_path, groups, blocks):
    """Conv with 1 < groups < C (ResNeXt, RegNet): a conv of its own (not depthwise), its
    blocks dividing the channels per group, fused epilogue included (bias, relu)."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((C, C // groups, 3, 3)) / np.sqrt(9 * C / groups))
                                .astype(np.float32), "gw")
    b = numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "gb")
    nodes = [helper.make_node("Conv", ["a", "gw", "gb"], ["g"], name="gconv", group=groups, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["g"], ["m"], name="relu")]
    m = _run(tmp_path, _graph(nodes, [w, b]), blocks=blocks)
    (conv,) = [op for op in m.ops if op.name == "gconv"]
    assert conv.kind == "conv2d" and conv.attrs["groups"] == groups


def _conv_transpose(cout, kernel, groups=1, bias=False, seed=7, **attrs):
    rng = np.random.default_rng(seed)
    scale = np.sqrt(C / groups * kernel[0] * kernel[1] / 4)
    inits = [numpy_helper.from_array((rng.standard_normal((C, cout // groups) + kernel) / scale).astype(np.float32),
                                     "tw")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "tb"))
    node = helper.make_node("ConvTranspose", ["a"] + [i.name for i in inits], ["m"], name="up", group=groups, **attrs)
    return [node], inits


@pytest.mark.parametrize("cout,kernel,groups,bias,attrs,hw", [
    (C, (4, 4), C, False, {"strides": [2, 2], "pads": [1, 1, 1, 1]}, (12, 14)),  # CenterNet's, f = 2
    (C, (8, 8), C, False, {"strides": [4, 4], "pads": [2, 2, 2, 2]}, (24, 28)),  # f = 4
    (16, (3, 3), 1, True, {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, (12, 14)),
    (24, (3, 2), 4, True, {"strides": [2, 3], "pads": [0, 1, 2, 0], "output_padding": [1, 2]}, (12, 21)),
    (C, (3, 3), 1, False, {}, (8, 9)),  # stride 1, no pads
    # odd total padding (14 - 13, 16 - 15): the extra row and column cut at the start, as onnxruntime does
    (C, (4, 4), 2, False, {"strides": [2, 2], "output_shape": [13, 15]}, (13, 15)),
])
def test_conv_transpose(tmp_path, cout, kernel, groups, bias, attrs, hw):
    """ConvTranspose as a decision of its own: in the block of every uniform plan that divides both
    its channel counts (else plain, with the transforms), against onnxruntime."""
    nodes, inits = _conv_transpose(cout, kernel, groups, bias, **attrs)
    m = _run(tmp_path, _graph(nodes, inits, out_shapes=[("m", cout)]))
    op = m.op("up")
    assert op.kind == "conv_transpose" and op.shape == (1, cout) + hw and op.attrs["groups"] == groups
    plan = uniform_plan(m, 16)
    assert plan.joins["up"] == (16 if cout % 16 == 0 else 1)
    assert plan.blocks["up"] == plan.joins["up"]


def _load(tmp_path, proto):
    path = tmp_path / "op.onnx"
    onnx.save(proto, path)
    return load_onnx(path)


def test_conv_transpose_between_other_layouts(tmp_path):
    """c0 writes NCHW16c, the transposed conv computes in NCHW8c (a transform before it), c1 reads
    NCHW4c (one after)."""
    nodes, inits = _conv_transpose(C, (4, 4), C, strides=[2, 2], pads=[1, 1, 1, 1])
    proto = _graph(nodes, inits)
    m = _load(tmp_path, proto)
    plan = plan_from_configs(m, {"c0": Conv2DConfig(1, 16, 7), "c1": Conv2DConfig(4, 16, 7)}, joins={"up": 8})
    assert {(t.tensor, t.src_block, t.dst_block) for t in plan.transforms} >= {("c0", 16, 8), ("up", 8, 4)}
    x = np.random.default_rng(2).standard_normal((1, C, H, W), dtype=np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(compile_model(m, plan).run(x)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs,what", [
    ({"dilations": [2, 2]}, r"node 'up' \(ConvTranspose\): dilations \[2, 2\] are not supported"),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, r"node 'up' \(ConvTranspose\): auto_pad SAME_UPPER"),
    ({"strides": [2, 2], "output_shape": [20, 20]}, r"node 'up' \(ConvTranspose\): output_shape \[20, 20\]"),
])
def test_conv_transpose_unsupported_forms_are_one_line_errors(tmp_path, attrs, what):
    nodes, inits = _conv_transpose(C, (3, 3), **attrs)
    path = tmp_path / "bad.onnx"
    onnx.save(_graph(nodes, inits, after=False), path)
    with pytest.raises(GraphTunerError, match=what) as e:
        load_onnx(path)
    assert "\n" not in str(e.value) and str(e.value).startswith("bad.onnx: ")
