"""Tune a model's conv kernels into an AutoTVM log: model -> workloads -> tuner -> records.

For every distinct conv workload of the model (:meth:`Model.distinct_workloads`) the
kernel tuner (:func:`kernels.tuner.tune`) searches the AutoTVM ``conv2d_NCHWc.x86``
(or ``depthwise_conv2d_NCHWc.x86``) space, and each measurement is appended to the
log as one v0.2 record the moment it exists: the file is opened in append mode and
every line is written and flushed on its own, so a killed run loses at most the line
being written. Failed measurements are logged too, with TVM's ``error_no`` (1: the
codegen refused the config, 2: LLVM failed, 4: it failed while running, 8: anything
else) and TVM's cost ``[1e9]``, so that a rerun does not retry them.

Resume: a rerun reads the log first; configs already logged for a workload (same
target, task and arguments; identified by config index) are not measured again and
count toward ``trials``; a finalist's records after its first are its re-timings (all of
them where ``tune --retime`` wrote them: :data:`graph_tuner.records.RETIME_ORIGIN`), and
only the missing ones are made; logged transforms are not measured again. So a rerun
after a kill at any point ends with what the unkilled run would have logged. A partial
last line left by a kill is cut off first -- but only once the file is known to be a
log (:func:`check_log`): a file that is not one is refused and left untouched.

Time budget: split evenly across the workloads still to tune, each getting the
remaining time divided by the number left, so time one workload does not use passes
on to the next. It bounds the conv search and the siblings' exchange after it (which gets
what the searches left); the layout-transform benchmark runs after them (cached per CPU by
:mod:`kernels.transform_bench`).

Finally the layout transforms the model can need are measured and appended as
``layout_transform`` records (:func:`transform_keys`), each the moment it is measured,
so one log carries both.

>>> import tempfile, os
>>> log = os.path.join(tempfile.mkdtemp(), "tiny.log")
>>> from kernels.workload import Conv2DWorkload
>>> w = Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1))
>>> fake = lambda wl, c: 1e-4 * c.ow_bn / c.oc_bn
>>> summary = tune_workloads([(w, 1)], log, trials=5, measure=fake, progress=False, transforms=False)
>>> summary[0].new, summary[0].confirmed, len(read_records(log).records)  # 5 trials, winners re-timed 3 times
(5, 15, 20)
>>> tune_workloads([(w, 1)], log, trials=7, measure=fake, progress=False, transforms=False)[0].new
2
"""
from __future__ import annotations

import itertools
import math
import os
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from graph_tuner.candidates import describe, match_key
from graph_tuner.environment import check_cache_dir
from graph_tuner.errors import GraphTunerError
from graph_tuner.host_state import CONTENTION_WARN, OtherLoad
from graph_tuner.layout_flow import layout_name
from graph_tuner.log_lock import writes_log
from graph_tuner.records import (EXCHANGE_ORIGIN, GZIP_MAGIC, ORIGIN_FIELD, RETIME_ORIGIN, conv_input_key, format_record,
                                 log_problem, logged_records, make_conv2d_record, make_transform_record, read_records,
                                 record_lines, torn_tail, transform_input_key)
from kernels.config import Conv2DConfig
from kernels.config_space import entity_config
from kernels.workload import Conv2DWorkload

DEFAULT_TRIALS = 40
MIN_TRIALS = 12  # a floor for small workloads: enough to try the layout pairs a plan may want
# A workload whose search starts from a sibling's timings (siblings, tune_workloads) finds its
# fast configs in fewer trials: this share of its budget, at least MIN_WARM_TRIALS (the
# default config, 5 of the siblings' fastest layout pairs, then the last quarter's moves of the
# fastest tiles to other input blocks: kernels.tuner's transfer phase). DenseNet-121 at 0.5 and 0.75:
# its plan ran 0.991x and 1.002x, then 1.006x, the speed of a cold log's (benchmarks/README.md).
WARM_SHARE = 0.75
MIN_WARM_TRIALS = 8
WARM_SIBLINGS = 2  # siblings whose timings start a search
# FLOP per byte where a conv stops being memory-bound (Zen 4: ~120 GFLOP/s a core against
# ~15-30 GB/s from L3 or memory): a depthwise conv's time follows its bytes, not its FLOPs.
MACHINE_BALANCE = 8


def finalist_budget(trials: Sequence[int], confirm: int) -> list[int]:
    """Winners to re-time for each workload searched with ``trials``: ``confirm`` for a full
    budget, proportionally fewer for a reduced one (re-timing took a third of tuning time).

    >>> finalist_budget([40, 12, 20], 20)
    [20, 6, 10]
    """
    full = max(trials, default=1)
    return [max(1, math.ceil(confirm * t / full)) if confirm else 0 for t in trials]


def siblings(w: Conv2DWorkload, others: Iterable[Conv2DWorkload]) -> list[Conv2DWorkload]:
    """The ``others`` that are ``w`` but for the input channels (no groups), nearest in input
    channels first: DenseNet's 1x1 convs over a growing concatenation, say. Their fast
    configs are much like ``w``'s: in a cold tune of DenseNet-121, the best register tile of
    the sibling tuned just before ran within 5% of a workload's best in 30 of the 41
    workloads where both had timed it. The fused epilogue is not compared: a sibling timed
    with another epilogue (DenseNet's transition conv against the bottlenecks beside it)
    still starts the search, whose own timings then take over.

    >>> a, b, c = (Conv2DWorkload((1, ic, 14, 14), (128, ic, 1, 1)) for ic in (256, 288, 320))
    >>> [x.in_channels for x in siblings(b, [a, c, Conv2DWorkload((1, 288, 7, 7), (128, 288, 1, 1))])]
    [320, 256]
    """
    def key(v: Conv2DWorkload) -> tuple:
        return (v.data_shape[0], v.data_shape[2:], v.kernel_shape[0], v.kernel_shape[2:], v.strides, v.padding,
                v.dilation, v.groups, v.layout, v.out_dtype)

    found = [v for v in others if v != w and v.groups == 1 == w.groups and key(v) == key(w)]
    return sorted(found, key=lambda v: (abs(math.log(v.in_channels / w.in_channels)), v.in_channels))


