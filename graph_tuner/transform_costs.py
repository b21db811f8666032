"""Layout-transform costs: measured here, read from AutoTVM records, or estimated.

Keys are ``(NCHW shape, src block, dst block)`` with block 1 meaning plain NCHW;
values are seconds. A transform to the same block costs nothing.

>>> costs = TransformCosts()
>>> costs.add((1, 64, 56, 56), 1, 16, 40e-6)
>>> costs.add((1, 128, 28, 28), 16, 8, 20e-6)
>>> costs.get((1, 64, 56, 56), 16, 16)
0.0
>>> fit = costs.estimate_missing([((1, 256, 14, 14), 16, 8)])
>>> fit.filled, costs.get((1, 256, 14, 14), 16, 8) > 0
(1, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from graph_tuner import record_checks as checks
from graph_tuner.errors import GraphTunerError
from graph_tuner.layout_flow import layout_name
from graph_tuner.record_checks import transform_key

Key = tuple[tuple[int, int, int, int], int, int]


@dataclass
class EstimateReport:
    """How well the per-element model fits the known transforms."""

    filled: int  # transforms estimated
    known: int  # transforms the fit used
    median_rel_error: float  # leave-one-out, on the known ones
    max_rel_error: float
    coef: tuple[float, float] = (0.0, 0.0)  # seconds = coef[0] + coef[1] * elements

    def __str__(self) -> str:
        return (
            f"estimated {self.filled} transform(s) from {self.known} known with "
            f"t = {self.coef[0] * 1e6:.2f} us + {self.coef[1] * 1e9:.3f} ns/element "
            f"(leave-one-out error: median {self.median_rel_error:.0%}, max {self.max_rel_error:.0%})"
        )


@dataclass
class TransformCosts:
    seconds: dict[Key, float] = field(default_factory=dict)
    estimated: set[Key] = field(default_factory=set)

    def add(self, shape: Sequence[int], src: int, dst: int, seconds: float) -> None:
        self.seconds[(tuple(int(x) for x in shape), int(src), int(dst))] = float(seconds)

    def get(self, shape: Sequence[int], src: int, dst: int) -> float:
        if src == dst:
            return 0.0
        return self.seconds[(tuple(shape), src, dst)]

    def missing(self, keys: Iterable[Key]) -> list[Key]:
        return [k for k in keys if k[1] != k[2] and k not in self.seconds]

    def load_records(self, records: Iterable) -> int:
        """Add AutoTVM ``layout_transform`` records (objects with ``shape``, ``src_layout``,
        ``dst_layout``, ``time``); the shape is the source tensor's, NCHW or in its own
        layout. :func:`graph_tuner.records.read_records` has checked the ones it read; this
        checks again for records made some other way, since what is added here is solved on."""
        n = 0
        for r in records:
            try:
                shape, src, dst = transform_key(r.shape, r.src_layout, r.dst_layout)
                checks.measured_costs([r.time])
            except checks.BadRecord as e:
                where = getattr(r, "source", "") or "a layout_transform record"
                raise GraphTunerError(f"{where}: not a usable layout_transform record ({e}); "
                                      "fix or drop it") from None
            self.add(shape, src, dst, r.time)
            n += 1
        return n

    def estimate_missing(self, keys: Iterable[Key]) -> EstimateReport:
        """Fill missing keys from ``t = a + b * elements`` fitted on the known transforms.

        The fit minimises relative error (weights 1/t); its leave-one-out relative error
        on the known transforms is reported so the user can judge it.
        """
        missing = self.missing(keys)
        known = [(k, t) for k, t in self.seconds.items() if k not in self.estimated]
        if len(known) < 2:
            if missing:
                raise GraphTunerError(
                    f"cannot estimate {len(missing)} transform cost(s) from {len(known)} known; "
                    "measure transforms (drop --transform-records) or give a fuller records file"
                )
            return EstimateReport(0, len(known), 0.0, 0.0)
        x = np.array([math.prod(k[0]) for k, _ in known], dtype=float)
        y = np.array([t for _, t in known], dtype=float)
        coef = _fit(x, y)
        errs = []
        for i in range(len(x)):
            mask = np.arange(len(x)) != i
            c = _fit(x[mask], y[mask]) if mask.sum() >= 2 else coef
            errs.append(abs(c[0] + c[1] * x[i] - y[i]) / y[i])
        for k in missing:
            self.seconds[k] = max(coef[0] + coef[1] * math.prod(k[0]), 0.0)
            self.estimated.add(k)
        return EstimateReport(len(missing), len(known), float(np.median(errs)), float(np.max(errs)), coef)

    def fill(self, keys: Iterable[Key], *, cache: bool = True, measure: bool = True, estimate: bool = False,
             progress: bool = True, say: Callable[[str], object] = lambda s: None) -> None:
        """Fill the missing ``keys``: from this CPU's on-disk cache (``cache``), then the
        per-element estimate (``estimate``; its fit is reported through ``say``), then by
        measuring here (``measure``; the results are cached). Whatever is left stays missing."""
        keys = list(keys)
        if cache and self.missing(keys):
            from kernels.transform_bench import load_cached

            for (shape, a, b), secs in load_cached(self.missing(keys)).items():
                if math.isfinite(secs) and secs > 0:  # a cache file is edited by hand too
                    self.add(shape, a, b, secs)
        if estimate and self.missing(keys):
            say(str(self.estimate_missing(keys)))
        missing = self.missing(keys)
        if measure and missing:
            from kernels.transform_bench import measure_transforms

            say(f"measuring {len(missing)} layout transforms on this machine (cached for next time)")
            for (shape, a, b), secs in measure_transforms(missing, progress=progress).items():
                self.add(shape, a, b, secs)

    def describe(self, key: Key) -> str:
        shape, a, b = key
        return f"{list(shape)} {layout_name(a)} -> {layout_name(b)}"


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    w = 1.0 / y
    a = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (c0, c1), *_ = np.linalg.lstsq(a, y * w, rcond=None)
    return float(max(c0, 0.0)), float(max(c1, 0.0))
