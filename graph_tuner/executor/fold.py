"""Folding batch norms and bias adds into conv weights, and affine chains into scale/shift.

Which ops a conv absorbs is decided by :mod:`graph_tuner.fusion`; this module computes
the folded arrays the compiled program binds.
"""
from __future__ import annotations

import numpy as np

from graph_tuner.fusion import FOLDABLE, Step, affine_chain
from graph_tuner.model import Model, Op


def op_affine(op: Op, q: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A batch norm or bias add as per-channel float64 ``(scale, shift)``: ``x * scale + shift``.

    >>> bn = Op("bn", "batch_norm", ["x"], {"epsilon": 0.0})
    >>> [float(v[0]) for v in op_affine(bn, {k: np.array([v]) for k, v in dict(gamma=3, beta=1, mean=4, var=0.25).items()})]
    [6.0, -23.0]
    """
    if op.kind == "batch_norm":
        k = np.asarray(q["gamma"], np.float64) / np.sqrt(np.asarray(q["var"], np.float64) + op.attrs["epsilon"])
        return k, np.asarray(q["beta"], np.float64) - k * np.asarray(q["mean"], np.float64)
    if op.kind == "bias_add":
        bias = np.asarray(q["bias"], np.float64)
        return np.ones_like(bias), bias
    raise ValueError(f"op '{op.name}' ({op.kind}) is not a per-channel affine")


def fold_affine(model: Model, s: Step, params: dict[str, dict[str, np.ndarray]]
                ) -> tuple[np.ndarray, np.ndarray, str | tuple | None]:
    """An affine chain (see :func:`graph_tuner.fusion.plan_steps`) as per-channel ``(scale, shift, activation)``:
    ``act(x * scale + shift)``.

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t"); x = b.input((1, 1, 2, 2))
    >>> m = b.build(b.relu(b.batch_norm(x, 0.0, name="bn"), name="r"))
    >>> p = {"bn": {k: np.array([v], np.float32) for k, v in dict(gamma=3, beta=1, mean=4, var=0.25).items()}}
    >>> scale, shift, act = fold_affine(m, Step("elementwise", ["bn", "r"], "r", ["x"]), p)
    >>> float(scale[0]), float(shift[0]), act  # 3/0.5 and 1 - 4 * 6
    (6.0, -23.0, 'relu')
    """
    act = affine_chain(model, s) or None
    channels = model.op(s.ops[0]).shape[1]
    scale, shift = np.ones(channels), np.zeros(channels)
    for name in s.ops[:-1] if act else s.ops:
        k, t = op_affine(model.op(name), params.get(name, {}))
        scale, shift = scale * k, shift * k + t
    return scale.astype(np.float32), shift.astype(np.float32), act


def fold_into_conv(model: Model, step: Step, params: dict[str, dict[str, np.ndarray]]
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """The conv group's weight and bias with its batch norms and bias adds folded in.

    ``bn(conv(x, w) + b) = conv(x, w * s) + (b - mean) * s + beta`` with
    ``s = gamma / sqrt(var + eps)`` per output channel. Returns float32 arrays; the
    bias is None when there is none to add.

    >>> from graph_tuner.builder import GraphBuilder
    >>> b = GraphBuilder("t"); x = b.input((1, 1, 2, 2))
    >>> m = b.build(b.batch_norm(b.conv(x, 1, 1, name="c"), 0.0, name="bn"))
    >>> p = {"c": {"weight": np.full((1, 1, 1, 1), 2, np.float32)},
    ...      "bn": {k: np.array([v], np.float32) for k, v in
    ...             dict(gamma=3, beta=1, mean=4, var=0.25).items()}}
    >>> from graph_tuner.fusion import plan_steps
    >>> w, bias = fold_into_conv(m, plan_steps(m)[0], p)
    >>> float(w.ravel()[0]), float(bias[0])  # 2 * 3/0.5 and (0 - 4) * 6 + 1
    (12.0, -23.0)
    """
    conv = model.op(step.ops[0])
    p = params.get(conv.name, {})
    w = np.asarray(p["weight"], np.float64)
    bias = np.asarray(p["bias"], np.float64) if "bias" in p else None
    for name in step.ops[1:]:
        op = model.op(name)
        if op.kind not in FOLDABLE:
            break  # activation / residual add: epilogue
        s, t = op_affine(op, params.get(name, {}))
        w = w * s.reshape(-1, 1, 1, 1)
        bias = (np.zeros(len(s)) if bias is None else bias) * s + t
    return w.astype(np.float32), None if bias is None else bias.astype(np.float32)
