"""Calibration (graph_tuner.calibration): plans re-costed with their in-network times.

The network is simulated: each conv candidate "runs in the network" at its alone time
times a factor (what a run reports), and :func:`calibrate` must reach the plan brute force
finds for those in-network costs, measuring only what plans use.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from graph_tuner import GraphTuner
from graph_tuner.calibration import InNetworkCosts, calibrate, restricted
from test_graph_tuner_cost_model import (RESIDUAL_CONCAT_CHANNELS, brute_force, draw_candidates, records_for,
                                         residual_concat_net, tcost)

@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Transforms measured here go to a cache of the test's own, never the user's."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))


SHAPES = RESIDUAL_CONCAT_CHANNELS


def tuner(model, cands):
    gt = GraphTuner(model, records_for(model, cands), target="llvm -mcpu=test")
    for shape, a, b in gt.required_transforms():
        gt.transforms.add(shape, a, b, tcost(shape, a, b))
    return gt


def fake_network(factor):
    """A measure: each chosen conv's in-network / alone ratio is ``factor(layer, in, out)``,
    transforms run as alone; counts the runs."""
    runs = []

    def measure(plan):
        runs.append(plan)
        out = {t.label: 1.0 for t in plan.transforms}
        out.update({lc.name: factor(lc.name, lc.in_block, lc.out_block) for lc in plan.layers})
        return out

    return measure, runs


def run_calibration(model, cands, factor, max_rounds=20):
    gt = tuner(model, cands)
    measure, runs = fake_network(factor)

    def solve(costs, only=None):
        from graph_tuner.selection import select_measuring

        return select_measuring(gt.flow, costs.candidates(restricted(gt.candidates, only)), costs.transform_costs(gt.transforms.seconds),
                                None, gt._blocks(), method="dp")

    return calibrate(solve, measure, max_rounds=max_rounds), runs


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_layer_factors_reach_the_in_network_optimum(data):
    """Each layer slows down (or speeds up) alike for all its candidates: the bound holds, so
    calibration reaches brute force's optimum of the in-network costs, and returns it unless
    the first (alone-timed) plan is within SWITCH_MARGIN of it."""
    from graph_tuner.calibration import SWITCH_MARGIN, choices

    model = residual_concat_net()
    cands = draw_candidates(data)
    factors = {name: data.draw(st.floats(0.5, 3.0)) for name in SHAPES}
    (plan, cal), runs = run_calibration(model, cands, lambda n, i, o: factors[n])
    in_network = {n: [(i, o, t * factors[n]) for i, o, t in cs] for n, cs in cands.items()}
    assert cal.converged
    best = brute_force(model, in_network, (1, 2, 4, 8)) * 1e3
    if plan.cost != pytest.approx(best, rel=1e-9):
        assert choices(plan) == choices(runs[0]) and best <= plan.cost <= best / (1 - SWITCH_MARGIN) + 1e-12
    assert plan.kernel_ms + plan.transform_ms == pytest.approx(plan.cost)
    assert cal.rounds == len(runs) <= 1 + len(SHAPES) * 3


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_any_factors_stop_at_a_plan_costed_in_the_network(data):
    """Factors per candidate (the bound may fail): calibration still stops, and a converged
    plan's every conv cost is its in-network time."""
    model = residual_concat_net()
    cands = draw_candidates(data)
    factor = {(n, i, o): data.draw(st.floats(0.5, 3.0)) for n, cs in cands.items() for i, o, _ in cs}
    (plan, cal), runs = run_calibration(model, cands, lambda n, i, o: factor[(n, i, o)], max_rounds=4)
    assert cal.rounds == len(runs) <= 4
    if cal.converged:
        times = {(n, i, o): t for n, cs in cands.items() for i, o, t in cs}
        for lc in plan.layers:
            want = times[(lc.name, lc.in_block, lc.out_block)] * factor[(lc.name, lc.in_block, lc.out_block)]
            assert lc.time_ms == pytest.approx(want * 1e3)
    else:
        assert "still estimates" in cal.note


