"""Max / average pooling over a blocked NCHW[b]c tensor, generated as LLVM IR.

Work items are output rows ``(n, c chunk, oh)`` spread over the threads, numbered ``(n, oh,
c chunk)`` where :func:`kernels.threads.rows_first_items`. Each output
pixel reduces its window clipped to the input (bounds computed per row and per
column, so padding and ceil-mode windows reaching past the input cost nothing and
need no padded copy), one vector of at most ``lanes`` channels at a time. Max
ignores what lies outside the input; average divides by the window's overlap with
the input, or with the padded input when ``count_include_pad`` (PyTorch's rule).

>>> import numpy as np
>>> from kernels.packing import to_blocked, from_blocked
>>> x = np.random.default_rng(0).standard_normal((1, 16, 6, 6), dtype=np.float32)
>>> k = build_pool2d(x.shape, 8, "max", (3, 3), (2, 2), (1, 1, 1, 1), (3, 3))
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 8), out)
>>> bool((from_blocked(out)[0, :, 1, 1] == x[0, :, 1:4, 1:4].max(axis=(1, 2))).all())
True
"""
from __future__ import annotations

from kernels.ir import MINMAX_DECL, IntrinsicSet, arg_ptr, decompose, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu, kernel_cache
from kernels.layout_transform import blocked_shape
from kernels.threads import parallel_entry_ir, rows_first_items

__all__ = ["PoolKernel", "build_pool2d", "pool2d_ir"]


def _clip(f: IRFunction, start: str, size: int, limit_lo: int, limit_hi: int) -> tuple[str, str]:
    """``[max(start, lo), min(start + size, hi))`` as i64 values."""
    lo = f.op(f"call i64 @llvm.smax.i64(i64 {start}, i64 {limit_lo})")
    end = f.op(f"add nsw i64 {start}, {size}")
    hi = f.op(f"call i64 @llvm.smin.i64(i64 {end}, i64 {limit_hi})")
    return lo, hi


def pool2d_ir(shape_nchw, block: int | None, kind: str, pool_size, strides, padding, out_hw,
              count_include_pad: bool = False, name: str = "pool", lanes: int | None = None) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, out)``."""
    if kind not in ("max", "avg"):
        raise ValueError(f"kind must be 'max' or 'avg', got {kind!r}")
    N, C, H, W = shape_nchw
    b = block or 1
    blocked_shape(shape_nchw, b)
    CB = C // b
    (KH, KW), (sh, sw), (top, left, bottom, right), (OH, OW) = pool_size, strides, padding, out_hw
    lanes = lanes or host_cpu().lanes
    chunks = vector_chunks(b, lanes)
    intr = IntrinsicSet()
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    x, out = arg_ptr(f, 0), arg_ptr(f, 1)
    if rows_first_items(OH, CB):  # see there
        f.emit("; items rows first")
        n, oh, cb = decompose(f, "%item", [N, OH, CB])
    else:
        n, cb, oh = decompose(f, "%item", [N, CB, OH])
    plane = f.affine((n, CB), (cb, 1))
    h0 = f.op(f"sub nsw i64 {f.mul(oh, sh)}, {top}")
    hlo, hhi = _clip(f, h0, KH, 0, H)
    if kind == "avg":
        plo, phi = _clip(f, h0, KH, -top, H + bottom) if count_include_pad else (hlo, hhi)
        rows = f.op(f"sub nsw i64 {phi}, {plo}")
    slots = [f.slot(vty(w)) for _, w in chunks]
    with f.loop(OW) as ow:
        w0 = f.op(f"sub nsw i64 {f.mul(ow, sw)}, {left}")
        wlo, whi = _clip(f, w0, KW, 0, W)
        for (off, w), slot in zip(chunks, slots):
            start = "<" + ", ".join(["float 0xFFF0000000000000"] * w) + ">" if kind == "max" else "zeroinitializer"
            f.store(vty(w), start, slot)
        with f.loop(hhi, hlo) as h:
            with f.loop(whi, wlo) as col:
                base = f.affine((plane, H * W * b), (h, W * b), (col, b))
                for (off, w), slot in zip(chunks, slots):
                    v = f.load(vty(w), f.gep(x, f.add(base, off)))
                    acc = f.load(vty(w), slot)
                    new = intr.call(f, "maxnum", w, acc, v) if kind == "max" else f.op(f"fadd {vty(w)} {acc}, {v}")
                    f.store(vty(w), new, slot)
        obase = f.affine((plane, OH * OW * b), (oh, OW * b), (ow, b))
        if kind == "avg":
            clo, chi = _clip(f, w0, KW, -left, W + right) if count_include_pad else (wlo, whi)
            count = f.op(f"mul nsw i64 {rows}, {f.op(f'sub nsw i64 {chi}, {clo}')}")
            inv = f.op(f"fdiv float 1.0, {f.op(f'sitofp i64 {count} to float')}")
        for (off, w), slot in zip(chunks, slots):
            v = f.load(vty(w), slot)
            if kind == "avg":
                splat1 = f.op(f"insertelement {vty(w)} poison, float {inv}, i32 0")
                sp = f.op(f"shufflevector {vty(w)} {splat1}, {vty(w)} poison, <{w} x i32> zeroinitializer")
                v = f.op(f"fmul {vty(w)} {v}, {sp}")
            f.store(vty(w), v, f.gep(out, f.add(obase, off)))
    f.emit("ret void")
    return f.text() + MINMAX_DECL + intr.declarations() + parallel_entry_ir(name, [(f"{name}_item", N * CB * OH)])


class PoolKernel(Kernel):
    """``k(x, out)``: pooling of an NCHW[block]c tensor into an NCHW[block]c output."""

    def __init__(self, shape_nchw, block, kind, pool_size, strides, padding, out_hw, count_include_pad):
        n, c = shape_nchw[:2]
        self.input_shape = blocked_shape(shape_nchw, block or None)
        self.output_shape = blocked_shape((n, c) + tuple(out_hw), block or None)
        ir = pool2d_ir(shape_nchw, block, kind, pool_size, strides, padding, out_hw, count_include_pad)
        super().__init__(compile_ir(ir), "pool", dict(x=self.input_shape, out=self.output_shape))


@kernel_cache()  # its text depends on the thread count (rows_first_items): cleared with the convs'
def build_pool2d(shape_nchw: tuple[int, int, int, int], block: int | None, kind: str, pool_size: tuple[int, int],
                 strides: tuple[int, int], padding: tuple[int, int, int, int], out_hw: tuple[int, int],
                 count_include_pad: bool = False) -> PoolKernel:
    """Generate, compile and cache a pooling kernel (see the module doc)."""
    return PoolKernel(tuple(shape_nchw), block or None, kind, tuple(pool_size), tuple(strides), tuple(padding),
                      tuple(out_hw), bool(count_include_pad))
