"""graph_tuner/tuning.py: records appended per measurement, resume after a kill, errors, transforms."""
import json
import math
import os
import re
from collections import Counter

import pytest

from graph_tuner.candidates import fallback_config, layer_candidates
from graph_tuner.errors import GraphTunerError
from graph_tuner.layout_flow import parse_layout
from graph_tuner.records import ORIGIN_FIELD, RETIME_ORIGIN, WINOGRAD_FIELD, conv_input_key, read_records
from graph_tuner.tuning import (append_transforms, host_target, logged, repair_tail, retime_workloads, transform_keys,
                                tune_workloads)
from kernels.config_space import entity_config, task_space, tuning_space
from kernels.jit import host_cpu
from kernels.tuner import CONFIRM_ROUNDS, INSTANTIATION_ERROR, MeasureError
from kernels.workload import Conv2DWorkload

W3 = Conv2DWorkload((1, 32, 14, 14), (64, 32, 3, 3), padding=(1, 1, 1, 1))
W1 = Conv2DWorkload((1, 64, 14, 14), (64, 64, 1, 1))


def fake(w, c):
    return 1e-4 * (1 + abs(c.oc_bn - 16) / 16 + abs(c.ow_bn - 7) / 7 + (c.ic_bn == 1))


def tune_fake(workloads, log, **kwargs):
    """tune_workloads with the fake timer, no progress bars and (unless asked) no transforms."""
    defaults = {"measure": fake, "progress": False, "transforms": False}
    return tune_workloads(workloads, log, **{**defaults, **kwargs})


def indices_by_workload(path):
    out = {}
    for line in open(path):
        obj = json.loads(line)
        if obj["input"][1] != "layout_transform":
            out.setdefault(json.dumps(obj["input"][2]), []).append(obj["config"]["index"])
    return out


def test_records_parse_and_feed_layer_candidates(tmp_path):
    log = tmp_path / "t.log"
    summaries = tune_workloads([(W3, 2), (W1, 1)], log, trials=12, measure=fake, progress=False, transforms=False,
                               confirm=5)
    assert [s.new for s in summaries] == [12, 12] and all(len(s.pairs) >= 8 for s in summaries)
    assert [s.confirmed for s in summaries] == [15, 15]
    records = read_records(log).records
    assert len(records) == 24 + 30
    for w in (W3, W1):  # the re-timed configs are the fastest of 5 distinct layout pairs, logged again
        idx = [r.config_index for r in records if r.workload == w]
        again = idx[12:]
        assert set(again) <= set(idx[:12]) and len(set(again)) == 5
        # in 3 rounds that each time all 5, each round starting one further along
        first = again[:5]
        assert again == first + first[1:] + first[:1] + first[2:] + first[:2]
    assert {r.task_name for r in records} == {"conv2d_NCHWc.x86"} and {r.target for r in records} == {host_target()}
    for r in records:  # index and entity agree in our space, and in AutoTVM's where it has them
        tvm = task_space("conv2d_NCHWc.x86", r.workload)
        assert tuning_space(r.workload).entity(r.config_index) == r.entity
        if r.config_index < len(tvm):
            assert tvm.entity(r.config_index) == r.entity
    cands = layer_candidates([W3, W1, W3], read_records(log), target=host_target())
    assert all(len(c) >= 8 for c in cands)
    for w, c in zip([W3, W1], cands):  # the tuner's first config (the fallback at the host's SIMD width)
        f = fallback_config(w, host_cpu().lanes)
        assert (f.ic_bn, f.oc_bn) in {(x.in_block, x.out_block) for x in c}
    assert summaries[0].best_seconds == min(r.time for r in records[:12])


def test_resume_after_a_kill_mid_line(tmp_path):
    log = tmp_path / "t.log"
    calls = []

    def dying(w, c):
        calls.append(c)
        if len(calls) == 7:
            raise KeyboardInterrupt  # the run is killed during its 7th measurement
        return fake(w, c)

    with pytest.raises(KeyboardInterrupt):
        tune_workloads([(W3, 1)], log, trials=10, measure=dying, progress=False, transforms=False, confirm=0)
    lines = log.read_text().splitlines(keepends=True)
    assert len(lines) == 6  # every finished measurement was flushed
    log.write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])  # and the kill tore the last line
    kept = [json.loads(line)["config"]["index"] for line in lines[:5]]

    again = []
    summary = tune_workloads([(W3, 1)], log, trials=10, measure=lambda w, c: again.append(c) or fake(w, c),
                             progress=False, transforms=False, confirm=0)[0]
    assert summary.resumed == 5 and summary.new == 5 == len(again)
    (indices,) = indices_by_workload(log).values()
    assert indices[:5] == kept and len(indices) == len(set(indices)) == 10
    assert len(read_records(log).records) == 10  # the torn line is gone, the log reads cleanly
    # A complete run is not repeated.
    text = log.read_text()
    assert tune_workloads([(W3, 1)], log, trials=10, measure=fake, progress=False, transforms=False,
                          confirm=0)[0].new == 0
    assert log.read_text() == text


