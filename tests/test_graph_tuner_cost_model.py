"""The graph tuner against brute force on the cost model (README, "The cost model").

``brute_force`` below is an independent, direct simulation of the cost model: it walks
the ops in order, tracks each tensor's layout and the distinct layouts its consumers
need, and tries every combination of conv candidates and join blocks. The graph tuner
must find the same minimum (and a plan whose parts add up to it).
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

from graph_tuner import GraphTuner
from graph_tuner.builder import GraphBuilder
from graph_tuner.records import make_conv2d_record

AGNOSTIC = {"relu", "clip", "batch_norm", "bias_add", "max_pool", "avg_pool", "global_avg_pool", "pad"}
JOINS = {"add", "concat", "multiply"}


def tcost(shape, a, b) -> float:
    """A made-up transform cost (seconds): per element, dearer to/from plain NCHW."""
    return math.prod(shape) * 1e-9 * (1.0 + 0.5 * (a == 1) + 0.25 * (b == 1)) + 1e-6


def brute_force(model, cands, blocks):
    from graph_tuner.fusion import residual_convs

    residual = residual_convs(model)  # the executor's rule: these adds run in a conv epilogue
    convs = model.convs()
    joins = [op for op in model.ops if op.kind in JOINS and len(op.shape) == 4]
    join_opts = [[b for b in blocks if all(model.op(i).shape[1] % b == 0 for i in j.inputs)] for j in joins]
    best = math.inf
    for combo in itertools.product(*[cands[c.name] for c in convs], *join_opts):
        conv_pick = {c.name: combo[k] for k, c in enumerate(convs)}
        join_pick = {j.name: combo[len(convs) + k] for k, j in enumerate(joins)}
        if any(all(conv_pick[c][1] != join_pick[a] for c in cs) for a, cs in residual.items()):
            continue  # an absorbable add must take the output block of a conv that absorbs it
        layout, needed = {}, defaultdict(set)
        cost = sum(t for (_, _, t) in conv_pick.values())
        for op in model.ops:
            four_d = [i for i in op.inputs if len(model.op(i).shape) == 4]
            if op.kind == "input":
                layout[op.name] = 1
            elif op.kind == "conv2d":
                i_b, o_b, _ = conv_pick[op.name]
                needed[op.inputs[0]].add(i_b)
                layout[op.name] = o_b
            elif op.name in join_pick:
                for i in four_d:
                    needed[i].add(join_pick[op.name])
                layout[op.name] = join_pick[op.name]
            elif op.kind in AGNOSTIC and len(four_d) == 1 and len(op.shape) == 4:
                layout[op.name] = layout[four_d[0]]
            else:
                for i in four_d:
                    needed[i].add(1)
                layout[op.name] = 1
        for o in model.outputs:
            if len(model.op(o).shape) == 4:
                needed[o].add(1)
        for t, bs in needed.items():
            cost += sum(tcost(model.op(t).shape, layout[t], b) for b in bs if b != layout[t])
        best = min(best, cost)
    return best


def records_for(model, cands):
    """One AutoTVM record per candidate (in block, out block, seconds) of each conv.

    Records are matched by workload, so each test's convs have distinct workloads."""
    assert len(set(model.conv_workloads())) == len(model.convs())
    out = []
    for op in model.convs():
        w = model.workload(op)
        for i, (ib, ob, t) in enumerate(cands[op.name]):
            knob = {"tile_oh": 1} if w.is_1x1 else {"unroll_kw": True}
            e = {"tile_ic": [-1, ib], "tile_oc": [-1, ob], "tile_ow": [-1, 1], **knob}
            out.append(make_conv2d_record(w, e, i, [t], "llvm -mcpu=test", timestamp=0.0))
    return out


def tune(model, cands, solver="dp"):
    gt = GraphTuner(model, records_for(model, cands), target="llvm -mcpu=test")
    for shape, a, b in gt.required_transforms():
        gt.transforms.add(shape, a, b, tcost(shape, a, b))
    return gt.solve(solver=solver)


def check(model, cands, blocks=(1, 2, 4, 8, 16)):
    want = brute_force(model, cands, blocks) * 1e3
    for solver in ("dp", "ilp"):
        plan = tune(model, cands, solver)
        assert plan.cost == pytest.approx(want, rel=1e-9), solver
        assert plan.optimal
        assert plan.kernel_ms + plan.transform_ms == pytest.approx(plan.cost)
        assert len(plan.records) == len(model.convs())
    pbqp = tune(model, cands, "pbqp")
    assert pbqp.cost >= want * (1 - 1e-9)
    assert_adds_fused(model, plan)
    return plan


def assert_adds_fused(model, plan):
    """The executor runs every absorbable add inside a conv epilogue: nothing outside the cost model."""
    from graph_tuner.fusion import plan_steps, residual_convs

    steps = plan_steps(model, plan.blocks, plan.joins)
    absorbed = {op for s in steps if s.kind == "conv" for op in s.ops}
    assert set(residual_convs(model)) <= absorbed


