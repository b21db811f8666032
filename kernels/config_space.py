"""AutoTVM's x86 conv2d config spaces, index for index.

A config space is a list of knobs; a config is one value per knob; its index is
the mixed-radix number whose FIRST knob varies fastest (AutoTVM's ``ConfigSpace``):
``index = i_ic + n_ic * (i_oc + n_oc * (i_ow + n_ow * i_last))``. Indices are only
meaningful with the exact value order AutoTVM uses, so this module reproduces it:

* ``conv2d_NCHWc`` (``topi/x86/conv2d.py``): ``tile_ic`` = split(in_channels),
  ``tile_oc`` = split(out_channels), ``tile_ow`` = split(out_width, inner <= 64),
  then ``tile_oh`` = knob ``[1, 2]`` (``[1]`` if out_height == 1) for 1x1 kernels,
  else ``unroll_kw`` = knob ``[True, False]``.
* ``depthwise_conv2d_NCHWc`` (``topi/x86/depthwise_conv2d.py``): ``tile_ic``,
  ``tile_oc``, ``tile_ow`` (inner <= 64, divisors only) and ``unroll_kw``.

A two-way split lists inner factors in the order AutoTVM's ``SplitSpace`` builds them:

* ``"factors"``: all divisors, ascending (every ``tile_ic``/``tile_oc``, depthwise
  ``tile_ow``, and ``tile_ow`` of TVM <= 0.6 logs, task ``topi_x86_conv2d_NCHWc``).
* ``"verbose"``: divisors plus powers of two (these leave a tail), in the iteration
  order of the Python set AutoTVM builds them in -- NOT sorted. ``tile_ow`` of
  ``conv2d_NCHWc.x86`` (TVM >= 0.7) uses it; e.g. out_width 112 gives
  ``[32, 1, 2, 64, 4, 7, 8, 14, 16, 56, 28]`` after the <= 64 filter.

Beyond AutoTVM: :func:`tuning_space` appends to ``conv2d_NCHWc.x86``'s space the same
knobs with ``tile_ow`` widths 3..16 it lacks (:func:`extra_tile_space`), at indices from
``len(AutoTVM's space)`` on. AutoTVM's widths are divisors and powers of two: on AVX2 (16
vector registers) output widths 56, 28 and 14 then allow register tiles of at most 8
accumulators (2 vectors x 4), and two FMA pipes of latency 4 need 8 in flight at the
very least. A 2 x 5 tile ran ResNet-18's 3x3 convs 8-13% faster on an AVX2 EPYC
(benchmarks/README.md). Our kernels take any width (a tail tile covers the rest), and so
does TVM's template (its split by ``reg_n`` leaves a guarded tail): TVM applies such a
record by its entity; only its index has no meaning there.

Checked against real logs: every x86 record in the seed logs (TVM 0.6, ``factors``;
the 2018 RFC log, ``factors``, ``[outer, inner]`` entities) and TVM 0.10 records
(``verbose``) round-trip index <-> entity (tests/test_config_space.py).

>>> from kernels.workload import Conv2DWorkload
>>> w = Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), strides=(2, 2), padding=(3, 3, 3, 3))
>>> space = conv2d_space(w, tile_ow_policy="factors")
>>> len(space), space.entity(136)
(252, {'tile_ic': [-1, 1], 'tile_oc': [-1, 32], 'tile_ow': [-1, 1], 'unroll_kw': False})
>>> space.config(136)
Conv2DConfig(ic_bn=1, oc_bn=32, ow_bn=1, unroll_kw=False, oh_bn=1)
>>> conv2d_space(w).index({"tile_ic": [-1, 3], "tile_oc": [-1, 4], "tile_ow": [-1, 64], "unroll_kw": True})
47
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from kernels.config import Conv2DConfig
from kernels.workload import Conv2DWorkload

POLICIES = ("factors", "verbose")
MAX_OW_BLOCK = 64  # AutoTVM's tile_ow filter: inner factor <= 64


def divisors(n: int) -> list[int]:
    """All divisors of ``n``, ascending.

    >>> divisors(112)
    [1, 2, 4, 7, 8, 14, 16, 28, 56, 112]
    """
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return sorted(set(small) | {n // i for i in small})


def split_factors(n: int, policy: str = "factors") -> list[int]:
    """Inner factors of a two-way AutoTVM split of an axis of length ``n``, in index order.

    >>> split_factors(56, "factors")
    [1, 2, 4, 7, 8, 14, 28, 56]
    >>> split_factors(56, "verbose")
    [32, 1, 2, 4, 7, 8, 14, 16, 56, 28]
    """
    if policy == "factors":
        return divisors(n)
    if policy == "verbose":
        pow2s = [2**x for x in range(math.floor(math.log2(n)) + 1)]
        # AutoTVM iterates the union set as CPython orders it; build the same set
        # the same way (left operand from the ascending divisor list) to get that order.
        return list(set(divisors(n)) | set(pow2s))
    raise ValueError(f"unknown split policy {policy!r}; expected one of {POLICIES}")


@dataclass(frozen=True)
class Knob:
    """One knob: a split (``kind="sp"``, values = inner factors) or an option (``"ot"``)."""

    name: str
    kind: str
    values: tuple
    length: int = 0  # the split axis length (outer factor = length // inner); 0 for options

    def __len__(self) -> int:
        return len(self.values)

    def value(self, i: int) -> Any:
        """The record form of value ``i``: ``[-1, inner]`` for splits, the option itself otherwise."""
        v = self.values[i]
        return [-1, v] if self.kind == "sp" else v

    def position(self, value: Any) -> int:
        """Index of a record value: ``[-1, inner]``, ``[outer, inner]``, an inner int, or an option."""
        if self.kind == "sp":
            inner = value[-1] if isinstance(value, (list, tuple)) else value
            if isinstance(value, (list, tuple)):
                if len(value) != 2:
                    raise ValueError(f"{self.name}: expected a two-way split, got {value}")
                if value[0] != -1 and value[0] * value[1] != self.length:
                    raise ValueError(f"{self.name}={value} does not split an axis of {self.length}")
        else:
            inner = value
        for i, v in enumerate(self.values):
            # Options are compared with their type: True == 1 in Python, but not in a knob.
            if v == inner and type(v) is type(inner):
                return i
        raise ValueError(f"{self.name}={value!r} is not in the space {list(self.values)}")


class Space:
    """What every config space offers on top of ``len``, ``entity`` and ``index``."""

    def __len__(self) -> int:
        raise NotImplementedError

    def entity(self, index: int) -> dict[str, Any]:
        raise NotImplementedError

    def index(self, entity: Mapping[str, Any] | Sequence[Sequence]) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[int]:
        """All indices, in order."""
        return iter(range(len(self)))

    @property
    def names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def config_entity(self, config: Conv2DConfig) -> dict[str, Any]:
        """The entity of ``config`` in this space (the inverse of :meth:`config`).

        >>> space = conv2d_space(Conv2DWorkload((1, 64, 56, 56), (64, 64, 1, 1)))
        >>> space.config_entity(Conv2DConfig(ic_bn=16, oc_bn=32, ow_bn=8, oh_bn=2))
        {'tile_ic': [-1, 16], 'tile_oc': [-1, 32], 'tile_ow': [-1, 8], 'tile_oh': 2}
        """
        entity = {"tile_ic": [-1, config.ic_bn], "tile_oc": [-1, config.oc_bn], "tile_ow": [-1, config.ow_bn]}
        if "tile_oh" in self.names:
            entity["tile_oh"] = config.oh_bn
        if "unroll_kw" in self.names:
            entity["unroll_kw"] = config.unroll_kw
        return entity

    def config(self, index_or_entity: int | Mapping[str, Any] | Sequence[Sequence]) -> Conv2DConfig:
        """The kernel schedule (inner factors and options) of a config."""
        if isinstance(index_or_entity, int):
            index_or_entity = self.entity(index_or_entity)
        else:
            self.index(index_or_entity)  # validates it belongs to this space
        return entity_config(index_or_entity)

    def configs(self) -> list[Conv2DConfig]:
        """Every config, by index: ``[self.config(i) for i in self]``."""
        return [self.config(i) for i in self]


class ConfigSpace(Space):
    """A product of knobs with AutoTVM's index math (first knob varies fastest).

    >>> s = ConfigSpace([Knob("a", "ot", (0, 1, 2)), Knob("b", "ot", (True, False))])
    >>> len(s), s.entity(4), s.index({"a": 1, "b": False})
    (6, {'a': 1, 'b': False}, 4)
    """

    def __init__(self, knobs: Sequence[Knob]):
        self.knobs = tuple(knobs)

    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k.name}:{len(k)}" for k in self.knobs)
        return f"ConfigSpace({sizes}; len={len(self)})"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def _positions(self, index: int) -> list[int]:
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} out of range for a space of {len(self)}")
        out = []
        for k in self.knobs:
            index, i = divmod(index, len(k))
            out.append(i)
        return out

    def entity(self, index: int) -> dict[str, Any]:
        """Knob name -> record value (``[-1, inner]`` for splits) of config ``index``."""
        return {k.name: k.value(i) for k, i in zip(self.knobs, self._positions(index))}

    def entity_list(self, index: int) -> list[list]:
        """Config ``index`` in the record's form ``[[name, "sp"|"ot", value], ...]``.

        >>> s = ConfigSpace([Knob("tile_ic", "sp", (1, 3), 3), Knob("unroll_kw", "ot", (True, False))])
        >>> s.entity_list(1)
        [['tile_ic', 'sp', [-1, 3]], ['unroll_kw', 'ot', True]]
        """
        return [[k.name, k.kind, k.value(i)] for k, i in zip(self.knobs, self._positions(index))]

    def configs(self) -> list[Conv2DConfig]:
        """Every config, by index, in one pass over the knobs' product (the first knob varies
        fastest): the tuner builds its whole space per workload, 226k configs for DenseNet-121,
        and config by config that took 2.4 s of its tune.

        >>> s = conv2d_space(Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1)))
        >>> s.configs() == [s.config(i) for i in s]
        True
        """
        names = self.names[::-1]
        values = [[k.value(i) for i in range(len(k))] for k in reversed(self.knobs)]
        return [entity_config(dict(zip(names, combo))) for combo in itertools.product(*values)]

    def index(self, entity: Mapping[str, Any] | Sequence[Sequence]) -> int:
        """Index of an entity: a dict name -> value or a record's entity list.

        Splits may be written ``[-1, inner]`` (new logs) or ``[outer, inner]`` (old logs).
        """
        values = entity_dict(entity)
        if set(values) != set(self.names):
            raise ValueError(f"entity knobs {sorted(values)} do not match the space's {list(self.names)}")
        index = 0
        for k in reversed(self.knobs):
            index = index * len(k) + k.position(values[k.name])
        return index


class ConcatSpace(Space):
    """Config spaces with the same knobs, one after another: index ``len(first) + j`` is
    config ``j`` of the second. An entity belongs to the first space that holds it.

    >>> a = ConfigSpace([Knob("a", "ot", (0, 1))])
    >>> s = ConcatSpace(a, ConfigSpace([Knob("a", "ot", (2, 3, 4))]))
    >>> len(s), s.entity(3), s.index({"a": 4}), s.index({"a": 1})
    (5, {'a': 3}, 4, 1)
    """

    def __init__(self, *spaces: ConfigSpace):
        if len({sp.names for sp in spaces}) != 1:
            raise ValueError("concatenated spaces must have the same knobs")
        self.spaces = spaces

    def __len__(self) -> int:
        return sum(len(sp) for sp in self.spaces)

    def __repr__(self) -> str:
        return " + ".join(map(repr, self.spaces))

    @property
    def names(self) -> tuple[str, ...]:
        return self.spaces[0].names

    def _locate(self, index: int) -> tuple[ConfigSpace, int]:
        if index >= 0:
            for sp in self.spaces:
                if index < len(sp):
                    return sp, index
                index -= len(sp)
        raise IndexError(f"config index {index} out of range for a space of {len(self)}")

    def entity(self, index: int) -> dict[str, Any]:
        sp, i = self._locate(index)
        return sp.entity(i)

    def entity_list(self, index: int) -> list[list]:
        sp, i = self._locate(index)
        return sp.entity_list(i)

    def configs(self) -> list[Conv2DConfig]:
        return [c for sp in self.spaces for c in sp.configs()]

    def index(self, entity: Mapping[str, Any] | Sequence[Sequence]) -> int:
        offset, errors = 0, []
        for sp in self.spaces:
            try:
                return offset + sp.index(entity)
            except ValueError as e:
                errors.append(str(e))
            offset += len(sp)
        raise ValueError(errors[0])


def entity_dict(entity: Mapping[str, Any] | Sequence[Sequence]) -> dict[str, Any]:
    """A config entity as knob name -> record value: the one place entity dicts are built
    (from a record's list ``[[name, kind, value], ...]``, or a copy of a dict).

    >>> entity_dict([["tile_ic", "sp", [-1, 8]], ["unroll_kw", "ot", True]])
    {'tile_ic': [-1, 8], 'unroll_kw': True}
    """
    if isinstance(entity, Mapping):
        return dict(entity)
    return {name: value for name, _kind, value in entity}


def entity_config(entity: Mapping[str, Any] | Sequence[Sequence]) -> Conv2DConfig:
    """The ``Conv2DConfig`` of an x86 conv2d/depthwise entity (no space needed).

    >>> entity_config([["tile_ic", "sp", [2, 32]], ["tile_oc", "sp", [1, 64]],
    ...                ["tile_ow", "sp", [28, 2]], ["unroll_kw", "ot", True]])
    Conv2DConfig(ic_bn=32, oc_bn=64, ow_bn=2, unroll_kw=True, oh_bn=1)
    """
    e = entity_dict(entity)
    return Conv2DConfig(
        ic_bn=int(e["tile_ic"][-1]),
        oc_bn=int(e["tile_oc"][-1]),
        ow_bn=int(e["tile_ow"][-1]),
        unroll_kw=bool(e.get("unroll_kw", False)),
        oh_bn=int(e.get("tile_oh", 1)),
    )


def _split(name: str, n: int, policy: str = "factors", max_inner: int | None = None) -> Knob:
    values = [f for f in split_factors(n, policy) if max_inner is None or f <= max_inner]
    return Knob(name, "sp", tuple(values), n)


def conv2d_space(workload: Conv2DWorkload, tile_ow_policy: str = "verbose") -> ConfigSpace:
    """AutoTVM's x86 ``conv2d_NCHWc`` space for ``workload``.

    ``tile_ow_policy="verbose"`` matches ``conv2d_NCHWc.x86`` (TVM >= 0.7, what we
    write); ``"factors"`` matches ``topi_x86_conv2d_NCHWc`` (TVM <= 0.6 and the 2018 RFC).

    >>> w = Conv2DWorkload((1, 64, 56, 56), (64, 64, 1, 1))
    >>> conv2d_space(w, "factors")
    ConfigSpace(tile_ic:7, tile_oc:7, tile_ow:8, tile_oh:2; len=784)
    """
    knobs = [
        _split("tile_ic", workload.in_channels),
        _split("tile_oc", workload.out_channels),
        _split("tile_ow", workload.out_width, tile_ow_policy, MAX_OW_BLOCK),
    ]
    if workload.is_1x1:
        knobs.append(Knob("tile_oh", "ot", (1, 2) if workload.out_height > 1 else (1,)))
    else:
        knobs.append(Knob("unroll_kw", "ot", (True, False)))
    return ConfigSpace(knobs)


EXTRA_OW_BLOCKS = range(3, 17)  # register tile widths (see the module doc)


def extra_tile_space(workload: Conv2DWorkload) -> ConfigSpace:
    """``conv2d_NCHWc.x86``'s knobs with the ``tile_ow`` widths in 3..16 (at most the
    output width) that AutoTVM's own space lacks.

    >>> extra_tile_space(Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))).knobs[2].values
    (3, 5, 6, 9, 10, 11, 12, 13, 15)
    """
    base = conv2d_space(workload, "verbose")
    ow = base.knobs[2]
    extra = tuple(w for w in EXTRA_OW_BLOCKS if w <= workload.out_width and w not in ow.values)
    return ConfigSpace([*base.knobs[:2], Knob("tile_ow", "sp", extra, ow.length), *base.knobs[3:]])


@functools.lru_cache(maxsize=256)  # spaces are immutable; resuming a log asks once per record
def tuning_space(workload: Conv2DWorkload) -> Space:
    """The space we tune and whose indices our records use: AutoTVM's ``conv2d_NCHWc.x86``
    space (same indices) followed by :func:`extra_tile_space`; depthwise: AutoTVM's.

    >>> tuning_space(Conv2DWorkload((1, 64, 56, 56), (64, 64, 1, 1)))
    ConfigSpace(tile_ic:7, tile_oc:7, tile_ow:10, tile_oh:2; len=980) + ConfigSpace(tile_ic:7, tile_oc:7, tile_ow:9, tile_oh:2; len=882)
    """
    if workload.is_depthwise:
        return depthwise_conv2d_space(workload)
    return ConcatSpace(conv2d_space(workload, "verbose"), extra_tile_space(workload))


def depthwise_conv2d_space(workload: Conv2DWorkload) -> ConfigSpace:
    """AutoTVM's x86 ``depthwise_conv2d_NCHWc`` space (``tile_ow`` uses divisors only).

    >>> w = Conv2DWorkload((1, 32, 112, 112), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32)
    >>> depthwise_conv2d_space(w)
    ConfigSpace(tile_ic:6, tile_oc:6, tile_ow:9, unroll_kw:2; len=648)
    """
    return ConfigSpace([
        _split("tile_ic", workload.in_channels),
        _split("tile_oc", workload.out_channels),
        _split("tile_ow", workload.out_width, "factors", MAX_OW_BLOCK),
        Knob("unroll_kw", "ot", (True, False)),
    ])


# Task name -> (space builder). Old (TVM <= 0.6) conv2d tasks used divisor-only tile_ow.
_TASK_SPACES = {
    "topi_x86_conv2d_NCHWc": lambda w: conv2d_space(w, "factors"),
    "conv2d_NCHWc.x86": lambda w: conv2d_space(w, "verbose"),
    "topi_x86_depthwise_conv2d_NCHWc_from_nchw": depthwise_conv2d_space,
    "depthwise_conv2d_NCHWc.x86": depthwise_conv2d_space,
}


def task_space(task_name: str, workload: Conv2DWorkload) -> ConfigSpace:
    """The space an AutoTVM x86 task's record indices refer to.

    >>> w = Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), strides=(2, 2), padding=(3, 3, 3, 3))
    >>> len(task_space("conv2d_NCHWc.x86", w)), len(task_space("topi_x86_conv2d_NCHWc", w))
    (308, 252)
    """
    try:
        return _TASK_SPACES[task_name](workload)
    except KeyError:
        raise ValueError(f"no x86 config space for task {task_name!r}; known: {sorted(_TASK_SPACES)}") from None


def fallback_config(workload: Conv2DWorkload, lanes: int = 16) -> Conv2DConfig:
    """AutoTVM's x86 fallback schedule (``_fallback_schedule``) for SIMD width ``lanes``.

    ``oc_bn`` = largest divisor of OC <= lanes, ``ic_bn`` = largest divisor of IC <= oc_bn
    (depthwise: ``ic_bn = oc_bn``; other grouped convs: of the channels per group, as TVM's
    ``group_conv2d`` fallback: output blocks must divide them). 1x1: the largest ``ow_bn`` dividing OW and ``oh_bn``
    dividing OH with ``ow_bn * oh_bn < 32`` (``oh_bn`` kept within the space's [1, 2]);
    others ``ow_bn`` = largest divisor of OW <= 31, ``unroll_kw`` off. The graph tuner's
    "default" plan and the tuner's first measurement are this schedule.

    >>> fallback_config(Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)))
    Conv2DConfig(ic_bn=3, oc_bn=16, ow_bn=28, unroll_kw=False, oh_bn=1)
    >>> fallback_config(Conv2DWorkload((1, 128, 14, 14), (256, 128, 1, 1)))
    Conv2DConfig(ic_bn=16, oc_bn=16, ow_bn=14, unroll_kw=False, oh_bn=2)
    >>> fallback_config(Conv2DWorkload((1, 128, 56, 56), (128, 4, 3, 3), padding=(1, 1, 1, 1), groups=32))
    Conv2DConfig(ic_bn=4, oc_bn=4, ow_bn=28, unroll_kw=False, oh_bn=1)
    """
    if workload.is_depthwise:
        oc_bn = _largest_divisor(workload.out_channels, lanes)
        ic_bn = oc_bn
    else:  # groups = 1: the channels; grouped: the channels per group
        oc_bn = _largest_divisor(workload.out_channels // workload.groups, lanes)
        ic_bn = _largest_divisor(workload.kernel_shape[1], oc_bn)
    oh, ow = workload.out_height, workload.out_width
    if workload.is_1x1 and not workload.is_depthwise:
        for ow_bn in range(ow, 0, -1):
            if ow % ow_bn:
                continue
            for oh_bn in range(min(oh, 2), 0, -1):
                if oh % oh_bn == 0 and ow_bn * oh_bn < 32:
                    return Conv2DConfig(ic_bn, oc_bn, ow_bn, False, oh_bn)
    return Conv2DConfig(ic_bn, oc_bn, _largest_divisor(ow, 31), False, 1)


def _largest_divisor(n: int, at_most: int) -> int:
    return next(d for d in range(min(n, at_most), 0, -1) if n % d == 0)
