"""Kill `tune` at any point, rerun it: the log ends as an unkilled run's would.

Each test runs tests/tune_kill.py in a subprocess that SIGKILLs itself at a chosen point
of one phase (conv search, re-timing of the finalists, layout-transform measurement, or
halfway through writing a line), then reruns the same tuning to completion in-process and
compares the parsed log with the reference run's: the same records per config (so the
same configs and the same number of re-timings), the same transforms, nothing lost or
repeated. Timestamps and all_cost are left out: they differ between runs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import tune_kill
from graph_tuner import tuning
from graph_tuner.records import EXCHANGE_ORIGIN, ORIGIN_FIELD, read_records
from graph_tuner.tuning import finalist_budget
from kernels.tuner import CONFIRM_ROUNDS

ROOT = Path(__file__).resolve().parent.parent


def content(lines: list[str]) -> Counter:
    """What the whole lines of a log say, as a multiset of (task input, config index, costs,
    error_no): one per record, so a repeated record counts twice and a lost one is missed."""
    out: Counter = Counter()
    for line in lines:
        if line.endswith("\n"):
            obj = json.loads(line)
            inp, index, (costs, error_no) = obj["input"], obj["config"]["index"], obj["result"][:2]
            out[json.dumps(inp), index, json.dumps(costs), error_no] += 1
    return out


def log_content(log: Path) -> Counter:
    return content(log.read_text().splitlines(keepends=True))


def kill(log: Path, cache: Path, how: str, n: int) -> None:
    """Run tests/tune_kill.py into ``log`` in a subprocess that SIGKILLs itself at ``how`` ``n``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRAPH_TUNER_CACHE_DIR": str(cache)}
    script = ROOT / "tests" / "tune_kill.py"
    proc = subprocess.run([sys.executable, str(script), str(log), how, str(n)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr  # killed, not finished or failed


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The unkilled run: its log's content and where each phase's calls fall."""
    folder = tmp_path_factory.mktemp("reference")
    log = folder / "ref.log"
    transforms = []

    def timing(key):
        transforms.append(key)
        return tune_kill.transform_seconds(key)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPH_TUNER_CACHE_DIR", str(folder / "cache"))
        tune_kill.run(log, measure_transform=timing)
        text = log.read_text()
        tune_kill.run(log, measure=lambda w, c: 1 / 0, measure_transform=lambda key: 1 / 0)
        assert log.read_text() == text  # a finished run has nothing left to do
    convs = [json.loads(line) for line in text.splitlines()]
    convs = [obj for obj in convs if obj["input"][1] != "layout_transform"]
    # Conv measurement k (from 1) writes conv line k: per workload its search, then its re-timings.
    seen, phases = set(), []
    for obj in convs:
        key = (json.dumps(obj["input"]), obj["config"]["index"])
        phases.append("retime" if key in seen else "search")
        seen.add(key)
    first_w2 = next(k for k, obj in enumerate(convs, 1) if obj["input"] != convs[0]["input"])
    first_w3 = next(k for k, obj in enumerate(convs, 1) if obj["input"] not in (convs[0]["input"],
                                                                              convs[first_w2 - 1]["input"]))
    # The last conv lines: the siblings' fastest configs timed on each other, in CONFIRM_ROUNDS
    # rounds (graph_tuner.tuning.exchange_siblings), after every search; what a run without
    # the exchange writes comes first.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPH_TUNER_CACHE_DIR", str(folder / "cache"))
        mp.setattr(tuning, "exchange_siblings", lambda *a, **k: 0)
        tune_kill.run(folder / "plain.log", measure_transform=timing)
    plain = [line for line in (folder / "plain.log").read_text().splitlines() if "layout_transform" not in line]
    exchange = list(range(len(plain) + 1, len(convs) + 1))
    def same(obj) -> tuple:  # a record but for its timestamp and all_cost
        return json.dumps(obj["input"]), obj["config"]["index"], json.dumps(obj["result"][:2])

    assert [same(obj) for obj in convs[:len(plain)]] == [same(json.loads(line)) for line in plain]
    assert len(exchange) >= CONFIRM_ROUNDS and len(exchange) % CONFIRM_ROUNDS == 0
    # the exchange's records say so (a rerun keeps them out of its search), no other does
    marked = [k for k, obj in enumerate(convs, 1) if obj.get(ORIGIN_FIELD) == EXCHANGE_ORIGIN]
    assert marked == exchange
    assert {json.dumps(convs[k - 1]["input"]) for k in exchange} >= {json.dumps(convs[0]["input"])}
    retimes = [k for k, p in enumerate(phases, 1) if p == "retime" and k < exchange[0]]
    assert phases[:tune_kill.TRIALS[0]] == ["search"] * tune_kill.TRIALS[0]
    # each workload: its finalists (4 for the full budget, 2 for half of it), each re-timed in 3 rounds
    assert len(retimes) == sum(finalist_budget(tune_kill.TRIALS, tune_kill.CONFIRM)) * CONFIRM_ROUNDS == 24
    assert sum(obj["result"][1] != 0 for obj in convs) > 0  # failed measurements are part of it
    assert len(transforms) > 4 and len(text.splitlines()) == len(convs) + len(transforms)
    w1_retimes = [k for k in retimes if k < first_w2]
    points = {
        "search-first": 1, "search-mid": tune_kill.TRIALS[0] // 2, "retime-first": w1_retimes[0],
        "retime-round-2": w1_retimes[tune_kill.CONFIRM + 1], "retime-last": w1_retimes[-1],
        # dies in measurement n, n - 1 logged: 4 of the sibling's (a pair's end) or 5 (mid-pair)
        "second-workload-search": first_w2, "sibling-search-even": first_w3 + 4, "sibling-search-odd": first_w3 + 5,
        "exchange-first": exchange[0], "exchange-mid": exchange[len(exchange) // 2], "last-measurement": len(convs),
        "transform-first": 1, "transform-mid": len(transforms) // 2,
        "transform-last": len(transforms),
        "line-search": 3, "line-retime": w1_retimes[1], "line-transform": len(convs) + 2,
    }
    return log_content(log), points, len(convs), len(transforms)


@pytest.mark.parametrize("how, point", [
    ("measure", "search-first"), ("measure", "search-mid"), ("measure", "retime-first"),
    ("measure", "retime-round-2"), ("measure", "retime-last"),
    ("measure", "second-workload-search"), ("measure", "sibling-search-even"), ("measure", "sibling-search-odd"),
    ("measure", "exchange-first"), ("measure", "exchange-mid"), ("measure", "last-measurement"),
    ("transform", "transform-first"), ("transform", "transform-mid"),
    ("transform", "transform-last"),
    ("line", "line-search"), ("line", "line-retime"), ("line", "line-transform"),
])
def test_rerun_after_a_kill_ends_with_the_unkilled_log(how, point, reference, tmp_path,
                                                       monkeypatch):
    expected, points, n_convs, n_transforms = reference
    n = points[point]
    cache, log = tmp_path / "cache", tmp_path / "t.log"
    kill(log, cache, how, n)
    lines = log.read_text().splitlines(keepends=True)
    whole = [line for line in lines if line.endswith("\n")]
    if how == "measure":  # measurements 1..n-1 are in the log, flushed; nothing after
        assert len(lines) == len(whole) == n - 1
    elif how == "transform":  # every conv record, and the transforms timed before the kill
        assert len(lines) == len(whole) == n_convs + n - 1
    else:  # n-1 whole lines and half of the n-th
        assert len(lines) == n and len(whole) == n - 1
    assert content(lines) < expected  # the kill lost work a rerun must do

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(cache))
    tune_kill.run(log)
    assert log_content(log) == expected
    parsed = read_records(log)  # reads cleanly: no torn line left
    read = len(parsed.records) + len(parsed.transforms) + parsed.skipped_error
    assert read == sum(expected.values()) and len(parsed.transforms) == n_transforms


def test_rerun_after_two_kills_in_the_same_phase(reference, tmp_path, monkeypatch):
    """A rerun that is killed too, while finishing the re-timings, still ends right."""
    expected, points, _, _ = reference
    cache, log = tmp_path / "cache", tmp_path / "t.log"
    n = points["retime-round-2"]
    kill(log, cache, "measure", n)
    kill(log, cache, "measure", 2)  # the rerun dies in its 2nd: re-timings still missing
    assert len(log.read_text().splitlines()) == n  # n-1, then one more
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(cache))
    tune_kill.run(log)
    assert log_content(log) == expected


def test_a_rerun_at_other_trials_takes_no_exchanged_timing_for_its_search(tmp_path, monkeypatch):
    """The exchange's records are not search trials: a rerun at fewer trials finds all it
    needs in the log, and one at more makes exactly the extra search trials on every
    workload (the first workload's exchanged config is the fastest of its log)."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "t.log"
    tune_kill.run(log)
    text = log.read_text()

    def rerun(trials, measure=tune_kill.conv_seconds, measure_transform=tune_kill.transform_seconds):
        return tuning.tune_workloads(tune_kill.WORKLOADS, log, trials=trials, confirm=tune_kill.CONFIRM,
                                     measure=measure, measure_transform=measure_transform, progress=False)

    rerun([t - 4 for t in tune_kill.TRIALS], measure=lambda w, c: 1 / 0, measure_transform=lambda key: 1 / 0)
    assert log.read_text() == text
    summaries = rerun([t + 2 for t in tune_kill.TRIALS])
    assert [s.new for s in summaries] == [2, 2, 2]
    # Far longer: the search skips the exchanged configs (it would reach them) and re-times
    # none of them as a finalist; their 3 marked records stay all they have.
    rerun([t + 60 for t in tune_kill.TRIALS])
    records = Counter()
    for obj in map(json.loads, log.read_text().splitlines()):
        if obj["input"][1] != "layout_transform":
            records[json.dumps(obj["input"]), obj["config"]["index"], obj.get(ORIGIN_FIELD)] += 1
    exchanged = {(inp, i) for inp, i, origin in records if origin == EXCHANGE_ORIGIN}
    assert exchanged and all(records[inp, i, None] == 0 for inp, i in exchanged)
    assert all(records[inp, i, EXCHANGE_ORIGIN] == CONFIRM_ROUNDS for inp, i in exchanged)


def test_retime_keeps_the_exchange_records_marked_and_a_rerun_times_nothing(tmp_path, monkeypatch):
    """`tune --retime` replaces the finalists' records: an exchanged config's new ones stay
    marked, and the others' are all re-timings (marked too), so a later tune neither takes an
    exchanged config for a search trial nor makes a re-timing more."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "t.log"
    tune_kill.run(log)
    marked = lambda: sorted((json.dumps(o["input"]), o["config"]["index"])  # noqa: E731
                            for o in map(json.loads, log.read_text().splitlines())
                            if o.get(ORIGIN_FIELD) == EXCHANGE_ORIGIN)
    before = marked()
    assert before
    tuning.retime_workloads(tune_kill.WORKLOADS, log, measure=tune_kill.conv_seconds, confirm=tune_kill.CONFIRM,
                            progress=False)
    assert marked() == before
    text = log.read_text()
    tune_kill.run(log, measure=lambda w, c: 1 / 0, measure_transform=lambda key: 1 / 0)
    assert log.read_text() == text


def test_a_budget_with_time_left_exchanges_too(tmp_path, monkeypatch):
    """Under --time-budget the searches end at their trials here, and the exchange takes the
    time they left: the same marked records as a run without a budget."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    exchanged = []
    for name, budget in (("plain", None), ("budget", 1e6)):
        log = tmp_path / f"{name}.log"
        tuning.tune_workloads(tune_kill.WORKLOADS, log, trials=tune_kill.TRIALS, confirm=tune_kill.CONFIRM,
                              time_budget=budget, measure=tune_kill.conv_seconds,
                              measure_transform=tune_kill.transform_seconds, progress=False)
        exchanged.append(Counter((json.dumps(o["input"]), o["config"]["index"])
                                 for o in map(json.loads, log.read_text().splitlines())
                                 if o.get(ORIGIN_FIELD) == EXCHANGE_ORIGIN))
    assert exchanged[0] and exchanged[1] == exchanged[0]


def test_the_exchange_ends_with_the_budget(tmp_path, monkeypatch):
    """Under --time-budget the exchange's deadline is the budget's end (perf_counter)."""
    import time

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    deadlines, real = [], tuning.exchange_siblings

    def exchange(*a, deadline=None, **kw):
        deadlines.append(deadline)
        return real(*a, deadline=deadline, **kw)

    monkeypatch.setattr(tuning, "exchange_siblings", exchange)
    for budget in (None, 600.0):
        t0 = time.perf_counter()
        tuning.tune_workloads(tune_kill.WORKLOADS, tmp_path / f"{budget}.log", trials=tune_kill.TRIALS,
                              confirm=tune_kill.CONFIRM, time_budget=budget, measure=tune_kill.conv_seconds,
                              transforms=False, progress=False)
    assert deadlines[0] is None and t0 + 600 <= deadlines[1] <= time.perf_counter() + 600
