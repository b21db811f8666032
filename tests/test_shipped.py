"""The shipped logs: data/<cpu>/<model>.log, this CPU's first."""
from __future__ import annotations

import pytest

from graph_tuner import shipped
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


def test_each_shipped_log_sits_in_the_folder_of_the_cpu_it_was_tuned_on():
    logs = [(cpu, path) for model in shipped.shipped_models() for cpu, path in shipped.shipped_logs(model).items()]
    assert logs, "data/ ships no logs"
    for cpu, path in logs:
        log = read_records(path)
        assert {target_cpu(r.target) for r in (*log.records, *log.transforms)} == {cpu}, path
