"""The results files of ``graph-tuner bench`` over time, and the regressions between them.

A results file (``<out>/<timestamp>.json``) holds, per model, every runtime's median
latency and the host's speed in those rounds. :func:`previous_results` finds the newest
earlier file from the same machine (skipping damaged ones), :func:`find_regressions`
flags medians more than :data:`REGRESSION_THRESHOLD` above it, and tells a slowdown the
machine caused (onnxruntime or the host probe slowed too) from one of ours.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from graph_tuner import host_state
from graph_tuner.host_state import speed as host_speed

REGRESSION_THRESHOLD = 0.05
OUR_PLANS = ("graph_tuned", "history_best", "default")


@dataclass
class Regression:
    model: str
    runtime: str
    previous_ms: float
    current_ms: float
    yardstick: float | None = None  # onnxruntime's change in the same runs (None: not measured both times)
    host_change: float | None = None  # the host probe's change (one-thread conv in the rounds: graph_tuner.host_state)

    @property
    def change(self) -> float:
        return self.current_ms / self.previous_ms - 1

    @property
    def relative_change(self) -> float | None:
        """The change measured against onnxruntime's in the same runs."""
        return None if self.yardstick is None else (1 + self.change) / (1 + self.yardstick) - 1

    def machine(self, threshold: float = REGRESSION_THRESHOLD) -> bool:
        """Not our code: another runtime, or onnxruntime slowed down about as much, or the host's
        cores did (our plans slowed more than onnxruntime on slower cores: session 7)."""
        rel = self.relative_change
        return (self.runtime not in OUR_PLANS or rel is not None and rel <= threshold
                or self.host_change is not None and self.host_change < -threshold)

    def __str__(self) -> str:
        text = f"{self.model} {self.runtime}: {self.previous_ms:.3f} -> {self.current_ms:.3f} ms ({self.change:+.1%})"
        if self.yardstick is not None and self.runtime != "onnxruntime":
            text += f"; onnxruntime {self.yardstick:+.1%} in the same runs, so {self.relative_change:+.1%} relative"
        if self.host_change is not None:
            text += f"; the host's cores {self.host_change:+.1%}"
        return text


def find_regressions(current: dict, previous: dict, threshold: float = REGRESSION_THRESHOLD) -> list[Regression]:
    """Runtimes whose median grew more than ``threshold`` since ``previous`` (results dicts).

    Each carries onnxruntime's change between the same two runs when both measured it:
    this shared host's speed drifts by tens of percent between runs, and onnxruntime, whose
    code did not change, is the yardstick (:meth:`Regression.machine`); and the change of
    the host's own speed (:mod:`graph_tuner.host_state`) when both files have it.

    >>> prev = {"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": 10.0}, "onnxruntime": {"median_ms": 20}}}}}
    >>> cur = {"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": 10.6}, "onnxruntime": {"median_ms": 20}}}}}
    >>> [str(r) for r in find_regressions(cur, prev)]
    ['m graph_tuned: 10.000 -> 10.600 ms (+6.0%); onnxruntime +0.0% in the same runs, so +6.0% relative']
    """
    out = []
    for model, entry in current.get("models", {}).items():
        then_entry = previous.get("models", {}).get(model, {})
        before = then_entry.get("runtimes", {})
        runtimes = entry.get("runtimes", {})
        yardstick = None
        ort_now, ort_then = runtimes.get("onnxruntime"), before.get("onnxruntime")
        if ort_now and ort_then and ort_then.get("median_ms"):
            yardstick = ort_now["median_ms"] / ort_then["median_ms"] - 1
        host_now, host_then = (host_speed(e.get("host") or {}) for e in (entry, then_entry))
        comparable = host_state.comparable(entry.get("host") or {}, then_entry.get("host") or {})
        host_change = host_now / host_then - 1 if host_now and host_then and comparable else None
        for runtime, now in runtimes.items():
            then = before.get(runtime)
            if not now or not then or not then.get("median_ms"):
                continue
            if now["median_ms"] > then["median_ms"] * (1 + threshold):
                out.append(Regression(model, runtime, then["median_ms"], now["median_ms"],
                                      None if runtime == "onnxruntime" else yardstick, host_change))
    return out


def is_results(data: object) -> bool:
    """Whether ``data`` has the shape of a results file, as far as the regression check reads it.

    >>> is_results({"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": 1.0}}}}})
    True
    >>> is_results({"models": {"m": {"runtimes": {"graph_tuned": {"median_ms": "fast"}}}}})
    False
    """
    def numbers(d: object, keys: tuple[str, ...]) -> bool:
        return isinstance(d, dict) and all(isinstance(d.get(k, 0.0), (int, float)) for k in keys)

    if not (isinstance(data, dict) and isinstance(data.get("models"), dict)
            and isinstance(data.get("machine") or {}, dict)):
        return False
    for entry in data["models"].values():
        if not (isinstance(entry, dict) and isinstance(entry.get("runtimes") or {}, dict)
                and isinstance(entry.get("host") or {}, dict)):
            return False
        if not all(r is None or numbers(r, ("median_ms",)) for r in (entry.get("runtimes") or {}).values()):
            return False
        if not numbers(entry.get("host") or {}, ("conv_gflops_rounds",)):
            return False
    return True


def previous_results(out_dir: str | os.PathLike, exclude: str | os.PathLike | None = None,
                     machine: dict | None = None) -> tuple[Path, dict] | None:
    """The newest readable results file in ``out_dir`` (names sort by time), other than ``exclude``.

    With ``machine``, only files measured on the same CPU with as many threads: another
    machine's latencies are no baseline for a regression.
    """
    folder = Path(out_dir)
    for path in sorted(folder.glob("*.json"), reverse=True):
        if exclude is not None and path.resolve() == Path(exclude).resolve():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not is_results(data):
            continue  # not ours, or damaged: no baseline
        theirs = data.get("machine") or {}
        if machine is None or all(theirs.get(k) == machine.get(k) for k in ("cpu", "threads")):
            return path, data
    return None
