"""Softmax over the last axis of a float32 matrix, generated as LLVM IR.

One work item per row: a vector pass for the maximum, one for ``exp(x - max)`` and its
sum, one scaling by ``1 / sum``. Differences below -80 are clamped before ``exp``: their
results would be float32 subnormals, which run ~100x slower, and they are 0 next to the
largest term (1) anyway. numpy needed six calls per row, and right after a network's
kernels their cold code paths cost ~100 us for ResNet's 1000 classes; this is one call.

>>> import numpy as np
>>> x = np.array([[1.0, 2.0, 3.0], [0.0, -200.0, 0.0]], np.float32)
>>> out = np.empty_like(x)
>>> build_softmax(2, 3)(x, out)
>>> [[round(float(v), 4) for v in r] for r in out]
[[0.09, 0.2447, 0.6652], [0.5, 0.0, 0.5]]
"""
from __future__ import annotations

import functools

from kernels.ir import IntrinsicSet, arg_ptr, const_splat, splat, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu
from kernels.threads import parallel_entry_ir

__all__ = ["SoftmaxKernel", "build_softmax", "softmax_ir"]

CLAMP = -80.0


def softmax_ir(rows: int, cols: int, name: str = "softmax", lanes: int | None = None) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, out)``, both ``rows x cols``."""
    lanes = lanes or host_cpu().lanes
    full, tail = divmod(cols, lanes)
    parts = [(None, lanes)] if full else []  # (None: the loop over full vectors, width)
    parts += [(full * lanes + off, w) for off, w in vector_chunks(tail, lanes)] if tail else []
    intr = IntrinsicSet()
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    x, out = arg_ptr(f, 0), arg_ptr(f, 1)
    row = f.mul("%item", cols)

    def over(body) -> None:
        """Call ``body(index, width)`` for every vector of the row."""
        for start, w in parts:
            if start is None:
                with f.loop(full) as i:
                    body(f.add(row, f.mul(i, lanes)), w)
            else:
                body(f.add(row, start), w)

    def horizontal(kind: str, slot: str, w: int) -> str:
        v = f.load(vty(w), slot)
        if kind == "max":
            return f.op(f"call float @llvm.vector.reduce.fmax.v{w}f32({vty(w)} {v})")
        return f.op(f"call reassoc float @llvm.vector.reduce.fadd.v{w}f32(float 0.0, {vty(w)} {v})")

    # Pass 1: the maximum (one accumulator per vector width used).
    widths = sorted({w for _, w in parts})
    maxes = {w: f.slot(vty(w), "<" + ", ".join(["float 0xFFF0000000000000"] * w) + ">") for w in widths}  # -inf
    over(lambda idx, w: f.store(vty(w), intr.call(f, "maxnum", w, f.load(vty(w), maxes[w]),
                                                   f.load(vty(w), f.gep(x, idx))), maxes[w]))
    m = None
    for w in widths:
        h = horizontal("max", maxes[w], w)
        m = h if m is None else f.op(f"call float @llvm.maxnum.f32(float {m}, float {h})")
    # Pass 2: e = exp(max(x - m, CLAMP)), summed.
    sums = {w: f.slot(vty(w), "zeroinitializer") for w in widths}
    ms = {w: splat(f, m, w) for w in widths}  # made here, before the loops that use them

    def exp_pass(idx: str, w: int) -> None:
        d = f.op(f"fsub {vty(w)} {f.load(vty(w), f.gep(x, idx))}, {ms[w]}")
        d = intr.call(f, "maxnum", w, d, const_splat(CLAMP, w))
        e = f.op(f"call {vty(w)} @llvm.exp.v{w}f32({vty(w)} {d})")
        f.store(vty(w), e, f.gep(out, idx))
        f.store(vty(w), f.op(f"fadd {vty(w)} {f.load(vty(w), sums[w])}, {e}"), sums[w])

    over(exp_pass)
    total = None
    for w in widths:
        h = horizontal("sum", sums[w], w)
        total = h if total is None else f.op(f"fadd float {total}, {h}")
    inv = f.op(f"fdiv float 1.0, {total}")
    invs = {w: splat(f, inv, w) for w in widths}
    # Pass 3: scale.
    over(lambda idx, w: f.store(vty(w), f.op(f"fmul {vty(w)} {f.load(vty(w), f.gep(out, idx))}, {invs[w]}"),
                                f.gep(out, idx)))
    f.emit("ret void")
    decls = "".join(f"declare float @llvm.vector.reduce.fmax.v{w}f32({vty(w)})\n"
                    f"declare float @llvm.vector.reduce.fadd.v{w}f32(float, {vty(w)})\n"
                    f"declare {vty(w)} @llvm.exp.v{w}f32({vty(w)})\n" for w in widths)
    decls += "declare float @llvm.maxnum.f32(float, float)\n" if len(widths) > 1 else ""
    return f.text() + intr.declarations() + decls + parallel_entry_ir(name, [(f"{name}_item", rows)])


class SoftmaxKernel(Kernel):
    """``k(x, out)`` over ``rows x cols`` float32 matrices."""

    def __init__(self, rows: int, cols: int):
        self.input_shape = self.output_shape = (rows, cols)
        super().__init__(compile_ir(softmax_ir(rows, cols)), "softmax", dict(x=(rows, cols), out=(rows, cols)))


@functools.lru_cache(maxsize=None)
def build_softmax(rows: int, cols: int) -> SoftmaxKernel:
    """Generate, compile and cache the softmax kernel for a ``rows x cols`` matrix."""
    return SoftmaxKernel(int(rows), int(cols))
