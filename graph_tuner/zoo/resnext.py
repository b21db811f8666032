"""ResNeXt-50 (32x4d) (Xie et al. 2017), as torchvision's ``resnext50_32x4d``.

torchvision's ResNet "v1.5" with grouped bottlenecks: a 7x7 stride-2 stem (BN, ReLU), a
3x3 stride-2 max pool, then 3, 4, 6, 3 bottleneck units. A unit: a 1x1 conv to the
bottleneck width, a 3x3 conv in 32 groups (4 channels a group in stage 1, doubling each
stage; the stage's stride is here, not on the 1x1), a 1x1 conv to 4x the stage's planes,
each with BN (ReLU after the first two), then ``relu(add(branch, shortcut))``; the
shortcut is a strided 1x1 conv with BN in each stage's first unit (torchvision's
``out += identity``, so the branch's convs come before the projection in conv order).
Global pooling and a 1000-way classifier. 53 conv layers, 16 of them grouped.

>>> m = resnext50_32x4d()
>>> len(m.convs()), m.op("layer1_0_conv2").weights["weight"], m.op("layer4_2_relu").shape
(53, (128, 4, 3, 3), (1, 2048, 7, 7))
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

LAYERS = [3, 4, 6, 3]  # units per stage (ResNet-50's)
PLANES = [64, 128, 256, 512]  # torchvision's ``planes``; a unit outputs 4x
EXPANSION = 4


def resnext50_32x4d(batch: int = 1, image_size: int = 224, groups: int = 32,
                    width_per_group: int = 4) -> Model:
    """torchvision's ``resnext50_32x4d`` (``groups`` x ``width_per_group`` d)."""
    b = GraphBuilder(f"resnext-50-{groups}x{width_per_group}d")
    x = b.conv(b.input((batch, 3, image_size, image_size)), 64, 7, 2, 3, name="conv1")
    x = b.max_pool(b.relu(b.batch_norm(x, name="bn1"), name="relu"), 3, 2, 1, name="maxpool")
    for stage, (units, planes) in enumerate(zip(LAYERS, PLANES), start=1):
        # torchvision: width = int(planes * (width_per_group / 64)) * groups
        width = int(planes * width_per_group / 64) * groups
        for i in range(units):
            stride = 2 if stage > 1 and i == 0 else 1
            x = _bottleneck(b, x, width, planes * EXPANSION, stride, groups, f"layer{stage}_{i}")
    x = b.flatten(b.global_avg_pool(x, name="avgpool"), name="flatten")
    return b.build(b.dense(x, 1000, name="fc"))


def _bottleneck(b: GraphBuilder, x: str, width: int, out: int, stride: int, groups: int,
                name: str) -> str:
    """One torchvision ``Bottleneck`` unit; the projection where the shape changes."""
    y = b.relu(b.batch_norm(b.conv(x, width, 1, name=f"{name}_conv1"), name=f"{name}_bn1"))
    y = b.conv(y, width, 3, stride, 1, groups=groups, name=f"{name}_conv2")
    y = b.relu(b.batch_norm(y, name=f"{name}_bn2"))
    y = b.batch_norm(b.conv(y, out, 1, name=f"{name}_conv3"), name=f"{name}_bn3")
    shortcut = x
    if stride != 1 or b.shape(x)[1] != out:
        shortcut = b.conv(x, out, 1, stride, name=f"{name}_downsample_0")
        shortcut = b.batch_norm(shortcut, name=f"{name}_downsample_1")
    return b.relu(b.add(y, shortcut, name=f"{name}_add"), name=f"{name}_relu")
