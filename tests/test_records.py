"""AutoTVM record reading and writing, on fixtures copied from real logs (tests/data)."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from graph_tuner.errors import GraphTunerError
from graph_tuner.records import (
    Record,
    format_record,
    logged_records,
    make_conv2d_record,
    make_transform_record,
    normalize_padding,
    read_records,
)
from kernels.workload import Conv2DWorkload

DATA = Path(__file__).parent / "data"
X86_V01 = DATA / "resnet18_x86_v01_typographic.log"
CUDA_V01 = DATA / "resnet18_cuda_v01_typographic.log"
CUDA_V02 = DATA / "centernet_cuda_v02_many_per_line.log"
X86_RFC = DATA / "resnet18_x86_rfc2018.log"
X86_V02 = DATA / "tvm010_x86_v02.log"
ALL = [X86_V01, CUDA_V01, CUDA_V02, X86_RFC, X86_V02]

GOOD_V02 = json.dumps(make_conv2d_record(
    Conv2DWorkload((1, 8, 8, 8), (8, 8, 3, 3), padding=(1, 1, 1, 1)),
    {"tile_ic": [-1, 8], "tile_oc": [-1, 8], "tile_ow": [-1, 8], "unroll_kw": True}, 0, [1e-4], "llvm",
    timestamp=0.0))


def test_x86_seed_counts_and_first_record():
    assert "\u201c" in X86_V01.read_text()  # the fixture really has typographic quotes
    log = read_records(X86_V01)
    assert len(log.records) == 21
    assert len({r.workload for r in log.records}) == 12
    first = log.records[0]
    assert first.target == "llvm" and first.task_name == "topi_x86_conv2d_NCHWc" and first.version == 0.1
    assert first.workload == Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3))
    assert first.config_index == 136
    assert first.entity == {"tile_ic": [-1, 1], "tile_oc": [-1, 32], "tile_ow": [-1, 1], "unroll_kw": False}
    assert first.time == pytest.approx(0.01014757672815534)
    assert first.source == f"{X86_V01}:1"


def test_cuda_v01_seed():
    log = read_records(CUDA_V01)
    assert len(log.records) == 12
    assert {r.target_kind for r in log.records} == {"cuda"}
    assert {r.task_name for r in log.records} == {"topi_nn_conv2d"}


def test_many_records_per_line_and_mixed_quotes():
    lines = CUDA_V02.read_text().splitlines()
    assert len(lines) == 3 and '"result"' in lines[1] and "\u201cinput\u201d" in lines[1]
    log = read_records(CUDA_V02)
    assert len(log.records) == 42
    assert sum(r.source.endswith(":1") for r in log.records) == 40
    assert [r.task_name for r in log.records if r.source.endswith(":2")] == ["conv2d_nchw_winograd.cuda"]
    winograd = log.records[40]
    assert winograd.version == 0.2
    assert winograd.workload == Conv2DWorkload((1, 3, 608, 608), (16, 3, 7, 7), padding=(3, 3, 3, 3))
    assert winograd.time == pytest.approx(0.07371293322794117)


def test_rfc_2018_format_normalised():
    log = read_records(X86_RFC)  # has a '# comment' line and a blank line
    assert len(log.records) == 21 and log.skipped_bad == 0
    first = log.records[0]
    # args: data, kernel, num_filter, kernel_size, strides, padding [3, 3], layout, out_layout, dtype
    assert first.workload == Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1))
    assert first.entity["tile_ow"] == [28, 4]
    assert first.target == "llvm -mcpu=skylake-avx512"


def _v01(task="topi_x86_conv2d_NCHWc", args=None, error_no=0, costs=(1e-3,)):
    args = args or [["TENSOR", [1, 8, 8, 8], "float32"], ["TENSOR", [8, 8, 3, 3], "float32"],
                    [1, 1], [1, 1, 1, 1], [1, 1], "NCHW", "float32"]
    entity = [["tile_ic", "sp", [-1, 8]], ["tile_oc", "sp", [-1, 8]], ["tile_ow", "sp", [-1, 8]],
              ["unroll_kw", "ot", True]]
    return json.dumps({"i": ["llvm", task, args, {}, [], {"i": 0, "c": None, "e": entity}],
                       "r": [list(costs), error_no, 1.0, 0.0], "v": 0.1})


def test_failed_measurements_and_unknown_tasks_are_counted():
    log = read_records([_v01(error_no=4, costs=(1e9,)), _v01(), _v01(task="dense_nopack.x86"),
                        _v01(task="dense_nopack.x86")])
    assert len(log.records) == 1
    assert log.skipped_error == 1
    assert log.skipped_unknown_task == 2 and log.unknown_tasks == {"dense_nopack.x86": 2}
    assert "2 of unknown tasks (dense_nopack.x86)" in log.summary()


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "resnet.log"
    broken = GOOD_V02.replace('"version": 0.2,', '"version": 0.2')  # a comma lost in editing
    path.write_text(f"# header\n{GOOD_V02}\n{broken}\n{GOOD_V02}\n")
    with pytest.raises(GraphTunerError) as e:
        read_records(path)
    assert str(e.value) == (f"{path}:3: not a valid AutoTVM record (Expecting ',' delimiter); "
                            "fix the line or pass --skip-bad-lines")
    log = read_records(path, skip_bad_lines=True)
    assert len(log.records) == 2 and log.skipped_bad == 1
    assert log.warnings[0].startswith(f"{path}:3: ")


@pytest.mark.parametrize("line", [
    "hello world",
    '{"i": ["llvm"], "r": [[1e-3], 0, 0, 0], "v": 0.1}',  # too few fields
    '{"foo": 1}',
    "[1, 2, 3]",
    _v01(args=[["TENSOR", [1, 8, 8, 8], "float32"], ["TENSOR", [8, 3, 3, 3], "float32"],
               [1, 1], [1, 1, 1, 1], [1, 1], "NCHW", "float32"]),  # kernel does not fit the data
    _v01(costs=()),
])
def test_structurally_bad_records(line):
    with pytest.raises(GraphTunerError, match=r"^<records>:1: not a valid AutoTVM record \(.+\); fix"):
        read_records([line])
    assert read_records([line], skip_bad_lines=True).skipped_bad == 1


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(GraphTunerError, match="nope.log: cannot read"):
        read_records(tmp_path / "nope.log")


def test_layout_transform_records_are_separate():
    line = json.dumps({"i": ["llvm -mcpu=skylake-avx512", "layout_transform",
                             [["TENSOR", [1, 64, 56, 56], "float32"], "NCHW8c", "NCHW16c"], {},
                             ["layout_transform", [1, 64, 56, 56, "float32"], "NCHW8c", "NCHW16c"],
                             {"i": 0, "c": None, "e": []}],
                       "r": [[2e-5, 4e-5], 0, 0.5, 0.0], "v": 0.1})
    log = read_records([line, _v01()])
    assert len(log.records) == 1 and len(log.transforms) == 1
    t = log.transforms[0]
    assert (t.shape, t.src_layout, t.dst_layout) == ((1, 64, 56, 56), "NCHW8c", "NCHW16c")
    assert t.time == pytest.approx(3e-5)
    assert json.loads(format_record(t)) == json.loads(line)


def test_argument_forms_are_normalised():
    base = [["TENSOR", [1, 8, 8, 8], "float32"], ["TENSOR", [8, 8, 3, 3], "float32"]]
    ints = read_records([_v01(args=base + [1, 1, 1, "NCHW", "float32"])]).records[0].workload
    pairs = read_records([_v01(args=base + [[1, 1], [1, 1], [1, 1], "NCHW", "float32"])]).records[0].workload
    no_dilation = read_records([_v01(task="conv2d_nchw.cuda", args=base + [[1, 1], [1, 1, 1, 1], "float32"])])
    assert ints == pairs == no_dilation.records[0].workload
    assert ints.padding == (1, 1, 1, 1) and ints.dilation == (1, 1)
    assert normalize_padding([1, 2]) == (1, 2, 1, 2)


def test_depthwise_kernel_multiplier_form():
    args = [["TENSOR", [1, 32, 8, 8], "float32"], ["TENSOR", [32, 1, 3, 3], "float32"],
            [1, 1], [1, 1, 1, 1], [1, 1], "float32"]
    w = read_records([_v01(task="topi_nn_depthwise_conv2d_nchw", args=args)]).records[0].workload
    assert w.is_depthwise and w.groups == 32 and w.kernel_shape == (32, 1, 3, 3)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_format_round_trip_keeps_version_and_content(path):
    log = read_records(path)
    lines = [format_record(r) for r in log.records]
    assert not any(q in line for line in lines for q in "\u201c\u201d")
    again = read_records(lines).records
    assert again == log.records
    for rec, line in zip(log.records, lines):
        assert json.loads(line) == rec.raw
        assert list(json.loads(line)) == list(rec.raw)  # key order kept too
        assert ('"v": 0.1' in line) == (rec.version == 0.1)


@pytest.mark.parametrize("path", [X86_V01, CUDA_V01, X86_RFC], ids=lambda p: p.stem)
def test_v01_to_v02_conversion(path):
    log = read_records(path)
    converted = read_records([format_record(r, version="v0.2") for r in log.records]).records
    for old, new in zip(log.records, converted, strict=True):
        assert new.version == 0.2 and new.raw["version"] == 0.2
        assert dataclasses.replace(new, version=0.1) == old
        assert new.raw["input"] == old.raw["i"][:4]
        assert new.raw["result"] == old.raw["r"]
        assert new.raw["config"]["entity"] == old.raw["i"][5]["e"]
    assert format_record(converted[0], version=0.2) == format_record(converted[0])
    with pytest.raises(ValueError, match="v0.1"):
        format_record(converted[0], version="0.1")


def test_records_and_dicts_are_accepted_as_input():
    log = read_records(X86_V01)
    assert read_records(log.records).records == log.records
    assert read_records([r.raw for r in log.records]).records == log.records


def test_make_transform_record_round_trip():
    d = make_transform_record([1, 3, 224, 224], "NCHW", "NCHW3c", [1e-5, 3e-5], "llvm -mcpu=x", timestamp=5.0)
    t = read_records([json.dumps(d)]).transforms[0]
    assert t.shape == (1, 3, 224, 224) and t.time == pytest.approx(2e-5) and t.target == "llvm -mcpu=x"


dims = st.integers(1, 64)


@st.composite
def workloads(draw):
    c = draw(st.sampled_from([1, 3, 8, 16, 24, 64]))
    depthwise = draw(st.booleans()) and c > 1
    oc = c if depthwise else draw(st.sampled_from([4, 16, 32, 48]))
    k = draw(st.sampled_from([1, 3, 5]))
    h, w = draw(dims) + k, draw(dims) + k
    pad = tuple(draw(st.lists(st.integers(0, 2), min_size=4, max_size=4)))
    return Conv2DWorkload((1, c, h, w), (oc, 1 if depthwise else c, k, k),
                          (draw(st.integers(1, 2)),) * 2, pad, groups=c if depthwise else 1)


@settings(max_examples=60, deadline=None)
@given(workloads(), st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=4))
def test_make_conv2d_record_round_trips(w, costs):
    entity = [["tile_ic", "sp", [-1, 1]], ["tile_oc", "sp", [-1, 1]], ["tile_ow", "sp", [-1, 1]],
              ["unroll_kw", "ot", False]]
    d = make_conv2d_record(w, entity, 3, costs, "llvm -mcpu=sapphirerapids", timestamp=1.0)
    rec = read_records([format_record(d)]).records[0]
    assert isinstance(rec, Record)
    assert rec.workload == w and rec.config_index == 3 and rec.costs == tuple(costs)
    assert rec.task_name == ("depthwise_conv2d_NCHWc.x86" if w.is_depthwise else "conv2d_NCHWc.x86")
    assert rec.entity == {name: value for name, _, value in entity}


def test_a_records_time_is_the_median_of_its_costs():
    """One timing taken while the shared host was busy must not drag a config's cost (mean 2.3e-3)."""
    w = Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1))
    rec = make_conv2d_record(w, {"tile_ic": [-1, 8], "tile_oc": [-1, 8], "tile_ow": [-1, 4]}, 0,
                             [1e-3, 5e-3, 1e-3], "llvm")
    assert read_records([rec]).records[0].time == pytest.approx(1e-3)


