"""One writer per tuning log at a time: an advisory lock beside the log.

Two processes writing one log lose records: a ``tune --retime`` renames its rewritten log
over the file another ``tune`` still appends to, whose records then go to the unlinked old
file; and a record appended after another process's torn line is glued onto it, lost, and
leaves a bad line in mid-file (found in review, session 51). So every function that writes a
log holds :func:`log_lock` while it does, and a second writer is refused at once, naming the
process that holds it, before it measures anything.

The lock is ``flock`` on ``.NAME.lock`` in the log's folder (the log itself cannot carry it:
a rewrite replaces its inode). The kernel drops it when its holder dies, even by ``kill -9``, so
a killed run never leaves a log locked; the file is removed when the lock is let go. It is
re-entrant within a process (``tune`` holds it for the whole run, and the steps it calls
take it again). Readers (``solve``, ``run``) take no lock: they read whole lines. Where
``fcntl`` is missing (Windows), nothing is locked.

>>> import tempfile
>>> log = os.path.join(tempfile.mkdtemp(), "m.log")
>>> with log_lock(log):
...     with log_lock(log):  # the same process again
...         os.path.exists(lock_path(log))
True
>>> os.path.exists(lock_path(log))
False
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from graph_tuner.errors import GraphTunerError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

F = TypeVar("F", bound=Callable)
_held: dict[str, int] = {}  # a log's real path -> how deep this process holds its lock
_guard = threading.Lock()


def lock_path(log: str | os.PathLike) -> Path:
    """The lock file of ``log`` (its real path's folder, so that links to one log share it)."""
    real = Path(os.path.realpath(log))
    return real.parent / f".{real.name}.lock"


@contextlib.contextmanager
def log_lock(log: str | os.PathLike) -> Iterator[None]:
    """Hold ``log``'s write lock, or raise :class:`GraphTunerError` naming the process that does."""
    key = os.path.realpath(log)
    with _guard:
        if key in _held:
            _held[key] += 1
            fd = None
        else:
            fd = _take(Path(log), lock_path(log))
            _held[key] = 1
    try:
        yield
    finally:
        with _guard:
            _held[key] -= 1
            if not _held[key]:
                del _held[key]
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(lock_path(log))  # no one waits for it (LOCK_NB): a later writer makes a new one
                    os.close(fd)


def _take(log: Path, lock: Path) -> int | None:
    if fcntl is None:
        return None
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise GraphTunerError(f"{log}: cannot write the tuning log's lock {lock} ({e.strerror}); "
                              f"choose another -o") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise GraphTunerError(f"{log}: another graph-tuner process (pid {holder}) is writing this log; "
                              f"wait for it to end, or write to another -o") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def writes_log(arg: str) -> Callable[[F], F]:
    """Decorate a function that writes the log passed as its argument ``arg``: it runs holding
    :func:`log_lock` on it."""
    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def locked(*args, **kwargs):
            with log_lock(sig.bind(*args, **kwargs).arguments[arg]):
                return fn(*args, **kwargs)
        return locked  # type: ignore[return-value]
    return wrap
