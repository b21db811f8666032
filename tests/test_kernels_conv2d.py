"""Generated conv2d kernels against the numpy reference (small shapes, few compiles)."""
import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from kernels import Conv2DConfig, Conv2DWorkload
from kernels.jit import clear_kernel_caches
from kernels.conv2d import (build_conv2d, columns_first, compact_input, conv2d_ir, pack_weight, reduction_block, supported,
                            takes_rows_first)
from kernels.packing import from_blocked, to_blocked, unpack_weight
from kernels.activations import ACTIVATIONS
from kernels.reference import activate, conv2d_nchw


def run_and_compare(wl, cfg, *, bias=False, residual=False, activation=None, seed=0, nthreads=None, rows_first=False,
                    search=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(wl.data_shape, dtype=np.float32)
    w = rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    b = rng.standard_normal(wl.out_channels, dtype=np.float32) if bias else None
    res = rng.standard_normal(wl.out_shape, dtype=np.float32) if residual else None
    k = build_conv2d(wl, cfg, bias=bias, residual=residual, activation=activation, rows_first=rows_first,
                     search=search)
    out = np.full(k.output_shape, np.nan, np.float32)  # every output must be written
    run = k.bind(to_blocked(x, cfg.ic_bn), pack_weight(w, reduction_block(wl, cfg), cfg.oc_bn), out, bias=b,
                 residual=None if res is None else to_blocked(res, cfg.oc_bn), nthreads=nthreads)
    run()
    expected = conv2d_nchw(x, w, strides=wl.strides, padding=wl.padding, dilation=wl.dilation, groups=wl.groups,
                           bias=b, residual=res, activation=activation)
    got = from_blocked(out)
    scale = np.sqrt(np.prod(wl.kernel_shape[1:]))  # sum of K unit-variance products
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * scale * 10)
    return got