# --- what enters: every value is checked where it is read (issue 20) -------------------------
# The bad-record classes, each through `graph-tuner solve`, are in tests/test_cli_bad_logs.py;
# random and mutated input in tests/test_records_fuzz.py.


def test_records_built_in_python_pass_the_same_checks():
    rec = read_records([GOOD_V02]).records[0]
    zero = dataclasses.replace(rec, costs=(0.0,), source="")
    with pytest.raises(GraphTunerError, match=r"^<records>:2: .*cost 0.0 is not a measured time"):
        read_records([rec, zero])
    wide = dataclasses.replace(rec, entity={**rec.entity, "tile_oc": [-1, 3]})
    log = read_records([rec, wide, zero], skip_bad_lines=True)
    assert log.records == [rec] and log.skipped_bad == 2
    assert "tile_oc block 3 does not divide the 8 output channels" in log.warnings[0]
    # a failed measurement built in Python is skipped like a read one
    assert read_records([dataclasses.replace(rec, error_no=1, costs=(1e9,))]).skipped_error == 1


def test_bytes_lines_a_bom_and_comments_in_any_encoding(tmp_path):
    path = tmp_path / "r.log"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD_V02.encode() + b"\r\n# caf\xe9 latin-1\r\n" + GOOD_V02.encode())
    assert len(read_records(path).records) == 2
    assert len(read_records([GOOD_V02.encode(), b"  # \xff"]).records) == 1
    with pytest.raises(GraphTunerError, match=r"^<records>:2: .*not UTF-8 text: byte 0xff at column 1\)"):
        read_records([GOOD_V02.encode(), b"\xff" + GOOD_V02.encode()])


