"""MobileNets.

``mobilenet`` is TVM's ``relay.testing.mobilenet`` (MobileNet v1, alpha 1, 224): a 3x3
conv then 13 separable blocks (3x3 depthwise conv-BN-ReLU, 1x1 conv-BN-ReLU), 27 conv
layers. ``mobilenet_v2`` is torchvision's ``mobilenet_v2`` (width 1.0): inverted
residual blocks with ReLU6, ``add(x, block(x))`` where shapes allow, 52 conv layers.

>>> len(mobilenet().convs()), len(mobilenet_v2().convs())
(27, 52)
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

# (depthwise channels, pointwise channels, downsample) per separable block.
V1_BLOCKS = [(32, 64, False), (64, 128, True), (128, 128, False), (128, 256, True), (256, 256, False),
             (256, 512, True)] + [(512, 512, False)] * 5 + [(512, 1024, True), (1024, 1024, False)]

# (expansion t, out channels c, repeats n, first stride s), from the MobileNetV2 paper, Table 2.
V2_BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
             (6, 320, 1, 1)]


def mobilenet(batch: int = 1, image_size: int = 224) -> Model:
    b = GraphBuilder("mobilenet")
    x = b.conv(b.input((batch, 3, image_size, image_size)), 32, 3, 2, 1, name="conv_block_1_conv")
    x = b.relu(b.batch_norm(x, name="conv_block_1_bn"))
    for i, (dw, pw, down) in enumerate(V1_BLOCKS, start=1):
        name = f"separable_conv_block_{i}"
        x = b.conv(x, dw, 3, 2 if down else 1, 1, groups=dw, name=f"{name}_depthwise_conv1")
        x = b.relu(b.batch_norm(x, name=f"{name}_bn1"))
        x = b.relu(b.batch_norm(b.conv(x, pw, 1, name=f"{name}_conv2"), name=f"{name}_bn2"))
    x = b.flatten(b.global_avg_pool(x))
    x = b.bias_add(b.dense(x, 1000, bias=False, name="fc"), name="fc_bias")
    return b.build(b.softmax(x))


def mobilenet_v2(batch: int = 1, image_size: int = 224) -> Model:
    b = GraphBuilder("mobilenet-v2")

    def conv_bn(x: str, channels: int, kernel: int, stride: int, name: str, groups: int = 1, act: bool = True) -> str:
        y = b.batch_norm(b.conv(x, channels, kernel, stride, kernel // 2, groups=groups, name=name), name=f"{name}_bn")
        return b.relu6(y) if act else y

    x = conv_bn(b.input((batch, 3, image_size, image_size)), 32, 3, 2, "features_0")
    index = 1
    for t, c, n, s in V2_BLOCKS:
        for i in range(n):
            name, stride, cin = f"features_{index}", (s if i == 0 else 1), b.shape(x)[1]
            y = conv_bn(x, cin * t, 1, 1, f"{name}_expand") if t != 1 else x
            y = conv_bn(y, cin * t, 3, stride, f"{name}_depthwise", groups=cin * t)
            y = conv_bn(y, c, 1, 1, f"{name}_project", act=False)
            x = b.add(x, y, name=f"{name}_add") if stride == 1 and cin == c else y
            index += 1
    x = conv_bn(x, 1280, 1, 1, f"features_{index}")
    x = b.flatten(b.global_avg_pool(x))
    return b.build(b.dense(x, 1000, name="classifier"))
