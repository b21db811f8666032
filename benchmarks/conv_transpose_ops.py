"""Hand-run: our ConvTranspose kernel (:mod:`kernels.conv_transpose`) against onnxruntime's and
OpenVINO's on the same shapes, side by side in one process.

    python benchmarks/conv_transpose_ops.py [--rounds 20] [--calls 10]

Shapes: CenterNet-DLA-34's up-samplings at 512x512 (depthwise, kernel 2f, stride f, padding
f/2) and two dense ones. Ours runs in NCHW16c (the block CenterNet's plan gives them), the
others on plain NCHW, each its own native layout, on random inputs; each runtime is a
one-node ONNX graph with the weights as initialisers, 2 threads. Rounds interleave the
three (``graph_tuner.rounds.timed_rounds``); ratios pair them round by round.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from graph_tuner.builder import GraphBuilder
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from graph_tuner.runtimes import onnxruntime_runner, openvino_runner
from kernels.conv_transpose import ConvTransposeSpec, build_conv_transpose, pack_conv_transpose_weight
from kernels.jit import host_cpu
from kernels.packing import from_blocked, to_blocked
from kernels.threads import num_threads

# (name, C_in, H, W, C_out, kernel, stride, padding, groups)
SHAPES = [
    ("dw f2 64x128x128", 64, 128, 128, 64, 4, 2, 1, 64),
    ("dw f2 128x32x32", 128, 32, 32, 128, 4, 2, 1, 128),
    ("dw f4 64x32x32", 64, 32, 32, 64, 8, 4, 2, 64),
    ("dw f8 64x16x16", 64, 16, 16, 64, 16, 8, 4, 64),
    ("dense 256->128 16x16", 256, 16, 16, 128, 4, 2, 1, 1),
    ("dense 64->64 64x64", 64, 64, 64, 64, 2, 2, 0, 1),
]


def one(name, ci, h, w, co, k, s, p, g, rounds, calls, folder: Path) -> None:
    b = GraphBuilder("ct")
    x = b.input((1, ci, h, w))
    model = b.build(b.conv_transpose(x, co, k, s, p, groups=g, bias=False, name="up"))
    params = model.params(seed=0)
    data = np.random.default_rng(1).standard_normal((1, ci, h, w), dtype=np.float32)
    spec = ConvTransposeSpec((1, ci, h, w), co, (k, k), (s, s), (p, p, p, p), groups=g)
    kernel = build_conv_transpose(spec, 16)
    out = np.empty(kernel.output_shape, np.float32)
    ours = kernel.bind(to_blocked(data, 16), pack_conv_transpose_weight(params["up"]["weight"], spec, 16), out)
    ours()
    runners = {"ours NCHW16c": ours}
    for rt, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
        r = make(model, params, data, num_threads(), folder)
        if isinstance(r, str):
            print(f"  {rt}: {r}")
            continue
        runners[rt], ref = r
        np.testing.assert_allclose(from_blocked(out), ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
    times = timed_rounds(runners, rounds * calls, rounds=rounds)
    med = {k: median_ms(v) for k, v in times.items()}
    line = f"{name:<22} ours {med['ours NCHW16c']:.4f} ms"
    for rt in runners:
        if rt != "ours NCHW16c":
            ratio, lo, hi = paired_ratio(times[rt], times["ours NCHW16c"])
            line += f" | {rt} {med[rt]:.4f} ms, {ratio:.2f}x ours ({lo:.2f}-{hi:.2f})"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    print(f"{host_cpu().name}, {num_threads()} threads; ratio = the other's time / ours, paired by round (90% interval)")
    with tempfile.TemporaryDirectory() as folder:
        for shape in SHAPES:
            one(*shape, args.rounds, args.calls, Path(folder))


if __name__ == "__main__":
    main()