def test_line_numbers_are_an_editors(tmp_path):
    # U+2028 inside a JSON string is text, not a line break (str.splitlines would split there)
    path = tmp_path / "r.log"
    path.write_text(GOOD_V02.replace('"llvm"', '"llvm \u2028"') + "\n" + "{bad\n", encoding="utf-8")
    with pytest.raises(GraphTunerError, match=r"r.log:2: not a valid AutoTVM record"):
        read_records(path)


@pytest.mark.parametrize("source", [None, 42, 1.5, b"bytes", {"input": []}])
def test_records_of_the_wrong_type_are_a_user_error(source):
    with pytest.raises(GraphTunerError, match="records must be a log path or an iterable"):
        read_records(source)


def test_a_failed_measurement_is_skipped_whatever_its_cost():
    d = json.loads(GOOD_V02)
    d["result"][:2] = [[1e9], 2]  # TVM's marker
    log = read_records([json.dumps(d)])
    assert log.records == [] and log.skipped_error == 1 and log.skipped_bad == 0
    assert log.summary() == "read 1 records: 0 conv records, 0 layout transforms; " \
                            "skipped 1 failed measurements (error_no != 0)"


def test_unknown_task_names_stay_on_one_line():
    d = json.loads(GOOD_V02)
    d["input"][1] = "evil\ntask"
    assert "'evil\\ntask'" in read_records([json.dumps(d)]).summary()


