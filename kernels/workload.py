"""The conv2d workload: what a kernel computes, independent of how (its schedule).

This is AutoTVM's notion of a workload: two conv layers with equal workloads can
share tuning records. Padding is 4-sided in TVM's order [top, left, bottom, right].
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Conv2DWorkload:
    """A float32 NCHW conv2d.

    >>> w = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    >>> w.out_shape, round(w.flops / 1e6, 1)
    ((1, 64, 56, 56), 231.2)
    """

    data_shape: tuple[int, int, int, int]  # N, C, H, W
    kernel_shape: tuple[int, int, int, int]  # O, I // groups, KH, KW
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    layout: str = "NCHW"
    out_dtype: str = "float32"

    def __post_init__(self) -> None:
        # Normalise lists (from JSON) to tuples so workloads hash and compare.
        for name in ("data_shape", "kernel_shape", "strides", "padding", "dilation"):
            object.__setattr__(self, name, tuple(int(x) for x in getattr(self, name)))
        object.__setattr__(self, "groups", int(self.groups))
        if len(self.data_shape) != 4 or len(self.kernel_shape) != 4:
            raise ValueError(f"conv2d needs 4-d data and kernel shapes, got {self.data_shape}, {self.kernel_shape}")
        if len(self.padding) != 4:
            raise ValueError(f"padding must be [top, left, bottom, right], got {self.padding}")
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"groups={self.groups} does not divide channels {self.in_channels}->{self.out_channels}")
        if self.kernel_shape[1] * self.groups != self.in_channels:
            raise ValueError(f"kernel {self.kernel_shape} with groups={self.groups} does not fit {self.in_channels} input channels")

    @property
    def batch(self) -> int:
        return self.data_shape[0]

    @property
    def in_channels(self) -> int:
        return self.data_shape[1]

    @property
    def out_channels(self) -> int:
        return self.kernel_shape[0]

    @property
    def kernel_size(self) -> tuple[int, int]:
        return self.kernel_shape[2], self.kernel_shape[3]

    @property
    def out_height(self) -> int:
        h, kh = self.data_shape[2], self.kernel_shape[2]
        top, _, bottom, _ = self.padding
        return (h + top + bottom - (kh - 1) * self.dilation[0] - 1) // self.strides[0] + 1

    @property
    def out_width(self) -> int:
        w, kw = self.data_shape[3], self.kernel_shape[3]
        _, left, _, right = self.padding
        return (w + left + right - (kw - 1) * self.dilation[1] - 1) // self.strides[1] + 1

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, self.out_height, self.out_width)

    @property
    def is_depthwise(self) -> bool:
        """Each group has one input channel (TVM's depthwise templates apply)."""
        return self.groups > 1 and self.groups == self.in_channels

    @property
    def is_1x1(self) -> bool:
        return self.kernel_size == (1, 1)

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two floating-point operations."""
        n, oc, oh, ow = self.out_shape
        return 2 * n * oc * oh * ow * self.kernel_shape[1] * self.kernel_shape[2] * self.kernel_shape[3]
