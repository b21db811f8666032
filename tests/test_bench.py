"""`graph-tuner bench`: regression flagging and results files, on synthetic results (no timing but
the host probe's)."""
from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace

import numpy as np
import pytest

from graph_tuner import bench, bench_history, plan_run, rounds, runtimes
from graph_tuner.cli import main


def _results(**medians):
    runtimes = {k: (None if v is None else {"median_ms": v, "p90_ms": v * 1.1}) for k, v in medians.items()}
    return {"models": {"resnet-18": {"runtimes": runtimes, "notes": []}}}


def test_regressions_above_five_percent_only():
    prev = _results(graph_tuned=10.0, history_best=12.0, default=None, onnxruntime=20.0)
    cur = _results(graph_tuned=10.49, history_best=12.7, default=15.0, onnxruntime=19.0)
    flagged = bench_history.find_regressions(cur, prev)
    assert [(r.runtime, r.previous_ms, r.current_ms) for r in flagged] == [("history_best", 12.0, 12.7)]
    assert flagged[0].change == pytest.approx(0.7 / 12)
    # A model or runtime missing from the previous file is not a regression.
    cur["models"]["resnet-50"] = _results(graph_tuned=99.0)["models"]["resnet-18"]
    assert len(bench_history.find_regressions(cur, prev)) == 1
    assert bench_history.find_regressions(cur, prev, threshold=0.10) == []


def test_previous_results_is_the_newest_other_readable_file(tmp_path):
    assert bench_history.previous_results(tmp_path) is None
    (tmp_path / "2026-01-01T000000.json").write_text(json.dumps(_results(graph_tuned=1.0)))
    (tmp_path / "2026-02-01T000000.json").write_text(json.dumps(_results(graph_tuned=2.0)))
    (tmp_path / "2026-03-01T000000.json").write_text("{truncated")
    path, data = bench_history.previous_results(tmp_path)
    assert path.name == "2026-02-01T000000.json"
    assert bench_history.previous_results(tmp_path, exclude=path)[0].name == "2026-01-01T000000.json"


def test_previous_results_come_from_the_same_machine(tmp_path):
    here = {"cpu": "znver3", "threads": 2, "lanes": 8}
    for stamp, machine in [("2026-01-01T000000", here), ("2026-02-01T000000", {**here, "cpu": "rocketlake"}),
                           ("2026-03-01T000000", {**here, "threads": 1})]:
        (tmp_path / f"{stamp}.json").write_text(json.dumps({**_results(graph_tuned=1.0), "machine": machine}))
    assert bench_history.previous_results(tmp_path, machine=here)[0].name == "2026-01-01T000000.json"
    assert bench_history.previous_results(tmp_path, machine={**here, "cpu": "skylake"}) is None
    assert bench_history.previous_results(tmp_path)[0].name == "2026-03-01T000000.json"


@pytest.mark.parametrize("shipped_cpu", ["host", "other"])
def test_the_shipped_log_is_used_only_on_the_cpu_it_was_tuned_on(tmp_path, monkeypatch, shipped_cpu):
    from kernels.jit import host_cpu
    from graph_tuner.records import make_conv2d_record, format_record
    from kernels.workload import Conv2DWorkload
    import graph_tuner.tuning as tuning
    from graph_tuner import shipped

    cpu = host_cpu().name if shipped_cpu == "host" else "not-" + host_cpu().name
    data = tmp_path / "data"
    (data / cpu).mkdir(parents=True)
    rec = make_conv2d_record(Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1)), {"tile_ic": [-1, 8], "tile_oc": [-1, 8],
                             "tile_ow": [-1, 4], "tile_oh": 1}, 0, [1e-3], f"llvm -mcpu={cpu}", timestamp=0.0)
    (data / cpu / "m.log").write_text(format_record(rec) + "\n")
    tuned = []
    monkeypatch.setattr(shipped, "DATA_DIR", data)
    monkeypatch.setattr(tuning, "tune_model", lambda name, path, **kw: tuned.append((name, path, kw["trials"])))
    log, note = bench.tuning_log("m", tmp_path / "work", trials=7, progress=False)
    if shipped_cpu == "host":
        assert (log, note, tuned) == (data / cpu / "m.log", None, [])
    else:
        assert log == tmp_path / "work" / f"m-{host_cpu().name}.log" and tuned == [("m", log, 7)]
        assert cpu in note and host_cpu().name in note


