"""Transposed conv (ONNX ``ConvTranspose``, PyTorch ``ConvTranspose2d``; dilation 1) of a
blocked NCHW[b]c tensor into NCHW[b]c, generated as LLVM IR.

Gathered, not scattered: output pixel ``(oy, ox)`` sums the taps ``(ky, kx)`` with
``(oy + pad_top - ky) % stride == 0`` (and the same in x) whose input pixel
``((oy + pad_top - ky) / stride, ...)`` exists. Only those taps are generated, so no
multiplication by a zero of the "inserted" rows and columns is ever made:

* **Rows** are the work items ``(n, c chunk, oy)``. A row's valid ``ky`` are
  ``ky0 + t * stride`` for ``t`` in one contiguous range, computed once per row.
* **Columns** are static. Away from the borders, the columns repeat with period
  ``stride``: the ``stride`` columns whose ``(ox + pad_left) // stride`` is ``q`` read input
  columns ``q, q - 1, ...`` through the same ``kx``. Those periods run in a loop, a few
  at a time as one register tile of accumulators (:data:`ACC_REGISTERS`); the border
  columns, whose taps the input's edges cut, are generated one by one.

Vectorised over the channel block: **depthwise** (``groups == C_in == C_out``, CenterNet's
IDA up-sampling: kernel ``2f``, stride ``f``, padding ``f / 2``, 2 x 2 taps an output pixel)
is one vector FMA per tap, an input vector times a weight vector (weight packed
``[C/b, kH, kW, b]``). **Dense and grouped** convs broadcast each input channel of the
output block's groups against a weight vector of ``b`` output channels (weight packed
``[C_out/b, S, kH, kW, b]``, ``S`` the input channels the widest block reads, zero where an
output lane is of another group): correct in any block, but with ``C_in`` scalar
broadcasts a tap, and zero lanes where a block straddles groups, slower per FLOP than the
conv2d kernels (no tuned schedule: it is not a conv layer of the plan). A plain layout
(block 1) gives no channel vector: one value at a time, correct and slow.

Layout: the input and the output are in the same block, which must divide both channel
counts. A conv_transpose is a decision of the plan's own (:mod:`graph_tuner.layout_flow`):
it keeps its input's block when that divides ``C_out`` too (CenterNet's depthwise
up-sampling always can), else the plan pays a transform to a block that does.

>>> import numpy as np
>>> from kernels.packing import to_blocked, from_blocked
>>> spec = ConvTransposeSpec((1, 16, 3, 4), 16, (4, 4), (2, 2), (1, 1, 1, 1), groups=16)
>>> k = build_conv_transpose(spec, 8)
>>> k.input_shape, k.weight_shape, k.output_shape
((1, 2, 3, 4, 8), (2, 4, 4, 8), (1, 2, 6, 8, 8))
>>> x = np.ones((1, 16, 3, 4), np.float32); w = np.ones((16, 1, 4, 4), np.float32)
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 8), pack_conv_transpose_weight(w, spec, 8), out)
>>> from_blocked(out)[0, 0].tolist()[:2]  # corners: 1 tap; edges: 2; inside: 2 x 2
[[1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0], [2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 2.0]]
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from kernels.ir import MINMAX_DECL, IntrinsicSet, arg_ptr, decompose, splat, tap_range, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu
from kernels.layout_transform import blocked_shape
from kernels.packing import pack_depthwise_weight
from kernels.threads import parallel_entry_ir

__all__ = ["ACC_REGISTERS", "ConvTransposeKernel", "ConvTransposeSpec", "axis_taps", "build_conv_transpose",
           "column_tiles", "conv_transpose_ir", "pack_conv_transpose_weight"]

# Vector accumulators a register tile keeps (AVX2 has 16 registers: the rest hold the loaded
# input and weight vectors).
ACC_REGISTERS = 12


@dataclass(frozen=True)
class ConvTransposeSpec:
    """What a transposed conv computes: input NCHW shape, output channels, kernel, strides,
    padding ``[top, left, bottom, right]``, output padding, groups, a bias or not."""

    data_shape: tuple[int, int, int, int]
    channels: int
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    output_padding: tuple[int, int] = (0, 0)
    groups: int = 1
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("data_shape", "kernel", "strides", "padding", "output_padding"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        c, g = self.data_shape[1], self.groups
        if g < 1 or c % g or self.channels % g:
            raise ValueError(f"groups={g} does not divide channels {c}->{self.channels}")
        if min(self.out_shape[2:]) < 1 or any(o >= s for o, s in zip(self.output_padding, self.strides)):
            raise ValueError(f"transposed conv {self} has no output, or output padding not below the stride")

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        n, _, h, w = self.data_shape
        (kh, kw), (sh, sw), (t, l, b, r), (oph, opw) = self.kernel, self.strides, self.padding, self.output_padding
        return n, self.channels, out_size(h, kh, sh, t, b, oph), out_size(w, kw, sw, l, r, opw)

    @property
    def is_depthwise(self) -> bool:
        """One input channel per output channel and group (channel multiplier 1)."""
        return self.groups == self.data_shape[1] == self.channels

    def span(self, block: int) -> int:
        """Input channels the output block reading the most groups reads (dense packing's ``S``)."""
        cin_g, cout_g = self.data_shape[1] // self.groups, self.channels // self.groups
        return max(((c + block - 1) // cout_g - c // cout_g + 1) * cin_g for c in range(0, self.channels, block))


def out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, output_padding: int = 0) -> int:
    """Output length of a transposed conv (dilation 1) over one spatial axis: each of the
    ``size`` inputs scatters ``kernel`` taps ``stride`` apart, the ends are cropped by the
    padding and ``output_padding`` rows are added at the end (ONNX's and PyTorch's rule).

    >>> out_size(16, 4, 2, 1, 1), out_size(5, 3, 2, 1, 1, 1)
    (32, 10)
    """
    return (size - 1) * stride + kernel - pad_begin - pad_end + output_padding


def axis_taps(o: int, size: int, kernel: int, stride: int, pad: int) -> list[tuple[int, int]]:
    """``(kernel index, input index)`` of the taps output index ``o`` sums along one axis.

    >>> axis_taps(0, 4, 4, 2, 1), axis_taps(3, 4, 4, 2, 1)
    ([(1, 0)], [(0, 2), (2, 1)])
    """
    return [(k, (o + pad - k) // stride) for k in range(kernel)
            if o + pad - k >= 0 and (o + pad - k) % stride == 0 and (o + pad - k) // stride < size]


@dataclass
class _Tile:
    """Columns computed together: each ``(ox offset, [(kx, ix offset), ...])`` from the tile's
    base output and input column (a runtime value in the periodic part, 0 at the borders)."""

    columns: list[tuple[int, list[tuple[int, int]]]]


def column_tiles(out_w: int, in_w: int, kernel: int, stride: int, pad: int, cap: int
                 ) -> tuple[list[_Tile], tuple[int, int, int], list[_Tile]]:
    """The column plan: border tiles (absolute columns), the periodic part as
    ``(first period q, loop count, periods a tile)`` with its tiles (columns relative to the
    tile's first period). Periods the loop leaves over are border columns too. At most ``cap``
    columns a tile.

    >>> border, (q0, count, per), body = column_tiles(64, 16, 8, 4, 2, 12)
    >>> (q0, count, per), [len(t.columns) for t in body], [c for c, _ in border[0].columns]
    ((1, 5, 3), [12], [0, 1, 62, 63])
    """
    def regular(q: int) -> bool:
        return all(0 <= q * stride - pad + j < out_w and axis_taps(q * stride - pad + j, in_w, kernel, stride, pad)
                   == [(j + u * stride, q - u) for u in range(-(-(kernel - j) // stride))] for j in range(stride))
    run: list[int] = []  # the first stretch of regular periods
    for q in range(in_w + 1):
        if regular(q):
            run.append(q)
        elif run:
            break
    per = max(1, cap // stride)
    q0, count = (run[0], len(run) // per) if run else (0, 0)
    looped = range(q0 * stride - pad, (q0 + count * per) * stride - pad) if count else range(0)
    periodic = [(p * stride + j, [(j + u * stride, p - u) for u in range(-(-(kernel - j) // stride))])
                for p in range(per) for j in range(stride)]
    border = [(ox, axis_taps(ox, in_w, kernel, stride, pad)) for ox in range(out_w) if ox not in looped]
    return _split(border, cap), (q0, count, per), _split(periodic, cap)


def _split(columns: list, cap: int) -> list[_Tile]:
    """Consecutive columns into tiles of at most ``cap``, evenly (8 columns, cap 6: 4 + 4)."""
    if not columns:
        return []
    parts = -(-len(columns) // cap)
    size = -(-len(columns) // parts)
    return [_Tile(columns[i: i + size]) for i in range(0, len(columns), size)]


class _Emitter:
    """The IR of one work item, an output row ``(n, c chunk, oy)``, tile by tile."""

    def __init__(self, spec: ConvTransposeSpec, block: int, lanes: int, name: str):
        self.spec, self.b = spec, block
        self.N, self.C, self.H, self.W = spec.data_shape
        _, self.CO, self.OH, self.OW = spec.out_shape
        self.f = f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind")
        self.intr, self.chunks, self.slots = IntrinsicSet(), vector_chunks(block, lanes), {}
        self.x, self.w, self.out = arg_ptr(f, 0), arg_ptr(f, 1), arg_ptr(f, 2)
        self.n, self.cb, self.oy = decompose(f, "%item", [self.N, self.CO // block, self.OH])
        bias = arg_ptr(f, 3) if spec.bias else None  # each chunk's start, loaded once per row
        self.init = ["zeroinitializer" if bias is None
                     else f.load(vty(w), f.gep(bias, f.affine((self.cb, block), const=off))) for off, w in self.chunks]
        self.span = spec.span(block)
        self._row_taps()
        if not spec.is_depthwise:
            self._group_range()

    def _row_taps(self) -> None:
        """This row's taps: ``ky = py + t * s`` reading input row ``iy = q - t``, for ``t`` in
        ``[lo, hi)`` (``ky < kH``, ``0 <= iy < H``): one range, so the loop over it has no tests."""
        f, s, kh = self.f, self.spec.strides[0], self.spec.kernel[0]
        a = f.add(self.oy, self.spec.padding[0])
        self.py = f.op(f"urem i64 {a}, {s}") if s > 1 else "0"
        self.q = f.op(f"udiv i64 {a}, {s}") if s > 1 else a
        tk = f.op(f"udiv i64 {f.op(f'sub nsw i64 {kh + s - 1}, {self.py}')}, {s}") if s > 1 else str(kh)
        # 0 <= q - t < H, mirrored: 0 <= (H - 1 - q) + t < H (the shared tap rule)
        self.t_lo, self.t_hi = tap_range(f, f.op(f"sub nsw i64 {self.H - 1}, {self.q}"), self.H, tk, 1)

    def _group_range(self) -> None:
        """Dense / grouped: the input channels ``[ci_lo, ci_lo + n_ci)`` this output block reads."""
        f, b, g = self.f, self.b, self.spec.groups
        cin_g, cout_g = self.C // g, self.CO // g
        if g == 1:
            self.ci_lo, self.n_ci = "0", self.C
            return
        first = f.mul(self.cb, b)
        g_lo = f.op(f"udiv i64 {first}, {cout_g}")
        g_hi = f.op(f"udiv i64 {f.add(first, b - 1)}, {cout_g}")
        self.ci_lo = f.mul(g_lo, cin_g)
        self.n_ci = f.mul(f.add(f.op(f"sub nsw i64 {g_hi}, {g_lo}"), 1), cin_g)

    def tile(self, tile: _Tile, base_ox: str | int, base_ix: str | int) -> None:
        """Accumulate the tile's columns over this row's taps, then store them (bias first)."""
        f, b = self.f, self.b
        acc = {}
        for i in range(len(tile.columns)):
            for c, (off, w) in enumerate(self.chunks):
                if (i, c) not in self.slots:
                    self.slots[(i, c)] = f.slot(vty(w))
                acc[(i, c)] = self.slots[(i, c)]
                f.store(vty(w), self.init[c], acc[(i, c)])
        with f.loop(self.t_hi, start=self.t_lo) as t:
            if self.spec.is_depthwise:
                self._depthwise_taps(tile, base_ix, t, acc)
            else:
                with f.loop(self.n_ci) as r:
                    self._dense_taps(tile, base_ix, t, r, acc)
        obase = f.affine((self.n, self.CO // b * self.OH * self.OW * b), (self.cb, self.OH * self.OW * b),
                         (self.oy, self.OW * b), *([(base_ox, b)] if isinstance(base_ox, str) else []),
                         const=0 if isinstance(base_ox, str) else base_ox * b)
        for (i, c), slot in acc.items():
            off, w = self.chunks[c]
            f.store(vty(w), f.load(vty(w), slot), f.gep(self.out, f.add(obase, tile.columns[i][0] * b + off)))

    def _rows(self, base_ix: str | int, t: str, channel: list) -> tuple[str, str]:
        """The input offset of (row ``iy``, column ``base_ix``) and the weight offset of ``ky``."""
        f, b, kw, s = self.f, self.b, self.spec.kernel[1], self.spec.strides[0]
        H, W = self.H, self.W
        cols = [(base_ix, b)] if isinstance(base_ix, str) else []
        x = f.affine((self.n, self.C // b * H * W * b), *channel, (self.q, W * b), (t, -W * b), *cols,
                     const=0 if isinstance(base_ix, str) else base_ix * b)
        return x, f.affine((self.py, kw * b), (t, s * kw * b))

    def _fma(self, acc_slot: str, w: int, x: str, weight: str) -> None:
        f = self.f
        f.store(vty(w), self.intr.call(f, "fma", w, x, weight, f.load(vty(w), acc_slot)), acc_slot)

    def _depthwise_taps(self, tile: _Tile, base_ix: str | int, t: str, acc: dict) -> None:
        """One tap = one vector FMA: the input's channel vector times the weight's."""
        f, b, (kh, kw) = self.f, self.b, self.spec.kernel
        H, W = self.H, self.W
        x_row, w_row = self._rows(base_ix, t, [(self.cb, H * W * b)])
        w_row = f.add(w_row, f.mul(self.cb, kh * kw * b))
        weights = {}  # columns of one phase share their weight vectors
        for i, (_, taps) in enumerate(tile.columns):
            for kx, ix in taps:
                for c, (off, w) in enumerate(self.chunks):
                    if (kx, c) not in weights:
                        weights[(kx, c)] = f.load(vty(w), f.gep(self.w, f.add(w_row, kx * b + off)))
                    xv = f.load(vty(w), f.gep(self.x, f.add(x_row, ix * b + off)))
                    self._fma(acc[(i, c)], w, xv, weights[(kx, c)])

    def _dense_taps(self, tile: _Tile, base_ix: str | int, t: str, r: str, acc: dict) -> None:
        """Input channel ``ci_lo + r``: one value broadcast against each weight vector of the
        output block (zero in the lanes of other groups)."""
        f, b, (kh, kw), H, W = self.f, self.b, self.spec.kernel, self.H, self.W
        ci = r if self.ci_lo == "0" else f.op(f"add nsw i64 {self.ci_lo}, {r}")
        if b > 1:
            channel = [(f.op(f"udiv i64 {ci}, {b}"), H * W * b), (f.op(f"urem i64 {ci}, {b}"), 1)]
        else:
            channel = [(ci, H * W)]
        x_row, w_row = self._rows(base_ix, t, channel)
        w_row = f.add(w_row, f.affine((self.cb, self.span * kh * kw * b), (r, kh * kw * b)))
        weights, values = {}, {}  # shared by the columns that read one input column / one kx
        for i, (_, taps) in enumerate(tile.columns):
            for kx, ix in taps:
                for c, (off, w) in enumerate(self.chunks):
                    if (ix, w) not in values:
                        values[(ix, w)] = splat(f, f.load("float", f.gep(self.x, f.add(x_row, ix * b))), w)
                    if (kx, c) not in weights:
                        weights[(kx, c)] = f.load(vty(w), f.gep(self.w, f.add(w_row, kx * b + off)))
                    self._fma(acc[(i, c)], w, values[(ix, w)], weights[(kx, c)])


def conv_transpose_ir(spec: ConvTransposeSpec, block: int | None, name: str = "conv_transpose",
                      lanes: int | None = None) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` with args ``(x, weight, out, bias)``.

    >>> spec = ConvTransposeSpec((1, 8, 4, 4), 8, (4, 4), (2, 2), (1, 1, 1, 1), groups=8)
    >>> ir = conv_transpose_ir(spec, 8, lanes=8)
    >>> ir.count("call <8 x float> @llvm.fma")  # 8 columns: 1 + 2 x 6 + 1 taps (rows: a loop)
    14
    """
    b = block or 1
    blocked_shape(spec.data_shape, b), blocked_shape(spec.out_shape, b)  # the block divides both
    e = _Emitter(spec, b, lanes or host_cpu().lanes, name)
    cap = max(1, ACC_REGISTERS // len(e.chunks))
    border, (q0, count, per), body = column_tiles(e.OW, e.W, spec.kernel[1], spec.strides[1], spec.padding[1], cap)
    for tile in border:
        e.tile(tile, 0, 0)
    if count:
        s = spec.strides[1]
        with e.f.loop(count) as it:  # `per` periods a step: base input column q, output column q * s - pad
            base_ix = e.f.affine((it, per), const=q0)
            base_ox = e.f.affine((it, per * s), const=q0 * s - spec.padding[1])
            for tile in body:
                e.tile(tile, base_ox, base_ix)
    e.f.emit("ret void")
    n_items = e.N * (e.CO // b) * e.OH
    return e.f.text() + MINMAX_DECL + e.intr.declarations() + parallel_entry_ir(name, [(f"{name}_item", n_items)])


def pack_conv_transpose_weight(w: np.ndarray, spec: ConvTransposeSpec, block: int | None) -> np.ndarray:
    """The ``(C_in, C_out / groups, kH, kW)`` weight in the kernel's order: depthwise
    ``[C/b, kH, kW, b]``; else ``[C_out/b, S, kH, kW, b]``, row ``r`` of output block ``cb``
    the input channel ``ci_lo(cb) + r``, zero where that channel is not in a lane's group.

    >>> spec = ConvTransposeSpec((1, 4, 2, 2), 4, (2, 2), (2, 2), groups=2)
    >>> pack_conv_transpose_weight(np.ones((4, 2, 2, 2), np.float32), spec, 4)[0, :, 0, 0].tolist()
    [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    """
    b = block or 1
    cin, cout_g, kh, kw = w.shape
    w = np.asarray(w, np.float32)
    if spec.is_depthwise:  # [C, 1, kH, kW], as a depthwise conv's: the same packing
        return pack_depthwise_weight(w, b).reshape(cin // b, kh, kw, b)
    cin_g, span = cin // spec.groups, spec.span(b)
    packed = np.zeros((spec.channels // b, span, kh, kw, b), np.float32)
    for co in range(spec.channels):
        cb, g = co // b, co // cout_g
        lo = (cb * b // cout_g) * cin_g  # the block's first input channel
        packed[cb, g * cin_g - lo: (g + 1) * cin_g - lo, :, :, co % b] = w[g * cin_g: (g + 1) * cin_g, co % cout_g]
    return packed


class ConvTransposeKernel(Kernel):
    """``k(x, weight, out, bias=None)``: NCHW[block]c in and out, the weight packed by
    :func:`pack_conv_transpose_weight`."""

    def __init__(self, spec: ConvTransposeSpec, block: int, lanes: int | None = None):
        b = block  # >= 1 (build_conv_transpose)
        (cin, cout), (kh, kw) = (spec.data_shape[1], spec.channels), spec.kernel
        self.spec, self.block = spec, b
        self.input_shape = blocked_shape(spec.data_shape, b if b > 1 else None)  # checks b divides both
        self.output_shape = blocked_shape(spec.out_shape, b if b > 1 else None)
        self.weight_shape = (cin // b, kh, kw, b) if spec.is_depthwise else (cout // b, spec.span(b), kh, kw, b)
        super().__init__(compile_ir(conv_transpose_ir(spec, b, lanes=lanes)), "conv_transpose",
                         dict(x=self.input_shape, weight=self.weight_shape, out=self.output_shape,
                              bias=(cout,) if spec.bias else None))


def build_conv_transpose(spec: ConvTransposeSpec, block: int | None, lanes: int | None = None) -> ConvTransposeKernel:
    """Generate, compile and cache a transposed-conv kernel (see the module doc); ``lanes``: the
    vector width (default the host's widest). ``block`` None and 1 are one kernel."""
    return _build(spec, block or 1, lanes)


@functools.lru_cache(maxsize=None)
def _build(spec: ConvTransposeSpec, block: int, lanes: int | None) -> ConvTransposeKernel:
    return ConvTransposeKernel(spec, block, lanes)
