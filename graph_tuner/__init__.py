"""graph-tuner: exact graph-level schedule and layout selection for CNNs on x86 CPUs."""
from __future__ import annotations

__version__ = "0.1.0"

from graph_tuner.errors import GraphTunerError

__all__ = ["__version__", "GraphTunerError"]
