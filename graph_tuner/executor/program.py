"""A compiled network: a flat list of zero-argument calls over preallocated buffers.

Built by :func:`graph_tuner.executor.compile_model`. Each run of consecutive kernel
steps is one native function calling the kernels in order
(:mod:`kernels.sequence`); when every step is a generated kernel, as in every zoo
model, a run is a single foreign call with no Python between steps. Nothing is
allocated and no shape is checked per run. :meth:`Program.profile` times each step inside
that native call (:meth:`kernels.sequence.NativeSequence.step_seconds`), so a step costs what
it costs in a run; :meth:`Program.execute_stepwise` makes the same calls one by one from Python.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from graph_tuner.errors import GraphTunerError
from kernels.jit import BoundKernel
from kernels.sequence import NativeSequence, compile_sequence

CATEGORIES = ("conv", "transform", "other")


@dataclass
class ProgramStep:
    name: str  # what a profile shows: the head op, or "tensor NCHW16c->NCHW" for a transform
    category: str  # one of CATEGORIES
    ops: list[str]  # model ops it covers (empty for a transform)
    fn: Callable[[], None]
    predicted_ms: float | None = None  # the plan's cost for this step (conv kernels, transforms)


@dataclass
class StepTime:
    name: str
    category: str
    ops: list[str]
    median_ms: float
    predicted_ms: float | None


@dataclass
class Profile:
    """Per-step times over repeated runs of the whole program (:meth:`Program.profile`: each
    step's median, the steps summing to the median run; :meth:`median` of several profiles:
    each step's median over them)."""

    steps: list[StepTime]

    def by_category(self) -> dict[str, float]:
        """Milliseconds per category (conv, transform, other), summed over steps.

        >>> Profile([StepTime("a", "conv", [], 1.0, None), StepTime("b", "conv", [], 2.0, None)]).by_category()
        {'conv': 3.0, 'transform': 0.0, 'other': 0.0}
        """
        return {c: sum((s.median_ms for s in self.steps if s.category == c), 0.0) for c in CATEGORIES}

    @property
    def total_ms(self) -> float:
        return sum(s.median_ms for s in self.steps)

    @property
    def measured_planned_ms(self) -> float:
        """Measured time of the steps the plan predicts (conv kernels, layout transforms and,
        when the plan costed them, the other steps)."""
        return sum(s.median_ms for s in self.steps if s.predicted_ms is not None)

    def top(self, n: int = 10) -> list[StepTime]:
        return sorted(self.steps, key=lambda s: -s.median_ms)[:n]

    @staticmethod
    def median(profiles: list[Profile]) -> Profile:
        """Each step's median over several profiles of one program (taken at different moments:
        a burst of load on a shared host then moves one of them, not the result).

        >>> a = Profile([StepTime("a", "conv", [], 1.0, 0.9)])
        >>> Profile.median([a, Profile([StepTime("a", "conv", [], 9.0, 0.9)]), a]).steps[0].median_ms
        1.0
        """
        first = profiles[0].steps
        return Profile([StepTime(s.name, s.category, s.ops, float(np.median([p.steps[i].median_ms for p in profiles])),
                                 s.predicted_ms) for i, s in enumerate(first)])


class Program:
    """Runnable network. ``run(x)`` returns the outputs (plain NCHW / 2-d copies)."""

    def __init__(self, model_name: str, steps: list[ProgramStep], inputs: dict[str, np.ndarray],
                 outputs: list[np.ndarray], predicted_ms: float | None,
                 tensors: dict[str, tuple[np.ndarray, tuple[int, ...]]] | None = None):
        self.model_name = model_name
        self.steps = steps
        self.inputs = inputs  # input name -> its buffer (plain)
        self.outputs = outputs  # output buffers, in the model's output order
        self.predicted_ms = predicted_ms
        self._calls = tuple(s.fn for s in steps)
        self._segments = _native_segments(self._calls)
        self._tensors = tensors or {}  # name -> (buffer in its layout, NCHW shape)
        self.buffer_bytes = 0  # activation memory allocated (buffers are reused)
        self.tensor_bytes = 0  # what one buffer per tensor would take
        self.weights = None  # the packed weights' arena (executor.memory.WeightArena)

    def __repr__(self) -> str:
        counts = {c: sum(s.category == c for s in self.steps) for c in CATEGORIES}
        return f"<Program {self.model_name}: {len(self.steps)} steps {counts}>"

    def tensor(self, name: str) -> np.ndarray:
        """A copy of materialised tensor ``name`` from the last run, in plain layout
        (tensors fused away inside a step have no buffer: KeyError)."""
        buf, shape = self._tensors[name]
        if buf.ndim == 5:  # NCHW[b]c -> NCHW
            n, cb, h, w, b = buf.shape
            return buf.transpose(0, 1, 4, 2, 3).reshape(shape).copy()
        return buf.reshape(shape).copy()

    def set_inputs(self, *arrays: np.ndarray) -> None:
        """Copy the input arrays into the program's input buffers (shapes must match)."""
        if len(arrays) != len(self.inputs):
            raise GraphTunerError(f"{self.model_name} takes {len(self.inputs)} input(s), got {len(arrays)}")
        for (name, buf), a in zip(self.inputs.items(), arrays):
            a = np.asarray(a)
            if a.shape != buf.shape:
                raise GraphTunerError(f"input '{name}' of {self.model_name} must have shape "
                                      f"{tuple(buf.shape)}, got {tuple(a.shape)}")
            np.copyto(buf, a, casting="same_kind")

    @property
    def foreign_calls(self) -> int:
        """Calls from Python per run (1 when every step is a generated kernel)."""
        return len(self._segments)

    def execute(self) -> None:
        """One run on the current input buffers."""
        for call in self._segments:
            call()

    def execute_stepwise(self) -> None:
        """One run, each step called from Python (the same kernels and buffers)."""
        for call in self._calls:
            call()

    def run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Set the inputs, run once, return copies of the outputs."""
        self.set_inputs(*arrays)
        self.execute()
        return [o.copy() for o in self.outputs]

    def benchmark(self, repeat: int = 20, warmup: int = 3, stepwise: bool = False):
        """End-to-end latency: one run per sample (a :class:`kernels.timing.Timing`)."""
        from kernels.timing import measure

        return measure(self.execute_stepwise if stepwise else self.execute, number=1, repeat=repeat, warmup=warmup)

    def profile(self, repeat: int = 10, warmup: int = 2) -> Profile:
        """Each step's time over ``repeat`` whole-program runs: the steps of a native segment
        timed by the generated code between its calls (the run as :meth:`execute` makes it), any
        other step by a timer around its call from Python.

        A step's time is its median, scaled so that the steps sum to the median run: a run's
        interrupts and stalls fall on its steps in proportion to their time, and each step's own
        median leaves them out (session 28: the medians summed 2.4-4.5% under the median run of
        DenseNet-121, MobileNet-v2 and ResNet-50, their means -0.4% to +2.2% off it, an outlier in one step
        moving a mean). So the steps share the median run, and a cost taken from them adds up to
        what a run takes."""
        for _ in range(warmup):
            self.execute()
        times = np.empty((repeat, len(self._calls)))
        clock = time.perf_counter
        for r in range(repeat):
            row, i = times[r], 0
            for segment in self._segments:
                if isinstance(segment, NativeSequence):
                    row[i:i + len(segment)] = segment.step_seconds()
                    i += len(segment)
                    continue
                t0 = clock()
                segment()
                row[i] = clock() - t0
                i += 1
        med = np.median(times, axis=0) * 1e3
        if med.sum() > 0:
            med *= np.median(times.sum(axis=1)) * 1e3 / med.sum()
        return Profile([StepTime(s.name, s.category, s.ops, float(m), s.predicted_ms)
                        for s, m in zip(self.steps, med)])


def _native_segments(calls: tuple[Callable[[], None], ...]) -> tuple[Callable[[], None], ...]:
    """``calls`` with each run of consecutive bound kernels made one native call."""
    segments: list[Callable[[], None]] = []
    run: list[BoundKernel] = []
    for call in calls + (None,):
        if isinstance(call, BoundKernel):
            run.append(call)
            continue
        if run:
            segments.append(compile_sequence(run) if len(run) > 1 else run[0])
            run = []
        if call is not None:
            segments.append(call)
    return tuple(segments)
