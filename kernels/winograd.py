"""Winograd F(4x4, 3x3) convolution for stride-1, 3x3 NCHWc convs, any padding: 4x fewer multiplications.

Lavin & Gray's minimal filtering: each 6x6 input tile ``d`` (4x4 outputs plus the 3x3
window's border) and each 3x3 filter ``g`` give ``Y = A^T [(G g G^T) * (B^T d B)] A``; the
elementwise product, summed over input channels, is 36 independent matrix products
(one per point of the 6x6 tile). Those are a grouped 1x1 conv with 36 groups over an
image of tiles (:func:`gemm_workload`), which is :mod:`kernels.conv2d`'s code, tuned by
:mod:`kernels.tuner` like any conv. One kernel runs three phases on the thread pool:

1. input transform: ``V = B^T d B`` per tile and channel block, into a scratch tensor in
   the GEMM's input layout (channel ``p * C + c`` for point ``p``), borders zero-padded;
2. the GEMM: ``M = U V`` with the transformed weights ``U = G g G^T``, packed once
   (:func:`transform_weight`);
3. output transform: ``Y = A^T M A`` per tile, then the conv's epilogue (bias, residual,
   activation), stored where the tile lies inside the output.

The transforms do not depend on the GEMM's schedule: each is compiled in a module of its own,
once per channel block and epilogue, and the kernel calls it by name (:func:`_phases`), so a
tuner's configs compile only their GEMM.

Float32 rounding: the transforms' constants (up to 8 and 1/24) lose about 3 more digits
than a direct conv; outputs agree with it to about 1e-5 relative to their scale.

>>> w = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
>>> supported(w), gemm_workload(w).data_shape, gemm_workload(w).kernel_shape, gemm_workload(w).groups
(True, (1, 2304, 7, 7), (2304, 64, 1, 1), 36)
"""
from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Iterable, Mapping

import numpy as np

from kernels import hugepages
from kernels.activations import activation_key, epilogue
from kernels.config import Conv2DConfig
from kernels.conv2d import SCRATCH_ARG, compact_input, conv2d_ir, pads_by_copy, supported as conv2d_supported
from kernels.ir import IntrinsicSet, arg_ptr, declare_once, decompose, fsplat, vector_chunks, vty
from kernels.jit import IRFunction, Kernel, compile_ir, compile_shared, host_cpu, kernel_cache
from kernels.threads import num_threads, parallel_entry_ir
from kernels.workload import Conv2DWorkload

M, R = 4, 3  # output tile, filter
ALPHA = M + R - 1  # input tile: 6
POINTS = ALPHA * ALPHA  # 36 products
BT = ((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
      (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1))
G = ((1 / 4, 0, 0), (-1 / 6, -1 / 6, -1 / 6), (-1 / 6, 1 / 6, -1 / 6),
     (1 / 24, 1 / 12, 1 / 6), (1 / 24, -1 / 12, 1 / 6), (0, 0, 1))
AT = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))
# Arguments: the conv's (kernels.conv2d.ARGS order, unused ones absent), then V and M scratch.
ARGS = ("data", "weight", "out", "bias", "residual", "out2", "scale2", "shift2")
V_ARG, M_ARG = len(ARGS), len(ARGS) + 1


def supported(workload: Conv2DWorkload) -> bool:
    """A 3x3, stride-1, undilated, ungrouped conv, padded or not (Inception-v3's stem convs
    are unpadded: a tile's window starts ``padding`` before its outputs, and what lies
    outside the input reads as zero, so the padding is only where the windows start)."""
    return (workload.kernel_size == (3, 3) and workload.strides == (1, 1) and workload.dilation == (1, 1)
            and workload.groups == 1 and workload.out_height >= 1 and workload.out_width >= 1)


