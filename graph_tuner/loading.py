"""A model from its name: a zoo model (:mod:`graph_tuner.zoo`), an ONNX file
(:mod:`graph_tuner.onnx_import`), or a :class:`~graph_tuner.model.Model` as it is.

Its own module because both sources build on :mod:`graph_tuner.model`: the Model class
cannot also pick between them without importing its importers.
"""
from __future__ import annotations

import os
from pathlib import Path

from graph_tuner.errors import GraphTunerError
from graph_tuner.model import Model
from graph_tuner.onnx_import import load_onnx
from graph_tuner.pool_first import pool_before_pointwise
from graph_tuner.strides import hoist_strides
from graph_tuner.zoo import MODEL_NAMES, get_model

__all__ = ["MAX_BATCH", "load_given", "load_model", "rewritten"]


# Inference batches beyond this would need more memory than a CPU server has for activations.
MAX_BATCH = 1024


def rewritten(model: Model) -> Model:
    """``model`` with its strides moved up (:mod:`graph_tuner.strides`), then its average pools
    moved before the 1x1 convs they follow (:mod:`graph_tuner.pool_first`)."""
    return pool_before_pointwise(hoist_strides(model))


def load_model(spec: str | os.PathLike | Model, batch: int | None = None) -> Model:
    """A zoo model by name or an ONNX model by path, :func:`rewritten` (the same function with
    fewer FLOPs); or ``spec`` itself if it is a Model.

    >>> load_model("resnet-50").workload("stage1_unit3_conv2").strides
    (2, 2)
    """
    model = load_given(spec, batch)
    return model if isinstance(spec, Model) else rewritten(model)


def load_given(spec: str | os.PathLike | Model, batch: int | None = None) -> Model:
    """A zoo model by name, an ONNX model by path, or ``spec`` itself if it is a Model, as it is
    given (no rewrites: what a user would hand another runtime).

    ``batch`` defaults to 1 for zoo models and to the file's own batch (1 if
    dynamic) for ONNX files.

    >>> load_given("vgg-16", batch=2).op("data").shape
    (2, 3, 224, 224)
    >>> load_given(load_given("resnet-18"), batch=2)
    Traceback (most recent call last):
    ...
    graph_tuner.errors.GraphTunerError: model 'resnet-18' has batch 1, not 2: build it at batch 2 (load_model(name, batch=2)) or drop batch=
    >>> load_given("resnet-17")
    Traceback (most recent call last):
    ...
    graph_tuner.errors.GraphTunerError: unknown model 'resnet-17'; give an .onnx file or one of: resnet-18, ...
    """
    if isinstance(spec, Model):
        if batch is not None and batch != spec.batch:  # a Model's shapes are its own: never ignored silently
            raise GraphTunerError(f"model '{spec.name}' has batch {spec.batch}, not {batch}: build it at batch {batch} "
                                  f"(load_model(name, batch={batch})) or drop batch=")
        return spec
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH):
        raise GraphTunerError(f"batch must be a positive integer up to {MAX_BATCH}, got {batch!r}")
    text = os.fspath(spec)
    if text in MODEL_NAMES:
        return get_model(text, batch=batch or 1)
    if Path(text).is_dir():
        raise GraphTunerError(f"{text}: is a folder, not a model; give an .onnx file or a zoo name "
                              f"(graph-tuner models)")
    if text.lower().endswith(".onnx") or Path(text).is_file():
        return load_onnx(text, batch=batch)
    raise GraphTunerError(f"unknown model {text!r}; give an .onnx file or one of: {', '.join(MODEL_NAMES)}")
