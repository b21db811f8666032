"""Tune on many machines at once: the workloads spread over a Dask cluster, one writer.

``graph-tuner tune MODEL -o LOG --cluster tcp://HOST:8786`` (:func:`tune_on_cluster`)
connects to a running ``dask scheduler`` and hands each distinct conv workload, then
batches of the layout transforms a plan can need, to the workers that declare the
``measure`` resource (``dask worker tcp://HOST:8786 --nthreads 1 --resources measure=1``,
one per machine). A worker compiles and times on its own CPU with all the machine's
cores (the kernels' thread pool, ``GRAPH_TUNER_NUM_THREADS`` or every core: Dask's one
task thread only starts the measurement) and sends every record the moment it exists.

The client is the one writer of the log: each record is appended and flushed as it
arrives, so a killed client loses at most the records in flight, and a rerun skips what
is logged exactly as a local ``tune`` does (:func:`graph_tuner.tuning.logged`).

How records travel (the workers' side: :mod:`graph_tuner.cluster_jobs`): a worker publishes each one as an event of its job's topic
(``Client.log_event``, acknowledged by the scheduler, which keeps a topic's events). The
client subscribes to the topic and writes each event as it comes; when the job's result
arrives it reads the topic's stored events once more and writes any the subscription
missed. A worker killed mid-workload: Dask runs the job again on another worker, which
reads the topic's events first and resumes from the configs they hold (the way a local
rerun resumes from the log), so records already sent are kept and their configs are not
measured again. The scheduler keeps a topic's last ``distributed.admin.low-level-log-length``
events (1,000 by default), so each job's topic is made to keep all of its events when the job is
submitted (:func:`keep_events`; a scheduler without that private hook, or one that cannot import
graph_tuner, keeps its last ``low-level-log-length``, said in one line: older ones are measured
again, and the writer keeps one record of each). The writer also refuses a second search record of a config and more
re-timings than :data:`kernels.tuner.CONFIRM_ROUNDS`, whatever arrives.

Once a CPU's searches are done, its sibling groups time each other's fastest configs (one
job per group: :func:`graph_tuner.tuning.exchange_siblings`, as a local ``tune`` does; the
records marked, their counts kept apart); then its layout transforms are measured.

CPUs: ``-o DIR/`` writes one log per CPU, ``DIR/<cpu>/MODEL.log`` (the layout of
``data/``), each workload tuned once per CPU type by the workers of that CPU. With one
``-o LOG``, the workers whose CPU differs from the first worker's are left out, named in
one line. Jobs are pinned to the hosts of their CPU (a worker the nanny restarts gets a
new address, not a new host).

>>> workers = [WorkerInfo("tcp://a:1", "a", "znver3", 2), WorkerInfo("tcp://b:1", "b", "znver4", 2)]
>>> [str(g.path) for g in plan_groups(workers, "logs/", "resnet-18")[0]]
['logs/znver3/resnet-18.log', 'logs/znver4/resnet-18.log']
>>> print(plan_groups(workers, "x.log", "resnet-18")[1])  # doctest: +NORMALIZE_WHITESPACE
left out 1 worker whose CPU is not znver3 (the first worker's) for the one log x.log: b:1 (znver4);
-o DIR/ writes one log per CPU
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from graph_tuner.cluster_jobs import (ConvJob, ExchangeJob, JobReport, TransformJob, describe_worker, probe_worker,
                                      run_conv_job, run_exchange_job, run_transform_job, transform_key, worker_label)
from graph_tuner.errors import GraphTunerError
from graph_tuner.log_lock import log_lock
from graph_tuner.records import conv_input_key, transform_input_key
from graph_tuner.tuning import (DEFAULT_TRIALS, LogState, WorkloadSummary, finalist_budget, logged, prepare_log,
                                sibling_groups, transforms_to_measure)

# Seconds to reach the scheduler before giving up: a typo in --cluster must not hang for
# Dask's default of 30 s.
CONNECT_TIMEOUT = 10.0
# ... and to wait for a first measuring worker (workers started with the scheduler may
# still be connecting).
WORKER_TIMEOUT = 30.0
# Seconds a CPU's jobs may wait with no measuring worker on any of its hosts before the run
# stops (they run nowhere else: a log's times are one CPU's). A nanny restarts a killed
# worker in seconds; a machine gone for good (a preempted VM) would leave the run waiting
# forever, saying nothing. Checked every STRANDED_CHECK seconds.
STRANDED_S = 120.0
STRANDED_CHECK = 5.0
RESOURCE = "measure"
INSTALL = "pip install -e '.[cluster]' in the graph-tuner checkout"


@dataclass(frozen=True)
class WorkerInfo:
    """A measuring worker as the client first saw it."""

    address: str
    host: str
    cpu: str  # LLVM's name for its CPU
    threads: int  # threads its kernels use
    probe: float | None = None  # one-thread conv GFLOP/s at the start (graph_tuner.host_state)

    @property
    def label(self) -> str:
        return worker_label(self.address)


@dataclass
class Group:
    """The workers of one CPU and the log they fill."""

    cpu: str
    path: Path
    workers: list[WorkerInfo]
    state: LogState = field(default_factory=LogState)
    pending: int = 0  # conv jobs not yet finished; then its exchange jobs, then its transform jobs
    exchange_sent: bool = False
    exchanged: int = 0  # timings the sibling exchange added
    transforms_sent: bool = False
    transforms_needed: int = 0  # a plan could need
    transforms_used: int = 0  # by the best plan and the baselines
    transforms_added: int = 0
    transform_seconds: dict = field(default_factory=dict)  # (NCHW shape, src, dst) -> seconds, as received

    @property
    def target(self) -> str:
        return f"llvm -mcpu={self.cpu}"

    @property
    def hosts(self) -> list[str]:
        return sorted({w.host for w in self.workers})


@dataclass
class ClusterResult:
    """How a cluster run went: per CPU the log and its workloads' summaries, per job its report."""

    logs: dict[str, Path]
    summaries: dict[str, list[WorkloadSummary]]
    reports: list[JobReport]
    workers: list[WorkerInfo]
    wall_seconds: float
    probes_after: dict[str, float] = field(default_factory=dict)
    left_out: str | None = None  # with one log: the line naming the workers of other CPUs, left out

    def overhead(self) -> float:
        """Time the cluster added, as a fraction of the measuring time: per job, from its
        start on the worker to its result at the client, less the worker's measuring
        (one machine's clock: meaningful when the client runs where the workers do)."""
        busy = sum(r.seconds for r in self.reports)
        return sum(r.received - r.started - r.seconds for r in self.reports) / busy if busy else 0.0

    def worker_lines(self) -> list[str]:
        """Which worker (machine, CPU) tuned which workloads, and how long it measured."""
        by: dict[str, list[JobReport]] = {}
        for r in self.reports:
            by.setdefault(r.address, []).append(r)
        probes = {w.address: w.probe for w in self.workers}
        lines = []
        for address, rs in sorted(by.items()):
            r0 = rs[0]
            done = [str(i) for i in sorted(r.index for r in rs if r.summary)]
            transforms, exchanged = sum(r.transforms for r in rs), sum(r.exchanged for r in rs)
            before, after = probes.get(address), self.probes_after.get(address)
            probe = (f"; one-thread conv {_gflops(before)} GFLOP/s at the start, {_gflops(after)} at the end"
                     if before or after else "")
            lines.append(f"{r0.label} (host {r0.host}, {r0.cpu}, {r0.threads} threads): "
                         f"workloads {' '.join(done) or '-'} ({len(done)}), {transforms} transforms, "
                         + (f"{exchanged} siblings' configs, " if exchanged else "") +
                         f"{sum(r.seconds for r in rs):.1f} s measuring{probe}")
        return lines


