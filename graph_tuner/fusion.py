"""Fusion: which ops run as one step, and so what each conv's kernel absorbs.

One rule set for everyone who needs it: the cost model (a residual add must be
absorbable, :mod:`graph_tuner.layout_flow`), the tuner (each kernel is timed with the
epilogue its layers run, :func:`conv_epilogues`) and the executor (which compiles the
steps). The weights' folding itself lives with the executor (:mod:`graph_tuner.executor.fold`).

A compiled program runs *steps*, each covering one or more model ops:

* a **conv group**: a conv2d, the batch norms and bias adds that directly follow it
  (folded into its weights and bias: exact, since they are affine per output
  channel and nothing sits between), then either an activation, or a residual
  ``add`` whose other operand is read in the conv's output layout, optionally
  followed by an activation: the kernel's epilogue computes ``act(conv + bias +
  residual)``. Every absorbed tensor must have the next op as its only reader and
  must not be a graph output.
* an **elementwise chain**: an optional add/multiply, then batch norms and bias adds,
  then at most one activation, run as one blocked pass, the generated kernel of
  :func:`kernels.elementwise.build_elementwise` (a batch norm *before* a conv, as in
  TVM's pre-activation ResNet ``bn -> relu -> conv``, cannot be folded into the conv
  exactly because of the conv's zero padding; it runs here as scale-shift-relu). An
  activation ends a chain.
* any other op on its own.

An activation is any op of :data:`CHAIN_ACTIVATIONS` (relu, clip / relu6, sigmoid, SiLU,
hard sigmoid, hard swish, leaky relu), and :func:`activation_of` is the one rule for all
three places it can run: a conv's epilogue (dense or depthwise), the second output
below, or the end of a chain (:data:`EPILOGUE_ACTIVATIONS` holds epilogues to fewer, only to
measure what fusing them saves). The kernels share one implementation of each
(:mod:`kernels.activations`), so whatever an elementwise pass runs, an epilogue runs too:
EfficientNet-B0's SiLUs and MobileNet-v3's hard swishes after a conv cost no pass of
their own.

A chain of batch norms / bias adds with at most a final activation that reads a conv
group's output (typically the next pre-activation unit's ``bn -> relu`` on a residual
sum that the next add reads too) is **written by the conv's epilogue** as a second
output (``Step.affine``): one pass instead of two. The chain keeps its step (so its
buffer is planned) but is marked ``fused`` and runs nothing itself.

Such a chain read only by one unpadded 1x1 conv, in the layout it reads its own input in
(DenseNet's ``bn -> relu`` on the concatenation before each 1x1 conv), is instead **the
conv's input prologue** (``Step.prologue``): the conv reads the chain's input and
transforms each pixel as it loads it (:func:`kernels.conv2d.conv2d_ir`); the chain is
marked ``fused`` and its output is never materialised. As a pass of its own it read and
wrote the whole concatenation before every layer: DenseNet-121's 58 such passes took
1.6 ms of 27 in the network, 3x their time alone. So is a squeeze-excite scale
(:func:`channel_gate`: ``x * gate`` with one factor per channel, computed in the run) before
the 1x1 projection of EfficientNet's, MobileNet-v3's and RegNetY's blocks: the prologue's
per-channel scale is then the gate's buffer, its shift zero.

A global average pool on a depthwise conv group's output, read in the layout the conv
writes it in (the squeeze of EfficientNet's and MobileNet-v3's squeeze-excite blocks), reads
the **row means** the conv's epilogue writes as it stores each row (``Step.pooled``,
``Step.from_rows``): ``OH`` means per channel instead of the ``OH x OW`` plane, which the
pool read again right after the conv wrote it.

When both operands of an add come from conv groups, the add goes to the conv that
runs later, so the other operand is already there when the kernel reads it.

>>> from graph_tuner.builder import GraphBuilder
>>> b = GraphBuilder("t")
>>> x = b.input((1, 8, 4, 4))
>>> a = b.relu(b.batch_norm(b.conv(x, 8, 3, padding=1, name="c1"), name="bn1"), name="r1")
>>> y = b.relu(b.add(b.conv(a, 8, 3, padding=1, name="c2"), x, name="add"), name="r2")
>>> m = b.build(b.relu(b.batch_norm(y, name="bn3"), name="r3"))
>>> [(s.kind, s.ops, s.output) for s in plan_steps(m)]  # doctest: +NORMALIZE_WHITESPACE
[('conv', ['c1', 'bn1', 'r1'], 'r1'), ('conv', ['c2', 'add', 'r2'], 'r2'),
 ('elementwise', ['bn3', 'r3'], 'r3')]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from graph_tuner.model import Model, Op
from kernels.activations import activation_key
from kernels.conv2d import prologue_fits
from kernels.depthwise import every_config_lanewise, lanewise_groups

FOLDABLE = frozenset({"batch_norm", "bias_add"})
# Op kind -> the kernels' activation (kernels.activations.ACTIVATIONS) it is, with its
# parameters from the op's attrs; see activation_of.
CHAIN_ACTIVATIONS = {
    "relu": lambda a: ("relu",),
    "clip": lambda a: ("clip", a["min"], a["max"]),
    "sigmoid": lambda a: ("sigmoid",),
    "silu": lambda a: ("silu",),
    "hard_swish": lambda a: ("hard_swish",),
    "hard_sigmoid": lambda a: ("hard_sigmoid", a["alpha"], a["beta"]),
    "leaky_relu": lambda a: ("leaky_relu", a["alpha"]),
}
UNARY_ELEMENTWISE = FOLDABLE | frozenset(CHAIN_ACTIVATIONS)
# The activations (by name) a conv's epilogue may run; None: every one. Only for measuring
# what fusing them saves (benchmarks/epilogue_ab.py sets {"relu", "relu6"}, the old rule).
EPILOGUE_ACTIVATIONS: frozenset[str] | None = None
BINARY_ELEMENTWISE = frozenset({"add", "multiply"})
# Rule 6 of plan_steps (a squeeze pool reads its depthwise conv's row means); off only to
# measure what it saves (benchmarks/ab_builds.py --set graph_tuner.fusion.POOL_ROW_MEANS=False).
POOL_ROW_MEANS = True


@dataclass
class Step:
    """Model ops run as one step; ``output`` is the only tensor it materialises."""

    kind: str  # "conv", "elementwise", or the op's kind
    ops: list[str]  # model ops covered, in dataflow order (the first is the head)
    output: str  # tensor written (the last op's name)
    inputs: list[str] = field(default_factory=list)  # tensors read (conv: data, then residual, prologue gate)
    activation: str | tuple | None = None  # conv groups: activation_of's, run in the epilogue
    residual: str | None = None  # conv groups: tensor added in the epilogue
    affine: "Step | None" = None  # conv groups: an elementwise chain the epilogue writes too
    prologue: "Step | None" = None  # conv groups: an elementwise chain applied to the data as it is read
    fused: bool = False  # elementwise chains a conv runs (second output or prologue): run nothing
    pooled: "Step | None" = None  # depthwise conv groups: the global pool that reads their row means
    from_rows: bool = False  # global pools: reads its input's row means, which its conv wrote (rule 6)


def activation_of(op: Op) -> str | tuple | None:
    """The kernels' activation ``op`` is (a name, or ``(name, *params)`` for one with
    parameters: :func:`kernels.activations.activation_key`), or None if it is none.
    Conv epilogues and elementwise chains run the same ones.

    >>> activation_of(Op("r", "clip", ["x"], {"min": 0.0, "max": 6.0}))
    'relu6'
    >>> activation_of(Op("a", "leaky_relu", ["x"], {"alpha": 0.1})), activation_of(Op("s", "silu", ["x"]))
    (('leaky_relu', 0.1), 'silu')
    """
    make = CHAIN_ACTIVATIONS.get(op.kind)
    if make is None:
        return None
    if op.kind == "clip" and op.attrs.get("min") == 0 and op.attrs.get("max") == 6:
        return "relu6"
    return activation_key(make(op.attrs))


def epilogue_activation(op: Op) -> str | tuple | None:
    """:func:`activation_of` ``op`` where a conv's epilogue (or second output) may run it
    (:data:`EPILOGUE_ACTIVATIONS`), else None."""
    act = activation_of(op)
    name = act if act is None or isinstance(act, str) else act[0]
    return act if EPILOGUE_ACTIVATIONS is None or name in EPILOGUE_ACTIVATIONS else None


def _sole_reader(model: Model, name: str, outputs: set[str]) -> Op | None:
    """The op that is ``name``'s only reader (reading it once), if any and not a graph output."""
    if name in outputs:
        return None
    readers = model.consumers(name)
    if len(readers) != 1 or readers[0].inputs.count(name) != 1:
        return None
    return readers[0]


