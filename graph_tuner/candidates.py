"""Per-conv-layer candidates: which schedules (and so which layouts) each layer may use.

An x86 record's schedule fixes the layer's layouts: input ``NCHW{ic_bn}c`` and output
``NCHW{oc_bn}c`` from the inner factors of ``tile_ic``/``tile_oc``. Only the fastest
record per (input block, output block) pair can be in an optimal plan -- the graph
tuner sees nothing else of a schedule -- so :func:`layer_candidates` keeps that one,
then the K fastest pairs. A record whose config our kernels cannot build
(:func:`kernels.conv2d.supported`) is dropped: a depthwise record with ``ic_bn != oc_bn`` (a
depthwise channel reads and writes the same channel, and our depthwise kernels keep the
blocks aligned), or a grouped one whose output block crosses groups, or whose input block
neither divides a group nor holds whole groups (a Winograd GEMM's: divides the conv's
channels, :func:`kernels.winograd.gemm_supported`).

CUDA needs no layout search: :func:`best_per_workload` picks the fastest record per
distinct workload as AutoTVM's ``apply_history_best`` does (the least mean of its costs).
Records of another element type than float32 (a float16 or int8 tuning of the same shapes)
are never a layer's: the models are float32.

>>> from graph_tuner.records import read_records, make_conv2d_record
>>> w = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))
>>> def rec(ic, oc, t):
...     e = {"tile_ic": [-1, ic], "tile_oc": [-1, oc], "tile_ow": [-1, 8], "unroll_kw": True}
...     return make_conv2d_record(w, e, 0, [t], "llvm", timestamp=0.0)
>>> log = read_records([rec(16, 16, 3e-3), rec(16, 16, 2e-3), rec(16, 16, 9e-3), rec(8, 16, 1e-3)])
>>> [(c.in_block, c.out_block, c.time) for c in layer_candidates([w], log)[0]]  # the median of a config's records
[(8, 16, 0.001), (16, 16, 0.003)]
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from graph_tuner.errors import GraphTunerError
from graph_tuner.records import X86_TASKS, Record, RecordLog, read_records, target_kind, with_costs
from kernels.config import Conv2DConfig
from kernels.config_space import entity_config, fallback_config  # noqa: F401 (re-exported)
from kernels.conv2d import supported
from kernels.winograd import gemm_supported
from kernels.workload import Conv2DWorkload

DEFAULT_TOP_K = 20
# Assumed speed of a fallback (untuned) kernel, to give the solver a time for it. A
# deliberately modest figure: tuned AVX-512 kernels on this class of CPU reach roughly
# 50-100 GFLOP/s per core, the fallback schedule typically a fraction of that.
FALLBACK_GFLOPS = 20.0


@dataclass
class Candidate:
    """One way to run a conv layer: a schedule, its layouts, and its time in seconds.

    ``record`` is the AutoTVM record it came from, ``None`` for a fallback schedule.
    """

    record: Record | None
    in_block: int
    out_block: int
    time: float
    config: Conv2DConfig
    is_fallback: bool = False


def match_key(workload: Conv2DWorkload) -> Conv2DWorkload:
    """The workload as records are matched: forms already unified, output dtype ignored.

    >>> a = Conv2DWorkload((1, 8, 8, 8), (8, 8, 3, 3), out_dtype="float32")
    >>> match_key(a) == match_key(dataclasses.replace(a, out_dtype=""))
    True
    """
    return dataclasses.replace(workload, out_dtype="float32")


def describe(workload: Conv2DWorkload) -> str:
    """A workload the way a user recognises it (used in messages).

    >>> describe(Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1)))
    'conv2d data [1,64,56,56] kernel [64,64,3,3] stride [1,1] pad [1,1,1,1]'
    """
    def fmt(xs):
        return "[" + ",".join(str(x) for x in xs) + "]"

    kind = "depthwise conv2d" if workload.is_depthwise else "conv2d"
    text = (f"{kind} data {fmt(workload.data_shape)} kernel {fmt(workload.kernel_shape)} "
            f"stride {fmt(workload.strides)} pad {fmt(workload.padding)}")
    if workload.dilation != (1, 1):
        text += f" dilation {fmt(workload.dilation)}"
    if workload.groups > 1 and not workload.is_depthwise:
        text += f" groups {workload.groups}"
    return text


def _read(records: RecordLog | Iterable[Record]) -> RecordLog:
    """A log as read; records given some other way pass :func:`read_records`'s checks too."""
    return records if isinstance(records, RecordLog) else read_records(records)


