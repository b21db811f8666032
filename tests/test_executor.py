"""The compiled NCHWc program vs the independent numpy reference (and onnxruntime)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_tuner.builder import GraphBuilder
from graph_tuner.errors import GraphTunerError
from graph_tuner.executor import compile_model, plan_from_configs, run_reference, uniform_plan
from graph_tuner.fusion import conv_epilogues, plan_steps
from graph_tuner.zoo.resnet import resnet, resnet_v1
from kernels.config import Conv2DConfig
from kernels.jit import BoundKernel


def _x(model, seed=0):
    return np.random.default_rng(seed).standard_normal(model.op(model.inputs[0]).shape, dtype=np.float32)


def _close(got, want, rtol=2e-4):
    """float32 vs float64: error small relative to the tensor's scale."""
    want = np.asarray(want)
    assert got.shape == want.shape
    err = np.abs(got - want).max()
    assert err <= rtol * max(1.0, np.abs(want).max()), (err, np.abs(want).max())


def _check(model, plan, names=None, seed=0):
    params = model.params(seed=seed)
    prog = compile_model(model, plan, params, keep=names or ())
    x = _x(model, seed)
    outs = prog.run(x)
    ref = run_reference(model, params, x, keep=True)
    for o, got in zip(model.outputs, outs):
        _close(got, ref[o])
    for n in names or []:
        _close(prog.tensor(n), ref[n])
    return prog


def _resnet_block():
    """v1 conv-bn-relu, a pre-activation unit (bn-relu before convs), residual adds of both kinds."""
    b = GraphBuilder("block")
    x = b.input((1, 8, 10, 10))
    y = b.relu(b.batch_norm(b.conv(x, 16, 3, padding=1, name="stem"), name="stem_bn"), name="stem_relu")
    act = b.relu(b.batch_norm(y, name="pre_bn"), name="pre_relu")  # pre-activation: not foldable
    c1 = b.conv(act, 16, 3, padding=1, name="c1")
    c2 = b.conv(b.relu(b.batch_norm(c1, name="bn2")), 16, 3, padding=1, name="c2")
    s1 = b.add(c2, y, name="add1")  # residual: conv + identity, no relu
    d = b.batch_norm(b.conv(s1, 32, 1, strides=2, name="down"), name="down_bn")
    c3 = b.batch_norm(b.conv(s1, 32, 3, strides=2, padding=1, bias=True, name="c3"), name="c3_bn")
    out = b.relu(b.add(d, c3, name="add2"), name="out_relu")  # both operands are convs
    return b.build(b.softmax(b.dense(b.flatten(b.global_avg_pool(out)), 10, name="fc"), name="prob"))


def test_fusion_decisions_on_a_residual_block():
    steps = {s.ops[0]: s for s in plan_steps(_resnet_block())}
    assert steps["stem"].ops == ["stem", "stem_bn", "stem_relu"] and steps["stem"].activation == "relu"
    assert steps["pre_bn"].kind == "elementwise" and steps["pre_bn"].ops == ["pre_bn", "pre_relu"]
    # ... written by the stem conv's epilogue as its second output (y is read by add1 too)
    assert steps["pre_bn"].fused and steps["stem"].affine is steps["pre_bn"]
    assert steps["c2"].residual == "stem_relu" and steps["c2"].ops[-1] == "add1"
    # add2 goes to the later conv (c3), reading the earlier one's (down's) output.
    assert steps["c3"].ops == ["c3", "c3_bn", "add2", "out_relu"] and steps["c3"].residual == "down_bn"
    assert steps["down"].ops == ["down", "down_bn"]


def _activations_after_convs():
    """Every kind of activation right after a conv: dense, depthwise, with parameters."""
    b = GraphBuilder("acts")
    x = b.input((1, 8, 6, 6))
    y = b.silu(b.batch_norm(b.conv(x, 16, 1, name="c1"), name="bn1"), name="silu")
    y = b.hard_swish(b.conv(y, 16, 3, padding=1, groups=16, name="dw"), name="hswish")  # depthwise
    y = b.sigmoid(b.leaky_relu(b.conv(y, 16, 3, padding=1, name="c3"), 0.2, name="leaky"), name="sig")
    return b.build(b.hard_sigmoid(b.conv(y, 8, 1, name="c4"), 0.2, 0.6, name="hsig"))