def test_rerun_makes_only_the_missing_retimings(tmp_path):
    """Finalists are chosen from each config's first record; its later records are its
    re-timings. A rerun asking for more finalists re-times only the new ones, 3 times."""
    log = tmp_path / "t.log"
    tune_fake([(W3, 1)], log, trials=12, confirm=2)
    timed = Counter(indices_by_workload(log).popitem()[1])
    twice = {i for i, n in timed.items() if n > 1}
    assert len(twice) == 2 and all(timed[i] == 4 for i in twice)
    s = tune_fake([(W3, 1)], log, trials=12, confirm=5)[0]
    assert s.new == 0 and s.confirmed == 3 * 3
    timed = Counter(indices_by_workload(log).popitem()[1])
    assert sorted(timed.values(), reverse=True)[:6] == [4, 4, 4, 4, 4, 1]
    assert {i for i, n in timed.items() if n > 1} > twice
    again = tune_fake([(W3, 1)], log, trials=12, confirm=5)
    assert again[0].confirmed == 0


def test_failed_measurements_are_logged_and_not_retried(tmp_path):
    log = tmp_path / "t.log"

    def picky(w, c):
        if c.ic_bn == 4:
            raise MeasureError(INSTANTIATION_ERROR, "no")
        return fake(w, c)

    s = tune_workloads([(W3, 1)], log, trials=40, measure=picky, progress=False, transforms=False, confirm=0)[0]
    errors = [json.loads(line) for line in open(log) if json.loads(line)["result"][1] != 0]
    assert s.errors == len(errors) > 0 and {e["result"][1] for e in errors} == {INSTANTIATION_ERROR}
    assert read_records(log).skipped_error == len(errors)
    state = logged(log, host_target())
    assert sum(v is None for runs in state.convs.values() for v in runs.values()) == len(errors)
    s2 = tune_workloads([(W3, 1)], log, trials=45, measure=picky, progress=False, transforms=False, confirm=0)[0]
    assert s2.resumed == 40 and s2.new == 5


REC = ('{"input": ["llvm", "conv2d_NCHWc.x86", [], {}], "config": {"index": 0}, '
       '"result": [[1e-4], 0, 0, 0]}')


def test_repair_tail_cuts_only_a_torn_record_off_a_log(tmp_path):
    p = tmp_path / "x.log"
    p.write_text(f"{REC}\n{REC[:40]}")
    assert repair_tail(p) and p.read_text() == f"{REC}\n"
    p.write_text(f"{REC}\n{REC}")  # complete last record without its newline: kept
    assert not repair_tail(p) and p.read_text() == f"{REC}\n{REC}\n"
    p.write_text(f"{REC}\n# tuned on the quiet host")  # not a record: not ours to cut
    assert not repair_tail(p) and p.read_text() == f"{REC}\n# tuned on the quiet host\n"
    p.write_text(REC[:30])  # killed while writing the very first record
    assert repair_tail(p) and p.read_text() == ""
    p.write_text("# comments only\n\n")
    assert not repair_tail(p) and p.read_text() == "# comments only\n\n"


@pytest.mark.parametrize("data, kept, cut", [
    # three records pasted on one line, no newline at the end (solve reads all three)
    (f"{REC} {REC} {REC}", f"{REC} {REC} {REC}\n", False),
    # two whole records and a torn third on the last line: only the torn one goes
    (f"{REC}\n{REC} {REC}  {REC[:50]}", f"{REC}\n{REC} {REC}\n", True),
    # a log with old Mac line ends, which solve reads line by line
    (f"{REC}\r{REC}\r{REC}", f"{REC}\r{REC}\r{REC}\n", False),
    (f"{REC}\r{REC}\r{REC[:20]}", f"{REC}\r{REC}\r", True),
])
def test_repair_tail_keeps_every_whole_record_of_the_last_line(tmp_path, data, kept, cut):
    p = tmp_path / "x.log"
    p.write_bytes(data.encode())
    assert repair_tail(p) == cut
    assert p.read_bytes() == kept.encode()