def _why_none(log: RecordLog, what: str, kind: str, usable: Callable[[Record], bool], *,
              missing: str = "no tuning record",
              advice: str = "tune it (`graph-tuner tune MODEL -o LOG`) or pass --fallback") -> str:
    """Why ``log`` has no usable record for ``what`` (a layer or workload) and what to do, on
    one line: "no tuning record" alone, for a log of 40 failed measurements or a CUDA log
    given with --target llvm, does not say what went wrong.

    >>> from graph_tuner.records import make_conv2d_record
    >>> w = Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1))
    >>> log = read_records([make_conv2d_record(w, {"tile_ic": [-1, 8], "tile_oc": [-1, 8],
    ...                                          "tile_ow": [-1, 4]}, 0, [1e-4], "cuda")])
    >>> message = _why_none(log, "layer 0", "llvm", lambda r: r.target_kind == "llvm")
    >>> for part in message.split("; "):
    ...     print(part)
    <records>: layer 0: no tuning record
    read 1 records: 1 conv records, 0 layout transforms, all for target cuda, not llvm
    pass --target cuda, or a log tuned for llvm
    """
    kinds = sorted({r.target_kind for r in log.records})
    mine = sum(map(usable, log.records))
    head = f"{log.source}: {what}: {missing}; {log.summary()}"
    if log.records and not mine and kind not in kinds:
        others = " or ".join(kinds[:3]) + (" or ..." if len(kinds) > 3 else "")  # words: one line
        return (f"{head}, all for target {others}, not {kind}; pass --target {kinds[0]}, "
                f"or a log tuned for {kind}")
    if mine:
        head += f", none of the {mine} {kind} conv records for this workload"
    return f"{head}; {advice}"


def _layer_label(i: int, names: Sequence[str] | None) -> str:
    return f"layer {i} '{names[i]}'" if names is not None else f"layer {i}"