def test_every_activation_after_a_conv_runs_in_its_epilogue():
    """conv -> silu (and hard swish, leaky relu, hard sigmoid) is one step, and the sigmoid after
    the leaky relu is that conv's second output: no elementwise pass remains. The tuner times
    each kernel with its activations, and the program matches the reference in plain and blocked."""
    from graph_tuner.tuning import workload_epilogues

    m = _activations_after_convs()
    steps = plan_steps(m)
    assert [(s.kind, s.ops) for s in steps] == [("conv", ["c1", "bn1", "silu"]), ("conv", ["dw", "hswish"]),
                                                 ("conv", ["c3", "leaky"]), ("elementwise", ["sig"]),
                                                 ("conv", ["c4", "hsig"])]
    assert [s.activation for s in steps if s.kind == "conv"] == ["silu", "hard_swish", ("leaky_relu", 0.2),
                                                                 ("hard_sigmoid", 0.2, 0.6)]
    assert steps[2].affine is steps[3] and steps[3].fused
    epilogues = workload_epilogues(m)  # the log's times are the network's
    assert epilogues[m.workload(m.op("c1"))]["activation"] == "silu"
    assert epilogues[m.workload(m.op("c3"))]["affine_activation"] == "sigmoid"
    for block in (1, 8):
        prog = _check(m, uniform_plan(m, block), names=["silu", "hswish", "leaky"])
        assert [s.name for s in prog.steps if s.category != "transform"] == ["c1", "dw", "c3", "c4"]


def test_conv_then_silu_is_one_step(monkeypatch):
    b = GraphBuilder("silu")
    m = b.build(b.silu(b.conv(b.input((1, 8, 6, 6)), 16, 3, padding=1, name="c"), name="act"))
    steps = plan_steps(m)
    assert len(steps) == 1 and steps[0].ops == ["c", "act"] and not any(s.kind == "elementwise" for s in steps)
    # The rule before (benchmarks/epilogue_ab.py's unfused build): the SiLU a pass of its own.
    monkeypatch.setattr("graph_tuner.fusion.EPILOGUE_ACTIVATIONS", frozenset({"relu", "relu6"}))
    assert [(s.kind, s.ops, s.fused) for s in plan_steps(m)] == [("conv", ["c"], False),
                                                                ("elementwise", ["act"], False)]


@pytest.mark.parametrize("block", [1, 8, 16])
def test_residual_block_matches_reference(block):
    m = _resnet_block()
    prog = _check(m, uniform_plan(m, block), names=["fc", "stem_relu", "add1", "down_bn", "pre_relu"])
    assert sum(s.category == "conv" for s in prog.steps) == 5
    others = {s.name for s in prog.steps if s.category == "other"}
    assert "fc" in others and "pre_bn" not in others  # pre_bn + pre_relu: the stem's second output
    assert next(s for s in prog.steps if s.name == "stem").ops[-2:] == ["pre_bn", "pre_relu"]


def test_residual_not_fused_across_layouts():
    m = _resnet_block()
    configs = {op.name: Conv2DConfig(8 if op.name == "stem" else 16, 16, 4, True) for op in m.convs()}
    configs["down"] = Conv2DConfig(16, 8, 4)  # down writes NCHW8c but add2 computes in NCHW16c
    plan = plan_from_configs(m, configs, joins={"add2": 16})
    steps = {s.ops[0]: s for s in plan_steps(m, *_blocks(m, plan))}
    assert steps["c3"].residual == "down_bn"  # c3 (NCHW16c) still takes it, reading down's transform
    _check(m, plan, names=["fc"])
    configs["c3"] = Conv2DConfig(16, 8, 4)  # now neither conv writes the add's layout
    plan = plan_from_configs(m, configs, joins={"add2": 16})
    steps = {s.ops[0]: s for s in plan_steps(m, *_blocks(m, plan))}
    assert steps["add2"].kind == "elementwise" and steps["add2"].ops == ["add2", "out_relu"]
    _check(m, plan, names=["fc"])


def _blocks(m, plan):
    return plan.blocks, plan.joins


def _branchy():
    """Concat of blocked branches, depthwise + relu6, pools incl. ceil mode, pad, bias_add."""
    b = GraphBuilder("branchy")
    x = b.input((1, 3, 16, 16))
    y = b.relu(b.conv(x, 16, 3, padding=1, bias=True, name="c0"))
    dw = b.relu6(b.batch_norm(b.conv(y, 16, 3, padding=1, groups=16, name="dw"), name="dw_bn"), name="dw_r6")
    p1 = b.max_pool(dw, 3, 2, ceil_mode=True, name="mp_ceil")  # 16 -> 8, the last window partial
    p2 = b.avg_pool(b.conv(y, 32, 1, name="c1"), 2, 2, padding=(0, 0, 1, 1), name="ap")
    p3 = b.avg_pool(b.conv(y, 16, 1, name="c2"), 3, 2, padding=1, count_include_pad=True, name="ap_inc")
    cat = b.concat([p1, p2, p3], name="cat")  # 64 channels
    z = b.bias_add(b.conv(cat, 24, 3, name="c3"), name="c3_bias")
    z = b.op("pad", [z], {"pad_width": ((0, 0), (0, 0), (1, 2), (2, 1)), "value": 0.5}, name="pad")
    z = b.max_pool(z, 2, 2, padding=(1, 1, 0, 0), ceil_mode=True, name="mp2")
    return b.build(b.softmax(b.dense(b.flatten(b.global_avg_pool(z)), 7, name="fc"), name="prob"))


