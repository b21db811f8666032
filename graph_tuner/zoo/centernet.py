"""CenterNet (Zhou et al. 2019, "Objects as Points") on DLA-34 (Yu et al. 2018, "Deep Layer
Aggregation"): the ``DLASeg`` network of CenterNet's ``src/lib/models/networks/pose_dla_dcn.py``
(``get_pose_net(34, heads, head_conv=256, down_ratio=4)``), at 512x512.

* **DLA-34 backbone**: levels 1, 1, 1, 2, 2, 1 and channels 16 ... 512. A 7x7 conv at full
  resolution, two conv levels (the second with stride 2), then ``Tree`` levels of
  ``BasicBlock`` pairs (3x3 conv, BN, ReLU, 3x3 conv, BN, + residual, ReLU) whose ``Root``
  concatenates the children and mixes them with a 1x1 conv (BN, ReLU; no root residual).
  A stride-2 tree max-pools its input (2x2) for the residual and, at level roots, as a child;
  the residual is 1x1 projected (BN) where the channels change. A two-level tree projects
  its input too but never reads it (its first child projects its own): that dead conv is
  left out, as in the ONNX export.
* **DLAUp** (levels 2-5, strides 4-32) and the final **IDAUp** (levels 2-4): each step
  ``node(up(proj(x)) + previous)``, with ``proj`` and ``node`` 3x3 convs + BN + ReLU and
  ``up`` the depthwise transposed conv of CenterNet (``groups = channels``, kernel ``2f``,
  stride ``f``, padding ``f / 2``, no bias; ``f`` 2 or 4). ``proj`` and ``node`` are plain
  3x3 convs in place of DCNv2's deformable ones (whose offset convs and biases are so left
  out), as the network runs where there is no deformable conv (TVM users ran it so; the
  repository's ``dlav0.py`` is its own DCN-free variant, with another up-sampling).
* **Heads** on the stride-4, 64-channel map: ``hm`` (80 classes), ``wh`` (2) and ``reg`` (2),
  each a 3x3 conv to 256 channels (bias) + ReLU + a 1x1 conv (bias). The outputs are the three
  maps in that order; the heatmap stays logits (its sigmoid, the peak extraction and the box
  decoding are post-processing, left out as in :mod:`graph_tuner.zoo.ssd`).

59 conv layers (37 in the backbone, 16 in the up-sampling, 6 in the heads) and 8 transposed
convs; 18,994,436 parameters (BN's scale and shift included), 61.41 GFLOPs (2 per multiply-add;
a transposed conv's taps that land on an input pixel) at 512x512. No table gives this network
without DCNv2, so its parts are checked against the published figures:

* the backbone: DLA-34 as the classifier it was published as (plus global pooling and the 1x1
  conv fc to 1000 classes, :func:`dla34_levels`) has 15,742,104 parameters and 3.060 G
  multiply-adds at 224x224 here; timm's model card lists 15.74 M and 3,070,105,576 "FLOPs"
  (multiply-adds: its counter's, 0.3% above the convs alone), PaddleClas 15.8 M and 3.1 G;
* the whole detector with the other up-sampling the repository has: ``neck="dlav0"`` builds
  CenterNet's ``dlav0.py`` DLASeg (1x1 projections, ``node(concat(x, layer))``, no final
  IDAUp: 55 convs, 6 transposed). OpenVINO's Open Model Zoo lists it as
  ``ctdet_coco_dlav0_512``, 62.211 GFLOPs and 17.911 M parameters; here 17,910,596 with each
  BN folded into its conv (as the converted model has them) and 62.210 GFLOPs counting a
  transposed conv as every output pixel times all kH x kW taps, zeros of the inserted rows
  included (62.10 counting only real taps, as :meth:`Model.flops` does).

>>> m = centernet_dla34(image_size=128)
>>> len(m.convs()), sum(op.kind == "conv_transpose" for op in m.ops), [m.op(o).shape for o in m.outputs]
(59, 8, [(1, 80, 32, 32), (1, 2, 32, 32), (1, 2, 32, 32)])
"""
from __future__ import annotations

