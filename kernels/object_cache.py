"""Compiled kernels kept on disk, so a later process links them instead of compiling again.

LLVM takes 50-250 ms a kernel (:mod:`kernels.jit`); a plan of Inception-v3 is ~110 kernels,
and every ``graph-tuner run``, ``bench``, ``solve --calibrate`` and ``tune --retime`` of it
compiled them all again. Here the object code of an IR text is a file named by a SHA-256 of
everything it depends on: the text, the CPU it is generated for (LLVM's name and feature
string), the optimisation pipeline's settings and the llvmlite and LLVM versions
(:func:`key`). A text that names addresses of one process (``compile_ir(..., cache=False)``)
is never stored.

A file is ``MAGIC``, the SHA-256 of the object code, then the code: a file that was cut short
or changed is not linked (LLVM would crash on it, not raise) but read as a miss, and replaced
by the next compile. Files are written under a temp name and renamed, so concurrent
processes (a Dask cluster's workers on one machine) see whole files or none. The folder is
``objects/`` in the transform cache's folder (``$GRAPH_TUNER_CACHE_DIR`` or
``~/.cache/graph-tuner``); past :data:`MAX_BYTES` the least recently used files are removed
(checked at a process's first store, and again after each fifth of the cap it writes).
A folder that cannot be written costs the cache, not the run (one warning). The files are
code that runs, so one is linked only if no other user can have written it: the file and its two
folders must be this user's and not writable by all (:func:`_trusted`; group write follows the
umask, as the folders' other files do); else it is compiled, with one warning.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> store("text", b"code", "p", folder=folder), load("text", "p", folder=folder), load("other", "p", folder=folder)
(True, b'code', None)
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
import warnings
from pathlib import Path

from kernels.cache_folder import default_cache_dir

MAGIC = b"graph-tuner object v1\n"
MAX_BYTES = 512 << 20  # the folder's size past which the least recently used files go
STALE_TEMP_S = 3600.0  # a temp file this old was left by a writer killed before its rename

DEFAULT_FOLDER: str | None = None  # None: objects/ in the transform cache's folder (tests set their own)
_lock = threading.Lock()
_broken = False  # a store failed: this process stops trying (and said so once)
_distrusted: set[str] = set()  # folders whose files another user could have written (said so once each)
# Folder -> bytes this process has stored there since it last checked the folder's size (absent:
# never checked). A long process (a cluster worker tuning model after model) checks again each
# time it has written a fifth of the cap, so the folder stays near MAX_BYTES, not MAX_BYTES plus
# all it ever wrote.
_written: dict[str, int] = {}


def key(ir_text: str, pipeline: str) -> str:
    """The file name of ``ir_text``'s object code made by ``pipeline`` (everything else the code
    depends on: :func:`kernels.jit.pipeline_description`).

    >>> key("x", "a") == key("x", "b")
    False
    """
    h = hashlib.sha256(pipeline.encode())
    h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


def folder_path(folder: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``folder``, else ``objects/`` in the transform cache's folder."""
    if folder is not None or DEFAULT_FOLDER is not None:
        return Path(folder if folder is not None else DEFAULT_FOLDER)
    return default_cache_dir() / "objects"  # RuntimeError without a home folder: no cache (load, store)


def _path(ir_text: str, pipeline: str, folder: str | os.PathLike | None) -> Path:
    """Where ``ir_text``'s object code made by ``pipeline`` is kept."""
    k = key(ir_text, pipeline)
    return folder_path(folder) / k[:2] / f"{k}.o"


def load(ir_text: str, pipeline: str, *, folder: str | os.PathLike | None = None) -> bytes | None:
    """The stored object code of ``ir_text`` made by ``pipeline``, or None (none stored, a
    damaged file, or no folder: no home folder to put it in)."""
    try:
        path = _path(ir_text, pipeline, folder)
        with open(path, "rb") as f:
            if not _trusted(os.fstat(f.fileno()), path):
                return None
            data = f.read()
    except (OSError, RuntimeError):
        return None
    head = len(MAGIC) + 32
    if data[:len(MAGIC)] != MAGIC or hashlib.sha256(data[head:]).digest() != data[len(MAGIC):head]:
        return None  # cut short or changed: compiled again and replaced
    try:
        os.utime(path)  # recently used: kept when the folder is pruned
    except OSError:
        pass
    return data[head:]


