"""Depthwise kernels, and grouped convs whose block holds whole groups, against the numpy reference."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from kernels import Conv2DConfig, Conv2DWorkload
from kernels.conv2d import build_conv2d
from kernels.depthwise import DepthwiseKernel, build_depthwise, lanewise_groups, runs_lanewise
from kernels.packing import from_blocked, pack_depthwise_weight, pack_weight, to_blocked
from kernels.reference import activate, conv2d_nchw
from test_kernels_conv2d import run_and_compare


def check(wl, cfg, *, bias=False, residual=False, activation=None, row_means=False, seed=0):
    """The kernel's output (and with ``row_means`` each output row's mean) against numpy's."""
    rng = np.random.default_rng(seed)
    c, g = wl.in_channels, wl.kernel_shape[1]
    x = rng.standard_normal(wl.data_shape, dtype=np.float32)
    w = rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    b = rng.standard_normal(c, dtype=np.float32) if bias else None
    res = rng.standard_normal(wl.out_shape, dtype=np.float32) if residual else None
    k = build_depthwise(wl, cfg, bias=bias, residual=residual, activation=activation, row_means=row_means)
    out = np.full(k.output_shape, np.nan, np.float32)
    rows = np.full(k.arg_shapes["row_means"], np.nan, np.float32) if row_means else None
    k(to_blocked(x, cfg.oc_bn), pack_weight(w, g, cfg.oc_bn), out, bias=b,
      residual=None if res is None else to_blocked(res, cfg.oc_bn), row_means=rows)
    pre = conv2d_nchw(x, w, strides=wl.strides, padding=wl.padding, dilation=wl.dilation, groups=wl.groups,
                      bias=b, residual=res)
    expected = activate(pre, activation)
    np.testing.assert_allclose(from_blocked(out), expected, rtol=1e-4, atol=1e-4)
    if row_means:
        np.testing.assert_allclose(from_blocked(rows)[..., 0], expected.mean(axis=3), rtol=1e-4, atol=1e-5)
    return pre, expected


@pytest.mark.parametrize("wl,cfg", [
    (Conv2DWorkload((1, 32, 9, 9), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32), Conv2DConfig(16, 16, 4, True)),
    (Conv2DWorkload((1, 32, 9, 9), (32, 1, 3, 3), strides=(2, 2), padding=(0, 1, 1, 0), groups=32),
     Conv2DConfig(32, 32, 3, False)),
    (Conv2DWorkload((2, 6, 8, 7), (6, 1, 5, 5), padding=(2, 2, 2, 2), dilation=(1, 2), groups=6),
     Conv2DConfig(3, 3, 2, True)),
    (Conv2DWorkload((1, 4, 5, 5), (4, 1, 3, 3), groups=4), Conv2DConfig(1, 1, 2, False)),
])
def test_depthwise_matches_reference(wl, cfg):
    check(wl, cfg)


def test_depthwise_epilogue_and_dispatch():
    wl = Conv2DWorkload((1, 16, 6, 6), (16, 1, 3, 3), padding=(1, 1, 1, 1), groups=16)
    check(wl, Conv2DConfig(8, 8, 3, True), bias=True, residual=True, activation="relu6", seed=2)
    assert isinstance(build_conv2d(wl, Conv2DConfig(8, 8, 3, True)), DepthwiseKernel)
    with pytest.raises(ValueError, match="ic_bn == oc_bn"):
        build_depthwise(wl, Conv2DConfig(4, 8, 3))


@pytest.mark.parametrize("act", ["relu", "relu6", ("clip", -1.0, 2.0), "sigmoid", "silu", "hard_swish",
                                 ("hard_sigmoid", 0.2, 0.5), ("leaky_relu", 0.1)], ids=str)