def test_bench_models_writes_results_chart_and_flags(tmp_path, monkeypatch):
    medians = iter([10.0, 11.0])  # second run: graph_tuned 10% slower

    def fake_bench_model(name, **kwargs):
        m = next(medians)
        return {"log": "x.log", "threads": 2, "batch": 1, "notes": [],
                "runtimes": {"graph_tuned": {"median_ms": m, "p90_ms": m + 1}, "history_best": None,
                             "default": {"median_ms": 12.0, "p90_ms": 13.0}, "onnxruntime": {"median_ms": 20.0,
                                                                                              "p90_ms": 21.0},
                             "pytorch": None}}

    monkeypatch.setattr(bench, "bench_model", fake_bench_model)
    first, r1 = bench.bench_models(["resnet-18"], tmp_path, now=dt.datetime(2026, 1, 1, 12, 0, 0))
    assert first.name == "2026-01-01T120000.json" and r1["previous"] is None and r1["regressions"] == []
    assert r1["machine"]["fma_peak_gflops"] > 0  # the roofline's rate, measured once per run
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # the chart needs the [bench] extra; without it, a note says so
        assert r1["chart"] is None and any("matplotlib" in n for n in r1["notes"])
        assert not first.with_suffix(".png").exists()
    else:
        assert first.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    second, r2 = bench.bench_models(["resnet-18"], tmp_path, now=dt.datetime(2026, 1, 2, 12, 0, 0))
    assert r2["previous"] == str(first)
    assert r2["regressions"] == ["resnet-18 graph_tuned: 10.000 -> 11.000 ms (+10.0%); onnxruntime +0.0% in the same "
                                 "runs, so +10.0% relative"]
    assert json.loads(second.read_text())["regressions"] == r2["regressions"] and r2["machine_slower"] == []


def test_a_slowdown_onnxruntime_shares_is_the_machine():
    """Measured against onnxruntime in the same runs: the host's drift is not a regression."""
    prev = _results(graph_tuned=10.0, history_best=12.0, default=14.0, onnxruntime=20.0)
    cur = _results(graph_tuned=11.5, history_best=14.5, default=14.5, onnxruntime=22.0)  # onnxruntime +10%
    flagged = {r.runtime: r for r in bench_history.find_regressions(cur, prev)}
    assert set(flagged) == {"graph_tuned", "history_best", "onnxruntime"}  # default +3.6%: not flagged at all
    assert flagged["graph_tuned"].relative_change == pytest.approx(1.15 / 1.1 - 1)
    assert flagged["graph_tuned"].machine()  # +4.5% relative: the host
    assert not flagged["history_best"].machine()  # +9.8% relative: ours
    assert flagged["onnxruntime"].yardstick is None and flagged["onnxruntime"].machine()  # not our code
    no_ort = _results(graph_tuned=11.5, onnxruntime=None)
    assert not bench_history.find_regressions(no_ort, prev)[0].machine()  # without the yardstick: flagged


def test_bench_cli_rejects_unknown_models(capsys):
    assert main(["bench", "resnet-17"]) == 2
    assert "unknown model 'resnet-17'" in capsys.readouterr().err


