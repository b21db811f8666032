"""Parallel runtime for generated kernels: our own thread pool, driven from LLVM IR.

A kernel is a list of phases; each phase is a loop over ``total`` independent work
items handled by an IR function ``void @body(ptr %args, i64 %item)``. The entry point
``void @kernel(ptr %args, i32 %nthreads)`` hands each phase to ``@gt_parallel``
(:mod:`kernels.pool_ir`): the calling thread and up to ``nthreads - 1`` pool workers
claim chunks of about ``total / (8 * nthreads)`` items, and the call returns when
every item is done.

Why not libgomp (used before): its ``GOMP_parallel`` ends in a barrier that waits for
every team thread to *arrive*, even one that the shared host has descheduled and that
would find no work left. Here the caller waits only for items that were claimed; a
late worker finds the job gone. On this 2-core shared VM that took ResNet-18's p90
latency from 1.65-1.8x its median to 1.13-1.25x (onnxruntime's: 1.1-1.2x), and its median
down 7% (benchmarks/README.md); ResNet-50 did not change beyond noise.

Workers (pthreads, started once) spin ~0.5 ms between kernels, then sleep on a futex.
Linux may wake a sleeper onto its waker's CPU, where it waits for the caller: the caller
therefore yields its CPU while it waits, and a job that is over before a worker gets to
run simply ran on fewer threads. Thread count: env ``GRAPH_TUNER_NUM_THREADS``, default all usable cores; the
pool has ``max(that, cores) - 1`` workers. The JIT (:mod:`kernels.jit`) compiles the pool's
runtime (:mod:`kernels.pool_ir`) and starts the workers before it links the first kernel.

>>> num_threads() >= 1
True
>>> '@gt_parallel' in parallel_entry_ir("k", [("body", 8)])
True
"""
from __future__ import annotations

import os

# The pool starts one OS thread per thread asked for: a typo such as 100000 must not.
MAX_THREADS = 1024

# Row tiles per thread from which a kernel takes its work items rows first (rows_first_items).
ROWS_FIRST_TILES = 8


def num_threads() -> int:
    """Threads kernels use: ``GRAPH_TUNER_NUM_THREADS`` or all usable cores."""
    env = os.environ.get("GRAPH_TUNER_NUM_THREADS")
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(f"GRAPH_TUNER_NUM_THREADS={env!r} is not an integer") from None
        if not 1 <= value <= MAX_THREADS:
            raise ValueError(f"GRAPH_TUNER_NUM_THREADS={env!r} must be from 1 to {MAX_THREADS}")
        return value
    return min(usable_cores(), MAX_THREADS)


def rows_first_items(row_tiles: int, channel_blocks: int, threads: int | None = None) -> bool:
    """Whether a kernel over NCHWc planes numbers its work items rows first, ``(n, rows,
    channel block)``, not ``(n, channel block, rows)``: with more than one channel block and
    :data:`ROWS_FIRST_TILES` row tiles (the rows one item computes at a time) per thread.

    The pool gives each thread a contiguous band of the items first (:mod:`kernels.pool_ir`).
    Rows first, a thread's band is the same rows of every tensor of a stage, whichever kernel
    writes or reads it (stride 2 halves the rows of both), so each core mostly reads lines it
    wrote itself and writes over lines only it holds. Channel blocks first, a 1x1 conv reads
    every input row on every core, and a kernel after it writes over lines both cores hold,
    waiting for the other's copy to be invalidated. The convs (:func:`kernels.conv2d.takes_rows_first`,
    :mod:`kernels.depthwise`) and the pools (:mod:`kernels.pooling`) take it alike (a conv counts
    its row tiles, ``oh_bn`` rows each; a pool or depthwise conv its rows); the other kernels
    (layout transforms, elementwise, resize, softmax, transposed convs) keep their order
    (transforms and elementwise kernels rows first were no faster, benchmarks/README.md,
    sessions 26 and 53). Session 53 (Zen 4 VM, 2 threads; rows first
    before for the 1x1 convs only): the eleven shipped models took 0.97-1.00x the time
    (EfficientNet-B0 1.013x in one run, 0.997x in the next), most in the host's slow phase,
    when the FMA peak held but the memory-bound steps slowed (ResNeXt-50's first-stage grouped
    convs 2.6x channel blocks first, rows first about their fast time): there 0.93-1.00x.

    >>> rows_first_items(56, 8, threads=2), rows_first_items(14, 8, threads=2), rows_first_items(56, 1, threads=2)
    (True, False, False)
    """
    return channel_blocks > 1 and row_tiles >= ROWS_FIRST_TILES * (threads or num_threads())


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_entry_ir(kernel: str, phases: list[tuple], *, md_base: int = 1_000_000_000) -> str:
    """IR text of ``void @kernel(ptr %args, i32 %nthreads)`` running ``phases`` in order.

    ``phases`` is ``[(body_function_name, total_items), ...]``; the bodies are defined
    elsewhere in the same module as ``void @body(ptr, i64)``. A phase given as
    ``(body, total, True)`` has a body ``void @body(ptr, i64 item, i64 next)`` told the
    item its thread runs next (-1 when none), so it can prefetch for it: threads claim
    their next chunk before running the last item of the current one. ``md_base`` is
    accepted for compatibility (no metadata is emitted).
    """
    lines = ["  %nt = sext i32 %nthreads to i64", "  %parts = mul i64 %nt, 8"]
    for p, (body, total, *flags) in enumerate(phases):
        ahead = 1 if flags and flags[0] else 0
        lines += [f"  %c{p} = sdiv i64 {total}, %parts", f"  %small{p} = icmp slt i64 %c{p}, 1",
                  f"  %chunk{p} = select i1 %small{p}, i64 1, i64 %c{p}",
                  f"  call void @gt_parallel(ptr @{body}, ptr %args, i64 {total}, i64 %chunk{p}, i32 {ahead}, "
                  f"i32 %nthreads)"]
    return ("declare void @gt_parallel(ptr, ptr, i64, i64, i32, i32)\n"
            f"define void @{kernel}(ptr %args, i32 %nthreads) nounwind {{\nentry:\n" + "\n".join(lines)
            + "\n  ret void\n}\n")
