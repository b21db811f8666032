"""Nearest and bilinear resize of a blocked NCHW[b]c tensor (ONNX ``Resize``), generated as LLVM IR.

Shapes are static, so each output row and column's source taps (two input indices and
the weight of the second) are computed here, with ONNX's coordinate transformation and
nearest rounding modes, and compiled into the kernel as constant tables: one kernel
serves every mode. Work items are output rows ``(n, c chunk, oh)``; each output pixel
reads its taps one vector of at most ``lanes`` channels at a time (in plain NCHW, one
value: a plain layout gives this kernel no channel vector to work on).

>>> import numpy as np
>>> from kernels.packing import to_blocked, from_blocked
>>> x = np.arange(2 * 16 * 2 * 3, dtype=np.float32).reshape(2, 16, 2, 3)
>>> k = build_resize(x.shape, 8, "nearest", (4, 6), (2.0, 2.0))
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 8), out)
>>> bool((from_blocked(out) == x.repeat(2, axis=2).repeat(2, axis=3)).all())
True
"""
from __future__ import annotations

import functools
import math

from kernels.ir import arg_ptr, decompose, fconst, splat, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu
from kernels.layout_transform import blocked_shape
from kernels.threads import parallel_entry_ir

__all__ = ["COORDINATE_MODES", "NEAREST_MODES", "ResizeKernel", "build_resize", "resize_ir", "resize_taps"]

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source(i: int, out_len: int, in_len: int, scale: float, coord: str) -> float:
    if coord == "asymmetric":
        return i / scale
    if coord == "align_corners":
        return i * (in_len - 1) / (out_len - 1) if out_len > 1 else 0.0
    if coord == "pytorch_half_pixel" and out_len == 1:
        return -0.5
    return (i + 0.5) / scale - 0.5


def resize_taps(out_len: int, in_len: int, scale: float, mode: str, coord: str = "half_pixel",
                nearest_mode: str = "round_prefer_floor") -> list[tuple[int, int, float]]:
    """Per output index: ``(i0, i1, w)``, the output being ``x[i0] * (1 - w) + x[i1] * w``
    (nearest: ``i1 == i0``, ``w == 0``). Indices are clamped to the input (ONNX's edge rule).

    >>> resize_taps(4, 2, 2.0, "linear")
    [(0, 0, 0.0), (0, 1, 0.25), (0, 1, 0.75), (1, 1, 0.0)]
    >>> [t[0] for t in resize_taps(6, 3, 2.0, "nearest", "asymmetric", "floor")]
    [0, 0, 1, 1, 2, 2]
    """
    if coord not in COORDINATE_MODES or nearest_mode not in NEAREST_MODES or mode not in ("nearest", "linear"):
        raise ValueError(f"unsupported resize mode {mode!r}, {coord!r}, {nearest_mode!r}")
    taps = []
    for i in range(out_len):
        x = _source(i, out_len, in_len, scale, coord)
        if mode == "nearest":
            j = {"floor": math.floor(x), "ceil": math.ceil(x), "round_prefer_ceil": math.floor(x + 0.5),
                 "round_prefer_floor": math.ceil(x - 0.5)}[nearest_mode]
            j = min(max(j, 0), in_len - 1)
            taps.append((j, j, 0.0))
        else:
            lo = math.floor(x)
            w = x - lo
            a, b = min(max(lo, 0), in_len - 1), min(max(lo + 1, 0), in_len - 1)
            taps.append((a, b, 0.0 if a == b else w))
    return taps


def _table(name: str, ty: str, values) -> str:
    items = ", ".join(f"{ty} {fconst(v) if ty == 'float' else int(v)}" for v in values)
    return f"@{name} = private unnamed_addr constant [{len(values)} x {ty}] [{items}]\n"