def test_retimed_cost_sums_every_layer_and_transform_timing_each_once(monkeypatch):
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.executor import uniform_plan

    b = GraphBuilder("t")
    x = b.input((1, 8, 6, 6))
    y = b.conv(b.conv(x, 16, 3, padding=1, name="c1"), 16, 3, padding=1, name="c2")
    m = b.build(b.global_avg_pool(b.conv(y, 16, 3, padding=1, name="c3")))
    plan = uniform_plan(m, 16)  # c2 and c3: same workload and config; data -> NCHW8c, output -> NCHW
    calls = []

    class FakeTimer:
        def __init__(self):
            self.epilogues = {}

        def __call__(self, workload, config):
            calls.append(self.epilogues.get(workload, {}).get("activation") or "conv")
            return 1e-3 * workload.in_channels / 8  # c1: 1 ms, c2 and c3: 2 ms

    monkeypatch.setattr("kernels.tuner.KernelTimer", FakeTimer)
    monkeypatch.setattr("kernels.transform_bench.time_transform", lambda key: calls.append("t") or 1e-4)
    assert len(plan.transforms) == 2
    assert plan_run.retimed_cost_ms(plan) == pytest.approx(1 + 2 + 2 + 0.1 + 0.1)
    assert calls.count("conv") == 2 and calls.count("t") == 2
    # At in-network ratios (step name -> ratio, 1 where absent): each name its own.
    label = plan.transforms[0].label
    assert plan_run.retimed_cost_ms(plan, ratios={"c1": 2.0, "c3": 1.5, label: 3.0}) == pytest.approx(
        2 * 1 + 2 + 1.5 * 2 + 3 * 0.1 + 0.1)
    # With the model, each layer is timed with the epilogue the executor fuses into it:
    # c2 and c3 share a workload and config but not an epilogue (c2 -> relu).
    b = GraphBuilder("t")
    x = b.input((1, 8, 6, 6))
    y = b.relu(b.conv(b.conv(x, 16, 3, padding=1, name="c1"), 16, 3, padding=1, name="c2"))
    m = b.build(b.global_avg_pool(b.conv(y, 16, 3, padding=1, name="c3")))
    calls.clear()
    assert plan_run.retimed_cost_ms(uniform_plan(m, 16), m) == pytest.approx(1 + 2 + 2 + 0.1 + 0.1)
    assert sorted(calls) == ["conv", "conv", "relu", "t", "t"]


def test_paired_ratio_cancels_drift_shared_by_a_round():
    """Both runtimes slow down 3x in the middle rounds: the paired ratio stays 1.2, while the
    pooled medians would mix fast and slow rounds."""
    graph = [[1.0, 1.1], [3.0, 3.3], [3.1, 3.0], [1.0, 1.0], [1.05, 1.0]]
    other = [[1.2 * t for t in r] for r in graph]
    ratio, lo, hi = rounds.paired_ratio(other, graph)
    assert ratio == pytest.approx(1.2) and lo == pytest.approx(1.2) and hi == pytest.approx(1.2)
    noisy = [[t * f for t in r] for r, f in zip(other, (1.0, 1.3, 0.9, 1.1, 1.0))]
    ratio, lo, hi = rounds.paired_ratio(noisy, graph)
    assert lo <= ratio <= hi and lo < 1.2 * 1.05 and hi > 1.2


def test_each_runtime_turn_starts_after_a_pause(monkeypatch):
    """No runtime is timed while the previous one's workers still spin (onnxruntime's made the
    next runtime up to 2x slower for tens of milliseconds)."""
    events = []
    monkeypatch.setattr(rounds.time, "sleep", lambda s: events.append(("pause", s)))
    runners = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    samples = rounds.timed_rounds(runners, repeat=6, rounds=3)
    assert [len(r) for r in samples["a"]] == [2, 2, 2] and [len(r) for r in samples["b"]] == [2, 2, 2]
    pause = [("pause", rounds.SETTLE_S)]
    a, b = pause + ["a"] * 3, pause + ["b"] * 3  # a turn: the pause, a warm-up call, 2 timed calls
    assert events == a + b + b + a + a + b  # the order rotates from round to round