def reference_by_loops(x, w, strides, padding, dilation, groups):
    """Seven nested loops: checks the numpy reference itself."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    t, l, b, r = padding
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    oh = (h + t + b - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wd + l + r - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for ni, oi, y, xx in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oi // og
        for ci, i, j in itertools.product(range(cg), range(kh), range(kw)):
            out[ni, oi, y, xx] += xp[ni, g * cg + ci, y * strides[0] + i * dilation[0],
                                     xx * strides[1] + j * dilation[1]] * w[oi, ci, i, j]
    return out


@pytest.mark.parametrize("groups,strides,padding,dilation", [
    (1, (1, 1), (0, 0, 0, 0), (1, 1)), (1, (2, 1), (1, 2, 0, 1), (1, 2)), (2, (1, 2), (2, 0, 1, 1), (2, 1))])
def test_reference_matches_loops(groups, strides, padding, dilation):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 6, 7))
    w = rng.standard_normal((6, 4 // groups, 3, 2))
    got = conv2d_nchw(x, w, strides=strides, padding=padding, dilation=dilation, groups=groups)
    np.testing.assert_allclose(got, reference_by_loops(x, w, strides, padding, dilation, groups), rtol=1e-10)


P1 = (1, 1, 1, 1)
CASES = [
    # 3x3 stride 1, vector-friendly blocks, tile not dividing the width (7 = 2*3 + 1)
    (Conv2DWorkload((1, 16, 7, 7), (32, 16, 3, 3), padding=P1), Conv2DConfig(8, 16, 3, True)),
    (Conv2DWorkload((1, 16, 7, 7), (32, 16, 3, 3), padding=P1), Conv2DConfig(16, 32, 7, False)),
    # stride 2, odd blocks 1 and 3, asymmetric padding
    (Conv2DWorkload((1, 3, 11, 9), (6, 3, 3, 3), strides=(2, 2), padding=(0, 1, 2, 0)), Conv2DConfig(1, 3, 2, False)),
    (Conv2DWorkload((1, 3, 11, 9), (6, 3, 3, 3), strides=(2, 2), padding=(0, 1, 2, 0)), Conv2DConfig(3, 2, 4, True)),
    # 7x7 stride 2 pad 3 (ResNet stem shape, small)
    (Conv2DWorkload((1, 3, 16, 16), (16, 3, 7, 7), strides=(2, 2), padding=(3, 3, 3, 3)), Conv2DConfig(3, 16, 4, False)),
    # 1x1 stride 1 and 2 with oh_bn (incl. a tail row block) and blocks 4/8, 32
    (Conv2DWorkload((1, 32, 5, 6), (64, 32, 1, 1)), Conv2DConfig(4, 32, 3, oh_bn=2)),
    (Conv2DWorkload((1, 32, 5, 6), (64, 32, 1, 1), strides=(2, 2)), Conv2DConfig(32, 8, 2, oh_bn=3)),
    # dilation 2, batch 2, blocks 2/4
    (Conv2DWorkload((2, 4, 9, 8), (8, 4, 3, 3), padding=(2, 2, 2, 2), dilation=(2, 2)), Conv2DConfig(2, 4, 4, True)),
    # non-square kernel, padding only on one side
    (Conv2DWorkload((1, 8, 6, 10), (16, 8, 1, 3), padding=(0, 0, 0, 2)), Conv2DConfig(8, 16, 5, True)),
    # grouped (not depthwise) conv: blocks divide the channels per group
    (Conv2DWorkload((1, 8, 6, 6), (12, 4, 3, 3), padding=P1, groups=2), Conv2DConfig(2, 3, 3, False)),
    # grouped, input blocks holding whole groups (2 and 4 of 4 channels: ResNeXt's 8 of 64), stride 2,
    # both kw orders, an output block narrower than a group
    (Conv2DWorkload((1, 16, 7, 7), (16, 4, 3, 3), padding=P1, groups=4), Conv2DConfig(8, 4, 3, False)),
    (Conv2DWorkload((1, 16, 9, 8), (16, 4, 3, 3), strides=(2, 2), padding=P1, groups=4), Conv2DConfig(16, 2, 2, True)),
    (Conv2DWorkload((2, 32, 6, 6), (32, 8, 3, 3), padding=P1, groups=4), Conv2DConfig(16, 8, 4, True, 2)),
    # oc_bn larger than the vector width and not a multiple of it
    (Conv2DWorkload((1, 4, 5, 5), (24, 4, 3, 3), padding=P1), Conv2DConfig(4, 24, 2, True)),
]


@pytest.mark.parametrize("wl,cfg", CASES)
def test_conv2d_matches_reference(wl, cfg):
    run_and_compare(wl, cfg)


@pytest.mark.parametrize("bias,residual,activation", [
    (True, False, None), (False, True, "relu"), (True, True, "relu6"), (True, False, "relu")])
def test_fused_epilogue(bias, residual, activation):
    wl = Conv2DWorkload((1, 8, 6, 7), (16, 8, 3, 3), padding=P1)
    got = run_and_compare(wl, Conv2DConfig(4, 16, 3, True), bias=bias, residual=residual, activation=activation,
                          seed=3)
    if activation == "relu6":
        assert got.max() == pytest.approx(6.0) and got.min() == 0.0  # clipping really happened
    if activation == "relu":
        assert got.min() == 0.0


def test_a_search_build_compiles_without_lsr_and_computes_the_same():
    """The search's kernels (kernels.jit.search_build) compile without loop strength reduction,
    into other object code, and still match the reference; the option is back for the next."""
    from kernels.conv2d import kernel_ir
    from kernels.jit import object_code, search_build

    wl, cfg = Conv2DWorkload((1, 64, 14, 14), (64, 64, 3, 3), padding=(1, 1, 1, 1)), Conv2DConfig(16, 16, 7)
    plan = kernel_ir(wl, cfg, bias=True)
    assert kernel_ir(wl, cfg, search=True, bias=True) == search_build(plan) != plan
    plain = object_code(plan)
    assert object_code(search_build(plan)) != plain
    assert object_code(plan) == plain
    searched = run_and_compare(wl, cfg, bias=True, search=True)
    np.testing.assert_array_equal(searched, run_and_compare(wl, cfg, bias=True))


def test_one_thread_and_all_threads_agree():
    wl, cfg = CASES[0]
    np.testing.assert_array_equal(run_and_compare(wl, cfg, nthreads=1), run_and_compare(wl, cfg, nthreads=2))


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_random_conv_matches_reference(data):
    draw = data.draw
    groups = draw(st.sampled_from([1, 1, 2, 4]))
    icg, ocg = draw(st.sampled_from([1, 2, 3, 4, 6])), draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers((kh - 1) * dh + 1, 9))
    w = draw(st.integers((kw - 1) * dw + 1, 9))
    wl = Conv2DWorkload((1, icg * groups, h, w), (ocg * groups, icg, kh, kw), strides=(sh, sw), padding=pad,
                        dilation=(dh, dw), groups=groups)
    wide = [] if icg == ocg == 1 else [icg * m for m in range(2, groups + 1) if groups % m == 0]  # depthwise: aligned
    ic_bn = draw(st.sampled_from([d for d in range(1, icg + 1) if icg % d == 0] + wide))  # wide: whole groups
    oc_bn = draw(st.sampled_from([d for d in range(1, ocg + 1) if ocg % d == 0]))
    cfg = Conv2DConfig(ic_bn, oc_bn, draw(st.integers(1, 5)), draw(st.booleans()), draw(st.integers(1, 3)))
    run_and_compare(wl, cfg, bias=draw(st.booleans()), activation=draw(st.sampled_from([None, "relu"])))


def test_input_blocks_hold_whole_groups_or_divide_one():
    g3 = Conv2DWorkload((1, 18, 6, 6), (18, 3, 3, 3), padding=P1, groups=6)  # 3 a group: the dense template's
    assert [supported(g3, Conv2DConfig(ic, 3, 3)) for ic in (1, 3, 6, 9, 18, 2, 4, 12)] == [True] * 5 + [False] * 3
    assert not supported(g3, Conv2DConfig(6, 6, 3))  # an output block across two groups
    assert build_conv2d(g3, Conv2DConfig(9, 1, 3)).weight_shape == (18, 1, 3, 3, 3, 1)
    run_and_compare(g3, Conv2DConfig(9, 1, 3), bias=True, activation="relu")  # blocks of 9: lanes 0, 3, 6
    run_and_compare(dataclasses.replace(g3, strides=(2, 2)), Conv2DConfig(18, 3, 2, False), bias=True)


def test_pack_weight_round_trip_and_layout():
    w = np.arange(8 * 6 * 2 * 3, dtype=np.float32).reshape(8, 6, 2, 3)
    p = pack_weight(w, 3, 4)
    assert p[1, 0, 1, 2, 2, 3] == w[1 * 4 + 3, 0 * 3 + 2, 1, 2]
    np.testing.assert_array_equal(unpack_weight(p), w)


def test_cached_and_validated():
    wl, cfg = CASES[0]
    k = build_conv2d(wl, cfg)
    assert build_conv2d(wl, cfg) is k
    with pytest.raises(ValueError, match="shape"):
        k(np.zeros((1, 16, 7, 7), np.float32), np.zeros(k.weight_shape, np.float32),
          np.zeros(k.output_shape, np.float32))
    with pytest.raises(ValueError, match="bias"):
        k(np.zeros(k.input_shape, np.float32), np.zeros(k.weight_shape, np.float32),
          np.zeros(k.output_shape, np.float32), bias=np.zeros(32, np.float32))
    with pytest.raises(ValueError, match="does not divide"):
        conv2d_ir(wl, Conv2DConfig(5, 16, 2))


def test_vector_width_from_host_cpu():
    """Good blocks use full-width FMAs of the host's vector width (query, not hard-coded)."""
    from kernels.jit import host_cpu

    lanes = host_cpu().lanes
    ir = conv2d_ir(*CASES[0])
    assert f"@llvm.fma.v{lanes}f32" in ir
    assert host_cpu().has("avx512f") == (lanes == 16)


