"""`tune --cluster` on a real Dask LocalCluster: two single-thread worker processes.

With ``--trials 3`` the search is the same on every run (the default config, then the two
layout pairs the prior ranks first; every config a finalist re-timed 3 times), so a log
tuned on the cluster must hold what a local run's holds: the same configs per workload,
each with the same number of records, and the same layout transforms. Timings differ.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from tiny_model import write_siblings_onnx, write_tiny_onnx
from graph_tuner import cluster as cl
from graph_tuner.tune_api import tune
from graph_tuner.cli import main
from graph_tuner.loading import load_model
from graph_tuner.records import EXCHANGE_ORIGIN, ORIGIN_FIELD, RETIME_ORIGIN, conv_input_key
from graph_tuner.tuning import exchange_siblings, host_target, logged, model_timer, model_workloads, tune_workloads
from kernels.jit import host_cpu
from kernels.threads import num_threads
from kernels.workload import Conv2DWorkload

TRIALS = ["--trials", "3", "--no-progress"]
ROOT = Path(__file__).resolve().parent.parent


def content(log: Path) -> tuple[Counter, set]:
    """(records per (workload input, config index), the transforms' inputs) of a log."""
    convs, transforms = Counter(), set()
    for line in log.read_text().splitlines():
        obj = json.loads(line)
        if obj["input"][1] == "layout_transform":
            transforms.add(json.dumps(obj["input"]))
        else:
            convs[json.dumps(obj["input"]), obj["config"]["index"]] += 1
    return convs, transforms


def assert_same_content(log: Path, reference: tuple, model) -> None:
    """The same conv records (configs per workload, records per config) as a local run. The
    transforms are measured as the solve needs them (``select_measuring``), so which ones
    depends on the times measured: the log must let ``solve`` find its plan without
    measuring anything more."""
    from graph_tuner.api import GraphTuner

    convs, transforms = content(log)
    assert convs == reference[0] and transforms
    plan = GraphTuner(str(model), log).solve()  # measure=False: an unlogged transform it needs raises
    assert plan.layers


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The cluster (workers inherit a private transform cache), the model, and the log a
    local run writes."""
    folder = tmp_path_factory.mktemp("cluster")
    model = write_tiny_onnx(folder / "tiny.onnx")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPH_TUNER_CACHE_DIR", str(folder / "cache"))
        local = folder / "local.log"
        # what a cluster writes: the kernels and transforms (in-network ratios are taken by a later
        # tune on a machine of the log's CPU)
        assert main(["tune", str(model), "-o", str(local), *TRIALS, "--no-calibrate"]) == 0
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"measure": 1},
                          dashboard_address=":0") as cluster:
            yield cluster, model, content(local)


def test_cluster_log_holds_what_a_local_run_logs_and_a_rerun_adds_nothing(setup, tmp_path, capsys):
    cluster, model, reference = setup
    log = tmp_path / "cluster.log"
    assert main(["tune", str(model), "-o", str(log), "--cluster", cluster.scheduler_address, *TRIALS]) == 0
    out = capsys.readouterr().out
    assert_same_content(log, reference, model)
    convs, transforms = reference
    assert len(convs) == 6 and sum(convs.values()) == 6 * 4 and transforms  # 3 configs x 2, each timed 4 times
    # Each workload's line names its worker; each worker measured with every core, not
    # with its one Dask thread.
    assert "[1/2]" in out and "[2/2]" in out and "tuned 2 workloads on 2 workers" in out
    worker_lines = [line for line in out.splitlines() if f"{host_cpu().name}, {num_threads()} threads)" in line]
    assert len(worker_lines) >= 1 and all("workloads " in line for line in worker_lines)
    lines = log.read_text()
    assert main(["tune", str(model), "-o", str(log), "--cluster", cluster.scheduler_address, *TRIALS]) == 0
    assert log.read_text() == lines  # resumed: nothing left to do
    assert capsys.readouterr().out.count("0 new + 3 logged") == 2


def test_one_log_leaves_out_the_workers_of_another_cpu_named_in_one_line(setup, tmp_path, monkeypatch):
    """With ``-o LOG``, a worker whose CPU is not the first worker's gets no job: one line
    names it (printed, and in the result for API callers), the log is the first CPU's."""
    cluster, model, reference = setup
    real = cl.measuring_workers
    stranger = cl.WorkerInfo("tcp://10.9.9.9:1", "10.9.9.9", "othercpu", 2)
    monkeypatch.setattr(cl, "measuring_workers", lambda client: [*real(client), stranger])
    log, lines = tmp_path / "one.log", []
    result = tune(model, log, trials=3, cluster=cluster.scheduler_address, progress=False, print_fn=lines.append)
    note = f"left out 1 worker whose CPU is not {host_cpu().name} (the first worker's) for the one log {log}: " \
           f"10.9.9.9:1 (othercpu); -o DIR/ writes one log per CPU"
    assert result.left_out == note and lines[0] == note
    assert result.logs == {host_cpu().name: log} and "10.9.9.9" not in {r.host for r in result.reports}
    assert_same_content(log, reference, model)


class DieOnce:
    """The tuner's measure, but the first worker process to reach its ``n``-th measurement
    is SIGKILLed there (no cleanup, as an OOM kill or a pulled plug), once per ``marker``.
    Every call, in any process, appends a line to ``marker.calls``. With ``pairs``, only the
    calls for those (input channels, config) count."""

    def __init__(self, timer, marker: str, n: int, pairs: set | None = None):
        self.timer, self.marker, self.n, self.calls, self.pairs = timer, marker, n, 0, pairs

    def __call__(self, workload, config):
        if self.pairs is not None and (workload.in_channels, config) not in self.pairs:
            return self.timer(workload, config)
        self.calls += 1
        with open(self.marker + ".calls", "a") as f:
            f.write(f"{os.getpid()}\n")
        if self.calls == self.n:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass  # another process died already
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return self.timer(workload, config)


def test_a_worker_killed_mid_workload_loses_nothing(setup, tmp_path):
    cluster, model, reference = setup
    marker = tmp_path / "killed"
    out = tmp_path / "logs"
    with Client(cluster) as client:
        # The 5th measurement: after the search (3) and a first re-timing were sent.
        measure = DieOnce(model_timer(load_model(model)), str(marker), 5)
        result = tune(model, f"{out}/", trials=3, cluster=client, measure=measure, progress=False)
    assert marker.exists()  # a worker did die
    calls = Path(f"{marker}.calls").read_text().splitlines()
    # Each record measured once, plus the measurement the kill cut short: the records the
    # dead worker had sent were kept, and its replacement resumed from them.
    assert len(calls) == sum(reference[0].values()) + 1 and len(set(calls)) >= 2
    log = out / host_cpu().name / "tiny.log"  # -o DIR/: DIR/<cpu>/MODEL.log
    assert result.logs == {host_cpu().name: log}
    assert_same_content(log, reference, model)  # its workload re-run elsewhere: nothing lost, nothing twice


def test_a_worker_killed_after_more_records_than_the_scheduler_keeps_loses_nothing(setup, tmp_path):
    """A scheduler keeping only a topic's last 2 events (``low-level-log-length``; 1,000 by
    default): each job's topic keeps all of them (cluster.keep_events), so the job's rerun after
    its worker died 5 records in still finds every record sent and measures none again."""
    import dask

    _, model, reference = setup
    marker = tmp_path / "killed"
    with dask.config.set({"distributed.admin.low-level-log-length": 2}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"measure": 1},
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            for i in range(3):
                client.log_event("probe", i)
            assert [e[1] for e in client.get_events("probe")] == [1, 2]  # the scheduler keeps 2 a topic
            measure = DieOnce(model_timer(load_model(model)), str(marker), 5)
            result = tune(model, tmp_path / "tiny.log", trials=3, cluster=client, measure=measure, progress=False)
            assert not any(t.startswith("graph-tuner-") for t in client.get_events())  # forgotten at the end
    assert marker.exists()
    calls = Path(f"{marker}.calls").read_text().splitlines()
    assert len(calls) == sum(reference[0].values()) + 1
    assert_same_content(result.logs[host_cpu().name], reference, model)


def test_a_scheduler_that_keeps_no_more_events_is_one_note_and_the_run_goes_on(setup, tmp_path, monkeypatch):
    cluster, model, reference = setup
    monkeypatch.setattr(cl, "keep_events", lambda topics, dask_scheduler=None: False)  # no hook there
    lines = []
    with Client(cluster) as client:
        result = tune(model, tmp_path / "tiny.log", trials=3, cluster=client, progress=False, print_fn=lines.append)
    assert sum("keeps only a job's last" in line for line in lines) == 1
    assert_same_content(result.logs[host_cpu().name], reference, model)


class Slow:
    """The tuner's measure, 0.1 s slower: a run long enough to be killed midway."""

    def __init__(self, timer):
        self.timer = timer

    def __call__(self, workload, config):
        time.sleep(0.1)
        return self.timer(workload, config)


def test_a_killed_client_keeps_what_it_wrote_and_a_rerun_completes_the_log(setup, tmp_path):
    cluster, model, reference = setup
    log = tmp_path / "cluster.log"
    script = ("from test_cluster import Slow; from graph_tuner.tune_api import tune; "
              "from graph_tuner.loading import load_model; from graph_tuner.tuning import model_timer; "
              f"tune({str(model)!r}, {str(log)!r}, trials=3, cluster={cluster.scheduler_address!r}, "
              f"progress=False, measure=Slow(model_timer(load_model({str(model)!r}))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and \
                (not log.exists() or len(log.read_text().splitlines()) < 6):
            time.sleep(0.02)
        assert proc.poll() is None  # killed midway, not after it finished or failed
    finally:
        proc.kill()
        proc.wait()
    written = sum(content(log)[0].values())
    assert 6 <= written < sum(reference[0].values())
    assert main(["tune", str(model), "-o", str(log), "--cluster", cluster.scheduler_address, *TRIALS]) == 0
    assert_same_content(log, reference, model)


def test_unreachable_scheduler_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cl, "CONNECT_TIMEOUT", 1.0)
    model = write_tiny_onnx(tmp_path / "tiny.onnx")
    log = tmp_path / "t.log"
    assert main(["tune", str(model), "-o", str(log), "--cluster", "tcp://127.0.0.1:9", *TRIALS]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graph-tuner: error: --cluster tcp://127.0.0.1:9: cannot reach the Dask scheduler")
    assert len(err.splitlines()) == 1 and not log.exists()


def test_cluster_without_dask_installed_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """`pip install -e .` has no Dask (the [cluster] extra): --cluster says so in one line, not
    an internal error from the first Dask import."""
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    model = write_tiny_onnx(tmp_path / "tiny.onnx")
    log = tmp_path / "t.log"
    assert main(["tune", str(model), "-o", str(log), "--cluster", "tcp://127.0.0.1:9", *TRIALS]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"graph-tuner: error: --cluster needs Dask distributed: {cl.INSTALL}" and not log.exists()


def test_a_cluster_without_measuring_workers_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cl, "WORKER_TIMEOUT", 0.2)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
        with pytest.raises(cl.GraphTunerError, match="no worker declares the 'measure' resource"):
            tune(write_tiny_onnx(tmp_path / "tiny.onnx"), tmp_path / "t.log", trials=1, cluster=client)


def test_a_worker_with_a_bad_environment_is_named_in_one_line(tmp_path):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, resources={"measure": 1},
                      dashboard_address=":0", env={"GRAPH_TUNER_NUM_THREADS": "two"}) as cluster, \
            Client(cluster) as client:
        with pytest.raises(cl.GraphTunerError, match=r"^worker 127.0.0.1:\d+: GRAPH_TUNER_NUM_THREADS='two' is not"):
            tune(write_tiny_onnx(tmp_path / "tiny.onnx"), tmp_path / "t.log", trials=1, cluster=client)
    assert not (tmp_path / "t.log").exists()


def test_one_log_per_cpu_or_the_first_workers_cpu_only():
    workers = [cl.WorkerInfo("tcp://a:1", "a", "znver3", 2), cl.WorkerInfo("tcp://b:1", "b", "znver4", 2),
               cl.WorkerInfo("tcp://c:1", "c", "znver3", 2)]
    groups, note = cl.plan_groups(workers, "logs/", "resnet-18")
    assert note is None
    assert [(g.cpu, g.path, g.hosts) for g in groups] == [
        ("znver3", Path("logs/znver3/resnet-18.log"), ["a", "c"]),
        ("znver4", Path("logs/znver4/resnet-18.log"), ["b"])]
    (group,), note = cl.plan_groups(workers, "r.log", "resnet-18")
    assert (group.cpu, group.path, group.hosts) == ("znver3", Path("r.log"), ["a", "c"])
    assert note.startswith("left out 1 worker whose CPU is not znver3") and "b:1 (znver4)" in note
    assert cl.shared_hosts(workers) == [] and cl.shared_hosts(workers + workers[:1]) == ["a"]


def test_a_folder_holding_a_gzipped_log_is_refused_not_tuned_anew_beside_it(tmp_path):
    """`solve --records DIR/` reads DIR/<cpu>/MODEL.log.gz; a cluster tune into DIR/ wrote a new
    MODEL.log beside it, from scratch, which solve then took instead."""
    import gzip

    packed = tmp_path / "znver4" / "resnet-18.log.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(b'{"input": ["llvm", "conv2d_NCHWc.x86", [], {}], "config": {}, '
                                     b'"result": [[1e-4], 0, 0, 0]}\n'))
    workers = [cl.WorkerInfo("tcp://b:1", "b", "znver4", 2), cl.WorkerInfo("tcp://a:1", "a", "znver3", 2)]
    groups, _ = cl.plan_groups(workers, f"{tmp_path}/", "resnet-18")
    assert [g.path for g in groups] == [packed, tmp_path / "znver3" / "resnet-18.log"]
    with pytest.raises(cl.GraphTunerError, match="a gzip-compressed log, and tune appends records as plain text"):
        cl.prepare_log(groups[0].path)


