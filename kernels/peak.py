"""This machine's FMA peak: the roofline a compute-bound network cannot beat.

A tight loop of independent vector FMAs (24 accumulators, well over the 8 that two FMA
pipes of 4-cycle latency keep busy; 12 on AVX2, whose 16 registers would spill 24), run as 16 work items per
thread through the pool (many items, as kernels have, so the pool shares them out). A
network's FLOPs over this rate is the time no runtime can beat on these cores; the
``graph-tuner bench`` targets are stated against it (``roofline_ms``).

>>> fma_peak(1) > 1.0  # GFLOP/s
True
"""
from __future__ import annotations

import ctypes
import functools
import math
import time

import numpy as np

from kernels.jit import IRFunction, compile_ir, host_cpu
from kernels.threads import parallel_entry_ir
from kernels.tuner import max_accumulators

ITERATIONS = 200_000  # per item: ~10 ms a call on 2 threads, long enough to time


@functools.lru_cache(maxsize=None)
def _peak_kernel(lanes: int, accs: int, items: int) -> int:
    v = f"<{lanes} x float>"
    f = IRFunction("define internal void @body(ptr %args, i64 %item) nounwind")
    buf = f.op("load ptr, ptr %args")
    a, b = f.load(v, buf), f.load(v, f.gep(buf, str(lanes)))  # unknown values: nothing folds
    slots = [f.slot(v, "zeroinitializer") for _ in range(accs)]
    with f.loop(ITERATIONS):
        for s in slots:
            f.store(v, f.op(f"call {v} @llvm.fma.v{lanes}f32({v} {a}, {v} {b}, {v} {f.load(v, s)})"), s)
    total = f.load(v, slots[0])
    for s in slots[1:]:
        total = f.op(f"fadd {v} {total}, {f.load(v, s)}")
    f.store(v, total, f.gep(buf, f.mul(f.add("%item", 2), lanes)))  # the result is used
    f.emit("ret void")
    ir = f.text() + f"declare {v} @llvm.fma.v{lanes}f32({v}, {v}, {v})\n" + parallel_entry_ir("peak", [("body", items)])
    return compile_ir(ir)["peak"]


def fma_peak(threads: int, repeat: int = 5) -> float:
    """GFLOP/s of ``threads`` threads doing nothing but FMAs: the best of ``repeat`` calls."""
    lanes = host_cpu().lanes
    accs, items = min(24, max_accumulators(lanes)), 16 * threads
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(_peak_kernel(lanes, accs, items))
    data = np.full((items + 2) * lanes, 0.5, np.float32)
    args = (ctypes.c_void_p * 1)(data.ctypes.data)
    best = math.inf
    for _ in range(repeat + 1):  # the first call warms the pool and the clocks
        t0 = time.perf_counter()
        fn(ctypes.addressof(args), threads)
        best = min(best, time.perf_counter() - t0)
    return items * ITERATIONS * accs * lanes * 2 / best / 1e9
