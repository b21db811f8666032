"""A conv2d schedule: the knobs of AutoTVM's x86 ``conv2d_NCHWc`` template.

Records are interchangeable with AutoTVM's: ``tile_ic``/``tile_oc``/``tile_ow`` are
splits whose inner factor is what the kernel uses; 1x1 kernels have ``tile_oh``,
others ``unroll_kw``. The input layout is ``NCHW{ic_bn}c``, the output ``NCHW{oc_bn}c``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Conv2DConfig:
    """Schedule of one NCHWc conv2d kernel.

    >>> Conv2DConfig(ic_bn=32, oc_bn=16, ow_bn=2, unroll_kw=True).ic_bn
    32
    """

    ic_bn: int  # tile_ic inner factor: input channel block
    oc_bn: int  # tile_oc inner factor: output channel block
    ow_bn: int  # tile_ow inner factor: output columns per register tile
    unroll_kw: bool = False  # unroll the kernel-width loop (kernels larger than 1x1)
    oh_bn: int = 1  # tile_oh: output rows per register tile (1x1 kernels)
