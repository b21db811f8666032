"""Per-layer candidates from records, and CUDA best-per-workload."""
from __future__ import annotations

import dataclasses
import random
import statistics
from pathlib import Path

import pytest

from kernels.config_space import conv2d_space, entity_config
from kernels.conv2d import supported

from graph_tuner.candidates import (
    best_per_workload,
    fallback_candidate,
    fallback_config,
    layer_candidates,
    simd_lanes,
)
from graph_tuner.errors import GraphTunerError
from graph_tuner.records import format_record, make_conv2d_record, read_records
from kernels.workload import Conv2DWorkload

DATA = Path(__file__).parent / "data"

CONV = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))
OTHER = Conv2DWorkload((1, 64, 56, 56), (128, 64, 1, 1), strides=(2, 2))
DW = Conv2DWorkload((1, 32, 28, 28), (32, 1, 3, 3), padding=(1, 1, 1, 1), groups=32)


def _rec(w, ic, oc, t, target="llvm -mcpu=sapphirerapids", ow=8):
    last = {"tile_oh": 1} if w.is_1x1 else {"unroll_kw": True}
    e = {"tile_ic": [-1, ic], "tile_oc": [-1, oc], "tile_ow": [-1, ow], **last}
    return make_conv2d_record(w, e, 0, [t], target, timestamp=0.0)


def _synthetic_log(seed=0, n=200):
    rng = random.Random(seed)
    blocks = [1, 2, 4, 8, 16, 32, 64]
    recs = [_rec(CONV, rng.choice(blocks), rng.choice(blocks), rng.uniform(1e-4, 1e-2), ow=rng.choice([1, 2, 7, 8]))
            for _ in range(n)]
    recs += [_rec(OTHER, 16, 16, 1e-6), _rec(CONV, 8, 8, 1e-9, target="cuda")]  # must not leak into CONV
    return read_records(recs)


def test_fastest_per_layout_pair_then_top_k_matches_brute_force():
    log = _synthetic_log()
    (cands,) = layer_candidates([CONV], log, k=10)
    mine = [r for r in log.records if r.workload == CONV and r.target_kind == "llvm"]
    # a config (same entity) measured more than once counts at its median time, and within
    # a layout pair beats every config measured once
    times = {}
    for r in mine:
        times.setdefault(repr(sorted(r.entity.items())), []).append(r)
    assert any(len(v) > 1 for v in times.values())  # the log does repeat configs
    rank = {}
    for recs in times.values():
        pair = (recs[0].entity["tile_ic"][1], recs[0].entity["tile_oc"][1])
        rank[pair] = min(rank.get(pair, (True, float("inf"))), (len(recs) < 2, statistics.median(r.time for r in recs)))
    best = {pair: t for pair, (_, t) in rank.items()}
    expected = sorted(best.items(), key=lambda kv: kv[1])[:10]
    got = [((c.in_block, c.out_block), c.time) for c in cands]
    assert [p for p, _ in got] == [p for p, _ in expected]
    assert [t for _, t in got] == pytest.approx([t for _, t in expected], rel=1e-12)
    assert all(not c.is_fallback for c in cands)
    assert len({(c.in_block, c.out_block) for c in cands}) == len(cands)
    (all_pairs,) = layer_candidates([CONV], log, k=1000)
    assert len(all_pairs) == len(best) > 10


def test_a_config_timed_again_beats_a_lucky_config_timed_once_in_its_pair():
    retimed = [_rec(CONV, 16, 16, t, ow=8) for t in (1.0e-3, 1.3e-3, 1.2e-3)]  # median 1.2 ms
    log = read_records([*retimed, _rec(CONV, 16, 16, 1.1e-3, ow=4), _rec(CONV, 8, 16, 0.9e-3, ow=4)])
    (cands,) = layer_candidates([CONV], log)
    got = {(c.in_block, c.out_block): (c.config.ow_bn, c.time, len(c.record.costs)) for c in cands}
    assert got[(16, 16)] == (8, pytest.approx(1.2e-3), 3)  # not the ow 4 config timed once at 1.1 ms
    assert got[(8, 16)] == (4, pytest.approx(0.9e-3), 1)  # a pair with no re-timed config keeps its own
    assert [c.in_block for c in cands] == [8, 16]


