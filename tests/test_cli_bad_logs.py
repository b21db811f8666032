"""`graph-tuner solve` on bad tuning logs: each fails before any solving or measuring, with
one line `graph-tuner: error: FILE:LINE: ...` and status 2, writes nothing and leaves the
log as it was (issue 20: ~140 bad inputs, some of which crashed or solved on garbage).

In-process (`cli.main`), so each case costs milliseconds: the log is read first."""
from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import pytest

from graph_tuner.cli import main
from graph_tuner.records import read_records

SHIPPED = Path(__file__).parents[1] / "data" / "znver4" / "resnet-18.log"
LINES = SHIPPED.read_text().splitlines()
CONV = json.loads(LINES[0])  # conv0: data [1, 3, 224, 224], kernel [64, 3, 7, 7]
# [1, 3, 224, 224] NCHW -> NCHW3c
TRANSFORM = json.loads(next(line for line in LINES if '"layout_transform"' in line))
CUDA_LOG = Path(__file__).parent / "data" / "resnet18_cuda_v01_typographic.log"


def edit(base: dict, change) -> bytes:
    """``base`` with ``change`` applied to a copy, as a JSON line (NaN, Infinity: JSON's tokens)."""
    d = copy.deepcopy(base)
    change(d)
    return json.dumps(d).encode()


def cost(value) -> bytes:
    return edit(CONV, lambda d: d["result"].__setitem__(0, [value]))


def entity(items) -> bytes:
    return edit(CONV, lambda d: d["config"].__setitem__("entity", items))


def knob(name, value) -> bytes:
    def change(d):
        for item in d["config"]["entity"]:
            if item[0] == name:
                item[2] = value
    return edit(CONV, change)


def arg(i, value, base=CONV) -> bytes:
    return edit(base, lambda d: d["input"][2].__setitem__(i, value))


def transform(shape=None, src=None, dst=None, costs=None) -> bytes:
    def change(d):
        args = d["input"][2]
        args[0][1] = shape or args[0][1]
        args[1], args[2] = src or args[1], dst or args[2]
        d["result"][0] = costs or d["result"][0]
    return edit(TRANSFORM, change)


def deep(n: int) -> bytes:
    """A record whose kwargs nest ``n`` lists deep (built as text: json cannot build it)."""
    line = json.dumps(CONV)
    return line.replace('{}], "config"', '{"x": ' + "[" * n + "]" * n + '}], "config"', 1).encode()