def landscape(workload, config) -> float:
    """Made-up times, the same on every run: the siblings' best blocks differ, so at 8 trials
    each finds fast configs the other never tries (2 each way)."""
    best_ow, best_oc = (2, 8) if workload.in_channels == 16 else (3, 4)
    return 1e-5 * (1 + abs(config.ow_bn - best_ow) + abs(config.oc_bn - best_oc) / 4 + (config.ic_bn == 1))


def marked(log: Path) -> Counter:
    """The sibling exchange's records per (input channels, config index)."""
    objs = [json.loads(line) for line in log.read_text().splitlines()]
    return Counter((o["input"][2][0][1][1], o["config"]["index"]) for o in objs
                   if o.get(ORIGIN_FIELD) == EXCHANGE_ORIGIN)


def test_siblings_exchange_their_fastest_configs_on_the_cluster(setup, tmp_path):
    """After the searches, a CPU's siblings time each other's fastest configs (as a local
    tune does: graph_tuner.tuning.exchange_siblings), records marked; a rerun adds nothing,
    and a worker killed in the exchange loses nothing."""
    cluster = setup[0]
    model = write_siblings_onnx(tmp_path / "siblings.onnx")
    args = dict(trials=8, cluster=cluster.scheduler_address, progress=False, transforms=False)
    log = tmp_path / "x.log"
    lines: list[str] = []
    tune(model, log, measure=landscape, print_fn=lines.append, **args)
    target = host_target()
    ws = [w for w, _ in model_workloads(load_model(model))]
    state = logged(log, target)
    expected: Counter = Counter()
    exchange_siblings(ws, [state.convs[conv_input_key(w, target)] for w in ws], {}, target, measure=landscape,
                      callback=lambda w, m: expected.update([(w.in_channels, m.index)]))
    assert set(expected.values()) == {3}  # each exchanged config timed in 3 rounds
    assert {ic for ic, _ in expected} == {8, 16}  # both ways
    got = marked(log)
    assert got == expected
    assert any(f"siblings' fastest configs ({host_cpu().name}): {sum(expected.values())} timings" in line
               for line in lines)
    text = log.read_text()
    again = tune(model, log, measure=landscape, **args)
    assert log.read_text() == text  # a rerun: nothing left to do, nothing timed on the workers either
    assert sum(r.exchanged for r in again.reports) == 0
    budget = tmp_path / "budget.log"  # under a --time-budget that the searches leave time of
    untils, real = [], cl._Run.exchange

    def exchange(self, *a, until=None):
        untils.append(until)
        return real(self, *a, until=until)

    t0 = time.time()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cl._Run, "exchange", exchange)
        tune(model, budget, measure=landscape, time_budget=1e6, **args)
    assert marked(budget) == got
    (until,) = untils  # the budget's end on the wall clock, the workers' clocks
    assert t0 + 1e6 <= until <= time.time() + 1e6

    marker, killed = tmp_path / "killed", tmp_path / "killed.log"
    pairs = {(ic, tuning_config(w, index)) for (ic, index) in expected for w in ws if w.in_channels == ic}
    tune(model, killed, measure=DieOnce(landscape, str(marker), 2, pairs), **args)
    assert marker.exists()  # a worker died in the exchange, its job ran again elsewhere
    assert content(killed)[0] == content(log)[0] and marked(killed) == got
    # each exchange timing made once, plus the one the kill cut short: the retry resumed
    # from what the dead worker had sent
    assert len(Path(f"{marker}.calls").read_text().splitlines()) == sum(expected.values()) + 1


