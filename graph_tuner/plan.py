"""A solved plan: each conv layer's schedule and layouts, each transform inserted, totals.

:func:`plan_from_choice` turns a choice (a candidate per conv, a block per join) into
the plan, whoever chose: the solver (:func:`graph_tuner.selection.select`), a fixed
log (:func:`graph_tuner.api.apply_records`), or a test. Blocks are integers throughout
(1: plain NCHW); layout names are made only for reports (:func:`layout_name`).
``Plan.write_records`` writes the x86 log that TVM's ``apply_graph_best`` (and our
executor) apply positionally: exactly one record per conv layer, in conv order.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from graph_tuner.atomic import atomic_write_text
from graph_tuner.layout_flow import PLAIN, LayoutFlow, layout_name
from graph_tuner.records import format_record


@dataclass
class LayerChoice:
    """Conv layer ``index`` (conv order) runs ``candidate``: its schedule, and so its blocks."""

    index: int
    name: str
    workload: Any  # kernels.Conv2DWorkload
    candidate: Any  # graph_tuner.candidates.Candidate
    time_ms: float

    @property
    def in_block(self) -> int:
        return self.candidate.in_block

    @property
    def out_block(self) -> int:
        return self.candidate.out_block

    # Names, for reports and tables only.
    @property
    def in_layout(self) -> str:
        return layout_name(self.in_block)

    @property
    def out_layout(self) -> str:
        return layout_name(self.out_block)


@dataclass
class TransformChoice:
    """One layout transform of ``tensor`` (its NCHW ``shape``) from ``src_block`` to
    ``dst_block``, run once for all its ``consumers`` (op names; ``"<output>"`` for a
    graph output)."""

    tensor: str
    shape: tuple[int, ...]
    src_block: int
    dst_block: int
    time_ms: float
    consumers: list[str]
    estimated: bool = False

    @property
    def key(self) -> tuple[tuple[int, ...], int, int]:
        """``(shape, src, dst)``: how transform costs are keyed."""
        return tuple(self.shape), self.src_block, self.dst_block

    @property
    def label(self) -> str:
        """How profiles name this transform's step: ``"tensor NCHW16c->NCHW"``."""
        return f"{self.tensor} {self.src_layout}->{self.dst_layout}"

    @property
    def src_layout(self) -> str:
        return layout_name(self.src_block)

    @property
    def dst_layout(self) -> str:
        return layout_name(self.dst_block)


@dataclass
class StepChoice:
    """A step that is not a conv (pooling, an elementwise chain, dense, ...), named by its
    first op, runs in ``block`` (its source decision's output block)."""

    name: str
    block: int
    time_ms: float