@pytest.mark.parametrize("block", [1, 8, 16])
def test_concat_pools_depthwise_match_reference(block):
    m = _branchy()
    assert m.op("mp_ceil").shape[2:] == m.op("ap").shape[2:] == (8, 8)
    _check(m, uniform_plan(m, block), names=["cat", "mp2", "fc", "dw_r6"])


def _shared():
    """One tensor read by two convs, an add and a plain op: forces shared and distinct transforms."""
    b = GraphBuilder("shared")
    x = b.input((1, 16, 9, 9))
    t = b.relu(b.conv(x, 32, 3, padding=1, name="src"), name="t")
    a = b.conv(t, 16, 1, name="a")
    c = b.conv(t, 16, 3, padding=1, name="c")
    d = b.conv(t, 32, 1, name="d")
    s = b.add(d, t, name="s")
    f = b.flatten(b.global_avg_pool(t, name="gap"), name="flat")
    return b.build(b.concat([a, c], name="ac"), s, f)


def _divisors(n):
    return [d for d in (1, 2, 4, 8, 16, 32) if n % d == 0]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_layouts_match_reference(data):
    m = _shared()
    configs = {}
    for op in m.convs():
        w = m.workload(op)
        ib = data.draw(st.sampled_from(_divisors(w.in_channels)), label=f"{op.name} ic_bn")
        ob = data.draw(st.sampled_from(_divisors(w.out_channels)), label=f"{op.name} oc_bn")
        configs[op.name] = Conv2DConfig(ib, ob, data.draw(st.sampled_from([1, 3, 4])), w.kernel_size[1] > 1)
    joins = {"s": data.draw(st.sampled_from(_divisors(32))), "ac": data.draw(st.sampled_from(_divisors(16)))}
    plan = plan_from_configs(m, configs, joins)
    prog = _check(m, plan, names=["t"])
    # One transform per (tensor, layout), however many consumers share it.
    keys = [(t.tensor, t.dst_layout) for t in plan.transforms]
    assert len(keys) == len(set(keys)) == sum(s.category == "transform" for s in prog.steps)
    wanted = {configs[c].ic_bn for c in "acd"} | {joins["s"]}  # gap is agnostic: reads t as it is
    assert {b for _, b in _blocks_needed(plan, "t")} == wanted - {configs["src"].oc_bn}


def _blocks_needed(plan, tensor):
    return [(t, t.dst_block) for t in plan.transforms if t.tensor == tensor]


def test_shared_transform_serves_all_its_consumers():
    m = _shared()
    configs = {"src": Conv2DConfig(16, 16, 4, True), "a": Conv2DConfig(8, 16, 3), "c": Conv2DConfig(8, 16, 3, True),
               "d": Conv2DConfig(8, 32, 3)}
    plan = plan_from_configs(m, configs, {"s": 16, "ac": 16})
    moves = [(t.tensor, t.dst_layout, t.consumers) for t in plan.transforms]
    assert ("t", "NCHW8c", ["a", "c", "d"]) in moves and len([mv for mv in moves if mv[0] == "t"]) == 1
    assert ("s", "NCHW", ["<output>"]) in moves and ("gap", "NCHW", ["flat"]) in moves
    prog = _check(m, plan)
    assert sum(s.name.startswith("t NCHW16c->NCHW8c") for s in prog.steps) == 1


@pytest.mark.parametrize("build,depth", [(resnet, 18), (resnet_v1, 18), (resnet, 50)],
                         ids=["resnet-18", "resnet-18-v1", "resnet-50"])
