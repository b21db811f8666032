"""The activations, as LLVM IR on ``<w x float>`` vectors: one implementation for every
kernel that applies one, the elementwise pass (:mod:`kernels.elementwise`) and the conv
epilogues (:func:`epilogue`, in :mod:`kernels.conv2d` and :mod:`kernels.depthwise`).

An activation is given as a name or a tuple ``(name, *params)`` of :data:`ACTIVATIONS`
(``"silu"``, ``("leaky_relu", 0.1)``, ``("hard_sigmoid", 0.2, 0.5)``); None is none.

The sigmoid is ``1 / (1 + e)`` or ``e / (1 + e)`` with ``e = exp(-|x|)`` (no overflow
either way), ``exp`` a Cephes-style polynomial in vector registers (``llvm.exp.*``
becomes one scalar ``expf`` call per lane on x86): within 2 float32 ulp of numpy's.
SiLU is ``x * sigmoid(x)``, hard swish ``x * clip(x / 6 + 1/2, 0, 1)`` (ONNX's).

>>> activation_spec("silu"), activation_key(("leaky_relu", 1)), activation_key(("relu",))
(('silu',), ('leaky_relu', 1.0), 'relu')
"""
from __future__ import annotations

import math

from kernels.ir import IntrinsicSet, fsplat, isplat, vty
from kernels.jit import IRFunction

__all__ = ["ACTIVATIONS", "VectorMath", "activation_key", "activation_spec", "apply_activation", "epilogue"]

# Activation name -> its parameters (numbers given after the name).
ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "relu": (), "relu6": (), "sigmoid": (), "silu": (), "hard_swish": (),
    "hard_sigmoid": ("alpha", "beta"), "leaky_relu": ("alpha",), "clip": ("min", "max"),
}


def activation_spec(activation, what: str = "activation") -> tuple | None:
    """``None``, a name or ``(name, *params)`` -> ``(name, *float params)``, checked
    (a ValueError naming ``what`` otherwise).

    >>> activation_spec("relu"), activation_spec(("leaky_relu", 0.1))
    (('relu',), ('leaky_relu', 0.1))
    """
    if activation is None:
        return None
    spec = (activation,) if isinstance(activation, str) else tuple(activation)
    if not spec or spec[0] not in ACTIVATIONS or len(spec) - 1 != len(ACTIVATIONS[spec[0]]):
        raise ValueError(f"{what} must be None or one of {sorted(ACTIVATIONS)} with its parameters "
                         f"{ACTIVATIONS.get(spec[0] if spec else '', '')}, got {activation!r}")
    return (spec[0], *(float(p) for p in spec[1:]))


def activation_key(activation, what: str = "activation") -> str | tuple | None:
    """The activation checked, in one spelling per activation: None, the name of one without
    parameters, else ``(name, *float params)``. Kernels are cached on their arguments, and
    the tuner groups epilogues by them, so ``"relu"`` and ``("relu",)`` must not differ."""
    spec = activation_spec(activation, what)
    if spec is None:
        return None
    return spec[0] if len(spec) == 1 else spec


