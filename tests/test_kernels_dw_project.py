"""The fused depthwise + 1x1 conv kernel (kernels.dw_project) against the numpy reference."""
import numpy as np
import pytest

from kernels import Conv2DConfig, Conv2DWorkload
from kernels.conv2d import conv_context
from kernels.dw_project import build_dw_project, dw_project_ir, fusable
from kernels.jit import clear_kernel_caches
from kernels.packing import from_blocked, pack_depthwise_weight, pack_weight, to_blocked
from kernels.reference import activate, conv2d_nchw


def _pair(shape, stride, out_channels, dw_block, pw_config):
    n, c, h, w = shape
    dw = Conv2DWorkload(shape, (c, 1, 3, 3), strides=(stride, stride), padding=(1, 1, 1, 1), groups=c)
    pw = Conv2DWorkload((n, c, dw.out_height, dw.out_width), (out_channels, c, 1, 1))
    return dw, Conv2DConfig(dw_block, dw_block, 4), pw, pw_config


def _shape_of(dw, pw, pw_config) -> set[str]:
    """What a case makes the driver handle (kernels.conv2d.conv_context of the 1x1 conv)."""
    c = conv_context(pw, pw_config, name="x", lanes=16, rows_first=True, bias=False, residual=False,
                     activation=None, affine_out=False, affine_activation=None)
    joined = dw.out_height // c.OH
    got = {"joined"} if joined > 1 else set()
    got |= {"block tail"} if dw.out_height % (c.G * joined) else set()
    got |= {"tile tail"} if c.OH % c.ohb else set()
    got |= {"batches"} if c.batches > 1 else set()
    return got | ({"images"} if dw.data_shape[0] > 1 else set())


@pytest.mark.parametrize("threads,shape,stride,oc,dw_block,pw_config,cases", [
    (2, (1, 16, 56, 56), 1, 32, 16, Conv2DConfig(16, 16, 8), {"joined"}),
    (2, (2, 16, 64, 64), 1, 32, 16, Conv2DConfig(16, 16, 8), {"joined", "images"}),
    (1, (1, 8, 58, 30), 1, 16, 8, Conv2DConfig(8, 8, 6), {"joined", "block tail"}),
    (2, (1, 16, 40, 20), 1, 32, 16, Conv2DConfig(16, 16, 5, oh_bn=3), {"block tail", "tile tail"}),
    (2, (1, 576, 28, 28), 1, 32, 16, Conv2DConfig(16, 16, 7), {"batches"}),
    (2, (1, 48, 28, 28), 2, 32, 16, Conv2DConfig(16, 16, 5, oh_bn=2), set()),  # stride 2, 2-row tiles
    (1, (2, 16, 13, 11), 1, 24, 8, Conv2DConfig(8, 8, 4), {"images"}),  # odd sizes
])
def test_fused_kernel_matches_the_reference(monkeypatch, threads, shape, stride, oc, dw_block, pw_config, cases):
    """Every depthwise row a 1x1 conv item reads is computed first in its fused item, whatever
    the row blocks: joined rows, a short last block, register-tile tails, batched reductions."""
    monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", str(threads))  # the 1x1 conv's row blocks depend on it
    clear_kernel_caches()
    try:
        _run_and_compare(shape, stride, oc, dw_block, pw_config, cases, threads)
    finally:
        clear_kernel_caches()


def _run_and_compare(shape, stride, oc, dw_block, pw_config, cases, threads):
    dw, dw_config, pw, pw_config = _pair(shape, stride, oc, dw_block, pw_config)
    assert fusable(dw, dw_config, pw, pw_config, threads=threads)
    assert cases <= _shape_of(dw, pw, pw_config)
    rng = np.random.default_rng(0)
    c = shape[1]
    x = rng.standard_normal(shape, dtype=np.float32)
    wd = rng.standard_normal(dw.kernel_shape, dtype=np.float32)
    wp = rng.standard_normal(pw.kernel_shape, dtype=np.float32)
    bd, bp = rng.standard_normal(c, dtype=np.float32), rng.standard_normal(oc, dtype=np.float32)
    res = rng.standard_normal(pw.out_shape, dtype=np.float32)
    k = build_dw_project(dw, dw_config, dict(bias=True, activation="relu6"), pw, pw_config,
                         dict(bias=True, residual=True, activation="relu"))
    mid = np.full(k.dw.arg_shapes["out"], np.nan, np.float32)
    out = np.full(k.pw.arg_shapes["out"], np.nan, np.float32)
    fn = k.bind(dict(data=to_blocked(x, dw_block), weight=pack_depthwise_weight(wd, dw_block), out=mid, bias=bd),
                dict(data=mid, weight=pack_weight(wp, pw_config.ic_bn, pw_config.oc_bn), out=out, bias=bp,
                     residual=to_blocked(res, pw_config.oc_bn)))
    fn()
    d = activate(conv2d_nchw(x, wd, strides=dw.strides, padding=dw.padding, groups=c, bias=bd), "relu6")
    np.testing.assert_allclose(from_blocked(mid), d, rtol=1e-4, atol=1e-4)  # the depthwise output is kept too
    expected = activate(conv2d_nchw(d, wp, bias=bp, residual=res), "relu")
    np.testing.assert_allclose(from_blocked(out), expected, rtol=1e-4, atol=1e-3)


def test_only_a_1x1_conv_that_takes_rows_first_in_the_depthwise_block_fuses():
    dw, dw_config, pw, pw_config = _pair((1, 32, 14, 14), 1, 16, 16, Conv2DConfig(16, 8, 7))
    assert fusable(dw, dw_config, pw, pw_config, threads=2)
    assert not fusable(dw, dw_config, pw, Conv2DConfig(8, 8, 7), threads=2)  # reads another block
    assert not fusable(dw, dw_config, pw, Conv2DConfig(16, 16, 7), threads=2)  # one output channel block
    small = _pair((1, 32, 5, 5), 1, 16, 16, Conv2DConfig(16, 8, 5))
    assert not fusable(*small, threads=2)  # 5 rows: too few to share rows first
    dense = Conv2DWorkload((1, 32, 14, 14), (32, 32, 3, 3), padding=(1, 1, 1, 1))
    assert not fusable(dense, dw_config, pw, pw_config, threads=2)  # not depthwise
    with pytest.raises(ValueError, match="cannot fuse"):
        dw_project_ir(dw, dw_config, {}, pw, Conv2DConfig(8, 8, 7), {})