def test_transform_costs_take_only_usable_transform_records():
    from types import SimpleNamespace

    from graph_tuner.transform_costs import TransformCosts

    costs = TransformCosts()
    good = SimpleNamespace(shape=(1, 2, 4, 4, 8), src_layout="NCHW8c", dst_layout="NCHW", time=1e-6)
    assert costs.load_records([good]) == 1 and costs.get((1, 16, 4, 4), 8, 1) == 1e-6
    for bad in (dict(time=0.0), dict(time=math.nan), dict(dst_layout="NCHW3c"), dict(src_layout="NCHW")):
        record = SimpleNamespace(**{**vars(good), **bad}, source="t.log:7")
        with pytest.raises(GraphTunerError, match=r"^t.log:7: not a usable layout_transform record"):
            TransformCosts().load_records([record])


def test_cached_transform_times_that_are_no_time_are_measured_again(tmp_path, monkeypatch):
    from graph_tuner.transform_costs import TransformCosts
    from kernels import transform_bench

    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path))
    keys = [((1, 8, 4, 4), 1, 8), ((1, 8, 4, 4), 8, 1), ((1, 8, 4, 4), 1, 4)]
    times = [2e-6, 0.0, math.nan]
    lines = [json.dumps([list(shape), a, b, t]) for (shape, a, b), t in zip(keys, times)]
    transform_bench.cache_path().write_text("\n".join(lines) + "\n")  # one timing a line
    costs = TransformCosts()
    costs.fill(keys, measure=False)
    assert costs.seconds == {keys[0]: 2e-6} and costs.missing(keys) == keys[1:]


@pytest.mark.parametrize("layout", ["NCHW0c", "NCHW016c", "NHWC", "nchw", "NCHW8c ", ""])
def test_layouts_are_nchw_or_nchw_block_c(layout):
    from graph_tuner.layout_flow import parse_layout

    with pytest.raises(ValueError, match="is not NCHW or NCHW<n>c"):
        parse_layout(layout)


def test_apply_records_rejects_a_malformed_log(tmp_path):
    from graph_tuner.api import apply_records

    path = tmp_path / "opt.log"
    path.write_text(GOOD_V02.replace("[0.0001]", "[NaN]") + "\n")
    with pytest.raises(GraphTunerError, match=r"opt.log:1: .*cost nan is not a measured time"):
        apply_records("resnet-18", path)


def test_a_gzip_compressed_log_reads_as_the_plain_one(tmp_path):
    import gzip

    plain = DATA / "tvm010_x86_v02.log"
    packed = tmp_path / "log.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = read_records(plain), read_records(packed)
    assert a.records == b.records and len(a.records) > 0
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed.read_bytes()[:40])
    with pytest.raises(GraphTunerError, match=r"cut.log.gz: a damaged gzip file"):
        read_records(cut)