class VectorMath:
    """Vector math on ``<w x float>`` values of one function: the activations, exp and the sigmoid.
    Intrinsics are declared through ``intr`` (a kernel module shares one set across its functions)."""

    # exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two for exactness)
    LN2_HI, LN2_LO, LOG2E = 0.693359375, -2.12194440e-4, 1.44269504088896341
    EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                5.0000001201e-1)
    EXP_MIN = -87.33654  # below: e^x is subnormal in float32; taken as 0

    def __init__(self, f: IRFunction, intr: IntrinsicSet | None = None):
        self.f, self.intr = f, intr if intr is not None else IntrinsicSet()

    def fma(self, w: int, a: str, b: str, c: str) -> str:
        return self.intr.call(self.f, "fma", w, a, b, c)

    def binop(self, op: str, w: int, a: str, b: str) -> str:
        return self.f.op(f"{op} {vty(w)} {a}, {b}")

    def exp_nonpositive(self, w: int, x: str) -> str:
        """``exp(x)`` for ``x <= 0``."""
        f = self.f
        xc = self.intr.call(f, "maxnum", w, x, fsplat(self.EXP_MIN, w))
        n = self.intr.call(f, "floor", w, self.fma(w, xc, fsplat(self.LOG2E, w), fsplat(0.5, w)))
        r = self.fma(w, n, fsplat(-self.LN2_HI, w), xc)
        r = self.fma(w, n, fsplat(-self.LN2_LO, w), r)
        p = fsplat(self.EXP_POLY[0], w)
        for c in self.EXP_POLY[1:]:
            p = self.fma(w, p, r, fsplat(c, w))
        p = self.fma(w, p, self.binop("fmul", w, r, r), self.binop("fadd", w, r, fsplat(1.0, w)))
        ni = f.op(f"fptosi {vty(w)} {n} to <{w} x i32>")
        bits = f.op(f"shl <{w} x i32> {f.op(f'add <{w} x i32> {ni}, {isplat(127, w)}')}, {isplat(23, w)}")
        e = self.binop("fmul", w, p, f.op(f"bitcast <{w} x i32> {bits} to {vty(w)}"))
        tiny = f.op(f"fcmp olt {vty(w)} {x}, {fsplat(self.EXP_MIN, w)}")
        return f.op(f"select <{w} x i1> {tiny}, {vty(w)} zeroinitializer, {vty(w)} {e}")

    def sigmoid(self, w: int, x: str) -> str:
        f = self.f
        neg_abs = self.intr.call(f, "minnum", w, x, f.op(f"fneg {vty(w)} {x}"))
        e = self.exp_nonpositive(w, neg_abs)
        inv = self.binop("fdiv", w, fsplat(1.0, w), self.binop("fadd", w, e, fsplat(1.0, w)))
        positive = f.op(f"fcmp oge {vty(w)} {x}, zeroinitializer")
        return f.op(f"select <{w} x i1> {positive}, {vty(w)} {inv}, {vty(w)} {self.binop('fmul', w, e, inv)}")

    def clip(self, w: int, v: str, lo: float | None, hi: float | None) -> str:
        if lo is not None and lo != -math.inf:
            v = self.intr.call(self.f, "maxnum", w, v, fsplat(lo, w))
        if hi is not None and hi != math.inf:
            v = self.intr.call(self.f, "minnum", w, v, fsplat(hi, w))
        return v

    def hard_sigmoid(self, w: int, v: str, alpha: float, beta: float) -> str:
        return self.clip(w, self.fma(w, v, fsplat(alpha, w), fsplat(beta, w)), 0.0, 1.0)

    def activation(self, w: int, v: str, spec: tuple) -> str:
        """``spec`` (checked, :func:`activation_spec`) applied to ``v``."""
        kind, *p = spec
        if kind == "relu":
            return self.clip(w, v, 0.0, None)
        if kind == "relu6":
            return self.clip(w, v, 0.0, 6.0)
        if kind == "clip":
            return self.clip(w, v, p[0], p[1])
        if kind == "sigmoid":
            return self.sigmoid(w, v)
        if kind == "silu":
            return self.binop("fmul", w, v, self.sigmoid(w, v))
        if kind == "hard_sigmoid":
            return self.hard_sigmoid(w, v, p[0], p[1])
        if kind == "hard_swish":  # ONNX: x * hard_sigmoid(x) with alpha 1/6, beta 0.5
            return self.binop("fmul", w, v, self.hard_sigmoid(w, v, 1 / 6, 0.5))
        if kind == "leaky_relu":
            neg = self.f.op(f"fcmp olt {vty(w)} {v}, zeroinitializer")
            return self.f.op(f"select <{w} x i1> {neg}, {vty(w)} {self.binop('fmul', w, v, fsplat(p[0], w))}, "
                             f"{vty(w)} {v}")
        raise ValueError(f"unknown activation {kind!r}")


def apply_activation(f: IRFunction, intr: IntrinsicSet, value: str, w: int, activation) -> str:
    """``activation`` (None, a name or ``(name, *params)``) on one ``<w x float>`` vector."""
    spec = activation_spec(activation)
    return value if spec is None else VectorMath(f, intr).activation(w, value, spec)


def epilogue(f: IRFunction, intr: IntrinsicSet, value: str, w: int, residual_ptr: str | None, activation) -> str:
    """A conv tile's epilogue on one ``<w x float>`` accumulator: the residual add, then the activation."""
    if residual_ptr is not None:
        value = f.op(f"fadd {vty(w)} {value}, {f.load(vty(w), residual_ptr)}")
    return apply_activation(f, intr, value, w, activation)
