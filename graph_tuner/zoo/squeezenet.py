"""SqueezeNet 1.0 and 1.1 as in TVM's ``relay.testing.squeezenet`` (Iandola et al. 2016).

TVM's version differs from the Caffe original: the 7x7 stem conv of 1.0 is padded by
3 and the 3x3 of 1.1 by 1, and pools do not use ceil mode, so feature maps are
112 -> 55 -> 27 -> 13 (1.0) instead of 109 -> 54 -> 27 -> 13.

>>> len(squeezenet("1.0").convs()), len(squeezenet("1.1").convs())
(26, 26)
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model


def _fire_conv(b: GraphBuilder, x: str, channels: int, kernel: int, padding: int, name: str) -> str:
    return b.relu(b.bias_add(b.conv(x, channels, kernel, 1, padding, name=f"{name}_conv"), name=f"{name}_conv_bias"))


def _fire(b: GraphBuilder, x: str, squeeze: int, expand1x1: int, expand3x3: int, name: str) -> str:
    x = _fire_conv(b, x, squeeze, 1, 0, f"{name}_input")
    left = _fire_conv(b, x, expand1x1, 1, 0, f"{name}_left")
    right = _fire_conv(b, x, expand3x3, 3, 1, f"{name}_right")
    return b.concat([left, right], name=f"{name}_concat")


def squeezenet(version: str = "1.0", batch: int = 1, image_size: int = 224) -> Model:
    b = GraphBuilder(f"squeezenet-{version}")
    x = b.input((batch, 3, image_size, image_size))
    if version == "1.0":
        x = b.relu(b.bias_add(b.conv(x, 96, 7, 2, 3, name="conv1"), name="conv1_bias"))
        plan = [(16, 64), (16, 64), (32, 128), "pool", (32, 128), (48, 192), (48, 192), (64, 256), "pool",
                (64, 256)]
    else:
        x = b.relu(b.bias_add(b.conv(x, 64, 3, 2, 1, name="conv1"), name="conv1_bias"))
        plan = [(16, 64), (16, 64), "pool", (32, 128), (32, 128), "pool", (48, 192), (48, 192), (64, 256),
                (64, 256)]
    x = b.max_pool(x, 3, 2)
    fire = 1
    for step in plan:
        if step == "pool":
            x = b.max_pool(x, 3, 2)
        else:
            x = _fire(b, x, step[0], step[1], step[1], f"fire{fire}")
            fire += 1
    x = b.relu(b.bias_add(b.conv(x, 1000, 1, name="conv_final"), name="conv_final_bias"))
    return b.build(b.softmax(b.flatten(b.global_avg_pool(x))))