def resize_ir(shape_nchw, block: int | None, mode: str, size, scales, coord: str = "half_pixel",
              nearest_mode: str = "round_prefer_floor", name: str = "resize", lanes: int | None = None) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, out)``."""
    N, C, H, W = shape_nchw
    OH, OW = size
    b = block or 1
    blocked_shape(shape_nchw, b)
    CB = C // b
    lanes = lanes or host_cpu().lanes
    rows = resize_taps(OH, H, scales[0], mode, coord, nearest_mode)
    cols = resize_taps(OW, W, scales[1], mode, coord, nearest_mode)
    linear = mode == "linear"
    tables = _table(f"{name}_r0", "i64", [r[0] for r in rows]) + _table(f"{name}_c0", "i64", [c[0] for c in cols])
    if linear:
        tables += (_table(f"{name}_r1", "i64", [r[1] for r in rows]) + _table(f"{name}_rw", "float", [r[2] for r in rows])
                   + _table(f"{name}_c1", "i64", [c[1] for c in cols])
                   + _table(f"{name}_cw", "float", [c[2] for c in cols]))
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    x, out = arg_ptr(f, 0), arg_ptr(f, 1)
    n, cb, oh = decompose(f, "%item", [N, CB, OH])
    plane = f.affine((n, CB), (cb, 1))

    def entry(table: str, ty: str, index: str) -> str:
        return f.load(ty, f.op(f"getelementptr inbounds {ty}, ptr @{name}_{table}, i64 {index}"))

    def row_base(table: str) -> str:
        return f.affine((plane, H * W * b), (entry(table, "i64", oh), W * b))

    r0 = row_base("r0")
    chunks = vector_chunks(b, lanes)
    if linear:
        r1 = row_base("r1")
        wy = {w: splat(f, entry("rw", "float", oh), w) for w in {w for _, w in chunks}}
    obase = f.affine((plane, OH * OW * b), (oh, OW * b))
    with f.loop(OW) as ow:
        c0 = f.mul(entry("c0", "i64", ow), b)
        if linear:
            c1 = f.mul(entry("c1", "i64", ow), b)
            wx_scalar = entry("cw", "float", ow)
            wx = {w: splat(f, wx_scalar, w) for w in {w for _, w in chunks}}
        for off, w in chunks:
            def at(r: str, c: str) -> str:
                return f.load(vty(w), f.gep(x, f.add(f.op(f"add nsw i64 {r}, {c}"), off)))

            v = at(r0, c0)
            if linear:  # lerp along the row, then between the rows
                def lerp(a: str, z: str, t: str) -> str:
                    return f.op(f"call {vty(w)} @llvm.fma.v{w}f32({vty(w)} {t}, {vty(w)} "
                                f"{f.op(f'fsub {vty(w)} {z}, {a}')}, {vty(w)} {a})")

                top = lerp(v, at(r0, c1), wx[w])
                v = lerp(top, lerp(at(r1, c0), at(r1, c1), wx[w]), wy[w])
            f.store(vty(w), v, f.gep(out, f.add(f.affine((ow, b)), f.add(obase, off))))
    f.emit("ret void")
    decls = "".join(f"declare {vty(w)} @llvm.fma.v{w}f32({vty(w)}, {vty(w)}, {vty(w)})\n"
                    for w in sorted({w for _, w in chunks})) if linear else ""
    return tables + f.text() + decls + parallel_entry_ir(name, [(f"{name}_item", N * CB * OH)])


class ResizeKernel(Kernel):
    """``k(x, out)``: an NCHW[block]c tensor resized into an NCHW[block]c output."""

    def __init__(self, shape_nchw, block, mode, size, scales, coord, nearest_mode):
        n, c = shape_nchw[:2]
        self.input_shape = blocked_shape(shape_nchw, block or None)
        self.output_shape = blocked_shape((n, c) + tuple(size), block or None)
        ir = resize_ir(shape_nchw, block, mode, size, scales, coord, nearest_mode)
        super().__init__(compile_ir(ir), "resize", dict(x=self.input_shape, out=self.output_shape))


@functools.lru_cache(maxsize=None)
def build_resize(shape_nchw: tuple[int, int, int, int], block: int | None, mode: str, size: tuple[int, int],
                 scales: tuple[float, float], coord: str = "half_pixel",
                 nearest_mode: str = "round_prefer_floor") -> ResizeKernel:
    """Generate, compile and cache a resize kernel (see the module doc)."""
    return ResizeKernel(tuple(shape_nchw), block or None, mode, tuple(size), tuple(float(s) for s in scales),
                        coord, nearest_mode)
