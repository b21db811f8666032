"""Write a :class:`~graph_tuner.model.Model` with its params as an ONNX file (opset 13; 14 with HardSwish).

Used to run zoo models in onnxruntime side by side with our executor (``graph-tuner
bench``), and to round-trip models through :mod:`graph_tuner.onnx_import`.

>>> from graph_tuner.builder import GraphBuilder
>>> b = GraphBuilder("t")
>>> m = b.build(b.relu(b.conv(b.input((1, 3, 8, 8)), 4, 3, padding=1, name="c")))
>>> proto = to_onnx(m, m.params())
>>> [n.op_type for n in proto.graph.node], [i.name for i in proto.graph.initializer]
(['Conv', 'Relu'], ['c.weight'])
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graph_tuner.model import Model

_SIMPLE = {"relu": "Relu", "add": "Add", "multiply": "Mul", "global_avg_pool": "GlobalAveragePool",
           "sigmoid": "Sigmoid", "hard_swish": "HardSwish"}


def to_onnx(model: Model, params: dict[str, dict[str, np.ndarray]]) -> onnx.ModelProto:
    """The model as an ONNX graph: node and output names are op names, params are initializers."""
    nodes, inits = [], []

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    for op in model.ops:
        a, ins, out, p = op.attrs, list(op.inputs), op.name, params.get(op.name, {})

        def node(op_type: str, inputs=ins, **attrs) -> None:
            nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))

        k = op.kind
        if k == "input":
            continue
        if k == "conv2d":
            node("Conv", ins + [const(f"{out}.{n}", p[n]) for n in ("weight", "bias") if n in p],
                 strides=a["strides"], pads=a["padding"], dilations=a["dilation"], group=a["groups"],
                 kernel_shape=a["kernel_size"])
        elif k == "conv_transpose":
            node("ConvTranspose", ins + [const(f"{out}.{n}", p[n]) for n in ("weight", "bias") if n in p],
                 strides=a["strides"], pads=a["padding"], group=a["groups"], kernel_shape=a["kernel_size"],
                 output_padding=a["output_padding"], dilations=(1, 1))
        elif k == "dense":
            node("Gemm", ins + [const(f"{out}.{n}", p[n]) for n in ("weight", "bias") if n in p], transB=1)
        elif k == "batch_norm":
            node("BatchNormalization", ins + [const(f"{out}.{n}", p[n]) for n in ("gamma", "beta", "mean", "var")],
                 epsilon=a["epsilon"])
        elif k == "bias_add":
            node("Add", ins + [const(f"{out}.bias", p["bias"].reshape((-1,) + (1,) * (len(op.shape) - 2)))])
        elif k == "clip":
            node("Clip", ins + [const(f"{out}.min", np.float32(a["min"])), const(f"{out}.max", np.float32(a["max"]))])
        elif k in ("max_pool", "avg_pool"):
            extra = {"count_include_pad": int(a.get("count_include_pad", False))} if k == "avg_pool" else {}
            node("MaxPool" if k == "max_pool" else "AveragePool", kernel_shape=a["pool_size"], strides=a["strides"],
                 pads=a["padding"], ceil_mode=int(a["ceil_mode"]), **extra)
        elif k == "concat":
            node("Concat", axis=a["axis"])
        elif k == "flatten":
            node("Flatten", axis=a.get("axis", 1))
        elif k == "reshape":
            node("Reshape", ins + [const(f"{out}.shape", np.array(a["shape"], np.int64))])
        elif k == "transpose":
            node("Transpose", perm=list(a["perm"]))
        elif k == "softmax":
            node("Softmax", axis=a["axis"])
        elif k == "pad":
            widths = a["pad_width"]
            pads = [b for b, _ in widths] + [e for _, e in widths]
            node("Pad", ins + [const(f"{out}.pads", np.array(pads, np.int64)),
                               const(f"{out}.value", np.float32(a.get("value", 0.0)))], mode="constant")
        elif k == "silu":  # as exporters write it (PyTorch's SiLU)
            nodes.append(helper.make_node("Sigmoid", ins, [f"{out}_sigmoid"], name=f"{out}_sigmoid"))
            node("Mul", ins + [f"{out}_sigmoid"])
        elif k == "hard_sigmoid":
            node("HardSigmoid", alpha=a["alpha"], beta=a["beta"])
        elif k == "leaky_relu":
            node("LeakyRelu", alpha=a["alpha"])
        elif k == "resize":
            scales = np.array((1.0, 1.0) + tuple(a["scales"]), np.float32)
            node("Resize", ins + ["", const(f"{out}.scales", scales)], mode=a["mode"],
                 coordinate_transformation_mode=a["coord"], nearest_mode=a["nearest_mode"])
        elif k == "slice":
            node("Slice", ins + [const(f"{out}.{n}", np.array([v], np.int64))
                                 for n, v in (("starts", a["begin"]), ("ends", a["end"]), ("axes", a["axis"]))])
        elif k in _SIMPLE:
            node(_SIMPLE[k])
        else:
            raise ValueError(f"op '{out}': no ONNX export for kind {k!r}")

    def io(name: str):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(model.op(name).shape))

    graph = helper.make_graph(nodes, model.name, [io(n) for n in model.inputs], [io(n) for n in model.outputs], inits)
    opset = 14 if any(op.kind == "hard_swish" for op in model.ops) else 13  # HardSwish came in opset 14
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def save_onnx(model: Model, params: dict[str, dict[str, np.ndarray]], path: str | os.PathLike) -> None:
    """Write :func:`to_onnx` to ``path`` (weights inline; fine below 2 GB)."""
    onnx.save(to_onnx(model, params), os.fspath(path))
