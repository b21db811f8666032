"""The activations, as LLVM IR on ``<w x float>`` vectors: one implementation for every
kernel that applies one, the elementwise pass (:mod:`kernels.elementwise`) and the conv
epilogues (:func:`epilogue`, in :mod:`kernels.conv2d` and :mod:`kernels.depthwise`).

An activation is given as a name or a tuple ``(name, *params)`` of :data:`ACTIVATIONS`
(``"silu"``, ``("leaky_relu", 0.1)``, ``("hard_sigmoid", 0.2, 0.5)``); None is none.

The sigmoid is ``1 / (1 + exp(-x))`` and SiLU ``x / (1 + exp(-x))``, ``exp`` a Cephes-style
polynomial in vector registers on a clamped argument (``llvm.exp.*`` becomes one scalar
``expf`` call per lane on x86), the division the CPU's reciprocal estimate refined once:
within 2.5 float32 ulp of float64 (2.47 for the sigmoid, 2.31 for SiLU, from -100 to 100).
Hard swish is ``x * clip(x / 6 + 1/2, 0, 1)`` (ONNX's).

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

    # exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two for exactness),
    # p(r) = 1 + r + r^2 P(r) in Horner form (Cephes' expf coefficients, P's first)
    LN2_HI, LN2_LO, LOG2E = 0.693359375, -2.12194440e-4, 1.44269504088896341
    EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                5.0000001201e-1, 1.0, 1.0)
    # exp's argument is clamped to [EXP_LO, EXP_HI], so that no result is subnormal (nor,
    # for inputs above 1e-33 in magnitude, any sigmoid or SiLU, or the Newton step's residual): a
    # subnormal costs a microcode assist of ~100 cycles at each instruction that makes or
    # reads it: YOLOv5s's 256-channel 1x1 conv with a SiLU epilogue took 2.7x as long with
    # its pre-activations all below -88 (0.70 ms against 1.88 with the clamp at 88.3, which
    # let 1 / (1 + e^88.3) be subnormal), and some of its convs ran 1.7-2.2x slower in the
    # seeded network. At EXP_LO, n = -126 and r > 0: e^x >= 2^-126. At EXP_HI,
    # 1 / (1 + e^x) (the sigmoid's smallest) is still above 2^-126.
    EXP_LO, EXP_HI = -87.3, 86.0
    # x log2(e) + ROUND rounds to an integer in the float's last place (its ulp is 1): the low
    # mantissa bits then hold n + 127, the biased exponent of 2^n
    ROUND = 1.5 * 2 ** 23 + 127

    def __init__(self, f: IRFunction, intr: IntrinsicSet | None = None):
        self.f, self.intr = f, intr if intr is not None else IntrinsicSet()

    def fma(self, w: int, a: str, b: str, c: str) -> str:
        return self.intr.call(self.f, "fma", w, a, b, c)

    def binop(self, op: str, w: int, a: str, b: str) -> str:
        return self.f.op(f"{op} {vty(w)} {a}, {b}")

    def exp(self, w: int, x: str) -> str:
        """``exp(x)``, ``x`` clamped to [EXP_LO, EXP_HI] first: 15 vector instructions, no
        rounding or conversion instruction (``ROUND``)."""
        f = self.f
        xc = self.clip(w, x, self.EXP_LO, self.EXP_HI)
        t = self.fma(w, xc, fsplat(self.LOG2E, w), fsplat(self.ROUND, w))
        n = self.binop("fsub", w, t, fsplat(self.ROUND, w))
        r = self.fma(w, n, fsplat(-self.LN2_HI, w), xc)
        r = self.fma(w, n, fsplat(-self.LN2_LO, w), r)
        p = fsplat(self.EXP_POLY[0], w)
        for c in self.EXP_POLY[1:]:
            p = self.fma(w, p, r, fsplat(c, w))
        bits = f.op(f"shl <{w} x i32> {f.op(f'bitcast {vty(w)} {t} to <{w} x i32>')}, {isplat(23, w)}")
        return self.binop("fmul", w, p, f.op(f"bitcast <{w} x i32> {bits} to {vty(w)}"))

    def divide_by_one_plus_exp(self, w: int, numerator: str, x: str) -> str:
        """``numerator / (1 + exp(-x))``. The division is ``fdiv arcp ninf contract``, which LLVM
        lowers to the CPU's reciprocal estimate and one Newton step in FMAs (``vrcp14ps``, 14 bits, with
        AVX-512; ``vrcpps``, 12 bits, with AVX2): here, where the divisor is finite and at
        least 1, within about an ulp (AVX2: Intel's bound on ``vrcpps`` leaves up to 1.3e-7
        after the step). A ``vdivps`` takes one port 10 cycles a 16-lane vector. No ``nnan``:
        a NaN numerator stays NaN (an infinite one gives NaN). (A plain ``fmul`` or ``select``
        on the quotient lets LLVM fold them into a division without the flags: a ``vdivps``
        again.)"""
        d = self.binop("fadd", w, self.exp(w, self.f.op(f"fneg {vty(w)} {x}")), fsplat(1.0, w))
        return self.binop("fdiv arcp ninf contract", w, numerator, d)

    def sigmoid(self, w: int, x: str) -> str:
        """``1 / (1 + exp(-x))``: within 2.5 ulp where it is above 1e-30, and at least
        4.5e-38 (``exp``'s clamp keeps it normal); NaN stays NaN."""
        f = self.f
        nan = f.op(f"fcmp uno {vty(w)} {x}, {x}")
        one = f.op(f"select <{w} x i1> {nan}, {vty(w)} {x}, {vty(w)} {fsplat(1.0, w)}")
        return self.divide_by_one_plus_exp(w, one, x)

    def silu(self, w: int, x: str) -> str:
        """``x / (1 + exp(-x))``, its numerator clamped at -1e4 (where SiLU is 0 to float
        precision) so that ``x / 2.2e37`` (``exp``'s clamp) stays below 1e-30 for any ``x``;
        NaN stays NaN (an ordered compare, where ``maxnum`` would give -1e4). The sigmoid's
        own division, and no multiply. On the session-24 Xeon the SiLU epilogue of YOLOv5s's
        64-channel 1x1 conv took 27% of its time, against 39% with a ``vdivps`` and 30 vector
        instructions an output vector."""
        f = self.f
        low = f.op(f"fcmp olt {vty(w)} {x}, {fsplat(-1e4, w)}")
        return self.divide_by_one_plus_exp(w, f.op(f"select <{w} x i1> {low}, {vty(w)} {fsplat(-1e4, w)}, "
                                                   f"{vty(w)} {x}"), x)

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
            return self.silu(w, v)
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
