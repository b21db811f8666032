"""VGG-11/13/16/19 as in TVM's ``relay.testing.vgg`` (Simonyan & Zisserman 2014):
3x3 convs with bias_add and ReLU, 2x2 max pools, three dense layers (dropout removed).

>>> len(vgg(16).convs())
13
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

SPEC = {11: [1, 1, 2, 2, 2], 13: [2, 2, 2, 2, 2], 16: [2, 2, 3, 3, 3], 19: [2, 2, 4, 4, 4]}
FILTERS = [64, 128, 256, 512, 512]


def vgg(num_layers: int = 16, batch: int = 1, image_size: int = 224) -> Model:
    b = GraphBuilder(f"vgg-{num_layers}")
    x = b.input((batch, 3, image_size, image_size))
    for i, (convs, channels) in enumerate(zip(SPEC[num_layers], FILTERS)):
        for j in range(convs):
            x = b.conv(x, channels, 3, 1, 1, name=f"conv{i + 1}_{j + 1}")
            x = b.relu(b.bias_add(x, name=f"conv{i + 1}_{j + 1}_bias"))
        x = b.max_pool(x, 2, 2, name=f"pool{i + 1}")
    x = b.flatten(x)
    for name, units in (("fc6", 4096), ("fc7", 4096)):
        x = b.relu(b.dense(x, units, name=name))
    return b.build(b.softmax(b.dense(x, 1000, name="fc8")))
