"""Output-shape inference for the model ops (float32, NCHW for 4-d tensors).

One function, :func:`infer_shape`, over plain data: an op kind, its attrs and its
input shapes. The zoo builder and the ONNX importer both use it, so every op in a
:class:`~graph_tuner.model.Model` has a known static shape.

>>> infer_shape("conv2d", {"strides": (2, 2), "padding": (3, 3, 3, 3), "dilation": (1, 1),
...                        "groups": 1, "channels": 64, "kernel_size": (7, 7)}, [(1, 3, 224, 224)])
(1, 64, 112, 112)
>>> infer_shape("max_pool", {"pool_size": (3, 3), "strides": (2, 2), "padding": (0, 0, 0, 0),
...                          "ceil_mode": True}, [(1, 96, 109, 109)])
(1, 96, 54, 54)
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

Shape = tuple[int, ...]


def conv_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                  dilation: int = 1, ceil_mode: bool = False) -> int:
    """Output length of a conv/pool window sliding over one spatial axis.

    With ``ceil_mode`` a last partial window counts, unless it would start in the
    end padding (the rule of PyTorch, ONNX and TVM).

    >>> conv_out_size(112, 3, 2, 1, 1), conv_out_size(55, 3, 2, 0, 0, ceil_mode=True)
    (56, 27)
    """
    span = size + pad_begin + pad_end - (kernel - 1) * dilation - 1
    if span < 0:
        raise ValueError(f"window {kernel} (dilation {dilation}) larger than padded input {size + pad_begin + pad_end}")
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _spatial(kind: str, attrs: dict, shape: Shape, kernel: Sequence[int], dilation: Sequence[int],
             ceil_mode: bool) -> tuple[int, int]:
    if len(shape) != 4:
        raise ValueError(f"{kind} needs a 4-d NCHW input, got {shape}")
    top, left, bottom, right = attrs["padding"]
    sh, sw = attrs["strides"]
    return (conv_out_size(shape[2], kernel[0], sh, top, bottom, dilation[0], ceil_mode),
            conv_out_size(shape[3], kernel[1], sw, left, right, dilation[1], ceil_mode))


def _conv2d(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    if x[1] % attrs["groups"] or attrs["channels"] % attrs["groups"]:
        raise ValueError(f"groups={attrs['groups']} does not divide channels {x[1]}->{attrs['channels']}")
    return (x[0], attrs["channels"]) + _spatial("conv2d", attrs, x, attrs["kernel_size"], attrs["dilation"], False)


def _conv_transpose(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    if len(x) != 4:
        raise ValueError(f"conv_transpose needs a 4-d NCHW input, got {x}")
    g, cout = attrs["groups"], attrs["channels"]
    if g < 1 or x[1] % g or cout % g:
        raise ValueError(f"groups={g} does not divide channels {x[1]}->{cout}")
    top, left, bottom, right = attrs["padding"]
    (kh, kw), (sh, sw), (oph, opw) = attrs["kernel_size"], attrs["strides"], attrs["output_padding"]
    if min(sh, sw) < 1 or min(top, left, bottom, right, oph, opw) < 0 or oph >= sh or opw >= sw:
        raise ValueError(f"conv_transpose needs strides >= 1, paddings >= 0 and output_padding < strides, got "
                         f"strides {(sh, sw)}, padding {attrs['padding']}, output_padding {(oph, opw)}")
    from kernels.conv_transpose import out_size  # the kernel's rule: one definition

    out = out_size(x[2], kh, sh, top, bottom, oph), out_size(x[3], kw, sw, left, right, opw)
    if min(out) < 1:
        raise ValueError(f"conv_transpose of {x} with kernel {(kh, kw)}, padding {attrs['padding']} has no output")
    return (x[0], cout) + out


def _pool(kind: str):
    def infer(attrs: dict, shapes: list[Shape]) -> Shape:
        (x,) = shapes
        return x[:2] + _spatial(kind, attrs, x, attrs["pool_size"], (1, 1), attrs.get("ceil_mode", False))
    return infer


def _global_avg_pool(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    if len(x) != 4:
        raise ValueError(f"global_avg_pool needs a 4-d NCHW input, got {x}")
    return x[:2] + (1, 1)


def _resize(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    if len(x) != 4:
        raise ValueError(f"resize needs a 4-d NCHW input, got {x}")
    size = tuple(int(d) for d in attrs["size"])
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"resize to {size}: give a positive output height and width")
    return x[:2] + size


def _slice(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    begin, end = int(attrs["begin"]), int(attrs["end"])
    if len(x) != 4 or attrs.get("axis", 1) != 1:
        raise ValueError(f"only channel slices (axis 1) of a 4-d NCHW tensor are supported, got axis "
                         f"{attrs.get('axis', 1)} of {x}")
    if not 0 <= begin < end <= x[1]:
        raise ValueError(f"channel slice [{begin}, {end}) is empty or outside the {x[1]} channels")
    return (x[0], end - begin) + x[2:]


def _dense(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    if len(x) != 2:
        raise ValueError(f"dense needs a 2-d input (flatten first), got {x}")
    return (x[0], attrs["units"])


def _same(attrs: dict, shapes: list[Shape]) -> Shape:
    return shapes[0]


def _channelwise(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    if len(x) < 2:
        raise ValueError(f"needs a channel axis (axis 1), got shape {x}")
    return x


def _broadcast(attrs: dict, shapes: list[Shape]) -> Shape:
    return tuple(int(d) for d in np.broadcast_shapes(*shapes))


def _concat(attrs: dict, shapes: list[Shape]) -> Shape:
    axis = attrs["axis"] % len(shapes[0])
    rest = {s[:axis] + s[axis + 1:] for s in shapes}
    if len(rest) != 1 or len({len(s) for s in shapes}) != 1:
        raise ValueError(f"concat along axis {axis} of mismatched shapes {shapes}")
    return shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:]


def _flatten(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    axis = attrs.get("axis", 1) % (len(x) + 1)
    return (math.prod(x[:axis]), math.prod(x[axis:]))


def _reshape(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    shape = tuple(int(d) for d in attrs["shape"])
    if math.prod(shape) != math.prod(x) or min(shape, default=1) < 1:
        raise ValueError(f"cannot reshape {x} to {shape}")
    return shape


def _transpose(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(len(x))):
        raise ValueError(f"perm {perm} is not a permutation of the {len(x)} axes of {x}")
    return tuple(x[p] for p in perm)


def _pad(attrs: dict, shapes: list[Shape]) -> Shape:
    (x,) = shapes
    widths = attrs["pad_width"]
    if len(widths) != len(x):
        raise ValueError(f"pad_width {widths} does not match rank of {x}")
    return tuple(d + before + after for d, (before, after) in zip(x, widths))


_INFER = {
    "conv2d": _conv2d,
    "conv_transpose": _conv_transpose,
    "dense": _dense,
    "batch_norm": _channelwise,
    "bias_add": _channelwise,
    "relu": _same,
    "clip": _same,
    "sigmoid": _same,
    "silu": _same,
    "hard_sigmoid": _same,
    "hard_swish": _same,
    "leaky_relu": _same,
    "resize": _resize,
    "slice": _slice,
    "softmax": _same,
    "add": _broadcast,
    "multiply": _broadcast,
    "concat": _concat,
    "max_pool": _pool("max_pool"),
    "avg_pool": _pool("avg_pool"),
    "global_avg_pool": _global_avg_pool,
    "flatten": _flatten,
    "reshape": _reshape,
    "transpose": _transpose,
    "pad": _pad,
}

# Inputs each kind takes (None: one or more).
ARITY = {"add": 2, "multiply": 2, "concat": None}


def infer_shape(kind: str, attrs: dict, input_shapes: Sequence[Sequence[int]]) -> Shape:
    """The output shape of op ``kind`` with ``attrs`` on inputs of ``input_shapes``.

    Raises ``ValueError`` (with the reason) when the inputs do not fit the op.

    >>> infer_shape("concat", {"axis": 1}, [(1, 64, 55, 55), (1, 64, 55, 55)])
    (1, 128, 55, 55)
    """
    shapes = [tuple(int(d) for d in s) for s in input_shapes]
    if kind not in _INFER:
        raise ValueError(f"unknown op kind {kind!r}")
    arity = ARITY.get(kind, 1)
    if (arity is None and not shapes) or (arity is not None and len(shapes) != arity):
        raise ValueError(f"{kind} takes {arity or 'one or more'} inputs, got {len(shapes)}")
    return tuple(int(d) for d in _INFER[kind](attrs, shapes))
