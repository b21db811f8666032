"""Strides moved up the graph: compute only the pixels a strided 1x1 conv reads.

A 1x1 unpadded conv with stride ``s`` reads every ``s``-th row and column of its input.
When every reader of a tensor is such a conv (ResNet-50's stage transitions: the
first unit's 1x1 ``conv1`` and projection shortcut, both stride 2, read the previous
unit's sum), the tensor is needed only at those pixels, and so is what it was made
from: an elementwise op or a 1x1 conv computes its output pixels from the same input
pixels, so the subsampling moves to their inputs; any other conv takes the stride
itself (``conv(x)`` at every ``s``-th output pixel is the same conv with its stride
times ``s``: same padding, and its output size is exactly ``ceil(out / s)``). An input
that other ops still read at full size is subsampled by a 1x1 max pool of stride ``s``.
The readers then run at stride 1.

For ResNet-50 that turns each stage's last 3x3 conv into a stride-2 one and its last
1x1 conv into one over a quarter of the pixels: 9.6% of the network's FLOPs. OpenVINO's
CPU plugin makes the same rewrite (its ``StridesOptimization``).

>>> from graph_tuner.loading import load_model
>>> m = load_model("resnet-50")
>>> m.flops() / 1e9 < 7.0, m.workload("stage1_unit3_conv2").strides, m.workload("stage2_unit1_conv1").strides
(True, (2, 2), (1, 1))
"""
from __future__ import annotations

from graph_tuner.model import Model, Op, infer_shapes

__all__ = ["hoist_strides"]

# Ops whose output pixel (h, w) depends only on their inputs' pixel (h, w) (or on a
# per-channel vector, as the squeeze-excite scale is).
PIXELWISE = {"relu", "clip", "sigmoid", "silu", "hard_sigmoid", "hard_swish", "leaky_relu", "batch_norm",
             "bias_add", "add", "multiply"}


def _strided_reader(op: Op) -> int | None:
    """The stride of a 1x1, unpadded, undilated conv reading every s-th pixel both ways, else None."""
    a = op.attrs
    if (op.kind != "conv2d" or tuple(a["kernel_size"]) != (1, 1) or any(a["padding"])
            or tuple(a["dilation"]) != (1, 1) or a["strides"][0] != a["strides"][1] or a["strides"][0] < 2):
        return None
    return a["strides"][0]


def _is_pointwise_conv(op: Op) -> bool:
    """A 1x1 conv at stride 1 (unpadded, undilated): output pixel (h, w) reads input pixel (h, w) only."""
    a = op.attrs
    return (op.kind == "conv2d" and tuple(a["kernel_size"]) == (1, 1) and not any(a["padding"])
            and tuple(a["dilation"]) == (1, 1) and tuple(a["strides"]) == (1, 1))


def hoist_strides(model: Model) -> Model:
    """The same network with the strides of 1x1 convs moved up (see the module docstring);
    ``model`` itself when nothing moves."""
    ops = model.editable_ops()
    order = list(ops)
    readers = {op.name: [c.name for c in model.consumers(op.name)] for op in model.ops}
    outputs = set(model.outputs)
    changed = False
    for name in list(order):
        rs = readers[name]
        strides = {_strided_reader(ops[r]) for r in rs}
        if (not rs or name in outputs or len(strides) != 1 or None in strides or len(ops[name].shape) != 4
                or ops[name].kind not in PIXELWISE | {"conv2d"}):
            continue  # (a pool copying every s-th pixel of an input or a concat would only move the stride)
        (s,) = strides
        if ops[name].shape[2] % s or ops[name].shape[3] % s:
            continue  # a 1x1 stride-s conv of an odd size reads the last pixel too: keep it exact and simple
        _subsample(ops, order, readers, outputs, name, s, rs)
        for r in rs:
            ops[r].attrs["strides"] = (1, 1)
        infer_shapes(ops, order)  # the next move compares them
        changed = True
    return model.rebuilt([ops[n] for n in order]) if changed else model


def _subsample(ops: dict, order: list, readers: dict, outputs: set, name: str, s: int, wanting: list[str]) -> None:
    """Make ``name`` (read only by ``wanting``, which all want it subsampled by ``s``) the
    subsampled tensor, recursively; or, when others read it too, add a 1x1 max pool of
    stride ``s`` for ``wanting`` to read instead."""
    op = ops[name]
    if set(readers[name]) - set(wanting) or name in outputs or op.kind not in PIXELWISE | {"conv2d"}:
        pool = f"{name}_every{s}"
        while pool in ops:
            pool += "_"
        ops[pool] = Op(pool, "max_pool", [name], {"pool_size": (1, 1), "strides": (s, s), "padding": (0, 0, 0, 0),
                                                  "ceil_mode": False}, op.shape)
        order.insert(order.index(name) + 1, pool)
        readers[pool] = list(wanting)
        readers[name] = [r for r in readers[name] if r not in wanting] + [pool]
        for w in wanting:
            ops[w].inputs = [pool if i == name else i for i in ops[w].inputs]
        return
    if op.kind == "conv2d" and not _is_pointwise_conv(op):
        op.attrs["strides"] = tuple(v * s for v in op.attrs["strides"])
        return
    # Pixelwise ops and stride-1 1x1 convs: the same op over the subsampled inputs (4-d ones of
    # this op's size; per-channel vectors stay).
    for src in dict.fromkeys(op.inputs):
        if len(ops[src].shape) == 4 and ops[src].shape[2:] == op.shape[2:]:
            _subsample(ops, order, readers, outputs, src, s, [name])