def tuning_config(w, index: int):
    from kernels.tuner import tuning_space

    return tuning_space(w).config(index)


def test_the_writer_refuses_a_fourth_re_timing_after_retime(tmp_path):
    """After `tune --retime` a config's 3 records are all re-timings: a 4th that arrives (a
    replaced worker's, say) is not written."""
    from tqdm import tqdm

    from graph_tuner.cluster_jobs import ConvJob
    from graph_tuner.records import make_conv2d_record, format_record
    from kernels.tuner import tuning_space

    w = Conv2DWorkload((1, 16, 6, 6), (16, 16, 1, 1))
    target = host_target()
    space = tuning_space(w)
    entity = space.config_entity(space.config(5))
    rec = make_conv2d_record(w, entity, 5, [1e-4], target, origin=RETIME_ORIGIN)
    log = tmp_path / "t.log"
    log.write_text("\n".join([format_record(rec)] * 3) + "\n")
    group = cl.Group(host_cpu().name, log, [], state=logged(log, target))
    writer = cl._Writer([group], tqdm(disable=True))
    job = ConvJob("topic", 1, 1, w, 1, target, 4, None, 1, {}, {}, {})
    msg = {"index": 5, "confirmation": True, "line": format_record(rec), "attempt": "a", "seq": 0}
    try:
        assert writer._write(job, group, msg)
    finally:
        writer.close()
    assert len(log.read_text().splitlines()) == 3


