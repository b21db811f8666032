"""One plan flows downstream: on random model graphs, the transforms the compiled program
runs are exactly the plan's list, and the solver's objective is exactly the plan's kernel
plus transform costs plus the other steps' costs in the blocks the plan runs them in
(:func:`graph_tuner.plan.plan_from_choice` is the only place that decides them)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_tuner.builder import GraphBuilder
from graph_tuner.candidates import Candidate
from graph_tuner.executor import compile_model, run_reference
from graph_tuner.layout_flow import analyse
from graph_tuner.plan import plan_from_choice
from graph_tuner.executor.step_timing import costed_steps
from graph_tuner.selection import build_problem, choice_of, required_step_blocks, required_transforms
from kernels.config import Conv2DConfig
from solvers import solve

BLOCKS = (1, 2, 4, 8)


@st.composite
def networks(draw):
    """A small random CNN on 6x6 images: convs, activations, residual adds, concats, channel
    slices, squeeze-excite multiplies, a pooled classifier head, sometimes a second output;
    every tensor keeps the 6x6 plane."""
    b = GraphBuilder("random")
    tensors = [b.input((1, draw(st.sampled_from([3, 4, 8])), 6, 6))]
    read: set[str] = set()
    for i in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["conv", "conv", "relu", "act", "add", "concat", "slice", "se"]))
        src = draw(st.sampled_from(tensors))
        if kind == "conv":
            k = draw(st.sampled_from([1, 3]))
            y = b.conv(src, draw(st.sampled_from([4, 6, 8])), k, padding=k // 2, name=f"c{i}")
        elif kind == "relu":
            y = b.relu(src, name=f"r{i}")
        elif kind == "act":
            y = getattr(b, draw(st.sampled_from(["sigmoid", "silu", "hard_swish", "leaky_relu"])))(src, name=f"act{i}")
        elif kind == "slice":
            c = b.shape(src)[1]
            begin = draw(st.integers(0, c - 1))
            y = b.slice(src, begin, draw(st.integers(begin + 1, c)), name=f"sl{i}")
        elif kind == "se":
            gate = b.sigmoid(b.conv(b.global_avg_pool(src), b.shape(src)[1], 1, bias=True, name=f"fc{i}"))
            y = b.multiply(src, gate, name=f"se{i}")
        elif kind == "add":
            same = [t for t in tensors if b.shape(t) == b.shape(src) and t != src]
            if not same:
                continue
            other = draw(st.sampled_from(same))
            y = b.add(src, other, name=f"a{i}")
            read.add(other)
        else:
            other = draw(st.sampled_from(tensors))
            y = b.concat([src, other], name=f"cat{i}")
            read.add(other)
        read.add(src)
        tensors.append(y)
    # Every tensor no op reads goes into the head, so no op is dead code.
    leaves = [t for t in tensors if t not in read]
    joined = leaves[0] if len(leaves) == 1 else b.concat(leaves, name="leaves")
    head = b.flatten(b.global_avg_pool(b.conv(joined, 4, 1, name="last")))
    outputs = [head] + ([tensors[-1]] if draw(st.booleans()) else [])
    return b.build(*outputs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(model=networks(), data=st.data())
def test_the_program_runs_exactly_the_plans_transforms(model, data):
    flow = analyse(model)
    candidates = {}
    for op in flow.convs:
        w = model.workload(op)
        pairs = data.draw(st.lists(st.tuples(st.sampled_from([v for v in BLOCKS if w.in_channels % v == 0]),
                                             st.sampled_from([v for v in BLOCKS if w.out_channels % v == 0])),
                                   min_size=1, max_size=3, unique=True), label=op.name)
        candidates[op.name] = [Candidate(None, i, o, data.draw(st.floats(1e-6, 1e-4)), Conv2DConfig(i, o, 2), True)
                               for i, o in pairs]
    costs = {key: data.draw(st.floats(1e-7, 1e-4)) for key in required_transforms(flow, candidates, BLOCKS)}
    wanted = required_step_blocks(flow, candidates, BLOCKS, [s.ops[0] for s in costed_steps(model)])
    step_ms = {name: {b: data.draw(st.floats(1e-4, 1e-1)) for b in bs} for name, bs in wanted.items()}
    sp = build_problem(flow, candidates, costs, BLOCKS, step_ms)
    sol = solve(sp.problem, method="dp")
    convs, joins = choice_of(sp, sol.choice)
    plan = plan_from_choice(flow, convs, joins, sp.transform_ms, step_ms)

    # The objective is the plan's kernels, transforms and other steps, nothing else; each
    # other step is costed in the block the plan has it write.
    assert math.isclose(sp.problem.evaluate(sol.choice), plan.cost, rel_tol=1e-9)
    assert {c.name for c in plan.steps} <= set(wanted)  # a possible prologue only where it runs alone
    assert all(c.time_ms == step_ms[c.name][plan.blocks[c.name]] for c in plan.steps)
    assert math.isclose(plan.transform_ms, sum(costs[t.key] for t in plan.transforms) * 1e3, rel_tol=1e-9)
    # The program runs exactly those transforms, one per (tensor, block), and computes the model.
    prog = compile_model(model, plan)
    ran = sorted(s.name for s in prog.steps if s.category == "transform")
    assert ran == sorted(f"{t.tensor} {t.src_layout}->{t.dst_layout}" for t in plan.transforms)
    # ... and exactly the other steps the plan costs: each step it runs has its prediction.
    assert sorted(s.name for s in prog.steps if s.category == "other") == sorted(c.name for c in plan.steps)
    assert all(s.predicted_ms is not None for s in prog.steps)
    x = np.random.default_rng(0).standard_normal(model.op(model.inputs[0]).shape, dtype=np.float32)
    for got, want in zip(prog.run(x), run_reference(model, model.params(), x)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_a_costly_pool_layout_moves_the_conv():
    """conv -> max pool: the conv's block-16 candidate is faster, but the pool after it is
    slower in NCHW16c by more than the difference: the whole-network objective picks plain."""
    b = GraphBuilder("t")
    m = b.build(b.flatten(b.global_avg_pool(b.max_pool(b.conv(b.input((1, 16, 8, 8)), 16, 3, padding=1, name="c"),
                                                        2, 2, name="mp"))))
    flow = analyse(m)
    fast16 = Candidate(None, 1, 16, 1.0e-5, Conv2DConfig(1, 16, 2), True)
    plain = Candidate(None, 1, 1, 1.2e-5, Conv2DConfig(1, 1, 2), True)
    costs = {key: 1e-6 for key in required_transforms(flow, {"c": [fast16, plain]}, (1, 16))}
    steps = [s.ops[0] for s in costed_steps(m)]
    assert steps[0] == "mp" and len(steps) == 2  # the pool and the global pool; flatten is a view
    wanted = required_step_blocks(flow, {"c": [fast16, plain]}, (1, 16), steps)
    for pool_16_ms, pick in ((0.001, fast16), (0.01, plain)):
        step_ms = {name: {b: (pool_16_ms if b == 16 else 0.001) for b in bs} for name, bs in wanted.items()}
        sp = build_problem(flow, {"c": [fast16, plain]}, costs, (1, 16), step_ms)
        convs, joins = choice_of(sp, solve(sp.problem, method="dp").choice)
        assert convs["c"] is pick


def test_a_prologue_run_alone_is_in_the_objective():
    """concat -> bn -> relu -> 1x1 conv (DenseNet's layer): the chain is the 1x1 conv's input
    prologue where the conv reads the block the chain reads, and a step of its own (plus the
    transform) where it does not. The 1x1 conv's NCHW16c-input candidate is faster; it wins
    only while the chain alone costs less than the difference, and the plan costs and runs
    the chain only then."""
    b = GraphBuilder("t")
    x = b.input((1, 8, 8, 8))
    cat = b.concat([b.conv(x, 8, 3, padding=1, name="c0"), b.conv(x, 8, 3, padding=1, name="c1")], name="cat")
    y = b.conv(b.relu(b.batch_norm(cat, name="bn"), name="r"), 16, 1, name="c2")
    m = b.build(b.flatten(b.global_avg_pool(y)))
    flow = analyse(m)
    assert flow.prologues == {"bn": "r"}
    blocks = (1, 8, 16)
    cands = {c: [Candidate(None, 1, 8, 1e-5, Conv2DConfig(1, 8, 2), True)] for c in ("c0", "c1")}
    cands["c2"] = [Candidate(None, 8, 16, 1.2e-5, Conv2DConfig(8, 16, 2), True),
                   Candidate(None, 16, 16, 1.0e-5, Conv2DConfig(16, 16, 2), True)]
    costs = {key: 1e-6 for key in required_transforms(flow, cands, blocks)}
    steps = [s.ops[0] for s in costed_steps(m)]
    assert "bn" in steps
    wanted = required_step_blocks(flow, cands, blocks, steps)
    for chain_ms, in_block in ((0.0005, 16), (0.005, 8)):
        step_ms = {name: {b: (chain_ms if name == "bn" else 0.001) for b in bs} for name, bs in wanted.items()}
        sp = build_problem(flow, cands, costs, blocks, step_ms)
        sol = solve(sp.problem, method="dp")
        convs, joins = choice_of(sp, sol.choice)
        assert convs["c2"].in_block == in_block and joins["cat"] == 8
        plan = plan_from_choice(flow, convs, joins, sp.transform_ms, step_ms)
        assert ("bn" in [c.name for c in plan.steps]) == (in_block == 16)
        assert math.isclose(sp.problem.evaluate(sol.choice), plan.cost, rel_tol=1e-9)
        prog = compile_model(m, plan)
        assert sorted(s.name for s in prog.steps if s.category == "other") == sorted(c.name for c in plan.steps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(model=networks(), data=st.data())
def test_measuring_lazily_finds_the_fully_measured_optimum(model, data):
    """select_measuring measures only what a best plan uses, and ends at the optimum of the
    fully measured problem whenever no transform beats the bound (rates within 2x here)."""
    from graph_tuner.errors import GraphTunerError
    from graph_tuner.selection import select, select_measuring

    flow = analyse(model)
    candidates = {}
    for op in flow.convs:
        w = model.workload(op)
        pairs = data.draw(st.lists(st.tuples(st.sampled_from([v for v in BLOCKS if w.in_channels % v == 0]),
                                             st.sampled_from([v for v in BLOCKS if w.out_channels % v == 0])),
                                   min_size=1, max_size=3, unique=True), label=op.name)
        candidates[op.name] = [Candidate(None, i, o, data.draw(st.floats(1e-6, 1e-4)), Conv2DConfig(i, o, 2), True)
                               for i, o in pairs]
    keys = required_transforms(flow, candidates, BLOCKS)
    truth = {k: math.prod(k[0]) * 1e-9 * data.draw(st.floats(1.0, 1.99)) for k in keys}
    asked: list = []

    def measure(new):
        asked.extend(new)
        return {k: truth[k] for k in new}

    known: dict = {}
    lazy = select_measuring(flow, candidates, known, measure, BLOCKS)
    full = select(flow, candidates, truth, BLOCKS)
    assert math.isclose(lazy.cost, full.cost, rel_tol=1e-9, abs_tol=1e-12)
    assert len(asked) == len(set(asked)) and set(asked) <= set(keys) and set(known) == set(asked)
    assert all(t.key in known for t in lazy.transforms)  # the plan's cost is measured, not bounded
    if lazy.transforms:  # knowing nothing and measuring nothing: a plan that needs a transform is refused
        with pytest.raises(GraphTunerError, match="unknown"):
            select_measuring(flow, candidates, {}, None, BLOCKS)
