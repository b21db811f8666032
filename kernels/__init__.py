"""x86 kernels generated with llvmlite: conv2d in NCHW[x]c, layout transforms, timing, tuning.

Knows nothing of solvers or of the graph tuner.
"""
from kernels.config import Conv2DConfig
from kernels.conv2d import build_conv2d
from kernels.depthwise import build_depthwise
from kernels.layout_transform import build_transform
from kernels.packing import from_blocked, pack_depthwise_weight, pack_weight, to_blocked
from kernels.threads import num_threads
from kernels.timing import Timing, measure, random_array
from kernels.workload import Conv2DWorkload

__all__ = [
    "Conv2DConfig", "Conv2DWorkload", "Timing", "build_conv2d", "build_depthwise", "build_transform",
    "from_blocked", "measure", "num_threads", "pack_depthwise_weight", "pack_weight", "random_array", "to_blocked",
]
