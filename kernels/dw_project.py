"""A depthwise conv and the 1x1 conv that reads its output, as one kernel, row band by row band.

In an inverted residual block (MobileNet-v2) a depthwise conv writes a wide tensor (6x the
block's channels) that only the next 1x1 conv, the projection, reads. Run as two kernels, the
depthwise conv writes all of it, then the projection reads it back, each core reading rows
the other wrote. Here a work item is one of the projection's rows-first row blocks
(:func:`kernels.conv2d.takes_rows_first`): the item first runs the depthwise conv's rows of
that block for every channel block (the projection reads every channel of a pixel), then
the projection's items of those rows for every output channel block. The rows the
projection reads were just written by its own thread and are still in its L1/L2; the
depthwise output keeps its buffer and layout, so results are the two kernels' exactly.

The two kernels' item functions are the ones :mod:`kernels.depthwise` and
:mod:`kernels.conv2d` generate, called from one driver: nothing is computed differently.

>>> import numpy as np
>>> from kernels import Conv2DConfig, Conv2DWorkload
>>> dw = Conv2DWorkload((1, 32, 12, 12), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32)
>>> pw = Conv2DWorkload((1, 32, 12, 12), (16, 32, 1, 1))
>>> k = build_dw_project(dw, Conv2DConfig(16, 16, 4), {}, pw, Conv2DConfig(16, 8, 4), {})
>>> k.dw.arg_shapes["out"] == k.pw.arg_shapes["data"]  # the depthwise output is the 1x1 conv's input
True
"""
from __future__ import annotations

import ctypes

import numpy as np

from kernels.config import Conv2DConfig
from kernels.conv2d import (conv2d_arg_shapes, conv2d_ir, conv2d_scalars, conv_context, depthwise_epilogue,
                            takes_rows_first)
from kernels.depthwise import depthwise_arg_shapes, depthwise_ir
from kernels.ir import arg_ptr, declare_once, decompose
from kernels.jit import BoundKernel, IRFunction, Kernel, compile_ir, host_cpu, kernel_cache
from kernels.threads import num_threads, parallel_entry_ir
from kernels.workload import Conv2DWorkload

__all__ = ["DwProjectKernel", "build_dw_project", "fusable"]


def fusable(dw: Conv2DWorkload, dw_config: Conv2DConfig, pw: Conv2DWorkload, pw_config: Conv2DConfig,
            threads: int | None = None) -> bool:
    """Whether a depthwise conv (channel multiplier 1) and a 1x1 conv reading its output in the
    depthwise conv's block can run as one kernel: the 1x1 conv must take rows-first items.

    >>> from kernels import Conv2DConfig, Conv2DWorkload
    >>> dw = Conv2DWorkload((1, 32, 12, 12), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32)
    >>> pw = Conv2DWorkload((1, 32, 12, 12), (16, 32, 1, 1))
    >>> fusable(dw, Conv2DConfig(16, 16, 4), pw, Conv2DConfig(16, 8, 4), threads=2)
    True
    >>> fusable(dw, Conv2DConfig(16, 16, 4), pw, Conv2DConfig(8, 8, 4), threads=2)  # another block
    False
    """
    n, c, oh, ow = dw.data_shape[0], dw.out_channels, dw.out_height, dw.out_width
    return (dw.is_depthwise and dw.in_channels == c and pw.data_shape == (n, c, oh, ow) and pw.groups == 1
            and pw_config.ic_bn == dw_config.oc_bn and takes_rows_first(pw, pw_config, True, threads))


