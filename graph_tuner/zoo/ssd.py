"""SSD-ResNet-50 at 512x512: GluonCV's ``ssd_512_resnet50_v1_voc``, the network the TVM
graph-tuner RFC benchmarked.

Reproduced: the Gluon ResNet-50-v1 base (see :mod:`graph_tuner.zoo.resnet`) whose
stage 3 (1024 ch, 32x32) and stage 4 (2048 ch, 16x16) outputs are the first two
feature maps; four extra feature layers (1x1 conv-BN-ReLU, then 3x3 stride-2
conv-BN-ReLU; 512, 512, 256, 256 channels; 8x8 to 1x1); per feature map a 3x3 class
predictor (anchors x 21 VOC classes) and a 3x3 box predictor (anchors x 4), with 4, 6,
6, 6, 4, 4 anchors; each prediction transposed to NHWC, flattened and concatenated.
Outputs: class scores (softmax over ``(N, anchors, 21)``) then box offsets
``(N, anchors, 4)``. Left out: anchor generation, box decoding and NMS (no conv
layers, and not ops of this graph representation). 73 conv layers.

>>> m = ssd_resnet50()
>>> len(m.convs()), m.op(m.outputs[0]).shape, m.op(m.outputs[1]).shape
(73, (1, 6132, 21), (1, 6132, 4))
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model
from graph_tuner.zoo.resnet import resnet_v1_body

EXTRA_FILTERS = [512, 512, 256, 256]
ANCHORS = [4, 6, 6, 6, 4, 4]  # 2 sizes + len(ratios) - 1 per feature map
NUM_CLASSES = 20 + 1  # VOC classes and background


def ssd_resnet50(batch: int = 1, image_size: int = 512) -> Model:
    b = GraphBuilder("ssd-resnet-50")
    features = resnet_v1_body(b, b.input((batch, 3, image_size, image_size)), 50)[2:]
    x = features[-1]
    for i, f in enumerate(EXTRA_FILTERS):
        x = b.relu(b.batch_norm(b.conv(x, f, 1, name=f"expand_trans_conv{i}"), name=f"expand_trans_bn{i}"))
        x = b.relu(b.batch_norm(b.conv(x, f, 3, 2, 1, name=f"expand_conv{i}"), name=f"expand_bn{i}"))
        features.append(x)

    def predict(kind: str, per_anchor: int) -> str:
        flat = []
        for i, (feat, anchors) in enumerate(zip(features, ANCHORS)):
            y = b.conv(feat, anchors * per_anchor, 3, 1, 1, bias=True, name=f"{kind}_predictor{i}")
            flat.append(b.flatten(b.transpose(y, (0, 2, 3, 1))))
        y = b.concat(flat, axis=1, name=f"{kind}_concat")
        return b.reshape(y, (batch, b.shape(y)[1] // per_anchor, per_anchor), name=f"{kind}_preds")

    cls = b.softmax(predict("class", NUM_CLASSES), axis=-1, name="class_scores")
    return b.build(cls, predict("box", 4))