@pytest.mark.parametrize("data", [
    b"\x08\x07\x12\x0bpytorch\x1a\x051.13:\x8f\x01\n\x0c\n\x01x",  # the head of an .onnx model
    bytes(range(256)) * 4,  # binary without a newline where a record's would be
    b"layer,ms\nconv1,0.52\nconv2,0.3",  # text, not records
    b'{"plan": [1, 2]}\n{"plan": 3',  # JSON, but not AutoTVM records (and no newline at the end)
    b'{"not": "a record"}',
    b"\n# a log?\n[1, 2]\n",
])
def test_a_file_that_is_not_a_log_is_refused_untouched(data, tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(data)
    with pytest.raises(GraphTunerError, match="model.onnx: not an AutoTVM tuning log .*left as it"):
        repair_tail(p)
    with pytest.raises(GraphTunerError, match="not an AutoTVM tuning log"):
        tune_fake([(W1, 1)], p, trials=2)
    with pytest.raises(GraphTunerError, match="not an AutoTVM tuning log"):
        append_transforms(p, [((1, 8, 4, 4), 1, 4)], host_target(), progress=False,
                          measure=lambda k: 1e-5)
    with pytest.raises(GraphTunerError, match="not an AutoTVM tuning log"):
        retime_workloads([(W1, 1)], p, measure=fake, progress=False)
    assert p.read_bytes() == data


def test_a_directory_or_special_file_is_refused(tmp_path):
    with pytest.raises(GraphTunerError, match=re.escape(f"{tmp_path}: is a directory")):
        tune_fake([(W1, 1)], tmp_path, trials=2)
    if os.path.exists("/dev/null"):
        with pytest.raises(GraphTunerError, match="/dev/null: is not a regular file"):
            tune_fake([(W1, 1)], "/dev/null", trials=2)


def test_a_log_with_comments_and_a_torn_last_line_is_resumed(tmp_path):
    log = tmp_path / "t.log"
    tune_fake([(W1, 1)], log, trials=4, confirm=0)
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("# tuned by hand\n\n" + "".join(lines[:3]) + lines[3][:50])
    s = tune_fake([(W1, 1)], log, trials=4, confirm=0)[0]
    assert s.resumed == 3 and s.new == 1
    again = log.read_text().splitlines(keepends=True)
    assert again[:5] == ["# tuned by hand\n", "\n", *lines[:3]]  # only the torn line was cut
    redone, torn = json.loads(again[5]), json.loads(lines[3])
    assert (redone["config"], redone["result"][:2]) == (torn["config"], torn["result"][:2])
    assert len(again) == 6


def test_transform_records_are_flushed_as_measured(tmp_path, monkeypatch):
    """A run stopped while measuring transforms keeps those it measured; the rerun measures
    only the others (and none twice: the cache has the ones it measured too)."""
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "t.log"
    calls = []

    def dying(key):
        calls.append(key)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return 1e-5 * len(calls)

    with pytest.raises(KeyboardInterrupt):
        tune_fake([(W1, 1)], log, trials=6, confirm=0, transforms=True, measure_transform=dying)
    assert len(read_records(log).transforms) == 3
    again = []
    tune_fake([(W1, 1)], log, trials=6, confirm=0, transforms=True,
              measure_transform=lambda key: again.append(key) or 1e-5)
    ts = read_records(log).transforms
    # the 4th (killed) and the rest measured, the first 3 not again
    assert len(again) == len(ts) - 3 > 0 and set(again).isdisjoint(calls[:3])
    assert len({(t.shape, t.src_layout, t.dst_layout) for t in ts}) == len(ts)


def test_unwritable_cache_dir_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(blocker))
    log = tmp_path / "t.log"
    message = f"GRAPH_TUNER_CACHE_DIR={blocker}: cannot write the caches there"
    with pytest.raises(GraphTunerError, match=re.escape(message)):
        tune_fake([(W1, 1)], log, trials=2, transforms=True)
    assert log.read_text() == ""  # refused before anything was measured
    tune_fake([(W1, 1)], log, trials=2)  # no transforms, no cache needed


def test_transform_records_appended_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "t.log"
    tune_workloads([(W1, 1)], log, trials=10, measure=fake, progress=False, transforms=False, confirm=0)
    recs = read_records(log).records
    keys = transform_keys([W1.data_shape], recs, host_target())
    blocks = {1} | {int(r.entity[k][-1]) for r in recs for k in ("tile_ic", "tile_oc")}
    assert len(keys) == len(blocks) * (len(blocks) - 1)
    measured = []
    n = append_transforms(log, keys, host_target(), progress=False, measure=lambda k: measured.append(k) or 1e-5)
    assert n == len(keys) == len(measured)
    ts = read_records(log).transforms
    assert len(ts) == len(keys) and all(t.shape == W1.data_shape and t.time == 1e-5 for t in ts)
    assert {t.src_layout for t in ts} == {"NCHW" if b == 1 else f"NCHW{b}c" for b in blocks}
    assert append_transforms(log, keys, host_target(), progress=False, measure=lambda k: 1 / 0) == 0


