"""Model + plan -> :class:`~graph_tuner.executor.program.Program`.

The plan says everything about layouts (:func:`graph_tuner.plan.plan_from_choice`): the
block each op writes (``plan.blocks``), and every transform, with the ops it serves.
The executor derives none of it: an op reads a tensor through the plan's transform
that lists it as a consumer, else as the tensor was written, and each kernel is
checked to get the blocks it was built for (a mismatch: the plan was made for another
model). Transforms run right after their tensor is written.

Steps are :mod:`graph_tuner.fusion`'s; conv weights are folded (:mod:`graph_tuner.executor.fold`)
and packed once here; every buffer is allocated here.

>>> from graph_tuner.builder import GraphBuilder
>>> from graph_tuner.executor.reference import run_reference
>>> b = GraphBuilder("t")
>>> y = b.relu(b.batch_norm(b.conv(b.input((1, 3, 8, 8)), 16, 3, padding=1, name="c")))
>>> m = b.build(b.global_avg_pool(y))
>>> plan = uniform_plan(m, 16)
>>> [(t.tensor, t.src_layout, t.dst_layout) for t in plan.transforms]
[('data', 'NCHW', 'NCHW3c'), ('global_avg_pool4', 'NCHW16c', 'NCHW')]
>>> prog = compile_model(m, plan)
>>> x = np.random.default_rng(0).standard_normal((1, 3, 8, 8), dtype=np.float32)
>>> bool(np.allclose(prog.run(x)[0], run_reference(m, m.params(), x)[0], atol=1e-4))
True
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from graph_tuner.errors import GraphTunerError
from graph_tuner.executor import ops as blocked
from graph_tuner.executor.fold import fold_affine, fold_into_conv, op_affine
from graph_tuner.executor.memory import Views, WeightArena, allocate, plan_views
from graph_tuner.fusion import (BINARY_ELEMENTWISE, Step, activation_of, channel_gate, plan_steps, prologue_data,
                                step_epilogue)
from graph_tuner.executor.program import Program, ProgramStep
from graph_tuner.layout_flow import layout_agnostic, layout_name
from graph_tuner.model import Model
from graph_tuner.plan import Plan
from kernels.activations import activation_spec

__all__ = ["compile_model", "plan_from_configs", "uniform_plan"]


def _is_4d(shape) -> bool:
    return len(shape) == 4


class _Reads:
    """The block each op reads each 4-d tensor in, from the plan's transforms."""

    def __init__(self, model: Model, plan: Plan):
        missing = [op.name for op in model.ops if op.name not in plan.blocks]
        if missing or len(plan.layers) != len(model.convs()):
            raise GraphTunerError(f"the plan for '{plan.model}' does not cover '{missing[0] if missing else ''}' of "
                                  f"'{model.name}' ({len(plan.layers)} conv layers planned, {len(model.convs())} "
                                  "in the model); it was made for another model")
        self.model, self.blocks = model, plan.blocks
        self.via: dict[tuple[str, str], int] = {}
        for t in plan.transforms:
            if t.tensor not in model.graph or t.src_block != plan.blocks[t.tensor]:
                raise GraphTunerError(f"the plan transforms '{t.tensor}' from {t.src_layout}, which "
                                      f"'{model.name}' does not produce; the plan was made for another model")
            self.via.update({(c, t.tensor): t.dst_block for c in t.consumers})

    def __call__(self, reader: str, tensor: str) -> int:
        """The block ``reader`` (an op name, or ``"<output>"``) reads ``tensor`` in."""
        if not _is_4d(self.model.op(tensor).shape):
            return 1
        return self.via.get((reader, tensor), self.blocks[tensor])

    def expect(self, reader: str, tensor: str, block: int) -> int:
        """``block``, after checking that the plan hands ``tensor`` to ``reader`` in it."""
        if self(reader, tensor) != block:
            raise GraphTunerError(f"'{reader}' needs '{tensor}' in {layout_name(block)}, but the plan gives it "
                                  f"{layout_name(self(reader, tensor))}; the plan was made for another model")
        return block


def _written(s: Step) -> list[str]:
    """The tensors a step writes: its output, and the second output its conv epilogue writes."""
    return [s.output] + ([s.affine.output] if s.affine else [])


def own_views(model: Model, steps: list[Step] | None = None) -> set[str]:
    """The concats and reshapes that are views (:func:`_views`) with every tensor in its own
    buffer, as no transform gives a concat's input a copy of its own: the only concats a
    program makes views. (A plan's transforms could make more, a copy of a model input, say,
    written into its slice; but a plan's costs, :mod:`.step_timing`, cannot depend on them.)
    ``steps``: the model's :func:`plan_steps` where every layout agrees, if already made.

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> x = b.input((1, 4, 4, 4))
    >>> y = b.relu(x, name="y")
    >>> sorted(own_views(b.build(b.concat([y, b.relu(y, name="z")], name="yz"), b.concat([x, y], name="xy"))))
    ['yz']
    """
    shapes = {op.name: tuple(op.shape) for op in model.ops}
    steps = plan_steps(model) if steps is None else steps
    return _views(model, steps, lambda t, b: t, lambda reader, t: 1, shapes).done


