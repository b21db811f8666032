"""graph-tuner: exact graph-level schedule and layout selection for CNNs on x86 CPUs."""
from __future__ import annotations

__version__ = "0.1.0"

from graph_tuner.errors import GraphTunerError

__all__ = ["__version__", "GraphTuner", "GraphTunerError", "load_model", "tune"]


def __getattr__(name: str):
    # Lazy, so `graph-tuner --help` does not import the whole pipeline.
    if name == "GraphTuner":
        from graph_tuner.api import GraphTuner

        return GraphTuner
    if name == "tune":
        from graph_tuner.tune_api import tune

        return tune
    if name == "load_model":
        from graph_tuner.loading import load_model

        return load_model
    raise AttributeError(f"module 'graph_tuner' has no attribute {name!r}")