def head(b, x):
    return b.softmax(b.dense(b.flatten(b.global_avg_pool(x)), 10))


def test_conv_chain():
    b = GraphBuilder("chain")
    x = b.input((1, 16, 16, 16))
    c1 = b.conv(x, 16, 3, padding=1, name="c1")
    c2 = b.conv(b.relu(c1), 32, 3, padding=1, name="c2")
    c3 = b.conv(b.relu(c2), 16, 3, padding=1, name="c3")
    m = b.build(head(b, c3))
    cands = {
        "c1": [(1, 16, 3e-4), (1, 8, 2.9e-4), (16, 16, 1e-4)],
        "c2": [(16, 16, 4e-4), (8, 8, 3.5e-4), (8, 16, 3.6e-4)],
        "c3": [(16, 16, 2e-4), (8, 4, 1e-4)],
    }
    check(m, cands)


def test_add_of_conv_and_graph_input_counts_the_conv():
    """TVM's DP lost the conv's kernel time when an add had a graph input as operand."""
    b = GraphBuilder("add_input")
    x = b.input((1, 16, 16, 16))
    a = b.conv(x, 16, 3, padding=1, name="a")
    s = b.add(a, x, name="sum")
    c = b.conv(s, 32, 3, padding=1, name="c")
    m = b.build(head(b, c))
    cands = {"a": [(1, 16, 5e-3), (16, 1, 6e-3)], "c": [(16, 16, 1e-4), (1, 16, 2e-4)]}
    plan = check(m, cands)
    times = {lc.name: lc.time_ms for lc in plan.layers}
    assert times["a"] >= 5.0  # the 5 ms conv is in the plan and in its total
    assert plan.cost >= 5.0 + 0.1


def test_individually_faster_kernel_loses_to_its_transform():
    """Two convs into an add: the faster kernel of A writes a block B can't match."""
    b = GraphBuilder("add_two")
    x = b.input((1, 16, 32, 32))
    a = b.conv(x, 16, 3, padding=1, name="A")
    bb = b.conv(x, 16, 1, name="B")
    m = b.build(head(b, b.add(a, bb, name="sum")))
    # A: 8c output is 10 us faster but B only writes 16c: the add then needs a transform
    # of a 16x32x32 tensor (~17 us here), so the slower 16c kernel of A wins.
    cands = {"A": [(1, 8, 1.0e-4), (1, 16, 1.1e-4)], "B": [(1, 16, 1.0e-4)]}
    plan = check(m, cands)
    chosen = {lc.name: lc.out_layout for lc in plan.layers}
    assert chosen["A"] == "NCHW16c"


def test_densenet_block_conv_feeds_several_concats():
    b = GraphBuilder("dense_block")
    x = b.input((1, 8, 8, 8))
    c0 = b.conv(x, 8, 3, padding=1, name="c0")
    c1 = b.conv(b.relu(c0), 4, 3, padding=1, name="c1")
    cat1 = b.concat([c0, c1], name="cat1")
    c2 = b.conv(b.relu(cat1), 4, 3, padding=1, name="c2")
    cat2 = b.concat([c0, c1, c2], name="cat2")
    c3 = b.conv(b.relu(cat2), 8, 1, name="c3")
    m = b.build(head(b, c3))
    cands = {
        "c0": [(1, 8, 1e-5), (1, 4, 0.9e-5), (1, 2, 1.1e-5)],
        "c1": [(8, 4, 1e-5), (4, 4, 1.2e-5), (2, 2, 0.8e-5)],
        "c2": [(4, 4, 1e-5), (2, 4, 0.7e-5), (4, 2, 0.9e-5)],
        "c3": [(16, 8, 1e-5), (4, 8, 1.3e-5), (2, 2, 0.6e-5)],
    }
    check(m, cands)


def test_concat_of_two_and_three_channels_is_plain():
    b = GraphBuilder("odd_concat")
    x = b.input((1, 8, 8, 8))
    p = b.conv(x, 2, 3, padding=1, name="p")
    q = b.conv(x, 3, 3, padding=1, name="q")
    cat = b.concat([p, q], name="cat")
    r = b.conv(cat, 8, 3, padding=1, name="r")
    m = b.build(head(b, r))
    cands = {"p": [(8, 2, 1e-5), (1, 1, 2e-5)], "q": [(8, 1, 1e-5), (4, 3, 0.5e-5)], "r": [(1, 8, 1e-5)]}
    plan = check(m, cands)
    assert plan.joins["cat"] == 1