STARTED = threading.Event()  # set by the first measurement of stranded_measure


def stranded_measure(workload, config):
    STARTED.set()
    time.sleep(0.05)
    return 1e-4 * (1 + config.ow_bn / 64)


def test_a_cpu_whose_last_worker_is_gone_for_good_stops_the_run_in_one_line(tmp_path, monkeypatch):
    """Jobs are pinned to their CPU's hosts: with its only machine gone (no nanny to restart it),
    the run waited forever, saying nothing. Now it stops, saying what to do, the records kept."""
    monkeypatch.setattr(cl, "STRANDED_S", 1.0)
    monkeypatch.setattr(cl, "STRANDED_CHECK", 0.1)
    STARTED.clear()
    log = tmp_path / "t.log"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, resources={"measure": 1},
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        remover = threading.Thread(target=lambda: STARTED.wait(120) and cluster.scale(0))
        remover.start()
        start = time.monotonic()
        with pytest.raises(cl.GraphTunerError, match=r"^no measuring worker on the \S+ host .* for 1 s, and their "
                                                     r"jobs run nowhere else .* rerun to resume$"):
            tune(write_tiny_onnx(tmp_path / "tiny.onnx"), log, trials=3, cluster=client, measure=stranded_measure,
                 progress=False)
        remover.join()
        assert time.monotonic() - start < 60
    assert STARTED.is_set()