def test_default_top_k_is_20_and_blocks():
    (cands,) = layer_candidates([CONV], _synthetic_log())
    assert len(cands) == 20
    c = cands[0]
    assert (c.config.ic_bn, c.config.oc_bn) == (c.in_block, c.out_block)


def test_layers_share_records_of_equal_workloads_in_layer_order():
    log = _synthetic_log()
    cands = layer_candidates([CONV, OTHER, CONV], log, names=["a", "b", "c"])
    assert cands[0] == cands[2]
    assert [(c.in_block, c.out_block, c.time) for c in cands[1]] == [(16, 16, 1e-6)]


def test_matching_ignores_dtype_and_padding_forms():
    # The 2018 log writes padding [1, 1] and no dilation; the layer has 4-sided padding.
    log = read_records(DATA / "resnet18_x86_rfc2018.log")
    layer = dataclasses.replace(CONV, out_dtype="")
    (cands,) = layer_candidates([layer], log, target="llvm -mcpu=skylake-avx512")
    assert {(c.in_block, c.out_block) for c in cands} == {(64, 32), (32, 64)}
    assert cands[0].time == pytest.approx(0.0001027261465)


def test_resnet18_seed_log_gives_every_layer_candidates():
    log = read_records(DATA / "resnet18_x86_v01_typographic.log")
    layers = [r.workload for r in log.records]  # the 21 conv layers, in order
    cands = layer_candidates(layers, log)
    assert len(cands) == 21 and all(len(c) >= 1 for c in cands)
    assert (cands[0][0].in_block, cands[0][0].out_block) == (1, 32)


def test_missing_layer_error_names_layer_and_workload():
    layers = [OTHER, OTHER, OTHER, CONV]
    log = read_records([_rec(OTHER, 16, 16, 1e-4)])
    with pytest.raises(GraphTunerError) as e:
        layer_candidates(layers, log, names=["a", "b", "c", "stage1_unit1_conv1"])
    assert str(e.value) == (
        "<records>: layer 3 'stage1_unit1_conv1' conv2d data [1,64,56,56] kernel [64,64,3,3] "
        "stride [1,1] pad [1,1,1,1]: no tuning record; read 1 records: 1 conv records, "
        "0 layout transforms, none of the 1 llvm conv records for this workload; "
        "tune it (`graph-tuner tune MODEL -o LOG`) or pass --fallback")


def test_other_targets_do_not_count_as_records():
    log = read_records([_rec(CONV, 16, 16, 1e-4, target="cuda -model=unknown")])
    with pytest.raises(GraphTunerError, match="no tuning record"):
        layer_candidates([CONV], log)