def layer_candidates(
    workloads: Sequence[Conv2DWorkload],
    records: RecordLog | Iterable[Record],
    *,
    names: Sequence[str] | None = None,
    k: int = DEFAULT_TOP_K,
    fallback: bool = False,
    target: str = "llvm",
) -> list[list[Candidate]]:
    """Candidates of each x86 conv layer (in the given order), fastest first.

    Per layer: the records of x86 conv tasks for ``target``'s kind whose workload
    equals the layer's (:func:`match_key`) or, for a layer eligible for Winograd, its GEMM's
    (:func:`graph_tuner.winograd.candidate_gemm`),
    a config's time the median of its records' times,
    the fastest config per (in_block, out_block) among those timed more than once if any
    were (re-timed finalists), then the ``k`` fastest of those. A GEMM record that names
    another conv than the layer's (:data:`graph_tuner.records.WINOGRAD_FIELD`) is left out, with
    a warning. A layer without records is a :class:`GraphTunerError`;
    with ``fallback=True`` it gets one AutoTVM-fallback candidate (:func:`fallback_candidate`)
    and a warning.
    """
    if names is not None and len(names) != len(workloads):
        raise ValueError(f"{len(names)} names for {len(workloads)} layers")
    from graph_tuner.winograd import candidate_gemm, shared_gemms, timed_as_another

    kind = target_kind(target)
    gemms = [candidate_gemm(w) for w in workloads]  # a layer's Winograd candidates are its GEMM's records
    shared = shared_gemms(workloads)
    if shared:
        hit = [i for i, g in enumerate(gemms) if g in shared]
        warnings.warn(f"{', '.join(_layer_label(i, names) for i in hit)}: different convs whose Winograd form is one "
                      "GEMM workload, which the tuner times as one conv (and older records name none); they are "
                      "planned as direct convs")
        gemms = [None if g in shared else g for g in gemms]
    # A GEMM record timed as another conv (WINOGRAD_FIELD; a log merged with another model's)
    # is not this layer's time.
    other = timed_as_another({g: w for w, g in zip(workloads, gemms) if g is not None})
    gemm_keys = {match_key(g) for g in gemms if g is not None}
    wanted = {match_key(w) for w in workloads} | gemm_keys
    # A config measured several times (our tuner re-times its winners in rounds) counts at
    # the median of its records: the fastest of many noisy timings is biased low, and one
    # timing in a busy moment can be 2x slow.
    runs: dict[tuple, list[Record]] = {}
    log = _read(records)

    def usable(rec: Record) -> bool:  # the executor runs float32: another type's time is not a layer's
        return rec.task_name in X86_TASKS and rec.target_kind == kind and rec.float32

    others: dict[Conv2DWorkload, set[Conv2DWorkload]] = {}  # GEMM key -> the other convs its records name
    for rec in log.records:
        key = match_key(rec.workload)
        if not usable(rec) or key not in wanted:
            continue
        if other(rec.workload, rec.winograd_of):
            others.setdefault(key, set()).add(match_key(rec.winograd_of))
            continue
        ident = (key, rec.task_name, json.dumps(rec.entity, sort_keys=True))
        runs.setdefault(ident, []).append(rec)
    # Within a layout pair, a config timed more than once beats any timed once. Our tuner
    # re-times each pair's fastest config (its finalist); the median of those timings rises
    # above the lucky search timing that made it the finalist, while a runner-up timed once
    # keeps its own luck. Solved as equals, 17 of ResNet-50's 53 layers (4 of ResNet-18's
    # 21) took such a runner-up, and ResNet-18 ran 2.8% slower for it (benchmarks/README.md,
    # session 9). Logs with one record per config (AutoTVM's) are unaffected.
    best: dict[tuple, dict[tuple[int, int], tuple[tuple[bool, float], Candidate]]] = {}  # key -> pair -> (rank, c)
    for (key, _, _), recs in runs.items():
        # The record written for this config carries one cost per measurement, so that a
        # plan read back (``apply_records``) costs the layer as the solver did.
        rec = recs[-1] if len(recs) == 1 else with_costs(recs[-1], [r.time for r in recs])
        config = entity_config(rec.entity)
        if not (gemm_supported if key in gemm_keys else supported)(rec.workload, config):
            continue  # see module docstring
        _keep_better(best.setdefault(key, {}), (config.ic_bn, config.oc_bn), (len(recs) < 2, rec.time),
                     Candidate(rec, config.ic_bn, config.oc_bn, rec.time, config))
    for key, convs in others.items():
        hit = [i for i, g in enumerate(gemms) if g is not None and match_key(g) == key]
        warnings.warn(f"{', '.join(_layer_label(i, names) for i in hit)}: the log's records of its Winograd GEMM "
                      f"were timed as another conv ({'; '.join(sorted(describe(c) for c in convs))}), from a log "
                      "merged with another model's?; left out: `graph-tuner tune` this model into the log to time "
                      "its own")
    out = []
    for i, (w, gemm) in enumerate(zip(workloads, gemms)):
        pairs = dict(best.get(match_key(w), {}))
        for pair, (rank, c) in best.get(match_key(gemm), {}).items() if gemm is not None else ():
            _keep_better(pairs, pair, rank, c)  # Winograd or direct, by the rule above
        if pairs:
            out.append(sorted((c for _, c in pairs.values()), key=lambda c: c.time)[:k])
            continue
        if not fallback:
            what = f"{_layer_label(i, names)} {describe(w)}"
            raise GraphTunerError(_why_none(log, what, kind, usable))
        warnings.warn(f"{_layer_label(i, names)} {describe(w)}: no tuning record; "
                      f"using AutoTVM's fallback schedule (time estimated at {FALLBACK_GFLOPS:g} GFLOP/s)",
                      stacklevel=2)
        out.append([fallback_candidate(w, target=target)])
    return out


