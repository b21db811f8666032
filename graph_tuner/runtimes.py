"""The runtimes ``graph-tuner bench`` sets our plans against, each as a zero-argument call.

Each ``*_runner(model, params, x, threads, ...)`` returns ``(run, output)`` -- ``run()``
computes the model on ``x`` once, ``output`` is its first output, for the equality check
before any timing -- or a string saying why that runtime is skipped (not installed, an
op it cannot run). All run the same weights: onnxruntime and OpenVINO read the model
exported to ONNX (:mod:`graph_tuner.onnx_export`), PyTorch rebuilds it eagerly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

Runner = tuple[Callable[[], object], np.ndarray]
OTHER_RUNTIMES = ("openvino", "onnxruntime", "pytorch")  # the rivals, in the order results list them


def onnx_file(model, params: dict, folder: Path) -> Path:
    """The model with these weights exported to ONNX in ``folder``: what the other runtimes run."""
    from graph_tuner.onnx_export import save_onnx

    path = folder / f"{model.name}.onnx"
    save_onnx(model, params, path)
    return path


def onnxruntime_runner(model, params: dict, x: np.ndarray, threads: int, folder: Path
                       ) -> Runner | str:
    """A zero-argument call running the model in onnxruntime, and its output; or why not."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime not importable (pip install onnxruntime)"
    path = onnx_file(model, params, folder)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Its workers spin while a run lasts (its fastest setting) but stop when it returns: by
    # default they kept spinning after it and took a core from whatever was timed next
    # (ResNet-50, interleaved turns: graph-tuned 55.6 ms next to a default session, 48.4 next
    # to one with this; onnxruntime 54.2 -> 49.0 ms itself; benchmarks/README.md, session 6).
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = {model.inputs[0]: x}
    out = sess.run(None, feed)[0]
    return (lambda: sess.run(None, feed)), out


def openvino_config(threads: int) -> dict:
    """OpenVINO's CPU plugin settings for one latency-bound request on ``threads`` threads, f32."""
    return {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": threads,
            "INFERENCE_PRECISION_HINT": "f32"}


def openvino_compiled(model, params: dict, threads: int, folder: Path, **extra):
    """The model compiled by OpenVINO's CPU plugin (:func:`openvino_config`, and ``extra``
    settings such as ``PERF_COUNT=True``), or why not.

    Set as an informed user would for one latency-bound request: ``PERFORMANCE_HINT``
    LATENCY, one stream, ``threads`` inference threads (the bench's), and the inference
    precision set to f32 explicitly: on CPUs with AVX-512 BF16 or AMX the plugin's default
    may drop to bf16, which is not the same computation. The compiled model's precision
    is read back, so a plugin that ignored the setting is skipped, not timed.
    """
    try:
        import openvino as ov
    except ImportError:
        return "OpenVINO not importable: skipped (pip install -e '.[bench]')"
    core = ov.Core()
    compiled = core.compile_model(core.read_model(onnx_file(model, params, folder)), "CPU",
                                  {**openvino_config(threads), **extra})
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    if precision != ov.Type.f32:
        return f"OpenVINO compiled the model for {precision}, not f32: skipped"
    return compiled


def openvino_runner(model, params: dict, x: np.ndarray, threads: int, folder: Path) -> Runner | str:
    """A zero-argument call running the model in OpenVINO's CPU plugin
    (:func:`openvino_compiled`), and its output; or why not."""
    compiled = openvino_compiled(model, params, threads, folder)
    if isinstance(compiled, str):
        return compiled
    request = compiled.create_infer_request()
    feed = {0: x}
    request.infer(feed)
    out = np.array(request.get_output_tensor(0).data, copy=True)
    return (lambda: request.infer(feed)), out


def pytorch_runner(model, params: dict, x: np.ndarray, threads: int
                   ) -> Runner | str:
    """A zero-argument call running the model eagerly in PyTorch (``torch.nn.functional``,
    inference mode), and its output; or why not. Not exercised here: torch is not a
    dependency and was not installed where this was written."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return "PyTorch not importable: skipped (pip install torch to compare)"
    torch.set_num_threads(threads)
    p = {op: {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in ps.items()}
         for op, ps in params.items()}

    def pads(a):  # TVM's [top, left, bottom, right] -> F.pad's (left, right, top, bottom)
        t, l, b, r = a["padding"]
        return (l, r, t, b)

    def forward(inp):
        v = {model.inputs[0]: inp}
        for op in model.ops:
            if op.kind == "input":
                continue
            a, q, xs = op.attrs, p.get(op.name, {}), [v[i] for i in op.inputs]
            k = op.kind
            if k == "conv2d":
                y = F.conv2d(F.pad(xs[0], pads(a)), q["weight"], q.get("bias"), a["strides"], 0, a["dilation"],
                             a["groups"])
            elif k == "dense":
                y = F.linear(xs[0], q["weight"], q.get("bias"))
            elif k == "batch_norm":
                y = F.batch_norm(xs[0], q["mean"], q["var"], q["gamma"], q["beta"], False, 0.0, a["epsilon"])
            elif k == "bias_add":
                y = xs[0] + q["bias"].reshape((1, -1) + (1,) * (xs[0].dim() - 2))
            elif k == "relu":
                y = F.relu(xs[0])
            elif k == "clip":
                y = torch.clamp(xs[0], a["min"], a["max"])
            elif k in ("add", "multiply"):
                y = xs[0] + xs[1] if k == "add" else xs[0] * xs[1]
            elif k == "concat":
                y = torch.cat(xs, a["axis"])
            elif k == "max_pool":
                y = F.max_pool2d(F.pad(xs[0], pads(a), value=float("-inf")), a["pool_size"], a["strides"],
                                 ceil_mode=a["ceil_mode"])
            elif k == "avg_pool" and not any(a["padding"]):
                y = F.avg_pool2d(xs[0], a["pool_size"], a["strides"], ceil_mode=a["ceil_mode"])
            elif k == "global_avg_pool":
                y = xs[0].mean(dim=(2, 3), keepdim=True)
            elif k in ("flatten", "reshape"):
                y = xs[0].reshape(op.shape)
            elif k == "transpose":
                y = xs[0].permute(*a["perm"])
            elif k == "softmax":
                y = torch.softmax(xs[0], a["axis"])
            else:
                raise NotImplementedError(k)
            v[op.name] = y
        return v[model.outputs[0]]

    inp = torch.from_numpy(x)
    try:
        with torch.inference_mode():
            out = forward(inp).numpy().copy()
    except NotImplementedError as e:
        return f"PyTorch runner: op kind {e} not supported: skipped"

    def run():
        with torch.inference_mode():
            forward(inp)
    return run, out
