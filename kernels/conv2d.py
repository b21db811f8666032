"""x86 conv2d NCHW[ic_bn]c -> NCHW[oc_bn]c generated as LLVM IR, with a fused epilogue.

The schedule is AutoTVM's x86 ``conv2d_NCHWc`` template: work items are blocks of
output rows ``(n, oc_chunk, rows)`` spread over the threads (numbered ``(n, rows, oc_chunk)``
where :func:`takes_rows_first`); each row is cut into
register tiles of ``oh_bn x ow_bn`` output pixels by ``oc_bn`` output channels held
in explicit ``<lanes x float>`` accumulators updated with ``llvm.fma``; each reduction
step holds the tile's weight vectors and one input broadcast at a time, or, when the tile
has more vectors than pixels, its broadcasts and one weight vector at a time (fewer live
registers: 4 vectors x 3 pixels fits AVX2's 16 without spilling). The reduction
runs ``ic_chunk, kh, (ic_block, kw unrolled | kw, ic_block)`` as AutoTVM's
``unroll_kw`` knob says. Any block sizes dividing the channels (per group) work (for a
grouped conv's input, also blocks of several whole groups: below);
``ow_bn``/``oh_bn`` need not divide the output (a narrower tail tile is generated).
A 1x1 conv whose weight slice overflows L1 reduces in batches of input channel blocks
(:func:`ic_batch`, as MLAS does): each batch sweeps all of a work item's rows with its
weights held in L1 and keeps partial sums in the output (ResNet-50 end to end: 2.6% faster
with the same configs). A 1x1 stride-1 conv runs each work item's rows as one long row
(:func:`join_rows`), so row ends cost no narrower tail tiles; a strided one (not too small) copies
the pixels it reads into a compact scratch first (:func:`compact_input`). A pointwise kernel
reads its count of input channel blocks from its arguments (:func:`runtime_channels`), so convs
that differ only in their input channels share one kernel text, compiled once. Grouped convs use
the same template with the reduction restricted to the output block's group: the output block
divides a group's channels, and the input block divides them too or holds several whole
groups (:func:`reduction_block`), so the layout a wide producer writes needs no transform
to reach the grouped conv; depthwise convs, and grouped convs of 2 or 4 channels per group
whose one block (``ic_bn == oc_bn``) holds several whole groups, have their own template in
:mod:`kernels.depthwise`.

Weights: items hold about ``1/(8 * threads)`` of the rows, and a thread knows the
item it runs next; when that one starts another ``oc_chunk``, its weights are
prefetched into L2, spread evenly over the current item's reduction steps by step number
(:func:`prefetch_scale`; a batched reduction runs its steps batch by batch).
In a network every layer's weights come from memory, and without this the first row of
each ``oc_chunk`` waited for them (ResNet-18 end to end: 2-6% faster with it). A line a
step from the item's start instead (a burst of prefetches to memory, which fills the line fill
buffers and stalls the FMAs' loads) took ResNeXt-50's 8 MiB 1x1 convs 10-15% longer in the
network, and networks up to 4.4% longer (session 25, benchmarks/README.md).

Padding: one-row register tiles read the unpadded input; each row's ``kh`` loop is
bounded to the taps inside the input, and the tiles at the left and right edges are
compiled without the taps that fall in the padding, so the hot loop has no checks.
A zero-bordered copy of the input, made first in its own parallel pass, cost 2-17%
of ResNet-18's layers; it remains only for ``oh_bn > 1``.

Epilogue, fused into the tile store: ``+ bias[oc]``, ``+ residual`` (a tensor in
the output layout), then an activation (any of :data:`kernels.activations.ACTIVATIONS`,
a name or ``(name, *params)``: relu, relu6, clip, sigmoid, SiLU, hard sigmoid / swish,
leaky relu), the very IR the elementwise pass runs. A separate pass would read and
write the whole output again (EfficientNet-B0's largest SiLU: 0.22 ms as a pass).

>>> import numpy as np
>>> from kernels import Conv2DConfig, Conv2DWorkload
>>> from kernels.packing import to_blocked, from_blocked
>>> from kernels.reference import conv2d_nchw
>>> wl = Conv2DWorkload((1, 4, 5, 5), (8, 4, 3, 3), padding=(1, 1, 1, 1))
>>> k = build_conv2d(wl, Conv2DConfig(ic_bn=2, oc_bn=4, ow_bn=2), activation="relu")
>>> k.input_shape, k.weight_shape, k.output_shape
((1, 2, 5, 5, 2), (2, 2, 3, 3, 2, 4), (1, 2, 5, 5, 4))
>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((1, 4, 5, 5), dtype=np.float32)
>>> w = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
>>> out = np.empty(k.output_shape, np.float32)
>>> k(to_blocked(x, 2), pack_weight(w, 2, 4), out)
>>> bool(np.allclose(from_blocked(out), conv2d_nchw(x, w, padding=(1, 1, 1, 1), activation="relu"), atol=1e-4))
True
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels.config import Conv2DConfig
from kernels.depthwise import build_depthwise, check_depthwise, depthwise_ir, runs_lanewise
from kernels.activations import ACTIVATIONS, activation_key, activation_spec, epilogue
from kernels.ir import (BASE_ARGS, MEMCPY_DECL, MINMAX_DECL, PREFETCH_DECL, IntrinsicSet, arg_ptr, decompose,
                        maybe_loop, pad_copy_ir, splat, static_taps, tap_range, vector_chunks, vty)
from kernels.jit import IRFunction, Kernel, compile_ir, host_cpu, kernel_cache, search_build
from kernels.packing import pack_weight
from kernels.threads import num_threads, parallel_entry_ir, rows_first_items
from kernels.workload import Conv2DWorkload

__all__ = ["ACTIVATIONS", "Conv2DKernel", "build_conv2d", "conv2d_arg_shapes", "conv2d_ir", "conv2d_scalars",
           "depthwise_epilogue", "kernel_workload", "pack_weight", "prologue_bytes", "reduction_block",
           "runtime_channels", "supported"]

NO_ROW_MEANS = "only depthwise kernels write row means; this conv runs on the dense template"  # then the workload, config
# conv2d also takes the affine second output and the input prologue (see conv2d_ir); then the scratch
ARGS = (*BASE_ARGS, "out2", "scale2", "shift2", "scale_in", "shift_in")
SCRATCH_ARG = len(ARGS)
BLOCKS_ARG = SCRATCH_ARG + 1  # a kernel with runtime_channels: its reduction blocks, an integer in the args


def rows_per_item(planes: int, rows: int, tile_rows: int, threads: int | None = None) -> int:
    """Output rows per work item: a multiple of ``tile_rows``, as many as still leave about
    eight items per thread (fewer, longer items give the next-block weight prefetch time
    to work and cost nothing in balance).

    >>> rows_per_item(16, 7, 1, threads=2), rows_per_item(2, 56, 1, threads=2), rows_per_item(4, 3, 2, threads=2)
    (7, 7, 2)
    """
    want = 8 * (threads or num_threads())
    best = tile_rows
    for g in range(tile_rows, rows + 1, tile_rows):
        if planes * -(-rows // g) >= want:
            best = g
    return min(best, max(rows, tile_rows))


def pointwise(workload: Conv2DWorkload) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped conv: a matrix product per pixel, whatever the
    pixels' arrangement (rows may be joined, items taken rows first)."""
    return (workload.kernel_shape[2:] == (1, 1) and workload.strides == (1, 1) and not any(workload.padding)
            and workload.groups == 1)


def runtime_channels(workload: Conv2DWorkload, config: Conv2DConfig) -> bool:
    """Whether the kernel reads its count of input channel blocks from its arguments instead of
    having it compiled in: a pointwise conv (:func:`pointwise`) of more than one block, whose input
    channels enter its code only as the reduction's trip count and the strides that follow from it.
    Convs that differ only in their input channels (DenseNet's 1x1 convs over a growing
    concatenation: 58 of its 120) then share one kernel text for a config, compiled once for all
    of them: tuning DenseNet-121 timed 939 configs of its 1x1 workloads, of which 382 differ but
    for the input channels. The rest of the kernel (the tiles, their FMAs, the prefetch's lines
    per step and their spread, whether the reduction runs in L1 batches) is generated for the
    conv's own sizes as before, so a conv runs the innermost loop it ran with them compiled in.
    (One block is left compiled in: its reduction is no loop at all.)

    >>> runtime_channels(Conv2DWorkload((1, 96, 8, 8), (32, 96, 1, 1)), Conv2DConfig(16, 16, 4))
    True
    >>> runtime_channels(Conv2DWorkload((1, 96, 8, 8), (32, 96, 1, 1)), Conv2DConfig(96, 16, 4))
    False
    >>> padded = Conv2DWorkload((1, 96, 8, 8), (32, 96, 3, 3), padding=(1, 1, 1, 1))
    >>> runtime_channels(padded, Conv2DConfig(16, 16, 4))
    False
    """
    return pointwise(workload) and workload.kernel_shape[1] > reduction_block(workload, config)