def test_zoo_resnet_at_reduced_resolution(build, depth):
    """ResNet-50's 1x1 convs at block 16 (512-2048 input channels) reduce in L1-sized batches."""
    from kernels.conv2d import ic_batch

    m = build(depth, image_size=32)
    plan = uniform_plan(m, 16)
    batched = [lc for lc in plan.layers
               if ic_batch(lc.workload, lc.candidate.config) < lc.workload.kernel_shape[1] // lc.candidate.config.ic_bn]
    assert batched or depth != 50
    prog = _check(m, plan, names=["fc1"])
    # The folds and fusions happened: every add and every bn right after a conv runs inside a conv step.
    in_conv = {op for s in prog.steps if s.category == "conv" for op in s.ops}
    assert sum(s.category == "conv" for s in prog.steps) == len(m.convs())
    assert {op.name for op in m.ops if op.kind == "add"} <= in_conv
    assert {op.name for op in m.ops if op.kind == "batch_norm" and m.op(op.inputs[0]).kind == "conv2d"} <= in_conv
    # Dead tensors' buffers were reused (and the outputs above still matched the reference):
    # 0.42, 0.48 and 0.23 of one buffer per tensor here.
    largest = max(4 * math.prod(op.shape) for op in m.ops if len(op.shape) == 4)
    assert largest <= prog.buffer_bytes < prog.tensor_bytes / 2
    # Every packed weight (the convs' and the fc's) is a view into the weight arena's
    # huge-page reservations, which hold little more than them (executor.memory.WeightArena).
    packed = [s.fn.keep[1]["weight"] for s in prog.steps
              if isinstance(s.fn, BoundKernel) and "weight" in s.fn.keep[1]]
    assert len(packed) == len(m.convs()) + 1
    chunks = [(c.ctypes.data, c.ctypes.data + c.nbytes) for c in prog.weights.chunks]
    assert all(a % (2 << 20) == 0 for a, _ in chunks)
    assert all(any(a <= w.ctypes.data and w.ctypes.data + w.nbytes <= b for a, b in chunks) for w in packed)
    assert sum(w.nbytes for w in packed) <= prog.weights.nbytes < sum(w.nbytes for w in packed) + (1 << 20)


def test_plan_for_another_model_is_an_error():
    m = _resnet_block()
    other = _branchy()
    with pytest.raises(GraphTunerError, match="another model"):
        compile_model(m, uniform_plan(other, 8))


def test_input_shape_is_checked():
    m = _shared()
    prog = compile_model(m, uniform_plan(m, 8))
    with pytest.raises(GraphTunerError, match=r"must have shape \(1, 16, 9, 9\)"):
        prog.run(np.zeros((1, 16, 9, 8), np.float32))


def test_onnx_model_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from graph_tuner.onnx_export import save_onnx
    from graph_tuner.onnx_import import load_onnx

    src = _branchy()
    path = tmp_path / "branchy.onnx"
    save_onnx(src, src.params(seed=3), path)
    m = load_onnx(path)
    x = _x(m, 1)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {m.inputs[0]: x})
    for block in (1, 16):
        got = compile_model(m, uniform_plan(m, block)).run(x)  # the file's own weights
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    # The logits, not just the softmax, agree with onnxruntime and with the reference.
    ref = run_reference(m, m.params(), x, keep=True)
    prog = compile_model(m, uniform_plan(m, 8), keep=["fc"])
    prog.run(x)
    _close(prog.tensor("fc"), ref["fc"])


def test_second_output_is_transformed_for_its_reader():
    """The stem's second output (pre_relu, NCHW16c) is read by c1 in NCHW8c: the plan's
    transform of it runs after the stem's kernel, and the outputs still match."""
    m = _resnet_block()
    configs = {op.name: Conv2DConfig(8 if op.name in ("stem", "c1") else 16, 16, 4, True) for op in m.convs()}
    plan = plan_from_configs(m, configs)
    assert any(t.tensor == "pre_relu" and t.dst_layout == "NCHW8c" for t in plan.transforms)
    prog = _check(m, plan, names=["pre_relu", "fc"])
    names = [s.name for s in prog.steps]
    assert names.index("pre_relu NCHW16c->NCHW8c") == names.index("stem") + 1


def test_a_transform_may_reuse_the_buffer_the_transform_before_it_freed():
    """c0's epilogue also writes r2 = relu(c0); both are transformed to plain. c0's transform
    is its last reader, so r2's transform may reuse c0's memory, and must then run after it
    (it once ran first and overwrote c0: found by tests/test_plan_flow.py)."""
    b = GraphBuilder("reuse")
    x = b.input((1, 3, 6, 6))
    c0 = b.conv(x, 4, 3, padding=1, name="c0")
    leaves = b.concat([b.concat([x, c0], name="cat1"), b.relu(c0, name="r2")], name="leaves")
    m = b.build(b.flatten(b.global_avg_pool(b.conv(leaves, 4, 1, name="last"))))
    plan = plan_from_configs(m, {"c0": Conv2DConfig(1, 2, 2), "last": Conv2DConfig(1, 1, 2)})
    assert {(t.tensor, t.dst_block) for t in plan.transforms} == {("c0", 1), ("r2", 1)}
    _check(m, plan)