@pytest.mark.parametrize("bn", [1, 8], ids=["plain", "blocked"])
def test_every_activation_in_the_epilogue(act, bn):
    """Each activation of kernels.activations after the bias and residual add, plain and blocked."""
    wl = Conv2DWorkload((1, 16, 5, 6), (16, 1, 3, 3), padding=(1, 1, 1, 1), groups=16)
    pre, want = check(wl, Conv2DConfig(bn, bn, 4, True), bias=True, residual=True, activation=act, seed=4)
    assert not np.allclose(want, pre, atol=0.1)  # the activation changes these values: the check can fail


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2),
       st.tuples(*[st.integers(0, 3)] * 4), st.integers(3, 9), st.integers(1, 6), st.booleans(), st.booleans())
def test_random_depthwise(bn, k, stride, dilation, pad, width, ow_bn, unroll, row_means):
    """Borders handled in the kernel: any padding (wider than the kernel too: rows and columns
    with no tap inside the input), strides and dilations, every column tiling; the row means
    summed over border columns and tiles alike."""
    assume(min(width + pad[1] + pad[3], 7 + pad[0] + pad[2]) >= dilation * (k - 1) + 1)  # an output
    wl = Conv2DWorkload((1, 16, 7, width), (16, 1, k, k), strides=(stride, stride), padding=pad,
                        dilation=(dilation, dilation), groups=16)
    check(wl, Conv2DConfig(bn, bn, ow_bn, unroll), bias=True, row_means=row_means)


@pytest.mark.parametrize("bn", [8, 32], ids=["one vector", "two vectors"])
def test_row_means_after_the_activation(bn):
    """Each output row's mean, of the values stored (after the activation), at batch 2: what a
    squeeze-excite's pool reads instead of the output (graph_tuner.fusion, rule 6)."""
    wl = Conv2DWorkload((2, 64, 9, 13), (64, 1, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1), groups=64)
    pre, want = check(wl, Conv2DConfig(bn, bn, 4, True), bias=True, activation="silu", row_means=True, seed=5)
    assert not np.allclose(want.mean(axis=3), pre.mean(axis=3), atol=0.05)  # the mean of the activated values


def test_row_means_only_on_the_depthwise_template():
    wl = Conv2DWorkload((1, 32, 6, 6), (32, 4, 3, 3), padding=(1, 1, 1, 1), groups=8)  # 8-lane blocks of 4 groups
    assert isinstance(build_conv2d(wl, Conv2DConfig(8, 8, 3), row_means=True), DepthwiseKernel)
    with pytest.raises(ValueError, match="only depthwise kernels write row means"):
        build_conv2d(wl, Conv2DConfig(4, 4, 3), row_means=True)  # blocks within a group: the dense template


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([(2, 4), (2, 6), (2, 16), (4, 8), (4, 16), (4, 24), (4, 32)]), st.integers(1, 3),
       st.integers(1, 2), st.tuples(*[st.integers(0, 2)] * 4), st.integers(3, 9), st.integers(1, 6), st.booleans(),
       st.booleans())