@settings(max_examples=10, deadline=None)
@given(st.data())
def test_the_plan_chosen_is_a_plan_run_at_the_costs_the_runs_measured(data):
    """A layer's in-network factor depends on the rest of the plan (its neighbours, its
    buffers): calibration returns one of the plans it ran, each conv costed by the factor its
    own run gave, and no costlier than the first (alone-timed) plan as its own run costed it."""
    from graph_tuner.calibration import choices

    model = residual_concat_net()
    cands = draw_candidates(data)
    weight = {n: data.draw(st.floats(0.0, 1.0)) for n in SHAPES}
    given_in, runs = {}, []

    def measure(plan):
        plain = sum(lc.in_block == 1 for lc in plan.layers)  # how the rest of the plan shapes a layer's state
        factors = {lc.name: 1.0 + weight[lc.name] * plain for lc in plan.layers}
        given_in[choices(plan)] = factors
        runs.append(plan)
        return {**{t.label: 1.0 for t in plan.transforms}, **factors}

    gt = tuner(model, cands)

    def solve(costs, only=None):
        from graph_tuner.selection import select_measuring

        return select_measuring(gt.flow, costs.candidates(restricted(gt.candidates, only)),
                                costs.transform_costs(gt.transforms.seconds), None, gt._blocks(), method="dp")

    plan, cal = calibrate(solve, measure, max_rounds=6)
    times = {(n, i, o): t for n, cs in cands.items() for i, o, t in cs}
    assert cal.converged and choices(plan) in given_in
    own = given_in[choices(plan)]
    for lc in plan.layers:
        assert lc.time_ms == pytest.approx(times[(lc.name, lc.in_block, lc.out_block)] * own[lc.name] * 1e3)
    first = runs[0]  # the alone-timed plan, at what its own run measured
    first_cost = sum(times[(lc.name, lc.in_block, lc.out_block)] * given_in[choices(first)][lc.name]
                     for lc in first.layers) * 1e3 + first.transform_ms
    assert plan.cost <= first_cost + 1e-9


def test_a_stale_log_time_gives_way_to_its_re_timing():
    """Where the log's time of a measured config is off (a stale record), its cost is its
    re-timing alone times its ratio, at the level of the log (the median of log / re-timed);
    the others keep the log's time times their ratio."""
    model = residual_concat_net()
    cands = {n: [(8 if ci % 8 == 0 else 1, co, 1e-5)] for n, (ci, co) in SHAPES.items()}
    stale = sorted(SHAPES)[0]

    def measure(plan):  # the host runs at half speed: every alone re-timing 2x the log's, the stale one 1x
        return {**{t.label: 1.0 for t in plan.transforms},
                **{lc.name: (1.5, 1e-2 if lc.name == stale else 2e-2) for lc in plan.layers}}

    gt = tuner(model, cands)

    def solve(costs, only=None):
        from graph_tuner.selection import select_measuring

        return select_measuring(gt.flow, costs.candidates(restricted(gt.candidates, only)), costs.transform_costs(gt.transforms.seconds),
                                None, gt._blocks(), method="dp")

    plan, cal = calibrate(solve, measure)
    assert cal.converged
    for lc in plan.layers:
        assert lc.time_ms == pytest.approx((0.5 if lc.name == stale else 1.0) * 1.5e-2)


def test_records_carry_in_network_times():
    model = residual_concat_net()
    cands = {n: [(8 if ci % 8 == 0 else 1, co, 1e-5)] for n, (ci, co) in SHAPES.items()}
    (plan, cal), _ = run_calibration(model, cands, lambda n, i, o: 2.0)
    assert cal.converged and cal.rounds == 1
    for line in plan.records_text().splitlines():
        assert json.loads(line)["result"][0] == [pytest.approx(2e-5)]


def test_a_run_that_does_not_show_a_cost_stops_the_loop():
    model = residual_concat_net()
    cands = {n: [(1, 1, 1e-5), (8 if ci % 8 == 0 else 1, co, 2e-5)] for n, (ci, co) in SHAPES.items()}
    gt = tuner(model, cands)

    def solve(costs, only=None):
        from graph_tuner.selection import select_measuring

        return select_measuring(gt.flow, costs.candidates(restricted(gt.candidates, only)), gt.transforms.seconds, None, gt._blocks())

    plan, cal = calibrate(solve, lambda p: {}, max_rounds=5)
    assert cal.rounds == 1 and not cal.converged and "still estimates" in cal.note