def _dense_block():
    """DenseNet's layer: bn -> relu on a concatenation, then a 1x1 conv (twice, growing the concat);
    a pre-activation read by a 3x3 conv too (no prologue there)."""
    b = GraphBuilder("dense")
    x = b.relu(b.conv(b.input((1, 3, 9, 9)), 16, 3, padding=1, name="stem"))
    feats = [x]
    for i in range(2):
        cat = b.concat(feats, name=f"cat{i}") if len(feats) > 1 else feats[0]
        pre = b.relu(b.batch_norm(cat, name=f"bn{i}"), name=f"pre{i}")
        y = b.relu(b.batch_norm(b.conv(pre, 32, 1, name=f"squeeze{i}"), name=f"sq_bn{i}"))
        feats.append(b.conv(y, 8, 3, padding=1, name=f"grow{i}"))
    last = b.concat(feats, name="cat_last")
    pre = b.relu(b.batch_norm(last, name="bn_last"), name="pre_last")
    z = b.add(b.conv(pre, 8, 1, name="one_by_one"), b.conv(pre, 8, 3, padding=1, name="three_by_three"))
    return b.build(b.global_avg_pool(z, name="gap"))


def test_a_bn_relu_before_a_1x1_conv_is_its_prologue():
    m = _dense_block()
    steps = {s.ops[0]: s for s in plan_steps(m)}
    assert steps["stem"].affine is steps["bn0"]  # on a conv's own output: its second output, as before
    assert steps["bn1"].fused and steps["squeeze1"].prologue is steps["bn1"]
    assert steps["squeeze1"].inputs[0] == "cat1"  # reads the concat itself
    epilogue = conv_epilogues(m)["squeeze1"]  # what the tuner times it with
    assert epilogue["prologue"] and epilogue["prologue_activation"] == "relu"
    assert not steps["bn_last"].fused  # also read by a 3x3 conv, whose zero padding it must not see
    assert steps["one_by_one"].prologue is None
    b = GraphBuilder("two_readers")
    x = b.max_pool(b.input((1, 8, 6, 6)), 2, 2, name="pool")
    pre = b.relu(b.batch_norm(x, name="bn"), name="pre")
    m2 = b.build(b.add(b.conv(pre, 8, 1, name="a"), b.conv(pre, 8, 1, name="b")))
    steps = {s.ops[0]: s for s in plan_steps(m2)}
    assert not steps["bn"].fused and steps["a"].prologue is None  # each reader would redo it: one pass


@pytest.mark.parametrize("block", [1, 8, 16])
def test_prologue_convs_match_reference(block):
    m = _dense_block()
    prog = _check(m, uniform_plan(m, block), names=["gap", "grow0", "grow1"])
    others = {s.name for s in prog.steps if s.category == "other"}
    assert "bn_last" in others
    if block < 16:  # at 16 the concat (24 channels) and squeeze1's input block (12) differ: no prologue
        assert "bn1" not in others
        assert next(s for s in prog.steps if s.name == "squeeze1").ops[:2] == ["bn1", "pre1"]


def _squeeze_excite(batch: int = 1, gate_first: bool = False):
    """EfficientNet's block end: depthwise conv, SiLU, squeeze-excite (pool, two 1x1 convs,
    sigmoid), the scale, then the 1x1 projection; and a second scale read by a 3x3 conv."""
    b = GraphBuilder("se")
    x = b.input((batch, 16, 8, 8))
    y = b.silu(b.conv(x, 16, 3, padding=1, groups=16, name="dw"), name="dw_silu")
    fc1 = b.silu(b.conv(b.global_avg_pool(y, name="pool"), 4, 1, bias=True, name="fc1"))
    gate = b.sigmoid(b.conv(fc1, 16, 1, bias=True, name="fc2"), name="gate")
    scaled = b.multiply(gate, y, name="scale") if gate_first else b.multiply(y, gate, name="scale")
    z = b.conv(scaled, 8, 1, name="project")
    w = b.conv(b.multiply(y, gate, name="scale2"), 8, 3, padding=1, name="three_by_three")
    return b.build(b.flatten(b.global_avg_pool(b.concat([z, w], name="cat"))))


@pytest.mark.parametrize("gate_first", [False, True])
def test_a_squeeze_excite_scale_is_the_projections_prologue(gate_first):
    m = _squeeze_excite(gate_first=gate_first)
    steps = {s.ops[0]: s for s in plan_steps(m)}
    assert steps["scale"].fused and steps["project"].prologue is steps["scale"]
    assert steps["project"].inputs == ["dw_silu", "gate"]  # reads the depthwise output, and the gate
    epilogue = conv_epilogues(m)["project"]  # what the tuner times it with
    assert epilogue["prologue"] and epilogue["prologue_activation"] is None
    assert not steps["scale2"].fused and steps["three_by_three"].prologue is None  # padding: no prologue
    for block in (1, 4, 8, 16):
        prog = _check(m, uniform_plan(m, block), names=["project", "three_by_three"])
        names = {s.name for s in prog.steps}
        assert "scale" not in names and "scale2" in names


