"""Compiling ahead on helper processes (kernels.jit.compile_ahead, kernels.compile_helpers)
and the tuner's guesses: the kernels linked from a helper's object code compute what the
in-process ones do, a dead helper or bad IR costs nothing but time, and guessing never
changes what the search measures."""
import numpy as np
import pytest

from kernels import jit
from kernels.compile_helpers import HelperPool
from kernels.config import Conv2DConfig
from kernels.conv2d import Conv2DKernel, conv2d_ir, kernel_ir, pack_weight
from kernels.packing import from_blocked, to_blocked
from kernels.reference import conv2d_nchw
from kernels.tuner import tune
from kernels.workload import Conv2DWorkload

WL = Conv2DWorkload((1, 16, 9, 9), (32, 16, 3, 3), padding=(1, 1, 1, 1))
CONFIGS = [Conv2DConfig(8, 16, 4), Conv2DConfig(16, 16, 3), Conv2DConfig(4, 32, 5, True, 2)]


@pytest.fixture
def fresh_jit(monkeypatch, tmp_path):
    """An empty compile cache, on disk too, and helper pool for this test (the process's are
    left alone)."""
    from kernels import object_cache

    monkeypatch.setattr(object_cache, "DEFAULT_FOLDER", str(tmp_path / "objects"))
    monkeypatch.setattr(jit, "_engines", {})
    monkeypatch.setattr(jit, "_objects", {})
    monkeypatch.setattr(jit, "_helpers", None)
    yield
    if jit._helpers:
        jit._helpers.close()


def _check_against_reference(workload, config, module):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(workload.data_shape, dtype=np.float32)
    wt = rng.standard_normal(workload.kernel_shape, dtype=np.float32)
    shapes = Conv2DKernel(workload, config, False, False, None)  # its arguments and scratch
    linked = jit.Kernel(module, "conv2d", shapes.arg_shapes, shapes._scratch)
    out = np.zeros(shapes.output_shape, np.float32)
    linked(to_blocked(x, config.ic_bn), pack_weight(wt, config.ic_bn, config.oc_bn), out)
    expected = conv2d_nchw(x, wt, padding=workload.padding)
    np.testing.assert_allclose(from_blocked(out), expected, rtol=1e-4, atol=1e-4)


def test_needed_texts_are_compiled_and_guesses_linked_later(fresh_jit, monkeypatch, tmp_path):
    from kernels import object_cache

    monkeypatch.setattr(jit.threads, "usable_cores", lambda: 2)  # one helper even on one core
    texts = [conv2d_ir(WL, c) for c in CONFIGS]
    jit.compile_ahead(texts[:2], guesses=[texts[2]])  # one here, one on the helper: no room for a guess
    assert set(jit._engines) == set(texts[:2]) and not jit._objects
    jit.compile_ahead([texts[0]], guesses=[texts[2]])  # compiled already: nothing to do
    assert not jit._objects
    jit._engines.pop(texts[0])
    monkeypatch.setattr(object_cache, "DEFAULT_FOLDER", str(tmp_path / "none yet"))  # nor on disk
    jit.compile_ahead([texts[0]], guesses=[texts[2]])
    assert list(jit._objects) == [texts[2]]  # compiled by the helper, not linked yet
    assert jit._objects[texts[2]][:4] == b"\x7fELF"
    module = jit.compile_ir(texts[2])  # links the helper's object code
    assert texts[2] not in jit._objects and jit._engines[texts[2]] is module
    for text, config in zip(texts, CONFIGS):
        _check_against_reference(WL, config, jit._engines[text])


