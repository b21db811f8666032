"""Elementwise passes over a blocked NCHW[b]c tensor, generated as LLVM IR.

``out = act((x op y) * scale[c] + shift[c])``, each part optional:

* ``op`` (``binary``): ``add`` or ``mul`` of a second tensor ``y`` of the same shape, or,
  with ``y_channel``, of shape ``(N, C, 1, 1)``: one value per image and channel, as a
  squeeze-and-excite block's channel-wise multiply; a residual add that no conv
  epilogue could take (neither operand's conv writes the add's layout);
* the per-channel scale-shift (``affine``): an inference batch norm or bias add that
  cannot be folded into a conv, e.g. the ``bn -> relu`` in front of each conv of a
  pre-activation ResNet;
* ``act``: :data:`ACTIVATIONS`, given as a name or a tuple ``(name, *params)``.

Work items are rows ``(n, c chunk, h)`` spread over the threads. In a blocked layout a
row holds ``W x b`` values, each ``b``-channel group one vector operation per vector of
at most ``lanes`` channels, with the chunk's scale and shift loaded once per row; in plain
NCHW a row is ``W`` values of one channel, taken ``lanes`` at a time. numpy needs a pass
over memory per operation.

The sigmoid is ``1 / (1 + e)`` or ``e / (1 + e)`` with ``e = exp(-|x|)`` (no overflow
either way), ``exp`` a Cephes-style polynomial in vector registers (``llvm.exp.*``
becomes one scalar ``expf`` call per lane on x86): within 2 float32 ulp of numpy's.

>>> import numpy as np
>>> from kernels.packing import to_blocked, from_blocked
>>> x = np.random.default_rng(0).standard_normal((1, 32, 3, 5), dtype=np.float32)
>>> s, t = np.linspace(-1, 1, 32, dtype=np.float32), np.linspace(0, 1, 32, dtype=np.float32)
>>> k = build_elementwise(x.shape, 16, activation="relu")
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 16), s, t, out)
>>> want = np.maximum(x * s.reshape(1, -1, 1, 1) + t.reshape(1, -1, 1, 1), 0)
>>> bool(np.allclose(from_blocked(out), want, atol=1e-6))
True
"""
from __future__ import annotations

import functools
import struct

import numpy as np

from kernels.ir import IntrinsicSet, arg_ptr, decompose, splat, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu
from kernels.layout_transform import blocked_shape
from kernels.threads import parallel_entry_ir

__all__ = ["ACTIVATIONS", "ElementwiseKernel", "activation_spec", "build_elementwise", "elementwise_ir"]

# Activation name -> its parameters (numbers given after the name).
ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "relu": (), "relu6": (), "sigmoid": (), "silu": (), "hard_swish": (),
    "hard_sigmoid": ("alpha", "beta"), "leaky_relu": ("alpha",), "clip": ("min", "max"),
}
BINARY = (None, "add", "mul")


def activation_spec(activation) -> tuple | None:
    """``None``, a name or ``(name, *params)`` -> ``(name, *float params)``, checked.

    >>> activation_spec("relu"), activation_spec(("leaky_relu", 0.1))
    (('relu',), ('leaky_relu', 0.1))
    """
    if activation is None:
        return None
    spec = (activation,) if isinstance(activation, str) else tuple(activation)
    if not spec or spec[0] not in ACTIVATIONS or len(spec) - 1 != len(ACTIVATIONS[spec[0]]):
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} with its parameters "
                         f"{ACTIVATIONS.get(spec[0] if spec else '', '')}, got {activation!r}")
    return (spec[0], *(float(p) for p in spec[1:]))


def fconst(value: float) -> str:
    """An LLVM ``float`` literal of ``value`` rounded to float32 (hex: decimal literals must be exact).

    >>> fconst(0.5), fconst(1 / 6)
    ('0x3FE0000000000000', '0x3FC5555560000000')
    """
    return "0x" + struct.pack(">d", float(np.float32(value))).hex().upper()


def fsplat(value: float, w: int) -> str:
    return "<" + ", ".join([f"float {fconst(value)}"] * w) + ">"


