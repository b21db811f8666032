"""Winograd F(4x4, 3x3) convs (kernels.winograd) against the numpy reference, and as plan
candidates (graph_tuner.winograd): tuned as their GEMM, chosen per layer, run by the executor."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernels import Conv2DConfig, Conv2DWorkload
from kernels.conv2d import pack_weight
from kernels.packing import from_blocked, to_blocked
from kernels.reference import activate, conv2d_nchw
from kernels.tuner import KernelTimer
from kernels.winograd import (build_winograd, gemm_supported, gemm_workload, supported, transform_weight,
                              winograd_epilogue)


def _run(wl: Conv2DWorkload, cfg: Conv2DConfig, seed: int = 0, **epilogue):
    rng = np.random.default_rng(seed)
    oc = wl.out_channels
    x = rng.standard_normal(wl.data_shape, dtype=np.float32)
    w = rng.standard_normal(wl.kernel_shape, dtype=np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    res = rng.standard_normal((wl.data_shape[0], oc, wl.out_height, wl.out_width)).astype(np.float32)
    scale, shift = rng.standard_normal(oc).astype(np.float32), rng.standard_normal(oc).astype(np.float32)
    k = build_winograd(wl, cfg, **epilogue)
    out = np.full(k.output_shape, np.nan, np.float32)  # every output must be written
    out2 = np.full(k.output_shape, np.nan, np.float32)
    args = {}
    if epilogue.get("bias"):
        args["bias"] = b
    if epilogue.get("residual"):
        args["residual"] = to_blocked(res, cfg.oc_bn)
    if epilogue.get("affine_out"):
        args.update(out2=out2, scale2=scale, shift2=shift)
    k(to_blocked(x, cfg.ic_bn), pack_weight(transform_weight(w), cfg.ic_bn, cfg.oc_bn), out, **args)
    y = conv2d_nchw(x, w, padding=wl.padding, bias=b if epilogue.get("bias") else None,
                    residual=res if epilogue.get("residual") else None, activation=epilogue.get("activation"))
    # Winograd's rounding error scales with the sums before the activation: a ReLU that
    # zeroes all but one small output (a 1x1 output, 8 channels) leaves no scale to it.
    scale_of = np.abs(conv2d_nchw(x, w, padding=wl.padding)).max()
    np.testing.assert_allclose(from_blocked(out), y, rtol=0, atol=2e-5 * scale_of)
    if epilogue.get("affine_out"):
        y2 = activate(y * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1), epilogue.get("affine_activation"))
        np.testing.assert_allclose(from_blocked(out2), y2, rtol=0, atol=2e-5 * scale_of * np.abs(scale).max())


@st.composite
def cases(draw):
    c = draw(st.sampled_from([4, 8, 16, 24, 32]))
    oc = draw(st.sampled_from([8, 16, 32, 48]))
    # Padded as most convs, unpadded as Inception-v3's stem, or unevenly (the first window
    # starts 2, 1 or 0 before the input's first row and column).
    pad = draw(st.sampled_from([(1, 1, 1, 1), (0, 0, 0, 0), (2, 0, 1, 2), (0, 2, 2, 1)]))
    # tiles cut by the border or not; at least one output row and column
    h, w = draw(st.integers(max(1, 3 - pad[0] - pad[2]), 13)), draw(st.integers(max(1, 3 - pad[1] - pad[3]), 13))
    wl = Conv2DWorkload((draw(st.integers(1, 2)), c, h, w), (oc, c, 3, 3), padding=pad)
    ic_bn = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16, 32) if c % d == 0]))
    oc_bn = draw(st.sampled_from([d for d in (4, 8, 16, 32) if oc % d == 0]))
    tw = -(-wl.out_width // 4)
    cfg = Conv2DConfig(ic_bn, oc_bn, draw(st.integers(1, max(1, min(tw, 4)))), False, draw(st.integers(1, 2)))
    epi = draw(st.sampled_from([{}, dict(bias=True, activation="relu"), dict(bias=True, residual=True),
                                dict(activation="relu", affine_out=True, affine_activation="relu")]))
    return wl, cfg, epi


@settings(max_examples=30, deadline=None)
@given(cases())
def test_matches_the_reference_conv(case):
    """Any channel blocks, sizes not a multiple of the tile (border tiles partly outside),
    any padding, batches of 1 and 2, the epilogues a network fuses."""
    wl, cfg, epi = case
    _run(wl, cfg, **epi)


def test_a_resnet_stage():
    _run(Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1)), Conv2DConfig(16, 16, 7, False, 2),
         bias=True, activation="relu")


def test_inception_v3s_unpadded_stem_conv():
    _run(Conv2DWorkload((1, 80, 73, 73), (192, 80, 3, 3)), Conv2DConfig(16, 32, 5, False, 2),
         bias=True, activation="relu")


def test_what_it_supports():
    w = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    assert supported(w) and supported(Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3)))
    assert gemm_workload(Conv2DWorkload((1, 64, 30, 30), (64, 64, 3, 3))) == gemm_workload(w)  # 28x28 outputs
    assert not supported(Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1)))
    assert not supported(Conv2DWorkload((1, 64, 28, 28), (64, 64, 1, 1)))
    assert not supported(Conv2DWorkload((1, 64, 28, 28), (64, 32, 3, 3), padding=(1, 1, 1, 1), groups=2))
    assert not supported(Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), dilation=(2, 2), padding=(2, 2, 2, 2)))
    assert not supported(Conv2DWorkload((1, 64, 1, 1), (64, 64, 3, 3)))  # no output (1x1 unpadded)
    with pytest.raises(ValueError, match="3x3 stride-1"):
        gemm_workload(Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), strides=(2, 2)))
    with pytest.raises(ValueError, match="prologue"):
        winograd_epilogue(dict(prologue=True))
    assert winograd_epilogue(dict(bias=True, affine_out=False, prologue=False)) == dict(bias=True, affine_out=False)


def test_the_tuner_times_a_gemm_as_its_whole_conv():
    """A GEMM config timed through the timer's Winograd map costs its transforms too: more
    than the same GEMM alone."""
    conv = Conv2DWorkload((1, 32, 28, 28), (32, 32, 3, 3), padding=(1, 1, 1, 1))
    gemm, cfg = gemm_workload(conv), Conv2DConfig(16, 16, 7)
    alone = min(KernelTimer(repeat=5)(gemm, cfg) for _ in range(3))
    whole = min(KernelTimer(repeat=5, winograd={gemm: conv})(gemm, cfg) for _ in range(3))
    assert whole > alone


def test_a_gemms_input_block_is_the_convs_layout():
    """The GEMM is a grouped conv (one group a tile point), whose input blocks may hold whole
    groups in the conv template; not in a Winograd conv, whose input block is its input's
    layout: the timer does not build them, the tuner does not try them, and the candidates drop
    a record of one."""
    from graph_tuner.candidates import layer_candidates
    from graph_tuner.records import make_conv2d_record, read_records
    from graph_tuner.winograd import eligible
    from kernels.config_space import tuning_space
    from kernels.conv2d import supported as conv2d_supported
    from kernels.tuner import tune

    conv = Conv2DWorkload((1, 32, 28, 28), (32, 32, 3, 3), padding=(1, 1, 1, 1))
    gemm, wide = gemm_workload(conv), Conv2DConfig(64, 16, 7)
    assert conv2d_supported(gemm, wide) and not gemm_supported(gemm, wide)
    with pytest.raises(ValueError, match="no blocks of the Winograd conv"):
        build_winograd(conv, wide)
    timer = KernelTimer(winograd={gemm: conv})
    assert not timer.builds(gemm, wide) and timer.builds(gemm, Conv2DConfig(32, 16, 7))
    result = tune(gemm, trials=40, measure=_Fake(timer.builds), lanes=16)
    assert result.measurements and all(conv.in_channels % m.config.ic_bn == 0 for m in result.measurements)
    space = tuning_space(gemm)
    entity = space.config_entity(wide)
    log = read_records([make_conv2d_record(gemm, entity, space.index(entity), [1e-6], "llvm -mcpu=znver4")])
    assert eligible(conv)  # its GEMM's records are its candidates
    with pytest.warns(UserWarning, match="no tuning record"):  # the record of a wide block is dropped
        (cands,) = layer_candidates([conv], log, k=5, fallback=True)
    assert [c.is_fallback for c in cands] == [True]


class _Fake:
    """A measure that builds nothing (a time by tile width), with a timer's ``builds``."""

    def __init__(self, builds):
        self.builds = builds

    def __call__(self, workload, config):
        return 1e-6 * (1 + abs(config.ow_bn - 8))


