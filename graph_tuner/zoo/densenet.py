"""DenseNet-121/161/169/201 (Huang et al. 2017), as in MXNet Gluon's model zoo.

TVM's ``relay.testing.densenet`` ports the same Gluon model but drops the dense
connections (no concatenation), swaps growth rate and bottleneck size and gives
DenseNet-169 69 initial features, so its workloads match no trained DenseNet. This
module builds the real network: each layer BN-ReLU-1x1 conv (4k channels)-BN-ReLU-3x3
conv (k channels), its output concatenated after its input (``concat(x, new)``);
transitions BN-ReLU-1x1 conv halving channels, 2x2 average pool. The conv layers
(1 + 2 per dense layer + 3 transitions) number as in TVM: 120 for DenseNet-121.

>>> m = densenet(121)
>>> len(m.convs()), m.op("batch2").shape
(120, (1, 1024, 7, 7))
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

# size -> (initial features, growth rate k, layers per block)
SPECS = {121: (64, 32, [6, 12, 24, 16]), 161: (96, 48, [6, 12, 36, 24]), 169: (64, 32, [6, 12, 32, 32]),
         201: (64, 32, [6, 12, 48, 32])}
BN_SIZE = 4


def densenet(num_layers: int = 121, batch: int = 1, image_size: int = 224) -> Model:
    init, growth, blocks = SPECS[num_layers]
    b = GraphBuilder(f"densenet-{num_layers}")
    x = b.conv(b.input((batch, 3, image_size, image_size)), init, 7, 2, 3, name="conv1")
    x = b.max_pool(b.relu(b.batch_norm(x, name="batch1")), 3, 2, 1)
    for i, layers in enumerate(blocks):
        for j in range(layers):
            y = b.relu(b.batch_norm(x, name=f"batch_1_{i}_{j}"))
            y = b.conv(y, BN_SIZE * growth, 1, name=f"conv2d_1_{i}_{j}")
            y = b.relu(b.batch_norm(y, name=f"batch_2_{i}_{j}"))
            y = b.conv(y, growth, 3, 1, 1, name=f"conv2d_2_{i}_{j}")
            x = b.concat([x, y], name=f"concat_{i}_{j}")
        if i != len(blocks) - 1:
            x = b.relu(b.batch_norm(x, name=f"batch_t_{i}"))
            x = b.avg_pool(b.conv(x, b.shape(x)[1] // 2, 1, name=f"conv_t_{i}"), 2, 2)
    x = b.relu(b.batch_norm(x, name="batch2"))
    x = b.flatten(b.avg_pool(x, 7))
    return b.build(b.dense(x, 1000, name="dense"))
