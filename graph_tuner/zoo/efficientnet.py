"""EfficientNet-B0 (Tan & Le 2019), as torchvision's ``efficientnet_b0``.

A 3x3 stem (BN, SiLU), 16 MBConv blocks, a 1x1 conv to 1280 channels, global pooling
and a 1000-way classifier. An MBConv block: a 1x1 expansion (ratio 6; none in the
first stage) with BN and SiLU, a depthwise 3x3 or 5x5 (BN, SiLU), a squeeze-and-excite
(global pool, 1x1 conv to a quarter of the *block's input* channels, SiLU, 1x1 conv
back, sigmoid, channel-wise multiply), a 1x1 projection with BN and, where the shapes
allow (stride 1, same channels), ``add(block, x)``. SiLU is the ``silu`` op (ONNX:
Sigmoid then Mul). BN epsilon 1e-3, as trained. 81 conv layers (32 of them the
squeeze-excite's 1x1 convs on 1x1 images).

>>> m = efficientnet_b0()
>>> len(m.convs()), m.op("features_8_silu").shape
(81, (1, 1280, 7, 7))
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

# (expansion, kernel, first stride, out channels, repeats) per stage: the paper's Table 1.
B0_STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
             (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
EPS = 1e-3


def efficientnet_b0(batch: int = 1, image_size: int = 224) -> Model:
    b = GraphBuilder("efficientnet-b0")

    def conv_bn(x: str, channels: int, kernel: int, stride: int, name: str, groups: int = 1,
                act: bool = True) -> str:
        y = b.conv(x, channels, kernel, stride, kernel // 2, groups=groups, name=name)
        y = b.batch_norm(y, EPS, name=f"{name}_bn")
        return b.silu(y, name=f"{name}_silu") if act else y

    x = conv_bn(b.input((batch, 3, image_size, image_size)), 32, 3, 2, "features_0")
    for stage, (t, k, s, c, n) in enumerate(B0_STAGES, start=1):
        for i in range(n):
            name, stride, cin = f"features_{stage}_{i}", (s if i == 0 else 1), b.shape(x)[1]
            y = conv_bn(x, cin * t, 1, 1, f"{name}_expand") if t != 1 else x
            y = conv_bn(y, cin * t, k, stride, f"{name}_depthwise", groups=cin * t)
            y = squeeze_excite(b, y, max(1, cin // 4), f"{name}_se", b.silu, b.sigmoid)
            y = conv_bn(y, c, 1, 1, f"{name}_project", act=False)
            x = b.add(y, x, name=f"{name}_add") if stride == 1 and cin == c else y
    x = conv_bn(x, 1280, 1, 1, "features_8")
    x = b.flatten(b.global_avg_pool(x, name="avgpool"), name="flatten")
    return b.build(b.dense(x, 1000, name="classifier"))


def squeeze_excite(b: GraphBuilder, x: str, squeeze: int, name: str, act, gate) -> str:
    """``x * gate(fc2(act(fc1(pool(x)))))``, fc1 and fc2 1x1 convs with bias (torchvision's
    ``SqueezeExcitation``)."""
    s = b.global_avg_pool(x, name=f"{name}_pool")
    s = act(b.conv(s, squeeze, 1, bias=True, name=f"{name}_fc1"), name=f"{name}_act")
    s = gate(b.conv(s, b.shape(x)[1], 1, bias=True, name=f"{name}_fc2"), name=f"{name}_gate")
    return b.multiply(x, s, name=f"{name}_scale")
