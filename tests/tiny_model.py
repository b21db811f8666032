"""A tiny ONNX model for tuning tests (imported by tests/conftest.py and test modules)."""


def write_tiny_onnx(path):
    """A two-conv ONNX model (3x3 8->16, relu, 1x1 16->16 on 6x6): tuned in seconds."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("w0", (16, 8, 3, 3)), ("w1", (16, 16, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Conv", ["r0", "w1"], ["y"], name="conv1")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path



def write_siblings_onnx(path):
    """Two pointwise siblings (the same 1x1 conv to 8 channels on 6x6 but for its input
    channels: 8, then 16 after a concatenation), as DenseNet's: graph_tuner.tuning.siblings."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("w0", (8, 8, 1, 1)), ("w1", (8, 16, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0"),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Concat", ["x", "r0"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "w1"], ["y"], name="conv1")]
    graph = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path