def test_retime_transforms_replaces_this_hosts_transform_records_once(tmp_path, monkeypatch):
    """Each of this host's transform keys ends with one record at its new time (a key logged
    twice too); another CPU's transforms and the conv records stay as they were."""
    from graph_tuner.tuning import retime_transforms

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "t.log"
    tune_workloads([(W1, 1)], log, trials=6, measure=fake, progress=False, transforms=False, confirm=0)
    keys = transform_keys([W1.data_shape], read_records(log).records, host_target())
    append_transforms(log, keys, host_target(), progress=False, measure=lambda k: 1e-5)
    lines = log.read_text().splitlines()
    twice, foreign = json.loads(lines[-1]), json.loads(lines[-2])
    foreign["input"][0] = "llvm -mcpu=other"
    with open(log, "a") as f:
        f.write(json.dumps(twice) + "\n" + json.dumps(foreign) + "\n")
    convs = [r.time for r in read_records(log).records]
    timed = []
    assert retime_transforms(log, measure=lambda k: timed.append(k) or 2e-5, progress=False) == len(keys)
    after = read_records(log)
    assert sorted(timed) == sorted(keys) and [r.time for r in after.records] == convs
    mine = [t for t in after.transforms if t.target == host_target()]
    assert len(mine) == len(keys) and all(t.time == 2e-5 for t in mine)
    assert [t.time for t in after.transforms if t.target == "llvm -mcpu=other"] == [1e-5]
    from kernels.transform_bench import load_cached  # timed again though cached: the cache has the new times

    assert set(load_cached(keys).values()) == {2e-5}
    # A timing that is not a time leaves that key's record as it was.
    assert retime_transforms(log, measure=lambda k: math.inf if k == keys[0] else 3e-5, progress=False) == len(keys) - 1
    assert sorted(t.time for t in read_records(log).transforms if t.target == host_target()) == \
        [2e-5] + [3e-5] * (len(keys) - 1)
    with pytest.raises(GraphTunerError, match="no such log"):
        retime_transforms(tmp_path / "new.log", progress=False)
    assert not (tmp_path / "new.log").exists()


def test_bad_arguments_and_unwritable_log(tmp_path):
    with pytest.raises(GraphTunerError, match="--trials"):
        tune_workloads([(W1, 1)], tmp_path / "t.log", trials=0, measure=fake)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(GraphTunerError, match="cannot write"):
        tune_workloads([(W1, 1)], blocker / "t.log", trials=1, measure=fake)


def test_real_tiny_workload_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    w = Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1))
    log = tmp_path / "t.log"
    lines = []
    tune_workloads([(w, 1)], log, trials=3, progress=False, print_fn=lines.append, confirm=2)
    parsed = read_records(log)
    assert len(parsed.records) == 3 + 3 * 2 and all(r.time > 0 for r in parsed.records)
    assert len(parsed.transforms) >= 2 and all(t.time > 0 for t in parsed.transforms)
    (cands,) = layer_candidates([w], parsed, target=host_target())
    assert cands and all(c.time > 0 for c in cands)
    assert "GFLOP/s" in lines[0] and "layout transforms" in lines[-1]


def test_tune_model_logs_every_transform_a_solve_needs(tmp_path, monkeypatch):
    """The log alone must let `solve` find its plan again, including transforms of tensors no
    conv reads (a global pool's output before flatten, a residual add's inputs), and that plan
    is the one a solve with every transform measured finds."""
    import math

    from graph_tuner.api import GraphTuner
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.tuning import tune_model

    def secs(key):  # deterministic, varying with the blocks and the size
        shape, a, b = key
        return 1e-9 * math.prod(shape) * (1 + (7 * a + 3 * b) % 5) + 1e-6

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("kernels.transform_bench.time_transform", secs)
    b = GraphBuilder("residual")
    x = b.input((1, 16, 8, 8))
    c1 = b.relu(b.conv(x, 32, 3, padding=1))
    c2 = b.conv(c1, 32, 3, padding=1)
    y = b.relu(b.add(c2, c1))
    out = b.softmax(b.dense(b.flatten(b.global_avg_pool(y)), 10))
    model = b.build(out)
    log = tmp_path / "t.log"
    tune_model(model, log, trials=8, measure=fake, progress=False, confirm=0)
    plan = GraphTuner(model, log).solve()  # measures nothing: a plan needing an unlogged transform raises
    full = GraphTuner(model, log)
    for key in full.required_transforms():
        full.transforms.add(*key, secs(key))
    best = full.solve()
    assert plan.records_text() == best.records_text() and plan.cost == pytest.approx(best.cost)
    # ... and only what the lazy solves used: no timing spent on every transform a plan could use.
    logged_keys = {(t.shape, parse_layout(t.src_layout), parse_layout(t.dst_layout))
                   for t in read_records(log).transforms}
    assert {t.key for t in plan.transforms} <= logged_keys <= set(full.required_transforms())
    pooled = {t.shape for t in read_records(log).transforms}
    assert (1, 32, 1, 1) in pooled  # the global pool's output: read plain by flatten


