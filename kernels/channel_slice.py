"""A channel slice ``x[:, begin:end]`` of a blocked NCHW[b]c tensor, generated as LLVM IR.

With the block dividing ``begin`` and ``end`` (the plan's rule), the slice is whole
channel chunks: each output row ``(n, c chunk, h)`` is one contiguous copy of
``W x b`` values from the input row of chunk ``begin / b + c chunk``. Work items are
those rows, spread over the threads.

>>> import numpy as np
>>> from kernels.packing import to_blocked, from_blocked
>>> x = np.random.default_rng(0).standard_normal((2, 24, 3, 5), dtype=np.float32)
>>> k = build_channel_slice(x.shape, 8, 8, 24)
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 8), out)
>>> bool((from_blocked(out) == x[:, 8:24]).all())
True
"""
from __future__ import annotations

import functools

from kernels.ir import MEMCPY_DECL, arg_ptr, decompose
from kernels.jit import IRFunction, Kernel, compile_ir
from kernels.layout_transform import blocked_shape
from kernels.threads import parallel_entry_ir

__all__ = ["ChannelSliceKernel", "build_channel_slice", "channel_slice_ir"]


def channel_slice_ir(shape_nchw, block: int | None, begin: int, end: int, name: str = "slice") -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, out)``."""
    N, C, H, W = shape_nchw
    b = block or 1
    blocked_shape(shape_nchw, b)
    if not 0 <= begin < end <= C or begin % b or end % b:
        raise ValueError(f"block {b} must divide the slice [{begin}, {end}) of {C} channels")
    CB, OCB = C // b, (end - begin) // b
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    x, out = arg_ptr(f, 0), arg_ptr(f, 1)
    n, cb, h = decompose(f, "%item", [N, OCB, H])
    src = f.gep(x, f.affine((n, CB * H * W * b), (cb, H * W * b), (h, W * b), const=begin * H * W))
    dst = f.gep(out, f.mul("%item", W * b))
    f.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr align 4 {dst}, ptr align 4 {src}, i64 {W * b * 4}, i1 false)")
    f.emit("ret void")
    return MEMCPY_DECL + f.text() + parallel_entry_ir(name, [(f"{name}_item", N * OCB * H)])


class ChannelSliceKernel(Kernel):
    """``k(x, out)``: channels ``[begin, end)`` of an NCHW[block]c tensor."""

    def __init__(self, shape_nchw, block, begin, end):
        n, _, h, w = shape_nchw
        self.input_shape = blocked_shape(shape_nchw, block or None)
        self.output_shape = blocked_shape((n, end - begin, h, w), block or None)
        super().__init__(compile_ir(channel_slice_ir(shape_nchw, block, begin, end)), "slice",
                         dict(x=self.input_shape, out=self.output_shape))


@functools.lru_cache(maxsize=None)
def build_channel_slice(shape_nchw: tuple[int, int, int, int], block: int | None, begin: int,
                        end: int) -> ChannelSliceKernel:
    """Generate, compile and cache the slice kernel for a shape, block and channel range."""
    return ChannelSliceKernel(tuple(int(v) for v in shape_nchw), block or None, int(begin), int(end))
