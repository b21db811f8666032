"""Write output files atomically: a temp file in the same folder, then rename.

A failed or interrupted run never leaves a partial output file, and an old file
is replaced whole, never appended to. The file gets the mode a plain
``open(path, "w")`` would give it: an existing file's mode, else 0o666 less the
umask (``mkstemp`` alone makes it 0o600, which a team's next user cannot read).
When a command writes several outputs, :func:`atomic_write_all` writes them all or
replaces none. A folder that cannot be written is a :class:`GraphTunerError`
naming the path.

A symbolic link is followed: its target is replaced, and the link stays. An output that is
not a regular file (``/dev/null``, ``/dev/stdout``, a named pipe) is written through, as
``open(path, "w")`` would, after the regular files are in place: a rename would replace the
device itself (``solve -o /dev/null`` run as root once left ``/dev/null`` a regular file).
One of this process's open files named by descriptor (``/dev/stdout``, ``/dev/fd/N``,
``/proc/self/fd/N``) is written to that descriptor, even when it is a regular file (``solve
-o /dev/stdout >> notes.txt``): a rename would replace the user's file, and opening it again
would empty it.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

from graph_tuner.errors import GraphTunerError


def _umask() -> int:
    # There is no way to read the umask without setting it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The mode ``open(path, "w")`` would leave: the existing file's, else 0o666 & ~umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _unwritable(path: Path, e: OSError) -> GraphTunerError:
    why = "it is a folder" if path.is_dir() else (e.strerror or type(e).__name__)
    return GraphTunerError(f"{path}: cannot write the output ({why}); choose another path")


# A temp file this old was left by a writer killed before its rename, not one at work.
STALE_S = 3600.0


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new temp file in ``path``'s folder (created if missing), with the output's mode;
    temp files of ``path`` that killed writers left there are removed first."""
    if path.is_dir():
        raise GraphTunerError(f"{path}: is a folder; give a file path for the output")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob(f".{glob.escape(path.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > STALE_S:
                    old.unlink()
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _unwritable(path, e) from None
    os.fchmod(fd, _mode_for(path))
    return fd, tmp


def special_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` (its links followed) is there and neither a regular file nor a folder."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"/(?:dev|proc/(?:self|thread-self|(?P<pid>\d+)))/fd/(?P<fd>\d+)")


def own_descriptor(path: str | os.PathLike) -> int | None:
    """The descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/3``,
    ``/proc/self/fd/1``), if it names one that is open; else None.

    >>> own_descriptor("/dev/stdout"), own_descriptor("/proc/self/fd/2"), own_descriptor("plan.log")
    (1, 2, None)
    """
    text = os.path.normpath(os.fspath(path))
    fd = _STREAMS.get(text)
    m = _FD_PATH.fullmatch(text)
    if m and (m["pid"] is None or int(m["pid"]) == os.getpid()):
        fd = int(m["fd"])
    if fd is None:
        return None
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd


def _write_descriptor(fd: int, data: bytes) -> None:
    for stream in (sys.stdout, sys.stderr):  # what was printed before comes first
        with contextlib.suppress(Exception):
            stream.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    atomic_write_all({path: text})


def atomic_write_all(outputs: Mapping[str | os.PathLike, str | bytes]) -> None:
    """Write every ``path: content`` or none: all temp files are written and synced
    first, and only then renamed over their paths, so a failure while writing any of
    them (a full disk, a read-only folder) leaves every old file as it was.

    >>> atomic_write_all({"/tmp/_gt_a.txt": "a\\n", "/tmp/_gt_b.txt": b"b\\n"})
    >>> open("/tmp/_gt_a.txt").read() + open("/tmp/_gt_b.txt").read()
    'a\\nb\\n'
    """
    temps: list[tuple[str, Path]] = []
    through: list[tuple[Path, bytes]] = []  # devices and pipes: written, never renamed over
    current = Path(".")
    try:
        for path, content in outputs.items():
            current = Path(path)
            data = content.encode("utf-8") if isinstance(content, str) else content
            if special_file(current) or own_descriptor(current) is not None:
                through.append((current, data))  # by its own name: /dev/stdout's link resolves only so
                continue
            current = Path(os.path.realpath(current))  # a link's target, so that the link stays one
            fd, tmp = _temp_beside(current)
            temps.append((tmp, current))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for tmp, current in temps:
            os.replace(tmp, current)
        for current, data in through:
            if (fd := own_descriptor(current)) is not None:
                _write_descriptor(fd, data)
                continue
            with open(current, "wb") as f:
                f.write(data)
    except OSError as e:
        raise _unwritable(current, e) from None
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