# (id, the bad line 3 of a log whose other lines are good, what the message says)
BAD_LINES = [
    ("not-utf8", b'{"input": ["llvm \xff\xfe", "conv2d_NCHWc.x86"]}',
     "not UTF-8 text: byte 0xff at column 18"),
    ("cut-typographic-quote", b"\xe2\x80" + LINES[1][1:].encode(),
     "not UTF-8 text: byte 0xe2 at column 1"),
    ("cost-nan", cost(float("nan")), "cost nan is not a measured time"),
    ("cost-infinity", cost(float("inf")), "cost inf is not a measured time"),
    ("cost-negative", cost(-1e-3), "cost -0.001 is not a measured time"),
    ("cost-zero", cost(0.0), "cost 0.0 is not a measured time"),
    ("cost-huge-int", cost(10**400), "is not a measured time"),
    ("cost-string", cost("1e-3"), "cost '1e-3' is not a number of seconds"),
    ("cost-bool", cost(True), "cost True is not a number of seconds"),
    ("no-costs", edit(CONV, lambda d: d["result"].__setitem__(0, [])), "no measured costs"),
    ("error-no-bool", edit(CONV, lambda d: d["result"].__setitem__(1, True)),
     "error_no True is not an integer"),
    ("tile-ic-not-dividing", knob("tile_ic", [-1, 2]),
     "tile_ic block 2 does not divide the 3 input channels"),
    ("tile-oc-not-dividing", knob("tile_oc", [-1, 24]),
     "tile_oc block 24 does not divide the 64 output"),
    ("tile-ic-zero", knob("tile_ic", [-1, 0]), "tile_ic inner factor 0 must be at least 1"),
    ("tile-split-product", knob("tile_oc", [2, 16]),
     "tile_oc split [2, 16] does not multiply to the 64"),
    ("tile-ow-too-wide", knob("tile_ow", [-1, 1000]),
     "tile_ow block 1000 is wider than the 112 output"),
    ("unroll-not-bool", knob("unroll_kw", "yes"), "unroll_kw 'yes' is not true or false"),
    ("no-entity", entity([]), "no tile_ic in the config entity"),
    ("entity-no-tile-ic", entity([e for e in CONV["config"]["entity"] if e[0] != "tile_ic"]),
     "no tile_ic"),
    ("entity-a-dict", entity({"tile_ic": [-1, 3]}),
     "config entity {'tile_ic': [-1, 3]} is not a list"),
    ("entity-item-a-string", entity(["tile"]),
     "config entity item 'tile' is not [name, kind, value]"),
    ("no-config", edit(CONV, lambda d: d.pop("config")), "'config' None is not an object"),
    ("unknown-version", edit(CONV, lambda d: d.__setitem__("version", 0.3)),
     "log version 0.3 is not 0.2"),
    ("swapped-version", edit(CONV, lambda d: d.__setitem__("version", 0.1)),
     "log version 0.1 is not 0.2"),
    ("index-a-string", edit(CONV, lambda d: d["config"].__setitem__("index", "303")),
     "config index '303'"),
    ("target-a-number", edit(CONV, lambda d: d["input"].__setitem__(0, 7)),
     "target 7 is not a target string"),
    ("zero-dimension", arg(0, ["TENSOR", [1, 3, 0, 224], "float32"]),
     "data dimension 0 must be at least 1"),
    ("bool-dimension", arg(0, ["TENSOR", [True, 3, 224, 224], "float32"]),
     "data dimension True is not an"),
    ("huge-dimension", arg(0, ["TENSOR", [1, 3, 10**30, 224], "float32"]),
     "must be at most 2147483647"),
    ("negative-padding", arg(3, [-1, 3, 3, 3]), "padding -1 must be at least 0"),
    ("kernel-taller-than-data", arg(1, ["TENSOR", [64, 3, 300, 300], "float32"]), "no output"),
    ("kernel-not-fitting", arg(1, ["TENSOR", [64, 2, 7, 7], "float32"]),
     "does not fit the 3 channels"),
    ("nested-garbage", deep(100_000), "JSON nested too deeply"),
    ("int-of-5000-digits", json.dumps(CONV).replace("224", "9" * 5000, 1).encode(),
     # Python >= 3.11 (and 3.10.7) refuse to convert it; older ones read it, and the check does
     "(Exceeds the limit (4300 digits)" if hasattr(sys, "get_int_max_str_digits")
     else "must be at most"),
    ("truncated", LINES[1][: LINES[1].index('"result"') + 5].encode(),
     "(Unterminated string starting at"),
    ("json-array", b"[1, 2, 3]", "expected a JSON object, got list"),
    ("neither-version", b'{"foo": 1}', "neither a v0.1"),
    ("transform-block-not-dividing", transform(dst="NCHW2c"),
     "NCHW2c block 2 does not divide the 3 channels"),
    ("transform-layout-nhwc", transform(dst="NHWC"), "layout 'NHWC' is not NCHW or NCHW<n>c"),
    ("transform-layout-block-0", transform(src="NCHW0c"),
     "layout 'NCHW0c' is not NCHW or NCHW<n>c"),
    ("transform-5d-not-its-layout", transform(shape=[1, 1, 224, 224, 3], src="NCHW"),
     "5-d shape [1, 1, 224, 224, 3] is not in its source layout 'NCHW'"),
    ("transform-3d", transform(shape=[3, 224, 224]),
     "layout_transform input shape [3, 224, 224] is not 4-d"),
    ("transform-time-zero", transform(costs=[0]), "cost 0 is not a measured time"),
    ("transform-time-inf", transform(costs=[float("inf")]), "cost inf is not a measured time"),
]


