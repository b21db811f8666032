"""Every command on malformed input: exit 2, one stderr line naming what is wrong, no
traceback, every input file byte-identical afterwards, and no output written.

Each case is ``(argv, env)``: ``argv`` may name the files of :func:`inputs` as ``{name}``
and output paths under ``{out}``. Cases run in-process (``graph_tuner.cli.main``), so
the table stays fast; each must fail before any tuning, solving or timing starts.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graph_tuner.builder import GraphBuilder
from graph_tuner.cli import main
from graph_tuner.onnx_export import to_onnx

DATA = Path(__file__).parent / "data"
X86_LOG = DATA / "resnet18_x86_v01_typographic.log"  # 21 records: a graph-tuned ResNet-18 log
CUDA_LOG = DATA / "resnet18_cuda_v01_typographic.log"


def _tiny_onnx() -> bytes:
    b = GraphBuilder("tiny")
    m = b.build(b.relu(b.conv(b.input((1, 3, 8, 8)), 4, 3, padding=1, name="c")))
    return to_onnx(m, m.params()).SerializeToString()


def _onnx_of(node: onnx.NodeProto, shape: list, elem=TensorProto.FLOAT) -> bytes:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _graph(nodes: list, inputs: list, inits: list | None = None, output_shape=None) -> bytes:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(nodes[-1].output[0] if nodes else "y",
                                                             TensorProto.FLOAT, output_shape)],
                              initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _const(name: str, shape: list, dtype=np.float32) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.ones(shape, dtype), name)


def broken_models() -> dict[str, bytes]:
    """ONNX files that parse but describe no network we can run, each wrong in its own way."""
    x = [("x", [1, 3, 8, 8])]
    conv = lambda w, **kw: helper.make_node("Conv", ["x", w], ["y"], **kw)  # noqa: E731
    return {
        "conv_weight_not_const.onnx": _graph([conv("w")], x + [("w", [4, 3, 3, 3])]),
        "conv_wrong_channels.onnx": _graph([conv("w")], x, [_const("w", [4, 5, 3, 3])]),
        "conv_bad_groups.onnx": _graph([conv("w", group=2)], x, [_const("w", [4, 1, 3, 3])]),
        "conv_3d.onnx": _graph([conv("w")], [("x", [1, 3, 8, 8, 8])], [_const("w", [4, 3, 3, 3, 3])]),
        "conv_kernel_too_big.onnx": _graph([conv("w")], x, [_const("w", [4, 3, 11, 11])]),
        "no_nodes.onnx": _graph([], x),
        "no_input_shape.onnx": _graph([helper.make_node("Relu", ["x"], ["y"])], [("x", None)]),
        "add_mismatch.onnx": _graph([helper.make_node("Add", ["x", "z"], ["y"])], x + [("z", [1, 2, 8, 8])]),
        "concat_mismatch.onnx": _graph([helper.make_node("Concat", ["x", "z"], ["y"], axis=1)],
                                       x + [("z", [1, 2, 4, 8])]),
        "reshape_dynamic.onnx": _graph([helper.make_node("Reshape", ["x", "s"], ["y"])], x + [("s", [2])]),
        "reshape_bad_size.onnx": _graph([helper.make_node("Reshape", ["x", "s"], ["y"])], x,
                                        [onnx.numpy_helper.from_array(np.array([5, 7], np.int64), "s")]),
        "gemm_mismatch.onnx": _graph([helper.make_node("Flatten", ["x"], ["f"]),
                                      helper.make_node("Gemm", ["f", "w"], ["y"], transB=1)],
                                     x, [_const("w", [10, 100])]),
        "pad_reflect.onnx": _graph([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], x,
                                   [onnx.numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")]),
        "pool_too_big.onnx": _graph([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[9, 9])], x),
    }


def _npy(array) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def inputs() -> dict[str, bytes]:
    """The files users hand us, good and bad, by name."""
    tiny = _tiny_onnx()
    x86 = X86_LOG.read_bytes()
    return {
        "tiny.onnx": tiny,
        "truncated.onnx": tiny[: len(tiny) // 2],
        "garbage.onnx": bytes(range(256)) * 8,
        "empty.onnx": b"",
        "text.onnx": b"this is not a model\n",
        "unsupported.onnx": _onnx_of(helper.make_node("Erf", ["x"], ["y"]), [1, 3, 8, 8]),
        "dynamic.onnx": _onnx_of(helper.make_node("Relu", ["x"], ["y"]), [1, 3, "height", 8]),
        "int.onnx": _onnx_of(helper.make_node("Relu", ["x"], ["y"]), [1, 3, 8, 8], TensorProto.INT32),
        "noconv.onnx": _onnx_of(helper.make_node("Relu", ["x"], ["y"]), [1, 3, 8, 8]),
        "model.bin": b"\x00\x01\x02",
        "x86.log": x86,
        "cuda.log": CUDA_LOG.read_bytes(),
        "binary.log": b"\xff\xfe\x00garbage\x80\x81\n",
        "notjson.log": b"hello, this is not a tuning log\n",
        "short.log": b"".join(x86.splitlines(keepends=True)[:5]),
        "empty.log": b"",
        "comments.log": b"# nothing but a comment\n\n",
        "x.npy": _npy(np.zeros((1, 3, 224, 224), np.float32)),
        "wrong_shape.npy": _npy(np.zeros((1, 3, 8, 8), np.float32)),
        "strings.npy": _npy(np.array([["a"] * 224] * 224)),
        "objects.npy": _npy(np.array([{"a": 1}], dtype=object)),
        "not.npy": b"not numpy\n",
        "pickle.npy": pickle.dumps([1, 2, 3]),
        "a_file": b"a plain file\n",
        **broken_models(),
    }


# Models that are not loadable, as every command that takes a MODEL sees them.
BAD_MODELS = ["resnet-17", "", "{in}/missing.onnx", "{in}/truncated.onnx", "{in}/garbage.onnx", "{in}/empty.onnx",
              "{in}/text.onnx", "{in}/unsupported.onnx", "{in}/dynamic.onnx", "{in}/int.onnx", "{in}/model.bin",
              "{in}", "{in}/a_dir.onnx", *(f"{{in}}/{name}" for name in broken_models())]
BAD_BATCHES = ["0", "-1", "abc", "1.5", "99999999999999999999", "2000", ""]
BAD_ENV = [{"GRAPH_TUNER_NUM_THREADS": "abc"}, {"GRAPH_TUNER_NUM_THREADS": "0"},
           {"GRAPH_TUNER_NUM_THREADS": "-2"}, {"GRAPH_TUNER_NUM_THREADS": "1.5"},
           {"GRAPH_TUNER_NUM_THREADS": "100000"}, {"GRAPH_TUNER_CACHE_DIR": "{in}/a_file"},
           {"GRAPH_TUNER_CACHE_DIR": "{in}/a_file/sub"}]

SOLVE = ["solve", "resnet-18", "--records", "{in}/x86.log", "-o", "{out}/opt.log", "--no-progress"]
RUN = ["run", "resnet-18", "--records", "{in}/x86.log", "--repeat", "2", "--no-retime", "--json"]
TUNE = ["tune", "{in}/tiny.onnx", "-o", "{out}/tiny.log", "--trials", "1", "--no-progress"]


def _cases() -> list:
    c: list = [("models", ["models", "extra"], {}), ("models", ["models", "--bogus"], {})]
    for cmd, base, model_at in (("inspect", ["inspect", "resnet-18"], 1), ("solve", SOLVE, 1), ("run", RUN, 1),
                                ("tune", TUNE, 1)):
        c += [(cmd, base[:model_at] + [m] + base[model_at + 1:], {}) for m in BAD_MODELS]
        c += [(cmd, base + ["--batch", b], {}) for b in BAD_BATCHES]
        c += [(cmd, base, env) for env in BAD_ENV]
        c += [(cmd, base + ["--no-such-option"], {}), (cmd, base[:1], {})]
    c += [("solve", SOLVE + extra, {}) for extra in (
        ["--solver", "magic"], ["--time-limit", "-1"], ["--time-limit", "-0.5"], ["--time-limit", "nan"],
        ["--time-limit", "inf"], ["--time-limit", "soon"], ["--top-k", "0"], ["--top-k", "-3"], ["--top-k", "x"],
        ["--format", "v0.3"], ["--target", "opencl"], ["--target", ""], ["--transform-records", "{in}/nope.log"],
        ["--transform-records", "{in}"], ["--transform-records", "{in}/binary.log"],
        ["--report", "{in}/x86.log"], ["--report", "{out}/opt.log"], ["--report", "{in}"],
        ["--report", "{in}/a_file/r.json"],
    )]
    c += [("solve", ["solve", "resnet-18", "--records", rec, "-o", out, "--no-progress"], {}) for rec, out in (
        ("{in}/x86.log", "{in}/x86.log"), ("{in}/x86.log", "{in}"), ("{in}/x86.log", "{in}/a_file/opt.log"),
        ("{in}/nope.log", "{out}/o.log"), ("{in}", "{out}/o.log"), ("{in}/binary.log", "{out}/o.log"),
        ("{in}/notjson.log", "{out}/o.log"), ("{in}/empty.log", "{out}/o.log"), ("{in}/comments.log", "{out}/o.log"),
        ("{in}/short.log", "{out}/o.log"),
    )]
    c += [("solve", ["solve", "{in}/tiny.onnx", "--records", "{in}/x86.log", "-o", "{in}/tiny.onnx"], {})]
    c += [("run", RUN + extra, {}) for extra in (
        ["--repeat", "0"], ["--repeat", "-5"], ["--top", "0"], ["--input", "{in}/nope.npy"],
        ["--input", "{in}/wrong_shape.npy"], ["--input", "{in}/strings.npy"], ["--input", "{in}/objects.npy"],
        ["--input", "{in}/not.npy"], ["--input", "{in}/pickle.npy"], ["--input", "{in}"],
        ["--save-output", "{in}/x86.log"], ["--save-output", "{in}"],
        ["--save-output", "{in}/a_file/y.npy"], ["--transform-records", "{in}/nope.log"],
        ["--transform-records", "{in}/binary.log"], ["--input", "{in}/x.npy", "--save-output", "{in}/x.npy"],
    )]
    c += [("run", ["run", "resnet-18", "--records", rec, "--no-retime"], {}) for rec in (
        "{in}/nope.log", "{in}", "{in}/binary.log", "{in}/notjson.log", "{in}/empty.log", "{in}/short.log",
        "{in}/cuda.log", "{in}/comments.log",
    )]
    c += [("run", ["run", "resnet-50", "--records", "{in}/x86.log", "--no-retime"], {})]
    c += [("tune", TUNE[:-4] + extra, {}) for extra in (
        ["--trials", "0"], ["--trials", "-1"], ["--trials", "many"], ["--time-budget", "-1"],
        ["--time-budget", "0"], ["--time-budget", "nan"], ["--time-budget", "forever"], ["--retime", "--trials", "5"],
        ["--batch", "0"],
    )]
    c += [("tune", ["tune", model, "-o", out, "--no-progress"], {}) for model, out in (
        ("{in}/tiny.onnx", "{in}/tiny.onnx"), ("{in}/tiny.onnx", "{in}"), ("{in}/tiny.onnx", "{in}/a_file/t.log"),
        ("{in}/noconv.onnx", "{out}/t.log"), ("{in}/tiny.onnx", "{in}/model.bin"),
        ("{in}/tiny.onnx", "{in}/notjson.log"), ("{in}/tiny.onnx", "{in}/binary.log"),
        ("{in}/tiny.onnx", "{in}/x.npy"),
    )]
    c += [("bench", ["bench", *extra], {}) for extra in (
        ["resnet-17"], ["{in}/tiny.onnx"], ["resnet-18", "--out", "{in}/a_file"], ["resnet-18", "--repeat", "0"],
        ["resnet-18", "--trials", "x"], ["resnet-18", "--out", "{in}/a_file/sub"],
    )]
    c += [("bench", ["bench", "resnet-18"], env) for env in BAD_ENV]
    return c


CASES = _cases()


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return inputs()


@pytest.mark.parametrize("command,argv,env", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_and_exit_2(command, argv, env, files, tmp_path, monkeypatch, capsys):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "a_dir.onnx").mkdir()
    for name, data in files.items():
        (src / name).write_bytes(data)
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GRAPH_TUNER_NUM_THREADS", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v.format(**{"in": src}))
    monkeypatch.chdir(out)
    before = _snapshot(src)
    args = [a.format(**{"in": src, "out": out}) for a in argv]
    try:
        status = main(args)
    except SystemExit as e:  # argparse's usage errors
        status = e.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1, err
    assert "error:" in lines[0] and "Traceback" not in err and "internal error" not in err, err
    assert _snapshot(src) == before, "an input file was changed"
    assert list(out.iterdir()) == [], "an output was written"


def test_every_command_has_its_table():
    counts = {}
    for command, _, _ in CASES:
        counts[command] = counts.get(command, 0) + 1
    assert {k: v >= 40 for k, v in counts.items() if k in ("solve", "run", "tune")} == \
        {"solve": True, "run": True, "tune": True}, counts