def _conv_groups(model: Model, outputs: set[str]) -> list[Step]:
    """Step 1 of :func:`plan_steps`: each conv with the bn/bias it folds and an activation."""
    groups = []
    for op in model.ops:
        if op.kind != "conv2d":
            continue
        g = Step("conv", [op.name], op.name, [op.inputs[0]])
        while (nxt := _sole_reader(model, g.output, outputs)) is not None:
            if nxt.kind in FOLDABLE and g.activation is None:
                g.ops.append(nxt.name)
            elif epilogue_activation(nxt) and g.activation is None:
                g.activation = epilogue_activation(nxt)
                g.ops.append(nxt.name)
            else:
                break
            g.output = nxt.name
        groups.append(g)
    return groups


def _residual_operands(model: Model, op: Op, owner: dict[str, Step], outputs: set[str]) -> list[tuple[int, Step]]:
    """``(operand index, conv group)`` of each operand of ``op`` that a conv epilogue could add
    ``op``'s other operand to (layouts aside): the group's activation-free output, read by ``op`` alone."""
    if op.kind != "add" or len(op.inputs) != 2 or op.inputs[0] == op.inputs[1] or len(op.shape) != 4:
        return []
    if model.op(op.inputs[0]).shape != model.op(op.inputs[1]).shape:
        return []  # broadcasting adds stay elementwise
    fits = []
    for i, t in enumerate(op.inputs):
        g = owner.get(t)
        if (g is not None and g.kind == "conv" and g.output == t and g.activation is None
                and _sole_reader(model, t, outputs) is op):
            fits.append((i, g))
    return fits


