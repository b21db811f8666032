"""The generated per-channel affine kernel, with and without the added second tensor."""
import numpy as np
import pytest

from kernels.elementwise import build_channel_affine
from kernels.packing import from_blocked, to_blocked


@pytest.mark.parametrize("block,act,add", [(8, "relu6", True), (16, None, True), (4, "relu", False)])
def test_affine_with_optional_add_matches_numpy(block, act, add):
    rng = np.random.default_rng(block)
    shape = (2, 16, 3, 5)
    x, y = rng.standard_normal(shape, dtype=np.float32) * 4, rng.standard_normal(shape, dtype=np.float32) * 4
    s, t = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    k = build_channel_affine(shape, block, act, add=add)
    out = np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, block), s, t, out, y=to_blocked(y, block) if add else None)
    want = ((x + y) if add else x) * s.reshape(1, -1, 1, 1) + t.reshape(1, -1, 1, 1)
    want = want if act is None else np.clip(want, 0, 6 if act == "relu6" else None)
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-5, atol=1e-5)


def test_softmax_of_widely_spread_logits():
    """Terms far below the maximum are clamped before exp (no subnormals): same result."""
    from graph_tuner.executor.ops import make_softmax

    x = np.linspace(-300, 40, 1000, dtype=np.float32).reshape(1, -1)
    out = np.empty_like(x)
    make_softmax(x, out, 1)()
    e = np.exp(x.astype(np.float64) - x.max())
    np.testing.assert_allclose(out, e / e.sum(), rtol=1e-5, atol=1e-30)