@pytest.mark.parametrize("unroll,stride", [(False, 1), (True, 1), (False, 2), (True, 2)])
def test_wide_register_tile_does_not_spill(unroll, stride):
    """4 output vectors x 3 pixels: 12 accumulators, plus 3 broadcasts and 1 weight when the
    weights are loaded one at a time = AVX2's 16 registers. Holding all 4 weights instead
    (17 live) spilled accumulators in the hot loop and ran 1.5x slower on znver3; so did the
    stride-2 unrolled taps in the order kw 0, 1, 2 (pixels loaded for kw 0 and 2 stayed live
    across kw 1): 1.45 ms, 0.64 in the order 0, 2, 1."""
    import re

    from kernels.jit import assembly, host_cpu

    lanes = host_cpu().lanes
    wl = Conv2DWorkload((1, 32, 14, 14), (4 * lanes, 32, 3, 3), strides=(stride, stride), padding=P1)
    asm = assembly(conv2d_ir(wl, Conv2DConfig(16, 4 * lanes, 3, unroll), bias=True, activation="relu"))
    assert "vfmadd" in asm
    spills = [line for line in asm.splitlines() if re.search(r"[yz]mm\d+, -?\d*\(%rsp\)", line)]
    assert not spills, spills[:4]


@pytest.mark.parametrize("rows,oh_bn,per_step", [(3, 1, 0), (4, 2, 0), (2, 2, 3), (5, 1, 1)])
def test_multi_row_items_with_next_block_prefetch(monkeypatch, rows, oh_bn, per_step):
    """Items of several rows (the last one shorter, register tiles of ``oh_bn`` rows with a
    tail), with and without the next-block weight prefetch, over several threads."""
    import kernels.conv2d as conv

    monkeypatch.setattr(conv, "rows_per_item", lambda planes, r, tile, threads=None: rows)
    monkeypatch.setattr(conv, "prefetch_per_step", lambda nbytes, steps, l2_bytes=None: per_step)
    wl = Conv2DWorkload((2, 8, 7, 6), (12, 8, 3, 3), padding=(1, 0, 1, 2), strides=(1, 1))
    cfg = Conv2DConfig(ic_bn=4, oc_bn=4, ow_bn=4, unroll_kw=rows % 2 == 1, oh_bn=oh_bn)
    clear_kernel_caches()  # kernels and texts made under other settings must not be reused
    try:
        ir = conv2d_ir(wl, cfg)
        assert ir.count("call void @llvm.prefetch") > 0 if per_step else "call void @llvm.prefetch" not in ir
        for n in (1, 3):
            run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=n)
        run_and_compare(wl, cfg)  # no bias: the first batch starts from zero
    finally:
        clear_kernel_caches()


