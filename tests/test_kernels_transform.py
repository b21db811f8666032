"""Layout-transform kernels against numpy reshapes (all directions)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernels.layout_transform import blocked_shape, build_transform, build_transforms, from_blocked, to_blocked


def test_numpy_helpers_match_index_definition():
    x = np.random.default_rng(0).standard_normal((2, 12, 3, 4)).astype(np.float32)
    y = to_blocked(x, 4)
    assert y.shape == (2, 3, 3, 4, 4)
    assert y[1, 2, 0, 3, 1] == x[1, 2 * 4 + 1, 0, 3]  # NCHW[b]c definition
    np.testing.assert_array_equal(from_blocked(y), x)


@pytest.mark.parametrize("src,dst", [(None, 8), (8, None), (4, 8), (8, 4), (3, 2), (None, 24), (24, 3), (1, 6),
                                     (None, 96), (96, None)])
def test_transform_all_directions(src, dst):
    shape = (2, 96 if 96 in (src, dst) else 24, 3, 5)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    t = build_transform(shape, src, dst)
    assert t.input_shape == blocked_shape(shape, src) and t.output_shape == blocked_shape(shape, dst)
    out = np.full(t.output_shape, np.nan, np.float32)
    t(to_blocked(x, src), out)
    np.testing.assert_array_equal(out, to_blocked(x, dst))


@pytest.mark.parametrize("w", [16, 37])  # whole 16-pixel tiles; two and a tail of 5
@pytest.mark.parametrize("src,dst,c", [(15, None, 30), (16, None, 32), (64, None, 64), (85, None, 85), (64, 32, 64),
                                       (32, 64, 64), (6, 4, 12), (15, 16, 240), (None, 15, 30)])
def test_transform_tiles_and_runs(src, dst, c, w):
    """Into plain NCHW by register tiles (by runs of 1 from blocks over 64), between blocks
    by runs of gcd(src, dst) channels (runs of 32, of 2, and of 1 for 15 -> 16), against numpy."""
    shape = (2, c, 3, w)
    x = np.random.default_rng(c + w).standard_normal(shape).astype(np.float32)
    t = build_transform(shape, src, dst)
    out = np.full(t.output_shape, np.nan, np.float32)
    t(to_blocked(x, src), out)
    np.testing.assert_array_equal(out, to_blocked(x, dst))


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([None, 1, 2, 3, 4, 6, 12]), st.sampled_from([None, 1, 2, 3, 4, 6, 12]),
       st.integers(1, 4), st.integers(1, 9))
def test_random_transform(src, dst, h, w):
    shape = (1, 12, h, w)
    x = np.random.default_rng(h * 10 + w).standard_normal(shape).astype(np.float32)
    t = build_transform(shape, src, dst)
    out = np.empty(t.output_shape, np.float32)
    t(to_blocked(x, src), out)
    np.testing.assert_array_equal(from_blocked(out), x)


def test_transforms_built_many_to_a_module(monkeypatch):
    # Several to one linked module, split over modules (per_module=3), each its own function:
    # every one moves its own tensor, and build_transform hands back the batched kernel. The
    # modules are compiled ahead together (on this process and a helper, side by side).
    keys = [((1, 24, 2, 3 + i), src, dst) for i, (src, dst) in enumerate([(None, 8), (8, 4), (4, None), (3, 6),
                                                                         (6, 24), (2, 12), (12, 2)])]
    from kernels import layout_transform

    for shape, src, dst in keys:  # not built by an earlier test in this process
        layout_transform._built.pop((shape, src, dst), None)
    ahead = []
    real_ahead = layout_transform.compile_ahead
    monkeypatch.setattr(layout_transform, "compile_ahead", lambda texts: ahead.append(texts) or real_ahead(texts))
    build_transforms(keys + keys[:2], per_module=3)
    modules = {id(build_transform(*k)._module) for k in keys}
    assert len(modules) == 3 and [len(texts) for texts in ahead] == [3]
    few = [((1, 16, 3, 5 + i), None, 8) for i in range(3)]  # fewer than a module holds: still two, side by side
    for k in few:
        layout_transform._built.pop(k, None)
    build_transforms(few)
    assert len({id(build_transform(*k)._module) for k in few}) == 2 and [len(t) for t in ahead[1:]] == [2]
    for i, (shape, src, dst) in enumerate(keys):
        x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        t = build_transform(shape, src, dst)
        assert t.name == f"transform_{i % 3}"
        out = np.full(t.output_shape, np.nan, np.float32)
        t(to_blocked(x, src), out)
        np.testing.assert_array_equal(out, to_blocked(x, dst))


def test_bad_block_rejected():
    with pytest.raises(ValueError, match="does not divide"):
        build_transform((1, 12, 2, 2), 5, None)
