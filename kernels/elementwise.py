"""Elementwise passes over a blocked NCHW[b]c tensor, generated as LLVM IR.

``out = act((x op y) * scale[c] + shift[c])``, each part optional:

* ``op`` (``binary``): ``add`` or ``mul`` of a second tensor ``y`` of the same shape, or,
  with ``y_channel``, of shape ``(N, C, 1, 1)``: one value per image and channel, as a
  squeeze-and-excite block's channel-wise multiply; a residual add that no conv
  epilogue could take (neither operand's conv writes the add's layout);
* the per-channel scale-shift (``affine``): an inference batch norm or bias add that
  cannot be folded into a conv, e.g. the ``bn -> relu`` in front of each conv of a
  pre-activation ResNet;
* ``act``: :data:`kernels.activations.ACTIVATIONS`, given as a name or a tuple
  ``(name, *params)``: the same IR as a conv epilogue's (:mod:`kernels.activations`).

Work items are rows ``(n, c chunk, h)`` spread over the threads. In a blocked layout a
row holds ``W x b`` values, each ``b``-channel group one vector operation per vector of
at most ``lanes`` channels, with the chunk's scale and shift loaded once per row; in plain
NCHW a row is ``W`` values of one channel, taken ``lanes`` at a time. numpy needs a pass
over memory per operation.

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

from kernels.activations import ACTIVATIONS, VectorMath, activation_spec
from kernels.ir import IntrinsicSet, arg_ptr, decompose, splat, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu
from kernels.layout_transform import blocked_shape
from kernels.threads import parallel_entry_ir

__all__ = ["ACTIVATIONS", "ElementwiseKernel", "activation_spec", "build_elementwise", "elementwise_ir"]

BINARY = (None, "add", "mul")


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
    intr = IntrinsicSet()
    m = VectorMath(f, intr)
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
    return f.text() + intr.declarations() + parallel_entry_ir(name, [(f"{name}_item", N * CB * H)])


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
    is a name or a ``(name, *params)`` tuple of :data:`kernels.activations.ACTIVATIONS`."""
    return ElementwiseKernel(tuple(int(v) for v in shape_nchw), block or None, activation_spec(activation),
                             binary, bool(y_channel), bool(affine))
