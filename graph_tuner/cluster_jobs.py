"""What runs on the workers of a ``tune --cluster`` run (:mod:`graph_tuner.cluster`): the
jobs, the functions that run them and what they send back.

A job carries everything a worker needs (the workload, its fused epilogue, what the log
already holds), no model file. Each record goes to the scheduler the moment it is measured,
as an event of the job's topic (``Client.log_event``: acknowledged, kept by the scheduler);
the client writes them. A job that Dask runs again after its worker died reads the topic's
events first and resumes from them, as a local rerun resumes from the log.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from graph_tuner.errors import GraphTunerError
from graph_tuner.host_state import OtherLoad
from graph_tuner.tuning import WorkloadSummary, measurement_record


@dataclass(frozen=True)
class ConvJob:
    """One workload to tune on one CPU (what a worker needs, no model file)."""

    topic: str
    index: int  # in the model's distinct workloads, from 1
    total: int
    workload: Any  # kernels.workload.Conv2DWorkload
    count: int
    target: str
    trials: int
    time_budget: float | None
    confirm: int
    measured: dict  # config index -> seconds (None: failed), from the log at submission
    retimed: dict  # config index -> re-timings in the log
    epilogue: dict  # build_conv2d's fused-epilogue arguments (graph_tuner.tuning.workload_epilogues)
    measure: Callable | None = None  # the tuner's measure (default: KernelTimer with the epilogue)
    winograd_of: Any = None  # the conv workload a Winograd GEMM workload is timed as (graph_tuner.winograd)
    skip: frozenset = frozenset()  # config indices the sibling exchange timed (kernels.tuner.tune's skip)


@dataclass(frozen=True)
class TransformJob:
    """A batch of layout transforms to time on one CPU."""

    topic: str
    target: str
    keys: list  # normalised (shape, src block, dst block)
    measure: Callable | None = None  # kernels.transform_bench.measure_transforms' measure_one


@dataclass(frozen=True)
class ExchangeJob:
    """A group of siblings to time each other's fastest configs on one CPU
    (:func:`graph_tuner.tuning.exchange_siblings`), once their searches are done."""

    topic: str
    target: str
    workloads: list  # the group's kernels.workload.Conv2DWorkload, in the model's order
    searches: list  # per workload: config index -> search seconds (None: failed)
    exchanged: dict  # conv input key -> {config index: the exchange's records in the log}
    epilogues: dict  # workload -> build_conv2d's fused-epilogue arguments
    winograd: dict  # GEMM workload -> the conv it is timed as
    measure: Callable | None = None
    until: float | None = None  # time.time() from which no member starts (what a --time-budget leaves)


@dataclass
class JobReport:
    """What a worker returns for a job (its records went as events)."""

    address: str
    host: str
    cpu: str
    threads: int
    started: float  # time.time() on the worker when the job started
    seconds: float  # the job's time on the worker, less the time spent sending records
    summary: WorkloadSummary | None = None  # conv jobs
    transforms: int = 0  # transform jobs: timings sent
    exchanged: int = 0  # exchange jobs: timings sent
    received: float = 0.0  # time.time() on the client when the result arrived
    index: int = 0  # conv jobs: the workload's number (set by the client)

    @property
    def label(self) -> str:
        return worker_label(self.address)


def worker_label(address: str) -> str:
    """A worker as the summary names it: ``10.0.0.2:40111``."""
    return address.split("://")[-1]


def describe_worker() -> dict:
    """Run on a worker (``Client.run``): its LLVM CPU name, kernel threads and speed, or
    what is wrong with its environment (``GRAPH_TUNER_NUM_THREADS``, the cache folder)."""
    from graph_tuner.environment import check_environment
    from graph_tuner.host_state import probe
    from kernels.jit import host_cpu
    from kernels.threads import num_threads

    try:
        check_environment()
    except GraphTunerError as e:
        return {"error": str(e)}
    return {"cpu": host_cpu().name, "threads": num_threads(), "probe": probe()}


def probe_worker() -> float:
    """Run on a worker: the host probe (one-thread conv GFLOP/s) now."""
    from graph_tuner.host_state import probe

    return probe()


class _Stream:
    """A job's records, sent to the scheduler one by one as events of the job's topic.
    ``earlier``: what attempts of the job on workers that died have sent."""

    def __init__(self, topic: str):
        from distributed import get_client

        self.client, self.topic = get_client(), topic
        self.attempt, self.seq, self.seconds = uuid.uuid4().hex, 0, 0.0
        self.earlier = [msg for _, msg in self.client.get_events(topic)]

    def send(self, msg: dict) -> None:
        t0 = time.perf_counter()
        self.client.log_event(self.topic, {**msg, "attempt": self.attempt, "seq": self.seq})
        self.seq += 1
        self.seconds += time.perf_counter() - t0


def _report(stream: _Stream, started: float, t0: float, **kw) -> JobReport:
    from distributed import get_worker
    from distributed.comm import get_address_host

    from kernels.jit import host_cpu
    from kernels.threads import num_threads

    worker = get_worker()
    return JobReport(worker.address, get_address_host(worker.address), host_cpu().name, num_threads(), started,
                     time.perf_counter() - t0 - stream.seconds, **kw)


def _check_cpu(target: str) -> None:
    from distributed import get_worker

    from graph_tuner.tuning import host_target

    if host_target() != target:
        raise GraphTunerError(f"worker {get_worker().address} is a {host_target()}, "
                              f"not the {target} its job was sent to")


def run_conv_job(job: ConvJob) -> JobReport:
    """Run on a worker: tune one workload (:func:`kernels.tuner.tune`), resuming from the
    log's configs and those earlier attempts sent, each record sent as it is measured."""
    from graph_tuner.records import format_record
    from kernels.tuner import KernelTimer, tune

    started, t0 = time.time(), time.perf_counter()
    _check_cpu(job.target)
    stream = _Stream(job.topic)
    measured, retimed = dict(job.measured), Counter(job.retimed)
    for msg in stream.earlier:
        if msg["confirmation"]:
            retimed[msg["index"]] += 1
        elif measured.get(msg["index"]) is None:  # as logged(): a success beats a failure
            measured[msg["index"]] = msg["seconds"]
    summary = WorkloadSummary.from_log(job.workload, job.count, measured)
    summary.trials = job.trials
    measure = job.measure or KernelTimer(epilogues={job.workload: job.epilogue},
                                         winograd={job.workload: job.winograd_of} if job.winograd_of else None)

    def on_measure(m) -> None:
        summary.add(m)
        line = format_record(measurement_record(job.workload, m, job.target, winograd_of=job.winograd_of))
        stream.send({"line": line, "index": m.index,
                     "seconds": m.seconds if m.ok else None, "confirmation": m.confirmation})

    load = OtherLoad().start()
    tune(job.workload, trials=job.trials, time_budget=job.time_budget, measure=measure, measured=measured,
         callback=on_measure, confirm=job.confirm, retimed=dict(retimed), skip=job.skip)
    summary.wall_seconds, summary.others_share = time.perf_counter() - t0, load.share()
    return _report(stream, started, t0, summary=summary)


