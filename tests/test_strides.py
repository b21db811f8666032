"""Strides moved up (graph_tuner.strides): the same function, fewer FLOPs, checked on the
numpy reference, on random networks, on the zoo and on the compiled executor."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from graph_tuner.builder import GraphBuilder
from graph_tuner.executor import compile_model, uniform_plan
from graph_tuner.executor.reference import run_reference
from graph_tuner.loading import load_model
from graph_tuner.strides import hoist_strides
from graph_tuner.zoo import get_model


def same_function(model, hoisted, seed=0):
    params = model.params(seed)
    x = np.random.default_rng(seed).standard_normal(model.op(model.inputs[0]).shape).astype(np.float32)
    for a, b in zip(run_reference(model, params, x), run_reference(hoisted, params, x)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)


def bottleneck_transition(size=8, odd_reader=False):
    """A pre-activation unit's sum read by two stride-2 1x1 convs (ResNet-50's stage transition)."""
    b = GraphBuilder("transition")
    x = b.relu(b.conv(b.input((1, 4, size, size)), 8, 3, padding=1, name="stem"))
    y = b.relu(b.batch_norm(b.conv(x, 4, 1, name="conv1")))
    y = b.relu(b.batch_norm(b.conv(y, 4, 3, padding=1, name="conv2")))
    s = b.add(b.conv(y, 8, 1, name="conv3"), x, name="sum")
    t = b.relu(b.batch_norm(s))
    outs = [b.conv(t, 6, 1, 2, name="next_conv1"), b.conv(t, 8, 1, 2, name="next_sc")]
    if odd_reader:
        outs.append(b.conv(t, 2, 3, 1, padding=1, name="full_size_reader"))
    return b.build(*outs)


def test_resnet_transition_moves_the_stride_to_the_3x3_conv():
    m = bottleneck_transition()
    h = hoist_strides(m)
    assert h.workload("conv2").strides == (2, 2) and h.op("conv2").shape[2:] == (4, 4)
    assert h.workload("conv3").data_shape[2:] == (4, 4)
    assert h.workload("next_conv1").strides == h.workload("next_sc").strides == (1, 1)
    assert h.workload("conv1").strides == (1, 1) and h.op("conv1").shape[2:] == (8, 8)  # x is read full size too
    pools = [op for op in h.ops if op.kind == "max_pool"]
    shortcut = m.op("sum").inputs[1]
    assert [(p.inputs, p.attrs["pool_size"], p.attrs["strides"]) for p in pools] == [([shortcut], (1, 1), (2, 2))]
    assert h.flops() < m.flops()
    same_function(m, h)


def test_nothing_moves_when_a_reader_needs_every_pixel():
    m = bottleneck_transition(odd_reader=True)
    assert hoist_strides(m) is m


@settings(max_examples=40, deadline=None)
@given(size=st.sampled_from([4, 6, 8, 12]), kernel=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]),
       pad=st.integers(0, 2), reader_stride=st.sampled_from([2, 3]), shortcut=st.booleans(), act=st.booleans())
def test_random_chains_compute_the_same(size, kernel, stride, pad, reader_stride, shortcut, act):
    """A conv of any kernel/stride/padding, then pixelwise ops and 1x1 convs, read by strided 1x1 convs."""
    b = GraphBuilder("chain")
    x = b.input((1, 3, size, size))
    assume(size + 2 * pad >= kernel)
    y = b.conv(x, 4, kernel, stride, pad, name="first")
    y = b.relu(y) if act else b.batch_norm(y)
    z = b.conv(y, 4, 1, name="pointwise")
    if shortcut:
        z = b.add(z, y)
    m = b.build(b.conv(z, 2, 1, reader_stride, name="reader_a"), b.conv(z, 3, 1, reader_stride, name="reader_b"))
    h = hoist_strides(m)
    same_function(m, h)
    assert h.flops() <= m.flops()
    if kernel > 1 and ((size + 2 * pad - kernel) // stride + 1) % reader_stride == 0:
        assert h.flops() < m.flops()  # the first conv takes the stride


def test_zoo_resnet50_is_loaded_hoisted_and_runs_equal():
    m = get_model("resnet-50")
    h = load_model("resnet-50")
    assert 0.89 < h.flops() / m.flops() < 0.91  # 7.72 -> 6.96 GFLOPs
    assert [op.name for op in h.convs()] == [op.name for op in m.convs()]  # logs still map by conv order
    assert hoist_strides(h) is h  # nothing left to move
    small = bottleneck_transition(size=16)
    hs = hoist_strides(small)
    params = small.params(0)
    x = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    want = run_reference(small, params, x)
    got = compile_model(hs, uniform_plan(hs, 8), params).run(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet-18", "densenet-121", "mobilenet-v2", "inception-v3"])
def test_other_zoo_models_unchanged(name):
    m = get_model(name)
    assert hoist_strides(m) is m


def test_onnx_file_is_loaded_hoisted_and_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from graph_tuner.onnx_export import save_onnx

    src = bottleneck_transition(size=12)
    path = tmp_path / "transition.onnx"
    save_onnx(src, src.params(seed=2), path)
    m = load_model(str(path))
    assert m.workload("conv2").strides == (2, 2)  # the file's 3x3 conv now strided
    x = np.random.default_rng(3).standard_normal((1, 4, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {m.inputs[0]: x})
    for block in (1, 8):
        for g, w in zip(compile_model(m, uniform_plan(m, block)).run(x), want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