def test_tune_model_times_each_workload_with_its_layers_epilogue(tmp_path, monkeypatch):
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.tuning import tune_model, workload_epilogues

    b = GraphBuilder("preact")
    x = b.input((1, 16, 8, 8))
    s1 = b.add(b.conv(b.relu(b.batch_norm(x)), 16, 3, padding=1, name="c1"), x)
    s2 = b.add(b.conv(b.relu(b.batch_norm(s1)), 16, 3, padding=1, name="c2"), s1)
    model = b.build(b.conv(b.relu(s2), 16, 3, padding=1, name="c3"))
    epilogues = workload_epilogues(model)
    # c1 and c2 (residual add, then the next unit's bn+relu as a second output) outvote c3
    assert epilogues == {model.workload(model.op("c1")): dict(
        bias=False, residual=True, activation=None, affine_out=True, affine_activation="relu", prologue=False,
        prologue_activation=None, row_means=False)}
    seen = []

    class Timer:
        def __init__(self, epilogues, winograd):
            seen.append((epilogues, winograd))

        def __call__(self, workload, config):
            return fake(workload, config)

    monkeypatch.setattr("kernels.tuner.KernelTimer", Timer)
    tune_model(model, tmp_path / "t.log", trials=3, progress=False, transforms=False, confirm=0)
    assert seen == [(epilogues, {})]  # 16 channels: no Winograd GEMMs (graph_tuner.winograd)


def test_retime_replaces_the_finalists_records_and_keeps_everything_else(tmp_path):
    log = tmp_path / "t.log"
    tune_workloads([(W3, 1), (W1, 1)], log, trials=12, measure=fake, progress=False, transforms=False, confirm=5)
    foreign = json.loads(log.read_text().splitlines()[0])
    foreign["input"][0] = "llvm -mcpu=other"  # another CPU's record of the same config: not ours to replace
    with open(log, "a") as f:
        f.write(json.dumps(foreign) + "\n")
    before = read_records(log).records
    finalists = {w: layer_candidates([w], [r for r in before if r.target == host_target()], k=4,
                                     target=host_target())[0] for w in (W3, W1)}
    n = retime_workloads([(W3, 1), (W1, 1)], log, measure=lambda w, c: 3 * fake(w, c), confirm=4, progress=False)
    assert n == 8
    after = read_records(log).records
    for w in (W3, W1):
        chosen = {c.record.config_index for c in finalists[w]}
        mine = [r for r in after if r.workload == w and r.target == host_target()]
        for i in chosen:  # only the new timings: 3 rounds at the new speed
            assert [r.time for r in mine if r.config_index == i] == pytest.approx([3 * fake(w, entity_config(
                next(r for r in mine if r.config_index == i).entity))] * 3)
        untouched = sorted((r.config_index, r.time) for r in before
                           if r.workload == w and r.target == host_target() and r.config_index not in chosen)
        assert untouched == sorted((r.config_index, r.time) for r in mine if r.config_index not in chosen)
        assert len(untouched) > 0
    assert sum(r.target == "llvm -mcpu=other" for r in after) == 1
    # solve now weighs the finalists at their new times
    (cands,) = layer_candidates([W1], [r for r in after if r.target == host_target()], target=host_target())
    now = {(c.in_block, c.out_block): (c.record.config_index, c.time) for c in cands}
    for c in finalists[W1]:
        assert now[(c.in_block, c.out_block)] == (c.record.config_index, pytest.approx(3 * c.time))


def test_a_log_with_a_bom_and_a_comment_not_in_utf8_is_tuned_and_retimed_keeping_them(tmp_path):
    log = tmp_path / "t.log"
    head = b"\xef\xbb\xbf# tuned by J\xf6rg\n"  # read_records reads such a log: so must tune
    log.write_bytes(head)
    tune_fake([(W1, 1)], log, trials=6, confirm=2)
    assert retime_workloads([(W1, 1)], log, measure=lambda w, c: 2 * fake(w, c), confirm=2, progress=False) == 2
    data = log.read_bytes()
    assert data.startswith(head) and data.count(b"\n") == 1 + len(read_records(log).records)