def _gflops(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


# -- connecting -----------------------------------------------------------------------

def connect(cluster) -> tuple[Any, bool]:
    """A ``distributed.Client`` for ``cluster`` (a scheduler address, or a Client used as
    it is) and whether it is ours to close. An unreachable scheduler is a one-line
    :class:`GraphTunerError` after :data:`CONNECT_TIMEOUT` seconds."""
    try:
        import distributed
    except ImportError:
        raise GraphTunerError(f"--cluster needs Dask distributed: {INSTALL}") from None
    if isinstance(cluster, distributed.Client):
        return cluster, False
    if not isinstance(cluster, str) or not cluster.strip():
        raise GraphTunerError(f"--cluster: expected a scheduler address such as tcp://HOST:8786, got {cluster!r}")
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:  # a malformed address fails here, not in a Client that then hangs on closing
        if parse_address(cluster)[0] in ("tcp", "tls", "ws", "wss"):
            get_address_host_port(cluster)
    except ValueError as e:
        raise GraphTunerError(f"--cluster {cluster}: not a scheduler address ({e}); give tcp://HOST:PORT "
                              f"(`dask scheduler` prints it)") from None
    try:
        client = distributed.Client(cluster, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, ValueError, TypeError) as e:  # timeouts are OSErrors; a bad address a ValueError
        why = (str(e).splitlines() or [type(e).__name__])[0]
        raise GraphTunerError(f"--cluster {cluster}: cannot reach the Dask scheduler ({why}); start it with "
                              f"`dask scheduler` and check the address") from None
    return client, True


def _measuring(client) -> tuple[dict[str, str], int]:
    """``{address: host}`` of the workers declaring the ``measure`` resource, in the
    scheduler's order, and how many workers there are in all."""
    try:
        info = client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:  # distributed before 2025 lists every worker without being asked
        info = client.scheduler_info()["workers"]
    return {a: w.get("host", "") for a, w in info.items() if w.get("resources", {}).get(RESOURCE, 0) >= 1}, len(info)


def measuring_workers(client) -> list[WorkerInfo]:
    """The workers that declare the ``measure`` resource, in the scheduler's order, with
    their CPU and thread count (asked on each worker); waits up to :data:`WORKER_TIMEOUT`."""
    deadline = time.monotonic() + WORKER_TIMEOUT
    while True:
        addresses, total = _measuring(client)
        if addresses or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if not addresses:
        where = client.scheduler.address
        raise GraphTunerError(f"--cluster {where}: no worker declares the '{RESOURCE}' resource (of {total} "
                              f"workers); start one per machine with `dask worker {where} --nthreads 1 "
                              f"--resources {RESOURCE}=1`")
    try:
        described = client.run(describe_worker, workers=list(addresses))
    except ImportError as e:
        raise GraphTunerError(f"a worker cannot import graph-tuner ({e}); install graph-tuner on every "
                              f"worker machine ({INSTALL})") from None
    for a, info in described.items():
        if "error" in info:
            raise GraphTunerError(f"worker {worker_label(a)}: {info['error']} (in the worker's environment)")
    return [WorkerInfo(a, host, **described[a]) for a, host in addresses.items() if a in described]


def plan_groups(workers: Sequence[WorkerInfo], output: str | os.PathLike,
                name: str) -> tuple[list[Group], str | None]:
    """The CPU groups of ``workers`` and their logs, and the line naming the workers left
    out: ``output`` ending in ``/`` (or a folder) gives ``output/<cpu>/<name>.log`` per CPU;
    a file takes the first worker's CPU only."""
    out = str(output)
    if out.endswith(("/", os.sep)) or Path(out).is_dir():
        cpus = list(dict.fromkeys(w.cpu for w in workers))
        safe = name.replace(os.sep, "_")

        def log(cpu: str) -> Path:  # a gzipped log there (solve reads it) is refused, not tuned anew beside it
            plain = Path(out) / cpu / f"{safe}.log"
            packed = plain.with_name(plain.name + ".gz")
            return packed if packed.exists() and not plain.exists() else plain

        return [Group(c, log(c), [w for w in workers if w.cpu == c]) for c in cpus], None
    first = workers[0].cpu
    left = [w for w in workers if w.cpu != first]
    note = None
    if left:
        s = "s" if len(left) > 1 else ""
        named = ", ".join(f"{w.label} ({w.cpu})" for w in left)
        note = (f"left out {len(left)} worker{s} whose CPU is not {first} (the first worker's) for the one log "
                f"{out}: {named}; -o DIR/ writes one log per CPU")
    return [Group(first, Path(out), [w for w in workers if w.cpu == first])], note


def shared_hosts(workers: Sequence[WorkerInfo]) -> list[str]:
    """Hosts with more than one measuring worker: their timings disturb each other."""
    counts = Counter(w.host for w in workers)
    return sorted(h for h, n in counts.items() if n > 1)


# -- on the client --------------------------------------------------------------------

class _Writer:
    """The one writer of the logs: appends and flushes each record the moment it arrives,
    once, from the subscription's thread or the main one."""

    def __init__(self, groups: Sequence[Group], bar):
        from graph_tuner.tuning import _open_log

        self.lock = threading.Lock()
        self.seen: set[tuple[str, int]] = set()
        self.files = {g.cpu: _open_log(g.path) for g in groups}
        self.bar = bar
        self.error: BaseException | None = None
        self.counted: Counter = Counter()  # topic -> search records written

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def take(self, job, group: Group, msg: dict) -> None:
        try:
            with self.lock:
                if (msg["attempt"], msg["seq"]) not in self.seen and self._write(job, group, msg):
                    self.seen.add((msg["attempt"], msg["seq"]))
        except Exception as e:  # the subscription's thread would swallow it: the main loop raises it
            self.error = self.error or e

    def _write(self, job, group: Group, msg: dict) -> bool:
        """Write ``msg``'s record unless the log has it; False: not now (a re-timing whose
        search record has not arrived yet, written when the job's events are read again)."""
        from graph_tuner.layout_flow import layout_name
        from graph_tuner.records import format_record, make_transform_record
        from kernels.tuner import CONFIRM_ROUNDS

        if isinstance(job, TransformJob):
            shape, a, b = transform_key(msg["key"])
            key, seconds = transform_input_key(shape, layout_name(a), layout_name(b), job.target), msg["seconds"]
            if key in group.state.transforms or not (seconds > 0 and math.isfinite(seconds)):
                group.transform_seconds.setdefault((shape, a, b), seconds)
                return True
            line = format_record(make_transform_record(shape, layout_name(a), layout_name(b), seconds, job.target))
            group.transform_seconds[(shape, a, b)] = seconds
            group.state.transforms.add(key)
            group.transforms_added += 1
        elif isinstance(job, ExchangeJob):
            counts = group.state.exchanged.setdefault(msg["key"], Counter())
            if counts[msg["index"]] >= CONFIRM_ROUNDS:
                return True  # logged already: sent by a worker that died, then by its replacement
            counts[msg["index"]] += 1
            group.exchanged += 1
            line = msg["line"]
        else:
            key = conv_input_key(job.workload, job.target)
            counts = group.state.counts.setdefault(key, Counter())
            index, retiming = msg["index"], msg["confirmation"]
            if retiming and counts[index] == 0:
                return False
            # logged already: sent by a worker that died, then by its replacement (the re-timings
            # as the log's reader counts them: all of a config's records after `tune --retime`)
            if (group.state.retimings(key, index) >= CONFIRM_ROUNDS) if retiming else counts[index] >= 1:
                return True
            counts[index] += 1
            if not retiming:  # the search's timings, which the exchange starts from
                group.state.convs.setdefault(key, {})[index] = msg["seconds"]
            line = msg["line"]
        self.files[group.cpu].append(line)
        if not (isinstance(job, (ConvJob, ExchangeJob)) and msg["confirmation"]):
            self.counted[job.topic] += 1
            self.bar.update(1)
        return True


class _Run:
    """One cluster run: its jobs, the futures running them and what came back."""

    def __init__(self, client, groups: list[Group], workers: list[WorkerInfo], bar, emit, *,
                 measure, measure_transform):
        self.client, self.groups, self.workers, self.bar, self.emit = client, groups, workers, bar, emit
        self.measure, self.measure_transform = measure, measure_transform
        self.writer = _Writer(groups, bar)
        self.run_id = uuid.uuid4().hex[:12]
        self.jobs: dict[str, tuple[ConvJob | TransformJob, Group]] = {}
        self.futures: list = []
        self.reports: list[JobReport] = []
        self.summaries: dict[str, dict[int, WorkloadSummary]] = {g.cpu: {} for g in groups}  # by workload number
        self.done: Counter = Counter()  # worker label -> jobs finished
        self.topics: list[str] = []  # subscribed
        self.stranded: str | None = None  # why the watch cancelled the run (watch_workers)
        self.keeps_events = True  # the scheduler took keep_events so far (not asked again once it did not)
        self.watching = threading.Event()
        threading.Thread(target=self.watch_workers, daemon=True, name="graph-tuner-watch").start()

    def watch_workers(self) -> None:
        """Until :meth:`close`: cancel the run if a CPU with jobs left has had no measuring
        worker on its hosts for :data:`STRANDED_S` seconds, so that the waits end in
        :meth:`finish`'s one line instead of lasting forever."""
        gone: dict[str, float] = {}  # cpu -> when its last host's worker was first seen gone
        while not self.watching.wait(STRANDED_CHECK):
            try:
                alive = set(_measuring(self.client)[0].values())
            except Exception:  # a lost scheduler: the waits end on their own (CancelledError)
                continue
            for g in self.groups:
                if g.pending <= 0 or alive & set(g.hosts):
                    gone.pop(g.cpu, None)
                    continue
                since = gone.setdefault(g.cpu, time.monotonic())
                if time.monotonic() - since >= STRANDED_S:
                    self.stranded = (f"no measuring worker on the {g.cpu} host{'s' if len(g.hosts) > 1 else ''} "
                                     f"({', '.join(g.hosts)}) for {STRANDED_S:.0f} s, and their jobs run nowhere "
                                     f"else (a log is one CPU's); the records received are in {g.path}: start a "
                                     f"worker there (`dask worker ... --resources {RESOURCE}=1`) and rerun to resume")
                    self.client.cancel(list(self.futures))
                    return

    def submit(self, job, group: Group, fn: Callable, priority: float = 0):
        self.jobs[job.topic] = (job, group)
        if self.keeps_events:  # before the job can publish: a rerun of it must find every record sent
            try:
                self.keeps_events = bool(self.client.run_on_scheduler(keep_events, [job.topic]))
            except Exception:  # a scheduler that cannot import graph_tuner, say
                self.keeps_events = False
            if not self.keeps_events:
                self.emit("note: the scheduler keeps only a job's last `distributed.admin.low-level-log-length` "
                          "records (1,000 by default; it took no hook to keep them all): a job rerun after its "
                          "worker died measures the older ones again")
        self.client.subscribe_topic(job.topic, lambda event: self.writer.take(job, group, event[1]))
        self.topics.append(job.topic)
        future = self.client.submit(fn, job, key=job.topic, pure=False, resources={RESOURCE: 1},
                                    workers=group.hosts, allow_other_workers=False, priority=priority)
        self.futures.append(future)
        return future

    def submit_convs(self, workloads, epilogues: dict, *, trials: list[int], time_budget: float | None,
                     confirm: int, winograd: dict | None = None) -> list:
        """One job per workload and machine type; ``trials``: each workload's (:func:`trial_budget`);
        ``winograd``: GEMM workload -> the conv it is timed as (:func:`graph_tuner.winograd.convs_of`)."""
        futures = []
        for g in self.groups:
            # A machine tunes one workload at a time: the budget of the workloads a machine
            # gets, as a local run splits its budget over its workloads.
            budget = None if time_budget is None else time_budget * len(g.workers) / len(workloads)
            for i, ((w, count), n_trials, finalists) in enumerate(zip(workloads, trials, finalist_budget(trials, confirm)),
                                                                1):
                key = conv_input_key(w, g.target)
                measured = g.state.convs.get(key, {})
                job = ConvJob(f"graph-tuner-{self.run_id}-{g.cpu}-{i}", i, len(workloads), w, count, g.target,
                              n_trials, budget, finalists, dict(measured), g.state.retimed(key),
                              dict(epilogues.get(w, {})), self.measure, (winograd or {}).get(w),
                              frozenset(g.state.exchanged.get(key, {})))
                self.bar.total += max(0, n_trials - len(measured))
                g.pending += 1
                # The largest first: the run then ends with small ones filling the machines.
                futures.append(self.submit(job, g, run_conv_job, priority=float(w.flops)))
        self.bar.refresh()
        return futures

    def exchange(self, group: Group, workloads: Sequence, epilogues: dict, winograd: dict,
                 until: float | None = None) -> None:
        """Once the group's searches are done: each sibling group's fastest configs timed on
        the members that never tried them (:func:`graph_tuner.tuning.exchange_siblings`, as a
        local ``tune`` does), one job per sibling group, spread over the group's machines;
        waits for their records. A cluster's siblings search side by side, none starting
        from another's timings, so what one finds reaches the others only here. ``until``: a
        ``time.time()`` from which no member starts (the end of a ``--time-budget``)."""
        futures = []
        for members in sibling_groups([w for w, _ in workloads]):
            keys = [conv_input_key(w, group.target) for w in members]
            job = ExchangeJob(f"graph-tuner-{self.run_id}-{group.cpu}-x{len(self.jobs)}", group.target, members,
                              [dict(group.state.convs.get(k, {})) for k in keys],
                              {k: dict(group.state.exchanged.get(k, {})) for k in keys},
                              {w: dict(epilogues[w]) for w in members if w in epilogues},
                              {w: winograd[w] for w in members if w in winograd}, self.measure, until)
            group.pending += 1
            futures.append(self.submit(job, group, run_exchange_job, priority=float(sum(w.flops for w in members))))
        for future in futures:
            self.finish(future)

    def measure_transforms(self, group: Group, model, top_k: int) -> None:
        """The transforms the best plan and the baselines use, measured on the group's
        machines as the lazy solve asks for them (:func:`graph_tuner.selection.select_measuring`,
        as a local ``tune`` does); each batch waits for its records."""
        from graph_tuner.api import GraphTuner

        gt = GraphTuner(model, group.path, target=group.target, top_k=top_k, fallback=True, skip_bad_lines=True)
        group.transforms_needed = len(gt.required_transforms())

        def measure(keys: list) -> dict:
            wanted = transforms_to_measure(keys, group.state.transforms, group.target)
            n = min(len(wanted), len(group.hosts))
            self.bar.total += len(wanted)
            group.pending += n
            futures = [self.submit(TransformJob(f"graph-tuner-{self.run_id}-{group.cpu}-t{len(self.jobs)}",
                                                group.target, wanted[j::n], self.measure_transform),
                                   group, run_transform_job) for j in range(n)]
            for future in futures:
                self.finish(future)
            return {k: group.transform_seconds[k] for k in keys if k in group.transform_seconds}

        plan = gt.solve(measure=measure)
        group.transforms_used = len({t.key for t in plan.transforms})

    def finish(self, future) -> Group:
        """Take a finished job's result: write what its events hold that the subscription
        missed, report it. Returns its group."""
        from distributed import CancelledError, KilledWorker

        job, group = self.jobs[future.key]
        try:
            report = future.result()
        except KilledWorker:
            raise GraphTunerError(f"{_what(job)} ({group.cpu}) killed {_allowed() + 1} workers; "
                                  f"look at the workers' logs; a rerun resumes from the log") from None
        except CancelledError:
            if self.stranded:
                raise GraphTunerError(self.stranded) from None
            raise GraphTunerError(f"{_what(job)} was cancelled: the Dask scheduler was lost or restarted; "
                                  f"a rerun resumes from the log") from None
        report.received = time.time()
        for _, msg in self.client.get_events(job.topic):
            self.writer.take(job, group, msg)
        self.client.unsubscribe_topic(job.topic)
        self.topics.remove(job.topic)
        if self.writer.error is not None:
            raise self.writer.error
        report.index = job.index if isinstance(job, ConvJob) else 0
        self.reports.append(report)
        self.done[report.label] += 1
        self.bar.set_postfix_str(" ".join(f"{k}: {v}" for k, v in sorted(self.done.items())))
        if isinstance(job, ConvJob):
            self.bar.total -= max(0, job.trials - len(job.measured)) - self.writer.counted[job.topic]
            self.bar.refresh()
            self.summaries[group.cpu][job.index] = report.summary
            where = f"{group.cpu}, {report.label}" if len(self.groups) > 1 else report.label
            self.emit(f"{report.summary.line(job.index, job.total)} [{where}]")
        group.pending -= 1
        return group

    def close(self) -> None:
        """Cancel what still runs, stop listening, close the logs; the scheduler forgets
        the run's events (best effort: a scheduler without the hook keeps them)."""
        self.watching.set()
        if self.futures:
            self.client.cancel(self.futures)
        for topic in self.topics:
            self.client.unsubscribe_topic(topic)
        self.writer.close()
        try:
            self.client.run_on_scheduler(forget_events, list(self.jobs))
        except Exception:  # a lost scheduler forgets them anyway
            pass


def keep_events(topics: Sequence[str], dask_scheduler=None) -> bool:
    """Run on the scheduler: make ``topics`` keep every event published to them, not the last
    ``distributed.admin.low-level-log-length`` (1,000 by default): a job's rerun after its
    worker died resumes from its topic's events, and a job of more records than that would
    measure the older ones again. A private hook of Dask's (its broker's topics), hence looked
    up with care (a scheduler that lacks it, or cannot import graph_tuner, keeps its default);
    whether it was there. :func:`forget_events` drops them when the run ends."""
    broker_topics = getattr(getattr(dask_scheduler, "_broker", None), "_topics", None)
    if broker_topics is None:
        return False
    for name in topics:
        topic = broker_topics[name]
        events = getattr(topic, "events", None)
        if not isinstance(events, deque):
            return False
        if events.maxlen is not None:
            topic.events = deque(events)
    return True


def forget_events(topics: Sequence[str], dask_scheduler=None) -> None:
    """Run on the scheduler: drop ``topics`` and their events (a private hook of Dask's,
    hence looked up with care), so that a late event (a cancelled job still running) starts a
    topic of the scheduler's default length, not one :func:`keep_events` made unbounded."""
    broker = getattr(dask_scheduler, "_broker", None)
    broker_topics, truncate = getattr(broker, "_topics", None), getattr(broker, "truncate", None)
    for topic in topics:
        if isinstance(broker_topics, dict):
            broker_topics.pop(topic, None)
        elif truncate is not None:
            truncate(topic)


def _what(job) -> str:
    if isinstance(job, ConvJob):
        from graph_tuner.candidates import describe

        return f"workload {job.index}/{job.total} {describe(job.workload)}"
    if isinstance(job, ExchangeJob):
        return f"the exchange of {len(job.workloads)} siblings' fastest configs"
    return f"a batch of {len(job.keys)} layout transforms"


def _allowed() -> int:
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures"))  # the scheduler's, if configured alike


def log_name(model) -> str:
    """The file name stem of a model's log in ``DIR/<cpu>/``: the zoo name, an .onnx file's stem."""
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        return Path(model).stem
    return getattr(model, "name", None) or str(model)


def tune_on_cluster(
    model,
    output: str | os.PathLike,
    cluster,
    *,
    trials: int = DEFAULT_TRIALS,
    time_budget: float | None = None,
    confirm: int = 20,
    top_k: int = 20,
    transforms: bool = True,
    measure: Callable | None = None,
    measure_transform: Callable | None = None,
    progress: bool = True,
    print_fn: Callable[[str], object] = lambda s: None,
    batch: int | None = None,
    name: str | None = None,
) -> ClusterResult:
    """Tune ``model``'s distinct conv workloads and then its layout transforms on the Dask
    ``cluster`` (a scheduler address or a ``distributed.Client``) into ``output`` (a log,
    or ``DIR/`` for one log per CPU: ``DIR/<cpu>/<name>.log``, ``name`` by default
    :func:`log_name`). ``measure``/``measure_transform`` replace the timers
    on the workers (they must pickle). ``print_fn`` gets a line per workload and, at the
    end, one per worker (:meth:`ClusterResult.worker_lines`)."""
    from tqdm import tqdm

    from graph_tuner.loading import load_model
    from graph_tuner import winograd
    from graph_tuner.tuning import model_workloads, trial_budget, workload_epilogues

    if time_budget is not None and not time_budget > 0:
        raise GraphTunerError(f"--time-budget must be > 0 seconds, got {time_budget}")
    m = load_model(model, batch=batch)
    workloads = model_workloads(m)
    budget = trial_budget(workloads, trials)  # before connecting: a bad --trials fails at once
    client, owned = connect(cluster)  # first: without Dask installed, its one line
    from distributed import as_completed

    run = None
    locks = contextlib.ExitStack()  # each log's write lock (graph_tuner.log_lock), held to the end
    start, wall_start = time.perf_counter(), time.time()
    try:
        workers = measuring_workers(client)
        groups, note = plan_groups(workers, output, name or log_name(model))
        if note:
            print_fn(note)
        for host in shared_hosts(workers):
            print_fn(f"warning: host {host} runs several measuring workers: their timings disturb each other; "
                     f"start one worker per machine with --resources {RESOURCE}=1")
        for g in groups:
            locks.enter_context(log_lock(g.path))
            g.path = prepare_log(g.path)
            g.state = logged(g.path, g.target, winograd.convs_of(m))
        n = sum(len(g.workers) for g in groups)
        bar = tqdm(total=0, desc=f"tuning on {n} worker{'s' if n != 1 else ''}", unit="measurement",
                   disable=not progress, delay=0.5)  # delay: drawn once the totals are known

        def emit(line: str) -> None:
            with tqdm.external_write_mode():
                print_fn(line)

        run = _Run(client, groups, workers, bar, emit, measure=measure, measure_transform=measure_transform)
        epilogues = {} if measure is not None else workload_epilogues(m)
        pending = as_completed(run.submit_convs(workloads, epilogues, trials=budget, time_budget=time_budget,
                                                confirm=confirm, winograd=winograd.convs_of(m)), loop=client.loop)
        for future in pending:
            group = run.finish(future)
            if group.pending == 0 and not group.exchange_sent:
                group.exchange_sent = True  # under a budget, with what the searches left of it (as locally)
                run.exchange(group, workloads, epilogues, winograd.convs_of(m),
                             until=None if time_budget is None else wall_start + time_budget)
                if group.exchanged:
                    emit(f"siblings' fastest configs ({group.cpu}): {group.exchanged} timings on the others")
            if group.pending == 0 and transforms and not group.transforms_sent:
                group.transforms_sent = True
                run.measure_transforms(group, m, top_k)
        bar.close()
        for g in groups:
            if transforms:
                print_fn(f"layout transforms ({g.cpu}): {g.transforms_added} new records; the best plan and the "
                         f"baselines use {g.transforms_used} of the {g.transforms_needed} a plan could need")
        hosts = {h for g in groups for h in g.hosts}
        alive = [a for a, h in _measuring(client)[0].items() if h in hosts]  # restarted ones: new addresses
        probes = client.run(probe_worker, workers=alive) if alive else {}
        summaries = {cpu: [s for _, s in sorted(by.items())] for cpu, by in run.summaries.items()}
        result = ClusterResult({g.cpu: g.path for g in groups}, summaries, run.reports, workers,
                               time.perf_counter() - start, probes, note)
        for line in result.worker_lines():
            print_fn(line)
        return result
    finally:
        if run is not None:
            run.close()
        locks.close()
        if owned:
            client.close()

