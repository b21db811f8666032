"""Build the discrete selection problem from a model, candidates and transform costs.

One solver node per decision (see :mod:`graph_tuner.layout_flow`):

* a conv layer: one choice per candidate, cost = its kernel time;
* a join (add/concat/multiply): one choice per block dividing all its inputs' channels, cost 0
  (the elementwise op costs the same in any layout); a channel slice likewise, its block
  dividing its input's channels, its start and its length; a transposed conv likewise, its
  block dividing its input and output channels (its kernel runs in any block: cost 0 here,
  its time per block is a step cost when steps are costed). A residual add that convs' epilogues
  can absorb (``flow.residual``) must take the output block of one of them: an edge to
  each forbids (``inf``) the other blocks. With two such convs (a projection shortcut),
  the add's choices are (block, absorbing conv) pairs, so "one of them" stays pairwise;
* PLAIN: a single choice of block 1 (graph inputs, plain-layout consumers, outputs).

One *shared conversion* per 4-d tensor: its source's choice produces a block; each
consumer's choice requires a block; each distinct required block other than the
produced one costs one layout transform on that tensor's real shape, however many
consumers share it; the output of a chain a conv may run as its input prologue adds the
chain's own time to its transforms (a plan transforming it runs the chain alone). Costs are in
milliseconds.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import AbstractSet, Callable, Mapping, MutableMapping, Sequence

from graph_tuner.errors import GraphTunerError
from graph_tuner.layout_flow import PLAIN, LayoutFlow, TensorFlow, layout_name
from graph_tuner.plan import Plan, plan_from_choice
from solvers import Problem

TransformKey = tuple[tuple[int, int, int, int], int, int]  # (NCHW shape, src block, dst block)
TransformCost = Callable[[tuple[int, int, int, int], int, int], float]  # seconds


def join_blocks(channels: Sequence[int], blocks: Sequence[int]) -> list[int]:
    """Blocks valid for a join: those dividing every input's channel count.

    >>> join_blocks([64, 64], [1, 8, 16, 32, 48])
    [1, 8, 16, 32]
    >>> join_blocks([2, 3], [1, 2, 4])
    [1]
    """
    return [b for b in blocks if all(c % b == 0 for c in channels)]


@dataclass
class SelectionProblem:
    """The solver problem plus what is needed to read a solution back."""

    problem: Problem
    flow: LayoutFlow
    node: dict[str, int]  # decision name -> solver node
    choices: dict[str, list]  # conv -> its candidates, join -> its blocks (solver choice order)
    blocks: list[int]  # class id -> block size
    transform_ms: dict[TransformKey, float]

    @property
    def conv_choices(self) -> dict[str, list]:
        return {n: cs for n, cs in self.choices.items() if self.flow.decisions[n].kind == "conv2d"}

    @property
    def join_choices(self) -> dict[str, list[int]]:
        return {n: cs for n, cs in self.choices.items() if self.flow.decisions[n].kind != "conv2d"}

    def out_blocks(self, decision: str) -> list[int]:
        """Block produced by each choice of ``decision``."""
        return _out_blocks(decision, self.choices)

    def in_blocks(self, decision: str) -> list[int]:
        """Block each choice of ``decision`` requires of its 4-d inputs."""
        return _in_blocks(decision, self.choices)


def required_transforms(flow: LayoutFlow, candidates: dict[str, list], blocks: Sequence[int]) -> list[TransformKey]:
    """Every (shape, src block, dst block) transform some choice could force, sorted."""
    choices = _choices(flow, candidates, blocks)
    keys: set[TransformKey] = set()
    for t in flow.tensors:
        srcs = set(_out_blocks(t.source, choices))
        dsts = {b for r in t.requirements for b in _in_blocks(r.decision, choices)}
        keys.update((t.shape, a, b) for a in srcs for b in dsts if a != b)
    return sorted(keys)


def required_step_blocks(flow: LayoutFlow, candidates: dict[str, list], blocks: Sequence[int],
                         steps: Sequence[str]) -> dict[str, list[int]]:
    """The blocks each of ``steps`` (non-conv steps, by first op) could run in: those its
    source decision's choices produce."""
    choices = _choices(flow, candidates, blocks)
    return {name: sorted(set(_out_blocks(flow.source[name], choices))) for name in steps}


