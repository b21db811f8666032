"""`graph-tuner run`: JSON report, outputs vs the numpy reference, one-line errors."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from graph_tuner.builder import GraphBuilder
from graph_tuner.cli import main
from graph_tuner.executor import run_reference
from graph_tuner.onnx_export import save_onnx
from graph_tuner.onnx_import import load_onnx
from graph_tuner.layout_flow import layout_name
from graph_tuner.records import make_conv2d_record, make_transform_record

TARGET = "llvm -mcpu=test"


def _model(channels=16, name="tiny"):
    b = GraphBuilder(name)
    x = b.input((1, 8, 10, 10))
    y = b.relu(b.batch_norm(b.conv(x, channels, 3, padding=1, name="c0"), name="bn0"), name="r0")
    z = b.batch_norm(b.conv(y, channels, 3, padding=1, name="c1"), name="bn1")
    s = b.relu(b.add(z, y, name="add"), name="r1")
    return b.build(b.softmax(b.dense(b.flatten(b.global_avg_pool(s)), 5, name="fc"), name="prob"))


def _write_log(model, path, blocks=((8, 16), (16, 16))):
    """A graph-tuned log: one record per conv layer, in conv order, with the given (ic_bn, oc_bn),
    and layout-transform records (1 us per 1000 values) so that nothing is measured."""
    lines = []
    for op, (ib, ob) in zip(model.convs(), blocks):
        entity = {"tile_ic": [-1, ib], "tile_oc": [-1, ob], "tile_ow": [-1, 5], "unroll_kw": True}
        lines.append(json.dumps(make_conv2d_record(model.workload(op), entity, 0, [1e-4], TARGET, timestamp=0.0)))
    for op in model.ops:
        if len(op.shape) == 4:
            for a, b in itertools.permutations([1, 2, 4, 8, 16], 2):
                if op.shape[1] % a == 0 and op.shape[1] % b == 0:
                    cost = 1e-9 * math.prod(op.shape)
                    rec = make_transform_record(op.shape, layout_name(a), layout_name(b), cost, TARGET, timestamp=0.0)
                    lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))  # transform timings: a fresh cache
    m = _model()
    onnx_path = tmp_path / "tiny.onnx"
    save_onnx(m, m.params(seed=5), onnx_path)
    return m, onnx_path, _write_log(m, tmp_path / "tiny.opt.log")


def test_run_json_and_output_match_reference(files, tmp_path, capsys):
    m, onnx_path, log = files
    x = np.random.default_rng(1).standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(onnx_path), "--records", str(log), "--repeat", "3", "--json",
            "--input", str(tmp_path / "x.npy"), "--save-output", str(tmp_path / "y.npy")]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"median_ms", "p90_ms", "predicted_ms", "layers"} <= set(out)
    assert 0 < out["median_ms"] <= out["p90_ms"]
    # The prediction is the log's kernel times (2 x 0.1 ms) plus its transforms: data to NCHW8c for c0 and
    # the pooled 16 values back to NCHW; the add computes in NCHW16c, the layout both operands are in.
    # The other steps (pool, dense, softmax) were timed here in the layouts the plan runs them in.
    others = [layer["predicted_ms"] for layer in out["layers"] if layer["category"] == "other"]
    assert len(others) == 3 and all(ms > 0 for ms in others) and out["prediction_covers"] == "every step"
    assert out["predicted_ms"] == pytest.approx(0.2 + 1e-6 * (8 * 10 * 10 + 16) + sum(others))
    assert out["retimed_predicted_ms"] > 0  # the same kernels and transforms, timed alone on this machine
    cats = {layer["category"] for layer in out["layers"]}
    assert cats == {"conv", "transform", "other"}
    conv_layers = [layer for layer in out["layers"] if layer["category"] == "conv"]
    assert sorted(layer["name"] for layer in conv_layers) == ["c0", "c1"]
    assert all(layer["predicted_ms"] == pytest.approx(0.1) for layer in conv_layers)
    assert any("add" in layer["ops"] for layer in conv_layers)  # the residual add ran in a conv epilogue
    # ONNX models run with their own weights: the output is the reference's on the file's initializers.
    back = load_onnx(onnx_path)
    want = run_reference(back, back.params(), x)[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-6)


def test_run_text_report(files, capsys):
    m, onnx_path, log = files
    assert main(["run", str(onnx_path), "--records", str(log), "--repeat", "2", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "latency: median" in text and "predicted (every step)" in text and "slowest 3 steps" in text
    assert "re-timed alone now" in text
    assert main(["run", str(onnx_path), "--records", str(log), "--repeat", "2", "--no-retime", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["retimed_predicted_ms"] is None


def _cli(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "graph_tuner", *argv], capture_output=True, text=True, env=env)


def test_errors_are_one_line_exit_2(files, tmp_path):
    m, onnx_path, log = files
    np.save(tmp_path / "wrong.npy", np.zeros((1, 8, 10, 9), np.float32))
    other = _model(channels=8, name="other")  # same structure, other workloads
    wrong_log = _write_log(other, tmp_path / "other.log", blocks=((8, 8), (8, 8)))
    short_log = tmp_path / "short.log"
    short_log.write_text(log.read_text().splitlines()[0] + "\n")
    (tmp_path / "junk.npy").write_text("not numpy")
    cases = {
        "wrong.npy: shape (1, 8, 10, 9)": ["--records", str(log), "--input", str(tmp_path / "wrong.npy")],
        "record 0 is for": ["--records", str(wrong_log)],
        "1 x86 conv records for 2 conv layers": ["--records", str(short_log)],
        "junk.npy: not a .npy array": ["--records", str(log), "--input", str(tmp_path / "junk.npy")],
        "missing.log: no such file": ["--records", str(tmp_path / "missing.log")],
    }
    for expected, extra in cases.items():
        p = _cli("run", str(onnx_path), *extra)
        assert p.returncode == 2, (expected, p.stderr)
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert expected in p.stderr, p.stderr


def test_plan_read_back_costs_what_the_solver_planned(tmp_path, monkeypatch):
    """A config measured several times is planned at its mean; the record written for it
    carries one cost per measurement, so ``apply_records`` (what ``run`` predicts from)
    gives the same kernel time, not that of the last measurement alone."""
    from graph_tuner.api import GraphTuner, apply_records
    from graph_tuner.records import read_records

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    m = _model()
    log = _write_log(m, tmp_path / "t.log")
    entity = {"tile_ic": [-1, 8], "tile_oc": [-1, 16], "tile_ow": [-1, 5], "unroll_kw": True}
    again = make_conv2d_record(m.workload(m.convs()[0]), entity, 0, [3e-4], TARGET, timestamp=0.0)
    with open(log, "a") as f:  # conv 0's config re-timed: mean of 1e-4 and 3e-4
        f.write(json.dumps(again) + "\n")
    plan = GraphTuner(m, log).solve()
    assert plan.layers[0].time_ms == pytest.approx(0.2)
    out = tmp_path / "t.opt.log"
    plan.write_records(out)
    assert read_records(out).records[0].costs == pytest.approx((1e-4, 3e-4))
    back = apply_records(m, [out.read_text(), *[line for line in log.read_text().splitlines()
                                                if "layout_transform" in line]])
    assert back.layers[0].time_ms == pytest.approx(0.2)
    # apply_records also timed the other steps here (pool, dense, softmax); GraphTuner was not asked to.
    assert plan.steps == [] and len(back.steps) == 3
    assert back.kernel_ms + back.transform_ms == pytest.approx(plan.cost)


def test_the_tuning_log_makes_the_read_back_plan_cost_what_solve_planned(tmp_path, monkeypatch):
    """A tuning log with the other steps' timings and in-network ratios (as `tune` writes them):
    the plan read back from the plan log with it (what `run --transform-records TUNING.LOG`
    predicts from) costs every transform and step as `solve` did; without it, they are their
    times taken alone, below what the network pays."""
    from graph_tuner.api import GraphTuner, apply_records
    from graph_tuner.records import make_network_record, read_records
    from graph_tuner.transform_costs import TransformCosts

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    m = _model()
    log = _write_log(m, tmp_path / "t.log")
    gt = GraphTuner(m, log)
    gt.benchmark_steps()
    alone = gt.solve()
    ratios = ([make_network_record(m.name, m.digest, "transform", "", t.key, 2.0, TARGET) for t in alone.transforms]
              + [make_network_record(m.name, m.digest, "step", c.name, c.block, 3.0, TARGET) for c in alone.steps])
    with open(log, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in gt.step_records() + ratios))
    gt = GraphTuner(m, log)
    gt.benchmark_steps()
    plan = gt.solve()
    assert plan.transforms and plan.steps
    out = tmp_path / "t.opt.log"
    plan.write_records(out)

    def read_back(tuning=None):
        costs = TransformCosts()
        costs.load_records(read_records(log).transforms)
        return apply_records(m, out, costs, tuning=tuning)

    back = read_back(read_records(log))
    assert back.cost == pytest.approx(plan.cost, rel=1e-9)
    assert apply_records(m, out, tuning=log).cost == pytest.approx(plan.cost, rel=1e-9)  # its transforms too
    assert [(t.key, t.time_ms) for t in back.transforms] == [(t.key, pytest.approx(t.time_ms)) for t in plan.transforms]
    assert [(c.name, c.time_ms) for c in back.steps] == [(c.name, pytest.approx(c.time_ms)) for c in plan.steps]
    assert read_back().cost < plan.cost  # at the times taken alone
    # What `run` re-times the plan at: each step's own ratio, by its name in a profile.
    from graph_tuner.calibration import InNetworkCosts

    by_step = InNetworkCosts.from_records(read_records(log).network, m.name, m.digest).by_step(back)
    assert by_step == {**{lc.name: 1.0 for lc in back.layers}, **{t.label: 2.0 for t in back.transforms},
                       **{c.name: 3.0 for c in back.steps}}


def test_run_takes_transform_costs_from_a_tuning_log(files, tmp_path, capsys):
    """With --transform-records nothing is measured: the cache stays empty."""
    m, onnx_path, log = files
    lines = log.read_text().splitlines()
    plan_log, tuning_log = tmp_path / "plan.log", tmp_path / "tuning.log"
    plan_log.write_text("\n".join(x for x in lines if "layout_transform" not in x) + "\n")
    tuning_log.write_text("\n".join(x for x in lines if "layout_transform" in x) + "\n")
    argv = ["run", str(onnx_path), "--records", str(plan_log), "--repeat", "2", "--json"]
    assert main([*argv, "--transform-records", str(tuning_log)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["predicted_ms"] > 0
    assert "no in-network ratios of" in captured.err  # transforms only: priced at their alone times, said
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))
    assert main([*argv, "--transform-records", str(tmp_path / "nope.log")]) == 2
    assert "nope.log: no such file" in capsys.readouterr().err
    with open(tuning_log, "a") as f:  # a damaged line: the error names the option that skips it, which run has
        f.write('{"input": ["llvm", "layout_transform"\n')
    assert main([*argv, "--no-retime", "--transform-records", str(tuning_log)]) == 2
    assert f"{tuning_log}:{len(tuning_log.read_text().splitlines())}: not a valid" in capsys.readouterr().err
    assert main([*argv, "--no-retime", "--transform-records", str(tuning_log), "--skip-bad-lines"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_ms"] > 0


def test_a_run_whose_profile_and_median_disagree_says_so():
    # A neighbour's phase between the timed runs and the profile: the report says the figures
    # do not compare, and the JSON carries it; a run whose two agree within 5% says nothing.
    from graph_tuner.executor.program import Profile, StepTime
    from graph_tuner.plan_run import STEADY_MARGIN, RunResult

    steps = [StepTime("c1", "conv", ["c1"], 2.0, 2.0), StepTime("pool", "pool", ["pool"], 1.0, 1.0)]
    for median, steady in ((3.05, True), (3.0 / (1 + 2 * STEADY_MARGIN), False), (3.0 * 1.5, False)):
        r = RunResult("m", 1, 2, median, median, 3.0, Profile(steps))
        assert r.steady is steady and r.to_json()["steady"] is steady
        assert ("the host's speed changed during the run" in r.report()) is not steady
    # The thread pool's fork-join read twice as slow at one end of the run as at the other: the
    # host changed phase in between, though profile and median agree.
    for joins, steady in (((1.6, 1.7), True), ((1.6, 3.2), False), ((3.2, 1.6), False)):
        r = RunResult("m", 1, 2, 3.0, 3.0, 3.0, Profile(steps), fork_join_us=joins)
        assert r.steady is steady and r.to_json()["fork_join_us"] == list(joins)
        assert f"fork-join took {joins[0]:.1f} us" in r.report()
        assert ("the fork-join changed from" in r.report()) is not steady
        assert "the profile's steps sum" not in r.report()  # they agree: only the cause that holds
    # Profile and median apart, one phase: the warning names that cause only.
    r = RunResult("m", 1, 2, 4.5, 4.5, 3.0, Profile(steps), fork_join_us=(1.6, 1.6))
    assert not r.steady and "the profile's steps sum" in r.report() and "fork-join changed" not in r.report()


def test_run_retimes_at_the_tuning_logs_ratios(files, tmp_path, capsys):
    """With a tuning log that has in-network ratios for the model, `run` re-times the plan at
    them (`retimed_at_ratios`); without one, alone."""
    from graph_tuner.loading import load_model
    from graph_tuner.records import make_network_record

    m, onnx_path, log = files
    loaded = load_model(str(onnx_path))
    tuning_log = tmp_path / "tuning.log"
    ratio = make_network_record(loaded.name, loaded.digest, "step", "prob", 1, 2.0, TARGET)
    tuning_log.write_text(log.read_text() + json.dumps(ratio) + "\n")
    argv = ["run", str(onnx_path), "--records", str(log), "--repeat", "2", "--json"]
    assert main([*argv, "--transform-records", str(tuning_log)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["retimed_at_ratios"] is True and "no in-network ratios" not in captured.err
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["retimed_at_ratios"] is False