def trial_budget(workloads: Sequence[tuple[Conv2DWorkload, int]], trials: int) -> list[int]:
    """Trials for each ``(workload, layer count)``: ``trials`` for a workload with at least the
    average share of the model's conv time (estimated as ``count x max(FLOPs, balance x
    bytes)``), proportionally fewer below that, and at least ``MIN_TRIALS`` (or ``trials``
    if smaller). The search time goes where it can change the network's time: DenseNet-121's
    66 workloads get 1,438 trials, not 2,640, at the default 40 (benchmarks/README.md).

    >>> big = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    >>> small = Conv2DWorkload((1, 64, 7, 7), (64, 64, 1, 1))
    >>> trial_budget([(big, 4), (small, 1)], 40), trial_budget([(big, 1)], 40), trial_budget([(small, 1)], 5)
    ([40, 12], [40], [5])
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise GraphTunerError(f"--trials must be >= 1, got {trials}")

    def cost(w: Conv2DWorkload, count: int) -> float:
        nbytes = 4 * (math.prod(w.data_shape) + math.prod(w.kernel_shape) + math.prod(w.out_shape))
        return count * max(w.flops, MACHINE_BALANCE * nbytes)

    costs = [cost(w, c) for w, c in workloads]
    average = sum(costs) / max(len(costs), 1)
    floor = min(trials, MIN_TRIALS)
    return [max(floor, min(trials, math.ceil(trials * c / average))) if average else trials for c in costs]


def warm_budget(workloads: Sequence[tuple[Conv2DWorkload, int]], trials: Sequence[int]) -> list[int]:
    """``trials`` (:func:`trial_budget`) for a run that tunes ``workloads`` in order: one with a
    sibling before it (:func:`siblings`) starts its search from the sibling's timings
    (:func:`warm_start`) and gets ``WARM_SHARE`` of its trials, at least ``MIN_WARM_TRIALS``.
    (Not for the cluster, whose machines tune siblings at the same time.)

    >>> a, b = (Conv2DWorkload((1, ic, 56, 56), (64, ic, 3, 3), padding=(1, 1, 1, 1)) for ic in (64, 96))
    >>> warm_budget([(a, 4), (b, 4)], [40, 40]), warm_budget([(a, 4), (b, 4)], [40, 12])
    ([40, 30], [40, 9])
    """
    earlier = [w for w, _ in workloads]
    return [max(min(t, MIN_WARM_TRIALS), math.ceil(t * WARM_SHARE)) if siblings(w, earlier[:i]) else t
            for i, ((w, _), t) in enumerate(zip(workloads, trials))]



def host_target() -> str:
    """The target string our records carry: ``llvm -mcpu=<LLVM's name for this CPU>``."""
    from kernels.jit import host_cpu

    return f"llvm -mcpu={host_cpu().name}"


def check_log(path: str | os.PathLike) -> Path:
    """Make sure ``path`` can be appended to as a tuning log without damaging anything;
    touches nothing. A missing file is fine (it will be created, and its missing folders);
    a directory, a special file, a gzip-compressed log or a new or empty one named ``.gz``
    (:func:`_refuse_compressed`), or a file that is not already an AutoTVM log
    (:func:`log_problem`: a model, a plan, any other text) is a :class:`GraphTunerError`."""
    path = Path(path)
    if path.is_dir():
        raise GraphTunerError(f"{path}: is a directory, not a tuning log; name a log file for -o")
    if path.exists() and not path.is_file():
        raise GraphTunerError(f"{path}: is not a regular file; name a log file for -o")
    if not path.exists():
        _refuse_compressed(path, b"")
        return path
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        problem = log_problem(path)
    except OSError as e:
        raise GraphTunerError(f"{path}: cannot read the tuning log ({e.strerror}); "
                              f"choose another -o") from None
    _refuse_compressed(path, head)
    if problem:
        raise GraphTunerError(f"{path}: not an AutoTVM tuning log ({problem}); left as it is; "
                              f"name a new or existing log file for -o")
    return path


def _refuse_compressed(path: Path, head: bytes) -> None:
    """A :class:`GraphTunerError` if the log at ``path``, which starts with ``head``, is
    gzip-compressed, or is new or empty but named ``.gz``: records are appended as plain text,
    whole lines that a killed run leaves readable (and :func:`repair_tail` cuts bytes off),
    which a gzip stream is not."""
    if head == GZIP_MAGIC:
        plain = path.with_suffix("") if path.suffix == ".gz" else path.with_name(path.name + ".log")
        stem, suffix = plain.stem, plain.suffix or ".log"
        for n in itertools.count(1):  # never suggest overwriting a file
            if not plain.exists():
                break
            plain = path.with_name(f"{stem}.unpacked{'' if n == 1 else n}{suffix}")
        raise GraphTunerError(f"{path}: a gzip-compressed log, and tune appends records as plain text; left as "
                              f"it is; unpack it (gunzip -c {shlex.quote(str(path))} > {shlex.quote(str(plain))}) "
                              f"and name {plain} for -o")
    if not head and path.suffix == ".gz":
        raise GraphTunerError(f"{path}: -o ends in .gz, but tune appends records as plain text; name "
                              f"{path.with_suffix('')} for -o (gzip it when tuning is done)")