def test_a_winograd_gemms_records_name_their_conv_locally_and_on_the_cluster(setup, tmp_path):
    """A GEMM's records name the conv its configs were timed as (WINOGRAD_FIELD), whether the
    tune runs here or on workers; the conv's own records name none. A log merged with another
    model's, holding the GEMM timed as that model's conv, resumes from none of those on workers
    either: the GEMM is searched as this conv, as much as in a log of its own."""
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.records import read_records
    from graph_tuner.winograd import candidate_gemm

    b = GraphBuilder("winograd")
    x = b.input((1, 32, 8, 8))
    m = b.build(b.conv(b.conv(x, 32, 3, padding=1, name="a"), 32, 1, name="b"))
    conv = m.workload(m.convs()[0])
    gemm = candidate_gemm(conv)
    assert gemm is not None
    for where in (None, setup[0].scheduler_address):
        log = tmp_path / f"{'local' if where is None else 'cluster'}.log"
        tune(m, log, measure=landscape, trials=4, cluster=where, progress=False, transforms=False, calibrate=False)
        recs = read_records(log).records
        assert {r.workload for r in recs} == {conv, gemm, m.workload(m.convs()[1])}
        assert all(r.winograd_of == (conv if r.workload == gemm else None) for r in recs)
    ours = sum(r.winograd_of == conv for r in recs)
    unpadded = Conv2DWorkload((1, 32, 10, 10), (32, 32, 3, 3))  # 8x8 outputs too: the same GEMM
    assert candidate_gemm(unpadded) == gemm
    merged = tmp_path / "merged.log"
    tune_workloads([(gemm, 1)], merged, trials=4, measure=landscape, progress=False, transforms=False,
                   winograd={gemm: unpadded})
    theirs = merged.read_text()
    tune(m, merged, measure=landscape, trials=4, cluster=setup[0].scheduler_address, progress=False,
         transforms=False, calibrate=False)
    assert merged.read_text().startswith(theirs)
    named = [r.winograd_of for r in read_records(merged).records]
    assert named.count(conv) == ours and named.count(unpadded) == theirs.count("\n")
