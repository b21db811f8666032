"""Shared pieces of the kernels' LLVM IR: vector types, intrinsics and float constants,
argument and index arithmetic, the padded-input copy. The activations and the conv
epilogue that applies them are :mod:`kernels.activations`.

Every kernel module (:mod:`kernels.conv2d`, :mod:`kernels.depthwise`, :mod:`kernels.pooling`,
:mod:`kernels.elementwise`, :mod:`kernels.softmax`, :mod:`kernels.layout_transform`) builds
its functions with :class:`kernels.jit.IRFunction` and these helpers.

>>> f = IRFunction("define void @f(ptr %args, i64 %item) nounwind")
>>> decompose(f, "%item", [2, 3, 4])
['%t4', '%t3', '%t1']
>>> vector_chunks(20, 8), vty(8)
([(0, 8), (8, 8), (16, 4)], '<8 x float>')
"""
from __future__ import annotations

import struct
from contextlib import contextmanager

import numpy as np

from kernels.jit import IRFunction

__all__ = ["BASE_ARGS", "MEMCPY_DECL", "MINMAX_DECL", "PREFETCH_DECL", "IntrinsicSet", "arg_ptr", "const_splat",
           "declare_once", "decompose", "fconst", "fsplat", "isplat", "maybe_loop", "pad_copy_ir", "splat", "static_taps", "tap_range",
           "vector_chunks", "vty"]

# The arguments every conv kernel takes (a ``ptr`` array), in order; each kernel appends its own.
BASE_ARGS = ("data", "weight", "out", "bias", "residual")

MEMCPY_DECL = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
PREFETCH_DECL = "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)\n"
MINMAX_DECL = "declare i64 @llvm.smax.i64(i64, i64)\ndeclare i64 @llvm.smin.i64(i64, i64)\n"


def vector_chunks(width: int, lanes: int) -> list[tuple[int, int]]:
    """Split ``width`` channels into ``(offset, size)`` vectors of at most ``lanes``.

    >>> vector_chunks(40, 16)
    [(0, 16), (16, 16), (32, 8)]
    """
    return [(o, min(lanes, width - o)) for o in range(0, width, lanes)]


def vty(w: int) -> str:
    return f"<{w} x float>"


class IntrinsicSet:
    """The ``declare`` lines for the vector intrinsics a module uses (``llvm.<name>.v<w>f32``)."""

    ARITY = {"fma": 3, "floor": 1}  # operands of each intrinsic; the others used take 2 (maxnum, minnum)

    def __init__(self):
        self.names: set[tuple[str, int]] = set()

    def call(self, f: IRFunction, name: str, w: int, *args: str) -> str:
        self.names.add((name, w))
        arglist = ", ".join(f"{vty(w)} {a}" for a in args)
        return f.op(f"call {vty(w)} @llvm.{name}.v{w}f32({arglist})")

    def declarations(self) -> str:
        out = []
        for name, w in sorted(self.names):
            n = self.ARITY.get(name, 2)
            out.append(f"declare {vty(w)} @llvm.{name}.v{w}f32({', '.join([vty(w)] * n)})")
        return "\n".join(out) + "\n"


def splat(f: IRFunction, scalar: str, w: int) -> str:
    one = f.op(f"insertelement {vty(w)} poison, float {scalar}, i32 0")
    return f.op(f"shufflevector {vty(w)} {one}, {vty(w)} poison, <{w} x i32> zeroinitializer")


def const_splat(value: float, w: int) -> str:
    return "<" + ", ".join(f"float {float(value):e}" for _ in range(w)) + ">"


def fconst(value: float) -> str:
    """An LLVM ``float`` literal of ``value`` rounded to float32 (hex: decimal literals must be exact).

    >>> fconst(0.5), fconst(1 / 6)
    ('0x3FE0000000000000', '0x3FC5555560000000')
    """
    return "0x" + struct.pack(">d", float(np.float32(value))).hex().upper()


def fsplat(value: float, w: int) -> str:
    """A ``<w x float>`` constant of ``value`` (rounded to float32) in every lane."""
    return "<" + ", ".join([f"float {fconst(value)}"] * w) + ">"


def isplat(value: int, w: int) -> str:
    """A ``<w x i32>`` constant of ``value`` in every lane."""
    return "<" + ", ".join([f"i32 {value}"] * w) + ">"


