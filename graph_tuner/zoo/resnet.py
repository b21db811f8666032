"""ResNets.

``resnet`` reproduces TVM's ``relay.testing.resnet`` (what AutoTVM's x86 tutorials
tuned): the pre-activation variant (He et al., "Identity Mappings in Deep Residual
Networks"): a ``bn_data`` batch norm on the input, BN-ReLU before each conv, the
stride on a bottleneck's first 1x1 conv, a 1x1 projection shortcut in the first unit
of *every* stage (so ResNet-18 has 21 conv layers), convs without bias, and
``add(branch, shortcut)``.

``resnet_v1`` reproduces GluonCV/MXNet's ``resnetN_v1`` (the original post-activation
ResNet, as imported by TVM's MXNet tutorials and used as SSD's base): conv-BN-ReLU,
the stride on a bottleneck's first 1x1 conv, projection shortcuts only where the
channel count changes, and ``add(shortcut, branch)`` (Gluon's ``residual + x``), so a
projection conv comes before its unit's branch in conv order. ResNet-18/34-v1 equal
torchvision's.

>>> m = resnet(18)
>>> [op.name for op in m.convs()][:4]
['conv0', 'stage1_unit1_conv1', 'stage1_unit1_conv2', 'stage1_unit1_sc']
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

UNITS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def _filters(num_layers: int) -> list[int]:
    return [64, 256, 512, 1024, 2048] if num_layers >= 50 else [64, 64, 128, 256, 512]


def _preact_unit(b: GraphBuilder, x: str, num_filter: int, stride: int, dim_match: bool, name: str,
                 bottle_neck: bool) -> str:
    act1 = b.relu(b.batch_norm(x, 2e-5, name=f"{name}_bn1"))
    if bottle_neck:
        mid = num_filter // 4
        y = b.conv(act1, mid, 1, stride, 0, name=f"{name}_conv1")
        y = b.conv(b.relu(b.batch_norm(y, 2e-5, name=f"{name}_bn2")), mid, 3, 1, 1, name=f"{name}_conv2")
        y = b.conv(b.relu(b.batch_norm(y, 2e-5, name=f"{name}_bn3")), num_filter, 1, 1, 0, name=f"{name}_conv3")
    else:
        y = b.conv(act1, num_filter, 3, stride, 1, name=f"{name}_conv1")
        y = b.conv(b.relu(b.batch_norm(y, 2e-5, name=f"{name}_bn2")), num_filter, 3, 1, 1, name=f"{name}_conv2")
    shortcut = x if dim_match else b.conv(act1, num_filter, 1, stride, 0, name=f"{name}_sc")
    return b.add(y, shortcut, name=f"{name}_add")


def resnet(num_layers: int = 18, batch: int = 1, image_size: int = 224) -> Model:
    """TVM's pre-activation ResNet-``num_layers`` (18, 34, 50, 101, 152)."""
    b = GraphBuilder(f"resnet-{num_layers}")
    filters, bottle_neck = _filters(num_layers), num_layers >= 50
    x = b.batch_norm(b.input((batch, 3, image_size, image_size)), 2e-5, name="bn_data")
    x = b.conv(x, filters[0], 7, 2, 3, name="conv0")
    x = b.max_pool(b.relu(b.batch_norm(x, 2e-5, name="bn0")), 3, 2, 1, name="pool0")
    for i, units in enumerate(UNITS[num_layers]):
        for j in range(units):
            stride = 2 if i > 0 and j == 0 else 1
            x = _preact_unit(b, x, filters[i + 1], stride, j > 0, f"stage{i + 1}_unit{j + 1}", bottle_neck)
    x = b.relu(b.batch_norm(x, 2e-5, name="bn1"))
    x = b.flatten(b.global_avg_pool(x, name="pool1"))
    return b.build(b.softmax(b.dense(x, 1000, name="fc1")))


def resnet_v1_body(b: GraphBuilder, x: str, num_layers: int, stages: int = 4) -> list[str]:
    """Gluon ResNet-v1 stem and the first ``stages`` stages; returns each stage's output."""
    filters, bottle_neck = _filters(num_layers), num_layers >= 50
    x = b.relu(b.batch_norm(b.conv(x, 64, 7, 2, 3, name="conv0"), name="bn0"))
    x = b.max_pool(x, 3, 2, 1, name="pool0")
    outs = []
    for i, units in enumerate(UNITS[num_layers][:stages]):
        for j in range(units):
            name, stride = f"stage{i + 1}_unit{j + 1}", (2 if i > 0 and j == 0 else 1)
            shortcut = x
            if j == 0 and filters[i] != filters[i + 1]:
                shortcut = b.conv(x, filters[i + 1], 1, stride, 0, name=f"{name}_downsample")
                shortcut = b.batch_norm(shortcut, name=f"{name}_downsample_bn")
            if bottle_neck:
                mid = filters[i + 1] // 4
                y = b.relu(b.batch_norm(b.conv(x, mid, 1, stride, 0, name=f"{name}_conv1"), name=f"{name}_bn1"))
                y = b.relu(b.batch_norm(b.conv(y, mid, 3, 1, 1, name=f"{name}_conv2"), name=f"{name}_bn2"))
                y = b.batch_norm(b.conv(y, filters[i + 1], 1, 1, 0, name=f"{name}_conv3"), name=f"{name}_bn3")
            else:
                y = b.relu(b.batch_norm(b.conv(x, filters[i + 1], 3, stride, 1, name=f"{name}_conv1"),
                                        name=f"{name}_bn1"))
                y = b.batch_norm(b.conv(y, filters[i + 1], 3, 1, 1, name=f"{name}_conv2"), name=f"{name}_bn2")
            x = b.relu(b.add(shortcut, y, name=f"{name}_add"), name=f"{name}_relu")
        outs.append(x)
    return outs


def resnet_v1(num_layers: int = 18, batch: int = 1, image_size: int = 224) -> Model:
    """GluonCV's ``resnet{num_layers}_v1`` classifier."""
    b = GraphBuilder(f"resnet-{num_layers}-v1")
    x = resnet_v1_body(b, b.input((batch, 3, image_size, image_size)), num_layers)[-1]
    x = b.flatten(b.global_avg_pool(x, name="pool1"))
    return b.build(b.dense(x, 1000, name="fc1"))