def test_a_squeeze_pool_reads_the_depthwise_convs_row_means():
    """Fusion rule 6: the pool after the depthwise conv reads the row means the conv's epilogue
    wrote (the tuner times the conv with them); its output matches the reference in every block."""
    from graph_tuner.executor.step_timing import step_identities, step_ms

    m = _squeeze_excite()
    steps = {s.ops[0]: s for s in plan_steps(m)}
    assert steps["dw"].pooled is steps["pool"] and steps["pool"].from_rows
    epilogues = conv_epilogues(m)
    assert epilogues["dw"]["row_means"] and not epilogues["project"]["row_means"]
    last = [s for s in steps.values() if s.kind == "global_avg_pool" and s.ops[0] != "pool"]
    assert len(last) == 1 and not last[0].from_rows  # after the concat: no conv writes its row means
    for block in (1, 4, 8, 16):
        prog = _check(m, uniform_plan(m, block), names=["pool", "project"])
        pool = next(s for s in prog.steps if s.name == "pool").fn.keep[0]  # its kernel
        assert pool.input_shape[2:4] == (8, 1)  # it reads 8 row means per channel, not the 8 x 8 plane
    step_ms(m, {"pool": [1, 8]}, repeat=3)  # costed as it runs: on the row means, plain or blocked
    # ... and logged under another identity than a pool of the plane: a log's old timing is not its
    assert step_identities(_pool_after(groups=16))["pool"] != step_identities(_pool_after(groups=1))["pool"]


def _pool_after(groups: int):
    """A global pool after a 16-channel 3x3 conv of ``groups`` groups (16: depthwise) and SiLU."""
    b = GraphBuilder("pool_after")
    x = b.input((1, 16, 8, 8))
    return b.build(b.global_avg_pool(b.silu(b.conv(x, 16, 3, padding=1, groups=groups, name="c"), name="y"),
                                     name="pool"))


def test_no_row_means_where_the_pool_reads_another_layout_or_a_dense_conv():
    m = _squeeze_excite()

    def reads(reader, tensor):  # the pool reads the depthwise output transformed to block 4
        return 4 if reader == "pool" else 8
    steps = {s.ops[0]: s for s in plan_steps(m, {op.name: 8 for op in m.ops}, {}, reads)}
    assert not steps["pool"].from_rows and steps["dw"].pooled is None
    assert not {s.ops[0]: s for s in plan_steps(_pool_after(groups=1))}["pool"].from_rows
    # Groups of 4 channels: only a config whose blocks hold whole groups runs the depthwise template
    assert not {s.ops[0]: s for s in plan_steps(_pool_after(groups=4))}["pool"].from_rows


@pytest.mark.parametrize("project_block", [4, 8])
def test_a_squeeze_excite_scale_runs_alone_where_the_plan_transforms_it(project_block):
    """The scale computes in block 4 (its inputs transformed there); a projection reading block 4
    runs it as its prologue, one reading block 8 reads its transformed output. Nothing but the
    projection reads the gate, and convs after it reuse buffers."""
    b = GraphBuilder("one_se")
    x = b.input((1, 16, 8, 8))
    y = b.silu(b.conv(x, 16, 3, padding=1, name="c0"), name="y")
    gate = b.sigmoid(b.conv(b.global_avg_pool(y, name="pool"), 16, 1, bias=True, name="fc"), name="gate")
    z = b.conv(b.multiply(y, gate, name="scale"), 8, 1, name="project")
    m = b.build(b.flatten(b.global_avg_pool(b.conv(b.relu(z, name="z"), 8, 3, padding=1, name="after"))))
    configs = {op.name: Conv2DConfig(8, 8, 4) for op in m.convs()}
    configs["project"] = Conv2DConfig(project_block, 8, 4)
    plan = plan_from_configs(m, configs, joins={"scale": 4})
    assert {(t.tensor, t.dst_block) for t in plan.transforms} >= {("y", 4), ("gate", 4)}
    assert (("scale", 8) in {(t.tensor, t.dst_block) for t in plan.transforms}) == (project_block == 8)
    prog = _check(m, plan, names=["z", "after"])
    assert ("scale" in {s.name for s in prog.steps}) == (project_block == 8)