def test_step_and_transform_costs_scale_by_the_median_measured_ratio():
    costs = InNetworkCosts(steps={("pool", 8): 3.0, ("pool", 16): 4.0}, transforms={((1, 8, 4, 4), 1, 8): 2.0})
    got = costs.step_costs({"pool": {8: 1.0, 16: 2.0, 32: 2.0}, "fc": {1: 5.0}})
    assert got == {"pool": {8: 3.0, 16: 8.0, 32: 7.0}, "fc": {1: 5.0}}  # ratios 3 and 4: 32 at 3.5x
    got = costs.transform_costs({((1, 8, 4, 4), 1, 8): 2e-6, ((1, 8, 4, 4), 8, 1): 1e-6, ((1, 4, 2, 2), 1, 4): 1e-6})
    assert got == {((1, 8, 4, 4), 1, 8): 4e-6, ((1, 8, 4, 4), 8, 1): 2e-6, ((1, 4, 2, 2), 1, 4): 1e-6}


def test_cli_solve_calibrates_on_this_cpu(tiny_onnx, tmp_path, capsys):
    """Tune the tiny model, then solve it calibrated: the plan runs here, and its records carry
    the in-network times (not the log's)."""
    from graph_tuner.cli import main
    from graph_tuner.records import read_records

    log, out = tmp_path / "tiny.log", tmp_path / "tiny.opt.log"
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3", "--no-progress"]) == 0
    capsys.readouterr()
    # Each run measures what the plan uses; the tiny model's 2 layers have at most 6 candidates.
    assert main(["solve", str(tiny_onnx), "--records", str(log), "-o", str(out), "--calibrate", "10",
                 "--no-progress", "--report", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "calibrated in the network" in text
    report = json.loads((tmp_path / "r.json").read_text())["totals_ms"]
    # Baselines are costed alike (in-network), each a finite time. How they compare with the plan
    # is a measurement, not an invariant: history-best, never run itself, is costed with its
    # layers' estimated ratios, and came out 1.7% (session 23) and 10% (session 25) under the
    # plan on a 2-layer model whose steps take microseconds.
    assert all(0 < report[k] < float("inf") for k in ("graph_tuned", "history_best", "default"))
    def key(r):
        return r.workload, json.dumps(r.raw["config"]["entity"])

    logged = {}
    for r in read_records(log).records:
        logged.setdefault(key(r), set()).update(r.costs)
    chosen = read_records(out).records
    assert len(chosen) == 2
    # In-network times (the log's time x the ratio measured), not the log's own, and in the
    # log's unit: a ratio far from 1 would be a unit slip (the tiny model's run at 0.5-3x).
    assert all(len(r.costs) == 1 and r.costs[0] not in logged[key(r)] for r in chosen)
    for r in chosen:
        logged_median = sorted(logged[key(r)])[len(logged[key(r)]) // 2]
        assert 0.2 < r.costs[0] / logged_median < 10


def test_cli_calibrate_rejects_a_negative_count(tiny_onnx, capsys):
    from graph_tuner.cli import main

    with pytest.raises(SystemExit) as e:
        main(["solve", str(tiny_onnx), "--records", "x.log", "--calibrate", "-1"])
    assert e.value.code == 2
    assert "--calibrate: expected an integer from 0" in capsys.readouterr().err


def test_timer_divides_out_the_hosts_state(tiny_onnx, monkeypatch):
    """A step's ratio in a round is the mean of its in-network times in the profiles just
    before and just after its re-timing over its alone time; its ratio is the median over
    rounds. A host 2x slower throughout moves no ratio; a profile taken in another state
    moves the steps it brackets in that round only, and the median outvotes it."""
    from types import SimpleNamespace

    from graph_tuner import plan_run
    from graph_tuner.executor import program
    from graph_tuner.executor.program import Profile, StepTime
    from graph_tuner.loading import load_model
    from graph_tuner.plan_run import InNetworkTimer

    model = load_model(tiny_onnx)
    plan = GraphTuner(model, [], fallback=True).solve(measure=True)
    names = [lc.name for lc in plan.layers] * 2  # 4 re-timings a round: two pairs, two profiles between
    now = [0.0]  # a fake clock: a profile takes 1 s, a re-timing 0.6 s, so one profile every 2 re-timings
    host = {"speed": 1.0, "profiles": []}  # time factor now; each profile's own factor, if given
    calls = []

    def fake_profile(self, repeat=10, warmup=2):
        now[0] += 1.0
        calls.append("profile")
        speed = host["profiles"].pop(0) if host["profiles"] else host["speed"]
        return Profile([StepTime(s.name, s.category, s.ops, 3.0 * speed, None) for s in self.steps])

    def fake_retimed(plan, model=None, params=None, timers=None):
        for name in names:
            now[0] += 0.6
            calls.append(name)
            yield [name], 1.5 * host["speed"]

    monkeypatch.setattr(program.Program, "profile", fake_profile)
    monkeypatch.setattr(plan_run, "iter_retimed", fake_retimed)
    monkeypatch.setattr(plan_run, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(plan_run, "SUSPECT_RATIO", 2.5)  # these steps run 2x alone in the network
    from graph_tuner import host_state

    joins, seen = [], []  # the fork-join probe's next readings (else 1 us), and those read

    def fake_join(call=None):
        seen.append(joins.pop(0) if joins else 1.0)
        return seen[-1]

    monkeypatch.setattr(host_state, "fork_join_call", lambda: None)
    monkeypatch.setattr(host_state, "fork_join_us", fake_join)
    monkeypatch.setattr(host_state, "lowest_fork_join_us", lambda: min(seen))
    monkeypatch.setattr(host_state, "FAST_PHASE_WAIT_S", 15.0)  # on the fake clock
    monkeypatch.setattr(host_state, "time", SimpleNamespace(monotonic=lambda: now[0],
                                                            sleep=lambda s: now.__setitem__(0, now[0] + s)))
    for speed in (1.0, 2.0):
        host["speed"] = speed
        calls.clear()
        ratios = InNetworkTimer(model, rounds=3)(plan)
        assert set(ratios) == set(names) and all(r == pytest.approx((2.0, 1.5 * speed)) for r in ratios.values())
        assert calls[:4] == ["profile", names[0], names[1], "profile"] and calls[-1] == "profile"
        assert calls.count("profile") == 1 + 3 * 2  # the last profile of a round opens the next
    host.update(speed=1.0, profiles=[1.0, 3.0])  # the 2nd profile (after the first pair) runs 3x slow
    from graph_tuner.executor import compile_model

    (timed,) = InNetworkTimer(model, rounds=1)._rounds(compile_model(model, plan), plan, {})
    # Both pairs of re-timings: the mean of 3 and 9 (the profiles around them) over 1.5.
    assert [net / alone for pairs in timed.values() for net, alone, _ in pairs] == pytest.approx([4.0] * 4)
    host.update(profiles=[1.0, 3.0])
    assert all(r == pytest.approx(2.0) for r, _ in InNetworkTimer(model, rounds=3)(plan).values())
    # The network (not the alone re-timings) 1.5x slower for two rounds of three: the median
    # alone would read 3.0; the re-timings of the slow profiles are dropped (plan_run._calm).
    host.update(profiles=[1.0, 1.0, 1.0] + [1.5] * 4)
    assert all(r == pytest.approx(2.0) for r, _ in InNetworkTimer(model, rounds=3)(plan).values())
    # The network 1.5x slower for a whole run (7 profiles), whose whole ratio, 3.0, is over
    # SUSPECT_RATIO: a second run is made, and the calmer kept; slow in both, it says so.
    for slow_profiles, expected, note in (([1.5] * 7, 2.0, False), ([1.5] * 14, 3.0, True)):
        host.update(profiles=list(slow_profiles))
        calls.clear()
        timer = InNetworkTimer(model, rounds=3)
        assert all(r == pytest.approx(expected) for r, _ in timer(plan).values())
        assert calls.count("profile") == 2 * 7 and (timer.slow_note is not None) is note
    # The network 1.2x slower for a whole run, under SUSPECT_RATIO, but the fork-join read 2x
    # its fastest after it (the host's slow phase): once the phase is over, a second run is
    # made and kept; read slow after both, the faster is kept, and the note says why; a phase
    # that outlasts the wait (15 s) keeps the first run, and says so. (The readings: before
    # each run, after it, and while waiting.)
    for readings, runs, expected, note in (([1.0, 2.0, 1.0, 1.0, 1.0], 2, 2.0, False),
                                           ([1.0, 2.0, 1.0, 1.0, 2.0], 2, 2.0, True),
                                           ([1.0, 2.0] + [2.0] * 31, 1, 2.4, True)):
        host.update(profiles=[1.2] * 7)
        joins[:] = readings
        calls.clear()
        timer = InNetworkTimer(model, rounds=3)
        assert all(r == pytest.approx(expected) for r, _ in timer(plan).values())
        assert calls.count("profile") == runs * 7 and not joins
        assert (timer.slow_note is not None and "fork-join" in timer.slow_note) is note
    # Within FORK_JOIN_MARGIN: one run. Slow before it: the run waits until the phase is over
    # (polling every 0.5 s), or 15 s.
    for readings, waited in (([1.0, 1.2], 0.0), ([2.0, 2.0, 1.0, 1.0], 1.0), ([2.0] * 31 + [1.0], 15.0)):
        joins[:] = readings
        calls.clear()
        start = now[0]
        InNetworkTimer(model, rounds=3)(plan)
        assert calls.count("profile") == 7 and not joins and now[0] - start - 7 - 12 * 0.6 == pytest.approx(waited)


def test_retimed_steps_are_named_as_the_profile_names_them():
    """Every step of a program (convs, layout transforms, other steps) is re-timed alone under
    the name its profile gives it, so calibration pairs them."""
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.executor import compile_model
    from graph_tuner.plan_run import retimed_steps

    b = GraphBuilder("t")
    x = b.input((1, 8, 6, 6))
    y = b.relu(b.conv(b.conv(x, 16, 3, padding=1, name="c1"), 16, 3, padding=1, name="c2"))
    m = b.build(b.global_avg_pool(b.conv(y, 16, 3, padding=1, name="c3")))
    gt = GraphTuner(m, [], fallback=True)
    gt.benchmark_steps()
    plan = gt.solve(measure=True)
    assert plan.transforms and plan.steps
    alone = retimed_steps(plan, m)
    assert set(alone) == {s.name for s in compile_model(m, plan).steps}
    assert all(ms > 0 for ms in alone.values())


def test_a_plan_re_timed_again_with_its_timers_binds_each_kernels_buffers_once(calls_to):
    """The calibration's rounds pass their conv timers on (iter_retimed's ``timers``): each
    kernel's buffers are made once a run, not once a round."""
    import kernels.tuner as tuner_mod
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.plan_run import iter_retimed

    b = GraphBuilder("t")
    x = b.input((1, 8, 6, 6))
    m = b.build(b.relu(b.conv(b.conv(x, 16, 3, padding=1, name="c1"), 16, 1, name="c2")))
    plan = GraphTuner(m, [], fallback=True).solve(measure=True)
    made = calls_to(tuner_mod, "kernel_arguments")
    timers: dict = {}
    first = list(iter_retimed(plan, m, timers=timers))  # (step names, ms) a timing
    assert len(made) == len(plan.layers) == 2 and timers
    again = list(iter_retimed(plan, m, timers=timers))
    assert len(made) == 2 and all(ms > 0 for _, ms in again) and len(again) == len(first)
    list(iter_retimed(plan, m))  # a caller that keeps none: made again
    assert len(made) == 4


def test_a_model_with_two_inputs_calibrates(tmp_path):
    from graph_tuner.builder import GraphBuilder

    b = GraphBuilder("two")
    x, y = b.input((1, 8, 6, 6), name="x"), b.input((1, 8, 6, 6), name="y")
    m = b.build(b.add(b.conv(x, 8, 3, padding=1, name="cx"), b.conv(y, 8, 3, padding=1, name="cy"), name="s"))
    gt = GraphTuner(m, [], fallback=True)
    plan = gt.solve(measure=True, calibrate=3)
    assert "calibrat" in plan.notes[-1] and len(plan.layers) == 2


def test_calibrate_needs_this_cpus_x86_records():
    from pathlib import Path

    from graph_tuner.errors import GraphTunerError

    data = Path(__file__).parent / "data"
    gt = GraphTuner("resnet-18", data / "resnet18_cuda_v01_typographic.log", target="cuda -model=unknown")
    with pytest.raises(GraphTunerError, match="--calibrate runs the plan on this CPU"):
        gt.solve(calibrate=2)
    gt = GraphTuner("resnet-18", records_for_cpu("not-this-cpu"))
    with pytest.raises(GraphTunerError, match="were timed on not-this-cpu; tune here first"):
        gt.solve(calibrate=2)


def records_for_cpu(cpu: str) -> list:
    """One record per conv workload of ResNet-18, at 16-channel blocks, timed on ``cpu``."""
    from graph_tuner.records import make_conv2d_record
    from graph_tuner.zoo import get_model

    out = []
    for w, _ in get_model("resnet-18").distinct_workloads():
        ib = 16 if w.in_channels % 16 == 0 else 1
        knob = {"tile_oh": 1} if w.is_1x1 else {"unroll_kw": True}
        e = {"tile_ic": [-1, ib], "tile_oc": [-1, 16], "tile_ow": [-1, 1], **knob}
        out.append(make_conv2d_record(w, e, 0, [1e-4], f"llvm -mcpu={cpu}", timestamp=0.0))
    return out


def test_the_layers_of_a_fused_step_share_its_ratio():
    """A depthwise conv and the 1x1 conv fused with it are one step in the network: each gets
    the step's in-network time over the two layers' alone times summed."""
    from graph_tuner.plan_run import _step_ratios

    timed = {"dw": [(3.0, 1.0)], "pw": [(3.0, 2.0)], "c": [(4.0, 2.0), (2.0, 2.0)]}  # [(in-network, alone)]
    assert _step_ratios(timed, {"dw": "dw+pw", "pw": "dw+pw"}) == {"dw": 1.0, "pw": 1.0, "c": 1.5}
    assert _step_ratios(timed, {}) == {"dw": 3.0, "pw": 1.5, "c": 1.5}


def test_a_plan_with_a_fused_step_calibrates(monkeypatch, two_threads):
    """In a network where a depthwise conv runs fused with its projection, both layers are
    re-timed alone and get the fused step's ratio (the profile has no step of their names)."""
    import graph_tuner.executor.compile as compile_module
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.executor import compile_model, uniform_plan
    from graph_tuner.plan_run import InNetworkTimer

    monkeypatch.setattr(compile_module, "MIN_FUSED_ROWS", 1)
    b = GraphBuilder("inverted")
    x = b.input((1, 16, 16, 16))
    d = b.relu6(b.conv(b.relu6(b.conv(x, 32, 1, name="expand")), 32, 3, padding=1, groups=32, name="dw"))
    m = b.build(b.conv(d, 32, 1, name="project"))
    plan = uniform_plan(m, 16)
    assert [s.name for s in compile_model(m, plan).steps if "+" in s.name] == ["dw+project"]
    ratios = InNetworkTimer(m, rounds=1, repeat=3)(plan)
    assert {"dw", "project", "expand"} <= set(ratios) and ratios["dw"][0] == ratios["project"][0] > 0
    assert all(alone > 0 for _, alone in ratios.values())


def test_tune_calibrate_writes_ratios_that_solve_costs_the_plan_with(tiny_onnx, tmp_path, capsys, monkeypatch):
    """`tune` ends by appending the plan's in-network ratios to the log (a rerun that times
    nothing new on a log that has them for the plan appends nothing; `--no-calibrate` skips
    them); `solve` on the log then picks the plan it picks with times taken alone, costed with
    those ratios (each conv its log time x its ratio), measuring nothing; a log of another
    model's ratios is not used."""
    from graph_tuner.calibration import choices
    from graph_tuner.cli import main
    from graph_tuner.loading import load_model
    from graph_tuner.records import read_records

    log = tmp_path / "tiny.log"
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3", "--no-progress", "--no-calibrate"]) == 0
    plain_log = log.read_bytes()
    assert not read_records(log).network and "in-network" not in capsys.readouterr().out
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "calibrated in the network" in out and "in-network ratios:" in out
    assert "the thread pool's fork-join" in out  # the host's phase at the start and the end
    assert log.read_bytes().startswith(plain_log)  # appended, nothing rewritten
    calibrated = log.read_bytes()
    assert main(["tune", str(tiny_onnx), "-o", str(log), "--trials", "3", "--no-progress"]) == 0
    assert "the log has one for each" in capsys.readouterr().out and log.read_bytes() == calibrated
    network = read_records(log).network
    model = load_model(tiny_onnx)
    assert {r.kind for r in network} >= {"conv"} and {r.model for r in network} == {model.name}
    assert {r.identity for r in network} == {model.digest}

    alone = GraphTuner(model, plain_log.decode().splitlines())
    costed = GraphTuner(model, log)
    for gt in (alone, costed):
        gt.benchmark_steps()
        gt.transforms.fill(gt.required_transforms(), cache=False, measure=True, progress=False)
    monkeypatch.setattr(costed.transforms, "fill", lambda *a, **k: pytest.fail("solve measured a transform"))
    p0, p1 = alone.solve(), costed.solve()
    assert choices(p0) == choices(p1) and any("costs in the network" in n for n in p1.notes)
    ratio = {(r.name, r.key): r.time for r in network if r.kind == "conv"}
    for a, b in zip(p0.layers, p1.layers):
        assert b.time_ms == pytest.approx(a.time_ms * ratio[(a.name, a.candidate.config)])

    # Another model's, another batch size's (same name, another digest) and the identity-less
    # records of sessions 18-20 are not used.
    text = log.read_text()
    assert f', "{model.digest}"]' in text
    # A log with this model's ratios, none usable, says so.
    for other, said in ((text.replace(f'["{model.name}", ', '["another-model", '), False),
                        (text.replace(f', "{model.digest}"]', ', "0123abcd4567"]'), True),
                        (text.replace(f', "{model.digest}"]', ']'), True)):
        gt = GraphTuner(model, other.splitlines())
        assert len(gt.log.network) == len(network) and not gt.network
        assert any(f"in-network ratios for {model.name} are another version's" in w for w in gt.warnings) is said
        assert not any("costs in the network" in n for n in gt.solve(measure=True).notes)


def test_network_records_read_back_and_bad_ones_are_named():
    from graph_tuner.records import make_network_record, read_records
    from kernels.config_space import Conv2DConfig

    cfg = Conv2DConfig(ic_bn=16, oc_bn=32, ow_bn=7, unroll_kw=True, oh_bn=2)
    entity = {"tile_ic": [-1, 16], "tile_oc": [-1, 32], "tile_ow": [-1, 7], "tile_oh": 2, "unroll_kw": True}
    recs = [make_network_record("m", "0123abcd4567", "conv", "c1", entity, 1.25, "llvm"),
            make_network_record("m", "0123abcd4567", "step", "pool0", 16, 2.0, "llvm"),
            make_network_record("m", "0123abcd4567", "transform", "", ((1, 64, 8, 8), 1, 16), 0.9, "llvm")]
    got = read_records(recs).network
    assert [(r.kind, r.name, r.key, r.time) for r in got] == [
        ("conv", "c1", cfg, 1.25), ("step", "pool0", 16, 2.0), ("transform", "", ((1, 64, 8, 8), 1, 16), 0.9)]
    assert "3 in-network ratios" in read_records(recs).summary()
    bad = json.loads(json.dumps(recs[0]))
    bad["input"][2][1] = "pool"
    with pytest.raises(Exception, match="needs \\[model, kind"):
        read_records([bad])
    bad = json.loads(json.dumps(recs[0]))
    bad["input"][2][4] = 7
    with pytest.raises(Exception, match="model identity"):
        read_records([bad])
    bad = json.loads(json.dumps(recs[0]))
    bad["config"]["entity"] = [["tile_x", "sp", [-1, 4]]]
    with pytest.raises(Exception, match="not an x86 conv config"):
        read_records([bad])


def test_calibrated_baselines_are_costed_with_the_calibrations_ratios(tiny_onnx, monkeypatch):
    """The report's baselines under the calibrated costs: a network where every step runs
    2x its alone time doubles them too (not the times taken alone beside an in-network plan)."""
    from graph_tuner import plan_run
    from graph_tuner.loading import load_model

    class Twice:
        slow_note = None

        def __init__(self, *a, **k):
            pass

        def __call__(self, plan):
            names = [lc.name for lc in plan.layers] + [t.label for t in plan.transforms] + [c.name for c in plan.steps]
            return {n: (2.0, 1.0) for n in names}

    model = load_model(tiny_onnx)
    gt = GraphTuner(model, [], fallback=True, target=f"llvm -mcpu={plan_run_cpu()}")
    alone = gt.solve(measure=True)
    monkeypatch.setattr(plan_run, "InNetworkTimer", Twice)
    calibrated = gt.solve(measure=True, calibrate=3)
    assert calibrated.cost == pytest.approx(2 * alone.cost, rel=0.2)
    assert calibrated.baselines_ms["history_best"] == pytest.approx(2 * alone.baselines_ms["history_best"], rel=0.2)


def plan_run_cpu() -> str:
    from kernels.jit import host_cpu

    return host_cpu().name


def test_by_step_is_the_ratio_each_step_of_the_plan_is_costed_with():
    """What `run` and `bench` re-time a plan at: each step's cost over its alone time, as
    candidates (one config a layer), step_costs and transform_costs make it."""
    from graph_tuner.candidates import Candidate
    from graph_tuner.plan import LayerChoice, Plan, StepChoice, TransformChoice

    a, b = Candidate(None, 8, 8, 1.0, "x"), Candidate(None, 8, 8, 2.0, "y")
    layers = [LayerChoice(0, "a", None, a, 1.0), LayerChoice(1, "b", None, b, 2.0)]
    transforms = [TransformChoice("t", (1, 8, 4, 4), 8, 1, 0.1, ["b"]), TransformChoice("u", (1, 4, 2, 2), 1, 4, 0.1, ["c"])]
    steps = [StepChoice("pool", 32, 1.0), StepChoice("fc", 1, 1.0)]
    plan = Plan("m", "llvm", layers, transforms, {}, "dp", True, None, 0.0, steps=steps)
    costs = InNetworkCosts(convs={("a", "x"): 1.5, ("b", "z"): 3.0}, steps={("pool", 8): 3.0, ("pool", 16): 4.0},
                           transforms={((1, 8, 4, 4), 1, 8): 2.0})
    got = costs.by_step(plan)
    assert got == {"a": 1.5, "b": 1.0, "t NCHW8c->NCHW": 2.0, "u NCHW->NCHW4c": 1.0, "pool": 3.5, "fc": 1.0}
    # The same ratios the plan's costs are made with:
    costed = costs.candidates(restricted({"a": [a], "b": [b, Candidate(None, 8, 8, 1.0, "z")]}, {"a": "x", "b": "y"}))
    assert {n: cs[0].time / {"a": 1.0, "b": 2.0}[n] for n, cs in costed.items()} == {"a": 1.5, "b": 1.0}
    assert costs.step_costs({"pool": {8: 1.0, 16: 1.0, 32: 1.0}, "fc": {1: 1.0}})["pool"][32] == got["pool"]
    keys = {t.key: 1.0 for t in transforms} | {((1, 8, 4, 4), 1, 8): 1.0}
    assert [costs.transform_costs(keys)[t.key] for t in transforms] == [got[t.label] for t in transforms]