def test_two_consumers_share_one_transform():
    b = GraphBuilder("shared")
    x = b.input((1, 16, 16, 16))
    c0 = b.conv(x, 16, 3, padding=1, name="c0")
    y = b.relu(c0, name="y")
    c1 = b.conv(y, 16, 1, name="c1")
    c2 = b.conv(y, 16, 5, padding=2, name="c2")
    m = b.build(head(b, b.add(c1, c2, name="sum")))
    cands = {"c0": [(1, 16, 1e-4)], "c1": [(8, 16, 1e-5)], "c2": [(8, 16, 1e-5)]}
    plan = check(m, cands)
    into_8 = [t for t in plan.transforms if t.tensor == "y"]
    assert len(into_8) == 1 and into_8[0].dst_layout == "NCHW8c"
    assert sorted(into_8[0].consumers) == ["c1", "c2"]


RESIDUAL_CONCAT_CHANNELS = {"a": (8, 8), "c": (8, 8), "d": (8, 4)}  # conv -> (in, out) channels


def residual_concat_net():
    """Three convs, a residual add and a concat of the add and a conv, then a classifier head."""
    b = GraphBuilder("mixed")
    x = b.input((1, 8, 8, 8))
    a = b.conv(x, 8, 3, padding=1, name="a")
    c = b.conv(b.relu(a), 8, 5, padding=2, name="c")
    s = b.add(c, a, name="s")
    d = b.conv(s, 4, 1, name="d")
    return b.build(head(b, b.concat([s, d], name="cat")))


def draw_candidates(data, channels=RESIDUAL_CONCAT_CHANNELS):
    """1-3 random (in block, out block, seconds) candidates per conv, blocks dividing its channels."""
    cands = {}
    for name, (ci, co) in channels.items():
        pairs = data.draw(st.lists(st.tuples(st.sampled_from([x for x in (1, 2, 4, 8) if ci % x == 0]),
                                             st.sampled_from([x for x in (1, 2, 4, 8) if co % x == 0])),
                                   min_size=1, max_size=3, unique=True))
        cands[name] = [(i, o, data.draw(st.floats(1e-6, 1e-4))) for i, o in pairs]
    return cands


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_candidates_on_a_residual_concat_net(data):
    check(residual_concat_net(), draw_candidates(data), blocks=(1, 2, 4, 8))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_candidates_on_a_projection_shortcut(data):
    """An add both of whose operands are conv outputs it could be fused into (ResNet's
    projection shortcut): the add's block must be one of the two convs' output blocks."""
    b = GraphBuilder("projection")
    x = b.input((1, 8, 8, 8))
    a = b.relu(b.conv(x, 8, 3, padding=1, name="a"))
    c = b.conv(a, 16, 3, padding=1, name="c")
    sc = b.conv(x, 16, 1, name="sc")
    s = b.relu(b.add(c, sc, name="s"))
    m = b.build(head(b, b.conv(s, 8, 1, name="d")))
    chans = {"a": (8, 8), "c": (8, 16), "sc": (8, 16), "d": (16, 8)}
    cands = {}
    for name, (ci, co) in chans.items():
        pairs = data.draw(st.lists(st.tuples(st.sampled_from([v for v in (1, 2, 4, 8) if ci % v == 0]),
                                             st.sampled_from([v for v in (1, 2, 4, 8) if co % v == 0])),
                                   min_size=1, max_size=3, unique=True))
        cands[name] = [(i, o, data.draw(st.floats(1e-6, 1e-4))) for i, o in pairs]
    plan = check(m, cands, blocks=(1, 2, 4, 8))
    outs = {lc.name: lc.out_block for lc in plan.layers}
    assert plan.joins["s"] in (outs["c"], outs["sc"])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_log_holding_what_a_measuring_solve_measured_solves_without_measuring(data):
    """``solve(measure=...)`` keeps what it measured (``tune`` logs it); solving from the conv
    records and those transforms again must need no other transform and find the same cost,
    whatever the transforms' rates. The transforms the baselines measure lower the bound on
    unmeasured ones (the fastest known rate), so the plan is solved again until a pass measures
    nothing: without that, 1,500 draws found plans the log could not re-solve, and cheaper ones
    (the cause of tests/test_cluster.py's failure on a Dask-written log, session 17)."""
    from graph_tuner.records import make_transform_record
    from graph_tuner.layout_flow import layout_name

    model = residual_concat_net()
    cands = draw_candidates(data)
    speed = {}  # per key, a random per-element rate: some far cheaper than others

    def measure(keys):
        for k in keys:
            speed.setdefault(k, data.draw(st.floats(0.001, 100.0), label=f"rate {k}"))
        return {k: tcost(*k) * speed[k] for k in keys}

    gt = GraphTuner(model, records_for(model, cands), target="llvm -mcpu=test")
    plan = gt.solve(measure=measure)
    logged = records_for(model, cands) + [
        make_transform_record(k[0], layout_name(k[1]), layout_name(k[2]), s, "llvm -mcpu=test", timestamp=0.0)
        for k, s in gt.transforms.seconds.items()]
    again = GraphTuner(model, logged, target="llvm -mcpu=test").solve()  # measure=False: raises if it lacks one
    assert again.cost == pytest.approx(plan.cost, rel=1e-9)
