"""x86 kernels generated with llvmlite: conv2d in NCHW[x]c, layout transforms, timing, tuning.

Knows nothing of solvers or of the graph tuner.
"""
from kernels.config import Conv2DConfig
from kernels.workload import Conv2DWorkload

__all__ = ["Conv2DConfig", "Conv2DWorkload"]
