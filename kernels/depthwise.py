"""x86 depthwise conv2d NCHW[bn]c -> NCHW[bn]c (channel multiplier 1), and grouped convs whose
block holds whole groups, as LLVM IR.

Its own template (AutoTVM's ``depthwise_conv2d_NCHWc``): there is no reduction over
input channels, so instead of broadcasting one input value against a vector of
weights (the dense template) each output vector is an elementwise FMA of an input
vector and a weight vector. Work items are output rows ``(n, c_chunk, oh)``, numbered
``(n, oh, c_chunk)`` where :func:`kernels.threads.rows_first_items`; a row is
cut into tiles of ``ow_bn`` columns x ``bn`` channels of accumulators; ``kh`` is a
loop over the taps inside the input (bounds per row) and ``kw`` is unrolled when
``unroll_kw``; border columns run one at a time with only their taps inside the input.
So padding costs nothing. It was a zero-bordered copy of the input, a pass of its own over
tensors that in MobileNet-v2's early layers are too big for L2: without it MobileNet-v2 ran
1.17x faster end to end (benchmarks/README.md, session 14). Same fused epilogue (bias,
residual, any activation of :data:`kernels.activations.ACTIVATIONS`). With ``row_means`` it also
writes each output row's mean, ``[N, C/bn, OH, 1, bn]``: a squeeze-excite's global average pool
then reads that, ``OW`` times smaller, instead of the conv's output again (each work item is one
row, so no two threads add to one sum). EfficientNet-B0's 16 squeeze pools read their
block's widest tensor, 0.15 ms of 4.3 in the network (session 28).
The block is ``config.oc_bn``, and ``config.ic_bn`` must equal it; the weight is packed
``[C/bn, 1, KH, KW, g, bn]`` (:func:`kernels.packing.pack_weight` with blocks ``g`` and
``bn``), ``g`` the channels per group: 1 for a depthwise conv. With ``g`` of 2 or 4 (ResNeXt's
first stage, :func:`runs_lanewise`) lane ``j`` sums over its group's ``g`` input channels,
lanes ``j - j % g`` to ``j - j % g + g - 1`` of the input vector: one in-vector shuffle
(LLVM's ``shufflevector``, a ``vpermilps`` within 128 bits) per FMA.

>>> import numpy as np
>>> from kernels import Conv2DConfig, Conv2DWorkload
>>> wl = Conv2DWorkload((1, 8, 6, 6), (8, 1, 3, 3), padding=(1, 1, 1, 1), groups=8)
>>> k = build_depthwise(wl, Conv2DConfig(ic_bn=4, oc_bn=4, ow_bn=3))
>>> k.input_shape, k.weight_shape, k.output_shape
((1, 2, 6, 6, 4), (2, 1, 3, 3, 1, 4), (1, 2, 6, 6, 4))
"""
from __future__ import annotations


from kernels.config import Conv2DConfig
from kernels.activations import activation_key, activation_spec, epilogue
from kernels.ir import (MINMAX_DECL, IntrinsicSet, arg_ptr, decompose, fconst, maybe_loop, splat, static_taps,
                        tap_range, vector_chunks, vty)
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu, kernel_cache
from kernels.threads import parallel_entry_ir, rows_first_items
from kernels.workload import Conv2DWorkload

__all__ = ["DepthwiseKernel", "build_depthwise", "depthwise_arg_shapes", "depthwise_ir", "every_config_lanewise",
           "lanewise_groups", "row_means_shape", "runs_lanewise"]


def lanewise_groups(workload: Conv2DWorkload) -> bool:
    """Whether some config runs ``workload`` on this template: a depthwise conv (channel
    multiplier 1), or a grouped conv of 2 or 4 input and as many output channels per group.
    Groups of 2 or 4 divide every vector (4, 8 or 16 lanes), so a lane's group is within its
    vector on every CPU; groups of 8 or more ran faster in the dense template anyway (ResNeXt-50's
    8-channel groups alone on the rocketlake Xeon: 0.122 ms in blocks of 8, 0.160 in 16)."""
    g = workload.kernel_shape[1]
    return workload.groups > 1 and workload.out_channels == workload.in_channels and 4 % g == 0


