"""Which op decides each tensor's layout, and which layout each consumer needs.

The cost model (README, "The cost model") in graph terms:

* **Decision ops** choose a layout. A conv2d chooses a candidate schedule, which fixes
  its input block (``tile_ic``) and output block (``tile_oc``). A multi-input op
  (add, multiply, concat) chooses one block valid for all its inputs: it must divide
  every input's channel count (a squeeze-excite multiply's ``(N, C, 1, 1)`` operand
  included). A channel slice chooses one block for its input and output: it must
  divide the input's channels, the slice's start and its length. A transposed conv
  chooses one block for its input and output: it must divide both channel counts.
  Graph inputs are fixed to plain NCHW.
* **Layout-agnostic ops** (the elementwise ones: activations, batch norm, bias add;
  pooling, pad, resize) have one 4-d input and keep its layout, so their output's
  layout is decided upstream. A transposed conv is not one of them: its output has other
  channels than its input (a dense one, ``C_in -> C_out``), and a block inherited from
  upstream that divides ``C_in`` need not divide ``C_out``. As a decision it keeps its
  input's block for free wherever that divides both (CenterNet's depthwise up-sampling,
  ``C -> C``, always can), and otherwise the solver weighs the transform to a block that does.
* **Plain ops** (flatten, reshape, transpose, dense, softmax, ...) need plain NCHW
  on their 4-d inputs, and so do graph outputs.

A block of 1 (``NCHW1c``) is the same memory order as plain ``NCHW``, so plain is
block 1 throughout. Every 4-d tensor then has a *source* (the decision op whose
choice sets its layout) and a list of *requirements* (consumers that need some
block); one layout transform per (tensor, needed block) pays for all consumers
needing that block.

* **Residual adds** that a conv's epilogue can compute (the executor's rule,
  :func:`graph_tuner.fusion.residual_convs`) are fused: the add's block must be
  the output block of one of those convs, so no plan leaves an add to run as its own
  pass, which the cost model would not see.

>>> from graph_tuner.loading import load_model
>>> flow = analyse(load_model("resnet-18"))
>>> len(flow.convs), sorted({d.kind for d in flow.decisions.values()})
(21, ['add', 'conv2d', 'plain'])
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graph_tuner.errors import GraphTunerError
from graph_tuner.fusion import UNARY_ELEMENTWISE, prologue_chains, residual_convs
from graph_tuner.model import Model, Op
from graph_tuner.record_checks import layout_block
from kernels.workload import Conv2DWorkload

# Single-input ops that compute in whatever blocked layout their input has.
AGNOSTIC_KINDS = UNARY_ELEMENTWISE | frozenset({"max_pool", "avg_pool", "global_avg_pool", "pad", "resize"})
# Multi-input elementwise/concat ops: decision nodes choosing a common block.
JOIN_KINDS = frozenset({"add", "multiply", "concat"})
# Channel slices: decision nodes choosing one block for their input and output.
SLICE_KINDS = frozenset({"slice"})
# Transposed convs: decision nodes choosing one block for their input and output, dividing
# both channel counts (see the module doc).
TRANSPOSED_CONV_KINDS = frozenset({"conv_transpose"})

PLAIN = "<plain>"  # pseudo decision op: graph inputs, 2-d tensors, plain-layout consumers


@dataclass
class Decision:
    """An op whose choice decides a layout: a conv, a join (add/concat), a channel slice, a
    transposed conv, or PLAIN."""

    name: str
    kind: str  # "conv2d", the join, slice or transposed-conv kind, or "plain"
    # Joins, slices and transposed convs: channel counts their block must divide (joins: each
    # 4-d input's; slices: the input's, the slice's start and length; transposed convs: the
    # input's and the output's).
    channels_in: tuple[int, ...] = ()


@dataclass
class Requirement:
    """Consumer ``decision`` reads the tensor (once per listed argument)."""

    decision: str
    via: str  # the consuming op's name (for messages and reports)


@dataclass
class TensorFlow:
    """A 4-d tensor that some consumer needs in a particular layout."""

    name: str  # producing op
    shape: tuple[int, int, int, int]
    source: str  # decision whose choice sets its layout
    requirements: list[Requirement] = field(default_factory=list)


@dataclass
class LayoutFlow:
    decisions: dict[str, Decision]  # in topological order, PLAIN first
    tensors: list[TensorFlow]
    convs: list[Op]  # in TVM's conv order (the model's)
    residual: dict[str, list[str]] = field(default_factory=dict)  # add -> convs that can absorb it
    source: dict[str, str] = field(default_factory=dict)  # every op -> the decision setting its output's layout
    workloads: dict[str, Conv2DWorkload] = field(default_factory=dict)  # conv -> its workload
    model: str = ""  # the model's name
    # Chains a conv may run as its input prologue (fusion.prologue_chains): first op -> output
    # tensor; such a chain is a step of its own only in a plan that transforms its output.
    prologues: dict[str, str] = field(default_factory=dict)


def layout_name(block: int) -> str:
    """``NCHW`` for block 1 (the same memory order), else ``NCHW{block}c``.

    >>> layout_name(1), layout_name(16)
    ('NCHW', 'NCHW16c')
    """
    return "NCHW" if block == 1 else f"NCHW{block}c"


def parse_layout(layout: str) -> int:
    """The channel block of ``NCHW`` / ``NCHW{x}c`` (a ValueError for any other string).

    >>> parse_layout("NCHW"), parse_layout("NCHW16c")
    (1, 16)
    """
    return layout_block(layout)


def layout_agnostic(op: Op) -> bool:
    """Whether ``op`` computes in whatever blocked layout its input has (:data:`AGNOSTIC_KINDS`).
    A pad that adds channels does not: the input's block need not divide the output's
    channels, nor do its blocks stay whole (a 16 -> 20 pad once crashed the executor), so it
    reads and writes plain NCHW.

    >>> layout_agnostic(Op("p", "pad", ["x"], {"pad_width": ((0, 0), (0, 4), (0, 0), (0, 0))}, (1, 20, 8, 8)))
    False
    """
    if op.kind == "pad":
        return not any(op.attrs["pad_width"][1])
    return op.kind in AGNOSTIC_KINDS


def _is_4d(op: Op) -> bool:
    return len(op.shape) == 4


def analyse(model: Model) -> LayoutFlow:
    """Find the decision ops, each 4-d tensor's source and who needs it in which layout."""
    decisions: dict[str, Decision] = {PLAIN: Decision(PLAIN, "plain")}
    source: dict[str, str] = {}  # op name -> decision that sets its output layout
    needs: dict[str, list[Requirement]] = {}

    def require(tensor: str, decision: str, via: str) -> None:
        needs.setdefault(tensor, []).append(Requirement(decision, via))

    for op in model.ops:
        four_d_inputs = [i for i in op.inputs if _is_4d(model.op(i))]
        if op.kind == "input" or not _is_4d(op) and not four_d_inputs:
            source[op.name] = PLAIN
        elif op.kind == "conv2d":
            decisions[op.name] = Decision(op.name, "conv2d")
            source[op.name] = op.name
            require(op.inputs[0], op.name, op.name)
        elif op.kind in JOIN_KINDS and _is_4d(op):
            chans = tuple(model.op(i).shape[1] for i in four_d_inputs)
            decisions[op.name] = Decision(op.name, op.kind, chans)
            source[op.name] = op.name
            for i in four_d_inputs:
                require(i, op.name, op.name)
        elif op.kind in SLICE_KINDS | TRANSPOSED_CONV_KINDS and _is_4d(op):
            # One block for the input and the output, dividing every count in `channels`.
            c = model.op(op.inputs[0]).shape[1]
            channels = ((c, op.attrs["begin"], op.attrs["end"] - op.attrs["begin"]) if op.kind in SLICE_KINDS
                        else (c, op.shape[1]))
            decisions[op.name] = Decision(op.name, op.kind, channels)
            source[op.name] = op.name
            require(op.inputs[0], op.name, op.name)
        elif layout_agnostic(op) and len(four_d_inputs) == 1 and _is_4d(op):
            source[op.name] = source[four_d_inputs[0]]
        else:
            # Anything else reads plain NCHW and writes plain.
            source[op.name] = PLAIN
            for i in four_d_inputs:
                require(i, PLAIN, op.name)
    for name in model.outputs:
        if _is_4d(model.op(name)):
            require(name, PLAIN, "<output>")

    tensors = []
    for op in model.ops:
        reqs = needs.get(op.name)
        if not reqs or not _is_4d(op):
            continue
        if source[op.name] == PLAIN and all(r.decision == PLAIN for r in reqs):
            continue  # plain to plain: nothing to decide or pay
        tensors.append(TensorFlow(op.name, tuple(op.shape), source[op.name], reqs))
    convs = model.convs()
    if not convs:
        raise GraphTunerError(f"model '{model.name}' has no conv2d layers: nothing to tune")
    residual = {add: cs for add, cs in residual_convs(model).items() if add in decisions}
    return LayoutFlow(decisions, tensors, convs, residual, source, {op.name: model.workload(op) for op in convs},
                      model.name, prologue_chains(model))