def test_no_squeeze_excite_prologue_for_a_batch():
    """At batch 2 each image has its own gate; the prologue's scale is one per channel."""
    m = _squeeze_excite(batch=2)
    steps = {s.ops[0]: s for s in plan_steps(m)}
    assert not steps["scale"].fused and steps["pool"].from_rows  # each image's row means, its own
    _check(m, uniform_plan(m, 8), names=["project", "pool"])


def test_no_prologue_when_the_conv_reads_another_layout():
    m = _dense_block()
    configs = {op.name: Conv2DConfig(8, 8, 4, True) for op in m.convs()}
    configs["stem"] = Conv2DConfig(1, 16, 4, True)
    configs["squeeze1"] = Conv2DConfig(12, 8, 4)  # squeeze1 reads pre1 in 12c, bn1 reads cat1 in another
    plan = plan_from_configs(m, configs)

    def reads(reader, tensor):
        return next((x.dst_block for x in plan.transforms if x.tensor == tensor and reader in x.consumers),
                    plan.blocks.get(tensor, 1))
    assert reads("squeeze1", "pre1") == 12 != reads("bn1", "cat1")
    steps = {s.ops[0]: s for s in plan_steps(m, plan.blocks, plan.joins, reads)}
    assert steps["squeeze1"].prologue is None and not steps["bn1"].fused
    _check(m, plan, names=["gap"])


def _inverted_residuals(blocks: int = 3):
    """MobileNet-v2's blocks: 1x1 expand, 3x3 depthwise, 1x1 project, residual add."""
    b = GraphBuilder("mbv2ish")
    x = b.input((1, 32, 16, 16))
    for i in range(blocks):
        e = b.relu6(b.conv(x, 64, 1, name=f"expand{i}"))
        d = b.relu6(b.conv(e, 64, 3, padding=1, groups=64, name=f"dw{i}"))
        x = b.add(x, b.conv(d, 32, 1, name=f"project{i}"))
    return b.build(x)


def _rows_first(prog) -> list[str]:
    return [s.name for s in prog.steps if getattr(getattr(s.fn, "keep", [None])[0], "rows_first", False)]


def test_a_1x1_conv_whose_input_a_depthwise_conv_writes_next_takes_rows_first(monkeypatch):
    """The executor gives a 1x1 conv rows-first work items exactly where the next write over the
    memory it reads is a depthwise conv's (kernels.conv2d.takes_rows_first); results unchanged."""
    import graph_tuner.executor.compile as compile_module
    import kernels.threads as threads
    from kernels.jit import clear_kernel_caches

    monkeypatch.setattr(compile_module, "FUSE_DW_PROJECT", False)  # unfused (fused: the test below)
    monkeypatch.setattr(threads, "ROWS_FIRST_TILES", 10**6)  # none rows first unasked: only those asked
    monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", "2")  # 16 rows: enough for 2 threads
    clear_kernel_caches()  # kernels are generated for a thread count: none from another
    try:
        m = _inverted_residuals()
        prog = _check(m, uniform_plan(m, 16))
        chosen = _rows_first(prog)
        assert chosen and set(chosen) <= {f"{k}{i}" for k in ("expand", "project") for i in range(3)}
        # Each chosen conv's input is next written (in run order, on into the next run) by a depthwise conv.
        steps = [s for s in prog.steps if "out" in getattr(s.fn, "keep", [None, {}])[1]]
        for name in chosen:
            i = [s.name for s in steps].index(name)
            data = steps[i].fn.keep[1]["data"]
            lo, hi = data.ctypes.data, data.ctypes.data + data.nbytes
            for s in steps[i + 1:] + steps[:i]:
                out = s.fn.keep[1]["out"]
                if out.ctypes.data < hi and lo < out.ctypes.data + out.nbytes:
                    assert s.name.startswith("dw"), (name, s.name)
                    break
            else:
                raise AssertionError(f"nothing writes over {name}'s input")
        # No depthwise conv, no rows-first kernel.
        block = _resnet_block()
        assert _rows_first(_check(block, uniform_plan(block, 16))) == []
    finally:
        clear_kernel_caches()


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    return a.ctypes.data < b.ctypes.data + b.nbytes and b.ctypes.data < a.ctypes.data + a.nbytes


