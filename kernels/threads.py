"""Parallel runtime for generated kernels: libgomp's ``GOMP_parallel`` called from LLVM IR.

A kernel is a list of phases; each phase is a loop over ``total`` independent work
items handled by an IR function ``void @body(ptr %args, i64 %item)``. The entry
point ``void @kernel(ptr %args, i32 %nthreads)`` forks the threads once per phase
(``GOMP_parallel`` returns after an implicit barrier) and the threads claim chunks
of items from a shared counter. Python threads calling ctypes cost
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

_OMP_SYMBOLS = ("GOMP_parallel",)


# libgomp's idle threads busy-wait GOMP_SPINCOUNT iterations (300000 by default) before
# sleeping. On a loaded machine that is catastrophic: a 1 ms conv measured 25-32 ms with
# the default vs 3.5-7 ms with 10000 and 2.7-4.4 ms fully passive (load 5 on 2 cores).
# 10000 (~10-30 us) still covers back-to-back kernel calls. libgomp reads it when
# loaded; the user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT win.
DEFAULT_SPINCOUNT = "10000"


@functools.lru_cache(maxsize=None)
def _libgomp() -> ctypes.CDLL | None:
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", DEFAULT_SPINCOUNT)
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


def parallel_entry_ir(kernel: str, phases: list[tuple], *, md_base: int = 1_000_000_000) -> str:
    """IR text of ``void @kernel(ptr %args, i32 %nthreads)`` running ``phases`` in order.

    ``phases`` is ``[(body_function_name, total_items), ...]``; the bodies are defined
    elsewhere in the same module as ``void @body(ptr, i64)``. A phase given as
    ``(body, total, True)`` has a body ``void @body(ptr, i64 item, i64 next)`` told the
    item its thread runs next (-1 when none), so it can prefetch for it: threads then claim
    their next chunk before running the last item of the current one. Metadata ids from
    ``md_base`` upwards are used (two per phase).

    Threads claim chunks of about ``total / (8 * nthreads)`` items from a shared atomic
    counter rather than fixed slices: when another process preempts one of our
    threads the others take over its share instead of waiting for it.
    """
    omp = have_openmp()
    out = []
    if omp:
        out.append("declare void @GOMP_parallel(ptr, ptr, i32, i32)\n")
    for p, (body, total, *flags) in enumerate(phases):
        md = md_base + 2 * p
        head = (f"define internal void @{kernel}_phase{p}(ptr %ctx) nounwind {{\nentry:\n"
                f"  %args = load ptr, ptr %ctx, align 8\n"
                f"  %counter = getelementptr inbounds i8, ptr %ctx, i64 8\n"
                f"  %chunk_p = getelementptr inbounds i8, ptr %ctx, i64 16\n"
                f"  %chunk = load i64, ptr %chunk_p, align 8\n")
        if flags and flags[0]:
            # Claim ahead: [start, end) is ours; items start..end-2 know their successor,
            # the last one learns it from the next claim.
            out.append(
                head + f"  %s0 = atomicrmw add ptr %counter, i64 %chunk monotonic, align 8\n"
                f"  %h0 = icmp slt i64 %s0, {total}\n  br i1 %h0, label %pre, label %done\n"
                f"pre:\n  %start = phi i64 [%s0, %entry], [%s1, %tail]\n  %e0 = add i64 %start, %chunk\n"
                f"  %lt = icmp slt i64 %e0, {total}\n  %end = select i1 %lt, i64 %e0, i64 {total}\n"
                f"  %lastitem = add i64 %end, -1\n  %any = icmp slt i64 %start, %lastitem\n"
                f"  br i1 %any, label %loop, label %tail\n"
                f"loop:\n  %i = phi i64 [%start, %pre], [%next, %loop]\n  %next = add i64 %i, 1\n"
                f"  call void @{body}(ptr %args, i64 %i, i64 %next)\n"
                f"  %more = icmp slt i64 %next, %lastitem\n  br i1 %more, label %loop, label %tail, !llvm.loop !{md}\n"
                f"tail:\n  %s1 = atomicrmw add ptr %counter, i64 %chunk monotonic, align 8\n"
                f"  %h1 = icmp slt i64 %s1, {total}\n  %nx = select i1 %h1, i64 %s1, i64 -1\n"
                f"  call void @{body}(ptr %args, i64 %lastitem, i64 %nx)\n"
                f"  br i1 %h1, label %pre, label %done\n"
                f"done:\n  ret void\n}}\n" + _LOOP_MD.format(md, md + 1))
            continue
        out.append(
            head + f"  br label %claim\n"
            f"claim:\n  %start = atomicrmw add ptr %counter, i64 %chunk monotonic, align 8\n"
            f"  %has = icmp slt i64 %start, {total}\n  br i1 %has, label %pre, label %done\n"
            f"pre:\n  %e0 = add i64 %start, %chunk\n  %lt = icmp slt i64 %e0, {total}\n"
            f"  %end = select i1 %lt, i64 %e0, i64 {total}\n  br label %loop\n"
            f"loop:\n  %i = phi i64 [%start, %pre], [%next, %loop]\n"
            f"  call void @{body}(ptr %args, i64 %i)\n  %next = add i64 %i, 1\n"
            f"  %more = icmp slt i64 %next, %end\n  br i1 %more, label %loop, label %claim, !llvm.loop !{md}\n"
            f"done:\n  ret void\n}}\n" + _LOOP_MD.format(md, md + 1))
    lines = ["  %ctx = alloca [3 x i64], align 8", "  store ptr %args, ptr %ctx, align 8",
             "  %counter = getelementptr inbounds i8, ptr %ctx, i64 8",
             "  %chunk_p = getelementptr inbounds i8, ptr %ctx, i64 16",
             "  %nt = sext i32 %nthreads to i64", "  %parts = mul i64 %nt, 8"]
    for p, (_, total, *_flags) in enumerate(phases):
        lines += ["  store i64 0, ptr %counter, align 8"]
        if omp:
            lines += [f"  %c{p} = sdiv i64 {total}, %parts", f"  %small{p} = icmp slt i64 %c{p}, 1",
                      f"  %chunk{p} = select i1 %small{p}, i64 1, i64 %c{p}",
                      f"  store i64 %chunk{p}, ptr %chunk_p, align 8",
                      f"  call void @GOMP_parallel(ptr @{kernel}_phase{p}, ptr %ctx, i32 %nthreads, i32 0)"]
        else:
            lines += [f"  store i64 {total}, ptr %chunk_p, align 8", f"  call void @{kernel}_phase{p}(ptr %ctx)"]
    out.append(f"define void @{kernel}(ptr %args, i32 %nthreads) nounwind {{\nentry:\n" + "\n".join(lines)
               + "\n  ret void\n}\n")
    return "".join(out)