def run_exchange_job(job: ExchangeJob) -> JobReport:
    """Run on a worker: time a sibling group's fastest configs on the members that never
    tried them, each record (marked :data:`graph_tuner.records.EXCHANGE_ORIGIN`) sent as it
    is measured; what the log and earlier attempts hold is not timed again."""
    from graph_tuner.records import EXCHANGE_ORIGIN, conv_input_key, format_record
    from graph_tuner.tuning import exchange_siblings
    from kernels.tuner import KernelTimer

    started, t0 = time.time(), time.perf_counter()
    _check_cpu(job.target)
    stream = _Stream(job.topic)
    exchanged = {key: Counter(counts) for key, counts in job.exchanged.items()}
    for msg in stream.earlier:
        exchanged.setdefault(msg["key"], Counter())[msg["index"]] += 1
    measure = job.measure or KernelTimer(epilogues=job.epilogues, winograd=job.winograd or None)

    def send(w, m) -> None:
        line = format_record(measurement_record(w, m, job.target, origin=EXCHANGE_ORIGIN))
        stream.send({"line": line, "key": conv_input_key(w, job.target), "index": m.index,
                     "seconds": m.seconds if m.ok else None, "confirmation": True, "exchange": True})

    deadline = None if job.until is None else time.perf_counter() + job.until - time.time()
    made = exchange_siblings(job.workloads, job.searches, exchanged, job.target, measure=measure, callback=send,
                             deadline=deadline)
    return _report(stream, started, t0, exchanged=made)


def run_transform_job(job: TransformJob) -> JobReport:
    """Run on a worker: time a batch of layout transforms (its per-CPU cache first), each
    timing sent as it is known; keys earlier attempts sent are skipped."""
    from distributed import get_worker

    from graph_tuner.environment import check_cache_dir
    from kernels.transform_bench import measure_transforms

    started, t0 = time.time(), time.perf_counter()
    _check_cpu(job.target)
    try:
        check_cache_dir()
    except GraphTunerError as e:
        raise GraphTunerError(f"worker {get_worker().address}: {e}") from None
    stream = _Stream(job.topic)
    done = {transform_key(msg["key"]) for msg in stream.earlier}
    count = 0

    def send(key, seconds: float) -> None:
        nonlocal count
        count += 1
        stream.send({"key": [list(key[0]), key[1], key[2]], "seconds": seconds})

    measure_transforms([k for k in job.keys if k not in done], progress=False, measure_one=job.measure,
                       callback=send)
    return _report(stream, started, t0, transforms=count)


def transform_key(raw) -> tuple:
    """A transform key as sent in an event (lists) back to ``(shape, src block, dst block)``.

    >>> transform_key([[1, 8, 4, 4], 1, 8])
    ((1, 8, 4, 4), 1, 8)
    """
    return tuple(int(x) for x in raw[0]), int(raw[1]), int(raw[2])
