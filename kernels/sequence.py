"""Many bound kernel calls as one native function: a whole network run is one call.

A compiled network is a list of bound kernels (:class:`kernels.jit.BoundKernel`), each
``void f(ptr args, i32 nthreads)`` with its argument block fixed. Calling them one by one
from Python costs a ctypes call and the interpreter's loop per step (about 7% of
MobileNet-v2's 2.5 ms, the issue's profile). Here the calls are written into one LLVM
function, ``void @run()``, that calls each entry address with its argument block in
order: the generated code is the schedule, computed once, and running the network is
one foreign call.

>>> import numpy as np
>>> from kernels.elementwise import build_elementwise
>>> k = build_elementwise((1, 2, 2, 2), 1)
>>> x, y = np.ones(k.input_shape, np.float32), np.empty(k.output_shape, np.float32)
>>> z = np.empty_like(y)
>>> two, zero = np.full(2, 2, np.float32), np.zeros(2, np.float32)
>>> run = compile_sequence([k.bind(x, two, zero, y), k.bind(y, two, zero, z)])
>>> run(); float(z.sum())
32.0
"""
from __future__ import annotations

import ctypes
from typing import Sequence

from kernels.jit import BoundKernel, compile_ir


class NativeSequence:
    """``run()`` makes every call of the sequence, in order, in one foreign call."""

    def __init__(self, calls: Sequence[BoundKernel]):
        self.calls = tuple(calls)  # keeps every kernel, buffer and argument block alive
        self._module = compile_ir(sequence_ir(self.calls), cache=False)
        self._fn = ctypes.CFUNCTYPE(None)(self._module["run"])

    def __call__(self) -> None:
        self._fn()

    def __len__(self) -> int:
        return len(self.calls)


def sequence_ir(calls: Sequence[BoundKernel]) -> str:
    """The IR of ``void @run()`` calling each kernel's entry with its argument block.

    >>> print(sequence_ir([]).splitlines()[0])
    define void @run() {
    """
    lines = ["define void @run() {"]
    for i, c in enumerate(calls):
        # Addresses as constants: the JIT resolves nothing, each call is a plain indirect call.
        lines.append(f"  call void inttoptr (i64 {c.entry} to ptr)(ptr inttoptr (i64 {c.args} to ptr), "
                     f"i32 {c.nthreads})")
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


def compile_sequence(calls: Sequence[BoundKernel]) -> NativeSequence:
    """One native function making ``calls`` in order (see the module docstring)."""
    return NativeSequence(calls)
