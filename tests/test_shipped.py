"""The shipped logs: data/<cpu>/<model>.log, this CPU's first."""
from __future__ import annotations

import re

import pytest

from graph_tuner import shipped
from graph_tuner.errors import GraphTunerError
from graph_tuner.records import read_records, target_cpu
from kernels.jit import host_cpu


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "DATA_DIR", tmp_path)
    return tmp_path


def _ship(data, cpu, model):
    (data / cpu).mkdir(exist_ok=True)
    (data / cpu / f"{model}.log").write_text("")
    return data / cpu / f"{model}.log"


def test_this_cpus_log_comes_first_then_any_other(data):
    host = host_cpu().name
    assert shipped.shipped_log("m") is None and shipped.shipped_models() == []
    other = _ship(data, "aaa-" + host, "m")  # sorts before the host's folder
    assert shipped.shipped_log("m") == other
    mine = _ship(data, host, "m")
    _ship(data, host, "n")
    assert shipped.shipped_log("m") == mine
    assert shipped.shipped_logs("m") == {"aaa-" + host: other, host: mine}
    assert shipped.shipped_models() == ["m", "n"]


@pytest.mark.parametrize("host, lanes, chosen", [("haswell", 8, "znver3"), ("sapphirerapids", 16, "emeraldrapids"),
                                                 ("x86-64", 4, "emeraldrapids")])
def test_without_this_cpus_log_another_of_its_vector_width_comes_first(data, monkeypatch, host, lanes, chosen):
    """On a CPU no log was tuned on, an AVX2 one gets the AVX2 CPU's log, not the AVX-512 one
    that sorts first (whose register tiles of twice the lanes spill there); with no log of its
    width, the first."""
    import dataclasses

    from kernels import jit

    monkeypatch.setattr(jit, "host_cpu", lambda: dataclasses.replace(host_cpu.__wrapped__(), name=host, lanes=lanes))
    logs = {cpu: _ship(data, cpu, "m") for cpu in ("emeraldrapids", "znver3")}
    assert shipped.shipped_log("m") == logs[chosen]


def test_each_shipped_log_sits_in_the_folder_of_the_cpu_it_was_tuned_on():
    logs = [(cpu, path) for model in shipped.shipped_models() for cpu, path in shipped.shipped_logs(model).items()]
    assert logs, "data/ ships no logs"
    for cpu, path in logs:
        log = read_records(path)
        assert {target_cpu(r.target) for r in (*log.records, *log.transforms)} == {cpu}, path


def test_a_folder_of_logs_gives_this_cpus(tmp_path):
    """``solve --records DIR``: DIR/<this cpu>/MODEL.log, as ``tune -o DIR/ --cluster`` writes;
    only another CPU's is a one-line error naming it."""
    host = host_cpu().name
    other = _ship(tmp_path, "aaa-" + host, "m")
    with pytest.raises(GraphTunerError, match=rf"no log of m for this CPU \({host}\).*logs of aaa-{host} "
                                              rf"\(--records {re.escape(str(other))} uses"):
        shipped.folder_log(tmp_path, "m")
    with pytest.raises(GraphTunerError, match="it has no n.log for any CPU"):
        shipped.folder_log(tmp_path, "n")
    mine = _ship(tmp_path, host, "m")
    assert shipped.folder_log(f"{tmp_path}/", "m") == mine
    (tmp_path / host / "g.log.gz").write_bytes(b"")
    assert shipped.folder_log(tmp_path, "g") == tmp_path / host / "g.log.gz"


@pytest.mark.parametrize("cpu, model", [(cpu, p.name.split(".log")[0])
                                        for cpu in ("znver4", "rocketlake", "emeraldrapids", "znver3")
                                        for p in sorted((shipped.DATA_DIR / cpu).iterdir())])
def test_the_bench_logs_time_every_step_and_carry_their_models_ratios(cpu, model, monkeypatch):
    # One log, one plan: a solve from these logs takes every other step's timing from the log
    # (graph_tuner_step records), so no step's timing noise can move a near-tie. Logs tuned
    # before session 26 lack the chains a conv may run as its input prologue (DenseNet's
    # bn -> relu), which only since then cost what they take where a plan runs them alone;
    # a log tuned or resumed since (rocketlake's DenseNet-121, every emeraldrapids and znver3 log) has
    # every step. (The znver5 logs predate step records.)
    from graph_tuner.api import GraphTuner
    from graph_tuner.executor import step_timing

    log = next(p for p in (shipped.DATA_DIR / cpu).iterdir() if p.name.split(".log")[0] == model)
    gt = GraphTuner(model, log)
    lacking = set(gt.flow.prologues) if cpu == "znver4" else set()
    timed = []
    monkeypatch.setattr(step_timing, "_memo", {})  # no timing of an earlier test (or case) answers
    monkeypatch.setattr(step_timing, "_time_step", lambda m, s, *a: timed.append(s.ops[0]) or 0.01)
    assert gt.benchmark_steps() > 0 and set(timed) <= lacking
    # ... and costs the plan at what the network paid: every in-network ratio is this model's
    # (its digest), none left unmatched.
    assert gt.log.network and {r.identity for r in gt.log.network} == {gt.model.digest}
    assert len(gt.network.convs) + len(gt.network.steps) + len(gt.network.transforms) > 0
