"""Per-channel scale-shift (+ relu / relu6) over a blocked NCHW[b]c tensor, generated as LLVM IR.

``out = act(x * scale[c] + shift[c])``: an inference batch norm (or bias add) that
cannot be folded into a conv, e.g. the ``bn -> relu`` in front of each conv of a
pre-activation ResNet. With ``add=True`` a second tensor is added first,
``out = act((x + y) * scale[c] + shift[c])``: a residual add that no conv epilogue
could take (neither operand's conv writes the add's layout), with what follows it. Work items are rows ``(n, c chunk, h)`` spread over the
threads; a row holds ``W x b`` values, each ``b``-channel group one FMA per vector
of at most ``lanes`` channels, with the chunk's scale and shift loaded once per row.
numpy needs three passes over memory for the same (multiply, add, maximum).

>>> import numpy as np
>>> from kernels.packing import to_blocked, from_blocked
>>> x = np.random.default_rng(0).standard_normal((1, 32, 3, 5), dtype=np.float32)
>>> s, t = np.linspace(-1, 1, 32, dtype=np.float32), np.linspace(0, 1, 32, dtype=np.float32)
>>> k = build_channel_affine(x.shape, 16, activation="relu")
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 16), s, t, out)
>>> want = np.maximum(x * s.reshape(1, -1, 1, 1) + t.reshape(1, -1, 1, 1), 0)
>>> bool(np.allclose(from_blocked(out), want, atol=1e-6))
True
"""
from __future__ import annotations

import functools

from kernels.ir import IntrinsicSet, arg_ptr, const_splat, decompose, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu
from kernels.layout_transform import blocked_shape
from kernels.threads import parallel_entry_ir

__all__ = ["ChannelAffineKernel", "build_channel_affine", "channel_affine_ir"]


def channel_affine_ir(shape_nchw, block: int | None, activation: str | None = None, name: str = "affine",
                      lanes: int | None = None, add: bool = False) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, scale, shift, out[, y])``."""
    if activation not in (None, "relu", "relu6"):
        raise ValueError(f"activation must be None, 'relu' or 'relu6', got {activation!r}")
    N, C, H, W = shape_nchw
    b = block or 1
    blocked_shape(shape_nchw, b)  # validate
    CB = C // b
    lanes = lanes or host_cpu().lanes
    chunks = vector_chunks(b, lanes)
    intr = IntrinsicSet()
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    x, s, t, out = (arg_ptr(f, i) for i in range(4))
    y = arg_ptr(f, 4) if add else None
    _, cb, _ = decompose(f, "%item", [N, CB, H])
    row = f.mul("%item", W * b)
    params = []
    for off, w in chunks:
        c0 = f.affine((cb, b), const=off)
        params.append((f.load(vty(w), f.gep(s, c0)), f.load(vty(w), f.gep(t, c0))))
    with f.loop(W) as col:
        base = f.add(row, f.mul(col, b)) if b > 1 else f.add(row, col)
        for (off, w), (sv, tv) in zip(chunks, params):
            idx = f.add(base, off)
            xv = f.load(vty(w), f.gep(x, idx))
            if y is not None:
                xv = f.op(f"fadd {vty(w)} {xv}, {f.load(vty(w), f.gep(y, idx))}")
            v = intr.call(f, "fma", w, xv, sv, tv)
            if activation:
                v = intr.call(f, "maxnum", w, v, "zeroinitializer")
            if activation == "relu6":
                v = intr.call(f, "minnum", w, v, const_splat(6.0, w))
            f.store(vty(w), v, f.gep(out, idx))
    f.emit("ret void")
    return f.text() + intr.declarations() + parallel_entry_ir(name, [(f"{name}_item", N * CB * H)])


class ChannelAffineKernel(Kernel):
    """``k(x, scale, shift, out[, y])``: x, y and out in NCHW[block]c, scale and shift of shape (C,)."""

    def __init__(self, shape_nchw, block: int | None, activation: str | None, add: bool = False):
        self.input_shape = self.output_shape = blocked_shape(shape_nchw, block or None)
        ir = channel_affine_ir(shape_nchw, block, activation, add=add)
        c = shape_nchw[1]
        super().__init__(compile_ir(ir), "affine", dict(x=self.input_shape, scale=(c,), shift=(c,),
                                                          out=self.output_shape, y=self.input_shape if add else None))


@functools.lru_cache(maxsize=None)
def build_channel_affine(shape_nchw: tuple[int, int, int, int], block: int | None,
                         activation: str | None = None, add: bool = False) -> ChannelAffineKernel:
    """Generate, compile and cache the scale-shift kernel for a shape, block, activation and
    whether a second tensor is added first."""
    return ChannelAffineKernel(tuple(int(v) for v in shape_nchw), block or None, activation, add)