def test_layer_candidates_take_the_faster_of_direct_and_winograd():
    from graph_tuner.candidates import layer_candidates
    from graph_tuner.records import make_conv2d_record, read_records
    from graph_tuner.winograd import eligible, gemm_of, runs_winograd
    from kernels.config_space import tuning_space

    conv = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    small = Conv2DWorkload((1, 16, 28, 28), (16, 16, 3, 3), padding=(1, 1, 1, 1))
    assert not eligible(small)  # too few channels: its GEMM is neither tuned nor a candidate
    assert not eligible(Conv2DWorkload((1, 512, 7, 7), (512, 512, 3, 3), padding=(1, 1, 1, 1)))  # 7x7: direct
    gemm = gemm_of(conv)

    def record(w, ic_bn, oc_bn, seconds):
        space = tuning_space(w)
        entity = space.config_entity(Conv2DConfig(ic_bn, oc_bn, min(7, w.out_width)))
        return make_conv2d_record(w, entity, space.index(entity), [seconds], "llvm -mcpu=znver4")

    log = read_records([record(conv, 16, 16, 3e-3), record(conv, 16, 32, 1e-3), record(gemm, 16, 16, 2e-3),
                        record(gemm, 32, 32, 2.5e-3), record(conv, 32, 32, 3e-3), record(conv, 32, 32, 3e-3),
                        record(gemm, 32, 16, 2e-3), record(gemm, 32, 16, 2e-3), record(conv, 32, 16, 1e-3)])
    (cands,) = layer_candidates([conv], log, k=5)
    by_pair = {(c.in_block, c.out_block): c for c in cands}
    assert set(by_pair) == {(16, 16), (16, 32), (32, 32), (32, 16)}
    assert runs_winograd(conv, by_pair[(16, 16)].record.workload)  # 2 ms beats the direct 3 ms
    assert not runs_winograd(conv, by_pair[(16, 32)].record.workload)  # only direct has this pair
    # Re-timed beats timed once, whichever kernel: a lucky single timing does not win its pair.
    assert not runs_winograd(conv, by_pair[(32, 32)].record.workload)
    assert runs_winograd(conv, by_pair[(32, 16)].record.workload)
    (direct_only,) = layer_candidates([conv], read_records([record(conv, 16, 16, 3e-3)]), k=5)
    assert [c.time for c in direct_only] == [3e-3]  # a log without GEMM records: as before
    # A layer not eligible (7x7 output) keeps to its direct records, even with faster GEMM ones logged.
    late = Conv2DWorkload((1, 512, 7, 7), (512, 512, 3, 3), padding=(1, 1, 1, 1))
    (only_direct,) = layer_candidates([late], read_records([record(late, 16, 16, 3e-3),
                                                            record(gemm_of(late), 16, 16, 1e-3)]), k=5)
    assert [c.time for c in only_direct] == [3e-3] and not runs_winograd(late, only_direct[0].record.workload)