@given(lines=st.integers(1, 3000), steps=st.integers(1, 3000))
@example(lines=2, steps=100)  # few lines, many trips
@example(lines=3000, steps=7)  # several lines a trip
@example(lines=4096, steps=14336)  # ResNeXt-50's 1x1 conv 2048 -> 1024 on 7x7, oc_bn 32
def test_prefetch_lines_cover_the_slice_evenly_over_the_item(lines, steps):
    """Slot ``s`` (``per_step`` a trip) prefetches line ``min((s * scale) >> 32, lines - 1)``:
    every line of the slice, in order, each for as many slots as any other, give or take one."""
    from collections import Counter

    from kernels.conv2d import prefetch_scale

    per_step = -(-lines // steps)  # prefetch_per_step's count when two slices fit in L2
    slots = steps * per_step
    scale = prefetch_scale(lines, slots)
    taken = [min((s * scale) >> 32, lines - 1) for s in range(slots)]
    assert taken == sorted(taken) and set(taken) == set(range(lines))
    counts = Counter(taken).values()
    assert max(counts) - min(counts) <= 1


@given(lines=st.integers(2, 3000), slots=st.integers(1, 3000))
def test_fewer_prefetch_slots_than_lines_take_lines_evenly_apart(lines, slots):
    """A short last item (fewer slots than lines): distinct lines, increasing, from the first,
    the gaps between them differing by at most one."""
    from kernels.conv2d import prefetch_scale

    if slots >= lines:
        return
    scale = prefetch_scale(lines, slots)
    taken = [(s * scale) >> 32 for s in range(slots)]
    gaps = {b - a for a, b in zip(taken, taken[1:])}
    assert taken[0] == 0 and taken[-1] <= lines - 1 and min(gaps, default=1) >= 1
    assert max(gaps, default=1) - min(gaps, default=1) <= 1


def test_a_planes_short_last_item_gets_its_own_prefetch_spread():
    """ResNet-50's 28x28 3x3 conv in items of 9 rows: the last has 1, so its 1/9 of the steps
    must still spread over the whole next slice (with the full item's scale it reached 1/9)."""
    from kernels.conv2d import conv_context, prefetch_scale
    from kernels.jit import host_cpu

    wl = Conv2DWorkload((1, 128, 28, 28), (128, 128, 3, 3), padding=P1)
    cfg = Conv2DConfig(ic_bn=32, oc_bn=32, ow_bn=14)
    c = conv_context(wl, cfg, name="k", lanes=host_cpu().lanes, bias=True, residual=False, activation=None,
                     affine_out=False, affine_activation=None)
    if not c.pf_per_step or c.OH % c.G == 0:
        pytest.skip(f"no shorter last item here (G={c.G}, prefetch {c.pf_per_step})")
    last_rows = c.OH - (c.NB - 1) * c.G
    slots = -(-last_rows // c.ohb) * c.steps_per_row_tile * c.pf_per_step
    assert c.pf_scale_last == prefetch_scale(c.slice_lines, slots) > c.pf_scale
    assert ((slots - 1) * c.pf_scale_last) >> 32 >= c.slice_lines - 1  # its last slot: the last line
    ir = conv2d_ir(wl, cfg, bias=True)
    assert f"i64 {c.pf_scale_last}, i64 {c.pf_scale}" in ir  # chosen per item: the last or a full one
    run_and_compare(wl, cfg, bias=True, nthreads=2)


def test_bound_call_keeps_its_kernel_and_scratch_alive():
    """The bound call holds the scratch buffer's address, so it must keep the kernel alive
    (an unreferenced padded kernel used to be collected: a use-after-free)."""
    import gc
    import weakref

    from kernels.conv2d import Conv2DKernel

    wl = Conv2DWorkload((1, 8, 6, 6), (8, 8, 3, 3), padding=(1, 1, 1, 1))
    kernel = Conv2DKernel(wl, Conv2DConfig(4, 4, 3), False, False, None)
    x = np.ones(kernel.input_shape, np.float32)
    w = np.ones(kernel.weight_shape, np.float32)
    out = np.zeros(kernel.output_shape, np.float32)
    run = kernel.bind(x, w, out)
    alive = weakref.ref(kernel)
    del kernel
    gc.collect()
    assert alive() is not None
    run()
    assert out[0, 0, 1, 1, 0] == 72.0 and out[0, 0, 0, 0, 0] == 32.0  # interior 8x9 ones, corner 8x4


@pytest.mark.parametrize("padding,strides,dilation,ow_bn,unroll", [
    ((3, 3, 3, 3), (1, 1), (1, 1), 2, False),  # rows and columns with no tap at all
    ((2, 1, 0, 3), (2, 2), (2, 1), 3, True),  # asymmetric, strided, dilated rows
    ((1, 2, 1, 2), (1, 1), (1, 2), 16, False),  # one tile wider than the row: all edge
    ((0, 4, 0, 0), (1, 3), (1, 1), 1, True),  # left padding only, one-column tiles
])
def test_padding_skipped_in_kernel(padding, strides, dilation, ow_bn, unroll):
    """Row tiles read the unpadded input and skip the taps that fall in the padding."""
    from kernels.conv2d import pads_by_copy

    wl = Conv2DWorkload((1, 4, 5, 7), (4, 4, 3, 3), padding=padding, strides=strides, dilation=dilation)
    cfg = Conv2DConfig(ic_bn=2, oc_bn=4, ow_bn=ow_bn, unroll_kw=unroll)
    assert not pads_by_copy(wl, cfg) and "memcpy" not in conv2d_ir(wl, cfg)
    for n in (1, 2):
        run_and_compare(wl, cfg, bias=True, residual=True, activation="relu6", nthreads=n)


@pytest.mark.parametrize("act2", [None, "relu", "relu6"])
def test_affine_second_output(act2):
    """``out2 = act2(out * scale2 + shift2)`` per output channel, written with ``out``."""
    rng = np.random.default_rng(3)
    wl = Conv2DWorkload((1, 8, 6, 5), (8, 8, 3, 3), padding=(1, 1, 1, 1))
    cfg = Conv2DConfig(ic_bn=4, oc_bn=8, ow_bn=2)
    k = build_conv2d(wl, cfg, bias=True, residual=True, affine_out=True, affine_activation=act2)
    x, w = rng.standard_normal(wl.data_shape, dtype=np.float32), rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    b, res = rng.standard_normal(8, dtype=np.float32), rng.standard_normal(wl.out_shape, dtype=np.float32)
    scale, shift = rng.uniform(0.5, 2, 8).astype(np.float32), rng.standard_normal(8, dtype=np.float32) * 3
    out, out2 = np.empty(k.output_shape, np.float32), np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, 4), pack_weight(w, 4, 8), out, bias=b, residual=to_blocked(res, 8), out2=out2, scale2=scale,
      shift2=shift)
    y = conv2d_nchw(x, w, padding=wl.padding, bias=b, residual=res)
    y2 = y * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    y2 = y2 if act2 is None else np.clip(y2, 0, 6 if act2 == "relu6" else None)
    np.testing.assert_allclose(from_blocked(out), y, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(from_blocked(out2), y2, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="affine_activation"):
        conv2d_ir(wl, cfg, affine_out=True, affine_activation="gelu")


# Every activation of kernels.activations, with parameters where it takes them.
EVERY_ACTIVATION = ["relu", "relu6", ("clip", -1.0, 2.0), "sigmoid", "silu", "hard_swish", ("hard_sigmoid", 0.2, 0.5),
                    ("leaky_relu", 0.1)]


def test_every_activation_is_tested():
    assert {a if isinstance(a, str) else a[0] for a in EVERY_ACTIVATION} == set(ACTIVATIONS)


@pytest.mark.parametrize("act", EVERY_ACTIVATION, ids=str)
@pytest.mark.parametrize("ic_bn,oc_bn", [(1, 1), (4, 8)], ids=["plain", "blocked"])
def test_every_activation_in_both_outputs_of_the_epilogue(act, ic_bn, oc_bn):
    """``out = act(conv + bias + residual)`` and ``out2 = act(out * scale2 + shift2)``, in plain
    NCHW and in blocked layouts: the elementwise pass's activations, run in the tile store."""
    rng = np.random.default_rng(7)
    wl = Conv2DWorkload((1, 8, 5, 6), (16, 8, 3, 3), padding=P1)
    k = build_conv2d(wl, Conv2DConfig(ic_bn, oc_bn, 4, True), bias=True, residual=True, activation=act,
                     affine_out=True, affine_activation=act)
    x, w = rng.standard_normal(wl.data_shape, dtype=np.float32), rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    b, res = rng.standard_normal(16, dtype=np.float32), rng.standard_normal(wl.out_shape, dtype=np.float32)
    scale, shift = rng.uniform(0.5, 2, 16).astype(np.float32), rng.standard_normal(16, dtype=np.float32) * 3
    out, out2 = np.full(k.output_shape, np.nan, np.float32), np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, ic_bn), pack_weight(w, ic_bn, oc_bn), out, bias=b, residual=to_blocked(res, oc_bn), out2=out2,
      scale2=scale, shift2=shift)
    pre = conv2d_nchw(x, w, padding=wl.padding, bias=b, residual=res)  # sums of 72 products: |pre| up to ~30
    y = activate(pre, act)
    assert not np.allclose(y, pre, atol=0.1)  # the activation changes these values: the check can fail
    y2 = activate(y * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1), act)
    np.testing.assert_allclose(from_blocked(out), y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(from_blocked(out2), y2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("budget,groups,oh_bn,rows", [(64, 1, 1, 2), (128, 1, 2, 3), (32, 2, 1, 5), (64, 1, 2, 7)])
def test_one_by_one_reduction_in_batches(monkeypatch, budget, groups, oh_bn, rows):
    """A 1x1 conv whose weights overflow the L1 budget reduces in batches of input channel
    blocks, with partial sums in the output (the first batch from the bias, the last with the
    epilogue; 3 even batches, and 4 + 2 blocks), tail rows and columns, groups, the full
    epilogue and a second output."""
    import kernels.conv2d as conv

    monkeypatch.setattr(conv, "L1_WEIGHT_SHARE", budget / conv.host_cpu().l1d_bytes)
    monkeypatch.setattr(conv, "rows_per_item", lambda planes, r, tile, threads=None: rows)
    wl = Conv2DWorkload((1, 12, 7, 5), (8, 12 // groups, 1, 1), groups=groups)
    cfg = Conv2DConfig(ic_bn=2, oc_bn=4, ow_bn=3, oh_bn=oh_bn)
    batch = conv.ic_batch(wl, cfg)
    assert batch == budget // 32 and batch < 6 // groups  # 2 x 4 floats per block: several batches
    clear_kernel_caches()
    try:
        for n in (1, 3):
            run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=n)
        run_and_compare(wl, cfg)  # no bias: the first batch starts from zero
        rng = np.random.default_rng(5)
        k = conv.build_conv2d(wl, cfg, bias=True, affine_out=True, affine_activation="relu6")
        x = rng.standard_normal(wl.data_shape, dtype=np.float32)
        w = rng.standard_normal(wl.kernel_shape, dtype=np.float32)
        b, scale, shift = (rng.standard_normal(8, dtype=np.float32) for _ in range(3))
        out, out2 = np.full(k.output_shape, np.nan, np.float32), np.full(k.output_shape, np.nan, np.float32)
        k(to_blocked(x, 2), pack_weight(w, 2, 4), out, bias=b, out2=out2, scale2=scale, shift2=shift)
        y = conv2d_nchw(x, w, groups=groups, bias=b)
        np.testing.assert_allclose(from_blocked(out), y, rtol=1e-4, atol=1e-4)
        y2 = np.clip(y * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1), 0, 6)
        np.testing.assert_allclose(from_blocked(out2), y2, rtol=1e-4, atol=1e-4)
    finally:
        clear_kernel_caches()


@pytest.mark.parametrize("ow_bn,nthreads", [(5, None), (3, 1), (7, 2)])
def test_a_1x1_plane_computed_as_one_row_matches_the_reference(ow_bn, nthreads):
    """Tiles run across row ends (49 pixels as 9 tiles of 5 and a tail of 4), epilogue included."""
    from kernels.conv2d import join_rows

    wl = Conv2DWorkload((1, 16, 7, 7), (64, 16, 1, 1))
    cfg = Conv2DConfig(8, 4, ow_bn)
    assert join_rows(wl, cfg, threads=2).data_shape == (1, 16, 1, 49)
    run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=nthreads)
    # Few output channel blocks: items split rows, and 7 rows split evenly only into 1s.
    assert join_rows(wl, Conv2DConfig(8, 32, ow_bn), threads=2) == wl
    run_and_compare(wl, Conv2DConfig(8, 32, ow_bn), residual=True)


@pytest.mark.parametrize("shape,cfg,nthreads", [
    ((1, 64, 14, 14), Conv2DConfig(16, 16, 7), 2),  # 4 channel blocks, a claim of 4 items per row
    ((1, 48, 14, 9), Conv2DConfig(16, 8, 4, oh_bn=2), None),  # 2-row tiles, 7 row tiles, a tail column tile
    ((2, 32, 13, 6), Conv2DConfig(8, 16, 5, oh_bn=2), 1),  # two images, a 1-row tail tile, one thread
    ((1, 256, 16, 16), Conv2DConfig(16, 32, 3), 2),  # reduced in batches (ic_batch)
])
def test_1x1_rows_first_items_match_the_reference(two_threads, shape, cfg, nthreads):
    """Work items rows first (a thread's band is every channel block of some rows) compute the same conv."""
    wl = Conv2DWorkload(shape, (64, shape[1], 1, 1))
    assert takes_rows_first(wl, cfg, True, threads=2)
    assert "; items rows first" in conv2d_ir(wl, cfg, rows_first=True)
    # Unasked, only with 8 row tiles per thread (the last shape's 16 rows).
    assert ("; items rows first" in conv2d_ir(wl, cfg)) == (shape[2] == 16)
    run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=nthreads, rows_first=True)


