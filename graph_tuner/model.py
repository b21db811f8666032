"""A CNN as a dataflow graph of ops with static shapes: what the graph tuner tunes.

A :class:`Model` holds :class:`Op` records (name, kind, producer names, attrs, output
shape, parameter shapes) in a ``networkx.DiGraph`` (edge ``u -> v`` when ``v`` reads
``u``). Models come from the built-in zoo (:mod:`graph_tuner.zoo`) or from ONNX files
(:mod:`graph_tuner.onnx_import`); :func:`graph_tuner.loading.load_model` takes either name.

Conv order
----------
:meth:`Model.convs` lists the conv2d ops in the order TVM's compiler visits them: a
post-order depth-first walk from the outputs (in output order), visiting each op's
inputs in argument order, each op once. AutoTVM's task extraction and
``apply_graph_best`` used that order, so an x86 tuning log written in it applies to
the layers positionally. For a pre-activation residual unit ``add(conv2(conv1(x)),
sc(x))`` the order is conv1, conv2, sc.

>>> from graph_tuner.loading import load_model
>>> m = load_model("resnet-18")
>>> len(m.convs()), len(m.distinct_workloads()), m.convs()[0].name
(21, 12, 'conv0')
>>> m.workload("conv0").kernel_shape
(64, 3, 7, 7)
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from graph_tuner.shapes import infer_shape
from kernels.workload import Conv2DWorkload

# Op kind -> its attrs. Shapes are NCHW; 4-element paddings are TVM's
# [top, left, bottom, right]; 2-element values are (height, width).
OP_KINDS: dict[str, str] = {
    "input": "no attrs; Op.shape is the input's shape",
    "conv2d": "strides (2), padding (4), dilation (2), groups, channels (out), kernel_size (2); "
    "weights: weight OIHW (I = C/groups) [+ bias (O,)]",
    "conv_transpose": "strides (2), padding (4), output_padding (2, each < its stride), groups, channels (out), "
    "kernel_size (2); dilation 1; weights: weight IOHW (C_in, C_out/groups, kH, kW) [+ bias (O,)]",
    "dense": "units; input is 2-d; weights: weight (units, in) [+ bias (units,)]",
    "batch_norm": "epsilon, axis (=1); weights: gamma, beta, mean, var, each (C,)",
    "bias_add": "axis (=1); weights: bias (C,)",
    "relu": "no attrs",
    "clip": "min, max (relu6 is clip 0..6)",
    "sigmoid": "no attrs",
    "silu": "no attrs; x * sigmoid(x) (ONNX: Sigmoid then Mul)",
    "hard_sigmoid": "alpha, beta: max(0, min(1, alpha * x + beta))",
    "hard_swish": "no attrs; x * hard_sigmoid(x) with alpha 1/6, beta 0.5",
    "leaky_relu": "alpha: x if x >= 0 else alpha * x",
    "add": "no attrs; two inputs, numpy broadcasting",
    "multiply": "no attrs; two inputs, numpy broadcasting",
    "concat": "axis",
    "max_pool": "pool_size (2), strides (2), padding (4), ceil_mode",
    "avg_pool": "pool_size (2), strides (2), padding (4), ceil_mode, count_include_pad",
    "global_avg_pool": "no attrs; (N, C, H, W) -> (N, C, 1, 1)",
    "resize": "mode ('nearest' | 'linear'), size (out H, W), scales (2), coord (ONNX "
    "coordinate_transformation_mode), nearest_mode (ONNX)",
    "slice": "axis (=1), begin, end: channels [begin, end)",
    "flatten": "axis (=1): (d0..d[axis-1], rest) -> 2-d",
    "reshape": "shape: the static output shape",
    "transpose": "perm",
    "pad": "pad_width: ((before, after), ...) per axis, value (constant padding)",
    "softmax": "axis",
}


@dataclass
class Op:
    """One operator: its output is a tensor named like the op.

    >>> Op("relu1", "relu", ["conv1"], {}, (1, 64, 56, 56))
    Op(name='relu1', kind='relu', inputs=['conv1'], attrs={}, shape=(1, 64, 56, 56), weights={})
    """

    name: str  # unique within the model
    kind: str  # a key of OP_KINDS
    inputs: list[str]  # producer op names in argument order (duplicates allowed: add(x, x))
    attrs: dict = field(default_factory=dict)  # see OP_KINDS
    shape: tuple[int, ...] = ()  # inferred output shape, float32
    weights: dict[str, tuple[int, ...]] = field(default_factory=dict)  # param name -> shape


class Model:
    """A network: ops in a DAG, with its outputs in order.

    ``initializers`` (op name -> param name -> array) are the trained weights of an
    imported model; without them :meth:`params` draws seeded random ones.

    >>> ops = [Op("data", "input", [], {}, (1, 3, 8, 8)),
    ...        Op("c", "conv2d", ["data"], {"strides": (1, 1), "padding": (1, 1, 1, 1),
    ...           "dilation": (1, 1), "groups": 1, "channels": 4, "kernel_size": (3, 3)},
    ...           (1, 4, 8, 8), {"weight": (4, 3, 3, 3)}),
    ...        Op("r", "relu", ["c"], {}, (1, 4, 8, 8))]
    >>> m = Model("tiny", ops, ["r"])
    >>> m.batch, m.inputs, [op.name for op in m.consumers("data")], m.flops()
    (1, ['data'], ['c'], 13824)
    """

    def __init__(self, name: str, ops: list[Op], outputs: list[str],
                 initializers: dict[str, dict[str, np.ndarray]] | None = None) -> None:
        self.name = name
        self.graph = nx.DiGraph()
        for op in ops:
            if op.kind not in OP_KINDS:
                raise ValueError(f"op {op.name!r}: unknown kind {op.kind!r}")
            if op.name in self.graph:
                raise ValueError(f"duplicate op name {op.name!r}")
            self.graph.add_node(op.name, op=op)
        for op in ops:
            for src in op.inputs:
                if src not in self.graph:
                    raise ValueError(f"op {op.name!r} reads unknown op {src!r}")
                self.graph.add_edge(src, op.name)
        if not nx.is_directed_acyclic_graph(self.graph):
            raise ValueError(f"model {name!r} has a cycle")
        for out in outputs:
            if out not in self.graph:
                raise ValueError(f"unknown output {out!r}")
        index = {op.name: i for i, op in enumerate(ops)}
        self._ops = [self.graph.nodes[n]["op"] for n in nx.lexicographical_topological_sort(self.graph, key=index.get)]
        for op in self._ops:  # a wrong shape here is a bug in the builder or importer
            if op.kind != "input":
                expected = infer_shape(op.kind, op.attrs, [self.op(i).shape for i in op.inputs])
                if tuple(op.shape) != expected:
                    raise ValueError(f"op {op.name!r}: shape {op.shape} but its inputs give {expected}")
        self.outputs = list(outputs)
        self.inputs = [op.name for op in self._ops if op.kind == "input"]
        self._initializers = initializers

    @functools.cached_property
    def digest(self) -> str:
        """A short digest of what the model computes: its ops' kinds, inputs, attributes and
        shapes (not its weights' values, nor its name). What tells a measurement of one model
        from one of another batch size or version under the same name.

        >>> from graph_tuner.loading import load_model
        >>> a, b = load_model("resnet-18"), load_model("resnet-18", batch=2)
        >>> len(a.digest), a.digest == load_model("resnet-18").digest, a.digest == b.digest
        (12, True, False)
        """
        return short_digest([(op.name, op.kind, op.inputs, sorted(op.attrs.items()), tuple(op.shape),
                              sorted(op.weights.items())) for op in self._ops] + [self.outputs])

    def __repr__(self) -> str:
        return f"<Model {self.name}: {len(self._ops)} ops, {len(self.convs())} convs, input {self.op(self.inputs[0]).shape}>"

    @property
    def ops(self) -> list[Op]:
        """All ops in topological order (ties in construction order)."""
        return list(self._ops)

    @property
    def batch(self) -> int:
        return self.op(self.inputs[0]).shape[0]

    def op(self, name: str) -> Op:
        try:
            return self.graph.nodes[name]["op"]
        except KeyError:
            raise KeyError(f"model {self.name!r} has no op {name!r}") from None

    def consumers(self, name: str) -> list[Op]:
        """The ops that read ``name``'s output, each once, in topological order."""
        readers = set(self.graph.successors(name))
        return [op for op in self._ops if op.name in readers]

    def visit_order(self) -> list[str]:
        """Op names in TVM's visit order (see the module docstring); dead ops left out."""
        # Reversed graph whose adjacency is inserted in argument order, so networkx's
        # DFS follows inputs left to right; a sentinel root visits the outputs in order.
        root = ("__outputs__",)
        rev = nx.DiGraph()
        rev.add_edges_from((root, out) for out in self.outputs)
        for op in self._ops:
            rev.add_node(op.name)
            rev.add_edges_from((op.name, src) for src in op.inputs)
        return [n for n in nx.dfs_postorder_nodes(rev, root) if n != root]

    def convs(self) -> list[Op]:
        """The conv2d ops in conv order."""
        return [self.op(n) for n in self.visit_order() if self.op(n).kind == "conv2d"]

    def workload(self, op: Op | str) -> Conv2DWorkload:
        """The AutoTVM workload of conv op ``op`` (an Op or its name)."""
        op = self.op(op) if isinstance(op, str) else op
        if op.kind != "conv2d":
            raise ValueError(f"op {op.name!r} is a {op.kind}, not a conv2d")
        a = op.attrs
        return Conv2DWorkload(self.op(op.inputs[0]).shape, op.weights["weight"], a["strides"], a["padding"],
                              a["dilation"], a["groups"])

    def conv_workloads(self) -> list[Conv2DWorkload]:
        """One workload per conv layer, in conv order."""
        return [self.workload(op) for op in self.convs()]

    def distinct_workloads(self) -> list[tuple[Conv2DWorkload, int]]:
        """Each distinct workload with how many layers have it, in order of first appearance."""
        counts: dict[Conv2DWorkload, int] = {}
        for w in self.conv_workloads():
            counts[w] = counts.get(w, 0) + 1
        return list(counts.items())

    def flops(self) -> int:
        """Conv, transposed conv and dense FLOPs, a multiply-add counted as two."""
        dense = sum(2 * math.prod(op.weights["weight"]) * op.shape[0] for op in self._ops if op.kind == "dense")
        up = sum(2 * conv_transpose_macs(op, self.op(op.inputs[0]).shape) for op in self._ops
                 if op.kind == "conv_transpose")
        return sum(w.flops for w in self.conv_workloads()) + dense + up

    def editable_ops(self) -> dict[str, Op]:
        """Copies of the ops (their own attrs) by name, in topological order: for graph rewrites,
        which then :func:`infer_shapes` and build the result with :meth:`rebuilt`."""
        return {op.name: dataclasses.replace(op, attrs=dict(op.attrs), inputs=list(op.inputs)) for op in self._ops}

    def rebuilt(self, ops: list[Op]) -> Model:
        """This model (name, outputs, trained weights) over ``ops``, rewritten copies of its ops
        (:meth:`editable_ops`) in topological order; their shapes are inferred again."""
        infer_shapes({op.name: op for op in ops}, [op.name for op in ops])
        return Model(self.name, ops, self.outputs, initializers=self._initializers)

    def params(self, seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
        """Op name -> param name -> float32 array (fresh copies).

        Imported models give their trained initializers. Others get seeded random
        weights scaled so activations keep a second moment near 1 through any depth:
        each conv/dense weight is drawn with variance ``1 / (fan_in * m)`` where ``m``
        is the estimated second moment of its input, and each batch norm's running
        variance is (roughly) the estimated variance of its input, as in a trained net.

        >>> from graph_tuner.loading import load_model
        >>> p = load_model("mobilenet").params(seed=1)
        >>> p["conv_block_1_conv"]["weight"].shape, bool((p["conv_block_1_bn"]["var"] > 0).all())
        ((32, 3, 3, 3), True)
        """
        if self._initializers is not None:
            return {op: {k: np.array(v, dtype=np.float32) for k, v in ps.items()}
                    for op, ps in self._initializers.items()}
        return _random_params(self._ops, seed)


def short_digest(value) -> str:
    """12 hex digits of the SHA-1 of ``repr(value)``: what records carry to tell one model, or
    one step, from another of the same name.

    >>> short_digest([1, "a"]) == short_digest([1, "a"]) != short_digest([1, "b"])
    True
    """
    return hashlib.sha1(repr(value).encode()).hexdigest()[:12]


def infer_shapes(ops: dict[str, Op], order: list[str]) -> None:
    """Infer the shape of each op of ``ops`` again, in ``order`` (topological, so each op's
    inputs are final before it)."""
    for name in order:
        op = ops[name]
        if op.kind != "input":
            op.shape = infer_shape(op.kind, op.attrs, [ops[i].shape for i in op.inputs])


def conv_transpose_macs(op: Op, input_shape: tuple[int, ...]) -> int:
    """The multiply-adds a transposed conv ``op`` does on an input of ``input_shape``: for each
    output pixel, the taps ``(o + pad - k) % stride == 0`` that land on an input pixel, times
    the input channels of its group (the taps the padding crops away are not work).

    >>> op = Op("up", "conv_transpose", ["x"], {"strides": (2, 2), "padding": (1, 1, 1, 1), "groups": 8,
    ...         "channels": 8, "kernel_size": (4, 4)}, (1, 8, 8, 8), {"weight": (8, 1, 4, 4)})
    >>> conv_transpose_macs(op, (1, 8, 4, 4))  # 8 channels x 8 x 8 outputs x (2 x 2 taps, 1 at an edge)
    1568
    """
    from kernels.conv_transpose import axis_taps  # the kernel's own rule for which taps land

    a = op.attrs
    taps = []
    for axis in (0, 1):
        size, k, s, pad = input_shape[2 + axis], a["kernel_size"][axis], a["strides"][axis], a["padding"][axis]
        taps.append(sum(len(axis_taps(o, size, k, s, pad)) for o in range(op.shape[2 + axis])))
    return op.shape[0] * op.shape[1] * (input_shape[1] // a["groups"]) * taps[0] * taps[1]


def _random_params(ops: list[Op], seed: int) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)

    def normal(std: float, shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)  # float32: VGG has 140M weights
    moment_size = {op.name: math.prod(op.shape) for op in ops}
    moment: dict[str, float] = {}  # op name -> estimated E[x^2] of its output
    params: dict[str, dict[str, np.ndarray]] = {}
    for op in ops:
        m_in = [moment[i] for i in op.inputs]
        p: dict[str, np.ndarray] = {}
        if op.kind in ("conv2d", "dense", "conv_transpose"):
            w = op.weights["weight"]
            if op.kind == "conv_transpose":  # an output sums C_in/groups x (kH x kW / strides) taps
                (sh, sw) = op.attrs["strides"]
                fan_in = w[0] // op.attrs["groups"] * max(1.0, w[2] * w[3] / (sh * sw))
            else:
                fan_in = math.prod(w[1:])
            p["weight"] = normal(math.sqrt(1.0 / (fan_in * max(m_in[0], 1e-6))), w)
            m = 1.0
            if "bias" in op.weights:
                p["bias"] = normal(0.05, op.weights["bias"])
                m += 0.0025
        elif op.kind == "batch_norm":
            (c,) = op.weights["gamma"]
            p["gamma"] = rng.uniform(0.8, 1.2, c)
            p["beta"] = normal(0.1, (c,))
            p["mean"] = normal(0.1 * math.sqrt(m_in[0]), (c,))
            p["var"] = m_in[0] * rng.uniform(0.8, 1.25, c)
            m = 1.0
        elif op.kind == "bias_add":
            p["bias"] = normal(0.05, op.weights["bias"])
            m = m_in[0] + 0.0025
        elif op.kind == "input":
            m = 1.0
        elif op.kind in ("relu", "clip", "leaky_relu"):
            m = m_in[0] / 2  # a zero-mean symmetric input loses its negative half
        elif op.kind in ("silu", "hard_swish"):
            m = 0.36 * m_in[0]  # E[silu(x)^2] for x ~ N(0, 1); hard swish is close
        elif op.kind in ("sigmoid", "hard_sigmoid"):
            m = 0.3  # in (0, 1), around 0.5
        elif op.kind == "add":
            m = m_in[0] + m_in[1]
        elif op.kind == "multiply":
            m = m_in[0] * m_in[1]
        elif op.kind == "concat":
            # Weighted by each part's share of the output.
            m = sum(mi * moment_size[i] for mi, i in zip(m_in, op.inputs)) / math.prod(op.shape)
        elif op.kind == "softmax":
            m = 1.0 / op.shape[op.attrs.get("axis", -1)]
        else:  # pools, reshapes, pad: roughly unchanged
            m = m_in[0]
        if p:
            params[op.name] = {k: v.astype(np.float32, copy=False) for k, v in p.items()}
        moment[op.name] = m
    return params
