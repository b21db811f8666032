"""Property tests of the log reader on garbage: random bytes, and real records mutated.

Whatever the input, :func:`read_records` either returns records fit for the solver (each
time finite and positive, x86 blocks dividing their layer's channels, transform layouts
NCHW[x]c dividing the tensor's channels) or raises a one-line :class:`GraphTunerError`
naming the file and line -- never another exception -- and never changes the file.
"""
from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st

from graph_tuner.errors import GraphTunerError
from graph_tuner.records import UNEXPECTED, X86_TASKS, make_transform_record, read_records
from kernels.config_space import entity_config

ROOT = Path(__file__).parents[1]
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"'})


def _seed_lines() -> list[str]:
    """Real lines: conv records of several workloads and a transform from a shipped log, a
    transform as TVM writes it (5-d, in its source layout), and the first records of each
    format in tests/data (v0.1, v0.2, 2018 RFC, CUDA; typographic quotes, several a line)."""
    shipped = (ROOT / "data" / "znver4" / "resnet-18.log").read_text().splitlines()
    by_workload = {}
    for line in shipped:
        by_workload.setdefault(json.dumps(json.loads(line)["input"][2][:2]), line)
    tvm_transform = make_transform_record([1, 4, 56, 56, 16], "NCHW16c", "NCHW8c", 2e-5, "llvm")
    lines = [*list(by_workload.values())[:6], next(x for x in shipped if '"layout_transform"' in x),
             json.dumps(tvm_transform)]
    for path in sorted((ROOT / "tests" / "data").glob("*.log")):
        firsts = path.read_text().splitlines()[:3]
        lines += [line for line in firsts if line.strip()[:1] in "{\u201c"]
    return lines