def _stem():
    """Inception-v3's stem in small: unpadded 3x3 convs, then a padded one."""
    from graph_tuner.builder import GraphBuilder

    b = GraphBuilder("stem")
    x = b.relu(b.conv(b.input((1, 16, 23, 21)), 32, 3, name="a"))
    x = b.relu(b.conv(x, 32, 3, name="b"))
    return b.build(b.conv(x, 48, 3, padding=1, name="c"))


@pytest.mark.parametrize("make", ["resnet", "stem"])
def test_a_plan_runs_its_winograd_layers(make):
    """A plan whose layers chose GEMM records runs them as Winograd kernels (weights
    transformed, epilogues fused: bias, residual adds, a pre-activation unit's second
    output; unpadded convs too), and the network matches the reference."""
    import dataclasses

    from graph_tuner.executor import compile_model, run_reference, uniform_plan
    from graph_tuner.winograd import gemm_of
    from graph_tuner.zoo.resnet import resnet
    from kernels.winograd import WinogradKernel
    from winograd_plans import as_winograd

    # ResNet-18: 3x3 convs on 32x32 down to 4x4 images (Winograd from 8x8)
    m = resnet(18, image_size=128) if make == "resnet" else _stem()
    plan = uniform_plan(m, 16)
    plan = dataclasses.replace(plan, layers=[as_winograd(lc) for lc in plan.layers])
    params = m.params(seed=1)
    x = np.random.default_rng(1).standard_normal(m.op(m.inputs[0]).shape, dtype=np.float32)
    prog = compile_model(m, plan, params)
    got = prog.run(x)[0]
    want = run_reference(m, params, x)[0]
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
    winograd = [s for s in prog.steps if isinstance(getattr(s.fn, "keep", (None,))[0], WinogradKernel)]
    assert len(winograd) == sum(gemm_of(lc.workload) is not None for lc in plan.layers) >= (10 if make == "resnet" else 3)


