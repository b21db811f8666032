"""The generated elementwise kernel: binary op, per-channel affine, activations, in any layout."""
import numpy as np
import pytest

from kernels.elementwise import build_elementwise
from kernels.packing import from_blocked, to_blocked


def _sigmoid(x):
    with np.errstate(over="ignore"):  # exp(1e4) = inf: sigmoid 0, as it should be
        return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


ACTIVATIONS = {
    None: lambda v: v,
    "relu": lambda v: np.maximum(v, 0),
    "relu6": lambda v: np.clip(v, 0, 6),
    ("clip", -1.0, 2.0): lambda v: np.clip(v, -1, 2),
    "sigmoid": _sigmoid,
    "silu": lambda v: v * _sigmoid(v),
    "hard_swish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    ("hard_sigmoid", 0.2, 0.5): lambda v: np.clip(0.2 * v + 0.5, 0, 1),
    ("leaky_relu", 0.1): lambda v: np.where(v < 0, 0.1 * v, v),
}


@pytest.mark.parametrize("block,act,binary,y_channel", [
    (8, "relu6", "add", False), (16, None, "add", False), (4, "relu", None, False), (None, "silu", "mul", True),
    (16, "sigmoid", "mul", True), (24, ("leaky_relu", 0.1), "mul", False), (1, "hard_swish", None, False),
])
def test_binary_affine_activation_matches_numpy(block, act, binary, y_channel):
    rng = np.random.default_rng(block or 0)
    shape = (2, 48, 3, 37)  # W: a full 16-lane vector and a tail in plain layout
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    y = rng.standard_normal((2, 48, 1, 1) if y_channel else shape, dtype=np.float32) * 4
    s, t = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    k = build_elementwise(shape, block, act, binary=binary, y_channel=y_channel)
    out = np.full(k.output_shape, np.nan, np.float32)
    k(to_blocked(x, block), s, t, out, y=to_blocked(y, block) if binary else None)
    v = x.astype(np.float64)
    v = v if binary is None else v + y if binary == "add" else v * y
    want = ACTIVATIONS[act](v * s.reshape(1, -1, 1, 1) + t.reshape(1, -1, 1, 1))
    # float32 rounding of x * s + t cancels near 0: compare relative to the tensor's scale
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _check_accuracy(act, build=build_elementwise):
    x = np.concatenate([np.linspace(-100, 100, 400_001, dtype=np.float32),
                        [0.0, -0.0, 88.8, -88.8, -1e4, 1e4, -1e30, 1e30, -3e38, 3e38]])
    x = x.astype(np.float32).reshape(1, 1, 1, -1)
    k = build(x.shape, None, act, affine=False)
    out = np.empty_like(x)
    k(x, None, None, out)
    want = ACTIVATIONS[act](x.astype(np.float64))
    # hard sigmoid / swish round alpha * x + beta to float32 first, as numpy and onnxruntime do
    linear = isinstance(act, tuple) and act[0] == "hard_sigmoid" or act == "hard_swish"
    rtol = 1e-3 if linear else 4e-7
    big = np.abs(want) > 1e-30
    np.testing.assert_allclose(out[big], want[big], rtol=rtol, atol=1e-7 if linear else 0)
    assert np.abs(out[~big]).max(initial=0) <= 1e-30
    if act in ("sigmoid", "silu"):  # a subnormal costs a microcode assist at each use
        normal = np.abs(x) >= 1e-33
        assert ((out == 0) | (np.abs(out) >= np.finfo(np.float32).tiny))[normal].all()
        nan = np.full((1, 1, 1, 20), np.nan, np.float32)  # a whole vector and a tail
        k = build(nan.shape, None, act, affine=False)
        k(nan, None, None, out := np.zeros_like(nan))
        assert np.isnan(out).all()


@pytest.mark.parametrize("act", [a for a in ACTIVATIONS if a is not None])
def test_activation_accuracy_over_the_float_range(act):
    """Alone (no affine), each activation is within 4e-7 of float64 relative to its value, from
    -100 to 100 and where it saturates, and at most 1e-30 where it is (sigmoid and SiLU:
    exp's clamp, and SiLU's numerator clamp, out to +-3e38); sigmoid and SiLU make no
    subnormal from an input above 1e-33 in magnitude, and keep NaN NaN."""
    _check_accuracy(act)


@pytest.mark.parametrize("act", ["sigmoid", "silu"])
def test_sigmoid_accuracy_on_an_avx2_cpu(act, monkeypatch):
    """Code generated for an AVX2 CPU divides with ``vrcpps`` (a 12-bit estimate, where
    AVX-512's ``vrcp14ps`` has 14) and one Newton step: within the same 4e-7 on this CPU
    (Intel's bound on ``vrcpps`` leaves up to 1.3e-7 after the step; another vendor's tables
    differ)."""
    import dataclasses

    import kernels.jit as jit

    host = jit.host_cpu()
    if not (host.has("avx2") and host.has("fma")):
        pytest.skip("this CPU cannot run AVX2 code")
    avx2 = dataclasses.replace(host, name="haswell", features="", lanes=8)
    import llvmlite.binding as llvm

    import kernels.elementwise as elementwise

    ir = elementwise.elementwise_ir((1, 1, 1, 64), None, act, affine=False, lanes=8)
    jit._initialise()
    asm = llvm.Target.from_default_triple().create_target_machine(cpu="haswell", opt=3).emit_assembly(
        llvm.parse_assembly(ir))
    assert "<8 x float>" in ir and "vrcpps" in asm and "vdivps" not in asm
    for module in (jit, elementwise):
        monkeypatch.setattr(module, "host_cpu", lambda: avx2)
    jit._target_machine.cache_clear()  # passes for the AVX2 CPU too
    try:
        _check_accuracy(act, lambda shape, block, act, affine: elementwise.ElementwiseKernel(
            shape, block, elementwise.activation_spec(act), None, False, affine))
    finally:
        jit._target_machine.cache_clear()


def test_softmax_of_widely_spread_logits():
    """Terms far below the maximum are clamped before exp (no subnormals): same result."""
    from graph_tuner.executor.ops import make_softmax

    x = np.linspace(-300, 40, 1000, dtype=np.float32).reshape(1, -1)
    out = np.empty_like(x)
    make_softmax(x, out, 1)()
    e = np.exp(x.astype(np.float64) - x.max())
    np.testing.assert_allclose(out, e / e.sum(), rtol=1e-5, atol=1e-30)