def repair_tail(path: str | os.PathLike) -> bool:
    """Cut a partial last line (a kill mid-write) off a log; True if anything was cut.

    Only a log (:func:`check_log`, else :class:`GraphTunerError` and nothing changes) is
    repaired, and only its last line, if it has no newline: the unfinished start of a record
    is cut (:func:`torn_tail`), whole records before it on that line kept; what is left, or
    anything else (a comment, a line someone typed), gets its newline: not ours to delete.
    """
    path = check_log(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    if not data or data.endswith(b"\n"):
        return False
    cut = torn_tail(data)
    kept = data if cut is None else data[:cut]
    with open(path, "r+b") as f:
        f.truncate(len(kept))
        if kept and not kept.endswith((b"\n", b"\r")):
            f.seek(len(kept))
            f.write(b"\n")
    return cut is not None


@dataclass
class LogState:
    """What a log already holds for one target (:func:`logged`)."""

    # conv input key -> {config index: seconds of its first successful record (None: failed)}
    convs: dict[str, dict[int, float | None]] = field(default_factory=dict)
    # conv input key -> {config index: records of it (its search measurement + re-timings, or
    # re-timings only: `refreshed`)}
    counts: dict[str, Counter] = field(default_factory=dict)
    transforms: set[str] = field(default_factory=set)  # input keys of layout-transform records
    # conv input key -> {config index: the sibling exchange's records of it}: kept apart, so a
    # rerun at any --trials counts only its search's own trials (exchange_siblings)
    exchanged: dict[str, Counter] = field(default_factory=dict)
    # conv input key -> {config index: of its counts, `tune --retime`'s records (RETIME_ORIGIN)}
    refreshed: dict[str, Counter] = field(default_factory=dict)

    def retimings(self, key: str, index: int) -> int:
        """Re-timings logged of one config of a workload: its records after the first, or all
        of them where `tune --retime` replaced them all (its search timing too)."""
        n = self.counts.get(key, Counter())[index]
        return n - (self.refreshed.get(key, Counter())[index] < n)

    def retimed(self, key: str) -> dict[int, int]:
        """:meth:`retimings` of each config of a workload that has any."""
        out = {i: self.retimings(key, i) for i in self.counts.get(key, {})}
        return {i: n for i, n in out.items() if n > 0}


def logged(path: str | os.PathLike, target: str,
           winograd: Mapping[Conv2DWorkload, Conv2DWorkload] | None = None) -> LogState:
    """What a log already holds for ``target`` (:func:`graph_tuner.records.logged_records`),
    but a Winograd GEMM's records timed as another conv than ``winograd`` (GEMM workload -> the
    conv this run times it as) says: a log merged with another model's holds them, and they
    are not this conv's timings."""
    from graph_tuner.winograd import timed_as_another

    state = LogState()
    other, gemms = timed_as_another(winograd), {conv_input_key(g, target): g for g in winograd or {}}
    for rec in logged_records(path, target):
        if rec.key in gemms and other(gemms[rec.key], rec.winograd_of):
            continue
        if rec.is_transform:
            state.transforms.add(rec.key)
            continue
        if rec.origin == EXCHANGE_ORIGIN:
            state.exchanged.setdefault(rec.key, Counter())[rec.index] += 1
            continue
        if rec.origin == RETIME_ORIGIN:
            state.refreshed.setdefault(rec.key, Counter())[rec.index] += 1
        runs = state.convs.setdefault(rec.key, {})
        if runs.get(rec.index) is None:  # a success beats an earlier failure of the same config
            runs[rec.index] = rec.time
        state.counts.setdefault(rec.key, Counter())[rec.index] += 1
    return state


@dataclass
class WorkloadSummary:
    """How tuning one distinct workload went."""

    workload: Conv2DWorkload
    count: int  # layers with this workload
    new: int = 0  # measurements made by this run
    confirmed: int = 0  # re-timings of winners by this run (rounds x winners)
    resumed: int = 0  # measurements found in the log
    errors: int = 0  # failed measurements of this run
    best_seconds: float | None = None  # over the log and this run
    best_config: Conv2DConfig | None = None
    pairs: set[tuple[int, int]] = field(default_factory=set)  # (ic_bn, oc_bn) with a measurement
    wall_seconds: float = 0.0
    others_share: float | None = None  # other processes' share of the cores meanwhile (host_state.OtherLoad)
    trials: int | None = None  # this workload's budget (trial_budget)

    @classmethod
    def from_log(cls, workload: Conv2DWorkload, count: int, previous: dict[int, float | None]) -> WorkloadSummary:
        """A workload's summary before this run measures: what the log holds (``previous``:
        config index -> seconds, None: failed)."""
        summary = cls(workload, count, resumed=len(previous))
        for index, s in previous.items():
            if s is not None:
                summary.pairs.add(_pair(workload, index))
                if summary.best_seconds is None or s < summary.best_seconds:
                    summary.best_seconds, summary.best_config = s, _config(workload, index)
        return summary

    def add(self, m) -> None:
        """Count one new :class:`kernels.tuner.Measurement` of this run."""
        if m.confirmation:
            self.confirmed += 1
            return
        self.new += 1
        if not m.ok:
            self.errors += 1
        else:
            self.pairs.add((m.config.ic_bn, m.config.oc_bn))
            if self.best_seconds is None or m.seconds < self.best_seconds:
                self.best_seconds, self.best_config = m.seconds, m.config

    @property
    def best_gflops(self) -> float | None:
        return self.workload.flops / self.best_seconds / 1e9 if self.best_seconds else None

    def line(self, i: int, n: int) -> str:
        best = (f"best {self.best_seconds * 1e3:.3f} ms ({self.best_gflops:.1f} GFLOP/s)"
                if self.best_seconds else "no successful measurement")
        of = f" of {self.trials}" if self.trials is not None else ""
        return (f"[{i}/{n}] {describe(self.workload)} x{self.count}: {self.new} new + {self.resumed} logged{of} trials, "
                f"{self.errors} failed, {len(self.pairs)} layout pairs, {self.confirmed} re-timings of winners, {best}, "
                f"{self.wall_seconds:.1f} s" + self.contention_note())

    def contention_note(self) -> str:
        """A warning when other processes used the cores while this workload was timed (none
        when this run timed nothing: a resumed workload's records predate the load)."""
        if self.others_share is None or self.others_share < CONTENTION_WARN or not (self.new or self.confirmed):
            return ""
        return (f"; WARNING: other processes used {100 * self.others_share:.0f}% of the cores meanwhile, so these "
                "times may be inflated: `tune --retime` on a quiet machine re-times the finalists")


class LogFile:
    """A log open for appending, a line at a time, each written at once (no buffer that a
    failed write would leave to flush again). A write that fails (a full disk) is a
    :class:`GraphTunerError` saying the records before it are kept; a line it left half
    written is cut by the next run (:func:`repair_tail`), which resumes."""

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # missing folders created, as `solve -o` does
            self.file = open(path, "ab", buffering=0)
        except OSError as e:
            raise GraphTunerError(f"{path}: cannot write the tuning log ({e.strerror}); choose another -o") from None

    def append(self, line: str) -> None:
        data = memoryview(f"{line}\n".encode("utf-8"))
        try:
            while data:
                data = data[self.file.write(data):]
        except OSError as e:
            raise GraphTunerError(f"{self.path}: cannot append to the tuning log ({e.strerror}); every record "
                                  "before this one is kept: make room, then run the same command to resume") from None

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> "LogFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open_log(path: Path) -> LogFile:
    """The log opened for appending (:class:`LogFile`)."""
    return LogFile(path)


@writes_log("path")
def append_records(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Append ``records`` (record dicts) to the log, one line each, flushed."""
    with _open_log(prepare_log(path)) as log:
        for rec in records:
            log.append(format_record(rec))


def prepare_log(path: str | os.PathLike) -> Path:
    """Check that ``path`` is a log (or new) and writable, before any measuring; then cut a
    partial last line a killed run left. Raises :class:`GraphTunerError` with the file
    untouched if it is anything else."""
    path = check_log(path)
    with _open_log(path):
        pass  # fail now (unwritable), not after hours of tuning
    repair_tail(path)
    return path


@writes_log("log_path")
def tune_workloads(
    workloads: Sequence[tuple[Conv2DWorkload, int]],
    log_path: str | os.PathLike,
    *,
    trials: int | Sequence[int] = DEFAULT_TRIALS,
    time_budget: float | None = None,
    measure: Callable | None = None,
    progress: bool = True,
    transforms: bool = True,
    transform_shapes: Iterable[tuple[int, int, int, int]] | None = None,
    measure_transform: Callable | None = None,
    print_fn: Callable[[str], object] = lambda s: None,
    confirm: int = 20,
    winograd: Mapping[Conv2DWorkload, Conv2DWorkload] | None = None,
) -> list[WorkloadSummary]:
    """Tune ``(workload, layer count)`` pairs into the log at ``log_path`` (appended, resumable),
    ``trials`` each (one count, or one per workload: :func:`trial_budget`).

    After a workload's search, the fastest config of each of its ``confirm`` fastest layout
    pairs (fewer for a reduced trial budget: :func:`finalist_budget`) is timed again in
    interleaved rounds (:data:`kernels.tuner.CONFIRM_ROUNDS`), each
    timing logged: the graph tuner takes the median of a config's records, which undoes the
    winner's curse of keeping the fastest of many noisy timings.

    A rerun after a kill at any point ends with the log the unkilled run would have
    written: the search resumes as it would have gone on (:func:`kernels.tuner.tune`), the
    finalists are chosen from the search timings (each config's first record), a
    finalist's logged records after its first count as its re-timings (all of them where
    ``tune --retime`` wrote them) and only missing ones are made, and transforms already
    logged are not measured again.

    ``measure`` is the tuner's measuring function (default: compile and time for real).
    With ``transforms``, the layout transforms of ``transform_shapes`` (default: the
    workloads' input shapes) between the blocks of the tuned records are measured
    (``measure_transform``, default: for real) and their records appended
    (:func:`append_transforms`). ``print_fn`` gets one summary line per workload.
    ``winograd`` (GEMM workload -> the conv it is timed as, :func:`graph_tuner.winograd.convs_of`)
    makes a GEMM's records name their conv.
    """
    from tqdm import tqdm

    from kernels.tuner import tune

    per = [trials] * len(workloads) if isinstance(trials, int) else list(trials)
    if len(per) != len(workloads):
        raise ValueError(f"{len(per)} trial counts for {len(workloads)} workloads")  # a caller's bug
    if min(per, default=1) < 1:
        raise GraphTunerError(f"--trials must be >= 1, got {min(per)}")
    if time_budget is not None and not time_budget > 0:
        raise GraphTunerError(f"--time-budget must be > 0 seconds, got {time_budget}")
    path = prepare_log(log_path)
    if transforms:
        check_cache_dir()
    target = host_target()
    state = logged(path, target, winograd)
    start = time.perf_counter()
    summaries = []
    n = len(workloads)
    searched = {key: dict(runs) for key, runs in state.convs.items()}  # search timings, as the run goes
    with _open_log(path) as log:
        for i, ((w, count), trials, confirm) in enumerate(zip(workloads, per, finalist_budget(per, confirm)), 1):
            key = conv_input_key(w, target)
            previous = state.convs.get(key, {})
            budget = None
            if time_budget is not None:
                budget = max((time_budget - (time.perf_counter() - start)) / (n - i + 1), 1e-3)
            summary = WorkloadSummary.from_log(w, count, previous)
            summary.trials = trials
            bar = tqdm(total=trials, initial=min(len(previous), trials), desc=f"[{i}/{n}] {_short(w)}",
                       unit="trial", disable=not progress, leave=True)

            def on_measure(m, summary=summary, bar=bar, w=w, key=key, conv=(winograd or {}).get(w)):
                log.append(format_record(measurement_record(w, m, target, winograd_of=conv)))
                summary.add(m)
                if m.confirmation:
                    return
                searched.setdefault(key, {})[m.index] = m.seconds
                bar.update(1)
                if summary.best_gflops:
                    bar.set_postfix_str(f"best {summary.best_gflops:.1f} GFLOP/s")

            t0, load = time.perf_counter(), OtherLoad().start()
            try:
                tune(w, trials=trials, time_budget=budget, measure=measure, measured=previous, callback=on_measure,
                     confirm=confirm, retimed=state.retimed(key), skip=state.exchanged.get(key, {}).keys(),
                     warm=warm_start(w, [v for v, _ in workloads[:i - 1]], searched, target))
            finally:
                bar.close()
            summary.wall_seconds, summary.others_share = time.perf_counter() - t0, load.share()
            summaries.append(summary)
            print_fn(summary.line(i, n))
        # Under a budget, the exchange has what the searches left of it (the marks keep a rerun's
        # search, which may go on, apart from its timings).
        _log_exchange(log, dict(zip((w for w, _ in workloads), summaries)), searched, state, target,
                      measure=measure, progress=progress, print_fn=print_fn,
                      deadline=None if time_budget is None else start + time_budget)
    if transforms:
        shapes = transform_shapes if transform_shapes is not None else [w.data_shape for w, _ in workloads]
        keys = transform_keys(shapes, read_records(path, skip_bad_lines=True).records, target)
        added = append_transforms(path, keys, target, progress=progress, measure=measure_transform)
        print_fn(f"layout transforms: {len(keys)} needed, {added} new records")
    return summaries


def _log_exchange(log, summaries: dict[Conv2DWorkload, WorkloadSummary], searched: dict[str, dict[int, float | None]],
                  state: LogState, target: str, *, measure, progress: bool, print_fn: Callable,
                  deadline: float | None = None) -> None:
    """:func:`exchange_siblings` after every search of :func:`tune_workloads`: each timing
    appended to ``log`` (marked) and flushed, and counted in its workload's summary."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    bar = tqdm(desc="siblings' fastest configs", unit="timing", disable=not progress, leave=False)

    def on_exchange(w, m):
        log.append(format_record(measurement_record(w, m, target, origin=EXCHANGE_ORIGIN)))
        summaries[w].add(m)
        bar.update(1)

    try:
        made = exchange_siblings(list(summaries), [searched.get(conv_input_key(w, target), {}) for w in summaries],
                                 state.exchanged, target, measure=measure, callback=on_exchange, deadline=deadline)
    finally:
        bar.close()
    if made:
        print_fn(f"siblings' fastest configs: {made} timings on the others in {time.perf_counter() - t0:.1f} s")


@writes_log("log_path")
def retime_workloads(
    workloads: Sequence[tuple[Conv2DWorkload, int]],
    log_path: str | os.PathLike,
    *,
    measure: Callable | None = None,
    confirm: int = 20,
    progress: bool = True,
    print_fn: Callable[[str], object] = lambda s: None,
    winograd: Mapping[Conv2DWorkload, Conv2DWorkload] | None = None,
) -> int:
    """Time each workload's finalists again and replace their records in the log; no search.

    The finalists are the configs ``solve`` would weigh: the fastest config of each of the
    ``confirm`` fastest layout pairs (:func:`graph_tuner.candidates.layer_candidates`, this
    host's records only), among each workload's own records (a Winograd-eligible layer's
    direct configs apart from its GEMM's, which are the GEMM's finalists, so a few more). They are timed in interleaved rounds
    (:func:`kernels.tuner.retime`), and all their old records are replaced by the new
    timings, so the log then says what they cost with today's kernels on today's host.
    Why: a log keeps the times of the kernels and the load it was tuned with; ResNet-50's
    shipped log predicted 17% more than its plan took (benchmarks/README.md, session 9).
    The log is rewritten through a temporary file (a crash leaves it as it was). Returns
    the number of configs re-timed.
    """
    from tqdm import tqdm

    from graph_tuner.atomic import atomic_write_all
    from graph_tuner.candidates import layer_candidates
    from graph_tuner.winograd import timed_as_another
    from kernels.tuner import CONFIRM_ROUNDS, retime

    path = Path(log_path)
    target = host_target()
    if not path.exists():
        raise GraphTunerError(f"{path}: no such log; run `graph-tuner tune` first")
    prepare_log(path)
    # A merged log's GEMM records timed as another conv are neither finalists nor replaced.
    other = timed_as_another(winograd)

    def other_conv(rec) -> bool:
        return other(rec.workload, rec.winograd_of)

    records = [r for r in read_records(path, skip_bad_lines=True).records if r.target == target]
    foreign = {match_key(r.workload) for r in records if other_conv(r)}
    records = [r for r in records if not other_conv(r)]
    # Each workload's finalists among its own records: a Winograd-eligible layer's candidates
    # include its GEMM's, which are the GEMM's (a workload of its own here), timed as the GEMM.
    own: dict[Conv2DWorkload, list] = {}
    for r in records:
        own.setdefault(match_key(r.workload), []).append(r)
    for w, _ in workloads:
        if match_key(w) not in own:
            merged = (" (its records there were timed as another conv: a log merged with another model's)"
                      if match_key(w) in foreign else "")
            raise GraphTunerError(f"{path}: no {target} record of {describe(w)}{merged}; "
                                  "tune it first (`graph-tuner tune` without --retime)")
    finalists = [layer_candidates([w], own[match_key(w)], k=confirm, target=target)[0] for w, _ in workloads]
    timings = []
    bar = tqdm(total=sum(len(c) for c in finalists) * CONFIRM_ROUNDS, desc="re-timing finalists",
               unit="timing", disable=not progress)
    try:
        for (w, _), cands in zip(workloads, finalists):
            ms = retime(w, [c.config for c in cands], measure=measure, callback=lambda m: bar.update(1))
            timings.append((w, ms))
            old = {c.config: c.time for c in cands}
            ok = [m for m in ms if m.ok]
            if ok:
                best = min(ok, key=lambda m: m.seconds)
                print_fn(f"{describe(w)}: {len(cands)} finalists re-timed; fastest {best.seconds * 1e3:.3f} ms "
                         f"(logged {old[best.config] * 1e3:.3f})")
    finally:
        bar.close()
    # A record is replaced when it times the same config of the same workload (as `solve`
    # matches them: formatting of the arguments aside) on this target.
    def ident(workload, entity) -> tuple:
        return match_key(workload), entity_config(entity)

    replaced = {ident(w, m.entity) for w, ms in timings for m in ms}
    # Every line but the replaced records is kept as it is.
    lines = record_lines(path)
    kept = [line for line, rec in lines
            if rec is None or rec.target != target or ident(rec.workload, rec.entity) not in replaced
            or other_conv(rec)]
    # A config only the sibling exchange timed stays the exchange's: a rerun must not take it
    # for a search trial. The others' records are all re-timings now (RETIME_ORIGIN): a rerun
    # takes none of them for a search timing and so makes no re-timing more.
    searched = {ident(rec.workload, rec.entity) for _, rec in lines
                if rec is not None and rec.target == target and rec.raw.get(ORIGIN_FIELD) != EXCHANGE_ORIGIN
                and not other_conv(rec)}
    # The conv a GEMM's new records name: the one it was timed as here, else the one its records
    # named (a caller without the mapping must not leave them unnamed).
    named = {match_key(rec.workload): rec.winograd_of for _, rec in lines
             if rec is not None and rec.winograd_of is not None and not other_conv(rec)}
    names = {w: c for w, _ in workloads if (c := (winograd or {}).get(w) or named.get(match_key(w))) is not None}
    for w, ms in timings:
        kept += [format_record(measurement_record(w, m, target, origin=RETIME_ORIGIN if ident(w, m.entity) in searched
                                                  else EXCHANGE_ORIGIN, winograd_of=names.get(w))).encode()
                 for m in ms]
    atomic_write_all({path: b"\n".join(kept) + b"\n"})
    return len(replaced)


@writes_log("log_path")
def retime_transforms(log_path: str | os.PathLike, *, measure: Callable | None = None, progress: bool = True) -> int:
    """Time this host's layout transforms in the log again, cached or not, and replace their
    records (each key once; :func:`kernels.transform_bench.measure_transforms`, which caches
    the new timings). A log keeps the times of the transform kernels and the host it was
    tuned with: session 24's kernels took 0.21-0.87x the time of the ones before. The log is
    read again after the timings and rewritten through a temporary file, like
    :func:`retime_workloads`; a key whose new timing is not a time keeps its records.
    Returns the number of transforms re-timed."""
    from graph_tuner.atomic import atomic_write_all
    from graph_tuner.record_checks import transform_key
    from kernels.transform_bench import measure_transforms

    path = Path(log_path)
    if not path.exists():
        raise GraphTunerError(f"{path}: no such log; run `graph-tuner tune` first")
    path, target = prepare_log(path), host_target()

    def key(rec) -> tuple | None:
        return None if rec is None or rec.target != target else transform_key(rec.shape, rec.src_layout, rec.dst_layout)

    keys = list(dict.fromkeys(k for _, rec in record_lines(path, "transforms")
                              if (k := key(rec)) is not None and k[1] != k[2]))
    seconds = measure_transforms(keys, progress=progress, measure_one=measure, fresh=True) if keys else {}
    seconds = {k: t for k, t in seconds.items() if t > 0 and math.isfinite(t)}
    if not seconds:
        return 0
    kept = [line for line, rec in record_lines(path, "transforms") if key(rec) not in seconds]
    kept += [format_record(make_transform_record(k[0], layout_name(k[1]), layout_name(k[2]), t, target)).encode()
             for k, t in seconds.items()]
    atomic_write_all({path: b"\n".join(kept) + b"\n"})
    return len(seconds)


def warm_start(w: Conv2DWorkload, earlier: Sequence[Conv2DWorkload], searched: dict[str, dict[int, float | None]],
               target: str, count: int = WARM_SIBLINGS) -> list[tuple[Conv2DWorkload, Conv2DConfig, float]]:
    """The search timings (``searched``: conv input key -> {config index: seconds}) of the
    ``count`` nearest :func:`siblings` of ``w`` among the ``earlier`` workloads, for
    :func:`kernels.tuner.tune`'s ``warm``. Only workloads tuned before ``w``: a rerun after a
    kill finds them complete, so it starts ``w``'s search from the same data (unless a
    ``--time-budget`` cut a sibling short: the rerun goes on with that sibling first)."""
    out = []
    for v in siblings(w, earlier)[:count]:
        for index, seconds in searched.get(conv_input_key(v, target), {}).items():
            if seconds is not None:
                out.append((v, _config(v, index), seconds))
    return out


def sibling_groups(workloads: Sequence[Conv2DWorkload]) -> list[list[Conv2DWorkload]]:
    """The ``workloads`` that are one another's :func:`siblings`, in groups of two or more, each
    in the order given (DenseNet-121: its 1x1 convs over a growing concatenation, one group a
    dense block).

    >>> a, b, c = (Conv2DWorkload((1, ic, 14, 14), (128, ic, 1, 1)) for ic in (256, 288, 320))
    >>> [[w.in_channels for w in g] for g in sibling_groups([a, Conv2DWorkload((1, 64, 7, 7), (64, 64, 1, 1)), c, b])]
    [[256, 320, 288]]
    """
    groups: list[list[Conv2DWorkload]] = []
    for w in workloads:
        group = next((g for g in groups if siblings(w, g[:1])), None)
        if group is None:
            groups.append([w])
        elif w not in group:
            group.append(w)
    return [g for g in groups if len(g) > 1]


# Each sibling's fastest configs (by search timing) timed on the others (exchange_siblings).
EXCHANGE_TOP = 2


def exchange_siblings(workloads: Sequence[Conv2DWorkload], searches: Sequence[dict[int, float | None]],
                      timings: dict[str, Counter], target: str, *, measure, callback: Callable,
                      top: int = EXCHANGE_TOP, deadline: float | None = None) -> int:
    """Time each sibling group's fastest configs on every member that has not timed them.

    A search starts from its earlier siblings' timings (:func:`warm_start`), so what a later
    sibling finds never reaches the earlier ones: in DenseNet-121's znver3 log the 448-channel
    28x28 1x1 conv's best config (ic8 oc32 ow3) ran 1.24-2.28x faster than their own bests on
    ten of its eleven siblings, and the plan with the group's configs so exchanged ran 1.129x
    (1.075-1.157) faster (benchmarks/README.md, session 42). Pointwise siblings share one
    kernel text (:func:`kernels.conv2d.runtime_channels`), so this is timing, next to no
    compiling.

    ``searches``: each workload's search timings (config index -> seconds, None: failed);
    ``timings``: conv input key -> the exchange's records per config index in the log (a
    killed run's count: only the missing rounds are made). The exchange's records are marked
    (:data:`graph_tuner.records.EXCHANGE_ORIGIN`) and a log's reader keeps them apart
    (:attr:`LogState.exchanged`), so a rerun at any ``--trials`` neither counts them as its
    search's trials nor times them again (its search skips them: ``kernels.tuner.tune``'s
    ``skip``). Each member times
    the union of its group's ``top`` fastest configs by search timing that its own search did
    not try and it would have (:func:`kernels.tuner.worth_trying`), in
    :data:`kernels.tuner.CONFIRM_ROUNDS` interleaved rounds (:func:`kernels.tuner.retime`), each
    timing passed to ``callback``. From ``deadline`` (a ``time.perf_counter()`` time: what a
    ``--time-budget`` leaves) no member starts its timings. Returns the timings made.
    """
    from kernels.jit import host_cpu
    from kernels.tuner import retime, tuning_space, worth_trying

    lanes = host_cpu().lanes
    search = dict(zip(workloads, searches))
    made = 0
    for group in sibling_groups(workloads):
        spaces = {w: tuning_space(w) for w in group}
        pool: list[Conv2DConfig] = []
        for w in group:
            ok = sorted((s, i) for i, s in search[w].items() if s is not None)
            pool += [spaces[w].config(i) for _, i in ok[:top]]
        for w in group:
            if deadline is not None and time.perf_counter() >= deadline:
                return made
            tried = {spaces[w].config(i) for i in search[w]}
            todo = {c: i for c in dict.fromkeys(pool) if c not in tried
                    and (i := _index(spaces[w], c)) is not None and worth_trying(w, c, measure, lanes)}
            counts = timings.get(conv_input_key(w, target), Counter())
            made += len(retime(w, list(todo), measure=measure, callback=lambda m, w=w: callback(w, m),
                               done=[counts[i] for i in todo.values()]))
    return made


def _index(space, c: Conv2DConfig) -> int | None:
    """``c``'s index in ``space``, None if it is not one of its configs (another workload's
    channel block, say)."""
    try:
        return space.index(space.config_entity(c))
    except ValueError:
        return None


def measurement_record(w: Conv2DWorkload, m, target: str, origin: str | None = None,
                       winograd_of: Conv2DWorkload | None = None) -> dict:
    """The v0.2 record of one :class:`kernels.tuner.Measurement` of ``w`` on ``target``
    (a failed one costs TVM's ``[1e9]`` and carries its ``error_no``; ``origin``: see
    :data:`graph_tuner.records.ORIGIN_FIELD`; ``winograd_of``: the conv a Winograd GEMM ``w``
    was timed as, :data:`graph_tuner.records.WINOGRAD_FIELD`)."""
    return make_conv2d_record(w, m.entity, m.index, [m.seconds] if m.ok else [1e9], target,
                              error_no=m.error_no, all_cost=m.elapsed, origin=origin, winograd_of=winograd_of)


def _config(w: Conv2DWorkload, index: int) -> Conv2DConfig:
    from kernels.tuner import tuning_space

    return tuning_space(w).config(index)


def _pair(w: Conv2DWorkload, index: int) -> tuple[int, int]:
    c = _config(w, index)
    return c.ic_bn, c.oc_bn


def _short(w: Conv2DWorkload) -> str:
    n, c, h, width = w.data_shape
    o, _, kh, kw = w.kernel_shape
    return f"{c}x{h}x{width} -> {o} k{kh}x{kw} s{w.strides[0]}"


def transform_keys(shapes: Iterable[Sequence[int]], records: Iterable, target: str) -> list:
    """Transforms a model can need: for each tensor shape, every ordered pair of distinct
    blocks among NCHW (1) and the ``ic_bn``/``oc_bn`` of ``target``'s records that divide its channels.

    >>> recs = read_records([make_conv2d_record(Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1)),
    ...     {"tile_ic": [-1, 4], "tile_oc": [-1, 8], "tile_ow": [-1, 4], "tile_oh": 1}, 0, [1e-4], "llvm")]).records
    >>> transform_keys([(1, 8, 4, 4), (1, 12, 2, 2)], recs, "llvm")[:3]
    [((1, 8, 4, 4), 1, 4), ((1, 8, 4, 4), 1, 8), ((1, 8, 4, 4), 4, 1)]
    >>> len(transform_keys([(1, 8, 4, 4), (1, 12, 2, 2)], recs, "llvm"))
    8
    """
    blocks = {1}
    for rec in records:
        if rec.target == target:
            c = entity_config(rec.entity)
            blocks |= {c.ic_bn, c.oc_bn}
    keys = []
    for shape in dict.fromkeys(tuple(int(x) for x in s) for s in shapes):
        fitting = sorted(b for b in blocks if shape[1] % b == 0)
        keys += [(shape, a, b) for a in fitting for b in fitting if a != b]
    return keys


def transforms_to_measure(keys: Iterable, present: set[str], target: str) -> list:
    """The normalised ``keys`` that are real transforms (two blocks) without a record in
    ``present`` (:attr:`LogState.transforms`)."""
    from kernels.transform_bench import normalize_key

    return [k for k in map(normalize_key, keys)
            if k[1] != k[2] and transform_input_key(k[0], layout_name(k[1]), layout_name(k[2]), target) not in present]


@writes_log("log_path")
def append_transforms(log_path: str | os.PathLike, keys: Sequence, target: str, *, progress: bool = True,
                      measure: Callable | None = None, on_time: Callable | None = None,
                      present: set[str] | None = None) -> int:
    """Measure (or take from the per-CPU cache) ``keys`` and append a ``layout_transform``
    record for each not already in the log for ``target``, each written and flushed the
    moment its timing is known (a killed run keeps what it measured); returns how many
    were appended. ``on_time(key, seconds)`` gets each timing of a key not yet logged.
    ``present``: the log's transform input keys (:attr:`LogState.transforms`) when the
    caller keeps them (the ones appended are added), else the log is read for them."""
    from kernels.transform_bench import measure_transforms

    path = prepare_log(log_path)
    present = logged(path, target).transforms if present is None else present
    wanted = transforms_to_measure(keys, present, target)
    if not wanted:
        return 0
    added = 0
    with _open_log(path) as log:
        def write(key, seconds: float) -> None:
            nonlocal added
            shape, a, b = key
            if on_time is not None:
                on_time(key, seconds)
            if a != b and seconds > 0 and math.isfinite(seconds):
                rec = make_transform_record(shape, layout_name(a), layout_name(b), seconds, target)
                log.append(format_record(rec))
                present.add(transform_input_key(shape, layout_name(a), layout_name(b), target))
                added += 1

        measure_transforms(wanted, progress=progress, measure_one=measure, callback=write)
    return added


@writes_log("log_path")
def tune_model(model, log_path: str | os.PathLike, *, top_k: int = 20, calibrate: bool = False,
               **kwargs) -> list[WorkloadSummary]:
    """:func:`tune_workloads` over a model's distinct conv workloads (a :class:`Model` or a name/path),
    each timed with the fused epilogue its layers run (:func:`workload_epilogues`), then the
    layout transforms the best plan (among each layer's ``top_k`` candidates, ``solve``'s
    default) and the baselines use: solved with the others at a lower bound, measuring those
    a best plan picks until it picks only measured ones
    (:func:`graph_tuner.selection.select_measuring`; MobileNet-v2: tens of its 2,255
    transforms), as ``solve`` does, other steps costed (:func:`settle_transforms`). ``solve``
    on the log finds that plan again without measuring; a solve that wants others (another
    ``--top-k``) measures the few it lacks then. ``calibrate`` (what ``graph-tuner tune``
    does): then the plan's in-network ratios (:func:`calibrate_log`), unless this run timed
    nothing new and the log has a ratio for every step of the plan.
    """
    from graph_tuner.loading import load_model
    from graph_tuner.winograd import convs_of

    m = load_model(model)
    if kwargs.get("measure") is None:
        kwargs["measure"] = model_timer(m)
    transforms = kwargs.pop("transforms", True)
    print_fn = kwargs.get("print_fn", lambda s: None)
    measure_transform = kwargs.get("measure_transform")
    workloads = model_workloads(m)
    kwargs["trials"] = warm_budget(workloads, trial_budget(workloads, kwargs.get("trials", DEFAULT_TRIALS)))
    kwargs.setdefault("winograd", convs_of(m))
    summaries = tune_workloads(workloads, log_path, transforms=False, **kwargs)
    if transforms:
        start = time.monotonic()
        added, gt, plan = settle_transforms(m, log_path, top_k=top_k, measure_transform=measure_transform)
        print_fn(f"layout transforms: {added} new records in {time.monotonic() - start:.1f} s; the best plan and "
                 f"the baselines use {len({t.key for t in plan.transforms})} of the {len(gt.required_transforms())} "
                 "a plan could need")
        # tune reads past a bad line (it only appends); `solve` refuses the log until it is fixed
        for w in gt.log.warnings[:3]:
            print_fn(f"warning: {w}; `graph-tuner solve` refuses the log until it is fixed (or --skip-bad-lines)")
        if len(gt.log.warnings) > 3:
            print_fn(f"warning: {len(gt.log.warnings) - 3} more bad lines skipped")
    if calibrate:
        calibrate_log(m, log_path, top_k=top_k, print_fn=print_fn, measure_transform=measure_transform,
                      if_needed=not any(s.new or s.confirmed for s in summaries),
                      tuner=gt if transforms else None)
    return summaries


def logging_measure(log_path: str | os.PathLike, measure_transform: Callable | None = None) -> tuple[Callable, Callable]:
    """A ``measure`` for :meth:`GraphTuner.solve` that appends each transform it times to the
    log (:func:`append_transforms`), and a count of those appended so far. The log is parsed
    for its transforms once, not at every call (each call still checks its tail): a lazy solve
    of DenseNet-121 asks 28 times, and parsing its log each time took 7 of the 35 s its
    transforms took (session 20)."""
    added = [0]
    present: set[str] | None = None  # the log's transform keys, read at the first call

    def measure(keys: list) -> dict:
        nonlocal present
        got: dict = {}
        target = host_target()
        if present is None:
            present = logged(prepare_log(log_path), target).transforms
        added[0] += append_transforms(log_path, keys, target, progress=False, measure=measure_transform,
                                      on_time=got.__setitem__, present=present)
        return got

    return measure, lambda: added[0]


# Rounds of the calibration run that ends a tune. 3 let one slow phase move ResNet-50's ratios
# by up to 40% (session 19, before slow rounds were dropped: plan_run.CALM_MARGIN); 5 and 9
# rounds, paired, in calm runs: convs more than 10% off 0-3 and 0-2 (MobileNet-v2, DenseNet-121),
# whole-run predictions within 1.2 points of each other (session 20). 6: DenseNet-121's
# calibration in a tune takes about 15 s, not 23.
CALIBRATION_ROUNDS = 6


@writes_log("log_path")
def calibrate_log(model, log_path: str | os.PathLike, *, top_k: int = 20, print_fn=lambda s: None,
                  if_needed: bool = False, measure_transform: Callable | None = None, tuner=None) -> int:
    """The last step of ``tune``: solve the log as ``solve`` does (times taken alone), run that
    plan here (:class:`graph_tuner.plan_run.InNetworkTimer`) and append each of its steps'
    in-network / alone ratios to the log as a record (:meth:`GraphTuner.network_records`),
    flushed. A later ``solve`` on the log picks the same configs and costs them with those,
    measuring nothing (:func:`settle_transforms`). ``if_needed``: not if the log already has
    a ratio for every step of the plan it solves to. ``measure_transform``: times a transform
    a solve wants (default: this CPU's cache, else timed here). ``tuner``: the log's
    :class:`GraphTuner` as :func:`settle_transforms` left it (else one is made). Returns how
    many records were appended."""
    from graph_tuner.loading import load_model

    start = time.monotonic()
    m = load_model(model)
    gt = tuner or _log_tuner(m, log_path, top_k)
    if if_needed and gt.network:
        solved = gt.solve(measure=logging_measure(log_path, measure_transform)[0])
        if not gt.network.unmeasured(solved):
            print_fn(f"in-network ratios: the log has one for each of the plan's {len(solved.layers)} convs, "
                     f"{len(solved.steps)} other steps and {len({t.key for t in solved.transforms})} transforms")
            return 0
    # One run of the alone-timed plan, costed by it (CALIBRATION_ROUNDS).
    print_fn(f"in-network ratios: running the plan here, {CALIBRATION_ROUNDS} rounds of profiles and alone "
             "re-timings ...")
    plan = gt.solve(measure=logging_measure(log_path, measure_transform)[0], calibrate=1,
                    calibration_rounds=CALIBRATION_ROUNDS)
    records = gt.network_records(plan)
    append_records(log_path, records)
    settle_transforms(m, log_path, top_k=top_k, measure_transform=measure_transform)
    for note in (n for n in plan.notes if n.startswith("calibrat")):
        print_fn(note)
    print_fn(f"in-network ratios: {len(records)} records for the plan's {len(plan.layers)} convs, "
             f"{len(plan.steps)} other steps and {len({t.key for t in plan.transforms})} transforms; "
             f"the plan costs {plan.cost:.3f} ms in the network ({time.monotonic() - start:.1f} s)")
    return len(records)


@writes_log("log_path")
def settle_transforms(model, log_path: str | os.PathLike, *, top_k: int = 20, passes: int = 4,
                      measure_transform: Callable | None = None) -> tuple[int, Any, Any]:
    """Solve the log as ``solve`` does (other steps costed, in-network ratios applied),
    appending every transform the solve wants (from this CPU's cache, or measured), until a
    solve wants none (at most ``passes`` solves). The first solve appends the other steps'
    timings (:func:`_log_tuner`); later ones take them from the log. A log whose transforms
    were settled without the other steps' costs still had Inception-v3's solve measure 5
    (session 19). Returns how many were appended, the last solve's :class:`GraphTuner` and plan."""
    measure, added = logging_measure(log_path, measure_transform)
    for _ in range(passes):
        before = added()
        gt = _log_tuner(model, log_path, top_k)
        plan = gt.solve(measure=measure)
        if added() == before:
            break
    return added(), gt, plan


def _log_tuner(model, log_path: str | os.PathLike, top_k: int, *, fresh_steps: bool = False):
    """A :class:`GraphTuner` on the log as ``solve`` sets it up (the other steps timed alone
    where the log has no timing of them, and those timings appended), but for the transforms: the
    log's only, so that each one a plan needs is appended to it (and a layer left with no
    record by a failed tuning gets the default schedule, so the others' transforms are still
    measured). ``fresh_steps``: every step timed again (``--retime``; a later record of a step
    replaces an earlier)."""
    from graph_tuner.api import GraphTuner

    gt = GraphTuner(model, log_path, target=host_target(), top_k=top_k, fallback=True, skip_bad_lines=True)
    gt.benchmark_steps(fresh=fresh_steps)
    if gt.timed_steps:  # into the log, so that every later solve costs them alike
        append_records(log_path, gt.step_records())
    return gt


@writes_log("log_path")
def retime_model(model, log_path: str | os.PathLike, **kwargs) -> int:
    """:func:`retime_workloads` over a model's distinct conv workloads, each timed with the
    fused epilogue its layers run; then its layout transforms (:func:`retime_transforms`) and
    the other steps timed again into the log."""
    from graph_tuner.loading import load_model
    from graph_tuner.winograd import convs_of

    m = load_model(model)
    if kwargs.get("measure") is None:
        kwargs["measure"] = model_timer(m)
    kwargs.setdefault("winograd", convs_of(m))
    n = retime_workloads(model_workloads(m), log_path, **kwargs)
    retime_transforms(log_path, progress=kwargs.get("progress", True))
    _log_tuner(m, log_path, 20, fresh_steps=True)  # the other steps' timings too, appended
    return n


def model_workloads(model) -> list[tuple[Conv2DWorkload, int]]:
    """What tuning a model tunes: its distinct conv workloads, then the Winograd GEMMs of its
    eligible layers (:mod:`graph_tuner.winograd`), each with its layer count."""
    from graph_tuner import winograd

    return model.distinct_workloads() + winograd.tuning_workloads(model)


def model_timer(model):
    """The tuner's timer for a model's convs: each workload with its layers' fused epilogue,
    a Winograd GEMM timed as its whole conv."""
    from graph_tuner import winograd
    from kernels.tuner import KernelTimer

    return KernelTimer(epilogues=workload_epilogues(model), winograd=winograd.convs_of(model))


def workload_epilogues(model) -> dict[Conv2DWorkload, dict]:
    """The fused epilogue to time each distinct workload with: the one most of its layers
    run (:func:`graph_tuner.fusion.conv_epilogues`; ties: the first layer's), activations
    with their parameters (a SiLU's exp is part of its conv's time, as in the network).
    A record is per workload, so layers of one workload share its time."""
    from collections import Counter

    from graph_tuner import winograd
    from graph_tuner.fusion import conv_epilogues

    epilogues = conv_epilogues(model)
    votes: dict[Conv2DWorkload, Counter] = {}
    for op in model.convs():
        key = tuple(sorted(epilogues[op.name].items(), key=lambda kv: kv[0]))
        votes.setdefault(model.workload(op), Counter())[key] += 1
    chosen = {w: dict(c.most_common(1)[0][0]) for w, c in votes.items()}
    # A Winograd GEMM that is tuned is timed as its conv, with the conv's epilogue.
    return chosen | {gemm: chosen[conv] for gemm, conv in winograd.convs_of(model).items()}
