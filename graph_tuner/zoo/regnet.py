"""RegNetY-800MF (Radosavovic et al. 2020), as torchvision's ``regnet_y_800mf``.

The published configuration (pycls ``RegNetY-800MF``: w0 56, wa 38.84, wm 2.4, depth 14,
quantised as torchvision does): stage depths 1, 3, 8, 2, widths 64, 144, 320, 784, group width 16,
bottleneck ratio 1, squeeze-excite ratio 0.25, a 32-channel 3x3 stride-2 stem (BN, ReLU).
A ``ResBottleneckBlock``: a 1x1 conv (BN, ReLU), a 3x3 conv in width / 16 groups
carrying the stage's stride (BN, ReLU), a squeeze-excite (global pool, 1x1 conv with bias
to a quarter of the *block's input* width, ReLU, 1x1 conv back, sigmoid, channel-wise
multiply), a 1x1 conv (BN), then ``relu(add(shortcut, branch))``; the shortcut is a
strided 1x1 conv with BN in each stage's first block (torchvision's ``x = self.proj(x) +
self.f(x)``, so the projection comes first in conv order). Global pooling and a
1000-way classifier. 75 conv layers: the stem, 5 a block (28 of them the squeeze-excite's
on 1x1 images, 14 grouped) and 4 projections.

The last stage's width differs between implementations of the same published parameters:
the generated width 776 is rounded to the group width 16 up (torchvision's
``_make_divisible``: 784) or half-to-even (pycls's and timm's ``round(776 / 16) * 16``:
768). The paper's 6.3 M parameters are pycls's network (``stages=PYCLS_STAGES``); the
zoo's is torchvision's (6.43 M).

>>> m = regnet_y_800mf()
>>> len(m.convs()), m.op("trunk_output_block1_0_f_b").attrs["groups"], m.op(m.outputs[0]).shape
(75, 4, (1, 1000))
>>> m.op("trunk_output_block4_1_activation").shape
(1, 784, 7, 7)
"""
from __future__ import annotations

from typing import Sequence

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model
from graph_tuner.zoo.efficientnet import squeeze_excite

# (depth, width) per stage: torchvision's and pycls's (see the module's docstring)
STAGES = ((1, 64), (3, 144), (8, 320), (2, 784))
PYCLS_STAGES = ((1, 64), (3, 144), (8, 320), (2, 768))
# group width, bottleneck ratio, squeeze-excite ratio, stem width
Y_800MF = {"group_width": 16, "bottleneck": 1.0, "se_ratio": 0.25, "stem": 32}


def regnet_y_800mf(batch: int = 1, image_size: int = 224,
                   stages: Sequence[tuple[int, int]] = STAGES) -> Model:
    """torchvision's ``regnet_y_800mf`` (``stages``: (depth, width) per stage)."""
    cfg = Y_800MF
    b = GraphBuilder("regnet-y-800mf")
    x = b.conv(b.input((batch, 3, image_size, image_size)), cfg["stem"], 3, 2, 1, name="stem_0")
    x = b.relu(b.batch_norm(x, name="stem_1"), name="stem_2")
    for stage, (depth, width) in enumerate(stages, start=1):
        for i in range(depth):
            name = f"trunk_output_block{stage}_{i}"
            x = _res_bottleneck(b, x, width, 2 if i == 0 else 1, cfg, name)
    x = b.flatten(b.global_avg_pool(x, name="avgpool"), name="flatten")
    return b.build(b.dense(x, 1000, name="fc"))


def _res_bottleneck(b: GraphBuilder, x: str, width: int, stride: int, cfg: dict, name: str) -> str:
    """torchvision's ``ResBottleneckBlock`` with its ``BottleneckTransform`` (a, b, se, c)."""
    width_in = b.shape(x)[1]
    wb = int(round(width * cfg["bottleneck"]))
    groups = wb // cfg["group_width"]
    shortcut = x
    if width_in != width or stride != 1:
        shortcut = b.conv(x, width, 1, stride, name=f"{name}_proj_0")
        shortcut = b.batch_norm(shortcut, name=f"{name}_proj_1")
    y = b.relu(b.batch_norm(b.conv(x, wb, 1, name=f"{name}_f_a"), name=f"{name}_f_a_bn"))
    y = b.conv(y, wb, 3, stride, 1, groups=groups, name=f"{name}_f_b")
    y = b.relu(b.batch_norm(y, name=f"{name}_f_b_bn"))
    # The squeeze width is a quarter of the block's *input* width (torchvision and pycls).
    squeeze = int(round(cfg["se_ratio"] * width_in))
    y = squeeze_excite(b, y, squeeze, f"{name}_f_se", b.relu, b.sigmoid)
    y = b.batch_norm(b.conv(y, width, 1, name=f"{name}_f_c"), name=f"{name}_f_c_bn")
    return b.relu(b.add(shortcut, y, name=f"{name}_add"), name=f"{name}_activation")