def dw_project_ir(dw: Conv2DWorkload, dw_config: Conv2DConfig, dw_epilogue: dict, pw: Conv2DWorkload,
                  pw_config: Conv2DConfig, pw_epilogue: dict, name: str = "dwpw") -> str:
    """IR text of ``void @name(ptr args, i32 nthreads)``; ``args`` holds two pointers, the
    depthwise kernel's argument block and the 1x1 conv's."""
    if not fusable(dw, dw_config, pw, pw_config):
        raise ValueError(f"cannot fuse {dw} ({dw_config}) with {pw} ({pw_config})")
    lanes = host_cpu().lanes
    text = depthwise_ir(dw, dw_config, name=f"{name}_dw", lanes=lanes, **depthwise_epilogue(dw, dw_config, dw_epilogue))
    text += conv2d_ir(pw, pw_config, name=f"{name}_pw", lanes=lanes, rows_first=True, **pw_epilogue)
    c = conv_context(pw, pw_config, name=f"{name}_pw", lanes=lanes, rows_first=True, bias=False, residual=False,
                     activation=None, affine_out=False, affine_activation=None)
    N, CB, OH = dw.data_shape[0], dw.out_channels // dw_config.oc_bn, dw.out_height
    joined = OH // c.OH  # rows of the plane per row of the kernel's (joined) workload
    span = c.G * joined  # the plane's rows per row block
    f = IRFunction(f"define internal void @{name}_item(ptr %args, i64 %item) nounwind", md_base=400_000)
    dw_args, pw_args = arg_ptr(f, 0), arg_ptr(f, 1)
    n, hb = decompose(f, "%item", [N, c.NB])
    r0 = f.mul(hb, span)
    r1 = f.op(f"call i64 @llvm.smin.i64(i64 {f.add(r0, span)}, i64 {OH})")
    with f.loop(CB) as cb:
        plane = f.mul(f.affine((n, CB), (cb, 1)), OH)
        with f.loop(r1, start=r0) as oh:
            f.emit(f"call void @{name}_dw_item(ptr {dw_args}, i64 {f.op(f'add nsw i64 {plane}, {oh}')})")
    first = f.mul("%item", c.OCB)
    with f.loop(c.OCB) as ob:
        j = f.op(f"add nsw i64 {first}, {ob}")
        # Told the next item is j + 1 even after the band's last: the next band starts with
        # channel block 0, whose weights the last item then prefetches (only the block counts).
        f.emit(f"call void @{name}_pw_item(ptr {pw_args}, i64 {j}, i64 {f.add(j, 1)})")
    f.emit("ret void")
    return declare_once(text + f.text() + parallel_entry_ir(name, [(f"{name}_item", N * c.NB)]))


class DwProjectKernel:
    """The fused kernel (epilogues: :func:`kernels.conv2d.build_conv2d`'s keyword arguments);
    ``bind(dw_arrays, pw_arrays)`` takes each part's arrays by name, as the
    standalone kernels' ``bind`` does (:func:`kernels.depthwise.depthwise_arg_shapes`,
    :func:`kernels.conv2d.conv2d_arg_shapes`), and returns one call."""

    def __init__(self, dw: Conv2DWorkload, dw_config: Conv2DConfig, dw_epilogue: dict, pw: Conv2DWorkload,
                 pw_config: Conv2DConfig, pw_epilogue: dict):
        self._module = compile_ir(dw_project_ir(dw, dw_config, dw_epilogue, pw, pw_config, pw_epilogue))
        flags = {k: bool(pw_epilogue.get(k)) for k in ("bias", "residual", "affine_out", "prologue")}
        # Each part's entry point checks and packs its own arguments (the conv's ends with its unused scratch slot).
        self.dw = Kernel(self._module, "dwpw_dw", depthwise_arg_shapes(
            dw, dw_config, bias=bool(dw_epilogue.get("bias")), residual=bool(dw_epilogue.get("residual"))))
        self.pw = Kernel(self._module, "dwpw_pw", conv2d_arg_shapes(pw, pw_config, **flags),
                         [np.zeros(1, np.float32)], conv2d_scalars(pw, pw_config))
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(self._module["dwpw"])

    def bind(self, dw_arrays: dict, pw_arrays: dict, nthreads: int | None = None) -> BoundKernel:
        a, b = self.dw.bind(**dw_arrays, nthreads=nthreads), self.pw.bind(**pw_arrays, nthreads=nthreads)
        packed = (ctypes.c_void_p * 2)(a.args, b.args)
        return BoundKernel(self._fn, self._module["dwpw"], ctypes.addressof(packed), a.nthreads, (self, a, b, packed))


def _key(epilogue: dict) -> tuple:
    return tuple(sorted(epilogue.items()))


@kernel_cache()
def _build(dw, dw_config, dw_key, pw, pw_config, pw_key, threads: int) -> DwProjectKernel:
    # ``threads`` only keys the cache: the 1x1 conv's row blocks depend on the thread count.
    return DwProjectKernel(dw, dw_config, dict(dw_key), pw, pw_config, dict(pw_key))


def build_dw_project(dw: Conv2DWorkload, dw_config: Conv2DConfig, dw_epilogue: dict, pw: Conv2DWorkload,
                     pw_config: Conv2DConfig, pw_epilogue: dict) -> DwProjectKernel:
    """Generate, compile and cache the fused kernel (epilogues: the keyword arguments of
    :func:`kernels.depthwise.build_depthwise` and :func:`kernels.conv2d.build_conv2d`)."""
    return _build(dw, dw_config, _key(dw_epilogue), pw, pw_config, _key(pw_epilogue), num_threads())