def gemm_supported(gemm: Conv2DWorkload, config: Conv2DConfig) -> bool:
    """Whether a config of a Winograd GEMM workload (:func:`gemm_workload`) builds: the conv
    template's checks, and an input block within the conv's channels. The GEMM is a grouped conv
    of one group a tile point, and :func:`kernels.conv2d.supported` also takes input blocks of
    several whole groups, but the GEMM's input block is the conv's input layout, and a block of
    two points' channels is no layout of the conv's input.

    >>> g = gemm_workload(Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1)))
    >>> [gemm_supported(g, Conv2DConfig(ic, 16, 4)) for ic in (8, 16, 32)]
    [True, True, False]
    """
    return conv2d_supported(gemm, config) and gemm.kernel_shape[1] % config.ic_bn == 0


def tiles(workload: Conv2DWorkload) -> tuple[int, int]:
    """Tile rows and columns covering the output."""
    return -(-workload.out_height // M), -(-workload.out_width // M)


def gemm_workload(workload: Conv2DWorkload) -> Conv2DWorkload:
    """The 36 products as one grouped 1x1 conv over the image of tiles (what is tuned)."""
    if not supported(workload):
        raise ValueError(f"Winograd F(4,3) needs an ungrouped, undilated 3x3 stride-1 conv, got {workload}")
    n, c = workload.data_shape[:2]
    th, tw = tiles(workload)
    oc = workload.out_channels
    return Conv2DWorkload((n, POINTS * c, th, tw), (POINTS * oc, c, 1, 1), groups=POINTS)


def winograd_epilogue(epilogue: dict) -> dict:
    """:func:`kernels.conv2d.build_conv2d`'s epilogue arguments as :func:`build_winograd` takes
    them (bias, residual, activation, the affine second output); ValueError for an input
    prologue, which it has not (only 1x1 convs get one)."""
    if epilogue.get("prologue") or epilogue.get("row_means"):
        raise ValueError("Winograd kernels have no input prologue and write no row means")
    return {k: epilogue[k] for k in ("bias", "residual", "activation", "affine_out", "affine_activation")
            if k in epilogue}


def transform_weight(weight: np.ndarray) -> np.ndarray:
    """OIHW 3x3 weights -> the GEMM's grouped 1x1 weights ``(36 * O, I, 1, 1)``: ``G g G^T``
    (in float64), point ``p`` of the 6x6 tile holding rows ``p * O ... p * O + O - 1``."""
    o, i = weight.shape[:2]
    g = np.asarray(G)
    u = np.einsum("ak,oikl,bl->aboi", g, np.asarray(weight, np.float64), g)  # (6, 6, O, I)
    return np.ascontiguousarray(u.reshape(POINTS * o, i, 1, 1), dtype=np.float32)


def _combine(f: IRFunction, intr: IntrinsicSet, rows, vectors: list[str], w: int) -> list[str]:
    """``rows @ vectors``: each output the sum of the vectors weighted by a row of constants
    (zero terms left out, +-1 as plain adds)."""
    out = []
    for row in rows:
        acc = None
        for coef, v in zip(row, vectors):
            if coef == 0:
                continue
            if coef in (1, -1) and acc is not None:
                acc = f.op(f"{'fadd' if coef == 1 else 'fsub'} {vty(w)} {acc}, {v}")
            elif acc is None:
                acc = v if coef == 1 else f.op(f"fmul {vty(w)} {v}, {fsplat(coef, w)}")
            else:
                acc = intr.call(f, "fma", w, v, fsplat(coef, w), acc)
        out.append(acc if acc is not None else "zeroinitializer")
    return out


def _transform(f: IRFunction, intr: IntrinsicSet, left, tile: list[list[str]], w: int) -> list[list[str]]:
    """``left @ tile @ left^T`` on a tile of vectors (rows of lists)."""
    cols = [_combine(f, intr, left, [row[j] for row in tile], w) for j in range(len(tile[0]))]  # left @ tile
    half = [[cols[j][i] for j in range(len(cols))] for i in range(len(left))]
    return [_combine(f, intr, left, row, w) for row in half]  # (left @ tile) @ left^T, row by row


@contextmanager
def _chunks(f: IRFunction, block: int, lanes: int):
    """The vectors of a channel block, as ``[(offset terms, constant offset, width)]``: a loop
    over them (one ``(index, lanes)`` term) where they are all full, else each one written out.
    Written out, a 128-channel block's input transform had compiled for 0.5 s, 8 copies of a
    body (about 900 lines of IR) that runs no faster for them: no vector depends on another."""
    chunks = vector_chunks(block, lanes)
    if len(chunks) > 1 and block % lanes == 0:
        with f.loop(len(chunks)) as k:
            yield [(((k, lanes),), 0, lanes)]
    else:
        yield [((), off, w) for off, w in chunks]


def input_transform_ir(name: str, workload: Conv2DWorkload, block: int, lanes: int, intr: IntrinsicSet) -> str:
    """``@name(args, item)``: item = (image, channel block, tile row); V from the input, zero
    where a tile's window lies outside it."""
    n, c, h, wd = workload.data_shape
    top, left = workload.padding[:2]
    th, tw = tiles(workload)
    cb = c // block
    f = IRFunction(f"define internal void @{name}(ptr %args, i64 %item) nounwind", md_base=200_000)
    x, v = arg_ptr(f, 0), arg_ptr(f, V_ARG)
    img, b, t = decompose(f, "%item", [n, cb, th])
    row0 = f.op(f"sub nsw i64 {f.mul(t, M)}, {top}")
    rows = []  # per tile row i: (in bounds, clamped row)
    for i in range(ALPHA):
        r = f.add(row0, i)
        inside = f.op(f"and i1 {f.op(f'icmp sge i64 {r}, 0')}, {f.op(f'icmp slt i64 {r}, {h}')}")
        rows.append((inside, f.op(f"select i1 {inside}, i64 {r}, i64 0")))
    plane = f.affine((img, cb * h * wd * block), (b, h * wd * block))
    with f.loop(tw) as u:
        col0 = f.op(f"sub nsw i64 {f.mul(u, M)}, {left}")
        cols = []
        for j in range(ALPHA):
            col = f.add(col0, j)
            inside = f.op(f"and i1 {f.op(f'icmp sge i64 {col}, 0')}, {f.op(f'icmp slt i64 {col}, {wd}')}")
            cols.append((inside, f.op(f"select i1 {inside}, i64 {col}, i64 0")))
        with _chunks(f, block, lanes) as chunks:
            for terms, off, w in chunks:
                d = []
                for ri, rr in rows:
                    line = []
                    for cj, cc in cols:
                        at = f.op(f"add nsw i64 {f.affine((rr, wd * block), (cc, block), *terms, const=off)}, {plane}")
                        value = f.load(vty(w), f.gep(x, at))  # clamped inside: always a valid address
                        ok = f.op(f"and i1 {ri}, {cj}")
                        line.append(f.op(f"select i1 {ok}, {vty(w)} {value}, {vty(w)} zeroinitializer"))
                    d.append(line)
                tv = _transform(f, intr, BT, d, w)
                for p in range(POINTS):
                    at = f.affine((img, POINTS * cb * th * tw * block), (b, th * tw * block), (t, tw * block),
                                  (u, block), *terms, const=p * cb * th * tw * block + off)
                    f.store(vty(w), tv[p // ALPHA][p % ALPHA], f.gep(v, at))
    f.emit("ret void")
    return f.text()


def output_transform_ir(name: str, workload: Conv2DWorkload, block: int, lanes: int, intr: IntrinsicSet, *,
                        bias: bool, residual: bool, activation, affine_out: bool = False,
                        affine_activation=None) -> str:
    """``@name(args, item)``: item = (image, output channel block, tile row); Y from M, then
    the epilogue (``out = act(y + bias + residual)``, and with ``affine_out`` also
    ``out2 = act2(out * scale2 + shift2)``), stored where inside the output."""
    n = workload.data_shape[0]
    oc, oh, ow = workload.out_channels, workload.out_height, workload.out_width
    th, tw = tiles(workload)
    ob_count = oc // block
    f = IRFunction(f"define internal void @{name}(ptr %args, i64 %item) nounwind", md_base=300_000)
    out, m = arg_ptr(f, 2), arg_ptr(f, M_ARG)
    bias_p = arg_ptr(f, 3) if bias else None
    res_p = arg_ptr(f, 4) if residual else None
    img, b, t = decompose(f, "%item", [n, ob_count, th])
    if affine_out:
        out2, scale_p, shift_p = arg_ptr(f, 5), arg_ptr(f, 6), arg_ptr(f, 7)

    def per_channel(ptr: str, terms, off: int, w: int) -> str:  # in L1 after the first tile: loaded where used
        return f.load(vty(w), f.gep(ptr, f.affine((b, block), *terms, const=off)))

    plane = f.affine((img, ob_count * oh * ow * block), (b, oh * ow * block))
    with f.loop(tw) as u, _chunks(f, block, lanes) as chunks:
        for terms, off, w in chunks:
            mv = []
            for i in range(ALPHA):
                mv.append([f.load(vty(w), f.gep(m, f.affine(
                    (img, POINTS * ob_count * th * tw * block), (b, th * tw * block), (t, tw * block), (u, block),
                    *terms, const=(i * ALPHA + j) * ob_count * th * tw * block + off))) for j in range(ALPHA)])
            y = _transform(f, intr, AT, mv, w)
            bias_v = per_channel(bias_p, terms, off, w) if bias else None
            if affine_out:
                scale, shift = per_channel(scale_p, terms, off, w), per_channel(shift_p, terms, off, w)
            for i in range(M):
                for j in range(M):
                    r, col = f.add(f.mul(t, M), i), f.add(f.mul(u, M), j)
                    inside = f.op(f"and i1 {f.op(f'icmp slt i64 {r}, {oh}')}, {f.op(f'icmp slt i64 {col}, {ow}')}")
                    store, skip = f.fresh("store"), f.fresh("skip")
                    f.emit(f"br i1 {inside}, label %{store}, label %{skip}")
                    f.label(store)
                    at = f.op(f"add nsw i64 {f.affine((r, ow * block), (col, block), *terms, const=off)}, {plane}")
                    value = y[i][j]
                    if bias:
                        value = f.op(f"fadd {vty(w)} {value}, {bias_v}")
                    value = epilogue(f, intr, value, w, f.gep(res_p, at) if residual else None, activation)
                    f.store(vty(w), value, f.gep(out, at))
                    if affine_out:
                        second = intr.call(f, "fma", w, value, scale, shift)
                        f.store(vty(w), epilogue(f, intr, second, w, None, affine_activation), f.gep(out2, at))
                    f.emit(f"br label %{skip}")
                    f.label(skip)
    f.emit("ret void")
    return f.text()


def winograd_ir(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                activation=None, affine_out: bool = False, affine_activation=None, name: str = "winograd",
                lanes: int | None = None) -> str:
    """IR of ``void @name(ptr args, i32 nthreads)`` (args: :data:`ARGS`, then V and M): the GEMM,
    calling the transform phases, which are compiled apart (:func:`_phases`) when this is called."""
    return _winograd_text(workload, config, bias, residual, activation, affine_out, affine_activation, name,
                          lanes or host_cpu().lanes, num_threads())


_NAME = "gt_winograd_phase"  # stands for a phase's name until the text is hashed


@kernel_cache(maxsize=64)
def _phase_text(kind: str, workload: Conv2DWorkload, block: int, lanes: int, bias: bool = False,
                residual: bool = False, activation=None, affine_out: bool = False,
                affine_activation=None) -> tuple[str, str]:
    """The name and IR text of the input (``kind`` "in") or output ("out") transform phase of a
    Winograd conv, ``void @name(ptr args, i32 nthreads)``, a module of its own, the name a digest
    of its text.

    A transform depends on the conv, one block size and the epilogue, not on the GEMM's
    schedule, so the configs a tuner tries share a few: compiled into each config's module,
    the transforms had been 70-85% of its compile time (DenseNet-121's 3x3 convs, session 36).
    """
    intr = IntrinsicSet()
    n, th = workload.data_shape[0], tiles(workload)[0]
    item = f"{_NAME}_item"
    if kind == "in":
        body = input_transform_ir(item, workload, block, lanes, intr)
        items = n * (workload.in_channels // block) * th
    else:
        body = output_transform_ir(item, workload, block, lanes, intr, bias=bias, residual=residual,
                                   activation=activation, affine_out=affine_out, affine_activation=affine_activation)
        items = n * (workload.out_channels // block) * th
    text = declare_once(body + intr.declarations() + parallel_entry_ir(_NAME, [(item, items)]))
    name = f"gt_winograd_{kind}_{hashlib.sha1(text.encode()).hexdigest()[:20]}"
    return name, text.replace(_NAME, name)


def _phases(workload: Conv2DWorkload, config: Conv2DConfig, lanes: int, bias: bool = False, residual: bool = False,
            activation=None, affine_out: bool = False, affine_activation=None) -> list[tuple[str, str]]:
    """The (name, IR text) of the input and the output transform phase a Winograd kernel of
    ``config`` calls; ``ValueError`` for a config that is no Winograd GEMM's."""
    if not gemm_supported(gemm_workload(workload), config):
        raise ValueError(f"ic_bn={config.ic_bn} and oc_bn={config.oc_bn} are no blocks of the Winograd conv {workload}")
    return [_phase_text("in", workload, config.ic_bn, lanes),
            _phase_text("out", workload, config.oc_bn, lanes, bias, residual, activation, affine_out,
                        affine_activation)]


def phase_texts(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                activation=None, affine_out: bool = False, affine_activation=None,
                lanes: int | None = None) -> list[str]:
    """The IR texts of the two transform phases :func:`winograd_ir` of the same arguments calls.

    >>> w = Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1))
    >>> [t.count("define") for t in phase_texts(w, Conv2DConfig(8, 16, 4), lanes=8)]
    [2, 2]
    """
    return [text for _, text in _phases(workload, config, lanes or host_cpu().lanes, bias, residual, activation,
                                        affine_out, affine_activation)]


def compile_phases_ahead(convs: Iterable[tuple[Conv2DWorkload, Conv2DConfig, Mapping]]) -> None:
    """Compile the transform phases of ``(conv, GEMM config, winograd_ir's epilogue arguments)``
    side by side (:func:`kernels.jit.compile_ahead`) before their kernels' texts are made:
    making a text compiles its new phases one after another in this process, so a tuner's pair
    of configs (or a program's Winograd layers) waited for each alone (Inception-v3's tune: 3.4%
    of its time, session 41). A config that is no GEMM's, or a phase LLVM refuses, is left to
    its kernel's text, which says so."""
    from kernels import jit  # looked up at the call: tests watch jit.compile_ahead

    texts = []
    for conv, config, epilogue in convs:
        try:
            texts += phase_texts(conv, config, **epilogue)
        except ValueError:
            continue
    try:
        jit.compile_ahead(texts)
    except RuntimeError:
        pass


# As kernels.conv2d._conv2d_text: the tuner asks for a config's text up to three times.
# ``threads`` is only part of the key (the GEMM's text splits its rows by the thread count).
# Getting the text compiles its transform phases (_phases), which the text calls by name: so
# they are linkable before any module of this text is, here or compiled by a helper process.
@kernel_cache(maxsize=16)
def _winograd_text(workload: Conv2DWorkload, config: Conv2DConfig, bias: bool, residual: bool, activation,
                   affine_out: bool, affine_activation, name: str, lanes: int, threads: int) -> str:
    gemm = gemm_workload(workload)
    phases = _phases(workload, config, lanes, bias, residual, activation, affine_out, affine_activation)
    if pads_by_copy(gemm, config) or compact_input(gemm) is not None:  # never for a 1x1 stride-1 conv
        raise ValueError(f"the Winograd GEMM {gemm} would need scratch of its own")
    for phase, phase_text in phases:  # once each: compile_shared caches by text
        compile_shared(phase_text, [phase])
    (phase_in, _), (phase_out, _) = phases
    text = conv2d_ir(gemm, config, name=f"{name}_gemm", lanes=lanes)
    # The GEMM's own argument block: data = V, weight = U, out = M, the rest null (kernels.conv2d.ARGS
    # and its scratch slot, unused by a 1x1 stride-1 conv).
    slots = SCRATCH_ARG + 1
    return declare_once(text) + f"""declare void @{phase_in}(ptr, i32)
declare void @{phase_out}(ptr, i32)
define void @{name}(ptr %args, i32 %nthreads) nounwind {{
entry:
  call void @{phase_in}(ptr %args, i32 %nthreads)
  %gargs = alloca [{slots} x ptr], align 8
  call void @llvm.memset.p0.i64(ptr %gargs, i8 0, i64 {8 * slots}, i1 false)
  %vp = getelementptr inbounds ptr, ptr %args, i64 {V_ARG}
  %v = load ptr, ptr %vp, align 8
  %up = getelementptr inbounds ptr, ptr %args, i64 1
  %u = load ptr, ptr %up, align 8
  %mp = getelementptr inbounds ptr, ptr %args, i64 {M_ARG}
  %m = load ptr, ptr %mp, align 8
  store ptr %v, ptr %gargs, align 8
  %g1 = getelementptr inbounds ptr, ptr %gargs, i64 1
  store ptr %u, ptr %g1, align 8
  %g2 = getelementptr inbounds ptr, ptr %gargs, i64 2
  store ptr %m, ptr %g2, align 8
  call void @{name}_gemm(ptr %gargs, i32 %nthreads)
  call void @{phase_out}(ptr %args, i32 %nthreads)
  ret void
}}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
"""


_arenas: list[np.ndarray] = [np.zeros(0, np.float32), np.zeros(0, np.float32)]  # V's and M's


def _shared_scratch(which: int, shape: tuple[int, ...]) -> np.ndarray:
    """A view of the process's V (0) or M (1) scratch: the Winograd layers of a network take
    turns in one buffer that stays in cache, not one buffer each (a network's are used one
    at a time; a kernel needing more than the current arena starts a larger one)."""
    size = int(np.prod(shape))
    if _arenas[which].size < size:
        _arenas[which] = hugepages.zeros(size)
    return _arenas[which][:size].reshape(shape)


class WinogradKernel(Kernel):
    """``k(data, weight, out, bias=None, residual=None, out2=None, scale2=None, shift2=None)`` in
    NCHWc; ``weight`` is :func:`transform_weight`'s, packed by :func:`kernels.packing.pack_weight`
    in the config's blocks. Every Winograd kernel of the process shares one V and one M buffer
    (:func:`_shared_scratch`): run one Winograd kernel at a time, as a network's steps run."""

    def __init__(self, workload: Conv2DWorkload, config: Conv2DConfig, bias: bool, residual: bool, activation,
                 affine_out: bool = False, affine_activation=None):
        n, c, h, w = workload.data_shape
        oc, icb, ocb = workload.out_channels, config.ic_bn, config.oc_bn
        gemm = gemm_workload(workload)
        th, tw = tiles(workload)
        self.workload, self.config, self.activation = workload, config, activation_key(activation)
        self.input_shape = (n, c // icb, h, w, icb)
        self.weight_shape = (POINTS * oc // ocb, c // icb, 1, 1, icb, ocb)
        self.output_shape = (n, oc // ocb, workload.out_height, workload.out_width, ocb)
        scratch = [_shared_scratch(0, (n, gemm.in_channels // icb, th, tw, icb)),
                   _shared_scratch(1, (n, gemm.out_channels // ocb, th, tw, ocb))]
        ir = winograd_ir(workload, config, bias=bias, residual=residual, activation=activation, affine_out=affine_out,
                         affine_activation=affine_activation)
        shapes = dict(data=self.input_shape, weight=self.weight_shape, out=self.output_shape,
                      bias=(oc,) if bias else None, residual=self.output_shape if residual else None,
                      out2=self.output_shape if affine_out else None, scale2=(oc,) if affine_out else None,
                      shift2=(oc,) if affine_out else None)
        super().__init__(compile_ir(ir), "winograd", shapes, scratch)


@kernel_cache()
def build_winograd(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                   activation=None, affine_out: bool = False, affine_activation=None) -> WinogradKernel:
    """Generate, compile and cache the Winograd kernel of a conv (``config``: its GEMM's schedule)."""
    return WinogradKernel(workload, config, bias, residual, activation, affine_out, affine_activation)