def test_1x1_convs_with_rows_enough_take_rows_first_unasked(two_threads):
    """From ROWS_FIRST_TILES row tiles per thread a 1x1 conv runs rows first unasked (as the tuner
    times it), not with an input prologue; either way the same conv."""
    wl = Conv2DWorkload((1, 64, 16, 12), (32, 64, 1, 1))
    cfg = Conv2DConfig(16, 16, 4)
    assert takes_rows_first(wl, cfg, False) and "; items rows first" in conv2d_ir(wl, cfg)
    assert not takes_rows_first(wl, cfg, False, prologue=True)
    assert "; items rows first" not in conv2d_ir(wl, cfg, prologue=True)
    assert "; items rows first" in conv2d_ir(wl, cfg, prologue=True, rows_first=True)  # asked
    assert not takes_rows_first(Conv2DWorkload((1, 64, 15, 12), (32, 64, 1, 1)), cfg, False)  # 15 rows: 7.5 per thread
    run_and_compare(wl, cfg, bias=True, activation="relu", nthreads=2)


def test_rows_first_only_where_it_fits():
    w = Conv2DWorkload((1, 64, 14, 14), (64, 64, 1, 1))
    assert not takes_rows_first(w, Conv2DConfig(16, 16, 7), False, threads=2)  # 14 rows: under ROWS_FIRST_TILES per thread
    assert not takes_rows_first(w, Conv2DConfig(16, 64, 7), True, threads=2)  # one channel block
    assert not takes_rows_first(Conv2DWorkload((1, 64, 14, 14), (64, 64, 3, 3), padding=(1, 1, 1, 1)),
                                Conv2DConfig(16, 16, 7), True, threads=2)  # a 3x3 conv: asked or not, by its 14 rows
    assert takes_rows_first(Conv2DWorkload((1, 64, 16, 14), (64, 64, 3, 3), padding=(1, 1, 1, 1)),
                            Conv2DConfig(16, 16, 7), False, threads=2)  # 16 rows: unasked
    strided = Conv2DWorkload((1, 256, 32, 32), (256, 256, 1, 1), strides=(2, 2))  # 16 output rows
    assert compact_input(strided) is not None and not takes_rows_first(strided, Conv2DConfig(16, 16, 8), False, threads=2)
    tall = Conv2DWorkload((1, 32, 17, 17), (32, 32, 7, 1), padding=(3, 0, 3, 0))
    assert columns_first(tall, Conv2DConfig(16, 16, 9, True))
    assert not takes_rows_first(tall, Conv2DConfig(16, 16, 9, True), False, threads=1)  # by columns
    assert takes_rows_first(tall, Conv2DConfig(16, 16, 9, False), False, threads=1)  # by rows: 17 of them
    assert not takes_rows_first(Conv2DWorkload((1, 64, 7, 7), (64, 64, 1, 1)), Conv2DConfig(16, 16, 7, oh_bn=2),
                                True, threads=2)  # 4 row tiles for 2 threads: too few to share
    assert build_conv2d(w, Conv2DConfig(16, 64, 7), rows_first=True).rows_first is False


