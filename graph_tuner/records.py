"""AutoTVM tuning records: read every log format, write back what was read.

Formats read (one JSON object per record; several per line are fine):

* v0.1 -- ``{"i": [target, task, args, kwargs, workload, config], "r": result, "v": 0.1}``
  with ``config = {"i": index, "c": code_hash, "t": template_key, "e": entity}``
  (TVM <= 0.6, including the 2018 RFC ``topi_x86_conv2d_NCHWc`` argument list
  ``[data, kernel, num_filter, kernel_size, strides, padding(2), layout, out_layout, dtype]``);
* v0.2 -- ``{"input": [target, task, args, kwargs], "config": {"index", "code_hash",
  "entity"}, "result": result, "version": 0.2, "tvm_version": ...}`` (TVM >= 0.7);

where ``result = [costs, error_no, all_cost, timestamp]``. ``#`` comments and blank
lines are skipped, typographic quotes from web pages are straightened, records with
``error_no != 0`` and tasks we do not know are skipped and counted. Each conv record
becomes a :class:`Record` with a normalised :class:`~kernels.workload.Conv2DWorkload`;
``layout_transform`` records become :class:`TransformRecord`. Every value is checked as it
is read (:mod:`graph_tuner.record_checks`): what a :class:`RecordLog` holds is fit for the
solver, and anything else is a one-line :class:`GraphTunerError` naming ``file:line``.

Writing: :func:`format_record` writes the record's original JSON (same version, same
content and key order) or converts v0.1 -> v0.2. The conversion changes the envelope
only -- task name, arguments and config index are kept: renaming
``topi_x86_conv2d_NCHWc`` to ``conv2d_NCHWc.x86`` would change the argument list and
the index space (``kernels.config_space``), which is re-tuning, not conversion. That is
also what TVM itself does when it re-encodes an old record. :func:`make_conv2d_record`
and :func:`make_transform_record` build TVM >= 0.7 records for our own tuner.

>>> line = ('{"input": ["llvm -mcpu=skylake-avx512", "conv2d_NCHWc.x86", [["TENSOR", [1, 64, 56, 56], "float32"], '
...         '["TENSOR", [64, 64, 3, 3], "float32"], [1, 1], [1, 1, 1, 1], [1, 1], "NCHW", "NCHW", "float32"], {}], '
...         '"config": {"index": 82, "code_hash": null, "entity": [["tile_ic", "sp", [-1, 32]], '
...         '["tile_oc", "sp", [-1, 16]], ["tile_ow", "sp", [-1, 2]], ["unroll_kw", "ot", true]]}, '
...         '"result": [[0.0021, 0.0023], 0, 1.5, 1581437816.7], "version": 0.2, "tvm_version": "0.7.0"}')
>>> log = read_records([line])
>>> rec = log.records[0]
>>> rec.task_name, rec.workload.padding, rec.entity["tile_oc"], round(rec.time, 6)
('conv2d_NCHWc.x86', (1, 1, 1, 1), [-1, 16], 0.0022)
>>> format_record(rec) == line
True
"""
from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import os
import statistics
import time as _time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from graph_tuner import record_checks as checks
from graph_tuner.errors import GraphTunerError
from graph_tuner.record_checks import show
from kernels.config_space import entity_config, tuning_space
from kernels.conv2d import columns_first
from kernels.workload import Conv2DWorkload

# Task names by template family, across TVM versions.
X86_CONV2D_TASKS = frozenset({"topi_x86_conv2d_NCHWc", "conv2d_NCHWc.x86"})
X86_DEPTHWISE_TASKS = frozenset({"topi_x86_depthwise_conv2d_NCHWc_from_nchw", "depthwise_conv2d_NCHWc.x86"})
X86_TASKS = X86_CONV2D_TASKS | X86_DEPTHWISE_TASKS
CUDA_CONV2D_TASKS = frozenset({
    "topi_nn_conv2d",
    "topi_nn_depthwise_conv2d_nchw",
    "conv2d_nchw.cuda",
    "conv2d_nchw_winograd.cuda",
    "conv2d_cudnn.cuda",
    "depthwise_conv2d_nchw.cuda",
    "group_conv2d_nchw.cuda",
})
CONV2D_TASKS = X86_TASKS | CUDA_CONV2D_TASKS
DEPTHWISE_TASKS = frozenset(t for t in CONV2D_TASKS if "depthwise" in t)
LAYOUT_TRANSFORM_TASK = "layout_transform"
IN_NETWORK_TASK = "graph_tuner_in_network"  # graph-tuner's own: a step's in-network / alone ratio
IN_NETWORK_KINDS = ("conv", "step", "transform")
STEP_TASK = "graph_tuner_step"  # graph-tuner's own: a step that is not a conv, timed alone in a block

# What we write: TVM >= 0.7's record format and task names. The version string names the
# TVM whose conv2d_NCHWc.x86 index space (kernels.config_space, "verbose" tile_ow) we match.
TVM_VERSION = "0.10.0"

_TYPOGRAPHIC_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": '"', "\u2019": '"'})


@dataclass
class _Measured:
    """What every kind of record shares: a target and measured costs, then (keyword-only,
    after each kind's own fields) the error number, the log version, where it was read
    (``"file:line"``) and the parsed JSON object (``raw``, so writing keeps the input's
    content); neither of the last two takes part in equality."""

    target: str
    costs: tuple[float, ...] = field(kw_only=True)
    error_no: int = field(kw_only=True)
    version: float = field(kw_only=True)  # 0.1 or 0.2
    source: str = field(default="", compare=False, kw_only=True)
    raw: dict = field(default_factory=dict, compare=False, repr=False, kw_only=True)

    @property
    def time(self) -> float:
        """Median measured cost in seconds: a slow outlier (the shared host busy for one
        timing) moves it less than a mean (the mean of 1, 1 and 5 is 2.3)."""
        return statistics.median(self.costs)

    @property
    def target_kind(self) -> str:
        """``"llvm"``, ``"cuda"``, ...: the first word of the target string."""
        return target_kind(self.target)