def _step_costs(flow: LayoutFlow, choices: dict[str, list], step_ms: Mapping[str, Mapping[int, float]]
                ) -> dict[str, list[float]]:
    """Per decision, per choice: the ms of the non-conv steps running in the block it produces
    (but a conv's possible prologue, which runs only where its output is transformed: see
    :func:`_transform_table`)."""
    extra: dict[str, list[float]] = {}
    for name, by_block in step_ms.items():
        if name in flow.prologues:
            continue
        d = flow.source[name]
        outs = _out_blocks(d, choices)
        row = extra.setdefault(d, [0.0] * len(outs))
        for k, b in enumerate(outs):
            if b not in by_block:
                raise GraphTunerError(f"no cost for step '{name}' in {layout_name(b)}; measure the model's other ops")
            row[k] += by_block[b]
    return extra


def _choices(flow: LayoutFlow, candidates: dict[str, list], blocks: Sequence[int]) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, d in flow.decisions.items():
        if d.kind == "conv2d":
            out[name] = candidates[name]
        elif d.kind != "plain":
            valid = join_blocks(d.channels_in, blocks)
            # One copy of the blocks per conv that may absorb the add (see build_problem).
            out[name] = valid * max(1, len(flow.residual.get(name, ())))
    return out


def _absorb_edges(flow: LayoutFlow, choices: dict[str, list]) -> list[tuple[str, str, list[list[float]]]]:
    """``(add, conv, matrix)``: ``inf`` where the add's choice is to be absorbed by ``conv``
    but the add's block is not that conv's output block."""
    edges = []
    for add, convs in flow.residual.items():
        n = len(choices[add]) // len(convs)
        for k, conv in enumerate(convs):
            outs = _out_blocks(conv, choices)
            edges.append((add, conv, [[math.inf if i // n == k and b != o else 0.0 for o in outs]
                                      for i, b in enumerate(choices[add])]))
    return edges


def _out_blocks(decision: str, choices: dict[str, list]) -> list[int]:
    if decision == PLAIN:
        return [1]
    return [c if isinstance(c, int) else c.out_block for c in choices[decision]]


def _in_blocks(decision: str, choices: dict[str, list]) -> list[int]:
    if decision == PLAIN:
        return [1]
    return [c if isinstance(c, int) else c.in_block for c in choices[decision]]


def build_problem(
    flow: LayoutFlow,
    candidates: dict[str, list],
    transform_seconds: dict[TransformKey, float],
    blocks: Sequence[int] | None = None,
    step_ms: Mapping[str, Mapping[int, float]] | None = None,
) -> SelectionProblem:
    """Build the solver problem.

    ``candidates`` maps each conv op name to its candidates (objects with ``in_block``,
    ``out_block``, ``time`` in seconds); ``transform_seconds`` must hold every key of
    :func:`required_transforms`. ``blocks`` are the block sizes joins may choose from
    (default: every block some candidate uses, plus 1). ``step_ms`` costs the steps that
    are not convs, by first op and block (:func:`required_step_blocks`): each adds to the
    choices of the decision whose output block it runs in, but a chain a conv may run as its
    prologue, which adds to the transforms of its output (a plan that transforms it runs it).
    """
    if blocks is None:
        blocks = sorted({1} | {b for cs in candidates.values() for c in cs for b in (c.in_block, c.out_block)})
    blocks = sorted(set(blocks) | {1})
    cls = {b: i for i, b in enumerate(blocks)}
    choices = _choices(flow, candidates, blocks)
    extra = _step_costs(flow, choices, step_ms or {})

    def plus(name: str, costs: list[float]) -> list[float]:
        return [c + e for c, e in zip(costs, extra.get(name, [0.0] * len(costs)))]

    p = Problem()
    node: dict[str, int] = {}
    for name, d in flow.decisions.items():
        if d.kind == "plain":
            node[name] = p.add_node(plus(name, [0.0]))
        elif d.kind == "conv2d":
            cands = choices[name]
            if not cands:
                raise GraphTunerError(f"conv layer '{name}' has no candidate schedule")
            node[name] = p.add_node(plus(name, [c.time * 1e3 for c in cands]))
        else:
            if not choices[name]:
                raise GraphTunerError(
                    f"{d.kind} '{name}': no layout block divides all its input channels {list(d.channels_in)}"
                )
            node[name] = p.add_node(plus(name, [0.0] * len(choices[name])))

    for add, conv, matrix in _absorb_edges(flow, choices):
        p.add_edge(node[add], node[conv], matrix)

    used: dict[TransformKey, float] = {}
    chain_ms = {}  # a possible prologue's output tensor -> the chain's ms by block (steps costed)
    for name, out in flow.prologues.items() if step_ms is not None else ():
        if name not in step_ms:
            raise GraphTunerError(f"no cost for step '{name}'; measure the model's other ops")
        chain_ms[out] = step_ms[name]
    for t in flow.tensors:
        table = _transform_table(t, blocks, transform_seconds, flow, choices, chain_ms.get(t.name))
        for key_a, key_b, ms in table[1]:
            used[(t.shape, key_a, key_b)] = ms
        src_class = [cls[b] for b in _out_blocks(t.source, choices)]
        dsts = [node[r.decision] for r in t.requirements]
        dst_classes = [[cls[b] for b in _in_blocks(r.decision, choices)] for r in t.requirements]
        p.add_conversion(node[t.source], dsts, src_class, dst_classes, table[0])

    return SelectionProblem(
        problem=p,
        flow=flow,
        node=node,
        choices=choices,
        blocks=list(blocks),
        transform_ms=used,
    )


def _transform_table(t: TensorFlow, blocks, transform_seconds, flow, choices, chain_ms=None):
    """Class-by-class transform cost table (ms) for tensor ``t``; inf where never needed.
    ``chain_ms`` (block -> ms): ``t`` is the output of a chain a conv may run as its prologue,
    which runs as its own step, in the source's block, wherever ``t`` is transformed (its one
    reader, the conv, then reads another block). The entries (the transforms' own costs)
    leave it out. The conv's own time stays the one taken with the prologue fused (a little
    more than it then runs), as its records were timed."""
    assert chain_ms is None or len(t.requirements) == 1, t
    n = len(blocks)
    table = [[math.inf] * n for _ in range(n)]
    entries = []
    srcs = set(_out_blocks(t.source, choices))
    dsts = {b for r in t.requirements for b in _in_blocks(r.decision, choices)}
    for i, a in enumerate(blocks):
        table[i][i] = 0.0
        if a not in srcs:
            continue
        for j, b in enumerate(blocks):
            if b == a or b not in dsts:
                continue
            key = (t.shape, a, b)
            if key not in transform_seconds:
                raise GraphTunerError(
                    f"no cost for layout transform of '{t.name}' {list(t.shape)} {layout_name(a)} -> {layout_name(b)}; "
                    "measure transforms or pass --estimate-transforms"
                )
            table[i][j] = transform_seconds[key] * 1e3
            entries.append((a, b, table[i][j]))
            if chain_ms is not None:
                if a not in chain_ms:
                    raise GraphTunerError(f"no cost for the chain writing '{t.name}' in {layout_name(a)}; "
                                          "measure the model's other ops")
                table[i][j] += chain_ms[a]
    return table, entries


def choice_of(sp: SelectionProblem, choice: Sequence[int]) -> tuple[dict[str, object], dict[str, int]]:
    """A solver's integer choice per node as a candidate per conv and a block per join."""
    convs = {n: cs[choice[sp.node[n]]] for n, cs in sp.conv_choices.items()}
    joins = {n: bs[choice[sp.node[n]]] for n, bs in sp.join_choices.items()}
    return convs, joins


def select(flow: LayoutFlow, candidates: dict[str, list], transform_seconds: dict[TransformKey, float],
           blocks: Sequence[int] | None = None, *, method: str = "dp", time_limit: float | None = None,
           estimated: AbstractSet[TransformKey] = frozenset(), step_ms: Mapping[str, Mapping[int, float]] | None = None,
           **meta) -> Plan:
    """Choose a candidate per conv and a block per join minimising kernels + transforms;
    the plan of that choice (:func:`graph_tuner.plan.plan_from_choice`).

    ``method`` is the solver's (:func:`solvers.solve`; ``auto``: the plan says which ran and
    why). Transforms whose cost is in ``estimated`` are marked so. ``step_ms``: the other
    steps' costs (:func:`build_problem`), in the objective and in the plan.
    ``meta`` fills the plan's other fields (``target``, ``notes``, ...).
    """
    from solvers import Infeasible, TableTooLarge, solve

    sp = build_problem(flow, candidates, transform_seconds, blocks, step_ms)
    notes = list(meta.pop("notes", []))
    t0 = time.perf_counter()
    try:
        sol = solve(sp.problem, method=method, time_limit=time_limit)
    except TableTooLarge as e:
        raise GraphTunerError(f"{e}; use --solver auto (dp if it fits, else ilp)") from None
    except Infeasible:
        raise GraphTunerError(
            "no feasible plan: every combination of candidates needs an impossible layout transform"
        ) from None
    elapsed = time.perf_counter() - t0
    if method == "auto":  # say which ran and why
        method = f"{sol.method} (auto: {sol.stats['auto']})"
    convs, joins = choice_of(sp, sol.choice)
    plan = plan_from_choice(flow, convs, joins, sp.transform_ms, step_ms, **{"solver": method} | meta,
                            optimal=bool(sol.optimal), bound_ms=sol.bound, solve_seconds=elapsed, notes=notes)
    for t in plan.transforms:
        t.estimated = t.key in estimated
    if abs(plan.cost - sol.cost) > 1e-6 * max(1.0, abs(sol.cost)):
        raise AssertionError(f"plan total {plan.cost} != solver objective {sol.cost}")  # a bug, not user error
    return plan


# Unmeasured transforms are costed at this fraction of the fastest per-element rate measured.
BOUND_MARGIN = 0.5


def select_measuring(flow: LayoutFlow, candidates: dict[str, list], known: MutableMapping[TransformKey, float],
                     measure: Callable[[list[TransformKey]], Mapping[TransformKey, float]] | None,
                     blocks: Sequence[int] | None = None, **kwargs) -> Plan:
    """:func:`select`, measuring only the transforms a best plan uses, not all it could need.

    Every transform not in ``known`` (seconds) is costed at a lower bound: ``BOUND_MARGIN``
    times the fastest per-element rate among the known ones, times its elements (0 while
    none is known). The plan solved so is optimal for these costs; if it uses no bounded
    transform, its cost is exact and no plan using one can be cheaper (its true cost is at
    least its bound), so it is the plan :func:`select` would find with every transform
    measured. Otherwise ``measure`` the bounded transforms it uses (added to ``known``) and
    solve again. On MobileNet-v2's shipped log this measures tens of its 2,255 transforms;
    DenseNet-121's, 260 of 4,948 (benchmarks/README.md). ``measure=None``: a plan that needs
    an unknown transform is a :class:`GraphTunerError`.
    """
    blocks = sorted(set(_all_blocks(candidates) if blocks is None else blocks) | {1})
    keys = required_transforms(flow, candidates, blocks)
    notes = list(kwargs.pop("notes", []))
    rounds = 0
    while True:
        rate = BOUND_MARGIN * min((t / math.prod(k[0]) for k, t in known.items() if k[1] != k[2]), default=0.0)
        seconds = {k: known[k] if k in known else rate * math.prod(k[0]) for k in keys}
        plan = select(flow, candidates, seconds, blocks, notes=list(notes), **kwargs)
        rounds += 1
        new = list(dict.fromkeys(t.key for t in plan.transforms if t.key not in known))  # tensors share shapes
        if not new:
            bounded = sum(k not in known for k in keys)
            if bounded:
                plan.notes.append(f"transforms: {len(keys) - bounded} of the {len(keys)} a plan could need are "
                                  f"measured; the other {bounded} were costed at a lower bound ({rate * 1e9:.3f} "
                                  f"ns/element, {BOUND_MARGIN:g}x the fastest measured) and no plan using them can "
                                  f"be cheaper ({rounds} solves)")
            return plan
        if measure is None:
            shape, a, b = new[0]
            raise GraphTunerError(f"{len(new)} layout transform cost(s) unknown that a best plan may need, e.g. "
                                  f"{list(shape)} {layout_name(a)} -> {layout_name(b)}; measure or estimate them")
        known.update(measure(new))
        if any(k not in known for k in new):  # else the same plan would be asked for again and again
            shape, a, b = next(k for k in new if k not in known)
            raise GraphTunerError(f"layout transform {list(shape)} {layout_name(a)} -> {layout_name(b)} could not "
                                  "be measured")


def _all_blocks(candidates: dict[str, list]) -> list[int]:
    return sorted({1} | {b for cs in candidates.values() for c in cs for b in (c.in_block, c.out_block)})
