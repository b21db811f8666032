"""Hand-run benchmark: our conv2d kernels vs onnxruntime (and torch if importable) on ResNet-18.

For each of the 12 distinct ResNet-18 conv workloads (from the AutoTVM x86 log in
``/work/shared/seeds/000_*.txt``) a small sweep of good schedules is timed and the
best is compared with onnxruntime's Conv (``intra_op_num_threads`` = our thread
count), all through :func:`kernels.timing.measure`. Also: the host's FMA peak and
layout-transform bandwidth on ResNet-18 tensors.

    /work/venv/bin/python benchmarks/bench_kernels.py [--quick] [--min-repeat-ms 50]

``--plan OPT.LOG`` times a graph-tuned log's configs instead of a sweep (any model: one
row per distinct workload, with its layer count), and sums both sides over the layers.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import math

import numpy as np

from kernels import Conv2DConfig, Conv2DWorkload, build_conv2d, build_transform, measure, num_threads, random_array
from kernels.config_space import divisors
from kernels.jit import host_cpu
from kernels.peak import fma_peak
from kernels.tuner import max_accumulators

P0, P1, P3 = (0, 0, 0, 0), (1, 1, 1, 1), (3, 3, 3, 3)
# (data NCHW, kernel OIHW, strides, padding [top, left, bottom, right])
RESNET18 = [
    ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), P3),
    ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), P1),
    ((1, 64, 56, 56), (64, 64, 1, 1), (1, 1), P0),
    ((1, 64, 56, 56), (128, 64, 3, 3), (2, 2), P1),
    ((1, 64, 56, 56), (128, 64, 1, 1), (2, 2), P0),
    ((1, 128, 28, 28), (128, 128, 3, 3), (1, 1), P1),
    ((1, 128, 28, 28), (256, 128, 3, 3), (2, 2), P1),
    ((1, 128, 28, 28), (256, 128, 1, 1), (2, 2), P0),
    ((1, 256, 14, 14), (256, 256, 3, 3), (1, 1), P1),
    ((1, 256, 14, 14), (512, 256, 3, 3), (2, 2), P1),
    ((1, 256, 14, 14), (512, 256, 1, 1), (2, 2), P0),
    ((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), P1),
]


def sweep(wl: Conv2DWorkload, lanes: int, quick: bool) -> list[Conv2DConfig]:
    """A small set of good schedules: oc_bn multiples of the lanes, register tiles of 4 vectors
    up to what the register file holds (the tuning space's widths: any up to 16, divisors beyond)."""
    oc_bns = [b for b in (lanes, 2 * lanes, 4 * lanes) if wl.out_channels % b == 0]
    ic_bns = [b for b in (3, 8, 16, 32, 64) if wl.in_channels % b == 0][-3:] or [wl.in_channels]
    ow, most = wl.out_width, max_accumulators(lanes)
    configs = []
    for oc_bn, ic_bn in itertools.product(oc_bns, ic_bns):
        vecs = oc_bn // lanes
        widths = set(range(1, min(ow, 16) + 1)) | set(divisors(ow))
        ow_bns = sorted(d for d in widths if 4 <= d * vecs <= most)
        for ow_bn in ow_bns:
            if wl.is_1x1:
                for oh_bn in (1, 2):
                    if ow_bn * oh_bn * vecs <= most:
                        configs.append(Conv2DConfig(ic_bn, oc_bn, ow_bn, False, oh_bn))
            else:
                configs += [Conv2DConfig(ic_bn, oc_bn, ow_bn, u) for u in (True, False)]
    return configs[:: 3] if quick else configs


def time_ours(wl, cfg, min_repeat_ms):
    k = build_conv2d(wl, cfg)
    run = k.bind(random_array(k.input_shape), random_array(k.weight_shape, 1), random_array(k.output_shape, 2))
    return measure(run, min_repeat_ms=min_repeat_ms, repeat=7, warmup=3)


def time_onnxruntime(wl, min_repeat_ms):
    """The better of onnxruntime with and without busy-waiting threads."""
    return min((_time_onnxruntime(wl, min_repeat_ms, spin) for spin in (False, True)), key=lambda t: t.median_s)


def _time_onnxruntime(wl, min_repeat_ms, spin: bool):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    t, l, b, r = wl.padding
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(wl.strides), pads=[t, l, b, r],
                            dilations=list(wl.dilation), group=wl.groups)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, wl.data_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, wl.out_shape)],
                              [numpy_helper.from_array(random_array(wl.kernel_shape, 1), "w")])
    # IR version 8: the installed onnx writes a newer IR than onnxruntime reads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = num_threads()
    so.inter_op_num_threads = 1
    # Busy-waiting threads keep spinning after a run and steal cores from whatever is
    # timed next, so the session is deleted after use; both settings are tried.
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = random_array(wl.data_shape)
    # Pre-bound output (io binding) so ORT is not charged for allocating it or for Python glue.
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    y = np.empty(wl.out_shape, np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
    run = functools.partial(sess.run_with_iobinding, binding)
    timing = measure(run, min_repeat_ms=min_repeat_ms, repeat=7, warmup=3)
    del run, binding, sess  # stop its thread pool before we time anything else
    return timing


def time_torch(wl, min_repeat_ms):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(num_threads())
    x, w = torch.from_numpy(random_array(wl.data_shape)), torch.from_numpy(random_array(wl.kernel_shape, 1))
    t, l, b, r = wl.padding
    if (t, l) != (b, r):
        return None
    with torch.no_grad():
        return measure(lambda: torch.nn.functional.conv2d(x, w, stride=wl.strides, padding=(t, l)),
                       min_repeat_ms=min_repeat_ms, repeat=7, warmup=3)


def sweep_items():
    """ResNet-18's workloads, each to be swept: ``(workload, 1, None)``."""
    for data, kernel, strides, pad in RESNET18:
        yield Conv2DWorkload(data, kernel, strides=strides, padding=pad), 1, None


def plan_configs(path: str):
    """``(workload, layers, config)`` per distinct workload of a graph-tuned log (first layer's config)."""
    from graph_tuner.records import read_records
    from kernels.config_space import entity_config

    rows: dict = {}
    for rec in read_records(path).records:
        wl = rec.workload
        rows[wl] = (rows[wl][0] + 1, rows[wl][1]) if wl in rows else (1, entity_config(rec.entity))
    for wl, (count, cfg) in rows.items():
        yield wl, count, cfg


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="every third config of the sweep")
    p.add_argument("--min-repeat-ms", type=float, default=40.0)
    p.add_argument("--rounds", type=int, default=3, help="alternating ours/onnxruntime timing rounds")
    p.add_argument("--plan", metavar="OPT.LOG", help="time a graph-tuned log's configs instead of sweeping ResNet-18's")
    args = p.parse_args(argv)
    cpu, threads = host_cpu(), num_threads()
    print(f"host {cpu.name}, {cpu.lanes} float lanes, {threads} threads")
    print(f"FMA peak: 1 thread {fma_peak(1):.0f} GFLOP/s, {threads} threads {fma_peak(threads):.0f} GFLOP/s")
    print(f"{'workload':44s} {'best config':34s} {'ours ms':>8s} {'GF/s':>6s} {'ort ms':>8s} {'GF/s':>6s} "
          f"{'ours/ort':>8s} {'torch':>7s}")
    ratios, torch_ratios, sums = [], [], [0.0, 0.0]
    for wl, count, cfg in plan_configs(args.plan) if args.plan else sweep_items():
        data, kernel, strides = wl.data_shape, wl.kernel_shape, wl.strides
        if cfg is None:
            best = None
            for c in sweep(wl, cpu.lanes, args.quick):
                t = time_ours(wl, c, args.min_repeat_ms / 4)  # screen quickly, re-time the winner below
                if best is None or t.median_s < best[1]:
                    best = (c, t.median_s)
            cfg = best[0]
        # Alternate ours and onnxruntime for a few rounds and keep each one's best median:
        # on a shared 2-core machine other processes' load comes and goes.
        ours = ort_t = math.inf
        for _ in range(args.rounds):
            ours = min(ours, time_ours(wl, cfg, args.min_repeat_ms).median_s)
            ort_t = min(ort_t, time_onnxruntime(wl, args.min_repeat_ms).median_s)
        torch_t = time_torch(wl, args.min_repeat_ms)
        ratios.append(ort_t / ours)
        sums[0] += count * ours
        sums[1] += count * ort_t
        if torch_t is not None:
            torch_ratios.append(torch_t.median_s / ours)
        name = f"{data[1:]} {kernel[0]}x{kernel[2]}x{kernel[3]} s{strides[0]}" + (f" x{count}" if count > 1 else "")
        c = f"ic{cfg.ic_bn} oc{cfg.oc_bn} ow{cfg.ow_bn} " + (f"oh{cfg.oh_bn}" if wl.is_1x1 else f"ukw{int(cfg.unroll_kw)}")
        gf = wl.flops / 1e9
        print(f"{name:44s} {c:34s} {ours * 1e3:8.3f} {gf / ours:6.0f} {ort_t * 1e3:8.3f} {gf / ort_t:6.0f} "
              f"{ort_t / ours:7.2f}x {'-' if torch_t is None else f'{torch_t.median_s / ours:.2f}x':>7s}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    if args.plan:
        print(f"over the plan's layers: ours {sums[0] * 1e3:.2f} ms, onnxruntime {sums[1] * 1e3:.2f} ms")
    print(f"geometric mean speed-up vs onnxruntime: {geo:.2f}x" +
          (f"; vs torch {math.exp(sum(map(math.log, torch_ratios)) / len(torch_ratios)):.2f}x" if torch_ratios
           else "; torch not importable: skipped"))

    print("\nlayout transforms (GB/s = bytes read + written / time)")
    for shape in [(1, 64, 56, 56), (1, 128, 28, 28), (1, 256, 14, 14), (1, 512, 7, 7)]:
        row = []
        for src, dst in [(None, 16), (16, None), (16, 64), (64, 16), (32, 16), (None, 64), (64, None)]:
            t = build_transform(shape, src, dst)
            run = t.bind(random_array(t.input_shape), random_array(t.output_shape, 1))
            m = measure(run, min_repeat_ms=args.min_repeat_ms / 2, repeat=5)
            row.append(f"{src or 'NCHW'}->{dst or 'NCHW'} {m.median_s * 1e6:6.1f}us {t.nbytes_moved / m.median_s / 1e9:5.1f}")
        print(f"{str(shape):18s} " + " | ".join(row))


if __name__ == "__main__":
    main()