def test_tuning_a_model_tunes_its_winograd_gemms_timed_whole():
    from graph_tuner.loading import load_model
    from graph_tuner.tuning import model_timer, model_workloads, workload_epilogues
    from graph_tuner.winograd import eligible, gemm_of

    m = load_model("resnet-18")
    tuned = [w for w, _ in model_workloads(m)]
    gemms = {gemm_of(w): w for w, _ in m.distinct_workloads() if eligible(w)}
    assert len(gemms) == 3 and set(gemms) <= set(tuned)  # not the 7x7 stage (MIN_PIXELS)
    timer = model_timer(m)
    assert timer.winograd == gemms
    epilogues = workload_epilogues(m)
    assert all(epilogues[g] == epilogues[w] for g, w in gemms.items())  # timed with its conv's epilogue


def test_a_gemm_two_convs_share_is_not_tuned():
    """64 channels at 15x15 and at 16x16 both make 4x4 tiles: one GEMM, two different convs."""
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.winograd import convs_of, tuning_workloads

    b = GraphBuilder("shared")
    x = b.input((1, 64, 16, 16))
    y = b.conv(x, 64, 3, padding=1, name="a")
    z = b.conv(b.conv(y, 64, 2, name="shrink"), 64, 3, padding=1, name="b")  # 15x15
    m = b.build(b.conv(z, 64, 3, padding=1, strides=(2, 2), name="c"))
    assert tuning_workloads(m) == [] and convs_of(m) == {}
    pad = GraphBuilder("padded and not")  # 18x18 unpadded and 16x16 padded: 16x16 outputs both
    x = pad.input((1, 64, 18, 18))
    m = pad.build(pad.conv(pad.conv(x, 64, 3, name="valid"), 64, 3, padding=1, name="same"))
    assert tuning_workloads(m) == [] and convs_of(m) == {}
    alone = GraphBuilder("alone")
    one = alone.build(alone.conv(alone.input((1, 64, 16, 16)), 64, 3, padding=1, name="a"))
    assert len(tuning_workloads(one)) == 1 and len(convs_of(one)) == 1  # the same conv without its twin


def _phases(text: str) -> tuple[str, str]:
    import re

    (phase_in,), (phase_out,) = (re.findall(rf"declare void @(gt_winograd_{k}_\w+)\(", text) for k in ("in", "out"))
    return phase_in, phase_out


def test_configs_share_the_transforms_of_their_blocks():
    """A transform is compiled once for all the configs with its block (and epilogue): the
    kernel's text calls it by a name made from its code."""
    from kernels.winograd import winograd_ir

    wl = Conv2DWorkload((1, 32, 14, 14), (32, 32, 3, 3), padding=(1, 1, 1, 1))
    a, b, c = (winograd_ir(wl, Conv2DConfig(16, ocb, ow, False, 1)) for ocb, ow in ((16, 2), (16, 3), (8, 3)))
    assert _phases(a) == _phases(b) and a != b  # another register tile: the same transforms
    assert _phases(c)[0] == _phases(a)[0] and _phases(c)[1] != _phases(a)[1]  # another output block
    relu = winograd_ir(wl, Conv2DConfig(16, 16, 2, False, 1), activation="relu")
    assert _phases(relu)[0] == _phases(a)[0] and _phases(relu)[1] != _phases(a)[1]  # another epilogue
    other = winograd_ir(Conv2DWorkload((1, 32, 7, 7), (32, 32, 3, 3), padding=(1, 1, 1, 1)), Conv2DConfig(16, 16, 2))
    assert set(_phases(other)).isdisjoint(_phases(a))  # another conv


def test_a_kernel_a_helper_compiled_links_its_transforms():
    """The object code a helper process makes calls the transforms by name: they resolve
    when it is linked here (the text's making compiled them), and the kernel is right."""
    from kernels import jit
    from kernels.winograd import winograd_ir

    wl = Conv2DWorkload((1, 16, 9, 11), (24, 16, 3, 3), padding=(1, 1, 1, 1))
    cfgs = [Conv2DConfig(8, 8, 1, False, 2), Conv2DConfig(16, 8, 2, False, 1), Conv2DConfig(4, 24, 3, False, 1)]
    jit.compile_ahead([winograd_ir(wl, c, bias=True) for c in cfgs])  # the second on a helper (given a second core)
    for c in cfgs:
        _run(wl, c, bias=True)