def test_retime_times_a_winograd_layers_gemm_records_as_the_gemm(tmp_path):
    """A Winograd-eligible layer's candidates include its GEMM's records; --retime times those
    as the GEMM (a workload of its own in the list), never as a direct conv of the layer:
    Inception-v3's shipped log stopped --retime with an internal error, a GEMM config's
    tile_ow (18) not in the 71-wide layer's space. Every GEMM record, searched or re-timed,
    names the conv it was timed as (WINOGRAD_FIELD); the layer's own records name none."""
    from graph_tuner.winograd import candidate_gemm

    layer = Conv2DWorkload((1, 80, 73, 73), (192, 80, 3, 3))  # Inception-v3's
    gemm = candidate_gemm(layer)

    def timer(w, c):  # the GEMM's configs 10x faster: the layer's fastest candidates
        return fake(w, c) / (10 if w == gemm else 1)

    log = tmp_path / "t.log"
    tune_workloads([(layer, 1), (gemm, 1)], log, trials=24, measure=timer, progress=False, transforms=False,
                   winograd={gemm: layer})
    before = read_records(log).records
    assert {r.workload for r in before} == {layer, gemm}
    assert all(r.winograd_of == (layer if r.workload == gemm else None) for r in before)
    entities = {w: {json.dumps(r.entity, sort_keys=True) for r in before if r.workload == w} for w in (layer, gemm)}
    # tile_ow 18 (the GEMM's whole width) is not in the layer's space
    assert any(entity_config(r.entity).ow_bn == 18 for r in before if r.workload == gemm)
    retime_workloads([(layer, 1), (gemm, 1)], log, measure=lambda w, c: 2 * timer(w, c), confirm=4, progress=False,
                     winograd={gemm: layer})
    after = read_records(log).records
    assert all(r.winograd_of == (layer if r.workload == gemm else None) for r in after)
    # Without the mapping (a caller of its own), the GEMM's records keep the conv they named.
    retime_workloads([(layer, 1), (gemm, 1)], log, measure=timer, confirm=4, progress=False)
    assert all(r.winograd_of == (layer if r.workload == gemm else None) for r in read_records(log).records)
    # No config of one workload recorded under the other; both re-timed at the new speed.
    assert {w: {json.dumps(r.entity, sort_keys=True) for r in after if r.workload == w} for w in (layer, gemm)} == entities
    for w in (layer, gemm):
        new = [r for r in after if r.workload == w and r not in before]
        assert new and all(r.time == pytest.approx(2 * timer(w, entity_config(r.entity))) for r in new)


def test_a_gemm_timed_as_another_conv_in_a_merged_log_is_tuned_and_retimed_as_this_one(tmp_path):
    """A log merged with another model's holds a GEMM's records timed as that model's conv (an
    unpadded 30x30 where this model has a padded 28x28: one GEMM workload). `tune` resumes from
    none of them (it searches the GEMM as this conv), and `--retime` neither re-times nor
    replaces them; records that name no conv (written before the field) still count as this
    conv's, as `solve` takes them."""
    from graph_tuner.winograd import candidate_gemm

    padded = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    unpadded = Conv2DWorkload((1, 64, 30, 30), (64, 64, 3, 3))
    gemm = candidate_gemm(padded)
    assert candidate_gemm(unpadded) == gemm
    log = tmp_path / "merged.log"

    def theirs_fast(w, c):  # the other conv's timings favour other configs, 10x faster
        return fake(w, c) / (10 if c.oc_bn == 32 else 1)

    tune_workloads([(gemm, 1)], log, trials=8, measure=theirs_fast, progress=False, transforms=False, confirm=2,
                   winograd={gemm: unpadded})
    theirs = log.read_text()
    s = tune_workloads([(gemm, 1)], log, trials=8, measure=fake, progress=False, transforms=False, confirm=2,
                       winograd={gemm: padded})[0]
    assert (s.resumed, s.new) == (0, 8)  # none of the other conv's timings taken as its own
    assert log.read_text().startswith(theirs)
    named = [r.winograd_of for r in read_records(log).records]
    assert named.count(unpadded) == theirs.count("\n") and named.count(padded) == len(named) - named.count(unpadded)
    again = tune_workloads([(gemm, 1)], log, trials=8, measure=fake, progress=False, transforms=False, confirm=2,
                           winograd={gemm: padded})[0]
    assert (again.resumed, again.new, again.confirmed) == (8, 0, 0)  # its own resume as before
    searched = {entity_config(r.entity) for r in read_records(log).records if r.winograd_of == padded}
    retime_workloads([(gemm, 1)], log, measure=lambda w, c: 2 * fake(w, c), confirm=8, progress=False,
                     winograd={gemm: padded})
    lines = log.read_text().splitlines()
    assert [line for line in lines if "64, 30, 30]" in line] == theirs.splitlines()  # theirs untouched, in place
    ours = [r for r in read_records(log).records if r.winograd_of == padded]
    retimed = [r for r in ours if r.raw.get(ORIGIN_FIELD) == RETIME_ORIGIN]
    assert {entity_config(r.entity) for r in ours} == searched  # finalists of its own timings only
    assert retimed and all(r.time == pytest.approx(2 * fake(gemm, entity_config(r.entity))) for r in retimed)
    only_theirs = tmp_path / "theirs.log"
    only_theirs.write_text(theirs)
    with pytest.raises(GraphTunerError, match="its records there were timed as another conv"):
        retime_workloads([(gemm, 1)], only_theirs, measure=fake, progress=False, winograd={gemm: padded})
    assert only_theirs.read_text() == theirs
    # A record naming no conv is this conv's: resumed from, not searched again.
    legacy = tmp_path / "legacy.log"
    legacy.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != WINOGRAD_FIELD}) + "\n"
                              for line in theirs.splitlines()))
    old = tune_workloads([(gemm, 1)], legacy, trials=8, measure=fake, progress=False, transforms=False, confirm=2,
                         winograd={gemm: padded})[0]
    assert (old.resumed, old.new) == (8, 0)


