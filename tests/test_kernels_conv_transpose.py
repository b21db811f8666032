"""Transposed-conv kernels (kernels/conv_transpose.py) against the numpy reference: CenterNet's
depthwise up-sampling, dense and grouped convs, strides 1/2/4/8, blocks 1/8/16, odd sizes,
output padding, bias; and the column plan gathers exactly the taps that exist."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graph_tuner.executor.reference import conv_transpose
from kernels.conv_transpose import (ConvTransposeSpec, axis_taps, build_conv_transpose, column_tiles,
                                    conv_transpose_ir, pack_conv_transpose_weight)
from kernels.packing import from_blocked, to_blocked


def check(spec: ConvTransposeSpec, block: int, lanes: int | None = None, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.data_shape, dtype=np.float32)
    w = rng.standard_normal((spec.data_shape[1], spec.channels // spec.groups) + spec.kernel, dtype=np.float32)
    bias = rng.standard_normal(spec.channels, dtype=np.float32) if spec.bias else None
    k = build_conv_transpose(spec, block, lanes)
    out = np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, block if block > 1 else None), pack_conv_transpose_weight(w, spec, block), out, bias=bias)
    want = conv_transpose(x, w, spec.strides, spec.padding, spec.output_padding, spec.groups)
    if bias is not None:
        want = want + bias.reshape(1, -1, 1, 1)
    got = from_blocked(out) if block > 1 else out
    assert got.shape == want.shape == spec.out_shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("f", [2, 4, 8])
@pytest.mark.parametrize("block", [1, 8, 16])
@pytest.mark.parametrize("hw", [(5, 7), (1, 3), (8, 8)], ids=str)
def test_centernet_depthwise_upsampling(f, block, hw):
    """groups = channels, kernel 2f, stride f, padding f / 2, no bias: CenterNet's IDAUp."""
    spec = ConvTransposeSpec((1, 32) + hw, 32, (2 * f, 2 * f), (f, f), (f // 2,) * 4, groups=32)
    assert spec.out_shape == (1, 32, hw[0] * f, hw[1] * f)
    check(spec, block)


@pytest.mark.parametrize("spec,block", [
    (ConvTransposeSpec((2, 16, 5, 6), 16, (3, 3), (1, 1), (1, 1, 1, 1), groups=16, bias=True), 8),  # stride 1
    (ConvTransposeSpec((1, 16, 7, 5), 16, (3, 5), (2, 4), (0, 2, 1, 1), (1, 3), groups=16), 16),
    (ConvTransposeSpec((1, 8, 5, 5), 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), bias=True), 8),  # dense
    (ConvTransposeSpec((1, 16, 4, 3), 8, (4, 4), (2, 2), (1, 1, 1, 1)), 8),  # dense, fewer out channels
    (ConvTransposeSpec((1, 8, 5, 5), 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), groups=2), 8),  # 2 groups
    (ConvTransposeSpec((1, 16, 6, 5), 16, (4, 4), (4, 4), (0, 0, 0, 0), groups=2), 16),  # blocks within a group
    (ConvTransposeSpec((1, 12, 5, 3), 24, (3, 2), (2, 3), (0, 1, 2, 0), (1, 2), groups=4, bias=True), 4),
    (ConvTransposeSpec((1, 6, 5, 3), 4, (3, 2), (2, 3), (0, 1, 2, 0), (1, 2), groups=2, bias=True), 1),  # plain
    (ConvTransposeSpec((1, 4, 3, 3), 8, (5, 5), (4, 4), (0, 0, 0, 0), (3, 0), groups=4), 4),  # multiplier 2
    (ConvTransposeSpec((1, 16, 9, 9), 32, (4, 4), (4, 4), groups=16), 16),  # stride = kernel: no overlap
    (ConvTransposeSpec((1, 16, 1, 1), 16, (4, 4), (2, 2), (1, 1, 1, 1), groups=16), 16),  # one pixel
    (ConvTransposeSpec((1, 8, 3, 4), 8, (2, 2), (3, 3), (0, 0, 0, 0), (2, 1), groups=8), 8),  # gaps, out pad
], ids=lambda v: str(v) if isinstance(v, int) else f"g{v.groups}s{v.strides[0]}k{v.kernel[0]}")
def test_matches_reference(spec, block):
    check(spec, block)


@pytest.mark.parametrize("groups", [1, 2, 32])
@pytest.mark.parametrize("lanes", [4, 8])
def test_block_wider_than_the_vectors(groups, lanes):
    """A block of 16 in vectors of 4 or 8 lanes (AVX2, SSE): several accumulators a column."""
    check(ConvTransposeSpec((1, 32, 5, 6), 32, (4, 4), (2, 2), (1, 1, 1, 1), (1, 0), groups, bias=True), 16, lanes)


def test_block_must_divide_both_channel_counts():
    spec = ConvTransposeSpec((1, 16, 4, 4), 24, (2, 2), (2, 2))
    with pytest.raises(ValueError, match="does not divide 24"):
        conv_transpose_ir(spec, 16)
    with pytest.raises(ValueError, match="groups=3"):
        ConvTransposeSpec((1, 16, 4, 4), 24, (2, 2), (2, 2), groups=3)


def _plan_taps(out_w, in_w, k, s, pad, cap):
    """Every column's taps as the plan generates them, absolute."""
    border, (q0, count, per), body = column_tiles(out_w, in_w, k, s, pad, cap)
    taps = {}
    for tile in border:
        for ox, ts in tile.columns:
            assert ox not in taps
            taps[ox] = sorted(ts)
    for it in range(count):
        q = q0 + it * per
        for tile in body:
            assert len(tile.columns) <= cap
            for ox, ts in tile.columns:
                assert q * s - pad + ox not in taps
                taps[q * s - pad + ox] = sorted((kx, q + ix) for kx, ix in ts)
    return taps


@settings(max_examples=200, deadline=None)
@given(in_w=st.integers(1, 20), k=st.integers(1, 9), s=st.integers(1, 8), pad=st.integers(0, 4),
       extra=st.integers(0, 7), cap=st.integers(1, 16))
def test_the_column_plan_gathers_exactly_the_taps_that_exist(in_w, k, s, pad, extra, cap):
    """No zero multiplication: each output column sums exactly its taps on input pixels, once."""
    pad = min(pad, k - 1)
    out_w = (in_w - 1) * s + k - 2 * pad + extra % s
    if out_w < 1:
        return
    taps = _plan_taps(out_w, in_w, k, s, pad, cap)
    assert taps == {ox: sorted(axis_taps(ox, in_w, k, s, pad)) for ox in range(out_w)}


def test_centernet_columns_loop_in_periods():
    """f = 4 on 32 columns: 2 taps a column; the 31 whole periods (q = 1 ... 31) loop 3 at a time
    (12 accumulators), the one left over and the half periods at the edges are generated as is."""
    border, (q0, count, per), body = column_tiles(128, 32, 8, 4, 2, 12)
    assert (q0, count, per) == (1, 10, 3) and all(len(ts) == 2 for t in body for _, ts in t.columns)
    assert [ox for t in border for ox, _ in t.columns] == [0, 1, 122, 123, 124, 125, 126, 127]
    assert [len(ts) for t in border for _, ts in t.columns] == [1, 1, 2, 2, 2, 2, 1, 1]