def _trusted(file: os.stat_result, path: Path) -> bool:
    """Whether no other user can have written ``path`` (whose stat is ``file``): it, its folder
    and the cache folder are owned by this user and not writable by all. A planted file would
    be run as this user's code, checksum or not. Warns once a folder when it is not."""
    uid = getattr(os, "getuid", lambda: None)()
    if uid is None:  # no POSIX owners to check (Windows)
        return True
    try:
        stats = (file, os.stat(path.parent), os.stat(path.parent.parent))
    except OSError:
        return False
    if all(st.st_uid == uid and not st.st_mode & 0o002 for st in stats):
        return True
    root = str(path.parent.parent)
    with _lock:
        first = root not in _distrusted
        _distrusted.add(root)
    if first:
        warnings.warn(f"the compiled-kernel cache {root} holds files or folders another user could have "
                      "written (not owned by this user, or writable by all); its kernels are compiled, "
                      "not linked (make the folder this user's and not writable by others, or set "
                      "GRAPH_TUNER_CACHE_DIR to a folder of your own)", stacklevel=3)
    return False


def store(ir_text: str, code: bytes, pipeline: str, *, folder: str | os.PathLike | None = None) -> bool:
    """Keep ``code`` as ``ir_text``'s object code made by ``pipeline``; False if it could not
    be written (then this process stores nothing more, in any folder, and warns once)."""
    global _broken
    if _broken:
        return False
    tmp = None
    try:
        path = _path(ir_text, pipeline, folder)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        # os.open's mode passes through the umask, as a plain open(path, "w") would; a name
        # planted there (a link) is refused, not followed.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:  # writes it all, or raises (a full disk)
                f.write(MAGIC + hashlib.sha256(code).digest() + code)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        with _lock:
            if not _broken:
                _broken = True
                warnings.warn(f"cannot write the compiled-kernel cache ({getattr(e, 'strerror', None) or e}); "
                              "kernels are compiled in every process (set GRAPH_TUNER_CACHE_DIR to a "
                              "writable folder)", stacklevel=2)
        if tmp is not None:
            _unlink(str(tmp))
        return False
    root = str(folder_path(folder))
    with _lock:  # first store of the process, or a fifth of the cap written since the last check
        written = _written.get(root)
        due = written is None or written + len(code) > MAX_BYTES // 5
        _written[root] = 0 if due else written + len(code)
    if due:  # the folder's size, and the temp files of killed writers
        try:
            prune(root)
        except OSError:  # a folder we cannot list: the cache still works
            pass
    return True


def prune(folder: str | os.PathLike | None = None, max_bytes: int | None = None) -> int:
    """Remove temp files older than an hour and, if the folder holds more than ``max_bytes``
    (default :data:`MAX_BYTES`), the least recently used files until it holds a fifth less;
    returns how many files were removed.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = [store(str(i), bytes(100), "p", folder=folder) for i in range(5)]
    >>> prune(folder, max_bytes=700), sum(load(str(i), "p", folder=folder) is not None for i in range(5))
    (2, 3)
    """
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    files, total, removed, now = [], 0, 0, time.time()
    for sub in folder_path(folder).glob("??"):
        try:
            entries = list(os.scandir(sub))
        except OSError:  # not a folder, or not ours to read
            continue
        for entry in entries:
            try:
                st = entry.stat()
            except OSError:
                continue
            if entry.name.endswith(".tmp"):
                if now - st.st_mtime > STALE_TEMP_S:
                    removed += _unlink(entry.path)
                continue
            files.append((st.st_mtime, st.st_size, entry.path))
            total += st.st_size
    if total <= max_bytes:
        return removed
    for _, size, path in sorted(files):
        if total <= max_bytes * 4 // 5:
            break
        if _unlink(path):
            removed += 1
            total -= size
    return removed


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:  # gone meanwhile (another process pruned it), or not ours
        return False