def test_retime_needs_records_of_every_workload(tmp_path):
    log = tmp_path / "t.log"
    tune_workloads([(W1, 1)], log, trials=3, measure=fake, progress=False, transforms=False)
    text = log.read_text()
    with pytest.raises(GraphTunerError, match="no .* record of conv2d data \\[1,32,14,14\\]"):
        retime_workloads([(W1, 1), (W3, 1)], log, measure=fake, progress=False)
    assert log.read_text() == text
    with pytest.raises(GraphTunerError, match="no such log"):
        retime_workloads([(W1, 1)], tmp_path / "missing.log", measure=fake, progress=False)


def test_tune_after_retime_times_nothing(tmp_path):
    """--retime leaves each finalist 3 records, all new and marked as re-timings
    (RETIME_ORIGIN): `tune` then finds every search trial and every re-timing logged (the fake
    timer's times do not move, so neither do the finalists). (Unmarked, as --retime wrote them
    before session 43, they read as a search timing and 2 re-timings, and the next run added a
    round.)"""
    log = tmp_path / "t.log"
    tune_fake([(W1, 1)], log, trials=12, confirm=4)
    assert retime_workloads([(W1, 1)], log, measure=fake, confirm=4, progress=False) == 4
    text = log.read_text()
    assert text.count(f'"{ORIGIN_FIELD}": "{RETIME_ORIGIN}"') == 4 * CONFIRM_ROUNDS
    s = tune_fake([(W1, 1)], log, trials=12, confirm=4)[0]
    assert (s.new, s.confirmed) == (0, 0) and log.read_text() == text


def test_a_logged_time_that_is_no_time_counts_as_failed(tmp_path):
    """A NaN, zero or negative cost (a damaged line) must not make its config a finalist or the
    workload's best, nor be measured again."""
    log = tmp_path / "t.log"
    tune_fake([(W1, 1)], log, trials=6, confirm=0)
    lines = log.read_text().splitlines()
    bad = [json.loads(line) for line in lines[:3]]
    for obj, cost in zip(bad, (math.nan, 0.0, -1e-4)):
        obj["result"][0] = [cost]
    log.write_text("\n".join([json.dumps(obj) for obj in bad] + lines[3:]) + "\n")
    state = logged(log, host_target())
    (runs,) = state.convs.values()
    assert [runs[obj["config"]["index"]] for obj in bad] == [None, None, None]
    s = tune_fake([(W1, 1)], log, trials=6, confirm=2)[0]
    assert s.new == 0 and s.confirmed == 6 and s.best_seconds > 0
    retimed = logged(log, host_target()).retimed(conv_input_key(W1, host_target()))
    assert len(retimed) == 2 and retimed.keys().isdisjoint(obj["config"]["index"] for obj in bad)


def test_a_sibling_is_searched_from_the_timings_before_it(tmp_path):
    """A workload that is an earlier one but for its input channels starts its search with
    the earlier one's finalists (warm_start); one without such a sibling does not."""
    sibling = Conv2DWorkload((1, 96, 14, 14), (64, 96, 1, 1))  # W1 with 96 input channels
    seen = {}

    def untied(w, c):  # fake, with every config's time its own (ties would leave the seed order open)
        return fake(w, c) * (1 + 1e-4 * ((c.ic_bn * 7919 + c.oc_bn * 104729 + c.ow_bn * 31 + c.oh_bn * 17) % 1009))

    def measure(w, c):
        seen.setdefault(w, []).append(c)
        return untied(w, c)

    tune_fake([(W1, 1), (W3, 1), (sibling, 1)], tmp_path / "t.log", trials=[24, 24, 10], measure=measure, confirm=0)
    first = {c: untied(W1, c) for c in seen[W1]}
    best_pair = {}
    for c, s in sorted(first.items(), key=lambda kv: kv[1]):
        best_pair.setdefault((c.ic_bn, c.oc_bn), c)
    space = tuning_space(sibling)
    in_space = {space.config(i) for i in range(len(space))}
    seeds = [c for c in list(best_pair.values())[:8] if c in in_space and c != seen[sibling][0]]
    assert seeds and seen[sibling][1:1 + len(seeds)] == seeds
    alone = {}  # W3 is no sibling of W1: its search is the one it makes alone
    tune_fake([(W3, 1)], tmp_path / "alone.log", trials=24, measure=lambda w, c: alone.setdefault(w, []).append(c)
              or untied(w, c), confirm=0)
    assert seen[W3] == alone[W3]


def test_logging_measure_reads_the_log_once(tmp_path, monkeypatch):
    # A lazy solve asks for transforms many times: the log is read for its transforms once,
    # and the ones appended since are known without reading it again (appended once each).
    import graph_tuner.tuning as tuning

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "t.log"
    tune_workloads([(W1, 1)], log, trials=10, measure=fake, progress=False, transforms=False, confirm=0)
    keys = transform_keys([W1.data_shape], read_records(log).records, host_target())
    reads = []
    monkeypatch.setattr(tuning, "logged", lambda *a: reads.append(a) or logged(*a))
    measured = []
    measure, added = tuning.logging_measure(log, lambda k: measured.append(k) or 2e-5)
    got = measure(keys[:2])
    again = measure(keys)
    assert len(reads) == 1 and added() == len(keys) == len(measured)
    assert set(got) == set(keys[:2]) and set(again) == set(keys[2:])
    assert len(read_records(log).transforms) == len(keys)