def test_fallback_candidate_is_flagged_with_a_warning():
    with pytest.warns(UserWarning, match="layer 0 'conv0'.*fallback"):
        (cands,) = layer_candidates([CONV], [], names=["conv0"], fallback=True)
    (c,) = cands
    assert c.is_fallback
    # a synthesised record, flagged, whose schedule is the candidate's and whose index is TVM's
    assert c.record.raw["graph_tuner"]["fallback"] is True
    assert entity_config(c.record.entity) == c.config
    assert conv2d_space(CONV).index(c.record.entity) == c.record.config_index
    lanes = fallback_config(CONV, simd_lanes())  # the host's SIMD width, as AutoTVM's fallback here
    assert (c.in_block, c.out_block) == (lanes.ic_bn, lanes.oc_bn)
    assert c.time == pytest.approx(CONV.flops / 20e9)
    assert fallback_candidate(CONV, gflops=40).time == pytest.approx(c.time / 2)


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_fallback_layer_and_the_default_baseline_share_one_simd_width(monkeypatch, lanes):
    """Issue 21: the fallback block was the host's lanes for the default baseline but a fixed
    16 for --fallback candidates; both now read candidates.simd_lanes."""
    import graph_tuner.candidates as cand
    from graph_tuner.api import GraphTuner
    from graph_tuner.builder import GraphBuilder

    monkeypatch.setattr(cand, "simd_lanes", lambda: lanes)
    b = GraphBuilder("one-conv")
    model = b.build(b.conv(b.input((1, 32, 8, 8)), 32, 3, padding=1, name="c"))
    gt = GraphTuner(model, [], fallback=True)
    assert any("fallback" in w for w in gt.warnings)
    (c,) = gt.all_candidates["c"]
    assert c.is_fallback and (c.in_block, c.out_block) == (lanes, lanes)
    assert fallback_candidate(model.workload(model.convs()[0])).config == c.config
    assert gt._baseline_picks("default") == {"c": [c]}  # the default plan is this layer's fallback


@pytest.mark.parametrize("w", [CONV, OTHER, DW, Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
                               Conv2DWorkload((1, 30, 7, 7), (10, 30, 1, 1)),
                               Conv2DWorkload((1, 32, 16, 16), (64, 8, 3, 3), padding=(1, 1, 1, 1), groups=4),
                               Conv2DWorkload((1, 128, 56, 56), (128, 4, 3, 3), padding=(1, 1, 1, 1), groups=32),
                               Conv2DWorkload((1, 64, 14, 14), (96, 16, 1, 1), groups=4)])
