"""An independent numpy executor of a :class:`~graph_tuner.model.Model`: plain NCHW, float64.

The yardstick for the compiled program (:mod:`graph_tuner.executor.compile`): it
shares no code with it or with :mod:`kernels` (no blocking, no folding, no fusion,
its own conv), so an agreement between the two means something.

>>> from graph_tuner.builder import GraphBuilder
>>> b = GraphBuilder("t")
>>> y = b.relu(b.conv(b.input((1, 1, 3, 3)), 1, 3, padding=1, name="c"))
>>> m = b.build(b.global_avg_pool(y))
>>> x = np.ones((1, 1, 3, 3), np.float32)
>>> run_reference(m, {"c": {"weight": np.ones((1, 1, 3, 3), np.float32)}}, x)[0].ravel()
array([5.44444444])
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from graph_tuner.model import Model, Op

__all__ = ["run_reference", "conv2d", "conv_transpose", "pool2d", "resize"]


def conv2d(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
           groups: int = 1) -> np.ndarray:
    """NCHW conv, OIHW weight (I = C/groups), padding [top, left, bottom, right], float64."""
    t, l, b, r = padding
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (t, b), (l, r)))
    o, cg, kh, kw = w.shape
    dh, dw = dilation
    win = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::strides[0], ::strides[1], ::dh, ::dw]  # (N, C, OH, OW, KH, KW)
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = np.asarray(w, np.float64).reshape(groups, o // groups, cg, kh, kw)
    out = [np.tensordot(win[:, g], wg[g], axes=([1, 4, 5], [1, 2, 3])) for g in range(groups)]  # (N, OH, OW, O/g)
    return np.concatenate(out, axis=3).transpose(0, 3, 1, 2)


def conv_transpose(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0), output_padding=(0, 0),
                   groups: int = 1) -> np.ndarray:
    """NCHW transposed conv (dilation 1), weight (C_in, C_out/groups, kH, kW), float64: each input
    pixel adds ``x * w[:, :, ky, kx]`` at ``(iy * stride + ky, ix * stride + kx)`` of the full
    output, which is then cropped by ``padding`` [top, left, bottom, right] (``output_padding``
    rows and columns extend its end).

    >>> conv_transpose(np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2)), (2, 2))[0, 0].tolist()
    [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    """
    n, c, h, wd = x.shape
    cin, cog, kh, kw = w.shape
    (sh, sw), (t, l, b, r), (oph, opw) = strides, padding, output_padding
    full = np.zeros((n, groups * cog, (h - 1) * sh + kh + oph, (wd - 1) * sw + kw + opw))
    xg = np.asarray(x, np.float64).reshape(n, groups, c // groups, h, wd)
    wg = np.asarray(w, np.float64).reshape(groups, cin // groups, cog, kh, kw)
    for i in range(kh):
        for j in range(kw):
            part = np.einsum("ngchw,gco->ngohw", xg, wg[:, :, :, i, j]).reshape(n, groups * cog, h, wd)
            full[:, :, i: i + (h - 1) * sh + 1: sh, j: j + (wd - 1) * sw + 1: sw] += part
    oh, ow = (h - 1) * sh + kh - t - b + oph, (wd - 1) * sw + kw - l - r + opw
    return full[:, :, t: t + oh, l: l + ow]


def pool2d(x: np.ndarray, kind: str, pool_size, strides, padding, out_hw, count_include_pad=False) -> np.ndarray:
    """Max or average pooling; windows reaching past the padded input (ceil mode) are clipped.

    The average divides by the window's overlap with the input, or with the padded
    input when ``count_include_pad`` (PyTorch's rule).
    """
    t, l, b, r = padding
    (kh, kw), (sh, sw), (oh, ow) = pool_size, strides, out_hw
    n, c, h, w = x.shape
    # Extend the bottom/right so every window fits (ceil mode), with "nothing" there.
    eb = max((oh - 1) * sh + kh - (h + t + b), 0)
    er = max((ow - 1) * sw + kw - (w + l + r), 0)
    widths = ((0, 0), (0, 0), (t, b + eb), (l, r + er))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(np.asarray(x, np.float64), widths, constant_values=fill)
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    if kind == "max":
        return win.max(axis=(4, 5))
    inside = np.zeros((h + t + b + eb, w + l + r + er))
    if count_include_pad:
        inside[: h + t + b, : w + l + r] = 1
    else:
        inside[t: t + h, l: l + w] = 1
    count = sliding_window_view(inside, (kh, kw))[::sh, ::sw][:oh, :ow].sum(axis=(2, 3))
    return win.sum(axis=(4, 5)) / count


def _source_coords(out_len: int, in_len: int, scale: float, coord: str) -> np.ndarray:
    """ONNX Resize: the input coordinate each output index samples."""
    x = np.arange(out_len, dtype=np.float64)
    if coord == "asymmetric":
        return x / scale
    if coord == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    if coord == "pytorch_half_pixel" and out_len == 1:
        return np.zeros(1) - 0.5
    return (x + 0.5) / scale - 0.5  # half_pixel


def resize(x: np.ndarray, mode: str, size, scales, coord: str, nearest_mode: str) -> np.ndarray:
    """ONNX Resize (nearest / linear) over the last two axes of an NCHW tensor, float64."""
    for axis, (out_len, scale) in enumerate(zip(size, scales), start=2):
        src = _source_coords(out_len, x.shape[axis], scale, coord)
        last = x.shape[axis] - 1
        if mode == "nearest":
            pick = {"floor": np.floor, "ceil": np.ceil, "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                    "round_prefer_floor": lambda v: np.ceil(v - 0.5)}[nearest_mode](src)
            x = np.take(x, np.clip(pick, 0, last).astype(int), axis=axis)
        else:
            lo = np.floor(src)
            frac = (src - lo).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
            a = np.take(x, np.clip(lo, 0, last).astype(int), axis=axis)
            b = np.take(x, np.clip(lo + 1, 0, last).astype(int), axis=axis)
            x = a * (1 - frac) + b * frac
    return x


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * x))  # no overflow warnings


def _channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (ndim - 2))


def _eval(op: Op, xs: list[np.ndarray], p: dict) -> np.ndarray:
    a, k = op.attrs, op.kind
    if k == "conv2d":
        y = conv2d(xs[0], p["weight"], a["strides"], a["padding"], a["dilation"], a["groups"])
        return y + _channel(p["bias"], 4) if "bias" in p else y
    if k == "conv_transpose":
        y = conv_transpose(xs[0], p["weight"], a["strides"], a["padding"], a["output_padding"],
                           a["groups"])
        return y + _channel(p["bias"], 4) if "bias" in p else y
    if k == "dense":
        y = xs[0] @ np.asarray(p["weight"], np.float64).T
        return y + p["bias"] if "bias" in p else y
    if k == "batch_norm":
        scale = p["gamma"] / np.sqrt(np.asarray(p["var"], np.float64) + a["epsilon"])
        return (xs[0] - _channel(p["mean"], xs[0].ndim)) * _channel(scale, xs[0].ndim) + _channel(p["beta"], xs[0].ndim)
    if k == "bias_add":
        return xs[0] + _channel(p["bias"], xs[0].ndim)
    if k == "relu":
        return np.maximum(xs[0], 0)
    if k == "clip":
        return np.clip(xs[0], a["min"], a["max"])
    if k == "sigmoid":
        return _sigmoid(xs[0])
    if k == "silu":
        return xs[0] * _sigmoid(xs[0])
    if k == "hard_sigmoid":
        return np.clip(a["alpha"] * xs[0] + a["beta"], 0, 1)
    if k == "hard_swish":
        return xs[0] * np.clip(xs[0] / 6 + 0.5, 0, 1)
    if k == "leaky_relu":
        return np.where(xs[0] < 0, a["alpha"] * xs[0], xs[0])
    if k == "resize":
        return resize(xs[0], a["mode"], a["size"], a["scales"], a["coord"], a["nearest_mode"])
    if k == "slice":
        return xs[0][:, a["begin"]:a["end"]]
    if k == "add":
        return xs[0] + xs[1]
    if k == "multiply":
        return xs[0] * xs[1]
    if k == "concat":
        return np.concatenate(xs, axis=a["axis"])
    if k in ("max_pool", "avg_pool"):
        return pool2d(xs[0], k[:3], a["pool_size"], a["strides"], a["padding"], op.shape[2:],
                      a.get("count_include_pad", False))
    if k == "global_avg_pool":
        return xs[0].mean(axis=(2, 3), keepdims=True)
    if k in ("flatten", "reshape"):
        return xs[0].reshape(op.shape)
    if k == "transpose":
        return xs[0].transpose(a["perm"])
    if k == "pad":
        return np.pad(xs[0], a["pad_width"], constant_values=a.get("value", 0.0))
    if k == "softmax":
        e = np.exp(xs[0] - xs[0].max(axis=a["axis"], keepdims=True))
        return e / e.sum(axis=a["axis"], keepdims=True)
    raise NotImplementedError(f"reference: op kind {k!r}")


def run_reference(model: Model, params: dict[str, dict[str, np.ndarray]], *inputs: np.ndarray,
                  keep: bool = False) -> list[np.ndarray] | dict[str, np.ndarray]:
    """Run ``model`` on ``inputs`` (one per model input, in order); the outputs in order.

    ``keep=True`` returns every op's output by name instead (to find where two runs part).
    """
    if len(inputs) != len(model.inputs):
        raise ValueError(f"{model.name} takes {len(model.inputs)} inputs, got {len(inputs)}")
    values: dict[str, np.ndarray] = {}
    for name, x in zip(model.inputs, inputs):
        values[name] = np.asarray(x, np.float64)
    for op in model.ops:
        if op.kind != "input":
            values[op.name] = _eval(op, [values[i] for i in op.inputs], params.get(op.name, {}))
            assert values[op.name].shape == tuple(op.shape), (op.name, values[op.name].shape, op.shape)
    return values if keep else [values[o] for o in model.outputs]
