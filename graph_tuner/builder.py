"""A small helper to write networks as code (the zoo uses it).

Each method adds one op, infers its shape at once (so a wrong channel count fails
where it is written) and returns the op's name, which later ops take as input.

>>> b = GraphBuilder("tiny")
>>> x = b.input((1, 3, 32, 32))
>>> y = b.relu(b.batch_norm(b.conv(x, 16, 3, padding=1, name="conv1")))
>>> m = b.build(b.softmax(b.dense(b.flatten(b.global_avg_pool(y)), 10)))
>>> [op.kind for op in m.ops]
['input', 'conv2d', 'batch_norm', 'relu', 'global_avg_pool', 'flatten', 'dense', 'softmax']
>>> m.op("conv1").shape, m.op("conv1").weights
((1, 16, 32, 32), {'weight': (16, 3, 3, 3)})
"""
from __future__ import annotations

from typing import Sequence

from graph_tuner.model import Model, Op
from graph_tuner.shapes import infer_shape

IntOrPair = int | Sequence[int]


def pair(v: IntOrPair) -> tuple[int, int]:
    """``3 -> (3, 3)``; pairs pass through."""
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def padding4(v: IntOrPair) -> tuple[int, int, int, int]:
    """TVM's padding forms to [top, left, bottom, right]: ``p``, ``(ph, pw)`` or 4 values.

    >>> padding4(1), padding4((0, 3)), padding4((0, 0, 1, 1))
    ((1, 1, 1, 1), (0, 3, 0, 3), (0, 0, 1, 1))
    """
    if isinstance(v, int):
        return (v, v, v, v)
    if len(v) == 2:
        return (int(v[0]), int(v[1]), int(v[0]), int(v[1]))
    return tuple(int(x) for x in v)  # type: ignore[return-value]


