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

from kernels.activations import activation_spec


def activate(x: np.ndarray, activation) -> np.ndarray:
    """An activation of :data:`kernels.activations.ACTIVATIONS` (a name or ``(name, *params)``,
    None for none) in float64.

    >>> activate(np.array([-2.0, 0.0, 8.0]), ("leaky_relu", 0.5)).tolist(), activate(np.zeros(1), "silu").tolist()
    ([-1.0, 0.0, 8.0], [0.0])
    """
    x = np.asarray(x, np.float64)
    spec = activation_spec(activation)
    kind, *p = spec or (None,)
    if kind in ("sigmoid", "silu"):
        with np.errstate(over="ignore"):  # exp(1e4) = inf: sigmoid 0, as it should be
            sigmoid = 1 / (1 + np.exp(-x))
        return sigmoid if kind == "sigmoid" else x * sigmoid
    if kind in ("relu", "relu6", "clip"):
        lo, hi = p if kind == "clip" else (0.0, 6.0 if kind == "relu6" else np.inf)
        return np.clip(x, lo, hi)
    if kind in ("hard_sigmoid", "hard_swish"):
        alpha, beta = p if kind == "hard_sigmoid" else (1 / 6, 0.5)
        gate = np.clip(alpha * x + beta, 0, 1)
        return gate if kind == "hard_sigmoid" else x * gate
    if kind == "leaky_relu":
        return np.where(x < 0, p[0] * x, x)
    return x


def conv2d_nchw(data: np.ndarray, weight: np.ndarray, *, strides=(1, 1), padding=(0, 0, 0, 0),
                dilation=(1, 1), groups: int = 1, bias: np.ndarray | None = None,
                residual: np.ndarray | None = None, activation=None) -> np.ndarray:
    """Direct conv2d in float64: NCHW data, OIHW weight (I = C/groups), padding [t, l, b, r].

    Sums over (kh, kw) of strided-window tensor contractions; then + bias (per
    output channel), + residual (NCHW), then ``activation`` (see :func:`activate`).
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
    return activate(out, activation)
