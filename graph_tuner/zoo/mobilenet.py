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


# (kernel, expansion channels, out channels, squeeze-excite, hard swish, stride) per block:
# the MobileNetV3 paper's Table 1 (Large).
V3_LARGE_BLOCKS = [(3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
                   (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
                   (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
                   (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
                   (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1)]


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's rounding of channel counts (never more than 10% down)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenet_v3_large(batch: int = 1, image_size: int = 224) -> Model:
    """torchvision's ``mobilenet_v3_large`` (the paper's Table 1): a 3x3 stem with hard swish,
    15 inverted residual blocks (relu or hard swish; squeeze-excite with relu and hard sigmoid
    on a quarter of the expansion channels, rounded to 8, after the depthwise conv), a 1x1 conv
    to 960, global pooling, a 1280-unit dense layer with hard swish and the classifier. BN
    epsilon 1e-3. 62 conv layers.

    >>> m = mobilenet_v3_large()
    >>> len(m.convs()), m.op("features_16_hswish").shape
    (62, (1, 960, 7, 7))
    """
    from graph_tuner.zoo.efficientnet import squeeze_excite

    b = GraphBuilder("mobilenet-v3-large")

    def conv_bn(x: str, channels: int, kernel: int, stride: int, name: str, groups: int = 1,
                act: str | None = "hswish") -> str:
        y = b.conv(x, channels, kernel, stride, kernel // 2, groups=groups, name=name)
        y = b.batch_norm(y, 1e-3, name=f"{name}_bn")
        if act == "hswish":
            return b.hard_swish(y, name=f"{name}_hswish")
        return b.relu(y, name=f"{name}_relu") if act else y

    x = conv_bn(b.input((batch, 3, image_size, image_size)), 16, 3, 2, "features_0")
    for i, (k, exp, c, se, hs, stride) in enumerate(V3_LARGE_BLOCKS, start=1):
        name, cin, act = f"features_{i}", b.shape(x)[1], "hswish" if hs else "relu"
        y = conv_bn(x, exp, 1, 1, f"{name}_expand", act=act) if exp != cin else x
        y = conv_bn(y, exp, k, stride, f"{name}_depthwise", groups=exp, act=act)
        if se:
            y = squeeze_excite(b, y, _make_divisible(exp // 4), f"{name}_se", b.relu, b.hard_sigmoid)
        y = conv_bn(y, c, 1, 1, f"{name}_project", act=None)
        x = b.add(y, x, name=f"{name}_add") if stride == 1 and cin == c else y
    x = conv_bn(x, 960, 1, 1, "features_16")
    x = b.flatten(b.global_avg_pool(x, name="avgpool"), name="flatten")
    x = b.hard_swish(b.dense(x, 1280, name="classifier_0"), name="classifier_1")
    return b.build(b.dense(x, 1000, name="classifier_3"))
