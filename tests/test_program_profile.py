"""Program.profile times the steps inside the native run (kernels.sequence's ``run_timed``):
no step is called from Python, the run computes what ``execute`` does, and a step that is not
a generated kernel is still timed, from Python, between native segments."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from graph_tuner.builder import GraphBuilder
from graph_tuner.executor import compile_model, uniform_plan
from graph_tuner.executor.program import Program
from kernels.jit import BoundKernel
from kernels.sequence import compile_sequence


def _program():
    b = GraphBuilder("chain")
    x = b.conv(b.input((1, 8, 10, 10)), 16, 3, padding=1, name="a")
    y = b.conv(b.relu(x), 16, 1, name="b")
    model = b.build(b.global_avg_pool(b.add(x, y)))
    prog = compile_model(model, uniform_plan(model, 8))
    x = np.random.default_rng(0).standard_normal(model.op(model.inputs[0]).shape, dtype=np.float32)
    return prog, prog.run(x)


def test_the_profile_calls_no_kernel_from_python(monkeypatch):
    prog, want = _program()
    assert prog.foreign_calls == 1 and len(prog.steps) >= 3

    def refused(self):
        raise AssertionError("a kernel called from Python while profiling")

    monkeypatch.setattr(BoundKernel, "__call__", refused)
    for o in prog.outputs:
        o.fill(np.nan)
    profile = prog.profile(repeat=3, warmup=0)  # no warm-up: the timed runs alone write the outputs
    assert [s.name for s in profile.steps] == [s.name for s in prog.steps]
    assert all(s.median_ms >= 0 for s in profile.steps) and profile.total_ms > 0
    for got, w in zip(prog.outputs, want):  # the timed run computed the network
        np.testing.assert_array_equal(got, w)


def _mixed(prog, calls):
    """``prog`` with its middle step called from Python (so three segments: native, Python, native)."""
    middle = len(prog.steps) // 2
    kernel = prog.steps[middle].fn

    def python_step():
        calls.append(1)
        kernel()

    steps = [dataclasses.replace(s, fn=python_step) if i == middle else s for i, s in enumerate(prog.steps)]
    mixed = Program(prog.model_name, steps, prog.inputs, prog.outputs, prog.predicted_ms)
    assert 1 < middle < len(steps) - 2 and mixed.foreign_calls == 3
    return mixed, middle


def test_a_python_step_between_native_segments_is_timed_too():
    prog, want = _program()
    calls = []
    mixed, middle = _mixed(prog, calls)
    for o in mixed.outputs:
        o.fill(np.nan)
    profile = mixed.profile(repeat=4, warmup=0)
    assert len(calls) == 4  # once per run
    assert len(profile.steps) == len(mixed.steps) and profile.steps[middle].median_ms > 0
    for got, w in zip(mixed.outputs, want):
        np.testing.assert_array_equal(got, w)


def test_each_step_gets_its_own_time_across_segments(monkeypatch):
    # Native segments' calls timed 1, 2, 3, ... ms by segment order and position; the Python
    # step 50 ms: each lands at its own step, in program order.
    import itertools
    import time

    from kernels.sequence import NativeSequence

    prog, _ = _program()
    mixed, middle = _mixed(prog, [])
    first = mixed._segments[0]

    def fake(self):
        offset = 0 if self is first else middle + 1
        return (np.arange(len(self)) + 1 + offset) * 1e-3

    ticks = itertools.count()
    monkeypatch.setattr(NativeSequence, "step_seconds", fake)
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * 0.050)
    got = [s.median_ms for s in mixed.profile(repeat=3, warmup=0).steps]
    want = [float(i + 1) for i in range(len(mixed.steps))]
    want[middle] = 50.0
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("n", [1, 3])
def test_step_seconds_times_each_call_once(n):
    from kernels.elementwise import build_elementwise

    k = build_elementwise((1, 2, 2, 2), 1)
    x = np.ones(k.input_shape, np.float32)
    bufs = [np.empty(k.output_shape, np.float32) for _ in range(n)]
    two, zero = np.full(2, 2, np.float32), np.zeros(2, np.float32)
    src = [x] + bufs[:-1]
    seq = compile_sequence([k.bind(s, two, zero, d) for s, d in zip(src, bufs)])
    seconds = seq.step_seconds()
    assert seconds.shape == (n,) and np.all(seconds >= 0) and np.isfinite(seconds).all()
    assert float(bufs[-1].sum()) == 8 * 2.0 ** n  # every call made, in order


def test_the_steps_share_the_median_run(monkeypatch):
    # Every run has a stall on some step (an interrupt): each step's median leaves it out, the
    # median run does not; the profile gives each step its median's share of the median run.
    from kernels.sequence import NativeSequence

    prog, _ = _program()
    n = len(prog.steps)
    base = np.arange(1, n + 1) * 1e-3
    runs = iter(range(100))

    def fake(self):
        r = next(runs)
        out = base.copy()
        out[r % n] += 0.010
        return out

    monkeypatch.setattr(NativeSequence, "step_seconds", fake)
    profile = prog.profile(repeat=2 * n + 1, warmup=0)
    got = np.array([s.median_ms for s in profile.steps])
    np.testing.assert_allclose(got, base * 1e3 * (base.sum() + 0.010) / base.sum())
    assert profile.total_ms == pytest.approx((base.sum() + 0.010) * 1e3)