def test_onnxruntime_workers_stop_spinning_when_a_run_returns(tmp_path, calls_to):
    """By default onnxruntime's workers spin on after a run and take a core from the runtime
    timed next; the session it is benchmarked with stops them when a run returns."""
    ort = pytest.importorskip("onnxruntime")
    import numpy as np

    from graph_tuner.builder import GraphBuilder

    b = GraphBuilder("tiny")
    model = b.build(b.relu(b.conv(b.input((1, 4, 6, 6)), 8, 3, padding=1, name="c"), name="r"))
    params = model.params(seed=0)
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    opened = calls_to(ort, "InferenceSession")
    run, out = runtimes.onnxruntime_runner(model, params, x, 2, tmp_path)
    assert out.shape == (1, 8, 6, 6)
    assert [args[1].get_session_config_entry("session.force_spinning_stop") for args, _ in opened] == ["1"]


def test_openvino_runs_our_weights_in_f32(tmp_path, calls_to):
    """OpenVINO computes the same function as the reference, compiled with f32 set explicitly
    (its default may be bf16 on CPUs that have it), the latency hint and the bench's threads."""
    ov = pytest.importorskip("openvino")
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.executor.reference import run_reference

    b = GraphBuilder("tiny")
    model = b.build(b.relu(b.conv(b.input((1, 4, 6, 6)), 8, 3, padding=1, name="c"), name="r"))
    params = model.params(seed=0)
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    compiled = calls_to(ov.Core, "compile_model")
    run, out = runtimes.openvino_runner(model, params, x, 2, tmp_path)
    run()
    np.testing.assert_allclose(out, run_reference(model, params, x)[0], rtol=1e-4, atol=1e-4)
    [(args, _)] = compiled
    assert args[-1] == {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": 2,
                        "INFERENCE_PRECISION_HINT": "f32"}


def test_slower_cores_make_a_slowdown_the_machine():
    """Our plans slowed more than onnxruntime on slower cores (session 7): the host probe tells."""
    def with_host(results, rounds):
        results["models"]["resnet-18"]["host"] = {"conv_gflops_rounds": rounds}
        return results

    prev = with_host(_results(graph_tuned=10.0, onnxruntime=20.0), [90.0, 85.0, 95.0])
    slow = with_host(_results(graph_tuned=11.0, onnxruntime=20.0), [60.0, 67.5, 90.0])  # median -25%
    [r] = bench_history.find_regressions(slow, prev)
    assert r.host_change == pytest.approx(67.5 / 90 - 1) and r.machine() and "cores -25.0%" in str(r)
    same = with_host(_results(graph_tuned=11.0, onnxruntime=20.0), [88.5, 60.0, 95.0])  # median -1.7%: ours
    [r] = bench_history.find_regressions(same, prev)
    assert not r.machine()
    [r] = bench_history.find_regressions(_results(graph_tuned=11.0, onnxruntime=20.0), prev)  # no probe now: ours
    assert r.host_change is None and not r.machine()
    # Another probe (session 30's buffers read it about 1.3x higher): its readings do not compare.
    newer = with_host(_results(graph_tuned=11.0, onnxruntime=20.0), [60.0, 67.5, 90.0])
    newer["models"]["resnet-18"]["host"]["probe_version"] = 2
    [r] = bench_history.find_regressions(newer, prev)
    assert r.host_change is None and not r.machine()


def test_the_host_probe_is_timed_in_the_rounds_like_a_runtime():
    from graph_tuner.host_state import describe, probe, probe_call, speed

    call, flops = probe_call()
    by_round = rounds.timed_rounds({"a": lambda: None, bench.HOST_PROBE: call}, repeat=6, settle_s=0)
    host = {"conv_gflops_rounds": [flops / np.median(r) / 1e9 for r in by_round[bench.HOST_PROBE]]}
    assert len(host["conv_gflops_rounds"]) == 3 and all(g > 0.1 for g in host["conv_gflops_rounds"])
    assert min(host["conv_gflops_rounds"]) <= speed(host) <= max(host["conv_gflops_rounds"])
    assert describe(host).startswith("one-thread conv ") and probe() > 0.1


