"""Concats written in place and reshapes as views (graph_tuner.executor.memory): the program
computes the model, runs no copy where a view is possible, and copies where it is not."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_tuner.builder import GraphBuilder
from graph_tuner.executor import compile_model, run_reference, uniform_plan
from graph_tuner.executor.memory import plan_views


def _run_and_check(model, block):
    prog = compile_model(model, uniform_plan(model, block))
    x = np.random.default_rng(0).standard_normal(model.op(model.inputs[0]).shape, dtype=np.float32)
    got = prog.run(x)
    for g, want in zip(got, run_reference(model, model.params(), x)):
        np.testing.assert_allclose(g, want, rtol=1e-3, atol=1e-3)
    prog.execute_stepwise()  # the same calls one by one from Python: the same result
    for g, o in zip(got, prog.outputs):
        np.testing.assert_array_equal(g, o)
    return prog


def _copies(prog):
    return sorted(s.name for s in prog.steps if s.ops and s.ops[0].startswith("cat"))


def _dense_block(batch=1, chained=True, layers=4):
    """DenseNet: chained (each concat = previous concat + one layer, our zoo's form) or
    torchvision's (each concat lists every earlier feature map)."""
    b = GraphBuilder("dense")
    x = b.conv(b.input((batch, 3, 6, 6)), 8, 3, padding=1, name="stem")
    feats, cat = [x], x
    for i in range(layers):
        y = b.conv(b.relu(b.batch_norm(cat)), 8, 3, padding=1, name=f"l{i}")
        feats.append(y)
        cat = b.concat([cat, y] if chained else list(feats), name=f"cat{i}")
    return b.build(b.flatten(b.global_avg_pool(cat)))


@pytest.mark.parametrize("chained", [True, False])
@pytest.mark.parametrize("block", [1, 8])
def test_dense_blocks_concatenate_in_place(chained, block):
    prog = _run_and_check(_dense_block(chained=chained), block)
    assert _copies(prog) == []
    assert prog.foreign_calls == 1  # every step a generated kernel: one native call per run


def test_batch_two_copies():
    prog = _run_and_check(_dense_block(batch=2), 8)
    assert _copies(prog) == [f"cat{i}" for i in range(4)]  # slices of a batch are not contiguous


def _shared_input():
    """x in two concats that do not nest (only one can hold it), a concat of the model input."""
    b = GraphBuilder("shared")
    inp = b.input((1, 8, 6, 6))
    x = b.conv(inp, 8, 1, name="x")
    y = b.conv(inp, 8, 1, name="y")
    z = b.conv(inp, 8, 1, name="z")
    p = b.concat([x, y], name="cat_p")
    q = b.concat([x, z], name="cat_q")
    r = b.concat([inp, z], name="cat_r")
    return b.build(b.add(b.conv(p, 8, 1), b.conv(q, 8, 1)), r)


def test_concats_that_cannot_be_views_copy():
    prog = _run_and_check(_shared_input(), 8)
    assert _copies(prog) == ["cat_q", "cat_r"]


def test_plan_views_refuses_overlaps():
    s = {k: (1, 2, 2, 2) for k in "xyz"} | {"p": (1, 4, 2, 2), "q": (1, 4, 2, 2), "d": (1, 4, 2, 2)}
    views = plan_views([("concat", "p", ["x", "y"]), ("concat", "q", ["y", "x"]), ("concat", "d", ["x", "x"])], s)
    assert views.done == {"p"}  # q wants x and y swapped; d wants x twice
    assert views.place["y"] == ("p", 8)


@st.composite
def concat_networks(draw):
    b = GraphBuilder("random")
    inp = b.input((1, 4, 5, 5))
    tensors = [b.conv(inp, 4, 1, name="c0")]
    read = set()
    for i in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            src = draw(st.sampled_from(tensors))
            tensors.append(b.conv(b.relu(src), 4 * draw(st.integers(1, 2)), 3, padding=1, name=f"c{i + 1}"))
            read.add(src)
        else:
            parts = draw(st.lists(st.sampled_from(tensors), min_size=2, max_size=4))
            tensors.append(b.concat(parts, name=f"cat{i}"))
            read.update(parts)
    # Every tensor nothing reads is an output (through a pooled head), so no op is dead code.
    return b.build(*[b.flatten(b.global_avg_pool(t)) for t in tensors if t not in read])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=concat_networks(), block=st.sampled_from([1, 4]))
def test_random_concat_graphs_compute_the_model(model, block):
    _run_and_check(model, block)
