"""What the steps that are not convs cost, in each block they could run in.

The objective counts conv kernels and layout transforms; the rest of the network
(pooling, elementwise chains a conv epilogue cannot absorb, the classifier's dense,
softmax, a concat that cannot be written in place; a chain a conv may run as its input
prologue, where a plan transforms its output) runs too, and in the layout its source decision picks
(:attr:`graph_tuner.layout_flow.LayoutFlow.source`): a max pool after a conv runs in that
conv's output block. Each such step is timed here, with the very callable the executor
would run (:func:`graph_tuner.executor.compile._other_fn`) on random buffers, once per
block asked for; identical steps (same ops, attributes and shapes) are timed once per
process. Reshapes and most concats at batch 1 are views (:func:`.compile.own_views`): they cost nothing.

>>> from graph_tuner.builder import GraphBuilder
>>> b = GraphBuilder("t")
>>> m = b.build(b.max_pool(b.conv(b.input((1, 3, 8, 8)), 16, 3, padding=1), 2, 2))
>>> [s.ops for s in costed_steps(m)]
[['max_pool2']]
>>> ms = step_ms(m, {"max_pool2": [1, 16]}, repeat=3)
>>> sorted(ms["max_pool2"]), all(v > 0 for v in ms["max_pool2"].values())
([1, 16], True)
"""
from __future__ import annotations

import itertools
from typing import Iterable, Mapping

import numpy as np

from graph_tuner.fusion import Step, plan_steps, prologue_chains
from graph_tuner.model import Model, short_digest

_memo: dict[tuple, float] = {}  # step signature -> ms, for this process
COLD_MIN_BYTES = 64 << 10  # parameters from this size up are timed cold (_time_step)


def costed_steps(model: Model) -> list[Step]:
    """The steps that run a kernel of their own and are not convs (named by their first op):
    not a view (:func:`graph_tuner.executor.compile.own_views`), with the chains a conv may
    run as its prologue, which a plan runs alone where it transforms their output."""
    from graph_tuner.executor.compile import own_views

    steps = plan_steps(model)  # made once: every rule below reads the same steps
    chains, views = prologue_chains(model, steps), own_views(model, steps)
    return [s for s in steps if s.kind != "conv" and (not s.fused or s.ops[0] in chains) and s.output not in views]


def _signature(model: Model, s: Step, block: int) -> tuple:
    ops = tuple((model.op(n).kind, repr(sorted(model.op(n).attrs.items())), tuple(model.op(n).shape)) for n in s.ops)
    if s.from_rows:  # it reads its conv's row means, not the plane (fusion rule 6)
        ops += ("from_rows",)
    return ops, tuple(tuple(model.op(i).shape) for i in s.inputs), block


def step_identities(model: Model) -> dict[str, str]:
    """A short digest of what each costed step computes (its ops' kinds, attributes and
    shapes, its inputs' shapes), by the step's name: what tells a logged timing of it from
    one of another batch size or version of a model under the same name.

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> m = b.build(b.max_pool(b.conv(b.input((1, 3, 8, 8)), 16, 3, padding=1), 2, 2))
    >>> {name: len(digest) for name, digest in step_identities(m).items()}
    {'max_pool2': 12}
    """
    return {s.ops[0]: short_digest(_signature(model, s, 1)[:2]) for s in costed_steps(model)}


def logged_step_ms(model: Model, steps: Iterable) -> dict[tuple[str, int], float]:
    """A log's timings of ``model``'s steps (its ``graph_tuner_step`` records, ``log.steps``) in
    ms by ``(step, block)``: those of this model's name whose digest is the step's
    (:func:`step_identities`); a later record of a step replaces an earlier."""
    ids = step_identities(model)
    return {(r.name, r.block): r.time * 1e3 for r in steps if r.model == model.name and r.identity == ids.get(r.name)}


def forget_timings() -> None:
    """Forget this process's step timings (``--retime`` times every step again)."""
    _memo.clear()


