"""The non-conv ops on preallocated buffers, in plain NCHW or blocked NCHW[b]c.

Each ``make_*`` takes the input and output buffers (their layout is their shape: a
4-d tensor in block ``b > 1`` is ``(N, C/b, H, W, b)``, in plain layout
``(N, C, H, W)``) and returns a zero-argument callable that computes into the output
with numpy ``out=`` calls: nothing is allocated while the program runs. Spatial axes
are 2 and 3 in both layouts, so padding code is the same for both;
per-channel vectors are reshaped to the layout (:func:`channel_view`). Pooling,
elementwise chains, resize, transposed convs and channel slices run as generated kernels
(:mod:`kernels.pooling`, :mod:`kernels.elementwise`, :mod:`kernels.resize`,
:mod:`kernels.conv_transpose`, :mod:`kernels.channel_slice`);
:func:`make_elementwise` is left for a binary op broadcasting otherwise than per channel.

>>> x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2) - 4
>>> y = np.empty_like(x)
>>> make_elementwise([("affine", np.full(2, 2, np.float32), np.ones(2, np.float32)), ("relu",)], [x], y)()
>>> y.ravel().tolist()
[0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 5.0, 7.0]
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Fn = Callable[[], None]


def channel_view(v: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Per-channel vector ``v`` shaped to broadcast against tensor ``like`` in its layout.

    >>> channel_view(np.arange(4.0), np.zeros((1, 2, 3, 3, 2))).shape
    (1, 2, 1, 1, 2)
    """
    v = np.ascontiguousarray(v, np.float32)
    if like.ndim == 5:  # NCHW[b]c: channel c = chunk * b + lane
        return v.reshape(1, -1, 1, 1, like.shape[4])
    return v.reshape((1, -1) + (1,) * (like.ndim - 2))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (0.5 * (1 + np.tanh(0.5 * x))).astype(np.float32)


# The other activations of kernels.activations, for the rare chain it cannot run (allocating).
_ACTIVATIONS = {
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "hard_swish": lambda x: x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1),
    "hard_sigmoid": lambda x, alpha, beta: np.clip(x * np.float32(alpha) + np.float32(beta), 0, 1),
    "leaky_relu": lambda x, alpha: np.where(x < 0, x * np.float32(alpha), x),
}


def make_elementwise(program: list[tuple], inputs: list[np.ndarray], out: np.ndarray) -> Fn:
    """Run a chain of elementwise ops into ``out``, starting from ``inputs``.

    ``program`` items: ``("add",)`` / ``("multiply",)`` (first item only, two inputs),
    ``("affine", scale, shift)`` per channel, ``("relu",)``, ``("relu6",)``, ``("clip", lo, hi)``, the other
    activations of :data:`kernels.activations.ACTIVATIONS` (``("leaky_relu", alpha)``, ...).
    """
    calls: list[Fn] = []
    src = inputs[0]
    for i, (kind, *args) in enumerate(program):
        if kind in ("add", "multiply"):
            assert i == 0, "a binary op can only start a chain"
            f = np.add if kind == "add" else np.multiply
            a, b = inputs
            calls.append(lambda f=f, a=a, b=b: f(a, b, out=out))
        elif kind == "affine":
            scale, shift = channel_view(args[0], out), channel_view(args[1], out)
            calls.append(lambda s=src, scale=scale: np.multiply(s, scale, out=out))
            calls.append(lambda shift=shift: np.add(out, shift, out=out))
        elif kind == "relu":
            calls.append(lambda s=src: np.maximum(s, np.float32(0), out=out))
        elif kind in ("clip", "relu6"):
            lo, hi = (np.float32(v) for v in (args if kind == "clip" else (0, 6)))
            calls.append(lambda s=src, lo=lo, hi=hi: np.clip(s, lo, hi, out=out))
        elif kind in _ACTIVATIONS:
            calls.append(lambda s=src, f=_ACTIVATIONS[kind], args=args: np.copyto(out, f(s, *args)))
        else:
            raise ValueError(f"unknown elementwise op {kind!r}")
        src = out  # later ops work in place
    if len(calls) == 1:
        return calls[0]

    def run(calls=tuple(calls)) -> None:
        for c in calls:
            c()
    return run


def make_concat(xs: list[np.ndarray], out: np.ndarray, axis: int) -> Fn:
    """Concatenate along NCHW ``axis``: axis 1 (channels) is the chunk axis in a blocked layout,
    valid when the block divides every input's channels (the plan's join block does)."""
    axis = axis % 4
    return lambda: np.concatenate(xs, axis=axis, out=out)


def make_pad(x: np.ndarray, out: np.ndarray, pad_width, value: float) -> Fn:
    """Constant padding over the NCHW axes. The border is rewritten every run: the output
    buffer is shared with other tensors once this one is dead."""
    if x.ndim == 5 and any(pad_width[1]):
        raise ValueError("channel padding in a blocked layout is not supported")
    interior = out[tuple(slice(a, a + n) for (a, _), n in zip(pad_width, x.shape))]
    fill = np.float32(value)

    def run() -> None:
        out.fill(fill)
        np.copyto(interior, x)
    return run


def make_copy_reshape(x: np.ndarray, out: np.ndarray) -> Fn:
    """flatten / reshape of a plain tensor (row-major order kept)."""
    src = x.reshape(out.shape)
    return lambda: np.copyto(out, src)


def make_transpose(x: np.ndarray, out: np.ndarray, perm) -> Fn:
    src = x.transpose(perm)
    return lambda: np.copyto(out, src)


def make_softmax(x: np.ndarray, out: np.ndarray, axis: int) -> Fn:
    shape = list(x.shape)
    shape[axis] = 1
    tmp = np.empty(shape, np.float32)

    def run() -> None:
        np.max(x, axis=axis, keepdims=True, out=tmp)
        np.subtract(x, tmp, out=out)
        # Below about -87, exp gives float32 subnormals, which run ~100x slower (ResNet's 1000
        # logits: 100 us instead of 7). e^-80 (over a sum of up to ~1500 terms) stays normal
        # and is 0 to float32 next to the largest term, 1.
        np.maximum(out, np.float32(-80.0), out=out)
        np.exp(out, out=out)
        np.sum(out, axis=axis, keepdims=True, out=tmp)
        np.divide(out, tmp, out=out)
    return run