def _views(model: Model, steps: list[Step], key, reads: _Reads, shapes: dict, concats: set[str] | None = None) -> Views:
    """Concats written in place and reshapes as views (:mod:`.memory`): a channel concat at
    batch 1 whose inputs can all be written into their slices (and in ``concats``, if given),
    and flatten/reshape of a plain tensor."""
    ops = []
    for s in steps:
        head = model.op(s.ops[0])
        if s.fused or len(s.ops) != 1 or concats is not None and head.kind == "concat" and s.output not in concats:
            continue
        if head.kind == "concat" and _is_4d(head.shape) and head.shape[0] == 1 and head.attrs["axis"] in (1, -3):
            ops.append(("concat", s.output, [key(i, reads(head.name, i)) for i in head.inputs]))
        elif head.kind in ("flatten", "reshape"):
            ops.append(("reshape", s.output, [key(head.inputs[0], reads(head.name, head.inputs[0]))]))
    return plan_views(ops, shapes, model.inputs)


def _shape(shape, block: int) -> tuple[int, ...]:
    if block == 1 or not _is_4d(shape):
        return tuple(shape)
    n, c, h, w = shape
    return (n, c // block, h, w, block)


def compile_model(model: Model, plan: Plan, params: dict[str, dict[str, np.ndarray]] | None = None,
                  *, seed: int = 0, keep: Iterable[str] = ()) -> Program:
    """Compile ``model`` to run ``plan`` (params default: ``model.params(seed)``).

    Buffers are reused once their tensor is dead; tensors named in ``keep`` (if the
    program materialises them) keep their own, readable after a run with
    :meth:`Program.tensor`.
    """
    from kernels.layout_transform import build_transform

    params = model.params(seed) if params is None else params
    reads = _Reads(model, plan)
    blocks = plan.blocks
    steps = plan_steps(model, blocks, plan.joins, reads)
    layers = {lc.name: lc for lc in plan.layers}
    transforms = {(t.tensor, t.dst_block): t for t in plan.transforms}

    # Buffers: a tensor in its own layout is keyed by name, a transformed copy by (name, block).
    def key(t: str, b: int):
        return t if not _is_4d(model.op(t).shape) or b == blocks[t] else (t, b)

    kept = set(model.inputs) | set(keep) | {key(o, reads("<output>", o)) for o in model.outputs}
    fused_with = _depthwise_projections(model, steps, layers, {t for t, _ in transforms}, kept) if FUSE_DW_PROJECT \
        else {}
    runs_fused = {d.output for d in fused_with.values()}  # run by the 1x1 conv fused with them
    actions: list[tuple] = []  # ([keys written], [keys read]) in run order
    run_by: list[Step | None] = []  # the (first) step of each action (None: an input or a transform)
    for tensor in model.inputs:
        actions.append(([tensor], []))
        actions += [([(t, b)], [t]) for t, b in transforms if t == tensor]
    for s in steps:
        if s.fused or s.output in runs_fused:  # run by a conv (its second output or prologue; or fused)
            continue
        # A fused pair is one action: the 1x1 conv writes while the depthwise conv still reads.
        parts = ([fused_with[s.ops[0]]] if s.ops[0] in fused_with else []) + [s]
        covered = [o for q in parts for o in q.ops + (q.prologue.ops if q.prologue else [])]
        written = [w for q in parts for w in _written(q)]
        run_by += [None] * (len(actions) - len(run_by))
        actions.append((written, [key(i, reads(o, i)) for o in covered for i in model.op(o).inputs
                                  if i not in covered]))
        run_by.append(parts[0])
        actions += [([(t, b)], [t]) for tensor in written for t, b in transforms if t == tensor]
    run_by += [None] * (len(actions) - len(run_by))
    shapes = {w: _shape(model.op(w if isinstance(w, str) else w[0]).shape,
                        blocks[w] if isinstance(w, str) else w[1]) for ws, _ in actions for w in ws}
    views = _views(model, steps, key, reads, shapes, own_views(model))
    arrays, owned = allocate(actions, shapes, kept, views.place)

    def data_key(s: Step):
        reader, source = _data_source(model, s)
        return key(source, reads(reader, source))

    rows_first = _rows_first_convs(model, actions, run_by, arrays, data_key)
    buffers = {k: a for k, a in arrays.items() if isinstance(k, str)}
    moved = {k: a for k, a in arrays.items() if not isinstance(k, str)}
    rows = {s.output: row_means_buffer(model, s, layers[s.ops[0]].out_block) for s in steps if s.pooled}

    def read(reader: str, tensor: str, block: int | None = None) -> np.ndarray:
        """The buffer ``reader`` reads ``tensor`` from (checked to be in ``block`` if given)."""
        b = reads(reader, tensor) if block is None else reads.expect(reader, tensor, block)
        return buffers[tensor] if key(tensor, b) == tensor else moved[(tensor, b)]

    out_steps: list[ProgramStep] = []
    step_pred = {c.name: c.time_ms for c in plan.steps}
    weights = WeightArena()  # every packed weight, in huge pages, in run order

    def emit_transforms(tensor: str) -> None:
        for (t, b), choice in transforms.items():
            if t == tensor:
                k = build_transform(model.op(t).shape, blocks[t], b)
                fn = k.bind(buffers[t].reshape(k.input_shape), moved[(t, b)].reshape(k.output_shape))
                out_steps.append(ProgramStep(choice.label, "transform", [], fn, choice.time_ms))

    def role(s: Step) -> str | None:
        """How a step runs: None (by a conv: its second output or prologue; or fused into the
        1x1 conv that reads it, next), "view" (its inputs wrote it), "dw_project", "conv", "other"."""
        if s.fused:
            return None
        if s.output in views.done:
            return "view"
        if s.output in runs_fused:
            return None
        if s.ops[0] in fused_with:
            return "dw_project"
        return "conv" if s.kind == "conv" else "other"

    roles = [role(s) for s in steps]
    _compile_convs_ahead(model, [(s, layers[s.ops[0]], s.ops[0] in rows_first)
                                 for s, r in zip(steps, roles) if r == "conv"])
    for name in model.inputs:
        emit_transforms(name)
    for s, r in zip(steps, roles):
        if r is None:
            continue
        if r == "view":
            pass
        elif r == "dw_project":
            out_steps.append(_dw_project_step(model, fused_with[s.ops[0]], s, layers, params, read, buffers, weights))
        elif r == "conv":
            out_steps.append(_conv_step(model, s, layers[s.ops[0]], params, read, buffers, weights,
                                        s.ops[0] in rows_first, rows.get(s.output)))
        else:
            fn = _other_fn(model, s, params, read, blocks, buffers[s.output], weights, rows)
            out_steps.append(ProgramStep(s.ops[0], "other", list(s.ops), fn, step_pred.get(s.ops[0])))
        # In the order the buffers were planned in (`actions`): a transform may reuse the
        # memory of a tensor whose last reader was the transform before it.
        for tensor in _written(s):
            emit_transforms(tensor)

    outputs = [read("<output>", o, 1).reshape(model.op(o).shape) for o in model.outputs]
    inputs = {n: buffers[n] for n in model.inputs}
    tensors = {n: (b, tuple(model.op(n).shape)) for n, b in buffers.items() if n in kept}
    prog = Program(model.name, out_steps, inputs, outputs, plan.cost, tensors)
    prog.buffer_bytes = sum(b.nbytes for b in [*owned, *rows.values()])  # the whole buffers, not the views into them
    prog.weights = weights
    prog.tensor_bytes = sum(a.nbytes for a in [*arrays.values(), *rows.values()])
    return prog


def _data_source(model: Model, s: Step) -> tuple[str, str]:
    """``(reader, tensor)``: what a conv step reads as its data. With a prologue the conv reads
    what its chain would have (in the block it checked to agree)."""
    if s.prologue:
        return s.prologue.ops[0], prologue_data(model, s.prologue)
    return s.ops[0], model.op(s.ops[0]).inputs[0]


def _prologue_arrays(model: Model, chain: Step, params, read) -> dict[str, np.ndarray]:
    """A conv's ``scale_in`` and ``shift_in`` for its prologue ``chain``: the chain folded, or a
    squeeze-excite scale's gate buffer itself (any block of a ``1 x C x 1 x 1`` tensor holds the
    channels in order), written earlier in the same run, and zeros."""
    gate = channel_gate(model, chain)
    if gate is None:
        scale, shift, _ = fold_affine(model, chain, params)
        return dict(scale_in=scale, shift_in=shift)
    buffer = read(chain.ops[0], gate)
    channels = model.op(gate).shape[1]
    assert buffer.flags.c_contiguous and buffer.size == channels, (gate, buffer.shape)  # reshaped, not copied
    return dict(scale_in=buffer.reshape(-1), shift_in=np.zeros(channels, np.float32))


# Off only for side-by-side runs (benchmarks/ab_builds.py --set graph_tuner.executor.compile.FUSE_DW_PROJECT=False).
FUSE_DW_PROJECT = True
# Planes with fewer rows run as two kernels: fused, MobileNet-v2's 14x14 and 7x7 pairs took
# 1.11-1.18x the two kernels' time alone (the 1x1 conv's weights pass once per row block,
# and fewer, taller blocks leave a thread idle), its 56x56 and 28x28 ones 0.99-1.02x. End to
# end, fusing every pair took 1.00-1.03x the unfused plan's time in calm phases of the host,
# fusing these 0.97-1.02x, and 0.91x in a slow phase (benchmarks/README.md, session 18).
MIN_FUSED_ROWS = 28


def _depthwise_projections(model: Model, steps: list[Step], layers: dict, transformed: set[str],
                           kept: set) -> dict[str, Step]:
    """``{1x1 conv: depthwise conv step}``: the depthwise convs whose output only the next step,
    a 1x1 conv, reads, in the depthwise conv's block and with nothing of its own (no transform,
    second output, prologue or Winograd), so that the two run as one kernel, row band by row
    band (:mod:`kernels.dw_project`; :func:`kernels.dw_project.fusable` says where)."""
    from graph_tuner.winograd import runs_winograd
    from kernels.dw_project import fusable

    def layer(s: Step):
        lc = layers[s.ops[0]]
        w = model.workload(model.op(s.ops[0]))
        return lc, w, not runs_winograd(w, getattr(lc.candidate.record, "workload", None))

    run, own = [s for s in steps if not s.fused], transformed | kept  # outputs read by more than the next conv
    out = {}
    for d, p in zip(run, run[1:]):
        if d.kind != "conv" or p.kind != "conv" or d.affine or d.pooled or p.prologue or d.output in own:
            continue
        if [c.name for c in model.consumers(d.output)] != [p.ops[0]] or _data_source(model, p) != (p.ops[0], d.output):
            continue
        (ld, wd, direct_d), (lp, wp, direct_p) = layer(d), layer(p)
        if wd.out_height < MIN_FUSED_ROWS:
            continue
        if direct_d and direct_p and fusable(wd, ld.candidate.config, wp, lp.candidate.config):
            out[p.ops[0]] = d  # (a config's blocks are its layer's: checked when its step is built)
    return out


def _dw_project_step(model: Model, d: Step, p: Step, layers: dict, params, read, buffers: dict,
                     weights: WeightArena) -> ProgramStep:
    """A depthwise conv step and the 1x1 conv step reading its output (:func:`_depthwise_projections`)
    as one kernel, bound to both steps' buffers (the depthwise output keeps its own)."""
    from kernels.dw_project import build_dw_project

    ld, lp = layers[d.ops[0]], layers[p.ops[0]]
    wd, _, ed, dw_arrays = _conv_arrays(model, d, ld, params, read, buffers, weights)
    wp, _, ep, pw_arrays = _conv_arrays(model, p, lp, params, read, buffers, weights)
    kernel = build_dw_project(wd, ld.candidate.config, ed, wp, lp.candidate.config, ep)
    predicted = None if ld.time_ms is None or lp.time_ms is None else ld.time_ms + lp.time_ms
    return ProgramStep(f"{d.ops[0]}+{p.ops[0]}", "conv", _covered(d) + _covered(p), kernel.bind(dw_arrays, pw_arrays),
                       predicted)


def _rows_first_convs(model: Model, actions: list[tuple], run_by: list, arrays: dict, data_key) -> set[str]:
    """The dense convs whose input memory a depthwise conv writes next (in run order, on into
    the next run; ``data_key(step)``: the buffer key a conv step reads its data from; a
    fused depthwise + 1x1 step counts as the depthwise conv, its writes banded by rows): their
    kernels take work items rows first (:func:`kernels.conv2d.takes_rows_first`), so that each
    input row is read by one core and the depthwise conv waits on fewer copies. MobileNet-v2
    took 0.95-0.99x the time so (benchmarks/README.md, session 17)."""
    def span(k) -> tuple[int, int]:
        return arrays[k].ctypes.data, arrays[k].ctypes.data + arrays[k].nbytes

    def depthwise(s) -> bool:
        return s is not None and s.kind == "conv" and model.workload(model.op(s.ops[0])).is_depthwise

    writes = [[span(k) for k in written] for written, *_ in actions]
    out = set()
    for i, s in enumerate(run_by):
        if s is None or s.kind != "conv" or depthwise(s):
            continue
        lo, hi = span(data_key(s))
        for j in [*range(i + 1, len(actions)), *range(i + 1)]:
            if any(a < hi and lo < b for a, b in writes[j]):
                if depthwise(run_by[j]):
                    out.add(s.ops[0])
                break
    return out


def _conv_step(model: Model, s: Step, lc, params, read, buffers: dict, weights: WeightArena,
               rows_first: bool = False, row_means: np.ndarray | None = None) -> ProgramStep:
    """The conv group's kernel (folded weights packed once, fused epilogue), bound to its buffers;
    ``rows_first``: its work items rows first (:func:`_rows_first_convs`); ``row_means``: the
    buffer its epilogue writes its rows' means to (fusion rule 6)."""
    _, _, _, arrays = _conv_arrays(model, s, lc, params, read, buffers, weights)
    if row_means is not None:
        arrays["row_means"] = row_means
    kernel = _conv_kernel(model, s, lc, rows_first)
    return ProgramStep(s.ops[0], "conv", _covered(s), kernel.bind(**arrays), lc.time_ms)


def _conv_kernel(model: Model, s: Step, lc, rows_first: bool, ir: bool = False):
    """A conv step's kernel, or with ``ir`` the IR text it compiles (a Winograd conv's GEMM: its
    transform phases compile as the text is made)."""
    from kernels.conv2d import build_conv2d, kernel_ir
    from kernels.winograd import build_winograd, winograd_ir

    choice = _winograd_choice(model, s, lc)
    if choice is not None:
        try:
            return (winograd_ir if ir else build_winograd)(choice[0], choice[1], **choice[2])
        except ValueError as e:
            if ir:
                raise
            raise GraphTunerError(f"layer '{s.ops[0]}': {e}; solve without its Winograd records") from None
    # The epilogue the tuner timed it with; rows first, the same arithmetic in another work order.
    return (kernel_ir if ir else build_conv2d)(model.workload(model.op(s.ops[0])), lc.candidate.config,
                                               rows_first=rows_first, **step_epilogue(model, s))


def _winograd_choice(model: Model, s: Step, lc) -> tuple | None:
    """``(conv workload, GEMM config, Winograd epilogue arguments)`` where the plan chose a
    conv step's GEMM record (it runs Winograd), else None."""
    from graph_tuner.winograd import runs_winograd
    from kernels.winograd import winograd_epilogue

    w = model.workload(model.op(s.ops[0]))
    if not runs_winograd(w, getattr(lc.candidate.record, "workload", None)):
        return None
    return w, lc.candidate.config, winograd_epilogue(step_epilogue(model, s))


def _compile_convs_ahead(model: Model, convs: list[tuple[Step, object, bool]]) -> None:
    """Compile the kernels of ``(step, layer choice, rows first)`` on this process and a helper
    process side by side (:func:`kernels.jit.compile_ahead`), so that building them finds them
    compiled: one by one they took DenseNet-121's program 9-14 s on one core of two. A kernel
    that cannot be made is left to its step, which reports it."""
    from kernels.jit import compile_ahead
    from kernels.winograd import compile_phases_ahead

    # The Winograd layers' transform phases first: making a kernel's text compiles its own one by one.
    compile_phases_ahead(c for s, lc, _ in convs if (c := _winograd_choice(model, s, lc)) is not None)
    texts = []
    for s, lc, rows_first in convs:
        try:
            texts.append(_conv_kernel(model, s, lc, rows_first, ir=True))
        except ValueError:
            continue
    try:
        compile_ahead(texts)
    except RuntimeError:  # LLVM refused one: its step compiles it again and says so
        pass


def _covered(s: Step) -> list[str]:
    return (s.prologue.ops if s.prologue else []) + list(s.ops) + (s.affine.ops if s.affine else [])


def _conv_arrays(model: Model, s: Step, lc, params, read, buffers: dict, weights: WeightArena) -> tuple:
    """``(workload, runs Winograd, epilogue, arrays)`` of a conv step: its fused epilogue as
    :func:`kernels.conv2d.build_conv2d`'s keyword arguments, and its kernel's arrays by
    argument name (the folded weight packed for the kernel that runs it, in ``weights``), in NCHWc."""
    from graph_tuner.winograd import runs_winograd
    from kernels.conv2d import reduction_block
    from kernels.depthwise import runs_lanewise
    from kernels.packing import pack_weight
    from kernels.winograd import transform_weight

    conv = model.op(s.ops[0])
    w = model.workload(conv)
    config = lc.candidate.config
    in_block, out_block = lc.in_block, lc.out_block
    if (config.ic_bn, config.oc_bn) != (in_block, out_block):
        raise GraphTunerError(f"layer '{conv.name}': config blocks ({config.ic_bn}, {config.oc_bn}) do not match "
                              f"its layouts {lc.in_layout} -> {lc.out_layout}")
    weight, bias = fold_into_conv(model, s, params)
    arrays = dict(bias=bias)
    if s.affine is not None:
        scale, shift, _ = fold_affine(model, s.affine, params)
        arrays.update(scale2=scale, shift2=shift)
    if s.prologue is not None:
        arrays.update(_prologue_arrays(model, s.prologue, params, read))
    winograd = runs_winograd(w, getattr(lc.candidate.record, "workload", None))
    if winograd:
        packed = pack_weight(transform_weight(weight), in_block, out_block)
    elif runs_lanewise(w, config):  # [C/bn, 1, KH, KW, g, bn]: g channels per group, 1 if depthwise
        packed = pack_weight(weight, w.kernel_shape[1], out_block)
    else:  # a grouped conv whose input blocks hold whole groups packs a group's channels a block
        packed = pack_weight(weight, reduction_block(w, config), out_block)
    arrays["weight"] = weights.keep(packed)
    n, c, h, wd = w.data_shape
    out_shape = (n, w.out_channels // out_block, w.out_height, w.out_width, out_block)
    arrays["data"] = read(*_data_source(model, s), in_block).reshape(n, c // in_block, h, wd, in_block)
    if s.residual:
        add = next(o for o in s.ops[1:] if s.residual in model.op(o).inputs)  # the fused add reads it
        arrays["residual"] = read(add, s.residual, out_block).reshape(out_shape)
    if s.affine is not None:
        arrays["out2"] = buffers[s.affine.output].reshape(out_shape)
    arrays["out"] = buffers[s.output].reshape(out_shape)
    return w, winograd, step_epilogue(model, s), arrays


def row_means_buffer(model: Model, s: Step, block: int) -> np.ndarray:
    """The buffer a depthwise conv group ``s`` writes its rows' means to (fusion rule 6), in
    ``block``: :func:`kernels.depthwise.row_means_shape`."""
    from kernels import hugepages
    from kernels.depthwise import row_means_shape

    return hugepages.empty(row_means_shape(model.workload(model.op(s.ops[0])), block))


def _other_fn(model: Model, s: Step, params, read, blocks, out: np.ndarray, weights: WeightArena,
              rows: dict[str, np.ndarray] | None = None):
    """The call running a non-conv step into ``out`` (a dense or transposed conv's packed
    weight in ``weights``; ``rows``: the row means depthwise convs write, by their output, for a
    pool that reads them)."""
    head = model.op(s.ops[0])
    a, k = head.attrs, head.kind
    if s.kind == "elementwise":
        return _elementwise_fn(model, s, params, read, blocks, out)
    # Pooling and pad compute in their input's layout (layout_flow.layout_agnostic).
    x = read(head.name, head.inputs[0], blocks[head.name]) if layout_agnostic(head) else None
    if k in ("max_pool", "avg_pool"):
        from kernels.pooling import build_pool2d

        shape = model.op(head.inputs[0]).shape
        kernel = build_pool2d(shape, blocks[head.name], k[:3], a["pool_size"], a["strides"], a["padding"],
                              head.shape[2:], a.get("count_include_pad", False))
        return kernel.bind(x.reshape(kernel.input_shape), out.reshape(kernel.output_shape))
    if k == "global_avg_pool":  # a pool whose window is the whole plane
        from kernels.pooling import build_pool2d

        shape = model.op(head.inputs[0]).shape
        if s.from_rows:  # the mean of its conv's row means (fusion rule 6): an OH x 1 plane
            x, shape = rows[head.inputs[0]], (*shape[:3], 1)
        kernel = build_pool2d(shape, blocks[head.name], "avg", shape[2:], (1, 1), (0, 0, 0, 0), (1, 1))
        return kernel.bind(x.reshape(kernel.input_shape), out.reshape(kernel.output_shape))
    if k == "resize":
        from kernels.resize import build_resize

        kernel = build_resize(model.op(head.inputs[0]).shape, blocks[head.name], a["mode"], a["size"], a["scales"],
                              a["coord"], a["nearest_mode"])
        return kernel.bind(x.reshape(kernel.input_shape), out.reshape(kernel.output_shape))
    if k == "slice":  # computes in its own (decision's) block, which divides its bounds
        from kernels.channel_slice import build_channel_slice

        x = read(head.name, head.inputs[0], blocks[head.name])
        kernel = build_channel_slice(model.op(head.inputs[0]).shape, blocks[head.name], a["begin"], a["end"])
        return kernel.bind(x.reshape(kernel.input_shape), out.reshape(kernel.output_shape))
    if k == "conv_transpose":  # in its own (decision's) block, which divides C_in and C_out
        return _conv_transpose_fn(model, head, params[head.name], read(head.name, head.inputs[0], blocks[head.name]),
                                  out, blocks[head.name], weights)
    if k == "pad":  # in its input's layout, or plain if it adds channels (layout_flow.layout_agnostic)
        x = read(head.name, head.inputs[0], blocks[head.name])
        return blocked.make_pad(x, out, a["pad_width"], a.get("value", 0.0))
    if k == "concat":
        return blocked.make_concat([read(head.name, i, blocks[head.name]) for i in head.inputs], out, a["axis"])
    x = read(head.name, head.inputs[0], 1)  # plain ops
    if k in ("flatten", "reshape"):
        return blocked.make_copy_reshape(x, out)
    if k == "transpose":
        return blocked.make_transpose(x, out, a["perm"])
    if k == "dense":
        return _dense_fn(head, params[head.name], x, out, weights)
    if k == "softmax":
        if a["axis"] in (-1, x.ndim - 1):  # rows x classes: the generated kernel
            from kernels.softmax import build_softmax

            cols = x.shape[-1]
            kernel = build_softmax(x.size // cols, cols)
            return kernel.bind(x.reshape(kernel.input_shape), out.reshape(kernel.output_shape))
        return blocked.make_softmax(x, out, a["axis"])
    raise GraphTunerError(f"op '{head.name}': kind {k!r} is not supported by the executor")


def _conv_transpose_fn(model: Model, op, p: dict, x: np.ndarray, out: np.ndarray, block: int, weights: WeightArena):
    """A transposed conv as its generated kernel (:mod:`kernels.conv_transpose`), the weight
    packed once here."""
    from kernels.conv_transpose import ConvTransposeSpec, build_conv_transpose, pack_conv_transpose_weight

    a = op.attrs
    spec = ConvTransposeSpec(model.op(op.inputs[0]).shape, a["channels"], a["kernel_size"], a["strides"], a["padding"],
                             a["output_padding"], a["groups"], "bias" in p)
    kernel = build_conv_transpose(spec, block)
    bias = np.ascontiguousarray(p["bias"], np.float32) if "bias" in p else None
    return kernel.bind(x.reshape(kernel.input_shape), weights.keep(pack_conv_transpose_weight(p["weight"], spec, block)),
                       out.reshape(kernel.output_shape), bias=bias)


def _dense_fn(op, p: dict, x: np.ndarray, out: np.ndarray, weights: WeightArena):
    """Dense as a 1x1 conv over a 1x1 image: with H = W = 1 the blocked layouts of the
    input (N, in) and output (N, units) are the plain ones, and the conv kernel brings
    SIMD, threads and the bias epilogue (numpy's einsum loop measured 0.28 ms for a
    512 x 1000 fc at batch 1; BLAS fought the kernels' threads)."""
    from kernels.config import Conv2DConfig
    from kernels.conv2d import build_conv2d
    from kernels.packing import pack_weight
    from kernels.workload import Conv2DWorkload

    (n, inp), units = x.shape, op.attrs["units"]
    w = Conv2DWorkload((n, inp, 1, 1), (units, inp, 1, 1))
    config = Conv2DConfig(*_dense_blocks(inp, units), ow_bn=1)
    bias = p.get("bias")
    kernel = build_conv2d(w, config, bias=bias is not None)
    weight = weights.keep(pack_weight(np.asarray(p["weight"], np.float32).reshape(units, inp, 1, 1), config.ic_bn,
                                      config.oc_bn))
    return kernel.bind(x.reshape(kernel.input_shape), weight, out.reshape(kernel.output_shape),
                       bias=None if bias is None else np.asarray(bias, np.float32))


def _dense_blocks(inp: int, units: int, lanes: int | None = None) -> tuple[int, int]:
    """``(ic_bn, oc_bn)`` of a dense layer's kernel: input blocks of up to 64, output blocks as
    wide as a multiple of 8 dividing ``units`` allows, up to 16 vectors of ``lanes`` floats
    (the accumulators, one register each): at batch 1 a dense is a matrix-vector product, and
    each item streams its block's weights once. On the Zen 4 EPYC (16 lanes) the 1000-class
    layers after 512, 1280 and 2048 features ran 0.024, 0.060 and 0.088 ms with 200-wide
    blocks, 0.071, 0.100 and 0.28 with the 8-wide ones taken before, where onnxruntime's took
    0.036, 0.086 and 0.118 (benchmarks/README.md, session 18). Not measured with 8 lanes.

    >>> _dense_blocks(1280, 1000, 16), _dense_blocks(1280, 1000, 8), _dense_blocks(512, 10, 16)
    ((64, 200), (64, 40), (64, 2))
    """
    from kernels.jit import host_cpu

    top = 16 * (lanes or host_cpu().lanes)
    wide = [d for d in range(8, top + 1, 8) if units % d == 0]
    oc = max(wide) if wide else max(d for d in (1, 2, 4, 8, 16) if units % d == 0)
    return max(d for d in (1, 2, 4, 8, 16, 32, 64) if inp % d == 0), oc


def _elementwise_fn(model: Model, s: Step, params, read, blocks, out: np.ndarray):
    """An elementwise chain (:mod:`graph_tuner.fusion`: [add | multiply] affines* [activation]) as one
    generated pass; numpy only for a binary op broadcasting other than per (image, channel)."""
    head = model.op(s.ops[0])
    block = blocks[s.output]
    binary = head.kind if head.kind in BINARY_ELEMENTWISE else None
    inputs = [read(head.name, i, block) for i in (head.inputs if binary else head.inputs[:1])]
    body = [model.op(n) for n in (s.ops[1:] if binary else s.ops)]
    act = activation_of(body[-1]) if body else None
    affines = body[:-1] if act else body
    shape = model.op(s.output).shape
    shapes = [model.op(i).shape for i in (head.inputs if binary else head.inputs[:1])]
    if binary and shapes[0] != shape:  # the full-size operand first (add and multiply commute)
        inputs, shapes = inputs[::-1], shapes[::-1]
    y_channel = binary is not None and shapes[1] != shape
    if len(shape) in (2, 4) and tuple(shapes[0]) == tuple(shape) and (
            not y_channel or tuple(shapes[1]) == tuple(shape[:2]) + (1, 1)):
        from kernels.elementwise import build_elementwise

        nchw = tuple(shape)
        if len(shape) == 2:  # (N, C) is (N, C, 1, 1) in plain layout, or one row if channels do not matter
            nchw = nchw + (1, 1) if affines or y_channel else (shape[0], 1, 1, shape[1])
        scale, shift = np.ones(nchw[1]), np.zeros(nchw[1])
        for op in affines:  # compose: (x * s1 + t1) * s2 + t2
            sc, sh = op_affine(op, params.get(op.name, {}))
            scale, shift = scale * sc, shift * sc + sh
        kernel = build_elementwise(nchw, block, act, binary={"add": "add", "multiply": "mul"}.get(binary),
                                   y_channel=y_channel, affine=bool(affines))
        return kernel.bind(inputs[0].reshape(kernel.input_shape),
                           scale.astype(np.float32) if affines else None, shift.astype(np.float32) if affines else None,
                           out.reshape(kernel.output_shape),
                           y=inputs[1].reshape(kernel.arg_shapes["y"]) if binary else None)
    program: list[tuple] = [(binary,)] if binary else []
    program += [("affine", *op_affine(op, params.get(op.name, {}))) for op in affines]
    return blocked.make_elementwise(program + ([activation_spec(act)] if act else []), inputs, out)


def uniform_plan(model: Model, block: int) -> Plan:
    """Every conv at one channel block (the largest divisor of its channels up to ``block``)
    with a simple schedule; see :func:`plan_from_configs`. For tests and examples."""
    from kernels.config import Conv2DConfig

    def fit(c: int) -> int:
        return max(d for d in range(1, min(block, c) + 1) if c % d == 0)

    configs = {}
    for op in model.convs():
        w = model.workload(op)
        if w.is_depthwise and w.out_channels == w.in_channels:
            ib = ob = fit(w.out_channels)
        else:
            ib, ob = fit(w.kernel_shape[1]), fit(w.out_channels // w.groups)
        configs[op.name] = Conv2DConfig(ic_bn=ib, oc_bn=ob, ow_bn=min(8, w.out_width), unroll_kw=w.kernel_size[1] > 1)
    return plan_from_configs(model, configs)


def plan_from_configs(model: Model, configs: dict, joins: dict[str, int] | None = None) -> Plan:
    """A plan running conv ``name`` with ``configs[name]`` (a :class:`kernels.Conv2DConfig`).

    Joins compute in ``joins[name]`` (a block) if given, else in their first input's
    block when it divides all their inputs, else plain. The transforms follow; all
    times are unknown (0 ms). For tests and for running without tuning records.
    """
    from graph_tuner.candidates import Candidate
    from graph_tuner.layout_flow import PLAIN, analyse
    from graph_tuner.plan import plan_from_choice

    flow = analyse(model)
    convs = {op.name: Candidate(None, configs[op.name].ic_bn, configs[op.name].oc_bn, 0.0, configs[op.name], True)
             for op in flow.convs}
    chosen: dict[str, int] = {}
    for name, d in flow.decisions.items():  # in order, so a join's inputs have their blocks
        if d.kind in ("conv2d", "plain"):
            continue
        if joins and name in joins:
            chosen[name] = joins[name]
            continue
        src = flow.source[model.op(name).inputs[0]]
        first = 1 if src == PLAIN else convs[src].out_block if src in convs else chosen[src]
        chosen[name] = first if all(c % first == 0 for c in d.channels_in) else 1
    return plan_from_choice(flow, convs, chosen)