def residual_convs(model: Model) -> dict[str, list[str]]:
    """For each add a conv epilogue could absorb, the convs that could take it (by their op
    name). The executor fuses such an add into one of them whose output layout is the add's;
    the graph tuner's problem requires that one exists (:mod:`graph_tuner.selection`).

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> x = b.input((1, 8, 4, 4))
    >>> y = b.add(b.conv(x, 8, 1, name="c1"), b.conv(x, 8, 1, name="c2"), name="add")
    >>> residual_convs(b.build(b.add(b.relu(y), x, name="add2")))
    {'add': ['c1', 'c2']}
    """
    outputs = set(model.outputs)
    owner = {n: g for g in _conv_groups(model, outputs) for n in g.ops}
    out = {}
    for op in model.ops:
        fits = _residual_operands(model, op, owner, outputs)
        if fits:
            out[op.name] = [g.ops[0] for _, g in fits]
    return out


def conv_epilogues(model: Model, steps: list[Step] | None = None) -> dict[str, dict]:
    """Each conv's fused epilogue as :func:`kernels.conv2d.build_conv2d` keyword arguments
    (``bias``, ``residual``, ``activation``, ``affine_out``, ``affine_activation``, ``prologue``,
    ``prologue_activation``, ``row_means``), from
    ``steps`` (default: :func:`plan_steps` with every layout agreeing, i.e. every possible
    fusion). The tuner times kernels with them: a residual read and a second output are
    memory traffic the bare conv does not have (+22-44% on ResNet-50's stage-1 1x1 convs).

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> x = b.input((1, 8, 4, 4))
    >>> y = b.add(b.batch_norm(b.conv(x, 8, 1, name="c1")), x)
    >>> m = b.build(b.conv(b.relu(b.batch_norm(y)), 8, 1, name="c2"))
    >>> conv_epilogues(m)["c1"]  # doctest: +NORMALIZE_WHITESPACE
    {'bias': True, 'residual': True, 'activation': None, 'affine_out': True, 'affine_activation': 'relu',
     'prologue': False, 'prologue_activation': None, 'row_means': False}
    """
    return {s.ops[0]: step_epilogue(model, s) for s in (plan_steps(model) if steps is None else steps)
            if s.kind == "conv"}