def test_a_dead_helper_or_bad_ir_costs_only_time(fresh_jit, monkeypatch):
    monkeypatch.setattr(jit.threads, "usable_cores", lambda: 2)
    texts = [conv2d_ir(WL, c) for c in CONFIGS]
    with pytest.raises(RuntimeError):  # bad IR that is needed fails as compile_ir fails
        jit.compile_ahead([texts[0], "define void @broken( {"])
    jit.compile_ahead([texts[1]], guesses=["define void @broken( {"])  # a bad guess: nothing
    assert texts[1] in jit._engines and not jit._objects
    for p in jit._helpers._procs:
        p.kill()
        p.wait()
    late = conv2d_ir(WL, Conv2DConfig(16, 32, 2))
    jit.compile_ahead([texts[2], late], guesses=[])  # the dead helper's share compiles here
    assert {texts[2], late} <= set(jit._engines) and jit._helpers.broken
    _check_against_reference(WL, Conv2DConfig(16, 32, 2), jit._engines[late])
    jit.compile_ahead([texts[0]], guesses=[])  # and from then on, everything
    assert texts[0] in jit._engines


def test_helper_pool_reports_errors_per_request():
    pool = HelperPool(1)
    try:
        with pytest.raises(RuntimeError, match="expected"):
            pool.submit("this is not IR").result()
        assert pool.submit('define i32 @f() {\n  ret i32 7\n}\n').result()[:4] == b"\x7fELF"  # still alive
    finally:
        pool.close()


class _Recording:
    """A fake measure with the KernelTimer's ``prepare`` hook, recording what it was given."""

    def __init__(self):
        self.prepared, self.measured = [], []

    def prepare(self, workload, config, guesses=()):
        self.prepared.append((config, list(guesses)))

    def __call__(self, workload, config):
        self.measured.append(config)
        return 1e-3 * (1 + abs(config.oc_bn - 16) / 16 + abs(config.ow_bn - 6) / 6)


