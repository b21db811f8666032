"""ONNX import: hand-built models (shapes checked against onnxruntime), zoo round trips, clean errors."""
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graph_tuner.errors import GraphTunerError
from graph_tuner.loading import load_model
from graph_tuner.onnx_import import load_onnx
from graph_tuner.zoo import get_model

RNG = np.random.default_rng(0)


def _init(name, *shape):
    return numpy_helper.from_array(RNG.normal(size=shape).astype(np.float32), name)


def _bn(name, x, c, out):
    inits = [numpy_helper.from_array(v.astype(np.float32), f"{name}_{k}") for k, v in
             (("s", RNG.uniform(0.5, 1.5, c)), ("b", RNG.normal(size=c)), ("m", RNG.normal(size=c)),
              ("v", RNG.uniform(0.5, 1.5, c)))]
    node = helper.make_node("BatchNormalization", [x] + [i.name for i in inits], [out], name=name, epsilon=1e-3)
    return node, inits


def _block_model(batch_dim="N", h=16):
    """stem conv -> BN -> relu -> [depthwise 3x3 -> pointwise 1x1] + skip -> concat(., relu) -> pool -> Gemm."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1], strides=[2, 2])]
    inits = [_init("w0", 16, 3, 3, 3), _init("b0", 16)]
    bn, bn_inits = _bn("bn0", "c0", 16, "n0")
    nodes += [bn, helper.make_node("Relu", ["n0"], ["r0"], name="relu0"),
              helper.make_node("Conv", ["r0", "wd"], ["d"], name="dw", group=16, pads=[1, 1, 1, 1]),
              helper.make_node("Conv", ["d", "wp"], ["p"], name="pw"),
              helper.make_node("Add", ["p", "r0"], ["s"], name="residual"),
              helper.make_node("Dropout", ["s"], ["s2"], name="drop"),
              helper.make_node("Concat", ["s2", "r0"], ["cat"], name="cat", axis=1),
              helper.make_node("MaxPool", ["cat"], ["mp"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                               ceil_mode=1),
              helper.make_node("GlobalAveragePool", ["mp"], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
              helper.make_node("Softmax", ["logits"], ["y"], name="prob", axis=-1)]
    inits += bn_inits + [_init("wd", 16, 1, 3, 3), _init("wp", 16, 16, 1, 1), _init("wf", 10, 32), _init("bf", 10)]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 3, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _ort_shapes(proto, batch):
    """Every intermediate tensor's shape, as onnxruntime computes it."""
    p = onnx.ModelProto()
    p.CopyFrom(proto)
    names = [o for n in p.graph.node for o in n.output]
    del p.graph.output[:]
    p.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    sess = ort.InferenceSession(p.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.zeros(tuple(batch if isinstance(d, str) else d for d in [batch, 3, 16, 16]), np.float32)
    return dict(zip(names, (o.shape for o in sess.run(names, {"x": x}))))


def test_block_imports_with_onnxruntime_shapes(tmp_path):
    proto = _block_model()
    path = tmp_path / "block.onnx"
    onnx.save(proto, path)
    m = load_onnx(path, batch=2)
    ort_shapes = _ort_shapes(proto, 2)
    for node in proto.graph.node:
        if node.op_type not in ("Dropout",):
            assert m.op(node.name).shape == tuple(ort_shapes[node.output[0]]), node.name
    assert [op.name for op in m.convs()] == ["stem", "dw", "pw"]
    dw = m.workload("dw")
    assert dw.is_depthwise and dw.data_shape == (2, 16, 8, 8) and dw.padding == (1, 1, 1, 1)
    assert m.workload("stem").strides == (2, 2)
    assert m.op("residual").inputs == ["pw", "relu0"]  # Dropout removed
    assert m.op("fc").kind == "dense" and m.op("fc").weights == {"weight": (10, 32), "bias": (10,)}
    p = m.params()
    assert np.array_equal(p["stem"]["weight"], numpy_helper.to_array(proto.graph.initializer[0]))
    assert set(p["bn0"]) == {"gamma", "beta", "mean", "var"}
    assert m.flops() == sum(w.flops for w in m.conv_workloads()) + 2 * 2 * 32 * 10


def test_dynamic_batch_defaults_to_one(tmp_path):
    path = tmp_path / "block.onnx"
    onnx.save(_block_model(), path)
    assert load_model(str(path)).batch == 1
    assert load_model(path, batch=3).op("x").shape == (3, 3, 16, 16)


def test_fixed_batch_is_kept_and_conflicts_are_errors(tmp_path):
    path = tmp_path / "fixed.onnx"
    onnx.save(_block_model(batch_dim=4), path)
    assert load_model(path).batch == 4
    with pytest.raises(GraphTunerError, match="fixed batch of 4"):
        load_onnx(path, batch=2)


def test_dynamic_spatial_dim_is_an_error(tmp_path):
    proto = _block_model()
    proto.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    path = tmp_path / "dyn.onnx"
    onnx.save(proto, path)
    with pytest.raises(GraphTunerError, match=r"dyn.onnx: input 'x' has dynamic dimension 2 .*static shapes"):
        load_onnx(path)


def test_unsupported_op_names_node_and_type(tmp_path):
    proto = _block_model()
    proto.graph.node[2].op_type = "Elu"
    path = tmp_path / "elu.onnx"
    onnx.save(proto, path)
    with pytest.raises(GraphTunerError) as e:
        load_onnx(path)
    msg = str(e.value)
    assert msg.startswith("elu.onnx: node 'relu0' (Elu): op Elu is not supported; supported ops: Conv")
    assert "export the model without it" in msg and "\n" not in msg


def test_truncated_and_garbage_files(tmp_path):
    data = _block_model().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 3])
    (tmp_path / "junk.onnx").write_bytes(b"\x00\xff" * 100)
    for name in ("cut.onnx", "junk.onnx"):
        with pytest.raises(GraphTunerError, match=name):
            load_onnx(tmp_path / name)