def step_epilogue(model: Model, s: Step) -> dict:
    """A conv group's fused epilogue as :func:`kernels.conv2d.build_conv2d` keyword arguments."""
    conv = model.op(s.ops[0])
    bias = "bias" in conv.weights or any(model.op(n).kind in FOLDABLE for n in s.ops[1:])
    return dict(bias=bias, residual=s.residual is not None, activation=s.activation,
                affine_out=s.affine is not None,
                affine_activation=(affine_chain(model, s.affine) or None) if s.affine else None,
                prologue=s.prologue is not None,
                prologue_activation=(affine_chain(model, s.prologue) or None) if s.prologue else None,
                row_means=s.pooled is not None)


def plan_steps(model: Model, blocks: dict[str, int] | None = None,
               join_blocks: dict[str, int] | None = None, reads: Callable[[str, str], int] | None = None
               ) -> list[Step]:
    """Group the model's ops into steps (see the module doc), in execution order.

    ``blocks`` gives each tensor's channel block and ``join_blocks`` each add's; an add
    is fused into a conv only when the conv's output is already in the add's layout.
    ``reads(reader, tensor)`` is the block a reader reads a tensor in (after the plan's
    transforms); a chain becomes a conv's prologue only when the conv would read the
    chain's output in the block the chain reads its input in. Without them every layout
    is taken to agree.
    """
    blocks = blocks or {}
    join_blocks = join_blocks or {}
    outputs = set(model.outputs)
    order = {op.name: i for i, op in enumerate(model.ops)}

    # 1. conv + folded bn/bias [+ activation]
    groups = _conv_groups(model, outputs)
    owner: dict[str, Step] = {n: g for g in groups for n in g.ops}  # op name -> its step

    # 2. residual adds, each to the later-running conv whose output is in its layout
    for op in model.ops:
        fits = [(order[g.ops[0]], i, g) for i, g in _residual_operands(model, op, owner, outputs)
                if g.residual is None
                and blocks.get(op.inputs[i], 1) == join_blocks.get(op.name, blocks.get(op.inputs[i], 1))]
        if not fits:
            continue
        _, i, g = max(fits)
        g.residual = op.inputs[1 - i]
        g.inputs.append(g.residual)
        g.ops.append(op.name)
        g.output = op.name
        owner[op.name] = g
        nxt = _sole_reader(model, op.name, outputs)
        if nxt is not None and epilogue_activation(nxt):
            g.activation = epilogue_activation(nxt)
            g.ops.append(nxt.name)
            g.output = nxt.name
            owner[nxt.name] = g

    # 3. elementwise chains and single ops
    steps: list[Step] = []
    for op in model.ops:
        if op.name in owner or op.kind == "input":
            continue
        src = op.inputs[0] if op.inputs else None
        prev = owner.get(src) if src is not None else None
        if (op.kind in UNARY_ELEMENTWISE and prev is not None and prev.kind == "elementwise"
                and prev.output == src and _sole_reader(model, src, outputs) is op
                and activation_of(model.op(src)) is None):
            prev.ops.append(op.name)
            prev.output = op.name
            owner[op.name] = prev
            continue
        if op.kind in UNARY_ELEMENTWISE or op.kind in BINARY_ELEMENTWISE:
            s = Step("elementwise", [op.name], op.name, list(op.inputs))
        else:
            s = Step(op.kind, [op.name], op.name, list(op.inputs))
        owner[op.name] = s
        steps.append(s)
    # 4. affine chains on a conv group's output become its epilogue's second output (not for a
    # conv the depthwise template may run, which has none: the config is picked after fusion)
    for s in steps:
        g = owner.get(s.inputs[0]) if s.kind == "elementwise" and len(s.inputs) == 1 else None
        if (g is not None and g.kind == "conv" and g.output == s.inputs[0] and g.affine is None
                and not lanewise_groups(model.workload(model.op(g.ops[0])))
                and affine_chain(model, s) is not None):
            g.affine, s.fused = s, True
    # 5. an affine chain or a squeeze-excite scale read only by one unpadded 1x1 conv becomes its
    # input prologue (with two readers each would redo it; ResNet-50's first unit that way:
    # 0.987x end to end, against 0.992x for two identical builds in the same A/B)
    for s in steps:
        r = _sole_reader(model, s.output, outputs) if s.kind == "elementwise" and not s.fused else None
        g = owner.get(r.name) if r is not None else None
        if g is None or g.kind != "conv" or g.ops[0] != r.name or not prologue_fits(model.workload(r)):
            continue
        gate = channel_gate(model, s)
        if gate is None and (len(s.inputs) != 1 or affine_chain(model, s) is None):
            continue
        data = prologue_data(model, s)
        if reads is not None and reads(r.name, s.output) != reads(s.ops[0], data):
            continue
        g.prologue, g.inputs[0], s.fused = s, data, True
        if gate is not None:
            g.inputs.append(gate)
    # 6. a global average pool on a depthwise conv group's output, in the layout the conv writes
    # it in (a squeeze-excite's squeeze), reads the row means the conv's epilogue writes
    for s in steps:
        g = owner.get(s.inputs[0]) if s.kind == "global_avg_pool" and POOL_ROW_MEANS else None
        if (g is not None and g.kind == "conv" and g.output == s.inputs[0] and g.pooled is None
                and every_config_lanewise(model.workload(model.op(g.ops[0])))
                # Costed without ``reads`` (every layout agreeing): a pool computes in its input's
                # block (layout_flow.AGNOSTIC_KINDS), so a plan never reads its input transformed
                and (reads is None or reads(s.ops[0], g.output) == blocks.get(g.output))):
            g.pooled, s.from_rows = s, True
    steps += groups
    # Run each step where its last op sits in the model's topological order.
    steps.sort(key=lambda s: order[s.ops[-1]])
    return steps