def runs_lanewise(workload: Conv2DWorkload, config: Conv2DConfig) -> bool:
    """Whether this template runs ``workload`` with ``config``: a depthwise conv (any config:
    :func:`check_depthwise` says which it takes), or a grouped conv of :func:`lanewise_groups`
    whose one block (``ic_bn == oc_bn``) holds several whole groups. The dense template's output
    blocks must divide a group's channels, so ResNeXt-50's 4-channel groups ran in blocks of at
    most 4 lanes of 16, 101-117 GFLOP/s, with a layout transform to those blocks and back around
    each (sessions 22-23).

    >>> g4 = Conv2DWorkload((1, 128, 56, 56), (128, 4, 3, 3), padding=(1, 1, 1, 1), groups=32)
    >>> [runs_lanewise(g4, Conv2DConfig(b, b, 8)) for b in (4, 16)], runs_lanewise(g4, Conv2DConfig(16, 32, 8))
    ([False, True], False)
    """
    if not lanewise_groups(workload):
        return False
    g = workload.kernel_shape[1]
    return every_config_lanewise(workload) or (config.ic_bn == config.oc_bn and config.oc_bn > g
                                               and config.oc_bn % g == 0)


def every_config_lanewise(workload: Conv2DWorkload) -> bool:
    """Whether this template runs ``workload`` whatever its config: a depthwise conv (one
    channel per group in and out). What may rely on this template's epilogue before a config is
    chosen (its row means: :mod:`graph_tuner.fusion`, rule 6) asks this.

    >>> every_config_lanewise(Conv2DWorkload((1, 8, 4, 4), (8, 1, 3, 3), groups=8))
    True
    >>> every_config_lanewise(Conv2DWorkload((1, 8, 4, 4), (8, 4, 3, 3), groups=2))
    False
    """
    return lanewise_groups(workload) and workload.kernel_shape[1] == 1


def check_depthwise(workload: Conv2DWorkload, config: Conv2DConfig, activation) -> None:
    if workload.out_dtype != "float32" or workload.layout != "NCHW":
        raise ValueError(f"only float32 NCHW depthwise conv2d is supported, got {workload.layout}/{workload.out_dtype}")
    C, g = workload.in_channels, workload.kernel_shape[1]
    if not lanewise_groups(workload):
        raise ValueError(f"not a depthwise conv, nor a grouped conv of 2 or 4 channels per group in and out: "
                         f"{workload}")
    activation_spec(activation)  # raises if unknown
    if config.ic_bn != config.oc_bn or C % config.oc_bn or config.oc_bn % g:
        raise ValueError(f"a lane-wise grouped conv needs ic_bn == oc_bn dividing {C} channels, a multiple of the "
                         f"{g} per group, got {config.ic_bn}, {config.oc_bn}")
    if config.ow_bn < 1:
        raise ValueError(f"ow_bn must be >= 1, got {config.ow_bn}")