def test_a_depthwise_conv_and_the_1x1_conv_reading_it_run_as_one_kernel(monkeypatch):
    """Each depthwise conv whose output only the next 1x1 conv reads runs fused with it
    (kernels.dw_project), the 1x1 conv writing into memory the depthwise conv no longer
    needs; the convs feeding them take rows first; outputs equal the reference. Not where
    the depthwise output is wanted (kept), nor below MIN_FUSED_ROWS."""
    import graph_tuner.executor.compile as compile_module
    from kernels.dw_project import DwProjectKernel
    from kernels.jit import clear_kernel_caches

    monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", "2")
    monkeypatch.setattr(compile_module, "MIN_FUSED_ROWS", 16)
    clear_kernel_caches()
    try:
        m = _inverted_residuals()
        prog = _check(m, uniform_plan(m, 16))
        fused = [s for s in prog.steps if isinstance(getattr(s.fn, "keep", [None])[0], DwProjectKernel)]
        assert [s.name for s in fused] == [f"dw{i}+project{i}" for i in range(3)]
        for s in fused:
            _, dw, pw, _ = s.fn.keep
            assert s.ops[0] == s.name.split("+")[0] and s.name.split("+")[1] in s.ops
            # Bands of the 1x1 conv are written while later bands of the depthwise conv still read.
            assert not _overlap(pw.keep[1]["out"], dw.keep[1]["data"])
            assert not _overlap(pw.keep[1]["out"], dw.keep[1]["out"])
            mid, data = dw.keep[1]["out"], pw.keep[1]["data"]
            assert (mid.ctypes.data, mid.shape) == (data.ctypes.data, data.shape)
        monkeypatch.setattr(compile_module, "FUSE_DW_PROJECT", False)
        unfused = compile_model(m, uniform_plan(m, 16), m.params(seed=0))
        assert np.array_equal(prog.run(_x(m))[0], unfused.run(_x(m))[0])  # the same arithmetic, bit for bit
        monkeypatch.setattr(compile_module, "FUSE_DW_PROJECT", True)
        # The second block's depthwise output kept: that pair runs as two kernels.
        wanted = next(c.name for c in m.consumers("dw1"))
        kept = _check(m, uniform_plan(m, 16), names=[wanted])
        assert [s.name for s in kept.steps if "+" in s.name] == ["dw0+project0", "dw2+project2"]
        monkeypatch.setattr(compile_module, "MIN_FUSED_ROWS", 17)  # the planes have 16 rows
        assert not [s for s in _check(m, uniform_plan(m, 16)).steps if "+" in s.name]
    finally:
        clear_kernel_caches()


def test_grouped_conv_in_blocks_of_whole_groups():
    """ResNeXt's bottleneck: a 3x3 conv of 4 channels per group between 1x1 convs, its block
    (16) holding 4 groups (the depthwise template, lanes shuffled within each group), so no
    transform to blocks of 4 and back; batch norm + relu fused on every conv."""
    b = GraphBuilder("resnext_unit")
    x = b.input((1, 32, 9, 9))
    y = b.relu(b.batch_norm(b.conv(x, 64, 1, name="c1"), name="c1_bn"), name="c1_relu")
    y = b.relu(b.batch_norm(b.conv(y, 64, 3, padding=1, groups=16, name="g"), name="g_bn"), name="g_relu")
    y = b.conv(y, 32, 1, name="c3")
    m = b.build(b.relu(b.add(y, x, name="add"), name="out"))
    configs = {"c1": Conv2DConfig(16, 16, 3), "g": Conv2DConfig(16, 16, 4, True), "c3": Conv2DConfig(16, 16, 3)}
    plan = plan_from_configs(m, configs)
    assert {t.tensor for t in plan.transforms} == {"data", "out"}  # inside, one layout throughout
    _check(m, plan, names=["out"])


def test_grouped_conv_reads_input_blocks_of_several_groups():
    """ResNeXt's later stages: 8 channels per group, the 1x1 conv before writes blocks of 32
    (4 groups each) and the grouped conv reads its group's lanes from them, writing blocks of 8
    (within a group) the 1x1 conv after reads: no transform inside the unit. Stride 2 and a
    residual through a strided 1x1 projection, as in a stage's first block."""
    b = GraphBuilder("resnext_wide_unit")
    x = b.input((1, 32, 10, 10))
    y = b.relu(b.batch_norm(b.conv(x, 64, 1, name="c1"), name="c1_bn"), name="c1_relu")
    y = b.relu(b.batch_norm(b.conv(y, 64, 3, strides=2, padding=1, groups=8, name="g"), name="g_bn"),
               name="g_relu")
    y = b.conv(y, 32, 1, name="c3")
    m = b.build(b.relu(b.add(y, b.conv(x, 32, 1, strides=2, name="proj"), name="add"), name="out"))
    configs = {"c1": Conv2DConfig(16, 32, 5), "g": Conv2DConfig(32, 8, 3, True), "c3": Conv2DConfig(8, 16, 5),
               "proj": Conv2DConfig(16, 16, 5)}
    plan = plan_from_configs(m, configs)
    assert {t.tensor for t in plan.transforms} == {"data", "out"}  # none between c1, g and c3
    _check(m, plan, names=["out"])
