"""Layout-transform kernels NCHW <-> NCHW[x]c and NCHW[a]c -> NCHW[b]c, generated as LLVM IR.

Plain NCHW is block ``None``/0 and has the same memory order as ``NCHW1c``. Work items are
rows, ``(n, channel chunk, h)``, spread over the threads. A pixel's channels move in runs
contiguous in both layouts, one vector copy each (:func:`_runs_item`); into plain NCHW,
tiles of 16 pixels are transposed in registers (:func:`_unblock_item`). Blocks must divide
the channels.

>>> import numpy as np
>>> x = np.arange(2 * 8 * 3 * 5, dtype=np.float32).reshape(2, 8, 3, 5)
>>> t = build_transform(x.shape, None, 4)
>>> y = np.empty(t.output_shape, np.float32)
>>> t(x, y)
>>> bool((y == to_blocked(x, 4)).all())
True
"""
from __future__ import annotations

import math
from typing import Iterable

from kernels.ir import decompose
from kernels.jit import CompiledModule, IRFunction, Kernel, compile_ahead, compile_ir, linked_text
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
    """LLVM IR text of ``void @name(ptr args, i32 nthreads)`` with args ``(src, dst)``: blocks
    of up to 64 to plain NCHW by register tiles (:func:`_unblock_item`), any other pair by
    runs of channels (:func:`_runs_item`)."""
    N, C, H, W = shape_nchw
    a, b = src_block or 1, dst_block or 1
    blocked_shape(shape_nchw, a), blocked_shape(shape_nchw, b)  # validate
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
    src = f.op("load ptr, ptr %args, align 8")
    dst = f.op(f"load ptr, ptr {f.gep('%args', '1', 'ptr')}, align 8")
    if 1 < a <= _UNROLL_LIMIT and b == 1:  # a tile is 16 x a values in registers
        items = _unblock_item(f, src, dst, shape_nchw, a)
    else:
        items = _runs_item(f, src, dst, shape_nchw, a, b)
    f.emit("ret void")
    return f.text() + parallel_entry_ir(name, [(f"{name}_item", items)])


def _runs_item(f: IRFunction, src: str, dst: str, shape_nchw, a: int, b: int) -> int:
    """Item ``(n, destination chunk, h)``: a pixel's channels sit in runs of ``r = gcd(a, b)``
    that are contiguous in both layouts, each run one ``<r x float>`` copy with its source
    chunk and offset worked out once per row (``r`` is 1 from plain NCHW, where LLVM's
    vectoriser makes the channel loop interleaved stores). Element by element (a division
    per value for the source offset), NCHW64c -> NCHW32c compiled to 64 scalar moves a
    pixel and ran 1.4-1.8x as long. Returns the item count."""
    N, C, H, W = shape_nchw
    CA, CB, r = C // a, C // b, math.gcd(a, b)
    ty = f"<{r} x float>" if r > 1 else "float"
    n, cb, h = decompose(f, "%item", [N, CB, H])
    d_row = f.affine((n, CB * H * W * b), (cb, H * W * b), (h, W * b))

    def source_row(k) -> str:
        """Offset of run ``k``'s first channel at pixel (h, 0) of the source."""
        c = f.affine((cb, b), *([(k, r)] if isinstance(k, str) else []), const=k * r if isinstance(k, int) else 0)
        chunk = f.op(f"udiv i64 {c}, {a}") if a > 1 else c
        off = f.op(f"urem i64 {c}, {a}") if a > 1 else "0"
        return f.affine((n, CA * H * W * a), (chunk, H * W * a), (h, W * a), (off, 1))

    def copy(s_row: str, k, w: str) -> None:
        s = f.affine((s_row, 1), (w, a))
        d = f.affine((d_row, 1), (w, b), *([(k, r)] if isinstance(k, str) else []),
                     const=k * r if isinstance(k, int) else 0)
        f.store(ty, f.load(ty, f.gep(src, s)), f.gep(dst, d))

    runs = b // r
    if runs <= _UNROLL_LIMIT:
        rows = [source_row(k) for k in range(runs)]
        with f.loop(W) as w:
            for k, s_row in enumerate(rows):
                copy(s_row, k, w)
    else:
        with f.loop(runs) as k:
            s_row = source_row(k)
            with f.loop(W) as w:
                copy(s_row, k, w)
    return N * CB * H


_TILE = 16  # pixels of an unblocking register tile


def _unblock_item(f: IRFunction, src: str, dst: str, shape_nchw, a: int) -> int:
    """Item ``(n, source chunk, h)``, NCHW[a]c -> NCHW: each tile of 16 pixels is one load of
    ``16 x a`` contiguous values and ``a`` shuffles out of it, one 16-value row a channel.
    Value by value, each row was a gather at stride ``a``: the tiles took 0.21-0.64x the
    time (YOLOv5s's 255-channel head output from NCHW15c: 0.32 ms against 0.50 on the
    session-24 Xeon). Returns the item count."""
    N, C, H, W = shape_nchw
    CA = C // a
    n, ca, h = decompose(f, "%item", [N, CA, H])
    s_row = f.affine((n, CA * H * W * a), (ca, H * W * a), (h, W * a))
    d_row = f.affine((n, C * H * W), (ca, a * H * W), (h, W))

    def tile(w0: str, width: int) -> None:
        t = f.load(f"<{width * a} x float>", f.gep(src, f.affine((s_row, 1), (w0, a))))
        for ci in range(a):
            mask = ", ".join(f"i32 {ci + j * a}" for j in range(width))
            row = f.op(f"shufflevector <{width * a} x float> {t}, <{width * a} x float> poison, "
                       f"<{width} x i32> <{mask}>")
            f.store(f"<{width} x float>", row, f.gep(dst, f.affine((d_row, 1), (w0, 1), const=ci * H * W)))

    full, tail = divmod(W, _TILE)
    if full:
        with f.loop(full) as wt:
            tile(f.mul(wt, _TILE), _TILE)
    if tail:
        tile(str(full * _TILE), tail)
    return N * CA * H


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
    ``per_module`` to an LLVM module (:func:`kernels.jit.linked_text`: half the compile time
    of one module each), the modules side by side on this process and a helper
    (:func:`kernels.jit.compile_ahead`), into the cache :func:`build_transform` reads."""
    todo = list(dict.fromkeys(k for k in (_key(*key) for key in keys) if k not in _built))
    # At least two modules where there are two transforms, one each side: a tune measures the
    # few a plan asks for at a time (DenseNet-121: 307 in 21 calls).
    count = max(-(-len(todo) // per_module), min(2, len(todo)))
    size = -(-len(todo) // count) if todo else 1
    parts = [todo[start:start + size] for start in range(0, len(todo), size)]
    texts = [linked_text([transform_ir(*k, name=f"transform_{i}") for i, k in enumerate(part)]) for part in parts]
    compile_ahead(texts)
    for part, text in zip(parts, texts):
        module = compile_ir(text)
        for i, k in enumerate(part):
            _built[k] = TransformKernel(*k, module=module, name=f"transform_{i}")