def test_the_fork_join_probe_times_one_call_of_the_thread_pool(monkeypatch):
    """A reading is one call's microseconds (a timing covers FORK_JOIN_CALLS calls); the
    process keeps the fastest per thread count, and a reading over 1.5x it is the slow phase."""
    import kernels.timing as timing
    from graph_tuner import host_state

    calls = host_state.fork_join_call()
    calls()  # the real probe runs
    medians = iter([200e-6, 320e-6, 150e-6])  # seconds per timing of FORK_JOIN_CALLS calls
    monkeypatch.setattr(timing, "measure", lambda *a, **k: SimpleNamespace(median_s=next(medians)))
    assert host_state.FORK_JOIN_CALLS == 100 and host_state.lowest_fork_join_us() is None
    assert not host_state.in_slow_phase(5.0)  # nothing read yet: no phase known
    assert host_state.fork_join_us(calls) == pytest.approx(2.0)
    assert host_state.fork_join_us(calls) == pytest.approx(3.2) and host_state.lowest_fork_join_us() == pytest.approx(2.0)
    assert host_state.in_slow_phase(3.2) and not host_state.in_slow_phase(2.9)
    assert host_state.fork_join_us(calls) == pytest.approx(1.5) and host_state.lowest_fork_join_us() == pytest.approx(1.5)
    monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", "1")  # another thread count: its own fastest
    assert host_state.lowest_fork_join_us() is None


def test_prediction_checks_take_medians_of_alternating_rounds(monkeypatch):
    """Profile and re-timing alternate over the plans; one disturbed round does not decide."""
    from graph_tuner.executor.program import Profile, StepTime

    order = []

    class FakeProgram:
        def __init__(self, name, conv_ms):
            self.name, self.conv_ms = name, iter(conv_ms)

        def profile(self, repeat):
            order.append(("profile", self.name))
            return Profile([StepTime("c", "conv", [], next(self.conv_ms), 9.0),
                            StepTime("t", "transform", [], 1.0, 1.0),
                            StepTime("p", "other", [], 0.5, None)])  # not costed: not in measured_planned_ms

    retimes = {"a": iter([10.0, 30.0, 11.0]), "b": iter([5.0, 5.0, 6.0])}

    given = {}

    def fake_retimed(plan, model=None, ratios=None):
        order.append(("retime", plan))
        given[plan] = ratios
        return next(retimes[plan])

    monkeypatch.setattr(plan_run, "retimed_cost_ms", fake_retimed)
    programs = {"a": FakeProgram("a", [9.0, 37.0, 10.0]), "b": FakeProgram("b", [4.0, 4.5, 4.2])}
    checks = plan_run.prediction_checks(programs, {"a": "a", "b": "b"}, model=None, repeat=30, ratios={"a": {"c": 2.0}})
    assert given == {"a": {"c": 2.0}, "b": None}  # each plan re-timed at its own ratios (b: none given)
    assert order[:4] == [("profile", "a"), ("retime", "a"), ("profile", "b"), ("retime", "b")] and len(order) == 12
    assert [s.median_ms for s in checks["a"].pop("profile").steps] == [10.0, 1.0, 0.5]  # each step's median
    assert checks["a"] == {"retimed_predicted_ms": 11.0, "measured_planned_ms": 11.0,
                           "by_category_ms": {"conv": 10.0, "transform": 1.0, "other": 0.5}}
    assert checks["b"]["measured_planned_ms"] == pytest.approx(5.2) and checks["b"]["retimed_predicted_ms"] == 5.0


@pytest.mark.parametrize("damaged", [
    {"models": ["resnet-18"]},
    {"models": {"resnet-18": {"runtimes": {"graph_tuned": {"median_ms": "fast"}}}}},
    {"models": {"resnet-18": {"runtimes": ["graph_tuned"]}}},
    {"models": {"resnet-18": {"runtimes": {}, "host": [1, 2]}}},
    {"models": {}, "machine": "znver5"},
    [1, 2, 3],
])
def test_a_damaged_results_file_is_no_baseline(damaged, tmp_path):
    (tmp_path / "2026-01-01T000000.json").write_text(json.dumps(_results(graph_tuned=1.0)))
    (tmp_path / "2026-02-01T000000.json").write_text(json.dumps(damaged))
    path, data = bench_history.previous_results(tmp_path)
    assert path.name == "2026-01-01T000000.json"
    assert bench_history.find_regressions(_results(graph_tuned=2.0), data)  # and it still compares with the good one