@pytest.mark.parametrize("ow_bn", [3, 5])
def test_1x1_rows_joined_within_work_items_match_the_reference(monkeypatch, ow_bn):
    """2 output channel blocks of 16 rows: 16 items of 2 rows each, computed as 8 rows of 32 pixels
    whose tiles run across the old row ends; reduced in 2 batches (ic_batch), epilogue included."""
    from kernels import threads
    from kernels.conv2d import ic_batch, join_rows

    monkeypatch.setattr(threads, "ROWS_FIRST_TILES", 10**6)  # channel blocks first (16 rows would go rows first)
    clear_kernel_caches()
    try:
        wl = Conv2DWorkload((1, 256, 16, 16), (64, 256, 1, 1))
        cfg = Conv2DConfig(8, 32, ow_bn)
        joined = join_rows(wl, cfg, threads=2)
        assert joined.data_shape == (1, 256, 8, 32)
        assert ic_batch(joined, cfg, 32 << 10) == 16  # of 32 blocks
        run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=2)
        run_and_compare(wl, cfg, residual=True, nthreads=1)
    finally:
        clear_kernel_caches()  # none built channel blocks first left for later tests


@pytest.mark.parametrize("shape,strides,cfg", [
    ((1, 32, 9, 11), (2, 2), Conv2DConfig(8, 16, 3)),  # odd sizes: the last row/column read is not the last
    ((2, 16, 12, 7), (3, 1), Conv2DConfig(16, 8, 4)),  # asymmetric, two images
    ((1, 64, 14, 14), (2, 2), Conv2DConfig(4, 32, 5)),  # sub-vector input blocks
])
def test_strided_1x1_reads_a_compact_copy_and_matches_the_reference(monkeypatch, shape, strides, cfg):
    from kernels import conv2d as conv
    from kernels.conv2d import compact_input

    monkeypatch.setattr(conv, "COMPACT_MIN_WEIGHTS", 0)  # these convs are small
    clear_kernel_caches()
    try:
        wl = Conv2DWorkload(shape, (32, shape[1], 1, 1), strides=strides)
        assert compact_input(wl).data_shape == (shape[0], shape[1], wl.out_height, wl.out_width)
        scratch = build_conv2d(wl, cfg)._scratch[0]
        assert scratch.shape == (shape[0], shape[1] // cfg.ic_bn, wl.out_height, wl.out_width, cfg.ic_bn)
        run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=2)
        run_and_compare(wl, cfg, nthreads=1)
    finally:  # kernels built without the size threshold must not serve later tests
        clear_kernel_caches()


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([1, 4, 16, 32]), st.sampled_from([8, 16, 32]), st.integers(1, 12), st.sampled_from([1, 2]),
       st.booleans(), st.sampled_from([None, "relu", "relu6"]))
