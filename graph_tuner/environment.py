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
import tempfile

from graph_tuner.errors import GraphTunerError


def check_environment() -> None:
    """Raise :class:`GraphTunerError` naming the first environment variable with a bad value."""
    from kernels.threads import MAX_THREADS, num_threads

    try:
        num_threads()
    except ValueError as e:
        raise GraphTunerError(f"{e}; set a thread count from 1 to {MAX_THREADS}, or unset it to use "
                              "every core") from None
    if os.environ.get("GRAPH_TUNER_CACHE_DIR"):
        check_cache_dir()


def check_cache_dir() -> None:
    """Raise :class:`GraphTunerError` unless the caches' folder (layout-transform timings and
    compiled kernels; ``GRAPH_TUNER_CACHE_DIR``, else ``~/.cache/graph-tuner``) is, or can be made, a
    folder we can write into. Nothing is created: the first folder on the way that exists
    is tried with a temporary file (permission bits do not stop root; a read-only file
    system or sysfs does)."""
    from kernels.cache_folder import default_cache_dir

    folder = existing = default_cache_dir()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        reason = f"{existing} is a file, not a folder"
    else:
        try:
            with tempfile.TemporaryFile(dir=existing):
                return
        except OSError as e:
            reason = f"{existing}: {e.strerror}"
    env = os.environ.get("GRAPH_TUNER_CACHE_DIR")
    where = f"GRAPH_TUNER_CACHE_DIR={env}" if env else str(folder)
    raise GraphTunerError(f"{where}: cannot write the caches there (layout-transform timings, "
                          f"compiled kernels; {reason}); "
                          "set GRAPH_TUNER_CACHE_DIR to a writable folder")
