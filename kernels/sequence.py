"""Many bound kernel calls as one native function: a whole network run is one call.

A compiled network is a list of bound kernels (:class:`kernels.jit.BoundKernel`), each
``void f(ptr args, i32 nthreads)`` with its argument block fixed. Calling them one by one
from Python costs a ctypes call and the interpreter's loop per step (about 7% of
MobileNet-v2's 2.5 ms, the issue's profile). Here the calls are written into one LLVM
function, ``void @run()``, that calls each entry address with its argument block in
order: the generated code is the schedule, computed once, and running the network is
one foreign call.

The same module holds ``void @run_timed(ptr stamps)``: the same calls, with the monotonic
clock (``clock_gettime``, called from the generated code) read before the first and after
each, so a profile times every step as a run makes it. Timed from Python one by one, the
steps took 5-10% longer than the native run (session 28: MobileNet-v2 1.095x, DenseNet-121
1.057x, ResNet-18 1.047x; a ctypes call and the interpreter between kernels, while the pool's
threads wait), and every in-network ratio taken from such a profile carried that.

>>> import numpy as np
>>> from kernels.elementwise import build_elementwise
>>> k = build_elementwise((1, 2, 2, 2), 1)
>>> x, y = np.ones(k.input_shape, np.float32), np.empty(k.output_shape, np.float32)
>>> z = np.empty_like(y)
>>> two, zero = np.full(2, 2, np.float32), np.zeros(2, np.float32)
>>> run = compile_sequence([k.bind(x, two, zero, y), k.bind(y, two, zero, z)])
>>> run(); float(z.sum())
32.0
>>> len(run.step_seconds())  # the same calls, each one timed
2
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from kernels.jit import BoundKernel, compile_ir

CLOCK_MONOTONIC = 1  # Linux's clockid_t
# libc's clock_gettime (the vDSO's: no system call), called by address from generated code.
_CLOCK_GETTIME = ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value


class NativeSequence:
    """``run()`` makes every call of the sequence, in order, in one foreign call."""

    def __init__(self, calls: Sequence[BoundKernel]):
        self.calls = tuple(calls)  # keeps every kernel, buffer and argument block alive
        self._module = compile_ir(sequence_ir(self.calls) + timed_sequence_ir(self.calls), cache=False)
        self._fn = ctypes.CFUNCTYPE(None)(self._module["run"])
        self._timed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._module["run_timed"])
        self._stamps = np.zeros((len(self.calls) + 1, 2), np.int64)  # struct timespec each

    def __call__(self) -> None:
        self._fn()

    def step_seconds(self) -> np.ndarray:
        """Run the sequence once, timing each call: seconds per call, in order."""
        self._timed(self._stamps.ctypes.data)
        return np.diff(self._stamps[:, 0] * 1_000_000_000 + self._stamps[:, 1]) / 1e9

    def __len__(self) -> int:
        return len(self.calls)


def sequence_ir(calls: Sequence[BoundKernel]) -> str:
    """The IR of ``void @run()`` calling each kernel's entry with its argument block.

    >>> print(sequence_ir([]).splitlines()[0])
    define void @run() {
    """
    lines = ["define void @run() {", *map(_call, calls)]
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


def _call(c: BoundKernel) -> str:
    # Addresses as constants: the JIT resolves nothing, each call is a plain indirect call.
    return f"  call void inttoptr (i64 {c.entry} to ptr)(ptr inttoptr (i64 {c.args} to ptr), i32 {c.nthreads})"


def timed_sequence_ir(calls: Sequence[BoundKernel]) -> str:
    """The IR of ``void @run_timed(ptr stamps)``: :func:`sequence_ir`'s calls, with
    ``clock_gettime(CLOCK_MONOTONIC, &stamps[i])`` before the first call (i = 0) and after each
    (``stamps``: a ``struct timespec`` per call, plus one). The clock is an opaque call, so the
    optimiser moves no kernel call across it.

    >>> print(timed_sequence_ir([]).splitlines()[0])
    define void @run_timed(ptr %stamps) {
    """
    def stamp(i: int) -> list[str]:
        return [f"  %s{i} = getelementptr inbounds [2 x i64], ptr %stamps, i64 {i}",
                f"  call i32 inttoptr (i64 {_CLOCK_GETTIME} to ptr)(i32 {CLOCK_MONOTONIC}, ptr %s{i})"]

    lines = ["define void @run_timed(ptr %stamps) {", *stamp(0)]
    for i, c in enumerate(calls):
        lines += [_call(c), *stamp(i + 1)]
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


def compile_sequence(calls: Sequence[BoundKernel]) -> NativeSequence:
    """One native function making ``calls`` in order (see the module docstring)."""
    return NativeSequence(calls)