@dataclass
class Record(_Measured):
    """One successful conv2d measurement from an AutoTVM log.

    ``entity`` maps knob name -> value as written (``[-1, inner]`` or ``[outer, inner]``
    for splits).
    """

    task_name: str
    workload: Conv2DWorkload
    config_index: int
    entity: dict[str, Any]
    # The data and kernel tensors' element types as logged: a float16 or int8 record of the
    # same shapes is another computation, never a float32 layer's (review, session 51).
    dtypes: tuple[str, str] = field(default=("float32", "float32"), kw_only=True)
    # A Winograd GEMM record's conv (WINOGRAD_FIELD): the layer workload it was timed as. Two
    # convs can make one GEMM workload (a padded 28x28 and an unpadded 30x30), and the
    # record's time is one of theirs only. None: a direct record, or a GEMM record from before.
    winograd_of: Conv2DWorkload | None = field(default=None, kw_only=True)

    @property
    def float32(self) -> bool:
        return self.dtypes == ("float32", "float32")


@dataclass
class TransformRecord(_Measured):
    """A measured ``layout_transform`` of a float32 tensor ``shape`` (``src_layout`` -> ``dst_layout``)."""

    shape: tuple[int, ...]
    src_layout: str
    dst_layout: str


@dataclass
class NetworkRecord(_Measured):
    """How much slower than alone (the log's time) one step of ``model`` ran in the network
    (``graph-tuner tune``): ``costs`` holds that ratio, not seconds. ``kind``
    ``"conv"``: layer ``name`` at config ``key`` (a ``Conv2DConfig``); ``"step"``: another
    step ``name`` in block ``key``; ``"transform"``: ``key`` a transform's
    ``(NCHW shape, src block, dst block)``. ``identity``: the model's
    :attr:`~graph_tuner.model.Model.digest`, which tells one batch size or version of a model
    from another under one name; None in the four-argument records of sessions 18-20, which
    are read but never matched."""

    model: str
    kind: str
    name: str
    key: Any
    identity: str | None


@dataclass
class StepRecord(_Measured):
    """Step ``name`` of ``model`` (pooling, elementwise, dense: not a conv) timed alone with
    its tensors in ``block`` (:mod:`graph_tuner.executor.step_timing`), so that a solve from
    the log costs it as the tune did, timing nothing (``costs`` in seconds). ``identity``
    (:func:`~graph_tuner.executor.step_timing.step_identities`) tells one batch size or version
    of a model from another under one name; None in the three-argument records of one early
    version, which are read but never matched."""

    model: str
    name: str
    block: int
    identity: str | None


