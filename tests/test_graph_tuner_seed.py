"""ResNet-18 with the seeds' real AutoTVM logs: 21 x86 records (one per conv layer, in
conv order, though 12 distinct workloads) and 12 CUDA records (one per workload)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from graph_tuner import GraphTuner
from graph_tuner.records import make_transform_record, read_records

DATA = Path(__file__).parent / "data"
X86 = DATA / "resnet18_x86_v01_typographic.log"
CUDA = DATA / "resnet18_cuda_v01_typographic.log"


def fill_transforms(gt):
    for shape, a, b in gt.required_transforms():
        gt.transforms.add(shape, a, b, math.prod(shape) * 2e-10 + 1e-6)


def test_x86_gives_one_record_per_conv_layer_in_seed_order(tmp_path):
    gt = GraphTuner("resnet-18", X86, target="llvm")
    fill_transforms(gt)
    plan = gt.solve("dp")
    out = tmp_path / "opt.log"
    plan.write_records(out)
    written = read_records(out).records
    seed = read_records(X86).records
    assert len(written) == 21
    assert len({r.workload for r in written}) == 12
    assert [r.workload for r in written] == [r.workload for r in seed]
    # v0.1 stays v0.1: same keys as the input lines
    assert all(json.loads(line)["v"] == 0.1 for line in out.read_text().splitlines())
    assert plan.optimal


def test_x86_v02_output_on_request(tmp_path):
    gt = GraphTuner("resnet-18", X86)
    fill_transforms(gt)
    out = tmp_path / "opt.log"
    gt.solve("dp").write_records(out, version="v0.2")
    lines = out.read_text().splitlines()
    assert len(lines) == 21 and all(json.loads(x)["version"] == 0.2 for x in lines)


def test_cuda_gives_best_record_per_workload_in_first_appearance_order(tmp_path):
    gt = GraphTuner("resnet-18", CUDA, target="cuda -model=unknown")
    plan = gt.solve()
    assert len(plan.records) == 12
    model_order = list(dict.fromkeys(gt.workloads))
    assert [r.workload for r in plan.records] == model_order
    out = tmp_path / "cuda.log"
    plan.write_records(out)
    assert len(out.read_text().splitlines()) == 12


def test_history_best_is_never_better_than_graph_tuned():
    gt = GraphTuner("resnet-18", X86)
    fill_transforms(gt)
    plan = gt.solve("dp")
    assert plan.baselines_ms["history_best"] >= plan.cost - 1e-9


def test_missing_transform_costs_is_a_clear_error():
    from graph_tuner.errors import GraphTunerError

    gt = GraphTuner("resnet-18", X86)
    with pytest.raises(GraphTunerError, match="transform cost"):
        gt.solve("dp")


def test_estimated_transforms_report_their_fit():
    gt = GraphTuner("resnet-18", X86)
    keys = gt.required_transforms()
    for shape, a, b in keys[::3]:  # a third known, exactly linear in size
        gt.transforms.add(shape, a, b, math.prod(shape) * 2e-10 + 1e-6)
    report = gt.estimate_transforms()
    assert report.filled == len(keys) - len(keys[::3])
    assert report.median_rel_error < 1e-6  # the known costs are exactly linear
    assert gt.missing_transforms() == []


def test_transform_records_round_trip(tmp_path):
    gt = GraphTuner("resnet-18", X86)
    lines = []
    for shape, a, b in gt.required_transforms():
        src = f"NCHW{a}c" if a > 1 else "NCHW"
        dst = f"NCHW{b}c" if b > 1 else "NCHW"
        blocked = [shape[0], shape[1] // a, shape[2], shape[3], a] if a > 1 else list(shape)
        lines.append(json.dumps(make_transform_record(blocked, src, dst, math.prod(shape) * 1e-10, "llvm")))
    path = tmp_path / "transforms.log"
    path.write_text("\n".join(lines) + "\n")
    assert gt.load_transform_records(path) == len(lines)
    assert gt.missing_transforms() == []
    plan = gt.solve("dp")
    assert plan.transforms  # the seed's mixed blocks force some
    for t in plan.transforms:  # the costs used are the records' (seconds -> ms)
        assert t.time_ms == pytest.approx(math.prod(t.shape) * 1e-10 * 1e3)


def test_an_onnx_model_keeps_its_own_batch(tmp_path):
    """An ONNX file exported at batch 2 solves at batch 2 (no --batch needed)."""
    from graph_tuner.loading import load_model
    from graph_tuner.onnx_export import save_onnx
    from graph_tuner.records import make_conv2d_record

    m = load_model("resnet-18", batch=2)
    path = tmp_path / "r18b2.onnx"
    save_onnx(m, m.params(seed=0), path)
    recs = []
    for w in dict.fromkeys(m.conv_workloads()):
        e = {"tile_ic": [-1, 1], "tile_oc": [-1, 16], "tile_ow": [-1, 1],
             **({"tile_oh": 1} if w.is_1x1 else {"unroll_kw": True})}
        recs.append(make_conv2d_record(w, e, 0, [1e-4], "llvm", timestamp=0.0))
    gt = GraphTuner(path, recs)
    assert gt.model.batch == 2 and all(w.batch == 2 for w in gt.workloads)
    fill_transforms(gt)
    assert len(gt.solve("dp").records) == 21
