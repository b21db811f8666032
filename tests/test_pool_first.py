"""Average pools moved before 1x1 convs (graph_tuner.pool_first): the same function on the
numpy reference and compiled, fewer FLOPs, and left alone where it would not be exact."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from graph_tuner.builder import GraphBuilder
from graph_tuner.executor import compile_model, uniform_plan
from graph_tuner.executor.reference import run_reference
from graph_tuner.loading import load_model
from graph_tuner.pool_first import pool_before_pointwise
from graph_tuner.zoo import get_model


def outputs(model, seed=0):
    params = model.params(seed)
    x = np.random.default_rng(seed).standard_normal(model.op(model.inputs[0]).shape).astype(np.float32)
    return params, x, run_reference(model, params, x)


def transition(pool=2, stride=2, padding=0, include_pad=False, ceil=False, between=None, groups=1, size=8):
    b = GraphBuilder("transition")
    x = b.relu(b.batch_norm(b.input((1, 8, size, size))), name="pre")
    y = b.conv(x, 4, 1, groups=groups, name="squeeze")
    if between == "bn":
        y = b.bias_add(b.batch_norm(y, name="bn_after"), name="bias_after")
    elif between == "relu":
        y = b.relu(y, name="relu_after")
    p = b.avg_pool(y, pool, stride, padding=padding, ceil_mode=ceil, count_include_pad=include_pad, name="pool")
    return b.build(b.conv(p, 6, 3, padding=1, name="next"))


@settings(max_examples=40, deadline=None)
@given(pool=st.integers(1, 3), stride=st.integers(1, 3), padding=st.integers(0, 1), include_pad=st.booleans(),
       ceil=st.booleans(), between=st.sampled_from([None, "bn", "relu"]), groups=st.sampled_from([1, 2]),
       size=st.integers(3, 9))
def test_moved_exactly_where_it_may(pool, stride, padding, include_pad, ceil, between, groups, size):
    assume(2 * padding <= pool and size + 2 * padding >= pool)
    m = transition(pool, stride, padding, include_pad, ceil, between, groups, size)
    h = pool_before_pointwise(m)
    out = m.op("pool").shape[2]
    may = between != "relu" and (padding == 0 or not include_pad) and out < size  # fewer pixels only
    assert (h is not m) == may
    if may:
        assert h.op("squeeze").inputs == ["pool"] and h.op("pool").inputs == ["pre"]
        assert h.flops() < m.flops()
    _, _, want = outputs(m)
    _, _, got = outputs(h)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)


def test_not_moved_when_the_conv_output_has_other_readers_or_is_an_output():
    b = GraphBuilder("two")
    y = b.conv(b.input((1, 4, 8, 8)), 4, 1, name="c")
    m = b.build(b.avg_pool(y, 2, 2, name="pool"), b.relu(y))
    assert pool_before_pointwise(m) is m
    b = GraphBuilder("out")
    m = b.build(b.avg_pool(b.conv(b.input((1, 4, 8, 8)), 4, 1, name="c"), 2, 2, name="pool"))
    assert pool_before_pointwise(m) is m  # the pool is the output: its name stays its value


def test_densenet_transitions_run_on_the_pooled_pixels_and_compile_equal():
    m = load_model("densenet-121")
    assert 0.91 < m.flops() / get_model("densenet-121").flops() < 0.93  # 5.67 -> 5.21 GFLOPs
    assert [op.name for op in m.convs()] == [op.name for op in get_model("densenet-121").convs()]
    small = transition(size=16, between="bn")
    h = pool_before_pointwise(small)
    params, x, want = outputs(small, 3)
    for block in (1, 4):
        for g, w in zip(compile_model(h, uniform_plan(h, block), params).run(x), want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet-18", "resnet-50", "mobilenet-v2", "inception-v3"])
def test_other_models_unchanged(name):
    m = get_model(name)
    assert pool_before_pointwise(m) is m