def _blocked(shape, block: int) -> tuple[int, ...]:
    if len(shape) != 4 or block == 1:
        return tuple(shape)
    n, c, h, w = shape
    return (n, c // block, h, w, block)


def _time_step(model: Model, s: Step, block: int, params: dict, repeat: int) -> float:
    """Milliseconds of ``s`` run in ``block`` (its 4-d tensors blocked, the rest plain)."""
    from graph_tuner.executor.compile import _other_fn
    from graph_tuner.executor.memory import WeightArena
    from kernels import hugepages
    from kernels.jit import host_cpu
    from kernels.timing import measure, random_array

    # Buffers placed as the executor places them (kernels.timing.random_array): on a cache line.
    inputs: dict[tuple, np.ndarray] = {}

    def block_of(tensor: str) -> int:
        return block if len(model.op(tensor).shape) == 4 else 1

    def read(reader: str, tensor: str, b: int | None = None) -> np.ndarray:
        shape = _blocked(model.op(tensor).shape, block_of(tensor) if b is None else b)
        if (tensor, shape) not in inputs:  # one buffer per input, whichever call reads it
            inputs[tensor, shape] = random_array(shape, seed=len(inputs))
        return inputs[tensor, shape]

    blocks = {n: block_of(n) for n in s.ops}
    out = hugepages.empty(_blocked(model.op(s.output).shape, block_of(s.output)))
    # The step's parameters come from memory on every call, as in the network, where they were
    # last read an inference ago, while its input stays in cache (the step before just wrote
    # it). Timed with hot weights, MobileNet-v2's classifier (a 5 MB dense) was costed 0.094 ms
    # and ran 0.183 in the network. Each build of the step packs its parameters into memory of
    # its own (a dense's weight blocked, a batch norm folded into scale and shift), so calls
    # rotate over enough builds to overflow the last-level cache, as kernels.timing.cold_arrays
    # rotates a conv's weights; steps with under COLD_MIN_BYTES of parameters get one build.
    nbytes = sum(v.nbytes for op in s.ops if isinstance(params.get(op), dict)
                 for v in params[op].values() if isinstance(v, np.ndarray))
    builds = 1 if nbytes < COLD_MIN_BYTES else min(64, -(-host_cpu().l3_bytes * 3 // 2 // nbytes))
    weights = WeightArena()  # each build's packed weights at their own place, as the program keeps them
    # A pool of row means (fusion rule 6) reads an OH x 1 plane its conv wrote
    rows = {i: random_array(_blocked((*model.op(i).shape[:3], 1), block), seed=7)
            for i in s.inputs[:1] if s.from_rows}
    fns = itertools.cycle([_other_fn(model, s, params, read, blocks, out, weights, rows) for _ in range(builds)])

    def fn() -> None:
        next(fns)()

    return measure(fn, number=1, repeat=repeat, warmup=2).median_s * 1e3


def step_ms(model: Model, wanted: Mapping[str, Iterable[int]], *, params: dict | None = None,
            repeat: int = 15, memo: bool = True,
            known: Mapping[tuple[str, int], float] | None = None) -> dict[str, dict[int, float]]:
    """``{step name: {block: ms}}`` for the steps (named by their first op) and blocks asked for
    (``memo``: reuse this process's earlier timings of identical steps; ``known``: ms by
    ``(name, block)`` already measured, a log's, taken as they are)."""
    steps = {s.ops[0]: s for s in costed_steps(model)}
    out: dict[str, dict[int, float]] = {}
    for name, blocks in wanted.items():
        s = steps[name]
        for b in sorted(set(blocks)):
            if known is not None and (name, b) in known:
                out.setdefault(name, {})[b] = known[(name, b)]
                continue
            params = model.params(0) if params is None else params  # made only if something is timed
            key = _signature(model, s, b)
            if key not in _memo or not memo:
                _memo[key] = _time_step(model, s, b, params, repeat)
            out.setdefault(name, {})[b] = _memo[key]
    return out
