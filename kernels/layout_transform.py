"""Layout-transform kernels NCHW <-> NCHW[x]c and NCHW[a]c -> NCHW[b]c, generated as LLVM IR.

Plain NCHW is block ``None``/0 and has the same memory order as ``NCHW1c``, so one
template covers every direction: work items are ``(n, destination channel chunk, h)``
rows spread over the threads; each row copies ``W x b`` values with the channel
loop unrolled inside the column loop (for ``b <= 64``), which LLVM's vectoriser
turns into interleaved vector loads/stores. Blocks must divide the channels.

>>> import numpy as np
>>> x = np.arange(2 * 8 * 3 * 5, dtype=np.float32).reshape(2, 8, 3, 5)
>>> t = build_transform(x.shape, None, 4)
>>> y = np.empty(t.output_shape, np.float32)
>>> t(x, y)
>>> bool((y == to_blocked(x, 4)).all())
True
"""
from __future__ import annotations

from typing import Iterable

from kernels.ir import decompose
from kernels.jit import CompiledModule, IRFunction, Kernel, compile_ir, compile_linked
from kernels.packing import from_blocked, to_blocked
from kernels.threads import parallel_entry_ir

__all__ = ["TransformKernel", "blocked_shape", "build_transform", "build_transforms", "from_blocked", "to_blocked", "transform_ir"]

_UNROLL_LIMIT = 64


def blocked_shape(shape_nchw, block: int | None) -> tuple[int, ...]:
    """Shape of an NCHW tensor in NCHW[block]c (``block`` None/0: the plain 4-d shape).

    >>> blocked_shape((1, 64, 56, 56), 16)
    (1, 4, 56, 56, 16)
    """
    n, c, h, w = shape_nchw
    if not block:
        return (n, c, h, w)
    if block < 1 or c % block:
        raise ValueError(f"block {block} does not divide {c} channels")
    return (n, c // block, h, w, block)


def transform_ir(shape_nchw, src_block: int | None, dst_block: int | None, name: str = "transform") -> str:
    """LLVM IR text of ``void @name(ptr args, i32 nthreads)`` with args ``(src, dst)``."""
    N, C, H, W = shape_nchw
    a, b = src_block or 1, dst_block or 1
    blocked_shape(shape_nchw, a), blocked_shape(shape_nchw, b)  # validate
    CA, CB = C // a, C // b
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    src = f.op("load ptr, ptr %args, align 8")
    dst = f.op(f"load ptr, ptr {f.gep('%args', '1', 'ptr')}, align 8")
    n, cb, h = decompose(f, "%item", [N, CB, H])

    def copy(w: str, ci) -> None:
        c = f.affine((cb, b), *([(ci, 1)] if isinstance(ci, str) else []), const=ci if isinstance(ci, int) else 0)
        s_chunk = f.op(f"udiv i64 {c}, {a}") if a > 1 else c
        s_off = f.op(f"urem i64 {c}, {a}") if a > 1 else "0"
        s = f.affine((n, CA * H * W * a), (s_chunk, H * W * a), (h, W * a), (w, a), (s_off, 1))
        d = f.affine((n, CB * H * W * b), (cb, H * W * b), (h, W * b), (w, b),
                     *([(ci, 1)] if isinstance(ci, str) else []), const=ci if isinstance(ci, int) else 0)
        f.store("float", f.load("float", f.gep(src, s)), f.gep(dst, d))

    if b <= _UNROLL_LIMIT:
        with f.loop(W) as w:
            for ci in range(b):
                copy(w, ci)
    else:
        with f.loop(b) as ci:
            with f.loop(W) as w:
                copy(w, ci)
    f.emit("ret void")
    return f.text() + parallel_entry_ir(name, [(f"{name}_item", N * CB * H)])


class TransformKernel(Kernel):
    """A compiled layout transform: ``t(src, dst)``."""

    def __init__(self, shape_nchw, src_block: int | None, dst_block: int | None,
                 module: CompiledModule | None = None, name: str = "transform"):
        """``module``: one already compiled holding ``@name`` (:func:`build_transforms`)."""
        self.shape_nchw = tuple(shape_nchw)
        self.src_block, self.dst_block = src_block or None, dst_block or None
        self.input_shape = blocked_shape(shape_nchw, src_block)
        self.output_shape = blocked_shape(shape_nchw, dst_block)
        if module is None:
            module = compile_ir(transform_ir(shape_nchw, src_block, dst_block, name))
        super().__init__(module, name, dict(src=self.input_shape, dst=self.output_shape))

    @property
    def nbytes_moved(self) -> int:
        """Bytes read plus bytes written by one call (for GB/s)."""
        n, c, h, w = self.shape_nchw
        return 2 * 4 * n * c * h * w


_built: dict[tuple, TransformKernel] = {}  # (shape, src block, dst block) -> kernel, for the process


def _key(shape_nchw, src_block: int | None, dst_block: int | None) -> tuple:
    return tuple(int(x) for x in shape_nchw), src_block or None, dst_block or None


def build_transform(shape_nchw: tuple[int, int, int, int], src_block: int | None,
                    dst_block: int | None) -> TransformKernel:
    """Generate, compile and cache the transform of an NCHW-shaped tensor between two blocks."""
    key = _key(shape_nchw, src_block, dst_block)
    if key not in _built:
        _built[key] = TransformKernel(*key)
    return _built[key]


# Transforms compiled to one LLVM module (build_transforms): few enough that a stopped run
# loses little compiling, many enough to halve the compile time.
PER_MODULE = 32


def build_transforms(keys: Iterable[tuple], per_module: int = PER_MODULE) -> None:
    """Compile the transforms of ``keys`` (``(shape, src block, dst block)``) not built yet,
    ``per_module`` to an LLVM module (:func:`kernels.jit.compile_linked`: half the compile
    time of one module each), into the cache :func:`build_transform` reads."""
    todo = list(dict.fromkeys(k for k in (_key(*key) for key in keys) if k not in _built))
    for start in range(0, len(todo), per_module):
        part = todo[start:start + per_module]
        names = [f"transform_{i}" for i in range(len(part))]
        module = compile_linked([transform_ir(*k, name=n) for k, n in zip(part, names)])
        for k, name in zip(part, names):
            _built[k] = TransformKernel(*k, module=module, name=name)