@dataclass
class Plan:
    """What runs: each conv layer's schedule, the block every op writes its output in
    (``blocks``; joins' own choice also in ``joins``), and every transform (the only ones
    the executor inserts). Built by :func:`plan_from_choice` alone (CUDA, with no layouts to
    choose: :func:`passthrough_plan`)."""

    model: str
    target: str
    layers: list[LayerChoice]
    transforms: list[TransformChoice]
    joins: dict[str, int]  # add/concat op -> the block it computes in
    solver: str
    optimal: bool
    bound_ms: float | None
    solve_seconds: float
    baselines_ms: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    records: list = field(default_factory=list)  # the records to emit (x86: per layer; cuda: per workload)
    blocks: dict[str, int] = field(default_factory=dict)  # op -> block of its output (1: plain)
    steps: list[StepChoice] = field(default_factory=list)  # the other steps, when they were costed

    @property
    def kernel_ms(self) -> float:
        return sum(layer.time_ms for layer in self.layers)

    @property
    def transform_ms(self) -> float:
        return sum(t.time_ms for t in self.transforms)

    @property
    def step_ms(self) -> float:
        return sum(s.time_ms for s in self.steps)

    @property
    def cost(self) -> float:
        """Predicted time in milliseconds: conv kernels + layout transforms + the other steps
        (when costed: :mod:`graph_tuner.executor.step_timing`)."""
        return self.kernel_ms + self.transform_ms + self.step_ms

    def records_text(self, version: str | float | None = None) -> str:
        """The records as log lines, one per conv layer (x86) or workload (CUDA)."""
        return "".join(format_record(rec, version=version) + "\n" for rec in self.records)

    def write_records(self, path: str | os.PathLike, version: str | float | None = None) -> None:
        """Write the records atomically (a temp file renamed over ``path``; never appends)."""
        atomic_write_text(path, self.records_text(version))

    def to_json(self) -> dict:
        def layer(lc: LayerChoice) -> dict:
            c = lc.candidate
            return {
                "index": lc.index,
                "name": lc.name,
                "data_shape": list(lc.workload.data_shape),
                "kernel_shape": list(lc.workload.kernel_shape),
                "config": getattr(c.record, "entity", None) if c.record is not None else None,
                "config_index": getattr(c.record, "index", None) if c.record is not None else None,
                "in_layout": lc.in_layout,
                "out_layout": lc.out_layout,
                "kernel_ms": lc.time_ms,
                "fallback": bool(getattr(c, "is_fallback", False)),
            }

        return {
            "model": self.model,
            "target": self.target,
            "layers": [layer(lc) for lc in self.layers],
            "transforms": [{"tensor": t.tensor, "shape": list(t.shape), "src_layout": t.src_layout,
                            "dst_layout": t.dst_layout, "time_ms": t.time_ms, "consumers": t.consumers,
                            "estimated": t.estimated} for t in self.transforms],
            "joins": {name: layout_name(b) for name, b in self.joins.items()},
            "totals_ms": {
                "kernels": self.kernel_ms,
                "transforms": self.transform_ms,
                "other_steps": self.step_ms if self.steps else None,
                "graph_tuned": self.cost,
                **{k: v for k, v in self.baselines_ms.items()},
            },
            "solver": {
                "method": self.solver,
                "optimal": self.optimal,
                "bound_ms": self.bound_ms,
                "seconds": self.solve_seconds,
            },
            "notes": self.notes,
        }

    def report_json(self) -> str:
        """:meth:`to_json` as the text of a report file."""
        return json.dumps(self.to_json(), indent=2) + "\n"

    def write_report(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, self.report_json())

    def report(self) -> str:
        """A human-readable table of the plan."""
        lines = [f"{self.model}  target: {self.target}"]
        if self.layers:
            lines.append(f"{'#':>3}  {'layer':<28} {'workload':<34} {'in':>8} {'out':>8} {'kernel ms':>10}")
            for lc in self.layers:
                w = lc.workload
                wl = f"{w.in_channels}x{w.data_shape[2]}x{w.data_shape[3]} k{w.kernel_size[0]} s{w.strides[0]} ->{w.out_channels}"
                fb = " (fallback)" if getattr(lc.candidate, "is_fallback", False) else ""
                lines.append(
                    f"{lc.index:>3}  {lc.name[:28]:<28} {wl:<34} {lc.in_layout:>8} {lc.out_layout:>8} {lc.time_ms:>10.4f}{fb}"
                )
        if not self.layers and self.records:  # CUDA: one record per distinct workload
            lines.append(f"{'#':>3}  {'workload':<60} {'task':<28} {'ms':>9}")
            for i, r in enumerate(self.records):
                w = r.workload
                wl = (f"data {list(w.data_shape)} kernel {list(w.kernel_shape)} "
                      f"s{w.strides[0]} p{list(w.padding)}")
                lines.append(f"{i:>3}  {wl:<60} {r.task_name:<28} {r.time * 1e3:>9.4f}")
            lines.extend(f"note: {n}" for n in self.notes)
            return "\n".join(lines)
        if self.transforms:
            lines.append("layout transforms:")
            for t in self.transforms:
                est = " (estimated)" if t.estimated else ""
                lines.append(
                    f"     {t.tensor[:28]:<28} {str(list(t.shape)):<20} {t.src_layout:>8} -> {t.dst_layout:<8} "
                    f"{t.time_ms:>8.4f} ms{est}  for {', '.join(t.consumers)}"
                )
        lines.append(
            f"total: {self.cost:.4f} ms = kernels {self.kernel_ms:.4f} + transforms {self.transform_ms:.4f}"
            f" ({len(self.transforms)} transforms)"
            + (f" + other steps {self.step_ms:.4f} ({len(self.steps)} steps)" if self.steps else "")
        )
        for name, ms in self.baselines_ms.items():
            lines.append(f"  {name.replace('_', ' ')}: " + ("n/a" if ms is None else f"{ms:.4f} ms"))
        proof = "optimal (proven)" if self.optimal else "not proven optimal"
        gap = "" if self.optimal or self.bound_ms is None else f", gap {self.cost - self.bound_ms:.4f} ms"
        bound = f", bound {self.bound_ms:.4f} ms{gap}" if self.bound_ms is not None else ""
        lines.append(f"solver: {self.solver}, {self.solve_seconds * 1e3:.1f} ms, {proof}{bound}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def plan_from_choice(flow: LayoutFlow, convs: Mapping[str, Any], joins: Mapping[str, int],
                     transform_ms: Mapping[tuple, float] | None = None,
                     step_ms: Mapping[str, Mapping[int, float]] | None = None, **meta) -> Plan:
    """The plan of one choice: ``convs`` maps each conv to its candidate, ``joins`` each join
    to its block. This is the one place that decides, from the flow's rules
    (:mod:`graph_tuner.layout_flow`), the block each op writes and which tensor is
    transformed to what for whom: the objective counts these transforms and the
    executor runs exactly these. ``transform_ms`` costs them by ``(shape, src, dst)``
    (None: unknown, 0 ms), ``step_ms`` the other steps by first op and block (None: not
    costed); ``meta`` fills the other fields of :class:`Plan`.
    """
    def out_block(decision: str) -> int:
        return 1 if decision == PLAIN else convs[decision].out_block if decision in convs else joins[decision]

    def in_block(decision: str) -> int:
        return 1 if decision == PLAIN else convs[decision].in_block if decision in convs else joins[decision]

    transforms = []
    for t in flow.tensors:
        have = out_block(t.source)
        wanted: dict[int, list[str]] = {}
        for r in t.requirements:
            b = in_block(r.decision)
            if b != have and r.via not in wanted.setdefault(b, []):
                wanted[b].append(r.via)
        for b, consumers in sorted(wanted.items()):
            ms = 0.0 if transform_ms is None else transform_ms[(t.shape, have, b)]
            transforms.append(TransformChoice(t.name, t.shape, have, b, ms, consumers))
    layers = [LayerChoice(i, op.name, flow.workloads[op.name], convs[op.name], convs[op.name].time * 1e3)
              for i, op in enumerate(flow.convs)]
    meta = {"target": "llvm", "solver": "fixed", "optimal": False, "bound_ms": None, "solve_seconds": 0.0,
            "records": [lc.candidate.record for lc in layers]} | meta
    blocks = {op: out_block(d) for op, d in flow.source.items()}
    # A chain a conv may run as its prologue runs alone where its output is transformed.
    transformed = {t.tensor for t in transforms}
    steps = [StepChoice(name, blocks[name], ms[blocks[name]]) for name, ms in (step_ms or {}).items()
             if name not in flow.prologues or flow.prologues[name] in transformed]
    return Plan(model=flow.model, layers=layers, transforms=transforms, joins=dict(joins), blocks=blocks,
                steps=steps, **meta)


def passthrough_plan(model: str, target: str, records: list, notes: list[str]) -> Plan:
    """A plan that chooses no layouts: ``records`` (CUDA: the fastest per distinct workload)
    written as they are, no layers, no transforms."""
    return Plan(model=model, target=target, layers=[], transforms=[], joins={}, solver="passthrough",
                optimal=True, bound_ms=None, solve_seconds=0.0, notes=list(notes), records=list(records))