def prologue_chains(model: Model, steps: list[Step] | None = None) -> dict[str, str]:
    """The chains some plan runs as a conv's input prologue (rule 5 of :func:`plan_steps`),
    by first op -> the chain's output tensor. A plan whose conv reads that output in another
    block than the chain reads its input in (a plan transforming it) runs the chain as a step
    of its own. Taken where every layout agrees: a chain rules 2 and 4 gave another role in
    some plan (an affine second output of a conv that absorbs an add in one layout and not in
    another) would still be costed as a prologue; no model we ship has one. ``steps``: the
    model's :func:`plan_steps` where every layout agrees, if already made.

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> x = b.relu(b.batch_norm(b.input((1, 8, 4, 4)), name="bn"), name="r")
    >>> prologue_chains(b.build(b.conv(x, 8, 1, name="c")))
    {'bn': 'r'}
    """
    steps = plan_steps(model) if steps is None else steps
    return {g.prologue.ops[0]: g.prologue.output for g in steps if g.prologue is not None}


def channel_gate(model: Model, s: Step) -> str | None:
    """The gate tensor if ``s`` is a squeeze-excite scale: one multiply of a batch-1 ``1 x C x H x W``
    tensor by a ``1 x C x 1 x 1`` one, a per-channel factor computed in the run (a conv's
    prologue then takes it as its ``scale_in``); else None.

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> x = b.input((1, 8, 4, 4))
    >>> m = b.build(b.multiply(b.sigmoid(b.global_avg_pool(x), name="g"), x, name="se"))
    >>> channel_gate(m, Step("elementwise", ["se"], "se", ["g", "data"]))
    'g'
    """
    if len(s.ops) != 1 or model.op(s.ops[0]).kind != "multiply":
        return None
    a, b = model.op(s.ops[0]).inputs
    shape = model.op(s.ops[0]).shape
    if len(shape) != 4 or shape[0] != 1 or shape[2] * shape[3] == 1 or a == b:
        return None
    gate = (1, shape[1], 1, 1)
    for data, g in ((a, b), (b, a)):
        if tuple(model.op(data).shape) == tuple(shape) and tuple(model.op(g).shape) == gate:
            return g
    return None


def prologue_data(model: Model, s: Step) -> str:
    """The tensor a prologue chain ``s`` transforms: its input, or a squeeze-excite scale's
    non-gate operand."""
    gate = channel_gate(model, s)
    return next(i for i in s.inputs if i != gate) if gate is not None else s.inputs[0]


def affine_chain(model: Model, s: Step) -> str | tuple | None:
    """``s``'s final activation (:func:`activation_of`'s; "" for none) if ``s`` is bn / bias
    adds then at most one activation that an epilogue may run, else None."""
    kinds = [model.op(n) for n in s.ops]
    act = epilogue_activation(kinds[-1]) if kinds else None
    body = kinds[:-1] if act else kinds
    if (not all(op.kind in FOLDABLE and op.attrs.get("axis", 1) == 1 for op in body) or (not body and not act)
            or len(kinds[0].shape) != 4):
        return None
    return act or ""