class _Math:
    """Vector math on ``<w x float>`` values: the activations, exp and the sigmoid."""

    # exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two for exactness)
    LN2_HI, LN2_LO, LOG2E = 0.693359375, -2.12194440e-4, 1.44269504088896341
    EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                5.0000001201e-1)
    EXP_MIN = -87.33654  # below: e^x is subnormal in float32; taken as 0

    def __init__(self, f: IRFunction):
        self.f, self.intr, self.decls = f, IntrinsicSet(), set()

    def fma(self, w: int, a: str, b: str, c: str) -> str:
        return self.intr.call(self.f, "fma", w, a, b, c)

    def binop(self, op: str, w: int, a: str, b: str) -> str:
        return self.f.op(f"{op} {vty(w)} {a}, {b}")

    def exp_nonpositive(self, w: int, x: str) -> str:
        """``exp(x)`` for ``x <= 0``."""
        f = self.f
        self.decls.add(f"declare {vty(w)} @llvm.floor.v{w}f32({vty(w)})")
        xc = self.intr.call(f, "maxnum", w, x, fsplat(self.EXP_MIN, w))
        n = f.op(f"call {vty(w)} @llvm.floor.v{w}f32({vty(w)} "
                 f"{self.fma(w, xc, fsplat(self.LOG2E, w), fsplat(0.5, w))})")
        r = self.fma(w, n, fsplat(-self.LN2_HI, w), xc)
        r = self.fma(w, n, fsplat(-self.LN2_LO, w), r)
        p = fsplat(self.EXP_POLY[0], w)
        for c in self.EXP_POLY[1:]:
            p = self.fma(w, p, r, fsplat(c, w))
        p = self.fma(w, p, self.binop("fmul", w, r, r), self.binop("fadd", w, r, fsplat(1.0, w)))
        ni = f.op(f"fptosi {vty(w)} {n} to <{w} x i32>")
        bits = f.op(f"shl <{w} x i32> {f.op(f'add <{w} x i32> {ni}, {_isplat(127, w)}')}, {_isplat(23, w)}")
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
        if lo is not None and lo != -np.inf:
            v = self.intr.call(self.f, "maxnum", w, v, fsplat(lo, w))
        if hi is not None and hi != np.inf:
            v = self.intr.call(self.f, "minnum", w, v, fsplat(hi, w))
        return v

    def activation(self, w: int, v: str, spec: tuple) -> str:
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
            return self.clip(w, self.fma(w, v, fsplat(p[0], w), fsplat(p[1], w)), 0.0, 1.0)
        if kind == "hard_swish":  # ONNX: x * hard_sigmoid(x) with alpha 1/6, beta 0.5
            return self.binop("fmul", w, v, self.clip(w, self.fma(w, v, fsplat(1 / 6, w), fsplat(0.5, w)), 0.0, 1.0))
        if kind == "leaky_relu":
            neg = self.f.op(f"fcmp olt {vty(w)} {v}, zeroinitializer")
            return self.f.op(f"select <{w} x i1> {neg}, {vty(w)} {self.binop('fmul', w, v, fsplat(p[0], w))}, "
                             f"{vty(w)} {v}")
        raise ValueError(f"unknown activation {kind!r}")

    def declarations(self) -> str:
        return self.intr.declarations() + "".join(d + "\n" for d in sorted(self.decls))


def _isplat(value: int, w: int) -> str:
    return "<" + ", ".join([f"i32 {value}"] * w) + ">"


