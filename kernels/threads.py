"""Parallel runtime for generated kernels: libgomp's ``GOMP_parallel`` called from LLVM IR.

A kernel is a list of phases; each phase is a loop over ``total`` independent work
items handled by an IR function ``void @body(ptr %args, i64 %item)``. The entry
point ``void @kernel(ptr %args, i32 %nthreads)`` forks the threads once per phase
(``GOMP_parallel`` returns after an implicit barrier) and every thread takes one
contiguous, balanced slice of the items. Python threads calling ctypes cost
100-250 us per hand-off; libgomp's fork/join costs a few microseconds.

Where libgomp cannot be loaded the entry runs the items itself on one thread (with a
warning). Thread count: env ``GRAPH_TUNER_NUM_THREADS``, default all usable cores.

>>> num_threads() >= 1
True
>>> 'GOMP_parallel' in parallel_entry_ir("k", [("body", 8)]) or not have_openmp()
True
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import warnings

import llvmlite.binding as llvm

_OMP_SYMBOLS = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")


@functools.lru_cache(maxsize=None)
def _libgomp() -> ctypes.CDLL | None:
    names = ["libgomp.so.1", ctypes.util.find_library("gomp")]
    for name in filter(None, names):
        try:
            # RTLD_GLOBAL so the JIT's symbol lookup can find it too.
            return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    warnings.warn("libgomp not found: generated kernels run on one thread", RuntimeWarning, stacklevel=2)
    return None


def have_openmp() -> bool:
    """True when libgomp is loaded and kernels can use all cores."""
    return _libgomp() is not None


@functools.lru_cache(maxsize=None)
def ensure_runtime_loaded() -> None:
    """Make libgomp's entry points resolvable by the JIT linker (idempotent)."""
    lib = _libgomp()
    if lib is None:
        return
    for symbol in _OMP_SYMBOLS:
        llvm.add_symbol(symbol, ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)


def num_threads() -> int:
    """Threads kernels use: ``GRAPH_TUNER_NUM_THREADS`` or all usable cores (1 without libgomp)."""
    if not have_openmp():
        return 1
    env = os.environ.get("GRAPH_TUNER_NUM_THREADS")
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(f"GRAPH_TUNER_NUM_THREADS={env!r} is not an integer") from None
        if value < 1:
            raise ValueError(f"GRAPH_TUNER_NUM_THREADS={env!r} must be >= 1")
        return value
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_LOOP_MD = "!{0} = distinct !{{!{0}, !{1}}}\n!{1} = !{{!\"llvm.loop.unroll.disable\"}}\n"


def parallel_entry_ir(kernel: str, phases: list[tuple[str, int]], *, md_base: int = 1_000_000_000) -> str:
    """IR text of ``void @kernel(ptr %args, i32 %nthreads)`` running ``phases`` in order.

    ``phases`` is ``[(body_function_name, total_items), ...]``; the bodies are defined
    elsewhere in the same module as ``void @body(ptr, i64)``. Metadata ids from
    ``md_base`` upwards are used (two per phase).
    """
    omp = have_openmp()
    out = []
    if omp:
        out.append("declare void @GOMP_parallel(ptr, ptr, i32, i32)\n"
                   "declare i32 @omp_get_thread_num()\ndeclare i32 @omp_get_num_threads()\n")
    for p, (body, total) in enumerate(phases):
        md = md_base + 2 * p
        if omp:
            # Balanced contiguous slice [total*tid/nt, total*(tid+1)/nt) of the items.
            head = (f"  %tid32 = call i32 @omp_get_thread_num()\n  %nt32 = call i32 @omp_get_num_threads()\n"
                    f"  %tid = sext i32 %tid32 to i64\n  %nt = sext i32 %nt32 to i64\n"
                    f"  %a0 = mul i64 %tid, {total}\n  %start = sdiv i64 %a0, %nt\n"
                    f"  %tid1 = add i64 %tid, 1\n  %a1 = mul i64 %tid1, {total}\n  %end = sdiv i64 %a1, %nt\n")
        else:
            head = f"  %start = add i64 0, 0\n  %end = add i64 0, {total}\n"
        out.append(
            f"define internal void @{kernel}_phase{p}(ptr %args) nounwind {{\nentry:\n{head}"
            f"  %empty = icmp sge i64 %start, %end\n  br i1 %empty, label %done, label %loop\n"
            f"loop:\n  %i = phi i64 [%start, %entry], [%next, %loop]\n"
            f"  call void @{body}(ptr %args, i64 %i)\n  %next = add i64 %i, 1\n"
            f"  %more = icmp slt i64 %next, %end\n  br i1 %more, label %loop, label %done, !llvm.loop !{md}\n"
            f"done:\n  ret void\n}}\n" + _LOOP_MD.format(md, md + 1))
    calls = []
    for p in range(len(phases)):
        if omp:
            calls.append(f"  call void @GOMP_parallel(ptr @{kernel}_phase{p}, ptr %args, i32 %nthreads, i32 0)\n")
        else:
            calls.append(f"  call void @{kernel}_phase{p}(ptr %args)\n")
    out.append(f"define void @{kernel}(ptr %args, i32 %nthreads) nounwind {{\nentry:\n{''.join(calls)}  ret void\n}}\n")
    return "".join(out)
