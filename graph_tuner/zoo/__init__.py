"""Built-in model zoo: the networks AutoTVM users tuned, with no downloads.

Each family module reproduces a definition (TVM's ``relay.testing`` unless noted in
the module) with :class:`~graph_tuner.builder.GraphBuilder`. Models are built when
asked for, in milliseconds.

>>> "resnet-50" in MODEL_NAMES
True
>>> get_model("resnet-50", batch=4).op("data").shape
(4, 3, 224, 224)
"""
from __future__ import annotations

import importlib

from graph_tuner.errors import GraphTunerError
from graph_tuner.model import Model

# name -> (family module, builder function, keyword arguments)
_ZOO: dict[str, tuple[str, str, dict]] = {
    **{f"resnet-{n}": ("resnet", "resnet", {"num_layers": n}) for n in (18, 34, 50, 101, 152)},
    **{f"resnet-{n}-v1": ("resnet", "resnet_v1", {"num_layers": n}) for n in (18, 34, 50, 101, 152)},
    **{f"vgg-{n}": ("vgg", "vgg", {"num_layers": n}) for n in (11, 13, 16, 19)},
    "mobilenet": ("mobilenet", "mobilenet", {}),
    "mobilenet-v2": ("mobilenet", "mobilenet_v2", {}),
    "mobilenet-v3-large": ("mobilenet", "mobilenet_v3_large", {}),
    "efficientnet-b0": ("efficientnet", "efficientnet_b0", {}),
    "squeezenet-1.0": ("squeezenet", "squeezenet", {"version": "1.0"}),
    "squeezenet-1.1": ("squeezenet", "squeezenet", {"version": "1.1"}),
    "inception-v3": ("inception", "inception_v3", {}),
    **{f"densenet-{n}": ("densenet", "densenet", {"num_layers": n}) for n in (121, 161, 169, 201)},
    "ssd-resnet-50": ("ssd", "ssd_resnet50", {}),
    "resnext-50-32x4d": ("resnext", "resnext50_32x4d", {}),
    "regnet-y-800mf": ("regnet", "regnet_y_800mf", {}),
    "yolov5s": ("yolo", "yolov5s", {}),
    "centernet-dla-34": ("centernet", "centernet_dla34", {}),
}
MODEL_NAMES: tuple[str, ...] = tuple(_ZOO)


def get_model(name: str, batch: int = 1) -> Model:
    """Build zoo model ``name`` for ``batch`` images."""
    if name not in _ZOO:
        raise GraphTunerError(f"unknown model {name!r}; the zoo has: {', '.join(MODEL_NAMES)}")
    if not isinstance(batch, int) or batch < 1:
        raise GraphTunerError(f"batch must be a positive integer, got {batch!r}")
    family, func, kwargs = _ZOO[name]
    build = getattr(importlib.import_module(f"graph_tuner.zoo.{family}"), func)
    model = build(batch=batch, **kwargs)
    model.name = name
    return model
