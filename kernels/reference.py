"""numpy references for checking generated kernels (never call the kernels themselves).

>>> import numpy as np
>>> x = np.ones((1, 2, 3, 3), np.float32); w = np.ones((4, 2, 3, 3), np.float32)
>>> conv2d_nchw(x, w, padding=(1, 1, 1, 1))[0, 0]
array([[ 8., 12.,  8.],
       [12., 18., 12.],
       [ 8., 12.,  8.]])
"""
from __future__ import annotations

import numpy as np


def conv2d_nchw(data: np.ndarray, weight: np.ndarray, *, strides=(1, 1), padding=(0, 0, 0, 0),
                dilation=(1, 1), groups: int = 1, bias: np.ndarray | None = None,
                residual: np.ndarray | None = None, activation: str | None = None) -> np.ndarray:
    """Direct conv2d in float64: NCHW data, OIHW weight (I = C/groups), padding [t, l, b, r].

    Sums over (kh, kw) of strided-window tensor contractions; then + bias (per
    output channel), + residual (NCHW), then ``activation`` "relu" or "relu6".
    """
    x = np.asarray(data, np.float64)
    w = np.asarray(weight, np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    t, l, b, r = padding
    sh, sw = strides
    dh, dw = dilation
    x = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    oh = (h + t + b - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + l + r - (kw - 1) * dw - 1) // sw + 1
    xg = x.reshape(n, groups, cg, h + t + b, wd + l + r)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, oh, ow))
    for i in range(kh):
        for j in range(kw):
            window = xg[:, :, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            out += np.einsum("ngchw,goc->ngohw", window, wg[:, :, :, i, j])
    out = out.reshape(n, o, oh, ow)
    if bias is not None:
        out += np.asarray(bias, np.float64).reshape(1, o, 1, 1)
    if residual is not None:
        out += residual
    if activation == "relu":
        out = np.maximum(out, 0)
    elif activation == "relu6":
        out = np.clip(out, 0, 6)
    elif activation is not None:
        raise ValueError(f"unknown activation {activation!r}")
    return out
