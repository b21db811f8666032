"""Inception-v3 at 299x299 as in TVM's ``relay.testing.inception_v3`` (from MXNet's
symbol, Szegedy et al. 2015): conv-BN-ReLU everywhere, avg pools counting padding,
a final 8x8 average pool, 94 conv layers.

>>> m = inception_v3()
>>> len(m.convs()), m.op("mixed_10_concat").shape
(94, (1, 2048, 8, 8))
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model


def inception_v3(batch: int = 1, image_size: int = 299) -> Model:
    b = GraphBuilder("inception-v3")

    def conv(x: str, channels: int, kernel=(1, 1), stride=(1, 1), pad=(0, 0), name: str = "", suffix: str = "") -> str:
        y = b.conv(x, channels, kernel, stride, pad, name=f"{name}{suffix}_conv1")
        return b.relu(b.batch_norm(y, 2e-5, name=f"{name}{suffix}_bn"))

    def pool(x: str, kind: str, kernel: int, stride: int, pad: int) -> str:
        if kind == "max":
            return b.max_pool(x, kernel, stride, pad)
        return b.avg_pool(x, kernel, stride, pad, count_include_pad=True)

    def block_a(x, n1, n3r, n3a, n3b, n5r, n5, pool_kind, proj, name):
        t1 = conv(x, n1, name=f"{name}_conv")
        t5 = conv(x, n5r, name=f"{name}_tower", suffix="_conv")
        t5 = conv(t5, n5, (5, 5), pad=(2, 2), name=f"{name}_tower", suffix="_conv_1")
        t3 = conv(x, n3r, name=f"{name}_tower_1", suffix="_conv")
        t3 = conv(t3, n3a, (3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_1")
        t3 = conv(t3, n3b, (3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_2")
        p = conv(pool(x, pool_kind, 3, 1, 1), proj, name=f"{name}_tower_2", suffix="_conv")
        return b.concat([t1, t5, t3, p], name=f"{name}_concat")

    def block_b(x, n3, nd3r, nd3a, nd3b, name):
        t3 = conv(x, n3, (3, 3), (2, 2), name=f"{name}_conv")
        td = conv(x, nd3r, name=f"{name}_tower", suffix="_conv")
        td = conv(td, nd3a, (3, 3), pad=(1, 1), name=f"{name}_tower", suffix="_conv_1")
        td = conv(td, nd3b, (3, 3), (2, 2), name=f"{name}_tower", suffix="_conv_2")
        return b.concat([t3, td, pool(x, "max", 3, 2, 0)], name=f"{name}_concat")

    def block_c(x, n1, d7r, d71, d72, q7r, q71, q72, q73, q74, pool_kind, proj, name):
        t1 = conv(x, n1, name=f"{name}_conv")
        td = conv(x, d7r, name=f"{name}_tower", suffix="_conv")
        td = conv(td, d71, (1, 7), pad=(0, 3), name=f"{name}_tower", suffix="_conv_1")
        td = conv(td, d72, (7, 1), pad=(3, 0), name=f"{name}_tower", suffix="_conv_2")
        tq = conv(x, q7r, name=f"{name}_tower_1", suffix="_conv")
        for k, (ch, kern, pad) in enumerate([(q71, (7, 1), (3, 0)), (q72, (1, 7), (0, 3)),
                                             (q73, (7, 1), (3, 0)), (q74, (1, 7), (0, 3))], start=1):
            tq = conv(tq, ch, kern, pad=pad, name=f"{name}_tower_1", suffix=f"_conv_{k}")
        p = conv(pool(x, pool_kind, 3, 1, 1), proj, name=f"{name}_tower_2", suffix="_conv")
        return b.concat([t1, td, tq, p], name=f"{name}_concat")

    def block_d(x, n3r, n3, d7r, d71, d72, d73, name):
        t3 = conv(x, n3r, name=f"{name}_tower", suffix="_conv")
        t3 = conv(t3, n3, (3, 3), (2, 2), name=f"{name}_tower", suffix="_conv_1")
        td = conv(x, d7r, name=f"{name}_tower_1", suffix="_conv")
        td = conv(td, d71, (1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_1")
        td = conv(td, d72, (7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_2")
        td = conv(td, d73, (3, 3), (2, 2), name=f"{name}_tower_1", suffix="_conv_3")
        return b.concat([t3, td, pool(x, "max", 3, 2, 0)], name=f"{name}_concat")

    def block_e(x, n1, d3r, d31, d32, q3r, q3, q31, q32, pool_kind, proj, name):
        t1 = conv(x, n1, name=f"{name}_conv")
        td = conv(x, d3r, name=f"{name}_tower", suffix="_conv")
        tda = conv(td, d31, (1, 3), pad=(0, 1), name=f"{name}_tower", suffix="_mixed_conv")
        tdb = conv(td, d32, (3, 1), pad=(1, 0), name=f"{name}_tower", suffix="_mixed_conv_1")
        tq = conv(x, q3r, name=f"{name}_tower_1", suffix="_conv")
        tq = conv(tq, q3, (3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_1")
        tqa = conv(tq, q31, (1, 3), pad=(0, 1), name=f"{name}_tower_1", suffix="_mixed_conv")
        tqb = conv(tq, q32, (3, 1), pad=(1, 0), name=f"{name}_tower_1", suffix="_mixed_conv_1")
        p = conv(pool(x, pool_kind, 3, 1, 1), proj, name=f"{name}_tower_2", suffix="_conv")
        return b.concat([t1, tda, tdb, tqa, tqb, p], name=f"{name}_concat")

    x = conv(b.input((batch, 3, image_size, image_size)), 32, (3, 3), (2, 2), name="conv")
    x = conv(x, 32, (3, 3), name="conv_1")
    x = conv(x, 64, (3, 3), pad=(1, 1), name="conv_2")
    x = pool(x, "max", 3, 2, 0)
    x = conv(x, 80, name="conv_3")
    x = conv(x, 192, (3, 3), name="conv_4")
    x = pool(x, "max", 3, 2, 0)
    x = block_a(x, 64, 64, 96, 96, 48, 64, "avg", 32, "mixed")
    x = block_a(x, 64, 64, 96, 96, 48, 64, "avg", 64, "mixed_1")
    x = block_a(x, 64, 64, 96, 96, 48, 64, "avg", 64, "mixed_2")
    x = block_b(x, 384, 64, 96, 96, "mixed_3")
    x = block_c(x, 192, 128, 128, 192, 128, 128, 128, 128, 192, "avg", 192, "mixed_4")
    x = block_c(x, 192, 160, 160, 192, 160, 160, 160, 160, 192, "avg", 192, "mixed_5")
    x = block_c(x, 192, 160, 160, 192, 160, 160, 160, 160, 192, "avg", 192, "mixed_6")
    x = block_c(x, 192, 192, 192, 192, 192, 192, 192, 192, 192, "avg", 192, "mixed_7")
    x = block_d(x, 192, 320, 192, 192, 192, 192, "mixed_8")
    x = block_e(x, 320, 384, 384, 384, 448, 384, 384, 384, "avg", 192, "mixed_9")
    x = block_e(x, 320, 384, 384, 384, 448, 384, 384, 384, "max", 192, "mixed_10")
    x = b.flatten(b.avg_pool(x, 8, 1, 0, count_include_pad=True, name="global_pool"))
    x = b.bias_add(b.dense(x, 1000, bias=False, name="fc1"), name="fc1_bias")
    return b.build(b.softmax(x))