def test_input_prologue(icb, ocb, ow_bn, stride, residual, act):
    """conv(act_in(x * scale + shift)) for a 1x1 conv, against the reference on the transformed input
    (rows joined, strided compact copies, batched reductions and tails alike)."""
    wl = Conv2DWorkload((1, 64, 7, 9), (32, 64, 1, 1), strides=(stride, stride))
    cfg = Conv2DConfig(icb, ocb, ow_bn)
    rng = np.random.default_rng(icb * 100 + ocb)
    x = rng.standard_normal(wl.data_shape, dtype=np.float32)
    w = rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    scale = rng.standard_normal(64, dtype=np.float32)
    shift = rng.standard_normal(64, dtype=np.float32)
    res = rng.standard_normal(wl.out_shape, dtype=np.float32) if residual else None
    k = build_conv2d(wl, cfg, residual=residual, prologue=True, prologue_activation=act)
    out = np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, icb), pack_weight(w, icb, ocb), out, residual=None if res is None else to_blocked(res, ocb),
      scale_in=scale, shift_in=shift)
    pre = activate(x * scale[None, :, None, None] + shift[None, :, None, None], act)
    want = conv2d_nchw(pre, w, strides=wl.strides, residual=res)
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-4, atol=1e-4)
    assert not np.allclose(want, conv2d_nchw(x, w, strides=wl.strides, residual=res), atol=0.1)  # it matters


def test_input_prologue_refused_where_it_cannot_be_exact():
    padded = Conv2DWorkload((1, 8, 6, 6), (8, 8, 3, 3), padding=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="unpadded 1x1"):
        build_conv2d(padded, Conv2DConfig(4, 4, 3), prologue=True)