def test_the_goal_is_ten_percent_under_the_fastest_rival_unless_the_roofline_forbids_it():
    runs = {"graph_tuned": {"median_ms": 10.0}, "history_best": {"median_ms": 5.0},  # our own plans: no rivals
            "openvino": {"median_ms": 10.5}, "onnxruntime": {"median_ms": 12.0}, "pytorch": None}
    t = bench.target(runs, roofline_ms=4.0)
    assert t["bound_by"] == "openvino" and t["target_ms"] == pytest.approx(10.5 / 1.1) and not t["met"]
    assert t["peak_share"] == pytest.approx(0.4)
    t = bench.target(runs, roofline_ms=9.8)  # 10.5 / 1.1 is beyond 95% of the roofline
    assert t["bound_by"] == "roofline" and t["target_ms"] == pytest.approx(9.8 / 0.95) and t["met"]
    alone = bench.target({"graph_tuned": {"median_ms": 1.0}}, 1.0)  # no rival measured: the roofline's goal
    assert alone["bound_by"] == "roofline" and alone["met"]


def test_the_goal_weighs_rivals_by_their_paired_ratio_not_their_medians():
    """Session 25: OpenVINO's median was 1.097x ours (29.34 / 26.76 ms, "missed"), its paired
    ratio 1.117x (1.071-1.137): met, but not clear of noise. A rival closer by the pairing wins."""
    runs = {"graph_tuned": {"median_ms": 26.76},
            "openvino": {"median_ms": 29.34, "vs_graph_tuned": {"ratio": 1.117, "interval90": [1.071, 1.137]}},
            "onnxruntime": {"median_ms": 28.0, "vs_graph_tuned": {"ratio": 1.221, "interval90": [1.196, 1.245]}}}
    t = bench.target(runs, roofline_ms=17.8)
    assert t["bound_by"] == "openvino" and t["met"] and not t["clear"]
    assert t["target_ms"] == pytest.approx(26.76 * 1.117 / 1.1) and t["rival_ratio"] == 1.117
    runs["openvino"]["vs_graph_tuned"] = {"ratio": 1.09, "interval90": [1.05, 1.12]}
    assert not bench.target(runs, roofline_ms=17.8)["met"]
    runs["openvino"]["vs_graph_tuned"] = {"ratio": 1.15, "interval90": [1.11, 1.19]}
    t = bench.target(runs, roofline_ms=17.8)
    assert t["met"] and t["clear"]


def test_the_roofline_line_says_when_winograd_convs_multiply_less_than_it_counts():
    """A share of the FMA peak over 100% (ResNet-18's plan read 160%) is a plan whose Winograd
    convs do fewer multiplications than the direct convs the roofline counts: the line says how
    many of its convs run so, and says nothing for a plan without any."""
    import dataclasses

    from graph_tuner.builder import GraphBuilder
    from graph_tuner.executor import uniform_plan
    from winograd_plans import as_winograd

    b = GraphBuilder("three")
    x = b.relu(b.conv(b.input((1, 32, 16, 16)), 32, 3, padding=1, name="a"))
    x = b.relu(b.conv(x, 32, 3, padding=1, name="b"))
    plan = uniform_plan(b.build(b.conv(x, 32, 1, name="c")), 16)
    assert bench.winograd_note(plan) == ""
    note = bench.winograd_note(dataclasses.replace(plan, layers=[as_winograd(plan.layers[0]), *plan.layers[1:]]))
    assert "1 of its 3 run as Winograd" in note