def join_rows(workload: Conv2DWorkload, config: Conv2DConfig, threads: int | None = None,
              rows_first: bool = False) -> Conv2DWorkload:
    """The workload the kernel is generated for: a 1x1, stride-1, unpadded conv over an
    ``H x W`` plane is the same conv over ``H / g`` rows of ``g * W`` pixels for any ``g``
    dividing ``H`` (NCHWc keeps a plane's pixels contiguous), so register tiles run on
    across row ends instead of ending each row with a narrower tail tile. ``g`` is the
    largest that still leaves about eight work items per thread (:func:`rows_per_item`),
    so parallelism is unchanged; ``g = H`` when the output channel blocks alone give
    that many. ResNet-50's 7x7 512->2048 conv ran 13% faster as a 49-pixel row on AVX2;
    its 14x14 1024->256 (``oc_bn`` 32) 6% faster as 2 rows of 98, and 56x56 64->256 6%
    faster as 2 rows of 1568 (benchmarks/README.md, session 8).

    >>> w = Conv2DWorkload((1, 512, 7, 7), (2048, 512, 1, 1))
    >>> join_rows(w, Conv2DConfig(16, 16, 5), threads=2).data_shape
    (1, 512, 1, 49)
    >>> join_rows(Conv2DWorkload((1, 1024, 14, 14), (256, 1024, 1, 1)), Conv2DConfig(16, 32, 3), threads=2).data_shape
    (1, 1024, 2, 98)
    >>> join_rows(w, Conv2DConfig(16, 1024, 5), threads=2) == w  # 2 planes, and 7 rows cannot split evenly
    True
    """
    N, IC, H, W = workload.data_shape
    if not pointwise(workload) or H == 1 or config.oh_bn > 1:
        return workload
    # The rows an item holds (rows_per_item), rounded down to a divisor of H: items stay whole rows.
    # Rows first (takes_rows_first), a work item is rows of every channel block: only the rows count.
    rows = rows_per_item(N if rows_first else N * workload.out_channels // config.oc_bn, H, 1, threads)
    g = max(d for d in range(1, rows + 1) if H % d == 0)
    if g == 1:
        return workload
    return Conv2DWorkload((N, IC, H // g, g * W), workload.kernel_shape, dilation=workload.dilation)


COMPACT_MIN_WEIGHTS = 1 << 16  # input x output channels: measured wins at 2^17 and up, losses at 2^15 and below


def compact_input(workload: Conv2DWorkload) -> Conv2DWorkload | None:
    """For a strided, unpadded 1x1 conv: the stride-1 conv over a compact copy of the pixels
    it reads (every ``sh``-th row, every ``sw``-th pixel), which the kernel makes first in
    its own parallel pass; None for any other conv. Read in place, each input cache line
    served a fraction of a pixel block and the rows did not join (:func:`join_rows`).
    With the copy, the plans' strided 1x1 convs with at least :data:`COMPACT_MIN_WEIGHTS`
    weights ran 0.77-0.95x the time, copy included (5 of ResNet-50's); the smaller ones
    (ResNet-18's 64->128 and 128->256, ResNet-50's 256->128) 1.05-1.06x, so they read in
    place (benchmarks/README.md, session 8).

    >>> compact_input(Conv2DWorkload((1, 256, 56, 56), (512, 256, 1, 1), strides=(2, 2))).data_shape
    (1, 256, 28, 28)
    >>> compact_input(Conv2DWorkload((1, 256, 56, 56), (512, 256, 1, 1))) is None  # stride 1
    True
    >>> compact_input(Conv2DWorkload((1, 64, 56, 56), (128, 64, 1, 1), strides=(2, 2))) is None  # small
    True
    """
    if (workload.kernel_shape[2:] != (1, 1) or workload.strides == (1, 1) or any(workload.padding)
            or workload.groups > 1 or workload.out_channels * workload.kernel_shape[1] < COMPACT_MIN_WEIGHTS):
        return None
    N, IC = workload.data_shape[:2]
    return Conv2DWorkload((N, IC, workload.out_height, workload.out_width), workload.kernel_shape)


def kernel_workload(workload: Conv2DWorkload, config: Conv2DConfig, threads: int | None = None,
                    rows_first: bool = False, prologue: bool = False) -> Conv2DWorkload:
    """The workload the kernel's main pass is generated for: over the compact copy of a
    strided 1x1 conv's input (:func:`compact_input`), with a work item's rows joined
    (:func:`join_rows`; its items rows first where :func:`takes_rows_first`)."""
    return join_rows(compact_input(workload) or workload, config, threads,
                     takes_rows_first(workload, config, rows_first, threads, prologue))


def takes_rows_first(workload: Conv2DWorkload, config: Conv2DConfig, asked: bool, threads: int | None = None,
                     prologue: bool = False) -> bool:
    """Whether a conv kernel's work items go rows first (:func:`kernels.threads.rows_first_items`):
    an unpadded stride-1 1x1 conv with several output channel blocks and row tiles enough to
    share, 3 per thread when asked, and unasked :data:`kernels.threads.ROWS_FIRST_TILES` per
    thread without an input ``prologue``; any other conv by the rows it writes (below).

    The pool gives each thread a contiguous band of the work items first
    (:mod:`kernels.pool_ir`). Items are ``(n, channel block, rows)``: a band is some channel
    blocks of every row, so every core reads every input row. Rows first (``(n, rows,
    channel block)``), a band is every channel block of some rows, so each input row is read
    by one core (but the row at a band's edge). The next kernel writing over that memory
    then waits for fewer copies to be invalidated: MobileNet-v2's depthwise convs, which
    write over what the block before's 1x1 projection read (benchmarks/output_state.py),
    ran 25-40% faster, and the whole network took 0.95-0.99x the time. The conv itself runs
    about as fast, but not with few row tiles (each thread's weights pass once per row tile:
    a 7x7 projection with 4 for 2 threads took +0.016 ms; as a rule for all 1x1 convs it cost
    ResNet-50 and DenseNet-121 1%, benchmarks/README.md, session 17). So the executor asks
    for it where a depthwise conv writes next over the conv's input
    (:mod:`graph_tuner.executor.compile`), and the 1x1 conv fused with a depthwise conv runs
    its items so (:mod:`kernels.dw_project`). Unasked, a conv takes rows first from
    :data:`kernels.threads.ROWS_FIRST_TILES` row tiles per thread: in the host's slow phase and its fast
    one, ResNeXt-50's plan then ran 0.95x and 0.985x the time, ResNet-50's 0.97x and 1.01x,
    Inception-v3's 0.98x and 1.00x; DenseNet-121's 1x1 convs, which transform their input
    in a prologue, ran 1.02x in the slow phase so, and 1.00x left as they were (session 22).
    The tuner times a conv in the order it takes unasked. Any other conv (a window, a stride,
    groups) takes rows first by the rows it writes, asked or not, with an input prologue or not
    (:func:`kernels.threads.rows_first_items`), but a strided 1x1 conv over its compact copy and
    a tall conv run by columns.

    >>> w = Conv2DWorkload((1, 384, 14, 14), (64, 384, 1, 1))
    >>> [takes_rows_first(w, Conv2DConfig(16, oc_bn, 7), True, threads=2) for oc_bn in (16, 64)]
    [True, False]
    >>> takes_rows_first(w, Conv2DConfig(16, 16, 7), False, threads=2)  # 14 rows: under 8 per thread
    False
    >>> big = Conv2DWorkload((1, 256, 28, 28), (64, 256, 1, 1))
    >>> [takes_rows_first(big, Conv2DConfig(16, 16, 7), False, threads=2, prologue=p) for p in (False, True)]
    [True, False]
    """
    blocks = workload.out_channels // config.oc_bn
    if not pointwise(workload):  # a window, a stride or groups: by the rows it writes
        return (compact_input(workload) is None and not columns_first(workload, config)
                and rows_first_items(-(-workload.out_height // config.oh_bn), blocks, threads))
    tiles = -(-workload.data_shape[2] // config.oh_bn)
    return (blocks > 1 and tiles >= 3 * (threads or num_threads()) if asked
            else not prologue and rows_first_items(tiles, blocks, threads))


def subsample_copy_ir(name: str, workload: Conv2DWorkload, block: int, scratch_arg: int) -> str:
    """``void @name(ptr args, i64 row)``: copy the pixels of one output row of a strided 1x1
    conv (:func:`compact_input`) from the ``NCHW[block]c`` input into the compact scratch
    (shape ``[n, c // block, out_h, out_w, block]``). Items are ``n * c // block * out_h`` rows,
    rows first (every channel block of a row, then the next row), so each thread's band is
    rows, which a rows-first producer (:func:`takes_rows_first`) left in its own core's cache:
    ResNeXt-50's 256-channel 56x56 one ran 1.055x (1.016-1.081) the time with items channel
    blocks first (in the network, 16 rounds; the other strided ones, and ResNet-50's, within
    1-2%)."""
    N, IC, H, W = workload.data_shape
    OH, OW = workload.out_height, workload.out_width
    sh, sw = workload.strides
    f = IRFunction(f"define internal void @{name}(ptr %args, i64 %item) nounwind")
    src, dst = arg_ptr(f, 0), arg_ptr(f, scratch_arg)
    planes = N * IC // block
    row, plane = f.op(f"udiv i64 %item, {planes}"), f.op(f"urem i64 %item, {planes}")
    s0 = f.gep(src, f.affine((plane, H * W * block), (row, sh * W * block)))
    d0 = f.gep(dst, f.affine((plane, OH * OW * block), (row, OW * block)))
    with f.loop(OW) as x:
        d, s_ = f.gep(d0, f.mul(x, block)), f.gep(s0, f.mul(x, sw * block))
        f.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr align 4 {d}, ptr align 4 {s_}, i64 {block * 4}, i1 false)")
    f.emit("ret void")
    return f.text()


def prefetch_per_step(slice_bytes: int, steps: int, l2_bytes: int | None = None) -> int:
    """Cache lines of the next channel block's weights to prefetch per innermost loop trip,
    so that one item's trips cover the slice; 0 when two slices would not fit in L2.

    >>> prefetch_per_step(590_000, 1536 * 7, l2_bytes=2 << 20), prefetch_per_step(2_000_000, 100, l2_bytes=2 << 20)
    (1, 0)
    """
    l2 = l2_bytes or host_cpu().l2_bytes
    if steps <= 0 or 2 * slice_bytes > l2 * 3 // 4:
        return 0
    lines = -(-slice_bytes // 64)
    return -(-lines // steps)


def prefetch_scale(lines: int, slots: int) -> int:
    """The 32.32 fixed-point step: prefetch slot ``s`` of a work item's ``slots`` (a few a
    trip, numbered in step order) takes line ``(s * scale) >> 32``, so the lines are spread
    evenly over the item's steps instead of coming in a burst at its start. With at least as
    many slots as lines (a scale of at most 1) they come in order and none is skipped; with
    fewer (a short last item), every ``scale / 2^32``-th line.

    >>> [(s * prefetch_scale(3, 7)) >> 32 for s in range(7)], [(s * prefetch_scale(6, 3)) >> 32 for s in range(3)]
    ([0, 0, 0, 1, 1, 2, 2], [0, 2, 4])
    """
    # slot * scale < lines * 2^32 + slots: below 2^63 while lines < 2^31 (the IR multiplies nsw)
    assert 0 < lines < 1 << 31 and slots > 0, (lines, slots)
    return -(-(lines << 32) // slots)  # rounded up: the last slot reaches the last line


L1_WEIGHT_SHARE = 0.5  # of the L1 data cache, for a reduction batch's weights (24 KiB of 48 here)


def ic_batch(workload: Conv2DWorkload, config: Conv2DConfig, l1d_bytes: int | None = None) -> int:
    """Reduction blocks (:func:`reduction_block`) per reduction batch. A 1x1 conv whose weight slice (all input
    channels x ``oc_bn``) overflows :data:`L1_WEIGHT_SHARE` of L1 reduces in batches, as MLAS does:
    each batch sweeps all of a work item's rows with its weights held in L1, keeping partial
    sums in the output; otherwise every row tile streamed the whole slice from L2.

    >>> big = Conv2DWorkload((1, 1024, 14, 14), (256, 1024, 1, 1))
    >>> ic_batch(big, Conv2DConfig(64, 32, 14), 48 << 10), ic_batch(big, Conv2DConfig(1024, 32, 14), 48 << 10)
    (3, 1)
    >>> ic_batch(Conv2DWorkload((1, 64, 56, 56), (256, 64, 1, 1)), Conv2DConfig(16, 32, 14), 48 << 10)
    4
    """
    icb, ocb = reduction_block(workload, config), config.oc_bn
    blocks = workload.kernel_shape[1] // icb
    budget = int(L1_WEIGHT_SHARE * (l1d_bytes or host_cpu().l1d_bytes))
    if (workload.kernel_shape[2:] != (1, 1) or any(workload.padding) or blocks == 1
            or not 0 < icb * ocb * 4 <= budget):  # one block's weights must fit, or batching cannot help
        return blocks
    return min(blocks, max(1, budget // (icb * ocb * 4)))


def reduction_block(workload: Conv2DWorkload, config: Conv2DConfig) -> int:
    """Input channels per reduction block: ``ic_bn``, or a group's channels when an input block
    holds several whole groups (a grouped conv reading the layout a dense producer writes). The
    weights are packed in blocks of this many input channels (:func:`conv2d_arg_shapes`).
    ResNeXt-50's 8-channel groups read ``NCHW64c`` from the 1x1 conv before them, where a
    transform to 8 lanes took 0.29 ms alone at 56x56 (rocketlake).

    >>> g8 = Conv2DWorkload((1, 256, 56, 56), (256, 8, 3, 3), padding=(1, 1, 1, 1), groups=32)
    >>> reduction_block(g8, Conv2DConfig(64, 8, 8)), reduction_block(g8, Conv2DConfig(4, 8, 8))
    (8, 4)
    """
    return min(config.ic_bn, workload.kernel_shape[1])


def prologue_fits(workload: Conv2DWorkload) -> bool:
    """Whether a conv can apply an input prologue (see :func:`conv2d_ir`): a 1x1 conv without
    padding (a padded one would transform its zero border too) or groups.

    >>> x = (1, 64, 8, 8)
    >>> prologue_fits(Conv2DWorkload(x, (32, 64, 1, 1))), prologue_fits(Conv2DWorkload(x, (32, 64, 3, 3)))
    (True, False)
    """
    return workload.kernel_shape[2:] == (1, 1) and not any(workload.padding) and workload.groups == 1


def prologue_bytes(workload: Conv2DWorkload, config: Conv2DConfig) -> int:
    """Bytes of the stack buffer an input prologue transforms a register tile's pixels into (two
    channel blocks of them: see :func:`_reduce`).

    >>> prologue_bytes(Conv2DWorkload((1, 896, 14, 14), (128, 896, 1, 1)), Conv2DConfig(896, 8, 11))
    78848
    """
    tile = kernel_workload(workload, config, prologue=True)
    return 2 * min(config.oh_bn, tile.out_height) * min(config.ow_bn, tile.out_width) * config.ic_bn * 4


def pads_by_copy(workload: Conv2DWorkload, config: Conv2DConfig) -> bool:
    """Whether the kernel copies its input into a zero-bordered scratch first. Register
    tiles of one row skip the padding's taps instead (no copy, no extra pass over the
    input); taller tiles (``oh_bn > 1``, AutoTVM's 1x1 template) keep the copy.

    >>> wl = Conv2DWorkload((1, 8, 6, 6), (8, 8, 3, 3), padding=(1, 1, 1, 1))
    >>> pads_by_copy(wl, Conv2DConfig(4, 4, 3)), pads_by_copy(wl, Conv2DConfig(4, 4, 3, oh_bn=2))
    (False, True)
    """
    return any(workload.padding) and min(config.oh_bn, workload.out_height) > 1


def columns_first(workload: Conv2DWorkload, config: Conv2DConfig) -> bool:
    """Whether a tall conv (``KW == 1 < KH``: Inception's 7x1 and 3x1) runs over the plane's
    columns: its code is the ``1 x KH`` conv's over the transposed plane (register tiles
    ``ow_bn`` output rows tall, ``KH`` taps along them), reading and writing the same NCHWc
    arrays. Taken where ``unroll_kw`` (the taps unrolled, as for a wide conv): with one tap
    in a row, that knob chose nothing else, so its two values were two timings of one kernel.

    Over rows, every tap of a tall conv broadcasts its own pixels (one per two FMAs in a tile
    of two vectors); unrolled along a column, neighbouring taps share them, as a wide conv's
    do along its row. Inception-v3's 192->192 1x7 conv at 17x17 ran 1.40x as fast as its 7x1
    (their best configs in session 35's log). By columns, its six tall workloads' best configs
    took 0.81-0.97x the time of their best over rows, and its plan 0.946x and 0.968x, re-tuned
    for them alone (benchmarks/README.md, session 37). The tuner still times both forms: by
    columns, a tile's pixels are a row apart, and some blocks and tiles ran slower so (to 1.10x).

    >>> tall = Conv2DWorkload((1, 8, 17, 17), (8, 8, 7, 1), padding=(3, 0, 3, 0))
    >>> columns_first(tall, Conv2DConfig(8, 8, 9, True)), columns_first(tall, Conv2DConfig(8, 8, 9, False))
    (True, False)
    >>> columns_first(Conv2DWorkload((1, 8, 17, 17), (8, 8, 1, 7), padding=(0, 3, 0, 3)), Conv2DConfig(8, 8, 9, True))
    False
    """
    KH, KW = workload.kernel_shape[2:]
    return (KW == 1 < KH and config.unroll_kw and workload.groups == 1 and not pads_by_copy(workload, config)
            and compact_input(workload) is None)


def _check(workload: Conv2DWorkload, config: Conv2DConfig, activation) -> None:
    if workload.out_dtype != "float32" or workload.layout != "NCHW":
        raise ValueError(f"only float32 NCHW conv2d is supported, got {workload.layout}/{workload.out_dtype}")
    activation_spec(activation)  # raises if unknown
    icg, ocg = workload.kernel_shape[1], workload.out_channels // workload.groups
    wide = workload.groups > 1 and config.ic_bn > icg and config.ic_bn % icg == 0
    if config.ic_bn < 1 or (icg % config.ic_bn and not wide) or workload.in_channels % config.ic_bn:
        what = (f"neither divides {icg} input channels per group nor holds whole groups of the {workload.in_channels}"
                if workload.groups > 1 else f"does not divide {icg} input channels")
        raise ValueError(f"ic_bn={config.ic_bn} {what}")
    if config.oc_bn < 1 or ocg % config.oc_bn:
        raise ValueError(f"oc_bn={config.oc_bn} does not divide {ocg} output channels per group")
    if config.ow_bn < 1 or config.oh_bn < 1:
        raise ValueError(f"ow_bn and oh_bn must be >= 1, got {config.ow_bn}, {config.oh_bn}")
    if workload.out_height < 1 or workload.out_width < 1:
        raise ValueError(f"empty output {workload.out_shape}")


# --- the IR: one context, then each function top to bottom --------------------------------
#
# conv2d_ir emits, per row count R of a register tile row and reduction mode, a row-block
# function (row_block_ir): the register tiles across R output rows of one output channel
# block, each tile loading its accumulators, running the FMA reduction over input channel
# blocks and taps, then storing through the epilogue. A work-item function (work_item_ir)
# calls the row blocks of one item's rows, batch by batch, and picks the weights to prefetch;
# the entry point runs the optional input copies, then the items, on the thread pool.


@dataclass(frozen=True)
class ConvContext:
    """What every function of one conv kernel shares: the shapes of the pass it computes,
    how the input is read, and the work plan (items, register tiles, reduction batches,
    weight prefetch). Built by :func:`conv_context`; names follow the workload's
    (``N, IC, H, W`` input, ``OC, ICg, KH, KW`` kernel, ``OH, OW`` output)."""

    name: str
    config: Conv2DConfig
    source: Conv2DWorkload  # what the data argument holds
    workload: Conv2DWorkload  # what the main pass computes (kernel_workload)
    bias: bool
    residual: bool
    activation: str | tuple | None  # activation_key's spelling
    affine_out: bool
    affine_activation: str | tuple | None
    prologue: bool  # each input pixel is act_in(x * scale_in[ic] + shift_in[ic]) (see conv2d_ir)
    prologue_activation: str | tuple | None
    N: int
    IC: int
    H: int
    W: int
    OC: int
    ICg: int
    KH: int
    KW: int
    OH: int
    OW: int
    sh: int
    sw: int
    dh: int
    dw: int
    top: int
    left: int
    bottom: int
    icb: int  # input channel block (the layout's)
    icr: int  # input channels per reduction block (reduction_block): icb, or a group's channels
    ocb: int  # output channel block
    ICB: int  # input channel blocks
    OCB: int  # output channel blocks
    ICgB: int  # reduction blocks per group (ICg // icr)
    OCg: int  # output channels per group
    padded: bool
    copy_pad: bool  # reads a zero-bordered copy of the input (pads_by_copy)
    compact: bool  # reads the compact copy of a strided 1x1 conv's input (compact_input)
    # The input as read: the scratch copy, or the input itself with out-of-range taps
    # skipped (kh bounds per row, edge tiles compiled without them): its plane's rows and
    # row length, and the offset of output pixel (0, 0)'s first tap.
    Hs: int
    Ws: int
    origin: int
    # Floats between neighbouring pixels of the input as read and of the output, down a row
    # block's rows and along a tile: a row apart and one pixel apart, or the other way round
    # for a conv tiled by columns (columns_first).
    in_row: int
    in_col: int
    out_row: int
    out_col: int
    lanes: int  # floats per vector register
    chunks: list[tuple[int, int]]  # the output block's vectors (offset, width)
    ohb: int  # register tile rows
    T: int  # register tile width (output pixels)
    rows_first: bool  # items (n, rows, channel block): a thread's band is whole rows (takes_rows_first)
    G: int  # output rows per work item
    NB: int  # row blocks per output plane
    steps_ic: int  # innermost loop trips per (icg, kh)
    steps_per_row_tile: int
    slice_floats: int  # one output channel block's weights
    slice_lines: int
    pf_per_step: int  # lines of the next weight slice prefetched per innermost trip
    pf_scale: int  # a prefetch slot times pf_scale, >> 32, is the line it prefetches
    pf_scale_last: int  # the same in a plane's last row block, which may be shorter
    kw_order: list[int]  # unrolled taps (see conv_context)
    batch_icg: int  # input channel blocks per reduction batch (ic_batch)
    batches: int
    runtime: bool  # the reduction's sizes come from the arguments (runtime_channels): see reduction()


def conv_context(workload: Conv2DWorkload, config: Conv2DConfig, *, name: str, lanes: int, bias: bool,
                 residual: bool, activation: str | tuple | None, affine_out: bool,
                 affine_activation: str | tuple | None, prologue: bool = False,
                 prologue_activation: str | tuple | None = None, rows_first: bool = False) -> ConvContext:
    """The :class:`ConvContext` of a checked workload and config."""
    source = workload
    compact = compact_input(workload) is not None
    rows_first = takes_rows_first(workload, config, rows_first, prologue=prologue)
    workload = kernel_workload(workload, config, rows_first=rows_first, prologue=prologue)
    N, IC, H, W = workload.data_shape
    OC, ICg, KH, KW = workload.kernel_shape
    OH, OW = workload.out_height, workload.out_width
    sh, sw = workload.strides
    dh, dw = workload.dilation
    top, left, bottom, right = workload.padding
    padded = any(workload.padding)
    copy_pad = pads_by_copy(workload, config)
    Hs, Ws = (H + top + bottom, W + left + right) if copy_pad or not padded else (H, W)
    in_row, in_col, out_row, out_col = Ws * config.ic_bn, config.ic_bn, OW * config.oc_bn, config.oc_bn
    if columns_first(workload, config):  # the same code over the transposed plane
        H, W, KH, KW, OH, OW, sh, sw, dh, dw = W, H, KW, KH, OW, OH, sw, sh, dw, dh
        top, left, bottom, right = left, top, right, bottom
        in_row, in_col, out_row, out_col = in_col, in_row, out_col, out_row
    icb, ocb, icr = config.ic_bn, config.oc_bn, reduction_block(workload, config)
    ICgB, OCB = ICg // icr, OC // ocb
    ohb = min(config.oh_bn, OH)
    T = min(config.ow_bn, OW)
    G = rows_per_item(N, OH, ohb) if rows_first else rows_per_item(N * OCB, OH, ohb)
    steps_ic = icr if config.unroll_kw else KW * icr
    tiles_per_row = OW // T + (1 if OW % T else 0)
    steps_per_row_tile = tiles_per_row * ICgB * KH * steps_ic
    NB = -(-OH // G)  # row blocks in a plane
    item_steps = -(-G // ohb) * steps_per_row_tile
    last_steps = -(-(OH - (NB - 1) * G) // ohb) * steps_per_row_tile  # the last row block's
    slice_floats = ICgB * KH * KW * icr * ocb
    slice_lines = -(-slice_floats * 4 // 64)
    pf = prefetch_per_step(slice_floats * 4, item_steps)
    batch_icg = ic_batch(workload, config)
    return ConvContext(
        name=name, config=config, source=source, workload=workload, bias=bias, residual=residual,
        activation=activation_key(activation), affine_out=affine_out,
        affine_activation=activation_key(affine_activation, "affine_activation"), prologue=prologue,
        prologue_activation=activation_key(prologue_activation, "prologue_activation"),
        N=N, IC=IC, H=H, W=W, OC=OC, ICg=ICg, KH=KH, KW=KW, OH=OH, OW=OW, sh=sh, sw=sw, dh=dh, dw=dw,
        top=top, left=left, bottom=bottom, icb=icb, icr=icr, ocb=ocb, ICB=IC // icb, OCB=OCB, ICgB=ICgB,
        OCg=OC // workload.groups, padded=padded, copy_pad=copy_pad, compact=compact, Hs=Hs, Ws=Ws,
        origin=0 if copy_pad else -(top * in_row + left * in_col), in_row=in_row, in_col=in_col,
        out_row=out_row, out_col=out_col, lanes=lanes, chunks=vector_chunks(ocb, lanes),
        ohb=ohb, T=T, rows_first=rows_first,
        G=G, NB=NB, steps_ic=steps_ic, steps_per_row_tile=steps_per_row_tile,
        slice_floats=slice_floats, slice_lines=slice_lines, pf_per_step=pf,
        pf_scale=prefetch_scale(slice_lines, item_steps * pf) if pf else 0,
        pf_scale_last=prefetch_scale(slice_lines, last_steps * pf) if pf else 0,
        # Unrolled taps in an order where consecutive ones share input pixels (stride 2: kw 0, 2, 1):
        # a pixel loaded for kw 0 and again for kw 2 stayed live across kw 1 and spilled the tile.
        kw_order=sorted(range(KW), key=lambda kw: (kw * dw % sw, kw)),
        batch_icg=batch_icg, batches=-(-ICgB // batch_icg), runtime=runtime_channels(source, config),
    )


@dataclass(frozen=True)
class Reduction:
    """The sizes that follow from the input channel count, as one function's IR uses them:
    constants, or (:func:`runtime_channels`) values its entry block computes from the count of
    reduction blocks the call's arguments hold (:data:`BLOCKS_ARG`). Either way the same integers."""

    blocks: int | str  # reduction blocks (ICgB)
    slice_floats: int | str  # one output channel block's weights
    last_line: int | str  # the slice's last cache line (slice_lines - 1)
    image_floats: int | str  # one image of the input as read
    tile_steps: int | str  # a register tile's innermost trips over the whole reduction
    row_tile_steps: int | str  # the same for a row of tiles (steps_per_row_tile)


def reduction(f: IRFunction, c: ConvContext) -> Reduction:
    """The :class:`Reduction` of ``c`` in ``f`` (call it in the entry block: its values must
    dominate every use)."""
    per_block = c.KH * c.steps_ic
    if not c.runtime:
        return Reduction(c.ICgB, c.slice_floats, c.slice_lines - 1, c.ICB * c.Hs * c.Ws * c.icb, c.ICgB * per_block,
                         c.steps_per_row_tile)
    blocks = f.op(f"load i64, ptr {f.op(f'getelementptr inbounds ptr, ptr %args, i64 {BLOCKS_ARG}')}, align 8")
    slice_floats = f.mul(blocks, c.slice_floats // c.ICgB)
    last_line = f.op(f"lshr i64 {f.add(f.mul(slice_floats, 4), 63)}, 6")  # ceil(bytes / 64) - 1 ...
    last_line = f.add(last_line, -1)  # ... as slice_lines - 1
    tiles_per_row = c.steps_per_row_tile // (c.ICgB * per_block)
    return Reduction(blocks, slice_floats, last_line, f.mul(blocks, c.Hs * c.Ws * c.icb), f.mul(blocks, per_block),
                     f.mul(blocks, tiles_per_row * per_block))


def conv2d_scalars(workload: Conv2DWorkload, config: Conv2DConfig) -> list[int]:
    """The integers a conv2d kernel's arguments end with (after its scratch): its reduction
    blocks where it reads them there (:func:`runtime_channels`), else none.

    >>> conv2d_scalars(Conv2DWorkload((1, 96, 8, 8), (32, 96, 1, 1)), Conv2DConfig(16, 16, 4))
    [6]
    """
    if not runtime_channels(workload, config):
        return []
    return [workload.kernel_shape[1] // reduction_block(workload, config)]


def conv2d_ir(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
              activation: str | tuple | None = None, name: str = "conv2d", lanes: int | None = None,
              affine_out: bool = False, affine_activation: str | tuple | None = None, prologue: bool = False,
              prologue_activation: str | tuple | None = None, rows_first: bool = False,
              row_means: bool = False) -> str:
    """LLVM IR text of ``void @name(ptr args, i32 nthreads)`` (args: :data:`ARGS`, then the scratch).
    ``row_means`` is the depthwise template's alone (ValueError here).

    ``affine_out``: the epilogue also writes ``out2 = act2(out * scale2[oc] + shift2[oc])``
    (``act2`` = ``affine_activation``), e.g. the batch norm + relu that a pre-activation
    ResNet applies to a residual sum that is itself needed too: one pass instead of two.
    ``prologue`` (unpadded 1x1 convs, :func:`prologue_fits`): the conv reads
    ``act_in(x * scale_in[ic] + shift_in[ic])`` (``act_in`` = ``prologue_activation``), e.g.
    DenseNet's ``bn -> relu`` before each 1x1 conv, which otherwise is a pass of its own
    over the whole concatenation. Each register tile transforms its pixels' channel block
    into a stack buffer (L1) before the FMAs broadcast from it: a vector FMA and activation
    per pixel and block, against ``ic_bn x oc_bn / lanes`` FMAs.
    Activations are names or ``(name, *params)`` tuples of :data:`kernels.activations.ACTIVATIONS`.
    ``rows_first``: work items rows first where :func:`takes_rows_first` allows (same results).
    """
    _check(workload, config, activation)
    activation_spec(affine_activation, "affine_activation")  # raises if unknown
    activation_spec(prologue_activation, "prologue_activation")
    if prologue and not prologue_fits(workload):
        raise ValueError(f"an input prologue needs an unpadded 1x1 conv without groups, got {workload}")
    if row_means:
        raise ValueError(f"{NO_ROW_MEANS}: {workload}, {config}")
    return _conv2d_text(workload, config, name, lanes or host_cpu().lanes, num_threads(), bias, residual, activation,
                        affine_out, affine_activation, prologue, prologue_activation,
                        takes_rows_first(workload, config, rows_first, prologue=prologue))


# The tuner asks for one config's text up to three times (compiling it ahead, then building
# it; a pair's second also as the first's guess): 0.5-5 ms of Python each, 8% of tuning
# DenseNet-121 (cProfile). Arguments normalised, so every caller's call hits the one entry;
# ``threads`` is only part of the key (rows_per_item splits the rows by the thread count).
@kernel_cache(maxsize=16)
def _conv2d_text(workload: Conv2DWorkload, config: Conv2DConfig, name: str, lanes: int, threads: int, bias: bool,
                 residual: bool, activation, affine_out: bool, affine_activation, prologue: bool,
                 prologue_activation, rows_first: bool = False) -> str:
    c = conv_context(workload, config, name=name, lanes=lanes, bias=bias, residual=residual,
                     activation=activation, affine_out=affine_out, affine_activation=affine_activation,
                     prologue=prologue, prologue_activation=prologue_activation, rows_first=rows_first)
    intr = IntrinsicSet()
    row_sizes = {c.ohb} | ({c.OH % c.ohb} if c.OH % c.ohb else set())
    modes = ["all"] if c.batches == 1 else ["batch"]
    functions = [row_block_ir(c, intr, R, m) for R in sorted(row_sizes) for m in modes]
    functions.append(work_item_ir(c))
    phases = []
    if c.copy_pad:
        functions.append(MEMCPY_DECL + pad_copy_ir(f"{name}_pad", c.N, c.ICB, c.H, c.W, c.icb, c.workload.padding,
                                                   SCRATCH_ARG))
        phases.append((f"{name}_pad", c.N * c.ICB * c.H))
    if c.compact:
        functions.append(MEMCPY_DECL + subsample_copy_ir(f"{name}_sub", c.source, c.icb, SCRATCH_ARG))
        phases.append((f"{name}_sub", c.N * c.ICB * c.source.out_height))
    phases.append((f"{name}_item", c.N * c.OCB * c.NB, True))
    return "".join(functions) + intr.declarations() + PREFETCH_DECL + MINMAX_DECL + parallel_entry_ir(name, phases)


@dataclass
class RowBlock:
    """One row-block function being emitted (:func:`row_block_ir`): its arguments' pointers
    and what all its register tiles share."""

    c: ConvContext
    f: IRFunction
    intr: IntrinsicSet
    rows: int  # R
    mode: str  # all (the whole reduction) or batch (one batch of it)
    data: str
    weight: str
    out: str
    bias: str | None
    residual: str | None
    out2: str | None
    scale2: str | None
    shift2: str | None
    red: Reduction
    icb_start: str = "0"  # the group's first input channel block
    lane_start: str = "0"  # and its first lane in that block (an input block of several groups)
    kh_lo: str | int = 0  # the kh taps inside the input for this row
    kh_hi: str | int = 0
    scale_in: str | None = None  # the input prologue's (see conv2d_ir)
    shift_in: str | None = None
    pre: str | None = None  # stack buffer of a tile's transformed input pixels (two channel blocks)
    pre_at: str = "0"  # where in it the block being reduced starts
    slots: dict = field(default_factory=dict)  # (row, pixel, chunk) -> accumulator slot, shared by the tiles


@dataclass
class Tile:
    """One register tile of a row block: ``width`` output pixels from column ``ow0``."""

    width: int
    ow0: str
    index: str  # its place in the row, for the prefetch's step count
    edge: int | None  # its static first column when some of its taps fall in the padding
    acc: dict  # (row, pixel, chunk) -> accumulator slot
    obase: str  # output offset of its first pixel


def row_block_ir(c: ConvContext, intr: IntrinsicSet, R: int, mode: str = "all") -> str:
    """``@name_rows{R}_{mode}(args, n, ob, oh0, pf, pfs, j0, icg0, icg1)``: R output rows of one
    output channel block over reduction blocks ``[icg0, icg1)`` of its group, prefetching lines of the
    weight slice at ``pf`` from step ``j0`` (see :func:`prefetch_per_step`; ``pfs`` is the
    item's :func:`prefetch_scale`). ``mode``: ``all`` (the whole
    reduction), or ``batch``: one batch of it (see :func:`ic_batch`), which starts from the bias
    when ``icg0`` is 0, else from the partial sums, and applies the epilogue when ``icg1`` ends
    the reduction, else stores partial sums."""
    f = IRFunction(f"define internal void @{c.name}_rows{R}_{mode}(ptr %args, i64 %n, i64 %ob, i64 %oh0, "
                   f"ptr %pf, i64 %pfs, i64 %j0, i64 %icg0, i64 %icg1) nounwind",
                   md_base=1000 * R + 100 * ("all", "batch").index(mode))
    data = arg_ptr(f, SCRATCH_ARG if c.copy_pad or c.compact else 0)
    weight, out = arg_ptr(f, 1), arg_ptr(f, 2)
    bias = arg_ptr(f, 3) if c.bias else None
    residual = arg_ptr(f, 4) if c.residual else None
    out2, scale2, shift2 = (arg_ptr(f, i) for i in (5, 6, 7)) if c.affine_out else (None, None, None)
    rb = RowBlock(c, f, intr, R, mode, data, weight, out, bias, residual, out2, scale2, shift2, reduction(f, c))
    if c.prologue:
        rb.scale_in, rb.shift_in = arg_ptr(f, 8), arg_ptr(f, 9)
        rb.pre = f.slot(f"[{2 * R * c.T * c.icb} x float]")  # two halves: see _reduce
    if c.workload.groups > 1:
        group = f.op(f"udiv i64 {f.mul('%ob', c.ocb)}, {c.OCg}")
        if c.icr < c.icb:  # the group's channels are lanes of a wider block
            first = f.mul(group, c.ICg)
            rb.icb_start = f.op(f"udiv i64 {first}, {c.icb}")
            rb.lane_start = f.op(f"urem i64 {first}, {c.icb}")
        else:
            rb.icb_start = f.mul(group, c.ICgB)
    rb.kh_lo, rb.kh_hi = _kh_range(f, c)
    _row_tiles(rb)
    f.emit("ret void")
    return f.text()


def _kh_range(f: IRFunction, c: ConvContext) -> tuple[str | int, str | int]:
    """The kernel rows whose taps fall inside the input for output row ``%oh0`` (R is 1 when
    the input is read unpadded), or all of them."""
    if not (c.padded and not c.copy_pad and (c.top or c.bottom)):
        return 0, c.KH
    return tap_range(f, f.add(f.mul("%oh0", c.sh), -c.top), c.H, c.KH, c.dh)


def _row_tiles(rb: RowBlock) -> None:
    """The row's register tiles: those at the edges whose taps reach into the padding (each
    compiled with its taps static), a loop over the contiguous middle, and a narrower tail."""
    c, f, T = rb.c, rb.f, rb.c.T

    def inside(ow0: int, width: int) -> bool:  # every tap of its first and last columns (so of all)
        return c.copy_pad or all(len(static_taps(ow, c.W, c.KW, c.sw, c.dw, c.left)) == c.KW
                                 for ow in (ow0, ow0 + width - 1))

    full = c.OW // T
    middle = [i for i in range(full) if inside(i * T, T)]  # contiguous
    lo, hi = (middle[0], middle[-1] + 1) if middle else (full, full)
    for i in [*range(lo), *range(hi, full)]:
        emit_tile(rb, T, str(i * T), str(i), edge=i * T)
    if hi - lo == 1:
        emit_tile(rb, T, str(lo * T), str(lo))
    elif hi - lo > 1:
        with f.loop(hi, start=lo) as tw:
            emit_tile(rb, T, f.mul(tw, T), tw)
    if c.OW % T:
        ow0 = full * T
        emit_tile(rb, c.OW % T, str(ow0), str(full), edge=None if inside(ow0, c.OW % T) else ow0)


def emit_tile(rb: RowBlock, width: int, ow0: str, index: str, edge: int | None = None) -> None:
    """One register tile: load its accumulators, reduce, store (partial sums or the epilogue)."""
    c, f = rb.c, rb.f
    acc = {}
    for r in range(rb.rows):
        for t in range(width):
            for k, (_, w) in enumerate(c.chunks):
                key = (r, t, k)
                if key not in rb.slots:
                    rb.slots[key] = f.slot(vty(w))
                acc[key] = rb.slots[key]
    obase = f.affine(("%n", c.OCB * c.OH * c.OW * c.ocb), ("%ob", c.OH * c.OW * c.ocb), ("%oh0", c.out_row),
                     (ow0, c.out_col))
    tile = Tile(width, ow0, index, edge, acc, obase)
    if rb.mode == "all":
        _start_accumulators(rb, tile)
        _reduce(rb, tile)
        _store_with_epilogue(rb, tile)
        return
    # One batch of the reduction: the first starts from the bias, the others from the partial
    # sums; the last applies the epilogue, the others store partial sums. Decided at run time
    # (one function for every batch, not one per kind): the per-tile branches cost nothing
    # measurable (ResNet-50, DenseNet-121 end to end: 1.000x, 1.001x) and the kernel compiles in
    # 45 ms, not 80 (session 21).
    f.branch(f.op("icmp eq i64 %icg0, 0"), lambda: _start_accumulators(rb, tile), lambda: _load_partial_sums(rb, tile))
    _reduce(rb, tile)
    f.branch(f.op(f"icmp eq i64 %icg1, {rb.red.blocks}"), lambda: _store_with_epilogue(rb, tile),
             lambda: _store_partial_sums(rb, tile))


def _output_at(rb: RowBlock, tile: Tile, r: int, t: int, k: int) -> str:
    """The output offset of chunk ``k`` of pixel ``t`` in row ``r`` of a tile."""
    c = rb.c
    return rb.f.add(tile.obase, r * c.out_row + t * c.out_col + c.chunks[k][0])


def _load_partial_sums(rb: RowBlock, tile: Tile) -> None:
    """Accumulators start at the partial sums of the batches before."""
    c, f = rb.c, rb.f
    for (r, t, k), s in tile.acc.items():
        w = c.chunks[k][1]
        f.store(vty(w), f.load(vty(w), f.gep(rb.out, _output_at(rb, tile, r, t, k))), s)


def _start_accumulators(rb: RowBlock, tile: Tile) -> None:
    """Accumulators of a reduction's first batch start at the bias (saves one add per output
    vector) or zero."""
    c, f = rb.c, rb.f
    init = {}
    for k, (off, w) in enumerate(c.chunks):
        if rb.bias is None:
            init[k] = "zeroinitializer"
        else:
            init[k] = f.load(vty(w), f.gep(rb.bias, f.affine(("%ob", c.ocb), const=off)))
    for (r, t, k), s in tile.acc.items():
        f.store(vty(c.chunks[k][1]), init[k], s)


def _reduce(rb: RowBlock, tile: Tile) -> None:
    """The reduction loops: the group's reduction blocks (this batch's), kernel rows (this row's),
    then ``ic_block, kw unrolled`` or ``kw, ic_block`` as ``unroll_kw`` says."""
    c, f = rb.c, rb.f
    first, end = ("0", rb.red.blocks) if c.batches == 1 else ("%icg0", "%icg1")
    half = rb.rows * tile.width * c.icb
    if c.prologue:
        _prologue(rb, tile, first, f.mul(f.op(f"and i64 {first}, 1"), half))
    with (maybe_loop(f, rb.red.blocks) if c.batches == 1 else f.loop(end, start=first)) as icg:
        with (maybe_loop(f, c.KH) if rb.kh_hi == c.KH else f.loop(rb.kh_hi, start=rb.kh_lo)) as kh:
            if c.prologue:
                # Transform the next block into the other half while this one is reduced, so
                # the broadcasts read pixels stored a whole block of FMAs ago, not ones whose
                # 64-byte stores are still in flight. Three of DenseNet's 1x1 convs, alone, against
                # no prologue: 1.08-1.11x the time with one buffer, 1.02-1.08x with two (separate runs).
                nxt = f.add(icg, 1)
                last = f.op(f"icmp slt i64 {nxt}, {end}")
                _prologue(rb, tile, f.op(f"select i1 {last}, i64 {nxt}, i64 {icg}"),
                          f.mul(f.op(f"and i64 {nxt}, 1"), half))
                rb.pre_at = f.mul(f.op(f"and i64 {icg}, 1"), half)
            if c.config.unroll_kw or tile.edge is not None:  # edge tiles: kw static, to drop taps
                with maybe_loop(f, c.icr) as ic:
                    for kw in c.kw_order:
                        _fma_step(rb, tile, icg, kh, kw, ic)
            else:
                with maybe_loop(f, c.KW) as kw:
                    with maybe_loop(f, c.icr) as ic:
                        _fma_step(rb, tile, icg, kh, kw, ic)


def _fma_step(rb: RowBlock, tile: Tile, icg: str, kh: str, kw: int | str, ic: str) -> None:
    """One trip of the innermost loop: input channel ``ic`` of block ``icg`` at tap
    ``(kh, kw)`` into every accumulator of the tile (taps in the padding left out)."""
    c, f = rb.c, rb.f
    taps = [t for t in range(tile.width)
            if tile.edge is None or kw in static_taps(tile.edge + t, c.W, c.KW, c.sw, c.dw, c.left)]
    # Every trip is a prefetch slot, even one whose taps all fall in the padding. Unrolled kw
    # is not part of the step (once per ic, at the first tap emitted); a static kw of an edge
    # tile with kw looped elsewhere is.
    if c.pf_per_step and (isinstance(kw, str) or not c.config.unroll_kw or kw == c.kw_order[0]):
        _prefetch_weights(rb, tile, icg, kh, kw, ic)
    if not taps:
        return
    cb = f.op(f"add nsw i64 {rb.icb_start}, {icg}") if rb.icb_start != "0" else icg
    kwv = [(kw, c.icr * c.ocb)] if isinstance(kw, str) else []
    kwc = kw * c.icr * c.ocb if isinstance(kw, int) else 0
    wbase = f.affine(("%ob", rb.red.slice_floats), (icg, c.KH * c.KW * c.icr * c.ocb),
                     (kh, c.KW * c.icr * c.ocb), *kwv, (ic, c.ocb), const=kwc)
    kwv = [(kw, c.dw * c.in_col)] if isinstance(kw, str) else []
    kwc = kw * c.dw * c.in_col if isinstance(kw, int) else 0
    dbase = f.affine(("%n", rb.red.image_floats), (cb, c.Hs * c.Ws * c.icb), ("%oh0", c.sh * c.in_row),
                     (kh, c.dh * c.in_row), (tile.ow0, c.sw * c.in_col), *kwv, (ic, 1),
                     *([(rb.lane_start, 1)] if rb.lane_start != "0" else []), const=kwc + c.origin)
    if rb.pre is not None:
        dbase = ic
    _fma_tile(rb, tile, [(r, t) for r in range(rb.rows) for t in taps], wbase, dbase)


def _prologue(rb: RowBlock, tile: Tile, icg: str, at: str) -> None:
    """The tile's input pixels of channel block ``icg``, transformed (``act_in(x * scale_in +
    shift_in)``), into the stack buffer from offset ``at``, which the FMAs then broadcast from
    (1x1 convs only)."""
    c, f = rb.c, rb.f
    chunks = vector_chunks(c.icb, c.lanes)
    channel = [f.affine((icg, c.icb), const=off) for off, _ in chunks]
    scale = [f.load(vty(w), f.gep(rb.scale_in, a)) for a, (_, w) in zip(channel, chunks)]
    shift = [f.load(vty(w), f.gep(rb.shift_in, a)) for a, (_, w) in zip(channel, chunks)]
    base = f.affine(("%n", rb.red.image_floats), (icg, c.Hs * c.Ws * c.icb), ("%oh0", c.sh * c.in_row),
                    (tile.ow0, c.sw * c.in_col))
    for r in range(rb.rows):
        for t in range(tile.width):
            pixel = r * c.sh * c.in_row + t * c.sw * c.in_col
            for k, (off, w) in enumerate(chunks):
                x = f.load(vty(w), f.gep(rb.data, f.add(base, pixel + off)))
                y = epilogue(f, rb.intr, rb.intr.call(f, "fma", w, x, scale[k], shift[k]), w, None,
                             c.prologue_activation)
                f.store(vty(w), y, f.gep(rb.pre, f.add(at, (r * tile.width + t) * c.icb + off)))


def _prefetch_weights(rb: RowBlock, tile: Tile, icg: str, kh: str, kw: int | str, ic: str) -> None:
    """This step's share of the next weight slice (one step = one trip of the innermost loop)."""
    c, f = rb.c, rb.f
    ici = [(ic, 1)] if c.config.unroll_kw else [(kw, c.icr), (ic, 1)]
    step = f.affine(("%j0", 1), (tile.index, rb.red.tile_steps), (icg, c.KH * c.steps_ic),
                    (kh, c.steps_ic), *ici)
    for q in range(c.pf_per_step):
        line = f.op(f"mul nsw i64 {step}, {c.pf_per_step}")
        line = f.add(line, q)
        line = f.op(f"lshr i64 {f.mul(line, '%pfs')}, 32")
        small = f.op(f"icmp slt i64 {line}, {rb.red.last_line}")
        line = f.op(f"select i1 {small}, i64 {line}, i64 {rb.red.last_line}")
        addr = f.gep("%pf", f.mul(line, 64), "i8")
        f.emit(f"call void @llvm.prefetch.p0(ptr {addr}, i32 0, i32 2, i32 1)")


def _fma_tile(rb: RowBlock, tile: Tile, pix: list[tuple[int, int]], wbase: str, dbase: str) -> None:
    """The FMAs of one step over the tile's pixels ``pix`` (row, column): a tile with more
    vectors than pixels holds all its broadcasts and one weight vector at a time; otherwise
    all its weights and one broadcast (fewer live registers either way)."""
    c, f = rb.c, rb.f
    widths = sorted({w for _, w in c.chunks})

    def broadcasts(r: int, t: int) -> dict[int, str]:
        if rb.pre is not None:  # dbase is the channel within the block (1x1 convs)
            x = f.load("float", f.gep(rb.pre, f.add(f.add(rb.pre_at, dbase) if rb.pre_at != "0" else dbase,
                                                    (r * tile.width + t) * c.icb)))
        else:
            x = f.load("float", f.gep(rb.data, f.add(dbase, r * c.sh * c.in_row + t * c.sw * c.in_col)))
        return {w: splat(f, x, w) for w in widths}

    def weights(k: int) -> str:
        off, w = c.chunks[k]
        return f.load(vty(w), f.gep(rb.weight, f.add(wbase, off) if off else wbase))

    def fma(r: int, t: int, k: int, x: str, wk: str) -> None:
        w, s = c.chunks[k][1], tile.acc[(r, t, k)]
        f.store(vty(w), rb.intr.call(f, "fma", w, x, wk, f.load(vty(w), s)), s)

    if len(c.chunks) > len(pix):
        xs = {p: broadcasts(*p) for p in pix}
        for k, (_, w) in enumerate(c.chunks):
            wk = weights(k)
            for r, t in pix:
                fma(r, t, k, xs[(r, t)][w], wk)
    else:
        wv = [weights(k) for k in range(len(c.chunks))]
        for r, t in pix:
            xs = broadcasts(r, t)
            for k, (_, w) in enumerate(c.chunks):
                fma(r, t, k, xs[w], wv[k])


def _store_partial_sums(rb: RowBlock, tile: Tile) -> None:
    f, chunks = rb.f, rb.c.chunks
    for (r, t, k), s in tile.acc.items():
        w = chunks[k][1]
        f.store(vty(w), f.load(vty(w), s), f.gep(rb.out, _output_at(rb, tile, r, t, k)))


def _store_with_epilogue(rb: RowBlock, tile: Tile) -> None:
    """``out = act(acc + residual)``, and with ``affine_out`` also
    ``out2 = act2(out * scale2 + shift2)``."""
    c, f, intr = rb.c, rb.f, rb.intr
    affine = {}
    if c.affine_out:
        for k, (off, w) in enumerate(c.chunks):
            at = f.affine(("%ob", c.ocb), const=off)
            affine[k] = (f.load(vty(w), f.gep(rb.scale2, at)), f.load(vty(w), f.gep(rb.shift2, at)))
    for (r, t, k), s in tile.acc.items():
        w = c.chunks[k][1]
        idx = _output_at(rb, tile, r, t, k)
        rp = f.gep(rb.residual, idx) if rb.residual is not None else None
        value = epilogue(f, intr, f.load(vty(w), s), w, rp, c.activation)
        f.store(vty(w), value, f.gep(rb.out, idx))
        if c.affine_out:
            second = intr.call(f, "fma", w, value, *affine[k])
            f.store(vty(w), epilogue(f, intr, second, w, None, c.affine_activation), f.gep(rb.out2, idx))


def work_item_ir(c: ConvContext) -> str:
    """``@name_item(args, item, next)``: rows ``[hb*G, hb*G+G)`` of output channel block ``ob``,
    batch by batch. Its thread's next item is known; when that one starts a new channel
    block, its weight slice is prefetched into L2 meanwhile (in a network the weights come
    from memory; rows first, every next item is another block's)."""
    f = IRFunction(f"define internal void @{c.name}_item(ptr %args, i64 %item, i64 %next) nounwind", md_base=50_000)
    dims = [c.N, c.NB, c.OCB] if c.rows_first else [c.N, c.OCB, c.NB]
    if c.rows_first:
        f.emit("; items rows first (takes_rows_first)")

    def split(item: str) -> tuple[str, str, str]:  # (n, channel block, row block)
        n, a, b = decompose(f, item, dims)
        return (n, b, a) if c.rows_first else (n, a, b)

    n, ob, hb = split("%item")
    weight = arg_ptr(f, 1)
    red = reduction(f, c)
    if c.pf_per_step:
        has = f.op("icmp sge i64 %next, 0")
        nxt = f.op(f"select i1 {has}, i64 %next, i64 %item")
        nob = split(nxt)[1]
        new = f.op(f"icmp ne i64 {nob}, {ob}")
        target = f.op(f"select i1 {new}, i64 {nob}, i64 {ob}")
        pf = f.gep(weight, f.mul(target, red.slice_floats))
    else:
        pf = weight
    oh_begin = f.mul(hb, c.G)
    if c.OH % c.G or c.G % c.ohb:  # the last block is shorter
        rows = f.op(f"sub nsw i64 {c.OH}, {oh_begin}")
        small = f.op(f"icmp slt i64 {rows}, {c.G}")
        rows = f.op(f"select i1 {small}, i64 {rows}, i64 {c.G}")
        nfull = f.op(f"udiv i64 {rows}, {c.ohb}") if c.ohb > 1 else rows
    else:
        rows, nfull = str(c.G), str(c.G // c.ohb)
    scale = _prefetch_scales(f, c, hb)
    item = _Item(n, ob, pf, scale, oh_begin, rows, nfull, red.row_tile_steps)
    if c.batches == 1:
        _call_row_blocks(f, c, item, "all", 0, red.blocks)
    else:  # the reduction in batches whose weights stay in L1 across all the item's rows
        batches = c.batches if not c.runtime else f.op(f"udiv i64 {f.add(red.blocks, c.batch_icg - 1)}, {c.batch_icg}")
        with f.loop(batches) as b:
            icg0 = f.mul(b, c.batch_icg)
            icg1 = f.add(icg0, c.batch_icg)
            if c.runtime or c.ICgB % c.batch_icg:  # the last batch may be shorter
                short = f.op(f"icmp slt i64 {icg1}, {red.blocks}")
                icg1 = f.op(f"select i1 {short}, i64 {icg1}, i64 {red.blocks}")
            _call_row_blocks(f, c, item, "batch", icg0, icg1)
    f.emit("ret void")
    return f.text()


def _prefetch_scales(f: IRFunction, c: ConvContext, hb: str) -> str:
    """The work item's :func:`prefetch_scale` (the plane's last row block, which may be shorter,
    has its own). A constant even where the reduction's size is read at run time
    (:func:`runtime_channels`): lines and steps both grow with the input channels, so convs that
    differ only in them mostly share it (where a block's weights are whole cache lines, always),
    and a constant lets LLVM step the prefetch's line by an add in the innermost loop, where a
    scale worked out at run time cost a multiply a trip: 1.028x the time over 54 pointwise
    kernels of the bench models' plans."""
    if c.pf_scale_last == c.pf_scale:
        return str(c.pf_scale)
    last = f.op(f"icmp eq i64 {hb}, {c.NB - 1}")
    return f.op(f"select i1 {last}, i64 {c.pf_scale_last}, i64 {c.pf_scale}")


@dataclass(frozen=True)
class _Item:
    """A work item's values in :func:`work_item_ir`."""

    n: str
    ob: str  # output channel block
    pf: str  # the weight slice to prefetch
    pfs: str  # its prefetch_scale for this item's steps
    oh_begin: str  # first output row
    rows: str  # its rows
    nfull: str  # its full register tile rows
    row_tile_steps: int | str  # innermost trips per row of tiles (Reduction.row_tile_steps)


def _call_row_blocks(f: IRFunction, c: ConvContext, item: _Item, mode: str, icg0, icg1) -> None:
    """The item's rows (full tiles, then the shorter tail) over reduction blocks [icg0, icg1)."""
    call = f"ptr {item.pf}, i64 {item.pfs}, i64 {{j0}}, i64 {icg0}, i64 {icg1})"
    with f.loop(item.nfull) as rt:
        oh0 = f.op(f"add nsw i64 {item.oh_begin}, {f.mul(rt, c.ohb)}")
        j0 = f.mul(rt, item.row_tile_steps)
        f.emit(f"call void @{c.name}_rows{c.ohb}_{mode}(ptr %args, i64 {item.n}, i64 {item.ob}, i64 {oh0}, "
               + call.format(j0=j0))
    if c.OH % c.ohb:
        done = f.mul(item.nfull, c.ohb)
        tail = f.op(f"icmp slt i64 {done}, {item.rows}")
        tail_label, end_label = f.fresh("rowtail"), f.fresh("end")
        f.emit(f"br i1 {tail}, label %{tail_label}, label %{end_label}")
        f.label(tail_label)
        oh0 = f.op(f"add nsw i64 {item.oh_begin}, {done}")
        j0 = f.mul(item.nfull, item.row_tile_steps)
        f.emit(f"call void @{c.name}_rows{c.OH % c.ohb}_{mode}(ptr %args, i64 {item.n}, i64 {item.ob}, i64 {oh0}, "
               + call.format(j0=j0))
        f.emit(f"br label %{end_label}")
        f.label(end_label)


def conv2d_arg_shapes(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                      affine_out: bool = False, prologue: bool = False) -> dict[str, tuple[int, ...] | None]:
    """The arrays a conv2d kernel takes, by name (:data:`ARGS`; None: not taken), in NCHWc."""
    N, IC, H, W = workload.data_shape
    OC, ICg, KH, KW = workload.kernel_shape
    icb, ocb, icr = config.ic_bn, config.oc_bn, reduction_block(workload, config)
    out = (N, OC // ocb, workload.out_height, workload.out_width, ocb)
    return dict(data=(N, IC // icb, H, W, icb), weight=(OC // ocb, ICg // icr, KH, KW, icr, ocb), out=out,
                bias=(OC,) if bias else None, residual=out if residual else None, out2=out if affine_out else None,
                scale2=(OC,) if affine_out else None, shift2=(OC,) if affine_out else None,
                scale_in=(IC,) if prologue else None, shift_in=(IC,) if prologue else None)


class Conv2DKernel(Kernel):
    """A compiled NCHWc conv2d: ``k(data, weight, out, bias=None, residual=None)``."""

    def __init__(self, workload: Conv2DWorkload, config: Conv2DConfig, bias: bool, residual: bool,
                 activation: str | tuple | None, affine_out: bool = False,
                 affine_activation: str | tuple | None = None, prologue: bool = False,
                 prologue_activation: str | tuple | None = None, rows_first: bool = False, search: bool = False):
        N, IC, H, W = workload.data_shape
        OH, OW = workload.out_height, workload.out_width
        icb = config.ic_bn
        self.workload, self.config, self.activation = workload, config, activation_key(activation)
        shapes = conv2d_arg_shapes(workload, config, bias=bias, residual=residual, affine_out=affine_out,
                                   prologue=prologue)
        self.input_shape, self.weight_shape, self.output_shape = shapes["data"], shapes["weight"], shapes["out"]
        self.bias_shape = (workload.out_channels,)
        ir = conv2d_ir(workload, config, bias=bias, residual=residual, activation=activation,
                       affine_out=affine_out, affine_activation=affine_activation, prologue=prologue,
                       prologue_activation=prologue_activation, rows_first=rows_first)
        self.rows_first = takes_rows_first(workload, config, rows_first, prologue=prologue)  # as generated
        t, l, b, r = workload.padding
        scratch = []
        if pads_by_copy(workload, config):
            scratch = [np.zeros((N, IC // icb, H + t + b, W + l + r, icb), np.float32)]
        elif compact_input(workload) is not None:
            scratch = [np.zeros((N, IC // icb, OH, OW, icb), np.float32)]
        super().__init__(compile_ir(search_build(ir) if search else ir), "conv2d", shapes,
                         scratch or [np.zeros(1, np.float32)], conv2d_scalars(workload, config))


def supported(workload: Conv2DWorkload, config: Conv2DConfig) -> bool:
    """Whether :func:`build_conv2d` can build ``config`` for ``workload`` (the templates' own checks).

    >>> dw = Conv2DWorkload((1, 8, 6, 6), (8, 1, 3, 3), padding=(1, 1, 1, 1), groups=8)
    >>> supported(dw, Conv2DConfig(4, 4, 2)), supported(dw, Conv2DConfig(2, 4, 2))
    (True, False)
    >>> import dataclasses
    >>> [supported(dataclasses.replace(w, out_dtype="int32"), Conv2DConfig(4, 4, 2))
    ...  for w in (dw, Conv2DWorkload((1, 8, 6, 6), (8, 8, 3, 3)))]  # float32 only, depthwise or not
    [False, False]
    """
    check = check_depthwise if runs_lanewise(workload, config) else _check
    try:
        check(workload, config, None)
    except ValueError:
        return False
    return True


def depthwise_epilogue(workload: Conv2DWorkload, config: Conv2DConfig, epilogue: dict) -> dict | None:
    """The depthwise kernel's arguments of :func:`build_conv2d`'s ``epilogue`` if ``workload``
    runs on it with ``config`` (:func:`kernels.depthwise.runs_lanewise`; None: the conv2d
    kernel); ValueError for what it has not (a second output, an input prologue)."""
    if not runs_lanewise(workload, config):
        return None
    if epilogue.get("affine_out") or epilogue.get("prologue"):
        raise ValueError("depthwise kernels have no affine second output or input prologue")
    return {k: epilogue[k] for k in ("bias", "residual", "activation", "row_means") if k in epilogue}


def kernel_ir(workload: Conv2DWorkload, config: Conv2DConfig, search: bool = False, **epilogue) -> str:
    """The IR text :func:`build_conv2d` compiles for these arguments (so that it can be
    compiled ahead, :func:`kernels.jit.compile_ahead`); raises ValueError where it would."""
    depthwise = depthwise_epilogue(workload, config, epilogue)
    if depthwise is not None:
        return depthwise_ir(workload, config, **depthwise)
    text = conv2d_ir(workload, config, **epilogue)
    return search_build(text) if search else text


@kernel_cache()
def build_conv2d(workload: Conv2DWorkload, config: Conv2DConfig, *, bias: bool = False, residual: bool = False,
                 activation: str | tuple | None = None, affine_out: bool = False,
                 affine_activation: str | tuple | None = None, prologue: bool = False,
                 prologue_activation: str | tuple | None = None, rows_first: bool = False,
                 row_means: bool = False, search: bool = False) -> Conv2DKernel:
    """Generate, compile and cache the conv2d kernel for a workload, schedule and epilogue
    (activations: a name or a ``(name, *params)`` tuple, hashable for the cache);
    ``rows_first``: see :func:`takes_rows_first`; ``search``: compiled as the search's
    kernels are (:func:`kernels.jit.search_build`; not depthwise ones).

    The weight is packed in blocks of :func:`reduction_block` input channels (``ic_bn`` but
    where a grouped conv's input block holds several groups): ``pack_weight(w,
    reduction_block(workload, config), config.oc_bn)``, the kernel's ``weight_shape``.

    Depthwise workloads, and grouped ones whose one block holds whole groups
    (:func:`kernels.depthwise.runs_lanewise`), are dispatched to
    :func:`kernels.depthwise.build_depthwise` (which has no affine second output, and alone
    writes ``row_means``).
    """
    depthwise = depthwise_epilogue(workload, config, dict(bias=bias, residual=residual, activation=activation,
                                                    affine_out=affine_out, prologue=prologue, row_means=row_means))
    if depthwise is not None:
        return build_depthwise(workload, config, **depthwise)
    if row_means:
        raise ValueError(f"{NO_ROW_MEANS}: {workload}, {config}")
    return Conv2DKernel(workload, config, bias, residual, activation, affine_out, affine_activation, prologue,
                        prologue_activation, rows_first, search)
