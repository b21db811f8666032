"""Where this machine's caches live: ``$GRAPH_TUNER_CACHE_DIR``, else ``~/.cache/graph-tuner``
(the layout-transform timings, :mod:`kernels.transform_bench`; the compiled kernels,
:mod:`kernels.object_cache`, in its ``objects/``)."""
from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The cache folder: ``$GRAPH_TUNER_CACHE_DIR``, else ``~/.cache/graph-tuner``.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GRAPH_TUNER_CACHE_DIR": "/tmp/c"}):
    ...     str(default_cache_dir())
    '/tmp/c'
    """
    return Path(os.environ.get("GRAPH_TUNER_CACHE_DIR") or Path.home() / ".cache" / "graph-tuner")
