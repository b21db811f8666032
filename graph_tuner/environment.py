"""The environment variables graph-tuner reads, checked once where a run starts.

``GRAPH_TUNER_NUM_THREADS`` (threads the kernels use) and ``GRAPH_TUNER_CACHE_DIR``
(where layout-transform timings are cached) are read deep inside :mod:`kernels`,
which knows nothing of user errors; a bad value is caught here first and named, so
the user sees one line instead of a traceback mid-run.

>>> import os
>>> os.environ["GRAPH_TUNER_NUM_THREADS"] = "two"
>>> check_environment()
Traceback (most recent call last):
...
graph_tuner.errors.GraphTunerError: GRAPH_TUNER_NUM_THREADS='two' is not an integer; set a thread count from 1 to 1024, or unset it to use every core
>>> del os.environ["GRAPH_TUNER_NUM_THREADS"]
>>> check_environment()
"""
from __future__ import annotations

import os
from pathlib import Path

from graph_tuner.errors import GraphTunerError


def check_environment() -> None:
    """Raise :class:`GraphTunerError` naming the first environment variable with a bad value."""
    from kernels.threads import MAX_THREADS, num_threads

    try:
        num_threads()
    except ValueError as e:
        raise GraphTunerError(f"{e}; set a thread count from 1 to {MAX_THREADS}, or unset it to use "
                              "every core") from None
    cache = os.environ.get("GRAPH_TUNER_CACHE_DIR")
    if cache:
        # The first folder on the way that exists must be a folder we can write into.
        folder = Path(cache)
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise GraphTunerError(f"GRAPH_TUNER_CACHE_DIR={cache!r}: {folder} is a file, not a folder; "
                                  "point it at a folder (or unset it for ~/.cache/graph-tuner)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise GraphTunerError(f"GRAPH_TUNER_CACHE_DIR={cache!r}: {folder} is not writable; "
                                  "point it at a folder you can write (or unset it)")