from graph_tuner.builder import GraphBuilder
from graph_tuner.model import Model

LEVELS = (1, 1, 1, 2, 2, 1)
CHANNELS = (16, 32, 64, 128, 256, 512)
HEADS = (("hm", 80), ("wh", 2), ("reg", 2))
HEAD_CONV = 256
FIRST_LEVEL = 2  # log2 of the down ratio 4: the heads see stride 4
LAST_LEVEL = 5


def centernet_dla34(batch: int = 1, image_size: int = 512, neck: str = "dla") -> Model:
    """CenterNet DLA-34 at ``image_size`` (a multiple of 32); outputs ``hm``, ``wh``, ``reg``.
    ``neck="dlav0"``: the repository's ``dlav0.py`` up-sampling instead (for its published size)."""
    if image_size % 32 or image_size < 32:
        raise ValueError(f"centernet-dla-34 needs an image size that is a multiple of 32, got {image_size}")
    if neck not in ("dla", "dlav0"):
        raise ValueError(f"neck must be 'dla' or 'dlav0', got {neck!r}")
    b = GraphBuilder("centernet-dla-34")
    levels = dla34_levels(b, b.input((batch, 3, image_size, image_size)))
    if neck == "dla":
        ups = _dla_up(b, levels)
        y = [ups[i] for i in range(LAST_LEVEL - FIRST_LEVEL)]
        _ida_up(b, y, 0, len(y), CHANNELS[FIRST_LEVEL], [2 ** i for i in range(len(y))], "ida_up")
        feature = y[-1]
    else:
        feature = _dlav0_up(b, levels[FIRST_LEVEL:])
    outs = []
    for head, classes in HEADS:
        h = b.relu(b.conv(feature, HEAD_CONV, 3, padding=1, bias=True, name=f"{head}_0"), name=f"{head}_1")
        outs.append(b.conv(h, classes, 1, bias=True, name=f"{head}_2"))
    return b.build(*outs)