def test_fallback_config_follows_autotvm_heuristic(w):
    cfg = fallback_config(w)
    # brute force over the rules stated in the docstring; a grouped (not depthwise) conv's
    # blocks divide the channels per group (TVM's group_conv2d fallback), so it builds
    per_group = 1 if w.is_depthwise else w.groups
    oc_bn = max(d for d in range(1, 17) if (w.out_channels // per_group) % d == 0)
    assert cfg.oc_bn == oc_bn
    assert cfg.ic_bn == (oc_bn if w.is_depthwise else max(d for d in range(1, oc_bn + 1) if w.kernel_shape[1] % d == 0))
    assert supported(w, cfg)
    if w.is_1x1:
        assert cfg.ow_bn * cfg.oh_bn < 32
        assert w.out_width % cfg.ow_bn == 0 and w.out_height % cfg.oh_bn == 0
    else:
        assert cfg.ow_bn == max(d for d in range(1, 32) if w.out_width % d == 0) and cfg.unroll_kw is False


def test_depthwise_records_need_equal_blocks():
    log = read_records([_rec(DW, 8, 8, 2e-4), _rec(DW, 8, 16, 1e-4), _rec(DW, 16, 16, 3e-4)])
    (cands,) = layer_candidates([DW], log)
    assert [(c.in_block, c.out_block) for c in cands] == [(8, 8), (16, 16)]
    assert log.records[0].task_name == "depthwise_conv2d_NCHWc.x86"


def test_grouped_records_our_kernels_cannot_build_are_dropped():
    """ResNeXt-like groups of 4: blocks dividing a group (dense template) and blocks holding
    whole groups (the depthwise template) are candidates; a block cutting groups is not, nor
    are blocks of whole 8-channel groups (their vectors would need to be 8-aligned on every CPU)."""
    g4 = Conv2DWorkload((1, 64, 8, 8), (64, 4, 3, 3), padding=(1, 1, 1, 1), groups=16)
    log = read_records([_rec(g4, 4, 4, 3e-4), _rec(g4, 16, 16, 2e-4), _rec(g4, 8, 16, 1e-4), _rec(g4, 2, 4, 4e-4)])
    (cands,) = layer_candidates([g4], log)
    assert sorted((c.in_block, c.out_block) for c in cands) == [(2, 4), (4, 4), (16, 16)]
    g8 = Conv2DWorkload((1, 64, 8, 8), (64, 8, 3, 3), padding=(1, 1, 1, 1), groups=8)
    log = read_records([_rec(g8, 8, 8, 3e-4), _rec(g8, 16, 16, 2e-4)])
    (cands,) = layer_candidates([g8], log)
    assert [(c.in_block, c.out_block) for c in cands] == [(8, 8)]


def _typed(rec: dict, data: str, kernel: str, out: str) -> dict:
    """The record of another element type: same shapes and config."""
    args = rec["input"][2]
    args[0][2], args[1][2], args[-1] = data, kernel, out
    return rec


@pytest.mark.parametrize("order", ["float32 first", "int8 first"])
def test_a_record_of_another_element_type_is_no_float32_layers(order):
    """An int8 tuning of the same shapes and config was merged with the float32 one: it took the
    median of both (or, logged last, left the layer with no record)."""
    f32 = _rec(CONV, 16, 16, 2e-3)
    i8 = _typed(_rec(CONV, 16, 16, 0.5e-3), "uint8", "int8", "int32")
    log = read_records([f32, i8] if order == "float32 first" else [i8, f32])
    assert {r.dtypes for r in log.records} == {("float32", "float32"), ("uint8", "int8")}
    (cands,) = layer_candidates([CONV], log)
    assert [(c.in_block, c.out_block, c.time, c.record.costs) for c in cands] == [(16, 16, 2e-3, (2e-3,))]


def test_cuda_picks_as_apply_history_best_does():
    """TVM keeps the record of least mean cost per workload (float32 here): not the median."""
    def cuda(index, costs, dtype="float32"):
        return {"input": ["cuda -model=unknown", "conv2d_nchw.cuda",
                          [["TENSOR", [1, 64, 56, 56], dtype], ["TENSOR", [64, 64, 3, 3], dtype], [1, 1],
                           [1, 1, 1, 1], [1, 1], dtype], {}],
                "config": {"index": index, "code_hash": None, "entity": [["tile_f", "sp", [-1, 1, 8, 1]]]},
                "result": [costs, 0, 1.0, 0.0], "version": 0.2, "tvm_version": "0.8.0"}

    log = read_records([cuda(1, [1e-4, 1e-4, 5e-4]), cuda(2, [2e-4, 2e-4, 2e-4]), cuda(3, [2e-4]),
                        cuda(4, [0.5e-4], "float16")])
    (best,) = best_per_workload(log, [CONV])
    assert best.config_index == 2  # mean 2e-4 against 2.33e-4 (median 1e-4); 3 ties 2: the first stays


def test_cuda_best_per_workload_on_seed():
    log = read_records(DATA / "resnet18_cuda_v01_typographic.log")
    best = best_per_workload(log)
    assert len(best) == 12
    assert [r.workload for r in best] == list(dict.fromkeys(r.workload for r in log.records))
    # the x86 seed's workloads are the same 12 (graph tuning writes one per layer there)
    x86 = read_records(DATA / "resnet18_x86_v01_typographic.log")
    layers = [r.workload for r in x86.records]
    by_layers = best_per_workload(log, layers)
    assert [r.workload for r in by_layers] == list(dict.fromkeys(layers))
    assert best_per_workload(x86) == []  # wrong target kind


def test_cuda_best_picks_the_fastest_and_reports_missing():
    log = read_records(DATA / "centernet_cuda_v02_many_per_line.log")
    best = best_per_workload(log)
    assert len(best) == len({r.workload for r in log.records})
    for b in best:
        assert b.time == min(r.time for r in log.records if r.workload == b.workload)
    w = Conv2DWorkload((1, 3, 608, 608), (16, 3, 7, 7), padding=(3, 3, 3, 3))
    (chosen,) = best_per_workload(log, [w])
    assert chosen.task_name == "conv2d_nchw.cuda"  # direct beats winograd here
    with pytest.raises(GraphTunerError, match=r"conv2d data \[1,64,56,56\].*no cuda tuning record"):
        best_per_workload(log, [CONV])


def test_a_winograd_gemm_two_different_convs_share_costs_neither():
    """A padded 28x28 conv and an unpadded 30x30 one make one Winograd GEMM workload: its
    record cannot say which it timed, so neither layer takes it (one warning naming both),
    while a layer whose GEMM is its own does."""
    import warnings

    from graph_tuner.winograd import candidate_gemm

    padded = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    unpadded = Conv2DWorkload((1, 64, 30, 30), (64, 64, 3, 3))
    gemm = candidate_gemm(padded)
    assert gemm is not None and candidate_gemm(unpadded) == gemm
    e = {"tile_ic": [-1, 16], "tile_oc": [-1, 16], "tile_ow": [-1, 4], "tile_oh": 1}
    log = read_records([_rec(padded, 16, 16, 1e-3, "llvm"), _rec(unpadded, 16, 16, 1e-3, "llvm"),
                        make_conv2d_record(gemm, e, 0, [1e-4], "llvm", timestamp=0.0)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        both = layer_candidates([padded, unpadded], log, names=["a", "b"], target="llvm")
    assert [[c.record.workload for c in cs] for cs in both] == [[padded], [unpadded]]
    assert len(caught) == 1 and "layer 0 'a', layer 1 'b':" in str(caught[0].message)
    alone = layer_candidates([padded], log, target="llvm")[0]
    assert alone[0].record.workload == gemm and alone[0].time == pytest.approx(1e-4)


def test_a_winograd_gemm_record_timed_as_another_conv_is_no_candidate():
    """A GEMM record names the conv it was timed as: in a log merged with another model's,
    a record of this layer's GEMM timed as that model's conv (an unpadded 30x30 where this
    layer is a padded 28x28) is left out with one warning; one naming this layer, or none
    (a log from before the field), is its candidate."""
    import warnings

    from graph_tuner.winograd import candidate_gemm

    padded = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    unpadded = Conv2DWorkload((1, 64, 30, 30), (64, 64, 3, 3))
    gemm = candidate_gemm(padded)
    e16 = {"tile_ic": [-1, 16], "tile_oc": [-1, 16], "tile_ow": [-1, 4], "tile_oh": 1}
    e32 = {"tile_ic": [-1, 16], "tile_oc": [-1, 32], "tile_ow": [-1, 4], "tile_oh": 1}
    e8 = {"tile_ic": [-1, 8], "tile_oc": [-1, 16], "tile_ow": [-1, 4], "tile_oh": 1}
    log = read_records([_rec(padded, 16, 16, 1e-3, "llvm"),
                        make_conv2d_record(gemm, e16, 0, [1e-5], "llvm", timestamp=0.0, winograd_of=unpadded),
                        make_conv2d_record(gemm, e32, 1, [2e-4], "llvm", timestamp=0.0, winograd_of=padded),
                        make_conv2d_record(gemm, e8, 2, [3e-4], "llvm", timestamp=0.0)])
    assert [r.winograd_of for r in log.records] == [None, unpadded, padded, None]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (cands,) = layer_candidates([padded], log, target="llvm")
    got = {(c.in_block, c.out_block): c.time for c in cands}
    assert got == {(16, 16): pytest.approx(1e-3), (16, 32): pytest.approx(2e-4), (8, 16): pytest.approx(3e-4)}
    assert len(caught) == 1 and str(caught[0].message).startswith(
        "layer 0: the log's records of its Winograd GEMM were timed as another conv (conv2d data [1,64,30,30] ")
    # The other model's conv takes the record timed as it, not the one timed as this layer.
    (theirs,) = layer_candidates([unpadded], read_records([format_record(r) for r in log.records[1:]]),
                                 target="llvm")
    assert {(c.in_block, c.out_block): c.time for c in theirs} == {(16, 16): pytest.approx(1e-5),
                                                             (8, 16): pytest.approx(3e-4)}