def test_the_other_steps_timings_go_into_the_log_and_a_solve_from_it_times_none(tmp_path, monkeypatch):
    # tune appends each other step's alone timing (per block a plan could run it in); a
    # solve from the log takes them as they are, timing no step, and picks the same plan.
    from graph_tuner.api import GraphTuner
    from graph_tuner.builder import GraphBuilder
    from graph_tuner.executor import step_timing
    from graph_tuner.tuning import tune_model

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    def build(batch: int):
        b = GraphBuilder("steps")
        x = b.input((batch, 8, 6, 6))
        y = b.max_pool(b.relu(b.conv(x, 16, 3, padding=1, name="c1")), 2, 2)
        return b.build(b.global_avg_pool(b.conv(y, 16, 3, padding=1, name="c2")))

    m = build(1)
    log = tmp_path / "steps.log"
    tune_model(m, log, trials=4, measure=lambda w, c: 1e-4 * (1 + c.ow_bn % 3), progress=False, confirm=0)
    steps = read_records(log).steps
    first = GraphTuner(m, log)
    monkeypatch.setattr(step_timing, "_time_step", lambda *a: pytest.fail("a logged step was timed again"))
    first.benchmark_steps()
    assert steps and {(s.name, s.block) for s in steps} == {(n, b) for n, bs in first.step_ms.items() for b in bs}
    assert all(first.step_ms[s.name][s.block] == pytest.approx(s.time * 1e3) for s in steps)
    assert not first.timed_steps and {s.model for s in steps} == {"steps"}
    plan = first.solve(measure=True)
    assert plan.steps and all(st.time_ms > 0 for st in plan.steps)
    # --retime times them again (appended: a later record replaces an earlier one).
    from graph_tuner.tuning import retime_model

    monkeypatch.setattr(step_timing, "_time_step", lambda *a: 0.5)
    retime_model(m, log, measure=lambda w, c: 1e-4, progress=False)
    monkeypatch.setattr(step_timing, "_time_step", lambda *a: pytest.fail("a logged step was timed again"))
    again = GraphTuner(m, log)
    again.benchmark_steps()
    assert len(read_records(log).steps) == 2 * len(steps)
    assert all(ms == 0.5 for bs in again.step_ms.values() for ms in bs.values())
    # The same model at batch 2, under the same name: its steps' shapes differ, so none is taken.
    monkeypatch.setattr(step_timing, "_time_step", lambda *a: 0.25)
    other = GraphTuner(build(2), log, fallback=True)
    other.benchmark_steps()
    assert other.timed_steps and all(ms == 0.25 for ms in other.timed_steps.values())
    # A record of the early three-argument form is read, never matched.
    from graph_tuner.records import make_step_record

    legacy = make_step_record("steps", steps[0].name, steps[0].block, "x", 1e-3, host_target())
    legacy["input"][2] = legacy["input"][2][:3]
    assert read_records([legacy]).steps[0].identity is None


def test_a_full_disk_while_tuning_is_one_error_and_keeps_the_records_before(tmp_path, monkeypatch):
    from pathlib import Path

    from graph_tuner import tuning

    if os.path.exists("/dev/full"):  # every write there fails with ENOSPC
        with pytest.raises(GraphTunerError, match="/dev/full: cannot append to the tuning log .No space left"):
            tuning.LogFile(Path("/dev/full")).append("{}")
    log = tmp_path / "t.log"
    lines = []
    opened = tuning.LogFile.__init__

    class Filling:  # the disk fills on the fourth line, half of which is written
        def __init__(self, f):
            self.f = f

        def write(self, data):
            if len(lines) == 3:
                self.f.write(bytes(data[:10]))
                raise OSError(28, "No space left on device")
            lines.append(bytes(data).decode().rstrip("\n"))
            return self.f.write(data)

        def close(self):
            self.f.close()

    def filling(self, path):
        opened(self, path)
        self.file = Filling(self.file)

    monkeypatch.setattr(tuning.LogFile, "__init__", filling)
    with pytest.raises(GraphTunerError, match="t.log: cannot append .* every record before this one is kept"):
        tune_fake([(W1, 1)], log, trials=8)
    monkeypatch.setattr(tuning.LogFile, "__init__", opened)
    assert repair_tail(log)  # the half line goes; the three before stay, and the rerun resumes from them
    assert log.read_text().splitlines() == lines
    assert tune_fake([(W1, 1)], log, trials=8)[0].resumed == 3
