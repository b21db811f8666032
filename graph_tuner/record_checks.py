"""The checks a tuning record's values pass before anything else sees them.

A log is user input: hand-edited, truncated, pasted from a web page, or written by
another tool. Whatever reaches the solver must be a measurement (a finite, positive
time) of a schedule that fits its layer (blocks that divide the channels), so each
value is checked here, where it enters. A failed check raises :class:`BadRecord`
saying what is wrong; :mod:`graph_tuner.records` adds the file and line.

>>> measured_costs([1e-3, 2e-3])
(0.001, 0.002)
>>> measured_costs([0.0])
Traceback (most recent call last):
...
graph_tuner.record_checks.BadRecord: cost 0.0 is not a measured time (not finite and positive)
>>> transform_key([1, 4, 56, 56, 16], "NCHW16c", "NCHW8c")
((1, 64, 56, 56), 16, 8)
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from kernels import config_space
from kernels.workload import Conv2DWorkload

MAX_DIM = 2**31 - 1  # TVM's shapes are int32; beyond that a "dimension" is garbage
# A block has no leading zero: "NCHW016c" would be read back as NCHW16c, another string.
_LAYOUT = re.compile(r"NCHW(?:([1-9][0-9]{0,8})c)?")
# What an x86 conv record's entity must give: knob -> what it splits (for messages).
X86_SPLITS = {"tile_ic": "input channels", "tile_oc": "output channels",
              "tile_ow": "output columns"}


class BadRecord(ValueError):
    """A JSON value that is not part of a usable AutoTVM record; the message says why."""


def show(value: Any, width: int = 40) -> str:
    """``repr`` cut to ``width`` characters: a message quotes a bad value on one short line
    (repr escapes a newline inside a JSON string; a megabyte of nesting is cut).

    >>> show("a\\nb"), show(list(range(30)), 12)
    ("'a\\\\nb'", '[0, 1, 2,...')
    """
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def is_list(value: Any) -> bool:
    """JSON arrays are lists; records built in Python may use tuples."""
    return isinstance(value, (list, tuple))


def integer(value: Any, what: str, low: int = 1, high: int | None = MAX_DIM) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]``.

    >>> integer(3, "stride"), integer(0, "padding", low=0)
    (3, 0)
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{what} {show(value)} is not an integer")
    if value < low or (high is not None and value > high):
        bound = f"at least {low}" if value < low else f"at most {high}"
        raise BadRecord(f"{what} {show(value)} must be {bound}")
    return value


def measured_costs(costs: Any) -> tuple[float, ...]:
    """The costs of a successful measurement: a non-empty list of finite, positive seconds.

    A zero, negative, NaN or infinite time is not a measurement (JSON's ``NaN`` and
    ``Infinity`` tokens parse): the solver would pick the kernel as free, or fail far
    from the cause. TVM marks a failed measurement with ``error_no != 0``, not a time.
    """
    if not is_list(costs) or not costs:
        raise BadRecord("no measured costs (result[0] must be a non-empty list of seconds)")
    out = []
    for c in costs:
        if isinstance(c, bool) or not isinstance(c, (int, float)):
            raise BadRecord(f"cost {show(c)} is not a number of seconds")
        t = float(c) if abs(c) < 1e300 else math.inf  # a huge int would overflow float()
        if not (math.isfinite(t) and t > 0):
            raise BadRecord(f"cost {show(c)} is not a measured time (not finite and positive)")
        out.append(t)
    return tuple(out)


def tensor_shape(arg: Any, what: str, ranks: tuple[int, ...] = (4,)) -> tuple[int, ...]:
    """The shape of a ``["TENSOR", shape, dtype]`` argument, each dimension a positive int."""
    if not (is_list(arg) and len(arg) == 3 and arg[0] == "TENSOR" and is_list(arg[1])
            and isinstance(arg[2], str)):
        raise BadRecord(f'{what} {show(arg)} is not a ["TENSOR", shape, dtype] argument')
    if len(arg[1]) not in ranks:
        wanted = " or ".join(f"{r}-d" for r in ranks)
        raise BadRecord(f"{what} shape {show(arg[1])} is not {wanted}")
    return tuple(integer(x, f"{what} dimension") for x in arg[1])


def pair(value: Any, what: str, low: int = 1) -> tuple[int, int]:
    """An int or a pair of ints, as a pair (strides, dilation).

    >>> pair(2, "strides"), pair([1, 2], "dilation")
    ((2, 2), (1, 2))
    """
    if not is_list(value):
        v = integer(value, what, low)
        return v, v
    if len(value) == 2:
        return integer(value[0], what, low), integer(value[1], what, low)
    raise BadRecord(f"{what} {show(value)} is not an int or a pair")


def padding4(padding: Any) -> tuple[int, int, int, int]:
    """TVM padding forms -> ``(top, left, bottom, right)``, each a non-negative int.

    >>> padding4(1), padding4([1, 2]), padding4([0, 1, 2, 3])
    ((1, 1, 1, 1), (1, 2, 1, 2), (0, 1, 2, 3))
    """
    if not is_list(padding):
        p = integer(padding, "padding", low=0)
        return p, p, p, p
    pads = [integer(x, "padding", low=0) for x in padding]
    if len(pads) == 2:
        return pads[0], pads[1], pads[0], pads[1]
    if len(pads) == 4:
        return pads[0], pads[1], pads[2], pads[3]
    raise BadRecord(f"padding {show(padding)} is not an int, [pad_h, pad_w] or "
                    "[top, left, bottom, right]")


def entity_dict(entity: Any) -> dict[str, Any]:
    """A config entity ``[[name, kind, value], ...]`` as ``{name: value}``."""
    if not is_list(entity):
        raise BadRecord(f"config entity {show(entity)} is not a list of [name, kind, value]")
    names: set[str] = set()
    for item in entity:
        if not (is_list(item) and len(item) == 3 and all(isinstance(x, str) for x in item[:2])):
            raise BadRecord(f"config entity item {show(item)} is not [name, kind, value]")
        if item[0] in names:
            raise BadRecord(f"config entity names {show(item[0])} twice")
        names.add(item[0])
    return config_space.entity_dict(entity)


def x86_schedule(entity: Mapping[str, Any], workload: Conv2DWorkload) -> None:
    """An x86 conv record's knobs fit its workload: ``tile_ic``/``tile_oc`` split the
    input/output channels (their inner factor is the layout's block), ``tile_ow`` the
    output width, ``unroll_kw`` is a bool and ``tile_oh`` a row count.

    >>> w = Conv2DWorkload((1, 64, 56, 56), (32, 64, 1, 1))
    >>> x86_schedule({"tile_ic": [-1, 16], "tile_oc": [-1, 32], "tile_ow": [-1, 8]}, w)
    >>> x86_schedule({"tile_ic": [-1, 24], "tile_oc": [-1, 32], "tile_ow": [-1, 8]}, w)
    Traceback (most recent call last):
    ...
    graph_tuner.record_checks.BadRecord: tile_ic block 24 does not divide the 64 input channels
    """
    lengths = {"tile_ic": workload.in_channels, "tile_oc": workload.out_channels,
               "tile_ow": workload.out_width}
    for knob, what in X86_SPLITS.items():
        if knob not in entity:
            raise BadRecord(f"no {knob} in the config entity (an x86 conv record needs "
                            f"{', '.join(X86_SPLITS)})")
        split, length = entity[knob], lengths[knob]
        if not (is_list(split) and len(split) == 2):
            raise BadRecord(f"{knob} {show(split)} is not a two-way split [outer, inner]")
        outer, inner = split
        inner = integer(inner, f"{knob} inner factor", high=None)
        if knob != "tile_ow" and length % inner:
            raise BadRecord(f"{knob} block {inner} does not divide the {length} {what}")
        if inner > length:
            raise BadRecord(f"{knob} block {inner} is wider than the {length} {what}")
        if outer != -1 and integer(outer, f"{knob} outer factor", high=None) * inner != length:
            raise BadRecord(f"{knob} split {show(split)} does not multiply to the {length} {what}")
    if "unroll_kw" in entity and not isinstance(entity["unroll_kw"], bool):
        raise BadRecord(f"unroll_kw {show(entity['unroll_kw'])} is not true or false")
    if "tile_oh" in entity:
        integer(entity["tile_oh"], "tile_oh", high=workload.out_height)


def layout_block(layout: Any) -> int:
    """The channel block of ``NCHW`` (1) / ``NCHW{x}c``.

    >>> layout_block("NCHW"), layout_block("NCHW16c"), layout_block("NCHW1c")
    (1, 16, 1)
    """
    m = _LAYOUT.fullmatch(layout) if isinstance(layout, str) else None
    if not m:
        raise BadRecord(f"layout {show(layout)} is not NCHW or NCHW<n>c")
    return int(m.group(1) or 1)


def transform_key(shape: Any, src_layout: Any, dst_layout: Any) -> tuple[tuple[int, ...], int, int]:
    """``(NCHW shape, src block, dst block)`` of a ``layout_transform`` record.

    The shape is the tensor's NCHW shape, or its 5-d shape in the source layout (TVM's
    form: the last dimension is the source block). Both blocks divide the channels.
    """
    src, dst = layout_block(src_layout), layout_block(dst_layout)
    dims = tuple(integer(x, "layout_transform dimension") for x in shape)
    if len(dims) == 5:
        if dims[4] != src:
            raise BadRecord(f"5-d shape {list(dims)} is not in its source layout "
                            f"{show(src_layout)} (its last dimension is the source block)")
        dims = (dims[0], dims[1] * dims[4], dims[2], dims[3])
    elif len(dims) != 4:
        raise BadRecord(f"layout_transform shape {show(list(dims))} is not 4-d NCHW "
                        "or 5-d NCHW<n>c")
    for layout, block in ((src_layout, src), (dst_layout, dst)):
        if dims[1] % block:
            raise BadRecord(f"{layout} block {block} does not divide the {dims[1]} channels "
                            f"of {list(dims)}")
    return dims, src, dst
