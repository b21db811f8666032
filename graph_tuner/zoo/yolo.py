"""YOLOv5s (Ultralytics, v6.0 and later, v7.0 included): ``models/yolov5s.yaml``.

Depth multiple 0.33 and width multiple 0.5 applied to the yaml's layers: a 6x6 stride-2
stem conv (pad 2), 3x3 stride-2 convs between CSP ``C3`` blocks (1, 2, 3, 1 bottlenecks
with residual adds in the backbone), an ``SPPF`` (a 1x1 conv, three chained 5x5 stride-1
max pools, the four maps concatenated, a 1x1 conv), and the PANet neck: 1x1 convs, nearest
x2 ``Resize`` (PyTorch's ``nn.Upsample``: asymmetric coordinates, floor) and ``Concat``
top-down, 3x3 stride-2 convs and ``Concat`` bottom-up, C3 blocks without adds. Every
``Conv`` is conv (no bias), BN (epsilon 1e-3) and SiLU. The ``Detect`` heads are three
1x1 convs with bias to 3 anchors x (5 + 80 classes) = 255 channels at strides 8, 16 and 32,
the model's three outputs; the box decoding (sigmoid, grid and anchor arithmetic, the
reshape to ``(N, boxes, 85)``) and NMS are left out, as in :mod:`graph_tuner.zoo.ssd`.
60 conv layers.

>>> m = yolov5s(image_size=320)
>>> len(m.convs()), [m.op(o).shape for o in m.outputs]
(60, [(1, 255, 40, 40), (1, 255, 20, 20), (1, 255, 10, 10)])
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

EPS = 1e-3  # Ultralytics' BatchNorm2d(eps=0.001)
ANCHORS, CLASSES = 3, 80
WIDTH = [32, 64, 128, 256, 512]  # the yaml's 64 ... 1024, times the width multiple 0.5
# The backbone C3s' 3, 6, 9, 3 bottlenecks, times 0.33 (rounded, at least 1); the neck's 3 -> 1.
DEPTH = [1, 2, 3, 1]


def yolov5s(batch: int = 1, image_size: int = 640) -> Model:
    """YOLOv5s at ``image_size`` (a multiple of 32), outputs the three raw head maps."""
    if image_size % 32:
        raise ValueError(f"yolov5s needs an image size that is a multiple of 32, got {image_size}")
    b = GraphBuilder("yolov5s")
    p3, p4, p5 = _backbone(b, b.input((batch, 3, image_size, image_size)))
    outs = _neck(b, p3, p4, p5)
    heads = [b.conv(x, ANCHORS * (5 + CLASSES), 1, bias=True, name=f"model_24_m_{i}")
             for i, x in enumerate(outs)]
    return b.build(*heads)


def _conv(b: GraphBuilder, x: str, channels: int, kernel: int, stride: int, name: str,
          padding: int | None = None) -> str:
    """Ultralytics' ``Conv``: conv with 'same' padding (k // 2), BN, SiLU."""
    y = b.conv(x, channels, kernel, stride, kernel // 2 if padding is None else padding, name=name)
    return b.silu(b.batch_norm(y, EPS, name=f"{name}_bn"), name=f"{name}_act")


def _c3(b: GraphBuilder, x: str, channels: int, n: int, shortcut: bool, name: str) -> str:
    """``C3``: ``cv3(concat(m(cv1(x)), cv2(x)))``, ``m`` n bottlenecks (1x1 then 3x3, both at
    half the channels, ``x + ...`` if ``shortcut``)."""
    hidden = channels // 2
    y = _conv(b, x, hidden, 1, 1, f"{name}_cv1")
    for i in range(n):
        z = _conv(b, y, hidden, 1, 1, f"{name}_m_{i}_cv1")
        z = _conv(b, z, hidden, 3, 1, f"{name}_m_{i}_cv2")
        y = b.add(y, z, name=f"{name}_m_{i}_add") if shortcut else z
    cat = b.concat([y, _conv(b, x, hidden, 1, 1, f"{name}_cv2")], name=f"{name}_cat")
    return _conv(b, cat, channels, 1, 1, f"{name}_cv3")


def _sppf(b: GraphBuilder, x: str, channels: int, name: str) -> str:
    """``SPPF``: one 5x5 max pool applied three times in a row (same output as SPP's 5, 9, 13)."""
    y = _conv(b, x, b.shape(x)[1] // 2, 1, 1, f"{name}_cv1")
    pools = [y]
    for i in range(3):
        pools.append(b.max_pool(pools[-1], 5, 1, 2, name=f"{name}_m_{i}"))
    return _conv(b, b.concat(pools, name=f"{name}_cat"), channels, 1, 1, f"{name}_cv2")


def _backbone(b: GraphBuilder, x: str) -> tuple[str, str, str]:
    """Layers 0-9 of the yaml; returns the P3 (layer 4), P4 (6) and P5 (9) outputs."""
    x = _conv(b, x, WIDTH[0], 6, 2, "model_0", padding=2)
    outs = []
    for stage, n in enumerate(DEPTH):
        layer = 1 + 2 * stage
        x = _conv(b, x, WIDTH[stage + 1], 3, 2, f"model_{layer}")
        x = _c3(b, x, WIDTH[stage + 1], n, True, f"model_{layer + 1}")
        outs.append(x)
    p5 = _sppf(b, outs[-1], WIDTH[4], "model_9")
    return outs[1], outs[2], p5


def _neck(b: GraphBuilder, p3: str, p4: str, p5: str) -> list[str]:
    """Layers 10-23: top-down (1x1 conv, x2 nearest resize, concat, C3) then bottom-up
    (3x3 stride-2 conv, concat with the top-down 1x1 conv's output, C3). Returns the
    stride 8, 16 and 32 maps (layers 17, 20, 23)."""
    lat5 = _conv(b, p5, WIDTH[3], 1, 1, "model_10")
    x = b.concat([b.resize(lat5, 2, name="model_11"), p4], name="model_12")
    x = _c3(b, x, WIDTH[3], 1, False, "model_13")
    lat4 = _conv(b, x, WIDTH[2], 1, 1, "model_14")
    x = b.concat([b.resize(lat4, 2, name="model_15"), p3], name="model_16")
    out3 = _c3(b, x, WIDTH[2], 1, False, "model_17")
    x = b.concat([_conv(b, out3, WIDTH[2], 3, 2, "model_18"), lat4], name="model_19")
    out4 = _c3(b, x, WIDTH[3], 1, False, "model_20")
    x = b.concat([_conv(b, out4, WIDTH[3], 3, 2, "model_21"), lat5], name="model_22")
    out5 = _c3(b, x, WIDTH[4], 1, False, "model_23")
    return [out3, out4, out5]
