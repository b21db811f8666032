"""Import an ONNX CNN as a :class:`~graph_tuner.model.Model`, initializers as weights.

Supported ops: Conv, ConvTranspose (2-d, dilation 1, ``auto_pad`` NOTSET; a static
``output_shape`` sets the pads as ONNX and onnxruntime do), Gemm, MatMul (with a constant
right operand), BatchNormalization, Relu, Clip, Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Add, Mul, Concat, MaxPool,
AveragePool, GlobalAveragePool, ReduceMean (over H and W), Resize and Upsample (nearest,
linear; static scales or sizes), Split and Slice (on channels), Flatten, Reshape,
Transpose, Pad (constant), Softmax, Constant, and Identity/Dropout (removed).
``Add`` of a per-channel constant becomes ``bias_add``; ``Mul(x, Sigmoid(x))`` (the
sigmoid read by nothing else) becomes one ``silu`` op, and ``Mul(x, HardSigmoid(x))``
with PyTorch's alpha 1/6 one ``hard_swish``. Shapes come from our own
per-op inference (:mod:`graph_tuner.shapes`), cross-checked against
``onnx.shape_inference`` where it knows them. A dynamic batch dimension becomes
``batch`` (default 1); any other dynamic dimension is an error.

Every problem with the file is a one-line :class:`GraphTunerError` naming the file,
the node and what to do.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from graph_tuner.errors import GraphTunerError
from graph_tuner.model import Model, Op
from graph_tuner.shapes import infer_shape

SUPPORTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "Relu", "Clip", "Sigmoid",
                 "HardSigmoid", "HardSwish", "LeakyRelu", "Add", "Mul", "Concat", "MaxPool", "AveragePool",
                 "GlobalAveragePool", "ReduceMean", "Resize", "Upsample", "Split", "Slice", "Flatten", "Reshape",
                 "Transpose", "Pad", "Softmax", "Constant", "Identity", "Dropout")


class _Importer:
    def __init__(self, path: str, graph: onnx.GraphProto, batch: int | None, opset: int) -> None:
        self.file = Path(path).name
        self.graph = graph
        self.batch = batch
        self.opset = opset
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.alias: dict[str, str] = {}  # ONNX tensor name -> op name producing it
        self.ops: dict[str, Op] = {}
        self.params: dict[str, dict[str, np.ndarray]] = {}

    def fail(self, node: onnx.NodeProto | None, what: str) -> GraphTunerError:
        where = f"node '{node.name or node.output[0]}' ({node.op_type})" if node is not None else "graph"
        return GraphTunerError(f"{self.file}: {where}: {what}")

    # -- inputs and constants -------------------------------------------------

    def add_inputs(self) -> None:
        for vi in self.graph.input:
            if vi.name in self.consts:
                continue  # old exporters list initializers as inputs too
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                raise GraphTunerError(f"{self.file}: input '{vi.name}' has no shape; export with static input shapes")
            dims = []
            for axis, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(d.dim_value)
                elif axis == 0:
                    dims.append(self.batch or 1)
                else:
                    raise GraphTunerError(f"{self.file}: input '{vi.name}' has dynamic dimension {axis} "
                                          f"('{d.dim_param or '?'}'); export the model with static shapes")
            if self.batch is not None and dims and dims[0] != self.batch:
                raise GraphTunerError(f"{self.file}: input '{vi.name}' has a fixed batch of {dims[0]}, not "
                                      f"{self.batch}; export with a dynamic batch dimension or use batch {dims[0]}")
            if tt.elem_type != onnx.TensorProto.FLOAT:
                raise GraphTunerError(f"{self.file}: input '{vi.name}' is not float32; export a float32 model")
            self.ops[vi.name] = Op(vi.name, "input", [], {}, tuple(dims), {})
            self.alias[vi.name] = vi.name

    def const(self, node: onnx.NodeProto, name: str, what: str) -> np.ndarray:
        if name not in self.consts:
            raise self.fail(node, f"{what} '{name}' must be a constant (initializer); export with constant folding")
        return self.consts[name]

    def producer(self, node: onnx.NodeProto, name: str) -> str:
        if name not in self.alias:
            if name in self.consts:
                raise self.fail(node, f"constant input '{name}' is not supported here; export with constant folding")
            raise self.fail(node, f"reads unknown tensor '{name}'")
        return self.alias[name]

    def shape(self, node: onnx.NodeProto, i: int = 0) -> tuple[int, ...]:
        return self.ops[self.producer(node, node.input[i])].shape

    # -- emitting ops ---------------------------------------------------------

    def emit(self, node: onnx.NodeProto, kind: str, inputs: list[str], attrs: dict | None = None,
             params: dict[str, np.ndarray] | None = None, name: str | None = None, output: int = 0) -> str:
        """Add an op computing ``node.output[output]`` (named ``name``, default the node's); its name."""
        name = name or node.name or node.output[output]
        while name in self.ops:
            name += "_"
        attrs = attrs or {}
        params = {k: np.asarray(v, dtype=np.float32) for k, v in (params or {}).items()}
        try:
            shape = infer_shape(kind, attrs, [self.ops[i].shape for i in inputs])
        except ValueError as e:
            raise self.fail(node, f"{e}; check the exported model") from None
        self.ops[name] = Op(name, kind, inputs, attrs, shape, {k: tuple(v.shape) for k, v in params.items()})
        if params:
            self.params[name] = params
        self.alias[node.output[output]] = name
        return name

    def run(self) -> None:
        self.add_inputs()
        self.readers: dict[str, int] = {}  # tensor -> how many node inputs and graph outputs read it
        for name in [i for n in self.graph.node for i in n.input] + [o.name for o in self.graph.output]:
            self.readers[name] = self.readers.get(name, 0) + 1
        for node in self.graph.node:
            handler = getattr(self, f"op_{node.op_type}", None)
            if node.domain not in ("", "ai.onnx") or handler is None:
                raise self.fail(node, f"op {node.op_type} is not supported; supported ops: "
                                      f"{', '.join(SUPPORTED_OPS)}; export the model without it")
            handler(node, {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute})

    # -- helpers for windowed ops --------------------------------------------

    def window(self, node: onnx.NodeProto, a: dict, kernel: tuple[int, int]) -> dict:
        x = self.shape(node)
        if len(x) != 4 or len(kernel) != 2:
            raise self.fail(node, f"only 2-d {node.op_type} on NCHW tensors is supported, got input {x}")
        strides = tuple(a.get("strides", (1, 1)))
        dilation = tuple(a.get("dilations", (1, 1)))
        auto_pad = a.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad in ("NOTSET", "VALID"):
            pads = tuple(a.get("pads", (0, 0, 0, 0))) if auto_pad == "NOTSET" else (0, 0, 0, 0)
        else:  # SAME_UPPER / SAME_LOWER: output = ceil(input / stride)
            begin, end = [], []
            for size, k, s, d in zip(x[2:], kernel, strides, dilation):
                total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
                small, big = total // 2, total - total // 2
                begin.append(small if auto_pad == "SAME_UPPER" else big)
                end.append(big if auto_pad == "SAME_UPPER" else small)
            pads = (begin[0], begin[1], end[0], end[1])
        # ONNX pads are [h_begin, w_begin, h_end, w_end]: TVM's [top, left, bottom, right].
        return {"strides": strides, "padding": tuple(int(p) for p in pads), "dilation": dilation}

    # -- op handlers ----------------------------------------------------------

    def op_Conv(self, node, a):
        w = self.const(node, node.input[1], "weight")
        if w.ndim != 4:
            raise self.fail(node, f"only 2-d convolutions are supported, got a {w.ndim - 2}-d kernel")
        win = self.window(node, a, w.shape[2:])
        attrs = {"strides": win["strides"], "padding": win["padding"], "dilation": win["dilation"],
                 "groups": int(a.get("group", 1)), "channels": int(w.shape[0]), "kernel_size": tuple(w.shape[2:])}
        params = {"weight": w}
        if len(node.input) > 2 and node.input[2]:
            params["bias"] = self.const(node, node.input[2], "bias")
        if w.shape[1] * attrs["groups"] != self.shape(node)[1]:
            raise self.fail(node, f"kernel {w.shape} with group={attrs['groups']} does not fit input {self.shape(node)}")
        self.emit(node, "conv2d", [self.producer(node, node.input[0])], attrs, params)

    def op_ConvTranspose(self, node, a):
        x, w = self.shape(node), self.const(node, node.input[1], "weight")
        if len(x) != 4 or w.ndim != 4:
            raise self.fail(node, f"only 2-d transposed convolutions of an NCHW tensor are supported, got input {x} "
                                  f"and kernel {w.shape}")
        g = int(a.get("group", 1))
        if w.shape[0] != x[1] or g < 1 or x[1] % g:
            raise self.fail(node, f"kernel {w.shape} with group={g} does not fit input {x}")
        if tuple(a.get("kernel_shape", w.shape[2:])) != w.shape[2:]:
            raise self.fail(node, f"kernel_shape {list(a['kernel_shape'])} differs from the weight's {w.shape[2:]}")
        if tuple(a.get("dilations", (1, 1))) != (1, 1):
            raise self.fail(node, f"dilations {list(a['dilations'])} are not supported; only dilation 1 is")
        if _text(a.get("auto_pad", b"NOTSET")) != "NOTSET":
            raise self.fail(node, f"auto_pad {_text(a['auto_pad'])} is not supported; export with explicit pads")
        strides, out_pad = tuple(a.get("strides", (1, 1))), tuple(a.get("output_padding", (0, 0)))
        pads = tuple(a.get("pads", (0, 0, 0, 0)))
        if "output_shape" in a:  # pads from the shape asked for: the larger half first (ONNX's NOTSET rule)
            want = tuple(a["output_shape"])[-2:]
            total = [s * (i - 1) + o + k - n for s, i, o, k, n in zip(strides, x[2:], out_pad, w.shape[2:], want)]
            if len(want) != 2 or min(total) < 0:
                raise self.fail(node, f"output_shape {list(a['output_shape'])} is larger than the transposed "
                                      f"convolution of {x} can give; export with pads and output_padding")
            pads = (total[0] - total[0] // 2, total[1] - total[1] // 2, total[0] // 2, total[1] // 2)
        attrs = {"strides": strides, "padding": tuple(int(p) for p in pads), "output_padding": out_pad,
                 "groups": g, "channels": int(w.shape[1]) * g, "kernel_size": tuple(w.shape[2:])}
        params = {"weight": w}
        if len(node.input) > 2 and node.input[2]:
            params["bias"] = self.const(node, node.input[2], "bias")
        self.emit(node, "conv_transpose", [self.producer(node, node.input[0])], attrs, params)

    def op_Gemm(self, node, a):
        if a.get("transA", 0):
            raise self.fail(node, "transA=1 is not supported; export without transposing the input")
        w = self.const(node, node.input[1], "weight") * a.get("alpha", 1.0)
        w = w if a.get("transB", 0) else w.T  # dense weight is [out, in]
        params = {"weight": w}
        if len(node.input) > 2 and node.input[2]:
            c = np.asarray(self.const(node, node.input[2], "bias")) * a.get("beta", 1.0)
            params["bias"] = np.broadcast_to(c.reshape(-1) if c.size == w.shape[0] else c, (w.shape[0],))
        self.dense(node, params)

    def op_MatMul(self, node, a):
        self.dense(node, {"weight": self.const(node, node.input[1], "right operand").T})

    def dense(self, node, params):
        x = self.shape(node)
        if len(x) != 2 or params["weight"].ndim != 2 or params["weight"].shape[1] != x[1]:
            raise self.fail(node, f"only 2-d inputs times a 2-d constant are supported, got {x} and "
                                  f"weight {params['weight'].shape}; flatten first")
        self.emit(node, "dense", [self.producer(node, node.input[0])], {"units": int(params["weight"].shape[0])},
                  params)

    def op_BatchNormalization(self, node, a):
        names = ("gamma", "beta", "mean", "var")
        params = {n: self.const(node, i, n) for n, i in zip(names, node.input[1:5])}
        self.emit(node, "batch_norm", [self.producer(node, node.input[0])],
                  {"epsilon": float(a.get("epsilon", 1e-5)), "axis": 1}, params)

    def op_Relu(self, node, a):
        self.emit(node, "relu", [self.producer(node, node.input[0])])

    def op_Clip(self, node, a):
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
        if len(node.input) > 1 and node.input[1]:
            lo = float(self.const(node, node.input[1], "min"))
        if len(node.input) > 2 and node.input[2]:
            hi = float(self.const(node, node.input[2], "max"))
        self.emit(node, "clip", [self.producer(node, node.input[0])], {"min": float(lo), "max": float(hi)})

    def op_Sigmoid(self, node, a):
        self.emit(node, "sigmoid", [self.producer(node, node.input[0])])

    def op_HardSigmoid(self, node, a):
        self.emit(node, "hard_sigmoid", [self.producer(node, node.input[0])],
                  {"alpha": float(a.get("alpha", 0.2)), "beta": float(a.get("beta", 0.5))})

    def op_HardSwish(self, node, a):
        self.emit(node, "hard_swish", [self.producer(node, node.input[0])])

    def op_LeakyRelu(self, node, a):
        self.emit(node, "leaky_relu", [self.producer(node, node.input[0])], {"alpha": float(a.get("alpha", 0.01))})

    def op_Softmax(self, node, a):
        x = self.shape(node)
        axis = int(a.get("axis", 1 if self.opset < 13 else -1)) % len(x)
        if self.opset < 13 and axis != len(x) - 1:
            raise self.fail(node, "softmax over a flattened tail (opset < 13) is only supported on the last axis; "
                                  "export with opset >= 13")
        self.emit(node, "softmax", [self.producer(node, node.input[0])], {"axis": axis})

    def op_Add(self, node, a):
        self.binary(node, "add")

    def op_Mul(self, node, a):
        if not self.gated_activation(node):
            self.binary(node, "multiply")

    def gated_activation(self, node) -> bool:
        """``x * sigmoid(x)`` -> silu, ``x * hard_sigmoid(x)`` (alpha 1/6, beta 1/2) -> hard_swish, when
        nothing else reads the gate: emitted, and True."""
        for gate, x in (node.input[:2], node.input[1::-1]):
            op = self.ops.get(self.alias.get(gate, ""))
            if op is None or self.readers.get(gate) != 1 or op.inputs != [self.alias.get(x)]:
                continue
            if op.kind == "sigmoid":
                kind = "silu"
            elif op.kind == "hard_sigmoid" and np.isclose(op.attrs["alpha"], 1 / 6) and op.attrs["beta"] == 0.5:
                kind = "hard_swish"
            else:
                continue
            del self.ops[op.name]
            self.emit(node, kind, op.inputs)
            return True
        return False

    def binary(self, node, kind):
        """Add or Mul (both commute): of two tensors, or of a tensor and a constant."""
        a, b = node.input[:2]
        if a in self.consts and a not in self.alias:  # the constant first, as in Add(bias, x)
            a, b = b, a
        if b not in self.consts or b in self.alias:
            self.emit(node, kind, [self.producer(node, a), self.producer(node, b)])
            return
        c, x = self.consts[b], self.ops[self.producer(node, a)].shape
        channels = x[1] if len(x) >= 2 else 0
        if kind == "add" and channels and c.ndim <= len(x) and (
                c.size == 1 or (1,) * (len(x) - c.ndim) + c.shape == (1, channels) + (1,) * (len(x) - 2)):
            # A per-channel constant (or one for every channel): a bias, as exporters write
            # conv and dense biases.
            bias = np.broadcast_to(c.reshape(-1), (channels,)).astype(np.float32)
            self.emit(node, "bias_add", [self.producer(node, a)], {"axis": 1}, {"bias": bias})
            return
        raise self.fail(node, f"a constant operand ('{b}', shape {list(c.shape)}) is not supported here: of "
                              "constants, only a per-channel one added to a tensor (a bias) is; fold it into the "
                              "conv next to it before export")

    def op_Concat(self, node, a):
        self.emit(node, "concat", [self.producer(node, i) for i in node.input], {"axis": int(a["axis"])})

    def op_MaxPool(self, node, a):
        self.pool(node, a, "max_pool")

    def op_AveragePool(self, node, a):
        self.pool(node, a, "avg_pool")

    def pool(self, node, a, kind):
        if len(node.output) > 1 and node.output[1]:
            raise self.fail(node, "MaxPool indices output is not supported; export without it")
        kernel = tuple(a["kernel_shape"])
        win = self.window(node, a, kernel)
        if win["dilation"] != (1, 1):
            raise self.fail(node, "dilated pooling is not supported")
        attrs = {"pool_size": kernel, "strides": win["strides"], "padding": win["padding"],
                 "ceil_mode": bool(a.get("ceil_mode", 0))}
        if kind == "avg_pool":
            attrs["count_include_pad"] = bool(a.get("count_include_pad", 0))
        self.emit(node, kind, [self.producer(node, node.input[0])], attrs)

    def op_GlobalAveragePool(self, node, a):
        self.emit(node, "global_avg_pool", [self.producer(node, node.input[0])])

    def op_ReduceMean(self, node, a):
        x = self.shape(node)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:  # opset 18: an input
            axes = self.const(node, node.input[1], "axes").tolist()
        if len(x) != 4 or axes is None or sorted(int(d) % 4 for d in axes) != [2, 3]:
            raise self.fail(node, f"only ReduceMean over H and W (axes 2, 3) of a 4-d tensor is supported, got axes "
                                  f"{axes} of {x}")
        src = self.producer(node, node.input[0])
        if a.get("keepdims", 1):
            self.emit(node, "global_avg_pool", [src])
        else:  # (N, C, 1, 1) -> (N, C)
            pool = self.emit(node, "global_avg_pool", [src], name=f"{node.name or node.output[0]}_pool")
            self.emit(node, "flatten", [pool], {"axis": 1})

    def op_Resize(self, node, a):
        x = self.shape(node)
        # opset 10: (X, scales); 11+: (X, roi, scales, sizes)
        scales_in, sizes_in = (node.input[1], "") if self.opset < 11 else (
            (list(node.input[2:3]) or [""])[0], (list(node.input[3:4]) or [""])[0])
        scales = self.const(node, scales_in, "scales") if scales_in else np.zeros(0)
        sizes = self.const(node, sizes_in, "sizes") if sizes_in else np.zeros(0)
        if self.opset < 11:  # Resize-10 samples as Upsample does (onnxruntime agrees)
            coord, nearest_mode = "asymmetric", "floor"
        else:
            coord = _text(a.get("coordinate_transformation_mode", b"half_pixel"))
            nearest_mode = _text(a.get("nearest_mode", b"round_prefer_floor"))
        self.resample(node, x, scales, sizes, _text(a.get("mode", b"nearest")), coord, nearest_mode, a)

    def op_Upsample(self, node, a):
        """Samples at ``out / scale`` rounded down (asymmetric, floor), as onnxruntime does."""
        x = self.shape(node)
        scales = np.asarray(a["scales"]) if "scales" in a else self.const(node, node.input[1], "scales")
        mode = _text(a.get("mode", b"nearest"))
        self.resample(node, x, scales, np.zeros(0), "linear" if mode == "bilinear" else mode, "asymmetric",
                      "floor", a)

    def _of_all_axes(self, node, x, axes: list[int], scales, sizes) -> tuple[np.ndarray, np.ndarray]:
        """Resize-18's ``scales`` or ``sizes`` of ``axes`` only, as the four of every axis."""
        if len(set(axes)) != len(axes) or max(scales.size, sizes.size) != len(axes):
            raise self.fail(node, f"axes {axes} do not match its {max(scales.size, sizes.size)} scales or sizes")
        full_scales, full_sizes = np.ones(4), np.array(x, dtype=np.int64)
        for i, axis in enumerate(axes):
            if scales.size:
                full_scales[axis] = scales[i]
            else:
                full_sizes[axis] = sizes[i]
        return (full_scales, np.zeros(0)) if scales.size else (np.zeros(0), full_sizes)

    def resample(self, node, x, scales, sizes, mode, coord, nearest_mode, a) -> None:
        from kernels.resize import COORDINATE_MODES, NEAREST_MODES

        if "axes" in a and len(x) == 4:  # opset 18: scales or sizes of these axes only
            scales, sizes = self._of_all_axes(node, x, [int(i) % 4 for i in a["axes"]], scales, sizes)
        if _text(a.get("keep_aspect_ratio_policy", b"stretch")) != "stretch":
            raise self.fail(node, "only keep_aspect_ratio_policy 'stretch' is supported")
        if len(x) != 4 or mode not in ("nearest", "linear") or coord not in COORDINATE_MODES \
                or nearest_mode not in NEAREST_MODES or a.get("antialias", 0):
            raise self.fail(node, f"only 2-d nearest / linear resizing of an NCHW tensor is supported "
                                  f"(coordinate modes {', '.join(COORDINATE_MODES)}), got mode '{mode}', "
                                  f"'{coord}', '{nearest_mode}'{', antialias' if a.get('antialias', 0) else ''} on {x}")
        if sizes.size == 4:
            size = tuple(int(d) for d in sizes[2:])
            factors = tuple(float(o) / i for o, i in zip(size, x[2:]))
            keep = tuple(int(d) for d in sizes[:2]) == x[:2]
        elif scales.size == 4:
            factors = tuple(float(f) for f in scales[2:])
            size = tuple(int(math.floor(i * f)) for i, f in zip(x[2:], factors))
            keep = tuple(float(f) for f in scales[:2]) == (1.0, 1.0)
        else:
            raise self.fail(node, "give 4 constant scales or sizes; export with static shapes")
        if not keep:
            raise self.fail(node, f"resizing the batch or channel axis is not supported (scales {scales.tolist()}, "
                                  f"sizes {sizes.tolist()})")
        self.emit(node, "resize", [self.producer(node, node.input[0])],
                  {"mode": mode, "size": size, "scales": factors, "coord": coord, "nearest_mode": nearest_mode})

    def op_Split(self, node, a):
        x = self.shape(node)
        axis = int(a.get("axis", 0)) % max(len(x), 1)
        if "split" in a:
            parts = [int(v) for v in a["split"]]
        elif len(node.input) > 1 and node.input[1]:
            parts = [int(v) for v in self.const(node, node.input[1], "split")]
        else:  # equal parts (the last smaller with opset 18's num_outputs)
            n = len(node.output)
            parts = [-(-x[axis] // n)] * (n - 1) + [x[axis] - -(-x[axis] // n) * (n - 1)]
        if len(x) != 4 or axis != 1 or len(parts) != len(node.output) or sum(parts) != x[1]:
            raise self.fail(node, f"only a split of the channels (axis 1) of a 4-d tensor into parts that add up is "
                                  f"supported, got axis {axis}, parts {parts} of {x}")
        src, begin = self.producer(node, node.input[0]), 0
        for i, n in enumerate(parts):
            if node.output[i]:
                self.emit(node, "slice", [src], {"axis": 1, "begin": begin, "end": begin + n},
                          name=node.output[i], output=i)
            begin += n

    def op_Slice(self, node, a):
        x = self.shape(node)
        if self.opset < 10:
            starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
        else:
            def const(i, what):
                return self.const(node, node.input[i], what).tolist() if len(node.input) > i and node.input[i] else None
            starts, ends, axes, steps = const(1, "starts"), const(2, "ends"), const(3, "axes"), const(4, "steps")
        axes = list(range(len(starts))) if axes is None else [int(d) % len(x) for d in axes]
        begin, end = 0, x[1] if len(x) > 1 else 0
        for d, s, e in zip(axes, starts, ends):
            s, e = (max(0, min(v + x[d] if v < 0 else v, x[d])) for v in (int(s), int(e)))
            if d == 1:
                begin, end = s, e
            elif (s, e) != (0, x[d]):
                begin = None  # a cut on another axis
        if len(x) != 4 or begin is None or (steps and any(int(v) != 1 for v in steps)):
            raise self.fail(node, f"only a slice of the channels (axis 1, step 1) of a 4-d tensor is supported, got "
                                  f"axes {axes}, starts {starts}, ends {ends}, steps {steps} of {x}")
        self.emit(node, "slice", [self.producer(node, node.input[0])], {"axis": 1, "begin": begin, "end": end})

    def op_Flatten(self, node, a):
        self.emit(node, "flatten", [self.producer(node, node.input[0])], {"axis": int(a.get("axis", 1))})

    def op_Reshape(self, node, a):
        x = self.shape(node)
        target = [int(d) for d in self.const(node, node.input[1], "shape")]
        target = [x[i] if d == 0 and not a.get("allowzero", 0) else d for i, d in enumerate(target)]
        if target.count(-1) == 1:
            known = math.prod(d for d in target if d != -1)
            target[target.index(-1)] = math.prod(x) // known if known else 0
        self.emit(node, "reshape", [self.producer(node, node.input[0])], {"shape": tuple(target)})

    def op_Transpose(self, node, a):
        perm = tuple(a.get("perm", range(len(self.shape(node)) - 1, -1, -1)))
        self.emit(node, "transpose", [self.producer(node, node.input[0])], {"perm": perm})

    def op_Pad(self, node, a):
        mode = a.get("mode", b"constant")
        mode = mode.decode(errors="replace") if isinstance(mode, bytes) else str(mode)
        if mode != "constant":
            raise self.fail(node, f"pad mode '{mode}' is not supported; only constant padding is")
        pads = a.get("pads")
        value = a.get("value", 0.0)
        if pads is None:
            pads = self.const(node, node.input[1], "pads").tolist()
            if len(node.input) > 2 and node.input[2]:
                value = float(self.const(node, node.input[2], "constant_value"))
        if len(node.input) > 3 and node.input[3]:
            raise self.fail(node, "Pad with axes is not supported; export with opset <= 17")
        rank = len(pads) // 2
        widths = tuple((int(pads[i]), int(pads[i + rank])) for i in range(rank))
        if min(min(w) for w in widths) < 0:
            raise self.fail(node, "negative pads (cropping) are not supported")
        self.emit(node, "pad", [self.producer(node, node.input[0])], {"pad_width": widths, "value": float(value)})

    def op_Constant(self, node, a):
        if "value" not in a:
            raise self.fail(node, "only Constant with a tensor 'value' is supported")
        self.consts[node.output[0]] = numpy_helper.to_array(a["value"])

    def op_Identity(self, node, a):
        src = node.input[0]
        if src in self.consts:
            self.consts[node.output[0]] = self.consts[src]
        else:
            self.alias[node.output[0]] = self.producer(node, src)

    op_Dropout = op_Identity


def _text(v) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def load_onnx(path: str | os.PathLike, batch: int | None = None) -> Model:
    """Read ``path`` (an ONNX CNN) into a Model; ``batch`` fills a dynamic batch dim.

    >>> load_onnx("/no/such/model.onnx")
    Traceback (most recent call last):
    ...
    graph_tuner.errors.GraphTunerError: /no/such/model.onnx: no such file
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise GraphTunerError(f"{path}: no such file")
    try:
        proto = onnx.load(path)
    except Exception as e:  # protobuf raises DecodeError, RuntimeError, ... on bad bytes
        raise GraphTunerError(f"{path}: not a readable ONNX model ({type(e).__name__}); "
                              "the file may be truncated or corrupt, export it again") from None
    if not proto.graph.node:
        raise GraphTunerError(f"{path}: the ONNX graph has no nodes; the file may be truncated or corrupt")
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=13)
    imp = _Importer(path, proto.graph, batch, opset)
    imp.run()
    outputs = []
    for vi in proto.graph.output:
        if vi.name not in imp.alias:
            raise GraphTunerError(f"{Path(path).name}: output '{vi.name}' is not computed by a supported op")
        outputs.append(imp.alias[vi.name])
    _check_against_onnx(proto, imp)
    name = proto.graph.name or Path(path).stem
    ops = list(imp.ops.values())
    used = {i for op in ops for i in op.inputs} | set(outputs)
    ops = [op for op in ops if op.kind != "input" or op.name in used]  # drop unused inputs
    return Model(name, ops, outputs, initializers=imp.params)


def external_data_files(path: str | os.PathLike) -> list[Path]:
    """The files an ONNX model keeps its tensors' data in (``onnx.save(...,
    save_as_external_data=True)``), which loading it reads too: outputs must not go over them.
    A file that is not a readable model has none (loading it says why).

    >>> external_data_files("/no/such/model.onnx")
    []
    """
    try:
        proto = onnx.load(os.fspath(path), load_external_data=False)
    except Exception:  # protobuf raises DecodeError, RuntimeError, ... on bad bytes
        return []
    tensors = [*proto.graph.initializer, *(a.t for n in proto.graph.node for a in n.attribute if a.HasField("t"))]
    names = {e.value for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL
             for e in t.external_data if e.key == "location"}
    return [Path(path).parent / n for n in sorted(names)]


def _check_against_onnx(proto: onnx.ModelProto, imp: _Importer) -> None:
    """Compare our shapes with onnx's inference where it knows them (catches misreads)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    for vi in fixed.graph.input:
        if vi.name in imp.ops:
            for d, n in zip(vi.type.tensor_type.shape.dim, imp.ops[vi.name].shape):
                d.dim_value = n
    try:
        inferred = shape_inference.infer_shapes(fixed).graph
    except Exception:  # onnx cannot infer this model; ours stands
        return
    for vi in list(inferred.value_info) + list(inferred.output):
        op = imp.ops.get(imp.alias.get(vi.name, ""))
        dims = vi.type.tensor_type.shape.dim
        if op is None or not dims or not all(d.HasField("dim_value") for d in dims):
            continue
        theirs = tuple(d.dim_value for d in dims)
        if theirs != op.shape:
            raise GraphTunerError(f"{imp.file}: tensor '{vi.name}': onnx infers shape {theirs} but the ops give "
                                  f"{op.shape}; check the exported model")
