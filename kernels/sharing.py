"""A kernel that reads a buffer on every thread: the cache state a network leaves behind.

Inside a network a layer's output usually lands in memory that a layer before it just read,
and a conv whose work items are output-channel blocks reads each input row on several
threads: each line is then held clean by every core. Writing such a line costs each core an
invalidation of the others' copies. On Zen 4 (2 cores) MobileNet-v2's depthwise convs wrote
over memory this kernel had just read 2.5-2.8x slower than back to back, where each line is
the writer's own (``benchmarks/output_state.py``; benchmarks/README.md, session 17).

It reads the first ``floats // 16 * 16`` floats (whole 16-float vectors) once per work item;
the :data:`ITEMS` items are claimed dynamically, so usually every thread takes some (a
thread that finds them all taken reads nothing: the state is then one core's).

>>> import numpy as np
>>> k = build_reader(1000)
>>> x = np.ones(1000, np.float32); sink = np.zeros(64, np.float32)
>>> k(x, sink); float(sink[0])  # lane 0 of the sum of 62 whole vectors (the tail is not read)
62.0
"""
from __future__ import annotations

from kernels.ir import arg_ptr
from kernels.jit import IRFunction, Kernel, compile_ir, kernel_cache
from kernels.threads import parallel_entry_ir

__all__ = ["ReaderKernel", "build_reader", "reader_ir"]

ITEMS = 4  # each item reads the buffer (see the module doc)
_V = 16


def reader_ir(floats: int, name: str = "reader") -> str:
    """IR of ``void @name(ptr args, i32 nthreads)``, args ``(buf, sink)``: each of
    :data:`ITEMS` items sums ``buf``'s whole 16-float vectors and stores lane 0 at ``sink[item * 16]``."""
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    buf, sink = arg_ptr(f, 0), arg_ptr(f, 1)
    acc = f.slot("<16 x float>", "zeroinitializer")
    with f.loop(floats // _V) as i:
        v = f.load("<16 x float>", f.gep(buf, f.mul(i, _V)))
        f.store("<16 x float>", f.op(f"fadd <16 x float> {f.load('<16 x float>', acc)}, {v}"), acc)
    lane = f.op(f"extractelement <16 x float> {f.load('<16 x float>', acc)}, i64 0")
    f.store("float", lane, f.gep(sink, f.mul("%item", _V)))
    f.emit("ret void")
    return f.text() + parallel_entry_ir(name, [(f"{name}_item", ITEMS)])


class ReaderKernel(Kernel):
    """``k(buf, sink)``: the threads read ``buf`` (``floats`` float32; see the module doc)."""

    def __init__(self, floats: int):
        super().__init__(compile_ir(reader_ir(floats)), "reader", dict(buf=(floats,), sink=(ITEMS * _V,)))


@kernel_cache()
def build_reader(floats: int) -> ReaderKernel:
    """Generate, compile and cache the reader for a buffer of ``floats`` float32."""
    return ReaderKernel(int(floats))