def _cbr(b: GraphBuilder, x: str, channels: int, kernel: int, name: str, stride: int = 1, relu: bool = True) -> str:
    """Conv (no bias, 'same' padding), BN, and ReLU if ``relu``."""
    y = b.batch_norm(b.conv(x, channels, kernel, stride, kernel // 2, name=name), name=f"{name}_bn")
    return b.relu(y, name=f"{name}_relu") if relu else y


def dla34_levels(b: GraphBuilder, x: str) -> list[str]:
    """DLA-34's six levels (strides 1, 2, 4, 8, 16, 32) on image ``x``, added to ``b``.

    >>> b = GraphBuilder("dla34")
    >>> [b.shape(y) for y in dla34_levels(b, b.input((1, 3, 64, 64)))][-2:]
    [(1, 256, 4, 4), (1, 512, 2, 2)]
    """
    x = _cbr(b, x, CHANNELS[0], 7, "base_base_layer_0")
    out = [_cbr(b, x, CHANNELS[0], 3, "base_level0_0")]
    out.append(_cbr(b, out[-1], CHANNELS[1], 3, "base_level1_0", stride=2))
    for level in range(2, 6):
        out.append(_tree(b, out[-1], LEVELS[level], CHANNELS[level], 2, level > 2, f"base_level{level}"))
    return out


def _basic_block(b: GraphBuilder, x: str, residual: str, planes: int, stride: int, name: str) -> str:
    y = _cbr(b, x, planes, 3, f"{name}_conv1", stride)
    y = _cbr(b, y, planes, 3, f"{name}_conv2", relu=False)
    return b.relu(b.add(y, residual, name=f"{name}_add"), name=f"{name}_relu")


def _tree(b: GraphBuilder, x: str, levels: int, channels: int, stride: int, level_root: bool, name: str,
          children: list[str] | None = None) -> str:
    """``Tree.forward``: children first (the pooled input at a level root), then the two subtrees;
    a one-level tree ends in its ``Root`` over ``[x2, x1, *children]``."""
    children = [] if children is None else children
    bottom = b.max_pool(x, stride, stride, name=f"{name}_downsample") if stride > 1 else x
    if level_root:
        children.append(bottom)
    if levels == 1:
        residual = bottom
        if b.shape(x)[1] != channels:
            residual = _cbr(b, bottom, channels, 1, f"{name}_project_0", relu=False)
        x1 = _basic_block(b, x, residual, channels, stride, f"{name}_tree1")
        x2 = _basic_block(b, x1, x1, channels, 1, f"{name}_tree2")
        return _cbr(b, b.concat([x2, x1] + children, name=f"{name}_root_cat"), channels, 1, f"{name}_root_conv")
    x1 = _tree(b, x, levels - 1, channels, stride, False, f"{name}_tree1")
    children.append(x1)
    return _tree(b, x1, levels - 1, channels, 1, False, f"{name}_tree2", children)


def _ida_up(b: GraphBuilder, layers: list[str], startp: int, endp: int, out: int, up_f: list[int],
            name: str) -> None:
    """``IDAUp.forward``: ``layers[i] = node(up(proj(layers[i])) + layers[i - 1])`` in place."""
    for i in range(startp + 1, endp):
        k, f = i - startp, up_f[i - startp]
        p = _cbr(b, layers[i], out, 3, f"{name}_proj_{k}_conv")
        u = b.conv_transpose(p, out, 2 * f, f, f // 2, groups=out, name=f"{name}_up_{k}")
        layers[i] = _cbr(b, b.add(u, layers[i - 1], name=f"{name}_add_{k}"), out, 3, f"{name}_node_{k}_conv")


def _dla_up(b: GraphBuilder, levels: list[str]) -> list[str]:
    """``DLAUp``: IDA steps from the deepest pair of levels outwards; the stride-4 ... 32 maps."""
    channels = list(CHANNELS[FIRST_LEVEL:])
    scales = [2 ** i for i in range(len(channels))]
    steps = []
    for i in range(len(channels) - 1):  # the module's __init__: each IDAUp's factors
        j = -i - 2
        steps.append((channels[j], [s // scales[j] for s in scales[j:]]))
        scales[j + 1:] = [scales[j]] * len(scales[j + 1:])
    layers, out = list(levels), [levels[-1]]
    for i, (o, up_f) in enumerate(steps):
        _ida_up(b, layers, len(layers) - i - 2, len(layers), o, up_f, f"dla_up_ida_{i}")
        out.insert(0, layers[-1])
    return out


def _dlav0_up(b: GraphBuilder, levels: list[str]) -> str:
    """``dlav0.py``'s ``DLAUp``: each IDA projects (1x1 conv, BN, ReLU where the channels differ),
    up-samples, and chains ``node(concat(x, layer))`` (3x3 conv, BN, ReLU); the stride-4 map."""
    channels = list(CHANNELS[FIRST_LEVEL:])
    in_channels, scales = list(channels), [2 ** i for i in range(len(channels))]
    layers = list(levels)
    for i in range(len(channels) - 1):
        j, o = -i - 2, channels[-i - 2]
        part, factors = layers[j:], [s // scales[j] for s in scales[j:]]
        for k, (x, c, f) in enumerate(zip(part, in_channels[j:], factors)):
            x = x if c == o else _cbr(b, x, o, 1, f"dla_up_ida_{i}_proj_{k}")
            part[k] = x if f == 1 else b.conv_transpose(x, o, 2 * f, f, f // 2, groups=o, name=f"dla_up_ida_{i}_up_{k}")
        x, ys = part[0], []
        for k in range(1, len(part)):
            x = _cbr(b, b.concat([x, part[k]], name=f"dla_up_ida_{i}_cat_{k}"), o, 3, f"dla_up_ida_{i}_node_{k}")
            ys.append(x)
        layers[j + 1:] = ys
        scales[j + 1:] = [scales[j]] * len(scales[j + 1:])
        in_channels[j + 1:] = [o] * len(in_channels[j + 1:])
    return x