class GraphBuilder:
    """Collects ops; :meth:`build` makes the :class:`Model`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ops: dict[str, Op] = {}

    def shape(self, name: str) -> tuple[int, ...]:
        return self._ops[name].shape

    def op(self, kind: str, inputs: Sequence[str], attrs: dict | None = None,
            weights: dict | None = None, name: str | None = None) -> str:
        """Add an op of any kind; returns its name (``kind<n>`` if not given)."""
        if name is None:
            n = len(self._ops)
            while f"{kind}{n}" in self._ops:
                n += 1
            name = f"{kind}{n}"
        if name in self._ops:
            raise ValueError(f"duplicate op name {name!r}")
        attrs = dict(attrs or {})
        shape = infer_shape(kind, attrs, [self._ops[i].shape for i in inputs])
        self._ops[name] = Op(name, kind, list(inputs), attrs, shape, dict(weights or {}))
        return name

    def input(self, shape: Sequence[int], name: str = "data") -> str:
        self._ops[name] = Op(name, "input", [], {}, tuple(int(d) for d in shape), {})
        return name

    def conv(self, x: str, channels: int, kernel_size: IntOrPair, strides: IntOrPair = 1,
             padding: IntOrPair = 0, dilation: IntOrPair = 1, groups: int = 1, bias: bool = False,
             name: str | None = None) -> str:
        kernel = pair(kernel_size)
        weights = {"weight": (channels, self.shape(x)[1] // groups) + kernel}
        if bias:
            weights["bias"] = (channels,)
        attrs = {"strides": pair(strides), "padding": padding4(padding), "dilation": pair(dilation),
                 "groups": groups, "channels": channels, "kernel_size": kernel}
        return self.op("conv2d", [x], attrs, weights, name)

    def conv_transpose(self, x: str, channels: int, kernel: IntOrPair, stride: IntOrPair = 1,
                       padding: IntOrPair = 0, groups: int = 1, output_padding: IntOrPair = 0, bias: bool = False,
                       name: str | None = None) -> str:
        """A transposed conv (PyTorch's ``ConvTranspose2d``, ONNX ``ConvTranspose``; dilation 1):
        the weight is ``(C_in, channels / groups, kH, kW)``.

        >>> b = GraphBuilder("t")
        >>> up = b.conv_transpose(b.input((1, 64, 16, 16)), 64, 8, 4, 2, groups=64, name="up")
        >>> b.shape(up), b.build(up).op("up").weights
        ((1, 64, 64, 64), {'weight': (64, 1, 8, 8)})
        """
        kernel = pair(kernel)
        weights = {"weight": (self.shape(x)[1], channels // groups) + kernel}
        if bias:
            weights["bias"] = (channels,)
        attrs = {"strides": pair(stride), "padding": padding4(padding), "output_padding": pair(output_padding),
                 "groups": groups, "channels": channels, "kernel_size": kernel}
        return self.op("conv_transpose", [x], attrs, weights, name)

    def dense(self, x: str, units: int, bias: bool = True, name: str | None = None) -> str:
        weights = {"weight": (units, self.shape(x)[-1])}
        if bias:
            weights["bias"] = (units,)
        return self.op("dense", [x], {"units": units}, weights, name)

    def batch_norm(self, x: str, epsilon: float = 1e-5, name: str | None = None) -> str:
        c = (self.shape(x)[1],)
        return self.op("batch_norm", [x], {"epsilon": epsilon, "axis": 1},
                        {"gamma": c, "beta": c, "mean": c, "var": c}, name)

    def bias_add(self, x: str, name: str | None = None) -> str:
        return self.op("bias_add", [x], {"axis": 1}, {"bias": (self.shape(x)[1],)}, name)

    def relu(self, x: str, name: str | None = None) -> str:
        return self.op("relu", [x], name=name)

    def relu6(self, x: str, name: str | None = None) -> str:
        return self.op("clip", [x], {"min": 0.0, "max": 6.0}, name=name)

    def sigmoid(self, x: str, name: str | None = None) -> str:
        return self.op("sigmoid", [x], name=name)

    def silu(self, x: str, name: str | None = None) -> str:
        return self.op("silu", [x], name=name)

    def hard_sigmoid(self, x: str, alpha: float = 1 / 6, beta: float = 0.5, name: str | None = None) -> str:
        """PyTorch's ``hardsigmoid`` by default (ONNX's own default alpha is 0.2)."""
        return self.op("hard_sigmoid", [x], {"alpha": alpha, "beta": beta}, name=name)

    def hard_swish(self, x: str, name: str | None = None) -> str:
        return self.op("hard_swish", [x], name=name)

    def leaky_relu(self, x: str, alpha: float = 0.01, name: str | None = None) -> str:
        return self.op("leaky_relu", [x], {"alpha": alpha}, name=name)

    def add(self, a: str, b: str, name: str | None = None) -> str:
        return self.op("add", [a, b], name=name)

    def multiply(self, a: str, b: str, name: str | None = None) -> str:
        return self.op("multiply", [a, b], name=name)

    def resize(self, x: str, scale: int | tuple[float, float], mode: str = "nearest", coord: str = "asymmetric",
               nearest_mode: str = "floor", name: str | None = None) -> str:
        """Upsample by ``scale`` (ONNX Resize with scales; the defaults are PyTorch's nearest)."""
        scales = (float(scale), float(scale)) if isinstance(scale, (int, float)) else tuple(map(float, scale))
        size = tuple(int(d * s) for d, s in zip(self.shape(x)[2:], scales))
        attrs = {"mode": mode, "size": size, "scales": scales, "coord": coord, "nearest_mode": nearest_mode}
        return self.op("resize", [x], attrs, name=name)

    def slice(self, x: str, begin: int, end: int, name: str | None = None) -> str:
        """Channels ``[begin, end)``."""
        return self.op("slice", [x], {"axis": 1, "begin": begin, "end": end}, name=name)

    def concat(self, xs: Sequence[str], axis: int = 1, name: str | None = None) -> str:
        return self.op("concat", xs, {"axis": axis}, name=name)

    def max_pool(self, x: str, pool_size: IntOrPair, strides: IntOrPair = 1, padding: IntOrPair = 0,
                 ceil_mode: bool = False, name: str | None = None) -> str:
        attrs = {"pool_size": pair(pool_size), "strides": pair(strides), "padding": padding4(padding),
                 "ceil_mode": ceil_mode}
        return self.op("max_pool", [x], attrs, name=name)

    def avg_pool(self, x: str, pool_size: IntOrPair, strides: IntOrPair = 1, padding: IntOrPair = 0,
                 ceil_mode: bool = False, count_include_pad: bool = False, name: str | None = None) -> str:
        attrs = {"pool_size": pair(pool_size), "strides": pair(strides), "padding": padding4(padding),
                 "ceil_mode": ceil_mode, "count_include_pad": count_include_pad}
        return self.op("avg_pool", [x], attrs, name=name)

    def global_avg_pool(self, x: str, name: str | None = None) -> str:
        return self.op("global_avg_pool", [x], name=name)

    def flatten(self, x: str, name: str | None = None) -> str:
        return self.op("flatten", [x], {"axis": 1}, name=name)

    def reshape(self, x: str, shape: Sequence[int], name: str | None = None) -> str:
        return self.op("reshape", [x], {"shape": tuple(shape)}, name=name)

    def transpose(self, x: str, perm: Sequence[int], name: str | None = None) -> str:
        return self.op("transpose", [x], {"perm": tuple(perm)}, name=name)

    def softmax(self, x: str, axis: int = -1, name: str | None = None) -> str:
        return self.op("softmax", [x], {"axis": axis}, name=name)

    def build(self, *outputs: str) -> Model:
        return Model(self.name, list(self._ops.values()), list(outputs))