def test_tall_conv_records_say_whether_they_ran_down_the_columns(tmp_path):
    """A tall conv's ``unroll_kw`` config runs down the columns (kernels.conv2d.columns_first);
    its records carry a code hash saying so. One without it (a log tuned before) timed the conv
    over rows: it reads as the ``unroll_kw=False`` config, which runs what it timed, and is
    written back as it was."""
    from graph_tuner.records import COLUMNS_CODE_HASH
    from kernels.config_space import tuning_space

    tall = Conv2DWorkload((1, 16, 17, 17), (16, 16, 7, 1), padding=(3, 0, 3, 0))
    wide = Conv2DWorkload((1, 16, 17, 17), (16, 16, 1, 7), padding=(0, 3, 0, 3))
    e = {"tile_ic": [-1, 8], "tile_oc": [-1, 16], "tile_ow": [-1, 9], "unroll_kw": True}
    space = tuning_space(tall)
    new = make_conv2d_record(tall, e, space.index(e), [1e-4], "llvm")
    assert new["config"]["code_hash"] == COLUMNS_CODE_HASH
    assert make_conv2d_record(tall, {**e, "unroll_kw": False}, 0, [1e-4], "llvm")["config"]["code_hash"] is None
    assert make_conv2d_record(wide, e, 0, [1e-4], "llvm")["config"]["code_hash"] is None
    legacy = json.loads(json.dumps(new))
    legacy["config"]["code_hash"] = None
    marked, old = read_records([new, legacy]).records
    assert marked.entity["unroll_kw"] is True and marked.config_index == space.index(e)
    assert old.entity["unroll_kw"] is False and old.config_index == space.index({**e, "unroll_kw": False})
    assert json.loads(format_record(old)) == legacy
    # A run resuming the log sees the rows config measured, so its search times the columns.
    path = tmp_path / "t.log"
    path.write_text(json.dumps(new) + "\n" + json.dumps(legacy) + "\n")
    assert [r.index for r in logged_records(path, "llvm")] == [marked.config_index, old.config_index]


def test_a_winograd_gemm_record_names_its_conv_and_a_wrong_name_is_a_one_line_error():
    """WINOGRAD_FIELD round-trips (read, written back as read), and a conv whose GEMM is not the
    record's workload, or a field that is no argument list, stops the read at its line."""
    from graph_tuner.records import WINOGRAD_FIELD
    from kernels.winograd import gemm_workload

    conv = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    gemm = gemm_workload(conv)
    entity = {"tile_ic": [-1, 16], "tile_oc": [-1, 16], "tile_ow": [-1, 7], "tile_oh": 1}
    line = format_record(make_conv2d_record(gemm, entity, 0, [1e-4], "llvm", timestamp=0.0, winograd_of=conv))
    rec = read_records([line]).records[0]
    assert rec.workload == gemm and rec.winograd_of == conv and format_record(rec) == line
    assert read_records([GOOD_V02]).records[0].winograd_of is None
    other = Conv2DWorkload((1, 64, 32, 32), (64, 64, 3, 3), padding=(1, 1, 1, 1))  # 8x8 tiles, not 7x7
    assert gemm_workload(other) != gemm
    wrong = json.loads(line) | {WINOGRAD_FIELD: make_conv2d_record(other, {}, 0, [1e-4], "llvm")["input"][2]}
    with pytest.raises(GraphTunerError, match=r"^<records>:2: .*graph_tuner_winograd_of names conv data "
                                              r"\[1, 64, 32, 32\] .*, whose Winograd GEMM is conv data "
                                              r"\[1, 2304, 8, 8\] .*not this record's conv data \[1, 2304, 7, 7\]"):
        read_records([GOOD_V02, json.dumps(wrong)])
    args = json.loads(line)[WINOGRAD_FIELD]
    strided = make_conv2d_record(dataclasses.replace(conv, strides=(2, 2)), {}, 0, [1e-4], "llvm")["input"][2]
    for bad, says in (("a conv", "'a conv' is not a conv's argument list"),
                      (args[:1], "needs at least data, kernel, strides, padding"),
                      (args[:5] + ["NHWC", "NHWC", "float32"], "is not a float32 NCHW conv"),
                      ([["TENSOR", args[0][1], "float16"]] + args[1:], "is not a float32 NCHW conv"),
                      (strided, "stride \[2, 2\] .*which has no Winograd form")):
        with pytest.raises(GraphTunerError, match=rf"^<records>:1: not a valid AutoTVM record \(graph_tuner_winograd_of"
                                                  rf".*{says}.*drop it, or the field\); fix the line"):
            read_records([json.dumps(json.loads(line) | {WINOGRAD_FIELD: bad})])