def depthwise_ir(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                 activation: str | tuple | None = None, row_means: bool = False, name: str = "depthwise",
                 lanes: int | None = None) -> str:
    """LLVM IR text of ``void @name(ptr args, i32 nthreads)`` (args in :func:`depthwise_arg_shapes`' order)."""
    check_depthwise(workload, config, activation)
    lanes = lanes or host_cpu().lanes
    N, C, H, W = workload.data_shape
    _, _, KH, KW = workload.kernel_shape
    OH, OW = workload.out_height, workload.out_width
    sh, sw = workload.strides
    dh, dw = workload.dilation
    top, left, _, _ = workload.padding
    bn = config.oc_bn
    CB = C // bn
    g = workload.kernel_shape[1]  # channels per group: 1 for a depthwise conv
    chunks = vector_chunks(bn, lanes)
    intr = IntrinsicSet()

    # Its own metadata range: kernels.dw_project puts it in one module with a conv2d kernel.
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind", md_base=500_000)
    n, cb, oh = decompose(f, "%item", [N, CB, OH])
    data, weight, out = arg_ptr(f, 0), arg_ptr(f, 1), arg_ptr(f, 2)
    bias_p = arg_ptr(f, 3) if bias else None
    res_p = arg_ptr(f, 4) if residual else None
    rows_p = arg_ptr(f, 5) if row_means else None
    # The row's sum per channel chunk, of the values stored (the epilogue's)
    row_sum = [f.slot(vty(w), "zeroinitializer") for _, w in chunks] if row_means else []
    ih0 = f.add(f.mul(oh, sh), -top)  # input row of tap kh = 0 (negative in the top border)
    kh_lo, kh_hi = tap_range(f, ih0, H, KH, dh)
    slots = {}

    def tile(T: int, ow0: str, kws: list[int] | None = None) -> None:
        """Columns ow0 .. ow0+T-1; ``kws``: the taps inside the input (border columns), else all."""
        acc = {}
        for t in range(T):
            for c, (off, w) in enumerate(chunks):
                if (t, c) not in slots:
                    slots[(t, c)] = f.slot(vty(w))
                acc[(t, c)] = slots[(t, c)]
                init = "zeroinitializer" if bias_p is None else f.load(
                    vty(w), f.gep(bias_p, f.affine((cb, bn), const=off)))
                f.store(vty(w), init, acc[(t, c)])

        def inner(kh: str, kw) -> None:
            kwv = [(kw, g * bn)] if isinstance(kw, str) else []
            wbase = f.affine((cb, KH * KW * g * bn), (kh, KW * g * bn), *kwv,
                             const=kw * g * bn if isinstance(kw, int) else 0)
            # wv[k][c]: lane j's weight from input channel k of its group
            wv = [[f.load(vty(w), f.gep(weight, f.add(wbase, k * bn + off))) for off, w in chunks] for k in range(g)]
            kwv = [(kw, dw * bn)] if isinstance(kw, str) else []
            # The unpadded input: the column of tap kw is ow * sw - left + kw * dw.
            dbase = f.affine((n, CB * H * W * bn), (cb, H * W * bn), (ih0, W * bn), (kh, dh * W * bn),
                             (ow0, sw * bn), *kwv, const=((kw * dw if isinstance(kw, int) else 0) - left) * bn)
            for t in range(T):
                for c, (off, w) in enumerate(chunks):
                    x = f.load(vty(w), f.gep(data, f.add(dbase, t * sw * bn + off)))
                    s = acc[(t, c)]
                    total = f.load(vty(w), s)
                    for k in range(g):  # lane j takes input channel k of its group: lane j - j % g + k
                        xk = x if g == 1 else f.op(f"shufflevector {vty(w)} {x}, {vty(w)} poison, <{w} x i32> <"
                                                   + ", ".join(f"i32 {j - j % g + k}" for j in range(w)) + ">")
                        total = intr.call(f, "fma", w, xk, wv[k][c], total)
                    f.store(vty(w), total, s)

        with f.loop(kh_hi, start=kh_lo) as kh:
            if kws is not None or config.unroll_kw:
                for kw in (range(KW) if kws is None else kws):
                    inner(kh, kw)
            else:
                with maybe_loop(f, KW) as kw:
                    inner(kh, kw)
        obase = f.affine((n, CB * OH * OW * bn), (cb, OH * OW * bn), (oh, OW * bn), (ow0, bn))
        for (t, c), s in acc.items():
            off, w = chunks[c]
            idx = f.add(obase, t * bn + off)
            rp = f.gep(res_p, idx) if res_p is not None else None
            value = epilogue(f, intr, f.load(vty(w), s), w, rp, activation)
            f.store(vty(w), value, f.gep(out, idx))
            if row_means:
                f.store(vty(w), f.op(f"fadd {vty(w)} {f.load(vty(w), row_sum[c])}, {value}"), row_sum[c])

    # Border columns (a tap outside the input) one at a time with their taps; the others in tiles.
    def taps(ow: int) -> list[int]:
        return static_taps(ow, W, KW, sw, dw, left)
    inside = [ow for ow in range(OW) if len(taps(ow)) == KW]
    lo, hi = (inside[0], inside[-1] + 1) if inside else (OW, OW)
    for ow in range(lo):
        tile(1, str(ow), taps(ow))
    span = hi - lo
    T = min(config.ow_bn, span) if span else 0
    if T and span // T == 1:
        tile(T, str(lo))
    elif T and span // T > 1:
        with f.loop(span // T) as tw:
            tile(T, f.add(f.mul(tw, T), lo))
    if T and span % T:
        tile(span % T, str(hi - span % T))
    for ow in range(hi, OW):
        tile(1, str(ow), taps(ow))
    if row_means:
        rbase = f.affine((n, CB * OH * bn), (cb, OH * bn), (oh, bn))
        for (off, w), total in zip(chunks, row_sum):
            mean = f.op(f"fmul {vty(w)} {f.load(vty(w), total)}, {splat(f, fconst(1.0 / OW), w)}")
            f.store(vty(w), mean, f.gep(rows_p, f.add(rbase, off)))
    f.emit("ret void")
    text, body = f.text(), f"{name}_item"
    if rows_first_items(OH, CB):  # the same items, numbered (n, oh, cb)
        r = IRFunction(f"define internal void @{name}_rows_item(ptr %args, i64 %item) nounwind")
        n, oh, cb = decompose(r, "%item", [N, OH, CB])
        r.emit(f"call void @{body}(ptr %args, i64 {r.affine((n, CB * OH), (cb, OH), (oh, 1))})")
        r.emit("ret void")
        text, body = text + r.text(), f"{name}_rows_item"
    return text + MINMAX_DECL + intr.declarations() + parallel_entry_ir(name, [(body, N * CB * OH)])


def depthwise_arg_shapes(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False,
                         residual: bool = False, row_means: bool = False) -> dict[str, tuple[int, ...] | None]:
    """The arrays a depthwise kernel takes, by name (None: not taken), in NCHWc, in the order of
    the kernel's argument array."""
    N, C, H, W = workload.data_shape
    _, _, KH, KW = workload.kernel_shape
    bn = config.oc_bn
    out = (N, C // bn, workload.out_height, workload.out_width, bn)
    return dict(data=(N, C // bn, H, W, bn), weight=(C // bn, 1, KH, KW, workload.kernel_shape[1], bn), out=out,
                bias=(C,) if bias else None, residual=out if residual else None,
                row_means=row_means_shape(workload, bn) if row_means else None)


def row_means_shape(workload: Conv2DWorkload, bn: int) -> tuple[int, ...]:
    """The shape of a depthwise kernel's ``row_means`` output in blocks of ``bn``: one mean per
    output row and channel, an ``OH x 1`` plane.

    >>> row_means_shape(Conv2DWorkload((1, 32, 8, 8), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32), 16)
    (1, 2, 8, 1, 16)
    """
    return (workload.data_shape[0], workload.out_channels // bn, workload.out_height, 1, bn)


class DepthwiseKernel(Kernel):
    """A compiled NCHWc depthwise conv2d: ``k(data, weight, out, bias=None, residual=None, row_means=None)``."""

    def __init__(self, workload: Conv2DWorkload, config: Conv2DConfig, bias: bool, residual: bool,
                 activation: str | tuple | None, row_means: bool = False):
        self.workload, self.config, self.activation = workload, config, activation_key(activation)
        shapes = depthwise_arg_shapes(workload, config, bias=bias, residual=residual, row_means=row_means)
        self.input_shape, self.weight_shape, self.output_shape = shapes["data"], shapes["weight"], shapes["out"]
        self.bias_shape = (workload.in_channels,)
        ir = depthwise_ir(workload, config, bias=bias, residual=residual, activation=activation, row_means=row_means)
        super().__init__(compile_ir(ir), "depthwise", shapes)


@kernel_cache()
def build_depthwise(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                    activation: str | tuple | None = None, row_means: bool = False) -> DepthwiseKernel:
    """Generate, compile and cache a depthwise kernel (see the module doc)."""
    return DepthwiseKernel(workload, config, bias, residual, activation, row_means)
