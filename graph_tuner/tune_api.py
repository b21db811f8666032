"""The Python API of ``graph-tuner tune``: here or on a Dask cluster.

Above both :mod:`graph_tuner.tuning` (one machine) and :mod:`graph_tuner.cluster` (many),
which use :class:`graph_tuner.api.GraphTuner` for the transforms a plan needs.
"""
from __future__ import annotations

import os

from graph_tuner.environment import check_environment
from graph_tuner.loading import load_model
from graph_tuner.model import Model


def tune(
    model: str | os.PathLike | Model,
    output: str | os.PathLike,
    *,
    trials: int | None = None,
    time_budget: float | None = None,
    cluster=None,
    batch: int | None = None,
    progress: bool = True,
    calibrate: bool = True,
    print_fn=lambda s: None,
    **kwargs,
):
    """``graph-tuner tune``: measure ``model``'s conv kernels and the layout transforms a
    plan can need into the log ``output`` (appended; a rerun resumes).

    On this machine (:func:`graph_tuner.tuning.tune_model`; returns the workloads'
    summaries), or with ``cluster`` (a Dask scheduler address or a ``distributed.Client``)
    on its measuring workers, this process writing the log
    (:func:`graph_tuner.cluster.tune_on_cluster`; returns a :class:`~graph_tuner.cluster.ClusterResult`;
    ``output`` ending in ``/`` then means one log per CPU, ``output/<cpu>/MODEL.log``).
    Other keywords (``measure``, ``measure_transform``, ``confirm``, ``top_k``) go to them.
    ``calibrate``: here, then the plan's in-network ratios (:func:`graph_tuner.tuning.calibrate_log`);
    a cluster's workers time kernels only, so a log tuned there gets them from a later ``tune``
    on a machine of its CPU.
    """
    from graph_tuner.tuning import DEFAULT_TRIALS, tune_model

    check_environment()
    trials = DEFAULT_TRIALS if trials is None else trials
    common = dict(trials=trials, time_budget=time_budget, progress=progress, print_fn=print_fn, **kwargs)
    if cluster is not None:
        from graph_tuner.cluster import tune_on_cluster

        return tune_on_cluster(model, output, cluster, batch=batch, **common)
    return tune_model(load_model(model, batch=batch), output, calibrate=calibrate, **common)