def arg_ptr(f: IRFunction, index: int) -> str:
    slot = f.op(f"getelementptr inbounds ptr, ptr %args, i64 {index}")
    return f.op(f"load ptr, ptr {slot}, align 8")


def decompose(f: IRFunction, item: str, dims: list[int]) -> list[str]:
    """Mixed-radix split of a flat index into ``len(dims)`` coordinates (outermost first)."""
    coords = []
    rest = item
    for d in reversed(dims[1:]):
        coords.append(f.op(f"urem i64 {rest}, {d}") if d > 1 else "0")
        rest = f.op(f"udiv i64 {rest}, {d}") if d > 1 else rest
    coords.append(rest)
    return coords[::-1]


@contextmanager
def maybe_loop(f: IRFunction, count: int):
    """A loop, or just the constant 0 when ``count`` is 1."""
    if count == 1:
        yield "0"
    else:
        with f.loop(count) as i:
            yield i


def static_taps(out: int, size: int, taps: int, stride: int, dilation: int, pad: int) -> list[int]:
    """The taps ``k`` of output position ``out`` that land inside the input:
    ``0 <= out * stride - pad + k * dilation < size`` (at generation time; :func:`tap_range` in IR).

    >>> static_taps(0, 8, 3, 1, 1, 1), static_taps(7, 8, 3, 1, 1, 1), static_taps(3, 8, 3, 1, 1, 1)
    ([1, 2], [0, 1], [0, 1, 2])
    """
    return [k for k in range(taps) if 0 <= out * stride - pad + k * dilation < size]


def tap_range(f: IRFunction, i0: str, size: int, taps: int, dilation: int) -> tuple[str, str]:
    """IR values ``lo, hi``: the taps ``k`` with ``0 <= i0 + k * dilation < size`` are ``lo <= k < hi``."""
    # lo = ceil(-i0 / d) when i0 < 0, else 0; hi = min(taps, ceil((size - i0) / d)), at least lo.
    neg = f.op(f"sub nsw i64 {dilation - 1}, {i0}")
    lo = f.op(f"sdiv i64 {neg}, {dilation}") if dilation > 1 else f.op(f"sub nsw i64 0, {i0}")
    lo = f.op(f"call i64 @llvm.smax.i64(i64 {lo}, i64 0)")
    room = f.op(f"sub nsw i64 {size + dilation - 1}, {i0}")
    hi = f.op(f"sdiv i64 {room}, {dilation}") if dilation > 1 else f.op(f"sub nsw i64 {size}, {i0}")
    hi = f.op(f"call i64 @llvm.smin.i64(i64 {hi}, i64 {taps})")
    hi = f.op(f"call i64 @llvm.smax.i64(i64 {hi}, i64 {lo})")
    return lo, hi


def pad_copy_ir(name: str, n: int, cb: int, h: int, w: int, block: int, pad: tuple[int, int, int, int],
                scratch_arg: int) -> str:
    """``void @name(ptr args, i64 row)``: copy one input row into the zero-bordered scratch.

    Items are ``n * cb * h`` rows of ``NCHW[block]c`` data; the scratch has shape
    ``[n, cb, h + top + bottom, w + left + right, block]`` and its borders stay zero.
    """
    top, left, bottom, right = pad
    hp, wp = h + top + bottom, w + left + right
    f = IRFunction(f"define internal void @{name}(ptr %args, i64 %item) nounwind")
    src, dst = arg_ptr(f, 0), arg_ptr(f, scratch_arg)
    plane, row = f.op(f"udiv i64 %item, {h}"), f.op(f"urem i64 %item, {h}")
    s = f.gep(src, f.mul("%item", w * block))
    d = f.gep(dst, f.affine((plane, hp * wp * block), (row, wp * block), const=(top * wp + left) * block))
    f.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr align 4 {d}, ptr align 4 {s}, i64 {w * block * 4}, i1 false)")
    f.emit("ret void")
    return f.text()


def declare_once(text: str) -> str:
    """The module text with each ``declare`` line kept once (the parts declare what they use)."""
    seen, lines = set(), []
    for line in text.splitlines():
        if line.startswith("declare "):
            if line in seen:
                continue
            seen.add(line)
        lines.append(line)
    return "\n".join(lines) + "\n"