SEED_LINES = _seed_lines()
SEED_BYTES = [line.encode() for line in SEED_LINES]
# each line's first record, as JSON (straight quotes) to mutate
SEEDS = [json.JSONDecoder().raw_decode(line.translate(_QUOTES))[0] for line in SEED_LINES]
# 2 of the seeds are layout transforms: weighted up, so that their mutations are as many
MUTATION_SEEDS = SEEDS + [s for s in SEEDS if "layout_transform" in json.dumps(s)] * 4
# Values a hand-edited or foreign log puts where a number, list or string belongs.
ODD = [math.nan, math.inf, -math.inf, 0, 0.0, -1, -1e-3, 1e-320, 10**40, -(10**400), True, False,
       None, "", "1e-3", "NCHW", "NCHW0c", "NCHW5c", "NHWC", [], [-1], [-1, 0], [-1, 5], [2, 16],
       [[]], {}, {"a": 1}, 0.1, 0.2, 0.3, "0.2"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        items = obj.items()
    else:
        items = enumerate(obj) if isinstance(obj, list) else []
    for key, value in items:
        yield from _paths(value, (*prefix, key))


# Where a record's meaning is (its costs and error_no, config, task arguments): half the
# mutations go there, or most would land in the other ~80 places of a record.
HOT = [("result", 0), ("result", 1), ("r", 0), ("r", 1), ("config", "entity"), ("config", "index"),
       ("i", 5), ("input", 2), ("i", 2)]


def _is_hot(path) -> bool:
    return any(path[: len(h)] == h for h in HOT)


@st.composite
def mutated_lines(draw) -> str:
    """A real record with 1-3 values deleted, replaced (odd values, random JSON), or its
    versions swapped, written back as JSON (NaN/Infinity as JSON's tokens), maybe cut short."""
    obj = copy.deepcopy(draw(st.sampled_from(MUTATION_SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(obj))
        hot = [p for p in paths if _is_hot(p)]
        path = draw(st.sampled_from(hot if hot and draw(st.booleans()) else paths))
        if not path:
            continue
        *parents, key = path
        parent = obj
        for p in parents:
            parent = parent[p]
        op = draw(st.sampled_from(["delete", "odd", "random", "version"]))
        if op == "delete":
            del parent[key]
        elif op == "version":
            key = "v" if "i" in obj else "version"
            obj[key] = draw(st.sampled_from([0.1, 0.2, 0.3, "0.2", None]))
        else:
            # a copy: a later mutation may edit inside it, and ODD must stay as it is
            parent[key] = copy.deepcopy(draw(st.sampled_from(ODD) if op == "odd" else json_values))
    line = json.dumps(obj)
    if draw(st.integers(0, 9)) == 0:  # cut short, but not to nothing (hypothesis favours ends)
        line = line[: draw(st.integers(1, len(line) - 1))]
    return line


def _block(layout: str) -> int:
    m = re.fullmatch(r"NCHW(?:([1-9]\d*)c)?", layout)
    assert m, layout
    return int(m.group(1) or 1)


def _fit_for_the_solver(log) -> None:
    """The oracle: what the solver needs of every record, checked independently of the reader."""
    for rec in [*log.records, *log.transforms]:
        assert rec.costs
        assert all(isinstance(c, float) and math.isfinite(c) and c > 0 for c in rec.costs)
        assert math.isfinite(rec.time) and rec.time > 0
        assert rec.version in (0.1, 0.2) and rec.error_no == 0
    for rec in log.records:
        if rec.task_name in X86_TASKS:
            c = entity_config(rec.entity)
            w = rec.workload
            assert c.ic_bn >= 1 and w.in_channels % c.ic_bn == 0
            assert c.oc_bn >= 1 and w.out_channels % c.oc_bn == 0
            assert 1 <= c.ow_bn <= w.out_width and w.out_height >= 1
    for t in log.transforms:
        shape = list(t.shape)
        if len(shape) == 5:
            assert shape[4] == _block(t.src_layout)
            shape = [shape[0], shape[1] * shape[4], shape[2], shape[3]]
        assert len(shape) == 4 and all(d >= 1 for d in shape)
        assert shape[1] % _block(t.src_layout) == 0 and shape[1] % _block(t.dst_layout) == 0


def _read(source, where: str, **kw):
    """Read ``source``; on an error, check it is one line naming ``where`` and a line number."""
    try:
        log = read_records(source, **kw)
    except GraphTunerError as e:
        message = str(e)
        assert "\n" not in message and len(message) < 500, message
        pattern = rf"{re.escape(where)}:\d+: not a valid AutoTVM record \(.+\); fix"
        # A file that starts with gzip's magic is read as a compressed log (data/<cpu>/*.log.gz).
        gzip_pattern = rf"{re.escape(where)}: a damaged gzip file \(.+\); compress the log again"
        assert re.match(pattern, message) or re.match(gzip_pattern, message), message
        assert UNEXPECTED not in message, message  # every known kind of garbage has its own check
        return None
    _fit_for_the_solver(log)
    return log


SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
good_or_garbage = st.lists(st.sampled_from(SEED_BYTES) | st.binary(max_size=40), max_size=5)


@SETTINGS
@given(good_or_garbage, st.sampled_from([b"\n", b"\r\n", b"\r"]), st.booleans())
@example([b"\xef\xbb\xbf" + SEED_BYTES[0], b"# caf\xe9"], b"\n", False)  # a BOM, a latin-1 comment
@example([b"\x1f\x8b", SEED_BYTES[0]], b"\n", True)  # gzip's magic, then no gzip stream
def test_random_bytes_in_a_file_parse_or_fail_cleanly_and_the_file_is_untouched(
        tmp_path, lines, newline, skip):
    path = tmp_path / "fuzz.log"
    data = newline.join(lines)
    path.write_bytes(data)
    log = _read(path, str(path), skip_bad_lines=skip)
    assert path.read_bytes() == data
    if skip and not data.startswith(b"\x1f\x8b"):  # (bad gzip is no line to skip)
        # skipping bad lines never fails, and skips only them: every real line comes through
        assert log is not None
        assert len(log.records) + len(log.transforms) >= sum(line in SEED_BYTES for line in lines)


@SETTINGS
@given(st.lists(st.binary(max_size=60) | st.text(max_size=60), max_size=4))
def test_random_lines_parse_or_fail_cleanly(lines):
    _read(lines, "<records>")
    assert _read(lines, "<records>", skip_bad_lines=True) is not None


@SETTINGS
@given(st.lists(mutated_lines(), min_size=1, max_size=3))
def test_mutated_real_records_parse_or_fail_cleanly(lines):
    _read(lines, "<records>")
    log = _read(lines, "<records>", skip_bad_lines=True)
    # nothing vanishes: each line is read as a record (usable or skipped) or counted as bad
    assert log is not None
    assert log.seen + log.skipped_bad >= sum(bool(x.strip()) for x in lines)


@SETTINGS
@given(st.lists(mutated_lines(), min_size=1, max_size=3))
def test_mutated_records_as_dicts_parse_or_fail_cleanly(lines):
    objs = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            objs.append(obj)
    _read(objs, "<records>")


def test_the_seeds_are_real_records_of_every_format():
    log = read_records(SEED_LINES)
    assert len(SEEDS) == len(SEED_LINES) >= 12
    assert {r.version for r in log.records} == {0.1, 0.2} and len(log.transforms) == 2
    assert {r.target_kind for r in log.records} == {"llvm", "cuda"}
    _fit_for_the_solver(log)