@dataclass
class RecordLog:
    """What :func:`read_records` found: usable records plus counts of what it skipped."""

    records: list[Record] = field(default_factory=list)
    transforms: list[TransformRecord] = field(default_factory=list)
    network: list[NetworkRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    skipped_bad: int = 0  # malformed lines/records (only with skip_bad_lines=True)
    skipped_error: int = 0  # measurements with error_no != 0
    unknown_tasks: Counter = field(default_factory=Counter)  # task name -> records skipped
    warnings: list[str] = field(default_factory=list)  # one per skipped bad line
    source: str = "<records>"  # the file read, for messages
    seen: int = 0  # records (JSON objects, dicts, Records) read, usable or not

    @property
    def skipped_unknown_task(self) -> int:
        return sum(self.unknown_tasks.values())

    def summary(self) -> str:
        """One line for the user: what was read and what was skipped, and why.

        >>> t = make_transform_record([1, 8, 4, 4], "NCHW", "NCHW8c", 1e-6, "llvm")
        >>> read_records([t]).summary()
        'read 1 records: 0 conv records, 1 layout transforms'
        """
        parts = [f"{len(self.records)} conv records", f"{len(self.transforms)} layout transforms"]
        if self.network:
            parts.append(f"{len(self.network)} in-network ratios")
        if self.steps:
            parts.append(f"{len(self.steps)} other steps' timings")
        skipped = []
        if self.skipped_error:
            skipped.append(f"{self.skipped_error} failed measurements (error_no != 0)")
        if self.unknown_tasks:
            names = ", ".join(n if n.isprintable() and len(n) <= 40 else show(n, 40)  # one line
                              for n in sorted(self.unknown_tasks)[:3])
            more = ", ..." if len(self.unknown_tasks) > 3 else ""
            skipped.append(f"{self.skipped_unknown_task} of unknown tasks ({names}{more})")
        if self.skipped_bad:
            skipped.append(f"{self.skipped_bad} malformed")
        return (f"read {self.seen} records: " + ", ".join(parts)
                + (f"; skipped {', '.join(skipped)}" if skipped else ""))


def target_kind(target: str) -> str:
    """The target's kind, e.g. ``"llvm"`` for ``"llvm -mcpu=skylake-avx512"``.

    >>> target_kind("cuda -model=unknown"), target_kind(" llvm")
    ('cuda', 'llvm')
    """
    words = target.split()
    return words[0] if words else ""


def target_cpu(target: str) -> str | None:
    """The ``-mcpu=`` of a target string, None without one.

    >>> target_cpu("llvm -mcpu=znver3 -libs=cblas"), target_cpu("cuda")
    ('znver3', None)
    """
    for word in target.split():
        if word.startswith("-mcpu="):
            return word[len("-mcpu="):]
    return None


def read_records(
    source: str | os.PathLike | Iterable[str | bytes | Mapping | Record | TransformRecord],
    *,
    skip_bad_lines: bool = False,
) -> RecordLog:
    """Read AutoTVM records from a log file path, or from lines / dicts / records.

    A ``str`` is a path; the file is read, never written. A malformed line or record
    (not UTF-8, not JSON, not a record, or a value no measurement has: a time that is
    not finite and positive, a ``tile_ic``/``tile_oc`` block that does not divide the
    channels, a layout that is not ``NCHW[x]c``; see :mod:`graph_tuner.record_checks`)
    raises :class:`GraphTunerError` naming ``file:line``; with ``skip_bad_lines=True``
    it is counted and a warning kept instead.

    >>> log = read_records(["# comment", "", '{"i": ["llvm", "dense_nopack.x86", [], {}, [], '
    ...                     '{"i": 0, "c": null, "e": []}], "r": [[1e-3], 0, 0, 0], "v": 0.1}'])
    >>> len(log.records), dict(log.unknown_tasks)
    (0, {'dense_nopack.x86': 1})
    """
    if isinstance(source, (str, os.PathLike)):
        items: Iterable = _file_lines(Path(source))
        name = str(source)
    elif isinstance(source, (bytes, bytearray, Mapping)) or not isinstance(source, Iterable):
        raise GraphTunerError(f"records must be a log path or an iterable of record lines, "
                              f"dicts or records, not {type(source).__name__}")
    else:
        items, name = source, "<records>"
    log = RecordLog(source=name)
    for lineno, item in enumerate(items, 1):
        where = f"{name}:{lineno}"
        if isinstance(item, (bytes, bytearray)):
            if item.lstrip().startswith(b"#"):
                continue  # a comment, in whatever encoding
            try:
                item = bytes(item).decode("utf-8")
            except UnicodeDecodeError as e:
                bad = f"not UTF-8 text: byte 0x{item[e.start]:02x} at column {e.start + 1}"
                _bad(log, where, bad, skip_bad_lines)
                continue
        if isinstance(item, (Record, TransformRecord)):
            log.seen += 1
            _keep(log, item, where, skip_bad_lines)
        elif isinstance(item, Mapping):
            _add_object(log, item, where, skip_bad_lines)
        elif isinstance(item, str):
            _add_line(log, item, where, skip_bad_lines)
        else:
            got = type(item).__name__
            _bad(log, where, f"expected a line, a dict or a record, got {got}", skip_bad_lines)
    return log


GZIP_MAGIC = b"\x1f\x8b"  # the first bytes of a gzip file


def _file_lines(path: Path) -> list[bytes]:
    """A log file's lines as bytes (gzip-compressed or not, a BOM dropped)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise GraphTunerError(f"{path}: cannot read the tuning log ({e.strerror}); check the path") from None
    if data.startswith(GZIP_MAGIC):  # a compressed log (data/<cpu>/*.log.gz)
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise GraphTunerError(f"{path}: a damaged gzip file ({e}); compress the log again") from None
    # bytes.splitlines: the line numbers an editor shows (str.splitlines also splits
    # at U+2028 and other separators that may sit inside a JSON string).
    return data.removeprefix(b"\xef\xbb\xbf").splitlines()  # a BOM is no record


def _keep(log: RecordLog, rec: Record | TransformRecord, where: str, skip: bool) -> None:
    """A record built in Python passes the checks a parsed one does."""
    if rec.error_no != 0:
        log.skipped_error += 1
        return
    try:
        checks.measured_costs(rec.costs)
        if isinstance(rec, TransformRecord):
            checks.transform_key(rec.shape, rec.src_layout, rec.dst_layout)
        elif rec.task_name in X86_TASKS:
            checks.x86_schedule(rec.entity, rec.workload)
    except checks.BadRecord as e:
        return _bad(log, rec.source or where, str(e), skip)
    (log.transforms if isinstance(rec, TransformRecord) else log.records).append(rec)


def _bad(log: RecordLog, where: str, reason: str, skip: bool) -> None:
    if not skip:
        raise GraphTunerError(f"{where}: not a valid AutoTVM record ({reason}); "
                              "fix the line or pass --skip-bad-lines")
    log.skipped_bad += 1
    log.warnings.append(f"{where}: skipped, not a valid AutoTVM record ({reason})")


def _add_line(log: RecordLog, line: str, where: str, skip: bool) -> None:
    try:
        for obj in _line_objects(line):
            _add_object(log, obj, where, skip)
    except checks.BadRecord as e:  # the line's JSON; the objects before it are kept
        _bad(log, where, str(e), skip)


def _line_objects(line: str) -> Iterator[dict]:
    """The JSON objects on a line (none for a blank or ``#`` comment line; several in a
    pasted log), typographic quotes straightened; :class:`~graph_tuner.record_checks.BadRecord`
    where the line stops being JSON objects.

    >>> list(_line_objects('{"a": 1}  {\u201cb\u201d: 2}')), list(_line_objects("# tuned on rocketlake"))
    ([{'a': 1}, {'b': 2}], [])
    """
    text = line.translate(_TYPOGRAPHIC_QUOTES).strip()
    if not text or text.startswith("#"):
        return
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(text):  # several records may share a line (pasted logs)
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise checks.BadRecord(e.msg) from None
        except ValueError as e:  # e.g. an integer of more digits than Python converts
            raise checks.BadRecord(str(e).split(";")[0]) from None
        except RecursionError:
            raise checks.BadRecord("JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise checks.BadRecord(f"expected a JSON object, got {type(obj).__name__}")
        yield obj
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1


def _add_object(log: RecordLog, obj: Mapping, where: str, skip: bool) -> None:
    log.seen += 1
    try:
        env = _envelope(obj)
        if env["error_no"] != 0:
            log.skipped_error += 1
            return
        env["costs"] = checks.measured_costs(env["costs"])
        if env["task"] == LAYOUT_TRANSFORM_TASK:
            log.transforms.append(_transform(env, obj, where))
        elif env["task"] == IN_NETWORK_TASK:
            log.network.append(_network(env, obj, where))
        elif env["task"] == STEP_TASK:
            log.steps.append(_step(env, obj, where))
        elif env["task"] not in CONV2D_TASKS:
            log.unknown_tasks[env["task"]] += 1
        else:
            log.records.append(_conv_record(env, obj, where))
    except ValueError as e:  # checks.BadRecord, or a workload the kernels reject
        _bad(log, where, str(e), skip)
    except (TypeError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError) as e:
        # A safety net: every shape of bad input we know has a check with its own
        # message (tests/test_records_fuzz.py asserts none ends here).
        _bad(log, where, f"{UNEXPECTED}: {type(e).__name__}: {show(str(e), 60)}", skip)


UNEXPECTED = "unexpected record structure"


def _fields(value: Any, count: int, what: str, exact: bool = True) -> Sequence:
    if not checks.is_list(value) or len(value) < count or (exact and len(value) != count):
        more = "" if exact else " or more"
        raise checks.BadRecord(f"{what} {show(value)} is not a list of {count}{more}")
    return value


def _mapping(value: Any, keys: tuple[str, ...], what: str) -> Mapping:
    if not isinstance(value, Mapping) or any(k not in value for k in keys):
        names = ", ".join(map(repr, keys))
        raise checks.BadRecord(f"{what} {show(value)} is not an object with {names}")
    return value


def _envelope(obj: Mapping) -> dict[str, Any]:
    """The version-independent parts of a record, each checked but the costs (a failed
    measurement's are TVM's marker, 1e9, not a time): those are as written."""
    if "i" in obj and "r" in obj:  # v0.1
        target, task, args, kwargs, _workload, config = _fields(obj["i"], 6, "'i'")
        config = _mapping(config, ("i", "e"), "the config")
        index, entity, result = config["i"], config["e"], obj["r"]
        version, expected = obj.get("v", 0.1), 0.1
    elif "input" in obj and "result" in obj:  # v0.2
        target, task, args, kwargs = _fields(obj["input"], 4, "'input'")
        config = _mapping(obj.get("config"), ("index", "entity"), "'config'")
        index, entity, result = config["index"], config["entity"], obj["result"]
        version, expected = obj.get("version", 0.2), 0.2
    else:
        raise checks.BadRecord("neither a v0.1 ('i', 'r') nor a v0.2 ('input', 'result') record")
    if isinstance(version, bool) or version != expected:
        # Written back as read, a bad version would reach the output log.
        raise checks.BadRecord(f"log version {show(version)} is not {expected}, the version of "
                               f"its {'v0.1' if expected == 0.1 else 'v0.2'} fields")
    if not isinstance(target, str) or not target.split():
        raise checks.BadRecord(f"target {show(target)} is not a target string such as 'llvm'")
    if not isinstance(task, str):
        raise checks.BadRecord(f"task name {show(task)} is not a string")
    if not checks.is_list(args) or not isinstance(kwargs, Mapping):
        raise checks.BadRecord("the task's args must be a list and its kwargs an object")
    costs, error_no = _fields(result, 2, "result", exact=False)[:2]
    error_no = checks.integer(error_no, "error_no", low=0, high=None)
    return dict(target=target, task=task, args=args, kwargs=kwargs,
                index=checks.integer(index, "config index", low=0, high=None),
                entity=checks.entity_dict(entity), costs=costs, error_no=error_no, version=expected)


def normalize_padding(padding: Any) -> tuple[int, int, int, int]:
    """TVM padding forms -> ``(top, left, bottom, right)`` (a ValueError if it is none).

    >>> normalize_padding(1), normalize_padding([1, 2]), normalize_padding([0, 1, 2, 3])
    ((1, 1, 1, 1), (1, 2, 1, 2), (0, 1, 2, 3))
    """
    return checks.padding4(padding)


def _conv_workload(task: str, args: Sequence) -> Conv2DWorkload:
    """Normalise a conv task's argument list (any TVM version) to a workload."""
    if len(args) < 4:
        raise checks.BadRecord(f"{task} needs at least data, kernel, strides, padding; "
                               f"got {len(args)} arguments")
    data = checks.tensor_shape(args[0], "data")
    kernel = checks.tensor_shape(args[1], "kernel")
    rest = args[2:]
    if len(args) == 9 and isinstance(rest[0], int) and checks.is_list(rest[1]):
        # 2018 RFC: data, kernel, num_filter, kernel_size, strides, padding, layout, out_layout, dtype
        strides, padding, dilation, rest = rest[2], rest[3], [1, 1], rest[4:]
    else:  # TVM >= 0.6: data, kernel, strides, padding, dilation, [groups], [layouts], dtype
        strides, padding = rest[0], rest[1]
        has_dilation = len(rest) > 2 and isinstance(rest[2], (int, list, tuple))
        dilation = rest[2] if has_dilation else [1, 1]
        rest = rest[3:] if has_dilation else rest[2:]
    strings = [a for a in rest if isinstance(a, str)]
    layout = strings[0] if len(strings) > 1 else "NCHW"  # a lone string is the dtype
    out_dtype = strings[-1] if strings else "float32"
    if task in DEPTHWISE_TASKS:
        # Depthwise kernels are [C, multiplier, kh, kw]; as OIHW that is [C * m, 1, kh, kw].
        kernel = (kernel[0] * kernel[1], 1, kernel[2], kernel[3])
    if data[1] % kernel[1]:
        raise checks.BadRecord(f"kernel {list(kernel)} does not fit the {data[1]} channels "
                               f"of data {list(data)}")
    w = Conv2DWorkload(data, kernel, checks.pair(strides, "strides"), checks.padding4(padding),
                       checks.pair(dilation, "dilation"), data[1] // kernel[1], layout, out_dtype)
    if w.out_height < 1 or w.out_width < 1:
        raise checks.BadRecord(f"kernel {list(kernel)} does not fit the padded data "
                               f"{list(data)}: no output")
    return w


def _conv_record(env: dict, obj: Mapping, where: str) -> Record:
    workload = _conv_workload(env["task"], env["args"])
    index, entity = env["index"], env["entity"]
    if env["task"] in X86_TASKS:
        checks.x86_schedule(entity, workload)
        if _timed_over_rows(workload, entity, obj):
            index, entity = _as_rows(workload, index, entity)
    args = env["args"]
    return Record(
        target=env["target"], task_name=env["task"], workload=workload,
        config_index=index, entity=entity, costs=env["costs"], error_no=env["error_no"],
        version=env["version"], source=where, raw=dict(obj), dtypes=(args[0][2], args[1][2]),
        winograd_of=_winograd_of(obj, workload),
    )


def _winograd_of(obj: Mapping, workload: Conv2DWorkload) -> Conv2DWorkload | None:
    """The conv a GEMM record names (:data:`WINOGRAD_FIELD`), checked to be a conv whose
    Winograd GEMM is the record's workload; None where the record names none."""
    from graph_tuner.winograd import gemm_of, runs_winograd

    if WINOGRAD_FIELD not in obj:
        return None
    args = obj[WINOGRAD_FIELD]
    fix = "the line was edited or merged wrongly: drop it, or the field"
    try:
        if not checks.is_list(args):
            raise checks.BadRecord(f"{show(args)} is not a conv's argument list")
        conv = _conv_workload("conv2d_NCHWc.x86", args)
        if conv.layout != "NCHW" or conv.out_dtype != "float32" or [a[2] for a in args[:2]] != ["float32", "float32"]:
            raise checks.BadRecord(f"{_conv_text(conv)} is not a float32 NCHW conv, as the tuner times")
    except checks.BadRecord as e:
        raise checks.BadRecord(f"{WINOGRAD_FIELD}: {e}; {fix}") from None
    gemm = gemm_of(conv)
    if gemm is None:
        raise checks.BadRecord(f"{WINOGRAD_FIELD} names {_conv_text(conv)}, which has no Winograd form "
                               f"(3x3, stride 1, ungrouped); {fix}")
    if not runs_winograd(conv, workload):
        raise checks.BadRecord(f"{WINOGRAD_FIELD} names {_conv_text(conv)}, whose Winograd GEMM is "
                               f"{_conv_text(gemm)}, not this record's {_conv_text(workload)}; {fix}")
    return conv


def _conv_text(w: Conv2DWorkload) -> str:
    """A conv in a message: every field that tells two apart."""
    return (f"conv data {list(w.data_shape)} kernel {list(w.kernel_shape)} stride {list(w.strides)} "
            f"pad {list(w.padding)} dilation {list(w.dilation)} groups {w.groups}")


# Which of graph-tuner's steps made a conv record, where that is not the kernel search (absent:
# the search, or its finalists' re-timings). The sibling exchange (graph_tuner.tuning.
# exchange_siblings) times configs another workload's search found: a rerun must not count
# them as its own search's trials, at whatever --trials. TVM ignores keys it does not know.
ORIGIN_FIELD = "graph_tuner_origin"
EXCHANGE_ORIGIN = "sibling-exchange"
# A Winograd GEMM record's conv, as a conv record's argument list (Record.winograd_of): the tuner
# times a GEMM workload's configs as the whole Winograd kernel of one conv, and another conv
# with the same GEMM (15x15 and 16x16 make 4x4 tiles) costs it otherwise.
WINOGRAD_FIELD = "graph_tuner_winograd_of"
# `tune --retime` replaces a config's records (its search timing too) by re-timings: a rerun
# must count them all as re-timings, not one as its search's.
RETIME_ORIGIN = "retime"


# A tall conv's ``unroll_kw`` config has run down the columns since session 37
# (kernels.conv2d.columns_first); before, it ran over rows, as ``unroll_kw=False`` does. Its
# records since carry this code hash; one without it was timed over rows, and is read as the
# ``unroll_kw=False`` config, which runs what it timed (as written, the line is kept).
COLUMNS_CODE_HASH = "graph-tuner:columns"


def _timed_over_rows(workload: Conv2DWorkload, entity: dict, obj: Mapping) -> bool:
    if not columns_first(workload, entity_config(entity)):
        return False
    config = obj.get("config") if "config" in obj else obj.get("i", [None] * 6)[5]
    code_hash = config.get("code_hash", config.get("c")) if isinstance(config, Mapping) else None
    return code_hash != COLUMNS_CODE_HASH


def _as_rows(workload: Conv2DWorkload, index: int, entity: dict) -> tuple[int, dict]:
    """The ``unroll_kw=False`` twin of a tall conv's config: its entity, and its index where the
    record's index is the one :func:`kernels.config_space.tuning_space` gives (else kept)."""
    rows = {**entity, "unroll_kw": False}
    try:
        space = tuning_space(workload)
        return (space.index(rows) if space.index(entity) == index else index), rows
    except ValueError:  # an entity outside our space (another tile_ow policy): keep its index
        return index, rows


def _transform(env: dict, obj: Mapping, where: str) -> TransformRecord:
    args = env["args"]
    if len(args) != 3:
        raise checks.BadRecord("layout_transform needs [tensor, src_layout, dst_layout] arguments")
    shape = checks.tensor_shape(args[0], "layout_transform input", ranks=(4, 5))
    checks.transform_key(shape, args[1], args[2])
    return TransformRecord(
        target=env["target"], shape=shape, src_layout=args[1], dst_layout=args[2],
        costs=env["costs"], error_no=env["error_no"], version=env["version"], source=where,
        raw=dict(obj),
    )


def _network(env: dict, obj: Mapping, where: str) -> NetworkRecord:
    args = env["args"]
    if (len(args) not in (4, 5) or not isinstance(args[0], str) or args[1] not in IN_NETWORK_KINDS
            or not isinstance(args[2], str) or (len(args) == 5 and not isinstance(args[4], str))):
        raise checks.BadRecord(f"{IN_NETWORK_TASK} needs [model, kind ({'/'.join(IN_NETWORK_KINDS)}), name, detail, "
                               f"model identity (a string)] arguments, got {show(args)}")
    kind, detail = args[1], args[3]
    if kind == "conv":
        try:
            key = entity_config(env["entity"])
        except (KeyError, TypeError, ValueError, IndexError):
            raise checks.BadRecord(f"in-network conv ratio: config {show(env['entity'])} is not an x86 conv "
                                   "config (tile_ic, tile_oc, tile_ow)") from None
    elif kind == "step":
        key = checks.integer(detail, "in-network step block", low=1, high=None)
    else:
        shape, src, dst = _fields(detail, 3, "in-network transform [shape, src block, dst block]")
        key = (checks.tensor_shape(["TENSOR", shape, "float32"], "in-network transform"),
               checks.integer(src, "src block", low=1, high=None), checks.integer(dst, "dst block", low=1, high=None))
    return NetworkRecord(target=env["target"], model=args[0], kind=kind, name=args[2], key=key,
                         identity=args[4] if len(args) == 5 else None, costs=env["costs"],
                         error_no=env["error_no"], version=env["version"], source=where, raw=dict(obj))


def _step(env: dict, obj: Mapping, where: str) -> StepRecord:
    args = env["args"]
    if (len(args) not in (3, 4) or not isinstance(args[0], str) or not isinstance(args[1], str)
            or (len(args) == 4 and not isinstance(args[3], str))):
        raise checks.BadRecord(f"{STEP_TASK} needs [model, step name, block, step identity] arguments, "
                               f"got {show(args)}")
    return StepRecord(target=env["target"], model=args[0], name=args[1],
                      block=checks.integer(args[2], "step block", low=1, high=None),
                      identity=args[3] if len(args) == 4 else None, costs=env["costs"],
                      error_no=env["error_no"], version=env["version"], source=where, raw=dict(obj))


# --- what a log holds, for appending to it (graph_tuner.tuning) ---------------------------


def input_key(target: str, task: str, args: Any, kwargs: Any) -> str:
    """What identifies the task a record measures, in any log version: its target, task
    name and arguments, as canonical JSON (a v0.2 record's ``input``).

    >>> input_key("llvm", "layout_transform", [["TENSOR", [1, 8, 4, 4], "float32"], "NCHW", "NCHW8c"], {})
    '["llvm", "layout_transform", [["TENSOR", [1, 8, 4, 4], "float32"], "NCHW", "NCHW8c"], {}]'
    """
    return json.dumps([target, task, args, kwargs], sort_keys=True)


def conv_input_key(workload: Conv2DWorkload, target: str) -> str:
    """The :func:`input_key` of the records our tuner writes for ``workload``."""
    return input_key(*make_conv2d_record(workload, [], 0, [1.0], target, timestamp=0.0)["input"])


def transform_input_key(shape: Sequence[int], src_layout: str, dst_layout: str, target: str) -> str:
    """The :func:`input_key` of a ``layout_transform`` record (:func:`make_transform_record`)."""
    return input_key(*make_transform_record(shape, src_layout, dst_layout, 0.0, target, timestamp=0.0)["input"])


@dataclass(frozen=True)
class Logged:
    """One record of a log as a run appending to it sees it (:func:`logged_records`)."""

    key: str  # input_key: the task it measures
    index: int  # config index
    is_transform: bool
    # Record.time of a successful conv measurement; None for a failed one, or one that is
    # no measurement (a time that is not finite and positive, a config of no schedule).
    time: float | None
    origin: str | None = None  # ORIGIN_FIELD: EXCHANGE_ORIGIN, RETIME_ORIGIN, or None (a search's)
    winograd_of: Conv2DWorkload | None = None  # WINOGRAD_FIELD: the conv a Winograd GEMM was timed as


def logged_records(path: str | os.PathLike, target: str) -> list[Logged]:
    """``target``'s records in the log at ``path``, failed measurements included, in order
    (none if there is no file). What is not a record is left out here: reading the log to
    solve reports it.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.log")
    >>> w = Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1))
    >>> e = {"tile_ic": [-1, 8], "tile_oc": [-1, 8], "tile_ow": [-1, 4], "tile_oh": 1}
    >>> ok = make_conv2d_record(w, e, 3, [3e-4, 1e-4, 2e-4], "llvm")
    >>> failed = make_conv2d_record(w, e, 3, [1e9], "llvm", error_no=1)
    >>> _ = open(p, "w").write("\\n".join(json.dumps(r) for r in (ok, failed)) + "\\nnot a record\\n")
    >>> [(r.index, r.time) for r in logged_records(p, "llvm")], logged_records(p, "cuda")
    ([(3, 0.0002), (3, None)], [])
    """
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for lineno, line in enumerate(_file_lines(path), 1):
        try:
            objects = list(_line_objects(line.decode("utf-8")))
        except ValueError:  # not UTF-8 or not JSON objects (BadRecord)
            continue
        for obj in objects:
            try:
                env = _envelope(obj)
            except _NOT_A_RECORD:
                continue
            if env["target"] == target:
                key = input_key(env["target"], env["task"], env["args"], env["kwargs"])
                is_transform = env["task"] == LAYOUT_TRANSFORM_TASK
                index, time, conv = ((env["index"], None, None) if is_transform
                                     else _conv_read(env, obj, f"{path}:{lineno}"))
                origin = obj.get(ORIGIN_FIELD)
                out.append(Logged(key, index, is_transform, time, origin if isinstance(origin, str) else None, conv))
    return out


# What a damaged object raises on its way through _envelope and _conv_record.
_NOT_A_RECORD = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError)


def _conv_read(env: dict, obj: Mapping, where: str) -> tuple[int, float | None, Conv2DWorkload | None]:
    """The config index a record is read as (:func:`_conv_record`'s: a tall conv's config timed
    over rows is the rows config, so a resumed search times the other form), the
    :attr:`Record.time` of a successful conv measurement, else None, and the conv it names
    (:attr:`Record.winograd_of`). A record that does not read keeps its index as written
    (reading the log to solve reports it)."""
    if env["task"] not in CONV2D_TASKS:
        return env["index"], None, None
    try:
        rec = _conv_record(env, obj, where)
    except _NOT_A_RECORD:
        return env["index"], None, None
    if env["error_no"] != 0:
        return rec.config_index, None, rec.winograd_of
    try:
        return (rec.config_index, dataclasses.replace(rec, costs=checks.measured_costs(env["costs"])).time,
                rec.winograd_of)
    except _NOT_A_RECORD:
        return rec.config_index, None, rec.winograd_of


def record_lines(path: str | os.PathLike, kind: str = "records") -> list[tuple[bytes, Record | TransformRecord | None]]:
    """Each line of a plain-text log, as bytes, with the record of ``kind`` it holds (a
    :class:`RecordLog` list: ``records``, the convs, or ``transforms``), if it holds exactly
    one usable one (else None): for rewriting a log, keeping every other line as it is, a
    comment in another encoding than UTF-8 too."""
    out = []
    # bytes.splitlines, as _file_lines: str.splitlines also splits at U+2028 inside a JSON string
    for raw in Path(path).read_bytes().splitlines():
        try:
            (rec,) = getattr(read_records([raw.decode("utf-8")]), kind)
        except (GraphTunerError, ValueError):  # UnicodeDecodeError too: not a record
            rec = None
        out.append((raw, rec))
    return out


# How far into a file to look for its first line: a record line is ~600 bytes, a model
# file may be gigabytes without a newline.
_HEAD_LIMIT = 1 << 20


def _is_record(text: str) -> bool:
    """Whether a line starts with a JSON object that is an AutoTVM record (v0.2 or v0.1)."""
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return False
    return isinstance(obj, dict) and ({"input", "result"} <= obj.keys() or {"i", "r"} <= obj.keys())


def _torn_record(text: str) -> bool:
    """Whether an unfinished last line is the start of a record (a kill mid-write): ours
    and TVM's begin ``{"input"`` (v0.1: ``{"i"``)."""
    return any(text.startswith(p) or p.startswith(text) for p in ('{"input"', '{"i"'))


def log_problem(path: str | os.PathLike) -> str | None:
    """Why the existing file at ``path`` is not an AutoTVM log we may append to, or None.

    A log is empty, or its first line that is not blank or a ``#`` comment is a JSON
    record -- or the start of one, if that line is also the last and unfinished (a run
    killed while writing its first record). Only the head of the file is read.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x")
    >>> rec = '{"input": ["llvm"], "config": {}, "result": [[1], 0, 0, 0]}'
    >>> _ = open(p, "w").write("# tuned\\n\\n" + rec + "\\n")
    >>> log_problem(p) is None
    True
    >>> _ = open(p, "wb").write(b"\\x08\\x07\\x12\\x0bonnx")
    >>> log_problem(p)
    'line 1 is not a JSON record'
    """
    with open(path, "rb") as f:
        for lineno in range(1, 1 << 30):
            raw = f.readline(_HEAD_LIMIT)
            if not raw:
                return None  # empty, or comments and blank lines only
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a BOM, as read_records drops it
            finished = raw.endswith(b"\n")
            if not finished and len(raw) >= _HEAD_LIMIT:
                return f"line {lineno} is not a JSON record"
            if not raw.strip() or raw.lstrip().startswith(b"#"):
                continue  # a comment in any encoding, as read_records reads it
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                return f"line {lineno} is not a JSON record"
            if text:
                if _is_record(text) or (not finished and _torn_record(text)):
                    return None
                return f"line {lineno} is not a JSON record"
    return None


def torn_tail(data: bytes) -> int | None:
    """Where the torn start of a record at the end of a log (no line break after it: a kill
    mid-write) begins, to cut it off; None if there is none. The last line is read as
    :func:`_line_objects` reads it (lines split as :func:`_file_lines` splits them, so at
    ``\\r`` too), object by object: whole records before the torn one are kept, and a line
    that is anything else (a complete record, a comment, a line someone typed, bytes that
    are not UTF-8) is not ours to cut.

    >>> torn_tail(b'{"a": 1}\\n{"inp'), torn_tail(b'{"a": 1}\\n{"a": 1}'), torn_tail(b"# note")
    (9, None, None)
    >>> torn_tail(b'{"a": 1} {"a": 2} {"input": ['), torn_tail(b'{"a": 1}\\r{"a": 1}')
    (17, None)
    """
    if not data or data.endswith((b"\n", b"\r")):
        return None
    last = data.splitlines(keepends=True)[-1]
    try:
        text = last.decode("utf-8")
    except UnicodeDecodeError:
        return None
    plain = text.translate(_TYPOGRAPHIC_QUOTES)  # as _line_objects reads it; one character for one
    decoder, kept, pos = json.JSONDecoder(), 0, len(plain) - len(plain.lstrip())
    while pos < len(plain):
        try:
            _, kept = decoder.raw_decode(plain, pos)  # kept: the end of the line's last whole object
        except (ValueError, RecursionError):
            torn = _torn_record(plain[pos:].rstrip())
            return len(data) - len(last) + len(text[:kept].encode("utf-8")) if torn else None
        pos = len(plain) - len(plain[kept:].lstrip())
    return None


# --- writing ----------------------------------------------------------------------------


def _version(version: Any) -> float:
    text = str(version).lstrip("v")
    if text not in ("0.1", "0.2"):
        raise ValueError(f"unknown AutoTVM log version {version!r}; use 0.1 or 0.2")
    return float(text)


def to_v02(obj: Mapping, tvm_version: str = TVM_VERSION) -> dict:
    """Convert a v0.1 record object to v0.2 (same target, task, args, kwargs, config, result).

    The v0.1 workload tuple and template key (``"t"``) have no place in v0.2 and are dropped,
    as TVM drops them. A v0.2 object is returned unchanged.
    """
    if "input" in obj:
        return dict(obj)
    target, task, args, kwargs, _workload, config = obj["i"]
    return {
        "input": [target, task, args, kwargs],
        "config": {"index": config["i"], "code_hash": config.get("c"), "entity": config["e"]},
        "result": obj["r"],
        "version": 0.2,
        "tvm_version": tvm_version,
    }


def with_costs(rec: Record, costs: Sequence[float]) -> Record:
    """A copy of ``rec`` whose measured costs (parsed and as written) are ``costs``.

    >>> w = Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1))
    >>> d = make_conv2d_record(w, {"tile_ic": [-1, 8], "tile_oc": [-1, 8], "tile_ow": [-1, 4]}, 0, [0.5], "llvm")
    >>> r = read_records([d]).records[0]
    >>> m = with_costs(r, [0.25, 0.75])
    >>> m.time, json.loads(format_record(m))["result"][0], r.costs
    (0.5, [0.25, 0.75], (0.5,))
    """
    raw = copy.deepcopy(rec.raw)
    result = raw.get("r") if "r" in raw else raw.get("result")
    if result is not None:
        result[0] = [float(c) for c in costs]
    return dataclasses.replace(rec, costs=tuple(float(c) for c in costs), raw=raw)


def format_record(rec: Record | TransformRecord | Mapping, version: Any = None) -> str:
    """One JSON line (straight quotes, no newline) for a record.

    Without ``version`` the record is written as read (same version, keys, values).
    ``version="v0.2"`` / ``0.2`` converts a v0.1 record (see :func:`to_v02`); converting
    v0.2 -> v0.1 is not supported (v0.1 needs TVM's workload tuple, which v0.2 lacks).
    """
    obj = rec if isinstance(rec, Mapping) else rec.raw
    if not obj:
        raise ValueError("record has no JSON object to write; build it with make_conv2d_record")
    current = 0.2 if "input" in obj else 0.1
    wanted = current if version is None else _version(version)
    if wanted == 0.2:
        obj = to_v02(obj)
    elif current == 0.2:
        raise ValueError("cannot write a v0.2 record as v0.1 (no workload tuple); write v0.2")
    return json.dumps(obj)


def make_conv2d_record(
    workload: Conv2DWorkload,
    entity: Mapping[str, Any] | Sequence[Sequence],
    index: int,
    costs: Sequence[float] | float,
    target: str,
    *,
    error_no: int = 0,
    all_cost: float = 0.0,
    timestamp: float | None = None,
    origin: str | None = None,
    winograd_of: Conv2DWorkload | None = None,
) -> dict:
    """A TVM >= 0.7 (v0.2) ``conv2d_NCHWc.x86`` / ``depthwise_conv2d_NCHWc.x86`` record.

    ``entity`` is a record entity list (``ConfigSpace.entity_list``) or a dict name ->
    value (lists are splits, everything else options). ``target`` is e.g.
    ``"llvm -mcpu=sapphirerapids"``. ``origin`` (e.g. :data:`EXCHANGE_ORIGIN`) is written as
    :data:`ORIGIN_FIELD`; ``winograd_of`` (the conv a Winograd GEMM ``workload`` was timed
    as) as :data:`WINOGRAD_FIELD`.

    >>> w = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    >>> d = make_conv2d_record(w, {"tile_ic": [-1, 32], "tile_oc": [-1, 16], "tile_ow": [-1, 2],
    ...                            "unroll_kw": True}, 82, [1e-3], "llvm -mcpu=sapphirerapids", timestamp=0.0)
    >>> d["input"][1], d["input"][2][2:], d["config"]["entity"][3]
    ('conv2d_NCHWc.x86', [[1, 1], [1, 1, 1, 1], [1, 1], 'NCHW', 'NCHW', 'float32'], ['unroll_kw', 'ot', True])
    >>> read_records([d]).records[0].workload == w
    True
    """
    entity_list = _entity_list(entity)
    task = "depthwise_conv2d_NCHWc.x86" if workload.is_depthwise else "conv2d_NCHWc.x86"
    args = _conv_args(workload)
    columns = bool(entity_list) and columns_first(workload, entity_config(entity_list))  # never depthwise
    out = _v02(target, task, args, index, entity_list, costs, error_no, all_cost, timestamp,
               COLUMNS_CODE_HASH if columns else None)
    if origin is not None:
        out[ORIGIN_FIELD] = origin
    if winograd_of is not None:
        out[WINOGRAD_FIELD] = _conv_args(winograd_of)
    return out


def _conv_args(workload: Conv2DWorkload) -> list:
    """``conv2d_NCHWc.x86``'s argument list for ``workload``."""
    return [
        ["TENSOR", list(workload.data_shape), "float32"],
        ["TENSOR", list(workload.kernel_shape), "float32"],
        list(workload.strides), list(workload.padding), list(workload.dilation),
        workload.layout, workload.layout, workload.out_dtype,
    ]


def _entity_list(entity: Mapping[str, Any] | Sequence[Sequence]) -> list:
    """A record's entity as written: ``[[name, kind, value], ...]`` from a dict name -> value
    (a split's value a list) or from such a list."""
    if isinstance(entity, Mapping):
        return [[k, "sp" if isinstance(v, (list, tuple)) else "ot", list(v) if isinstance(v, tuple) else v]
                for k, v in entity.items()]
    return [list(e) for e in entity]


def make_transform_record(
    shape: Sequence[int],
    src_layout: str,
    dst_layout: str,
    cost: Sequence[float] | float,
    target: str,
    *,
    timestamp: float | None = None,
) -> dict:
    """A v0.2 ``layout_transform`` record (the graph tuner's transform benchmark).

    >>> d = make_transform_record((1, 64, 56, 56), "NCHW", "NCHW16c", 2e-5, "llvm", timestamp=0.0)
    >>> t = read_records([d]).transforms[0]
    >>> t.shape, t.src_layout, t.dst_layout, t.time
    ((1, 64, 56, 56), 'NCHW', 'NCHW16c', 2e-05)
    """
    args = [["TENSOR", [int(x) for x in shape], "float32"], src_layout, dst_layout]
    return _v02(target, LAYOUT_TRANSFORM_TASK, args, 0, [], cost, 0, 0.0, timestamp)


def make_network_record(model: str, identity: str, kind: str, name: str, key: Any, ratio: float, target: str, *,
                        timestamp: float | None = None) -> dict:
    """A ``graph_tuner_in_network`` record (:class:`NetworkRecord`): ``ratio`` is the step's
    in-network time over the log's alone time, in ``model`` (``identity``: its digest). ``key``:
    a conv's config entity (its record's, a dict or a list), a step's block, a transform's
    ``(NCHW shape, src block, dst block)``.

    >>> d = make_network_record("net", "0123abcd4567", "step", "pool0", 16, 1.8, "llvm", timestamp=0.0)
    >>> n = read_records([d]).network[0]
    >>> n.model, n.identity, n.kind, n.name, n.key, n.time
    ('net', '0123abcd4567', 'step', 'pool0', 16, 1.8)
    >>> read_records([make_network_record("net", "0123abcd4567", "conv", "c1", {"tile_ic": [-1, 8],
    ...                                    "tile_oc": [-1, 16], "tile_ow": [-1, 7]}, 1.2, "llvm")]).network[0].key
    Conv2DConfig(ic_bn=8, oc_bn=16, ow_bn=7, unroll_kw=False, oh_bn=1)
    """
    entity: list = []
    detail: Any = None
    if kind == "conv":
        entity = _entity_list(key)
    elif kind == "step":
        detail = int(key)
    else:
        detail = [[int(x) for x in key[0]], int(key[1]), int(key[2])]
    return _v02(target, IN_NETWORK_TASK, [model, kind, name, detail, identity], 0, entity, ratio, 0, 0.0, timestamp)


def make_step_record(model: str, name: str, block: int, identity: str, seconds: float, target: str, *,
                     timestamp: float | None = None) -> dict:
    """A ``graph_tuner_step`` record (:class:`StepRecord`): step ``name`` of ``model`` (what it
    computes digested in ``identity``) timed alone in ``block``.

    >>> st = read_records([make_step_record("net", "pool0", 16, "0123abcd4567", 2e-5, "llvm")]).steps[0]
    >>> st.model, st.name, st.block, st.identity, st.time
    ('net', 'pool0', 16, '0123abcd4567', 2e-05)
    """
    return _v02(target, STEP_TASK, [model, name, int(block), identity], 0, [], seconds, 0, 0.0, timestamp)


def _v02(target, task, args, index, entity, costs, error_no, all_cost, timestamp, code_hash=None) -> dict:
    costs = [float(costs)] if isinstance(costs, (int, float)) else [float(c) for c in costs]
    return {
        "input": [target, task, args, {}],
        "config": {"index": int(index), "code_hash": code_hash, "entity": entity},
        "result": [costs, int(error_no), float(all_cost), _time.time() if timestamp is None else float(timestamp)],
        "version": 0.2,
        "tvm_version": TVM_VERSION,
    }
