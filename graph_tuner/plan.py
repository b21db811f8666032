"""A solved plan: each conv layer's schedule and layouts, each transform inserted, totals.

``Plan.write_records`` writes the x86 log that TVM's ``apply_graph_best`` (and our
executor) apply positionally: exactly one record per conv layer, in conv order.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from graph_tuner.atomic import atomic_open
from graph_tuner.layout_flow import layout_name
from graph_tuner.records import format_record
from graph_tuner.selection import SelectionProblem


@dataclass
class LayerChoice:
    index: int
    name: str
    workload: Any  # kernels.Conv2DWorkload
    candidate: Any  # graph_tuner.candidates.Candidate
    in_layout: str
    out_layout: str
    time_ms: float


@dataclass
class TransformChoice:
    tensor: str
    shape: tuple[int, ...]
    src_layout: str
    dst_layout: str
    time_ms: float
    consumers: list[str]  # names of the ops reading the transformed tensor; "<output>" for a graph output
    estimated: bool = False


@dataclass
class Plan:
    model: str
    target: str
    layers: list[LayerChoice]
    transforms: list[TransformChoice]
    joins: dict[str, str]  # add/concat op -> layout it computes in
    solver: str
    optimal: bool
    bound_ms: float | None
    solve_seconds: float
    baselines_ms: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    records: list = field(default_factory=list)  # the records to emit (x86: per layer; cuda: per workload)

    @property
    def kernel_ms(self) -> float:
        return sum(layer.time_ms for layer in self.layers)

    @property
    def transform_ms(self) -> float:
        return sum(t.time_ms for t in self.transforms)

    @property
    def cost(self) -> float:
        """Predicted conv-kernel + layout-transform time, in milliseconds."""
        return self.kernel_ms + self.transform_ms

    def write_records(self, path: str | os.PathLike, version: str | float | None = None) -> None:
        """Write the records atomically (a temp file renamed over ``path``; never appends)."""
        with atomic_open(path) as f:
            for rec in self.records:
                f.write(format_record(rec, version=version) + "\n")

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
            "transforms": [asdict(t) | {"shape": list(t.shape)} for t in self.transforms],
            "joins": self.joins,
            "totals_ms": {
                "kernels": self.kernel_ms,
                "transforms": self.transform_ms,
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

    def write_report(self, path: str | os.PathLike) -> None:
        with atomic_open(path) as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")

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
        )
        for name, ms in self.baselines_ms.items():
            lines.append(f"  {name.replace('_', ' ')}: " + ("n/a" if ms is None else f"{ms:.4f} ms"))
        proof = "optimal (proven)" if self.optimal else "not proven optimal"
        gap = "" if self.optimal or self.bound_ms is None else f", gap {self.cost - self.bound_ms:.4f} ms"
        bound = f", bound {self.bound_ms:.4f} ms{gap}" if self.bound_ms is not None else ""
        lines.append(f"solver: {self.solver}, {self.solve_seconds * 1e3:.1f} ms, {proof}{bound}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def read_choice(sp: SelectionProblem, choice: list[int], conv_index: dict[str, int], workloads: dict) -> tuple:
    """Translate a solver choice into layer choices, transforms and join layouts."""
    layers = []
    for name, cands in sp.conv_choices.items():
        c = cands[choice[sp.node[name]]]
        layers.append(
            LayerChoice(
                index=conv_index[name],
                name=name,
                workload=workloads[name],
                candidate=c,
                in_layout=layout_name(c.in_block),
                out_layout=layout_name(c.out_block),
                time_ms=c.time * 1e3,
            )
        )
    layers.sort(key=lambda lc: lc.index)
    joins = {n: layout_name(bs[choice[sp.node[n]]]) for n, bs in sp.join_choices.items()}

    transforms = []
    for t in sp.flow.tensors:
        have = sp.out_blocks(t.source)[choice[sp.node[t.source]]]
        wanted: dict[int, list[str]] = {}
        for r in t.requirements:
            b = sp.in_blocks(r.decision)[choice[sp.node[r.decision]]]
            if b != have:
                wanted.setdefault(b, [])
                if r.via not in wanted[b]:
                    wanted[b].append(r.via)
        for b, consumers in sorted(wanted.items()):
            key = (t.shape, have, b)
            transforms.append(
                TransformChoice(
                    tensor=t.name,
                    shape=t.shape,
                    src_layout=layout_name(have),
                    dst_layout=layout_name(b),
                    time_ms=sp.transform_ms[key],
                    consumers=consumers,
                )
            )
    return layers, transforms, joins