def _keep_better(pairs: dict, pair: tuple[int, int], rank: tuple[bool, float], candidate: Candidate) -> None:
    """``pairs[pair] = (rank, candidate)`` unless the one there ranks lower (re-timed first, then faster)."""
    if pair not in pairs or rank < pairs[pair][0]:
        pairs[pair] = (rank, candidate)


def simd_lanes() -> int:
    """The SIMD width of AutoTVM's fallback schedule (:func:`fallback_config`) wherever the
    graph tuner uses it: a ``--fallback`` layer's candidate, the "default" baseline plan,
    the tuner's first measurement (:func:`kernels.tuner.tune`). The host's float32 lanes:
    16 with AVX-512, 8 with AVX2, as TVM's fallback on this machine."""
    from kernels.jit import host_cpu

    return host_cpu().lanes


def fallback_candidate(workload: Conv2DWorkload, gflops: float = FALLBACK_GFLOPS, target: str = "llvm",
                       lanes: int | None = None) -> Candidate:
    """A candidate for an untuned layer: the fallback schedule at SIMD width ``lanes``
    (default :func:`simd_lanes`), time = FLOPs / ``gflops``.

    It carries a synthesised record (so a plan can still write one record per layer),
    marked ``"graph_tuner": {"fallback": true}`` with the estimated time as its cost.

    >>> c = fallback_candidate(Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1)), lanes=16)
    >>> c.is_fallback, (c.in_block, c.out_block), round(c.time * 1e3, 2), c.record.raw["graph_tuner"]["fallback"]
    (True, (16, 16), 11.56, True)
    """
    from graph_tuner.records import make_conv2d_record, read_records
    from kernels.config_space import conv2d_space, depthwise_conv2d_space

    config = fallback_config(workload, simd_lanes() if lanes is None else lanes)
    time = workload.flops / (gflops * 1e9)
    space = depthwise_conv2d_space(workload) if workload.is_depthwise else conv2d_space(workload)
    entity = space.config_entity(config)
    index = space.index(entity)
    raw = make_conv2d_record(workload, entity, index, [time], target)
    raw["graph_tuner"] = {"fallback": True, "note": "untuned: AutoTVM's fallback schedule, time estimated"}
    record = read_records([raw]).records[0]
    return Candidate(record, config.ic_bn, config.oc_bn, time, config, True)


def best_per_workload(
    records: RecordLog | Iterable[Record],
    workloads: Sequence[Conv2DWorkload] | None = None,
    *,
    target: str = "cuda",
) -> list[Record]:
    """The fastest float32 record per distinct workload, for ``target``'s kind (CUDA by
    default): the least mean of its costs, the first of equals, as ``apply_history_best``
    ranks them (not the median :attr:`Record.time`: TVM would apply another record).

    Without ``workloads``: every workload in the log, in order of first appearance.
    With them: one per distinct workload in their order of first appearance; a workload
    without a record is a :class:`GraphTunerError` (tune it, or leave it to TVM's fallback
    by not listing it).
    """
    kind = target_kind(target)
    best: dict[Conv2DWorkload, Record] = {}
    log = _read(records)
    for rec in log.records:
        if rec.target_kind != kind or not rec.float32:  # the models are float32 (onnx_import)
            continue
        key = match_key(rec.workload)
        # As apply_history_best ranks them: by the mean of the costs (TVM's), first on ties.
        if key not in best or statistics.fmean(rec.costs) < statistics.fmean(best[key].costs):
            best[key] = rec  # dicts keep first-insertion order: order of first appearance
    if workloads is None:
        return list(best.values())
    out = []
    for w in dict.fromkeys(match_key(w) for w in workloads):
        if w not in best:
            raise GraphTunerError(_why_none(
                log, describe(w), kind, lambda r: r.target_kind == kind,
                missing=f"no {kind} tuning record", advice="run AutoTVM tuning for it"))
        out.append(best[w])
    return out