def elementwise_ir(shape_nchw, block: int | None, activation=None, *, binary: str | None = None,
                   y_channel: bool = False, affine: bool = True, name: str = "elementwise",
                   lanes: int | None = None) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, scale, shift, out, y)``
    (scale and shift unused without ``affine``, y without ``binary``)."""
    spec = activation_spec(activation)
    if binary not in BINARY:
        raise ValueError(f"binary must be one of {BINARY}, got {binary!r}")
    N, C, H, W = shape_nchw
    b = block or 1
    blocked_shape(shape_nchw, b)  # validate
    CB = C // b
    lanes = lanes or host_cpu().lanes
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    m = _Math(f)
    x, s, t, out = (arg_ptr(f, i) for i in range(4))
    y = arg_ptr(f, 4) if binary else None
    n, cb, _ = decompose(f, "%item", [N, CB, H])
    row = f.mul("%item", W * b)
    image_channel = f.affine((n, CB), (cb, 1))  # (n, c chunk): the row's plane

    # Per-channel operands: vectors of the chunk's channels (blocked), or splats of the
    # row's one channel (plain), made before the loops so they dominate them.
    if b > 1:
        parts = vector_chunks(b, lanes)  # (offset in the column, width), every column

        def per_channel(ptr: str, base: str) -> list[str]:
            return [f.load(vty(w), f.gep(ptr, f.add(f.mul(base, b), off))) for off, w in parts]
    else:
        full, tail = divmod(W, lanes)
        parts = [(None, lanes)] * bool(full) + [(full * lanes + o, w) for o, w in vector_chunks(tail, lanes)]

        def per_channel(ptr: str, base: str) -> list[str]:
            v = f.load("float", f.gep(ptr, base))
            return [splat(f, v, w) for _, w in parts]
    scales = per_channel(s, cb) if affine else [None] * len(parts)
    shifts = per_channel(t, cb) if affine else [None] * len(parts)
    ys = per_channel(y, image_channel) if binary and y_channel else [None] * len(parts)

    def compute(idx: str, w: int, k: int) -> None:
        v = f.load(vty(w), f.gep(x, idx))
        if binary:
            yv = ys[k] if y_channel else f.load(vty(w), f.gep(y, idx))
            v = m.binop("fadd" if binary == "add" else "fmul", w, v, yv)
        if affine:
            v = m.fma(w, v, scales[k], shifts[k])
        if spec is not None:
            v = m.activation(w, v, spec)
        f.store(vty(w), v, f.gep(out, idx))

    if b > 1:
        with f.loop(W) as col:
            base = f.add(row, f.mul(col, b))
            for k, (off, w) in enumerate(parts):
                compute(f.add(base, off), w, k)
    else:
        for k, (off, w) in enumerate(parts):
            if off is None:  # the full vectors
                with f.loop(full) as i:
                    compute(f.add(row, f.mul(i, lanes)), w, k)
            else:
                compute(f.add(row, off), w, k)
    f.emit("ret void")
    return f.text() + m.declarations() + parallel_entry_ir(name, [(f"{name}_item", N * CB * H)])


class ElementwiseKernel(Kernel):
    """``k(x, scale, shift, out, y=None)``: x, out (and y) in NCHW[block]c, scale and shift of shape (C,)."""

    def __init__(self, shape_nchw, block: int | None, activation, binary: str | None, y_channel: bool,
                 affine: bool):
        self.input_shape = self.output_shape = blocked_shape(shape_nchw, block or None)
        ir = elementwise_ir(shape_nchw, block, activation, binary=binary, y_channel=y_channel, affine=affine)
        n, c = shape_nchw[:2]
        y_shape = blocked_shape((n, c, 1, 1), block or None) if y_channel else self.input_shape
        super().__init__(compile_ir(ir), "elementwise",
                         dict(x=self.input_shape, scale=(c,) if affine else None, shift=(c,) if affine else None,
                              out=self.output_shape, y=y_shape if binary else None))


@functools.lru_cache(maxsize=None)
def build_elementwise(shape_nchw: tuple[int, int, int, int], block: int | None, activation=None, *,
                      binary: str | None = None, y_channel: bool = False, affine: bool = True) -> ElementwiseKernel:
    """Generate, compile and cache the elementwise kernel (see the module doc); ``activation``
    is a name or a ``(name, *params)`` tuple of :data:`ACTIVATIONS`."""
    return ElementwiseKernel(tuple(int(v) for v in shape_nchw), block or None, activation_spec(activation),
                             binary, bool(y_channel), bool(affine))