def solve(log: Path, tmp_path: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    out = tmp_path / "out.log"
    before = log.read_bytes()
    status = main(["solve", "resnet-18", "--records", str(log), "-o", str(out), "--no-progress",
                   *extra])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert log.read_bytes() == before  # a log is read, never written
    assert not out.exists()
    return status, err.splitlines()


@pytest.mark.parametrize("bad, reason", [c[1:] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_a_bad_line_is_one_error_naming_file_line_and_reason(tmp_path, capsys, bad, reason):
    log = tmp_path / "bad.log"
    good = [line.encode() for line in (LINES[1], LINES[2], LINES[3])]
    log.write_bytes(b"\n".join([good[0], good[1], bad, good[2]]) + b"\n")
    status, err = solve(log, tmp_path, capsys)
    assert status == 2
    assert len(err) == 1
    assert err[0].startswith(f"graph-tuner: error: {log}:3: not a valid AutoTVM record (")
    assert reason in err[0] and err[0].endswith("; fix the line or pass --skip-bad-lines")
    # --skip-bad-lines skips that line only (solving would go on; the reader is enough here)
    skipped = read_records(log, skip_bad_lines=True)
    assert skipped.skipped_bad == 1 and len(skipped.records) == 3
    why = err[0].split(" record ", 1)[1].removesuffix("; fix the line or pass --skip-bad-lines")
    assert skipped.warnings == [f"{log}:3: skipped, not a valid AutoTVM record {why}"]


def _log_of(tmp_path: Path, lines) -> Path:
    log = tmp_path / "bad.log"
    log.write_text("".join(line + "\n" for line in lines))
    return log


def _failed(line: str) -> str:
    d = json.loads(line)
    d["result"][:2] = [[1e9], 4]  # how TVM writes a failed measurement
    return json.dumps(d)


def _unknown_task(line: str) -> str:
    d = json.loads(line)
    d["input"][1] = "dense_nopack.x86"
    return json.dumps(d)


@pytest.mark.parametrize("make, extra, reason", [
    (lambda: [], (), "read 0 records: 0 conv records, 0 layout transforms; tune it"),
    (lambda: ["# nothing but a comment"], (), "read 0 records"),
    (lambda: [_failed(line) for line in LINES[:40]], (),
     "read 40 records: 0 conv records, 0 layout transforms; "
     "skipped 40 failed measurements (error_no != 0); tune it"),
    (lambda: [_unknown_task(line) for line in LINES[:7]], (),
     "read 7 records: 0 conv records, 0 layout transforms; "
     "skipped 7 of unknown tasks (dense_nopack.x86)"),
    (lambda: CUDA_LOG.read_text().splitlines(), (),
     "read 12 records: 12 conv records, 0 layout transforms, all for target cuda, not llvm; "
     "pass --target cuda"),
    (lambda: LINES[:40], ("--target", "cuda"),
     "no cuda tuning record; read 40 records: 40 conv records, 0 layout transforms, "
     "all for target llvm, not cuda"),
    (lambda: [line for line in LINES if "[64, 3, 7, 7]" not in line][:50], (),
     "read 50 records: 50 conv records, 0 layout transforms, "
     "none of the 50 llvm conv records for this workload"),
])
def test_a_log_without_a_usable_record_says_what_it_read_and_why(
        tmp_path, capsys, make, extra, reason):
    log = _log_of(tmp_path, make())
    status, err = solve(log, tmp_path, capsys, *extra)
    assert status == 2
    assert len(err) == 1 and err[0].startswith(f"graph-tuner: error: {log}: ")
    assert reason in err[0]


def test_bad_records_argument_of_the_api_is_a_graph_tuner_error():
    from graph_tuner import GraphTuner, GraphTunerError

    for records in (None, 42, b"bytes", {"input": []}, [42], [b"\xff"], [{"foo": 1}]):
        with pytest.raises(GraphTunerError):
            GraphTuner("resnet-18", records)


def test_skip_bad_lines_solves_on_with_one_warning_per_skipped_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path))  # this machine's cache: untouched
    log = tmp_path / "r18.log"
    bad = [cost(0.0), b"\xff\xfe", transform(costs=[math.nan])]
    log.write_bytes(SHIPPED.read_bytes() + b"\n".join(bad) + b"\n")
    n = len(LINES)
    out = tmp_path / "out.log"
    # --estimate-transforms: whatever the shipped log lacks for this CPU is estimated, not measured
    args = ["solve", "resnet-18", "--records", str(log), "-o", str(out), "--no-progress",
            "--estimate-transforms"]
    assert main(args) == 2 and not out.exists()
    assert capsys.readouterr().err.startswith(f"graph-tuner: error: {log}:{n + 1}: ")
    assert main([*args, "--skip-bad-lines"]) == 0
    warnings = [w for w in capsys.readouterr().err.splitlines() if "skipped" in w]
    whys = ["cost 0.0 is not a measured time (not finite and positive)",
            "not UTF-8 text: byte 0xff at column 1",
            "cost nan is not a measured time (not finite and positive)"]
    head = "graph-tuner: warning: "
    assert warnings == [f"{head}{log}:{n + i}: skipped, not a valid AutoTVM record ({why})"
                        for i, why in enumerate(whys, 1)]
    assert len(out.read_text().splitlines()) == 21