# -- round trip: export zoo models with onnx.helper, re-import -----------------------------

def _export(model, params):
    """Write a Model as ONNX (opset 13) with its params as initializers."""
    nodes, inits = [], []

    def init(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    for op in model.ops:
        a, ins, out = op.attrs, list(op.inputs), op.name
        p = params.get(op.name, {})
        if op.kind == "input":
            continue
        if op.kind == "conv2d":
            ins += [init(f"{out}.{k}", p[k]) for k in ("weight", "bias") if k in p]
            nodes.append(helper.make_node("Conv", ins, [out], name=out, strides=a["strides"], pads=a["padding"],
                                          dilations=a["dilation"], group=a["groups"], kernel_shape=a["kernel_size"]))
        elif op.kind == "dense":
            ins += [init(f"{out}.{k}", p[k]) for k in ("weight", "bias") if k in p]
            nodes.append(helper.make_node("Gemm", ins, [out], name=out, transB=1))
        elif op.kind == "batch_norm":
            ins += [init(f"{out}.{k}", p[k]) for k in ("gamma", "beta", "mean", "var")]
            nodes.append(helper.make_node("BatchNormalization", ins, [out], name=out, epsilon=a["epsilon"]))
        elif op.kind == "bias_add":
            shape = (-1,) + (1,) * (len(op.shape) - 2)
            nodes.append(helper.make_node("Add", ins + [init(f"{out}.bias", p["bias"].reshape(shape))], [out], name=out))
        elif op.kind == "clip":
            mn, mx = init(f"{out}.min", np.float32(a["min"])), init(f"{out}.max", np.float32(a["max"]))
            nodes.append(helper.make_node("Clip", ins + [mn, mx], [out], name=out))
        elif op.kind in ("max_pool", "avg_pool"):
            kw = {"count_include_pad": int(a["count_include_pad"])} if op.kind == "avg_pool" else {}
            nodes.append(helper.make_node("MaxPool" if op.kind == "max_pool" else "AveragePool", ins, [out], name=out,
                                          kernel_shape=a["pool_size"], strides=a["strides"], pads=a["padding"],
                                          ceil_mode=int(a["ceil_mode"]), **kw))
        elif op.kind == "reshape":
            nodes.append(helper.make_node("Reshape", ins + [init(f"{out}.shape", np.array(a["shape"], np.int64))],
                                          [out], name=out))
        else:
            onnx_type = {"relu": "Relu", "add": "Add", "concat": "Concat", "global_avg_pool": "GlobalAveragePool",
                         "flatten": "Flatten", "transpose": "Transpose", "softmax": "Softmax"}[op.kind]
            nodes.append(helper.make_node(onnx_type, ins, [out], name=out, **a))
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, list(model.op(n).shape))  # noqa: E731
    graph = helper.make_graph(nodes, model.name, [io(n) for n in model.inputs], [io(n) for n in model.outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("name", ["resnet-18", "mobilenet-v2", "squeezenet-1.1", "inception-v3", "ssd-resnet-50"])
def test_zoo_round_trip_keeps_conv_workloads_and_order(tmp_path, name):
    model = get_model(name)
    params = model.params()
    path = tmp_path / f"{name}.onnx"
    onnx.save(_export(model, params), path)
    back = load_onnx(path)
    assert back.conv_workloads() == model.conv_workloads()
    assert [op.name for op in back.convs()] == [op.name for op in model.convs()]
    assert [back.op(o).shape for o in back.outputs] == [model.op(o).shape for o in model.outputs]
    assert back.flops() == model.flops()
    first = model.convs()[0].name
    assert np.array_equal(back.params()[first]["weight"], params[first]["weight"])


def test_cli_inspect_onnx_and_errors_exit_2_without_traceback(tmp_path):
    path = tmp_path / "block.onnx"
    onnx.save(_block_model(), path)
    ok = subprocess.run([sys.executable, "-m", "graph_tuner", "inspect", str(path), "--batch", "2"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "dw" in ok.stdout and "2x16x8x8" in ok.stdout
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(path.read_bytes()[:200])
    for argv in ([str(bad)], [str(tmp_path / "missing.onnx")], [str(path), "--batch", "-1"]):
        p = subprocess.run([sys.executable, "-m", "graph_tuner", "inspect", *argv], capture_output=True, text=True)
        assert p.returncode == 2, argv
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 2, p.stderr