def test_input_prologue_with_batched_reduction():
    """A weight slice past L1 reduces in batches (ic_batch): each batch transforms its own blocks."""
    from kernels.conv2d import ic_batch
    wl = Conv2DWorkload((1, 1024, 7, 7), (64, 1024, 1, 1))
    cfg = Conv2DConfig(16, 32, 7)
    assert ic_batch(wl, cfg) < 1024 // 16
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(wl.data_shape, dtype=np.float32), rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    scale, shift = rng.standard_normal(1024, dtype=np.float32), rng.standard_normal(1024, dtype=np.float32)
    k = build_conv2d(wl, cfg, bias=True, prologue=True, prologue_activation="relu")
    out = np.empty(k.output_shape, np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    k(to_blocked(x, 16), pack_weight(w, 16, 32), out, bias=b, scale_in=scale, shift_in=shift)
    pre = np.maximum(x * scale[None, :, None, None] + shift[None, :, None, None], 0)
    np.testing.assert_allclose(from_blocked(out), conv2d_nchw(pre, w, bias=b), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("wl", [
    Conv2DWorkload((1, 16, 9, 7), (8, 16, 7, 1), padding=(3, 0, 3, 0)),  # Inception's 7x1, small
    Conv2DWorkload((2, 8, 10, 6), (16, 8, 3, 1), strides=(2, 1), padding=(2, 0, 1, 0)),
    Conv2DWorkload((1, 8, 11, 5), (8, 8, 5, 1), strides=(1, 2)),
    Conv2DWorkload((1, 8, 12, 7), (8, 8, 3, 1), dilation=(2, 1), padding=(2, 0, 2, 0)),
], ids=["7x1", "3x1-stride-2-1", "5x1-stride-1-2", "3x1-dilated"])
def test_tall_convs_by_columns_match_reference(wl):
    """``unroll_kw`` on a tall conv runs it down the columns (the taps unrolled along them):
    tiles taller than the plane, tails, padded edges, strides and dilation on either axis."""
    from kernels.conv2d import columns_first

    for i, (ic, oc, ow) in enumerate([(1, 8, 3), (8, 16, 5), (4, 8, 8), (8, 4, 16)]):
        if wl.in_channels % ic or wl.out_channels % oc:
            continue
        cfg = Conv2DConfig(ic, oc, ow, True)
        assert columns_first(wl, cfg) and not columns_first(wl, dataclasses.replace(cfg, unroll_kw=False))
        run_and_compare(wl, cfg, bias=True, residual=i % 2 == 0, activation="relu", nthreads=1 + i % 2)


def test_tall_conv_by_columns_shares_its_broadcasts():
    """Down the columns, neighbouring taps of a tile share pixels, so the hot loop broadcasts
    fewer of them per FMA than over rows, where each tap has its own (the reason for the form)."""
    from kernels.jit import assembly

    wl = Conv2DWorkload((1, 32, 17, 17), (32, 32, 7, 1), padding=(3, 0, 3, 0))

    def per_fma(unroll):
        asm = assembly(conv2d_ir(wl, Conv2DConfig(8, 32, 9, unroll)))
        return asm.count("vbroadcastss") / asm.count("vfmadd")

    assert per_fma(True) < 0.5 * per_fma(False)


@pytest.mark.parametrize("batched", [False, True])
def test_1x1_convs_that_differ_in_input_channels_share_one_kernel(monkeypatch, batched):
    """A pointwise conv reads its count of input channel blocks at run time (runtime_channels):
    convs that differ only in their input channels get one kernel text, compiled once, and each
    matches the reference through it, with the reduction in L1 batches (the last one shorter) or
    whole, the next block's weights prefetched, an input prologue and the full epilogue."""
    import kernels.conv2d as conv

    if batched:
        monkeypatch.setattr(conv, "L1_WEIGHT_SHARE", 2 * 8 * 8 * 4 / conv.host_cpu().l1d_bytes)  # 2 blocks a batch
    monkeypatch.setattr(conv, "prefetch_per_step", lambda nbytes, steps, l2_bytes=None: 1)
    cfg = Conv2DConfig(ic_bn=8, oc_bn=8, ow_bn=4)
    sizes = (24, 40) if batched else (16, 24, 40)  # batched, 3 and 5 blocks: 2 + 1 and 2 + 2 + 1
    works = [Conv2DWorkload((1, ic, 6, 7), (16, ic, 1, 1)) for ic in sizes]
    clear_kernel_caches()
    try:
        epilogue = dict(bias=True, activation="relu", prologue=True, prologue_activation="relu")
        texts = {conv.kernel_ir(wl, cfg, **epilogue) for wl in works}
        assert len(texts) == 1
        assert all(conv.conv_context(wl, cfg, name="k", lanes=8, bias=True, residual=False, activation=None,
                                     affine_out=False, affine_activation=None).batches > 1 for wl in works) == batched
        kernels = [conv.build_conv2d(wl, cfg, **epilogue) for wl in works]
        assert len({id(k._module) for k in kernels}) == 1  # one compiled module
        rng = np.random.default_rng(3)
        for wl, k in zip(works, kernels):
            ic = wl.data_shape[1]
            x, w = rng.standard_normal(wl.data_shape, dtype=np.float32), rng.standard_normal(wl.kernel_shape,
                                                                                          dtype=np.float32)
            b, scale, shift = (rng.standard_normal(n, dtype=np.float32) for n in (16, ic, ic))
            out = np.full(k.output_shape, np.nan, np.float32)
            k.bind(to_blocked(x, 8), pack_weight(w, 8, 8), out, bias=b, scale_in=scale, shift_in=shift, nthreads=2)()
            pre = np.maximum(x * scale[None, :, None, None] + shift[None, :, None, None], 0)
            np.testing.assert_allclose(from_blocked(out), conv2d_nchw(pre, w, bias=b, activation="relu"),
                                       rtol=1e-4, atol=1e-4)
        for wl in works:  # run alone too, each one is a run of its own (no state left by another)
            run_and_compare(wl, cfg, bias=True, residual=True, activation="relu", nthreads=1)
    finally:
        clear_kernel_caches()


@pytest.mark.parametrize("wl, cfg", [
    (Conv2DWorkload((1, 96, 14, 14), (64, 96, 1, 1)), Conv2DConfig(16, 16, 7)),
    (Conv2DWorkload((1, 256, 28, 28), (128, 256, 1, 1)), Conv2DConfig(32, 32, 6)),
    (Conv2DWorkload((1, 992, 7, 7), (128, 992, 1, 1)), Conv2DConfig(32, 16, 7)),
    (Conv2DWorkload((1, 64, 9, 5), (32, 64, 1, 1)), Conv2DConfig(8, 8, 3, oh_bn=2)),
])
def test_a_runtime_reduction_works_out_the_sizes_compiled_in_before(wl, cfg):
    """The sizes a pointwise kernel computes from its reduction blocks at run time (reduction())
    are the integers conv_context computes, which a kernel compiled them in as."""
    import ctypes

    import kernels.conv2d as conv
    from kernels.jit import IRFunction, compile_ir, host_cpu

    c = conv.conv_context(wl, cfg, name="k", lanes=host_cpu().lanes, bias=False, residual=False, activation=None,
                          affine_out=False, affine_activation=None)
    assert c.runtime
    f = IRFunction("define void @sizes(ptr %args, ptr %out)")
    red = conv.reduction(f, c)
    values = [red.blocks, red.slice_floats, red.last_line, red.image_floats, red.tile_steps, red.row_tile_steps]
    for i, v in enumerate(values):
        f.store("i64", v, f.op(f"getelementptr inbounds i64, ptr %out, i64 {i}"), align=8)
    f.emit("ret void")
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(compile_ir(f.text())["sizes"])
    args = (ctypes.c_int64 * (conv.BLOCKS_ARG + 1))(*([0] * conv.BLOCKS_ARG + conv.conv2d_scalars(wl, cfg)))
    want = [c.ICgB, c.slice_floats, c.slice_lines - 1, c.ICB * c.Hs * c.Ws * c.icb, c.ICgB * c.KH * c.steps_ic,
            c.steps_per_row_tile]
    out = (ctypes.c_int64 * len(values))()
    fn(args, out)
    assert list(out) == want