def test_pairs_compile_together_and_never_depend_on_the_measure():
    w = Conv2DWorkload((1, 64, 14, 14), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    with_guesses = _Recording()
    plain = lambda wl, c: _Recording.__call__(plain_record, wl, c)  # noqa: E731
    plain_record = _Recording()
    a = tune(w, trials=25, measure=with_guesses, lanes=16, seed=3)
    b = tune(w, trials=25, measure=plain, lanes=16, seed=3)
    assert [m.index for m in a.measurements] == [m.index for m in b.measurements]
    # every measurement was prepared first; a pair's first with its second, which is measured next
    assert [c for c, _ in with_guesses.prepared] == with_guesses.measured
    assert [len(g) for _, g in with_guesses.prepared] == [1, 0] * 12 + [0]  # the 25th has no second
    firsts = with_guesses.prepared[0::2][:12]
    assert [g[0] for _, g in firsts] == with_guesses.measured[1::2]


def test_kernel_ir_is_what_build_compiles(monkeypatch):
    """The text compiled ahead is the text the build then asks for (else nothing is reused)."""
    import kernels.conv2d as conv2d
    import kernels.depthwise as depthwise

    asked = []

    def recording(text, cache=True):
        asked.append(text)
        return jit.compile_ir(text, cache)

    monkeypatch.setattr(conv2d, "compile_ir", recording)
    monkeypatch.setattr(depthwise, "compile_ir", recording)
    dw = Conv2DWorkload((1, 32, 8, 8), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32)
    for w, cfg, epilogue in [(WL, CONFIGS[0], dict(bias=True, activation="relu")),
                             (dw, Conv2DConfig(16, 16, 4), dict(bias=True, residual=True, activation="relu"))]:
        asked.clear()
        conv2d.build_conv2d.__wrapped__(w, cfg, **epilogue)
        assert asked == [kernel_ir(w, cfg, **epilogue)]
    with pytest.raises(ValueError, match="depthwise"):
        kernel_ir(dw, Conv2DConfig(16, 16, 4), prologue=True)


def test_helpers_cpu_time_counts_as_ours(fresh_jit, monkeypatch):
    """A load meter must not read our own helpers as another process using the cores."""
    import sys

    monkeypatch.setattr(jit.threads, "usable_cores", lambda: 2)
    from graph_tuner.host_state import _own_seconds

    assert jit.helper_cpu_seconds() == 0.0  # none started yet
    before = _own_seconds()
    jit.compile_ahead([conv2d_ir(WL, CONFIGS[0])], guesses=[conv2d_ir(WL, CONFIGS[1])])
    if sys.platform.startswith("linux"):
        helpers = jit.helper_cpu_seconds()
        assert helpers > 0.0  # it started and compiled the guess
        # the load meter's own time includes it (this process alone compiled for ~0.1 s too)
        assert _own_seconds() - before >= helpers


def test_a_programs_conv_kernels_are_compiled_ahead(fresh_jit, monkeypatch):
    """compile_model hands its conv steps' kernel texts to compile_ahead before it builds them,
    and they are the texts the builds then ask for (a text made another way would compile
    again, on one core). The test network has dense, depthwise and 1x1 convs and a concat."""
    import kernels.conv2d as conv2d
    import kernels.depthwise as depthwise
    from graph_tuner.executor import compile_model, uniform_plan
    from tests.test_executor import _branchy

    ahead, asked = [], []
    real_ahead = jit.compile_ahead

    def recording_ahead(needed, guesses=()):
        ahead.extend(needed)
        return real_ahead(needed, guesses)

    def recording(text, cache=True):
        asked.append(text)
        return jit.compile_ir(text, cache)

    monkeypatch.setattr(jit, "compile_ahead", recording_ahead)
    monkeypatch.setattr(conv2d, "compile_ir", recording)
    monkeypatch.setattr(depthwise, "compile_ir", recording)
    jit.clear_kernel_caches()
    m = _branchy()
    compile_model(m, uniform_plan(m, 8))
    convs = [op for op in m.ops if op.kind == "conv2d"]
    assert len(ahead) == len(set(ahead)) == len(convs) == 5 and set(ahead) <= set(asked)
    assert len(set(asked) - set(ahead)) == 1  # the dense layer's 1x1 conv, built by its own step


def test_a_winograd_pairs_transform_phases_compile_side_by_side_before_its_kernels(fresh_jit, monkeypatch):
    """Making a Winograd kernel's text compiles its transform phases, one by one in this process;
    the tuner's prepare hands a pair's phases to compile_ahead first, and they are the phases the
    kernels' texts then call: every compile happens inside compile_ahead, none while the texts are
    made or the pair is timed."""
    import re

    from kernels import winograd
    from kernels.tuner import KernelTimer

    monkeypatch.setattr(jit.threads, "usable_cores", lambda: 2)  # one helper even on one core
    conv = Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1))
    gemm = winograd.gemm_workload(conv)
    first, second = Conv2DConfig(8, 16, 4), Conv2DConfig(16, 8, 2)  # four distinct phases
    assert winograd.gemm_supported(gemm, first) and winograd.gemm_supported(gemm, second)
    calls, outside = [], []
    inside = [0]
    real_ahead, real_jit = jit.compile_ahead, jit._jit

    def recording_ahead(needed, guesses=()):
        calls.append((list(needed), list(guesses)))
        inside[0] += 1
        try:
            return real_ahead(needed, guesses)
        finally:
            inside[0] -= 1

    def recording_jit(module, keep=None):
        if not inside[0]:
            outside.append(module)
        return real_jit(module, keep)

    monkeypatch.setattr(jit, "compile_ahead", recording_ahead)
    monkeypatch.setattr(jit, "_jit", recording_jit)
    jit.clear_kernel_caches()
    timer = KernelTimer(winograd={gemm: conv})
    timer.prepare(gemm, first, [second])
    (phases, _), (kernels, guesses) = calls
    assert len(set(phases)) == 4 and all(t in jit._engines for t in phases)
    names = {n for t in phases for n in re.findall(r"define void @(gt_winograd_(?:in|out)_[0-9a-f]{20})\(", t)}
    assert len(names) == 4
    for text in kernels + guesses:  # each kernel calls an input and an output phase compiled first
        assert sum(f"declare void @{n}(" in text for n in names) == 2
    assert timer(gemm, first) > 0 and timer(gemm, second) > 0
    assert not outside  # nothing compiled one by one: not the phases, not the pair's kernels