def test_random_grouped_in_one_block(g_bn, k, stride, pad, width, ow_bn, unroll, residual):
    """A grouped conv of g channels per group in blocks of bn > g channels (ResNeXt's 4 per group
    in 16 lanes): each lane sums its own group's g inputs, across several vectors and tails
    (24 = 16 + 8 lanes, 6 lanes); any padding, stride, tiling and epilogue."""
    g, bn = g_bn
    c = 2 * 48
    assume(min(width + pad[1] + pad[3], 7 + pad[0] + pad[2]) >= k)  # an output
    wl = Conv2DWorkload((1, c, 7, width), (c, g, k, k), strides=(stride, stride), padding=pad, groups=c // g)
    cfg = Conv2DConfig(bn, bn, ow_bn, unroll)
    assert runs_lanewise(wl, cfg)
    assert isinstance(build_conv2d(wl, cfg, bias=True), DepthwiseKernel)
    check(wl, cfg, bias=True, residual=residual, activation="relu")


def test_grouped_blocks_within_a_group_keep_the_dense_template():
    """Blocks that divide a group's channels, and groups of more than 4
    or of 3 channels (which would not divide every vector), are the dense template's."""
    wl = Conv2DWorkload((1, 32, 6, 6), (32, 4, 3, 3), padding=(1, 1, 1, 1), groups=8)
    for cfg in (Conv2DConfig(4, 4, 3), Conv2DConfig(2, 4, 3), Conv2DConfig(1, 2, 3)):
        assert not runs_lanewise(wl, cfg) and not isinstance(build_conv2d(wl, cfg), DepthwiseKernel)
    for g, bn in [(8, 16), (3, 6)]:
        wg = Conv2DWorkload((1, 48, 6, 6), (48, g, 3, 3), padding=(1, 1, 1, 1), groups=48 // g)
        assert not lanewise_groups(wg) and not runs_lanewise(wg, Conv2DConfig(bn, bn, 3))
        with pytest.raises(ValueError, match="2 or 4 channels per group"):
            build_depthwise(wg, Conv2DConfig(bn, bn, 3))



def test_convs_and_pools_with_rows_enough_take_rows_first_and_match_the_reference(two_threads):
    """From ROWS_FIRST_TILES output row tiles per thread (kernels.threads.rows_first_items) a
    depthwise or grouped conv's items go rows first, in both kernels that run them (the lanewise
    one and the dense template), and so do a 3x3 conv's and a pool's; each the same op either
    way. With too few rows, or one channel block, they keep channel blocks first."""
    from kernels.conv2d import Conv2DKernel, conv2d_ir, takes_rows_first
    from kernels.depthwise import depthwise_ir
    from kernels.pooling import build_pool2d, pool2d_ir

    lanewise = Conv2DWorkload((2, 32, 16, 9), (32, 4, 3, 3), padding=(1, 1, 1, 1), groups=8)
    depthwise = Conv2DWorkload((1, 32, 33, 9), (32, 1, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1), groups=32)
    cfg = Conv2DConfig(8, 8, 4)
    assert runs_lanewise(lanewise, cfg)
    for wl in (lanewise, depthwise):
        assert "_rows_item" in depthwise_ir(wl, cfg)
        check(wl, cfg, bias=True, residual=True, activation="relu", seed=3)
    check(depthwise, cfg, activation="silu", row_means=True, seed=6)  # a squeeze-excite's row means too
    short = Conv2DWorkload((1, 32, 15, 9), (32, 4, 3, 3), padding=(1, 1, 1, 1), groups=8)  # 7.5 rows a thread
    assert "_rows_item" not in depthwise_ir(short, cfg)
    assert "_rows_item" not in depthwise_ir(depthwise, Conv2DConfig(32, 32, 4))  # one channel block

    grouped = Conv2DWorkload((1, 32, 33, 10), (32, 8, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1), groups=4)
    dense = Conv2DWorkload((2, 8, 16, 10), (32, 8, 3, 3), padding=(1, 1, 1, 1))
    for wl, cfg in ((grouped, Conv2DConfig(8, 4, 5)), (dense, Conv2DConfig(8, 8, 5))):
        assert takes_rows_first(wl, cfg, False) and "; items rows first" in conv2d_ir(wl, cfg)
        assert isinstance(build_conv2d(wl, cfg), Conv2DKernel) and build_conv2d(wl, cfg).rows_first
        run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=2, seed=4)
    assert not takes_rows_first(grouped, Conv2DConfig(8, 32, 5), False)  # one channel block

    x = np.random.default_rng(5).standard_normal((2, 16, 35, 9), dtype=np.float32)
    args = (x.shape, 8, "max", (3, 3), (2, 2), (1, 1, 1, 1), (18, 5))
    assert "; items rows first" in pool2d_ir(*args)
    assert "; items rows first" not in pool2d_ir((2, 16, 29, 9), *args[1:-1], (15, 5))  # 7.5 rows a thread
    assert "; items rows first" not in pool2d_ir(x.shape, 16, *args[2:])  # one channel block
    k = build_pool2d(*args)
    out = np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, 8), out)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 2), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(from_blocked(out), windows.max(axis=(4, 5)))
