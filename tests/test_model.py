"""Model: graph, consumers, conv order (against a plain recursion), validation, load_model."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_tuner.builder import GraphBuilder
from graph_tuner.errors import GraphTunerError
from graph_tuner.loading import load_model
from graph_tuner.model import OP_KINDS, Model, Op
from graph_tuner.shapes import conv_out_size, infer_shape


def _reference_conv_order(model):
    """TVM's visit: post-order from each output, inputs left to right, each op once."""
    seen, order = set(), []

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for src in model.op(name).inputs:
            visit(src)
        order.append(name)

    for out in model.outputs:
        visit(out)
    return [n for n in order if model.op(n).kind == "conv2d"]


@st.composite
def random_nets(draw):
    """Random DAGs of 3x3 convs (8 channels), adds and concats+1x1 convs, 1-2 outputs."""
    b = GraphBuilder("random")
    live = [b.input((1, 8, 6, 6))]
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["conv", "add", "concat"]))
        pick = lambda: live[draw(st.integers(0, len(live) - 1))]  # noqa: E731
        if kind == "conv":
            live.append(b.conv(pick(), 8, 3, padding=1, name=f"conv{i}"))
        elif kind == "add":
            live.append(b.add(pick(), pick()))
        else:
            live.append(b.conv(b.concat([pick(), pick()]), 8, 1, name=f"proj{i}"))
    outs = draw(st.lists(st.sampled_from(live[1:] or live), min_size=1, max_size=2, unique=True))
    return b.build(*outs)


@settings(max_examples=60, deadline=None)
@given(random_nets())
def test_conv_order_matches_plain_recursion(model):
    assert [op.name for op in model.convs()] == _reference_conv_order(model)
    names = [op.name for op in model.ops]
    assert len(names) == len(set(names))
    for op in model.ops:  # topological, and consumers agree with inputs
        assert all(names.index(i) < names.index(op.name) for i in op.inputs)
        assert [c.name for c in model.consumers(op.name)] == [o.name for o in model.ops if op.name in o.inputs]


def test_duplicate_inputs_and_consumers_each_once():
    b = GraphBuilder("dup")
    x = b.input((1, 4, 5, 5))
    c = b.conv(x, 4, 3, padding=1, name="c")
    s = b.add(c, c, name="s")
    m = b.build(s)
    assert m.op("s").inputs == ["c", "c"]
    assert [op.name for op in m.consumers("c")] == ["s"]
    assert m.graph.has_edge("c", "s") and m.consumers("s") == []


def test_multi_branch_order_follows_argument_order():
    b = GraphBuilder("branches")
    x = b.input((1, 4, 8, 8))
    left = b.conv(x, 4, 1, name="left")
    right = b.conv(b.conv(x, 4, 3, padding=1, name="right_a"), 4, 1, name="right_b")
    m = b.build(b.concat([right, left]))
    assert [op.name for op in m.convs()] == ["right_a", "right_b", "left"]


def test_dead_ops_are_not_in_conv_order():
    b = GraphBuilder("dead")
    x = b.input((1, 4, 8, 8))
    b.conv(x, 4, 1, name="unused")
    m = b.build(b.conv(x, 4, 1, name="used"))
    assert [op.name for op in m.convs()] == ["used"]
    assert "unused" in [op.name for op in m.ops]


def test_distinct_workloads_count_in_first_appearance_order():
    b = GraphBuilder("w")
    x = b.input((1, 8, 8, 8))
    y = b.conv(b.conv(x, 8, 3, padding=1, name="a"), 16, 1, name="b")
    m = b.build(b.conv(b.conv(y, 8, 1, name="c"), 8, 3, padding=1, name="d"))
    (w1, n1), (w2, n2), (w3, n3) = m.distinct_workloads()
    assert (n1, n2, n3) == (2, 1, 1)
    assert w1 == m.workload("a") == m.workload("d") and w2 == m.workload("b") and w3 == m.workload("c")


def test_model_rejects_bad_graphs():
    data = Op("data", "input", [], {}, (1, 3, 4, 4))
    with pytest.raises(ValueError, match="duplicate"):
        Model("m", [data, Op("data", "relu", [], {}, (1,))], ["data"])
    with pytest.raises(ValueError, match="unknown op 'nope'"):
        Model("m", [data, Op("r", "relu", ["nope"], {}, (1, 3, 4, 4))], ["r"])
    with pytest.raises(ValueError, match="shape"):
        Model("m", [data, Op("r", "relu", ["data"], {}, (1, 3, 5, 5))], ["r"])
    with pytest.raises(ValueError, match="kind"):
        Model("m", [data, Op("r", "gelu", ["data"], {}, (1, 3, 4, 4))], ["r"])
    with pytest.raises(ValueError, match="not a conv2d"):
        Model("m", [data], ["data"]).workload("data")


def test_load_model_errors_are_one_line():
    with pytest.raises(GraphTunerError, match="unknown model 'resnet-17'; .*resnet-18.*ssd-resnet-50") as e:
        load_model("resnet-17")
    assert "\n" not in str(e.value)
    with pytest.raises(GraphTunerError, match="batch"):
        load_model("resnet-18", batch=0)


def test_every_kind_is_documented_and_inferable():
    assert set(OP_KINDS) >= {"input", "conv2d", "dense", "batch_norm", "bias_add", "relu", "clip", "add",
                             "multiply", "concat", "max_pool", "avg_pool", "global_avg_pool", "flatten",
                             "reshape", "transpose", "pad", "softmax"}
    assert infer_shape("pad", {"pad_width": ((0, 0), (0, 0), (1, 2), (3, 4)), "value": 0.0}, [(1, 2, 3, 3)]) == (1, 2, 6, 10)
    assert infer_shape("transpose", {"perm": (0, 2, 3, 1)}, [(1, 2, 3, 4)]) == (1, 3, 4, 2)
    assert infer_shape("multiply", {}, [(1, 8, 4, 4), (1, 8, 1, 1)]) == (1, 8, 4, 4)
    with pytest.raises(ValueError):
        infer_shape("concat", {"axis": 1}, [(1, 2, 3, 3), (1, 2, 4, 4)])


@settings(max_examples=80, deadline=None)
@given(size=st.integers(1, 20), k=st.integers(1, 5), s=st.integers(1, 3), p=st.integers(0, 2), ceil=st.booleans())
def test_pool_out_size_matches_onnxruntime(size, k, s, p, ceil):
    """onnxruntime's MaxPool is the independent oracle (ceil mode included)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if k > size + 2 * p or p >= k:  # ONNX requires pads smaller than the kernel
        return
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, 1], strides=[s, 1], pads=[p, 0, p, 0],
                            ceil_mode=int(ceil))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, size, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.zeros((1, 1, size, 1), np.float32)})
    assert conv_out_size(size, k, s, p, p, ceil_mode=ceil) == y.shape[2]
