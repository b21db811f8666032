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
``~/.cache/graph-tuner``); past :data:`MAX_BYTES` the least recently used files are removed.
A folder that cannot be written costs the cache, not the run (one warning).

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> store("text", b"code", folder=folder), load("text", folder=folder), load("other", folder=folder)
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
_pipeline = ""  # what else the object code depends on: kernels.jit sets it (set_pipeline)
_lock = threading.Lock()
_broken = False  # a store failed: this process stops trying (and said so once)
_pruned: set[str] = set()  # folders whose size this process has checked


def set_pipeline(description: str) -> None:
    """Name what the object code depends on besides the IR text (the target CPU, the passes'
    settings, the LLVM version): part of every :func:`key`. :mod:`kernels.jit` calls it once,
    from the very values it compiles with."""
    global _pipeline
    _pipeline = description


def key(ir_text: str) -> str:
    """The file name of ``ir_text``'s object code under the current pipeline.

    >>> set_pipeline("a"); k = key("x"); set_pipeline("b"); k == key("x")
    False
    """
    h = hashlib.sha256(_pipeline.encode())
    h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


def folder_path(folder: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``folder``, else ``objects/`` in the transform cache's folder."""
    if folder is not None or DEFAULT_FOLDER is not None:
        return Path(folder if folder is not None else DEFAULT_FOLDER)
    return default_cache_dir() / "objects"


def _path(ir_text: str, folder) -> Path:
    k = key(ir_text)
    return folder_path(folder) / k[:2] / f"{k}.o"


def load(ir_text: str, *, folder: str | os.PathLike | None = None) -> bytes | None:
    """The stored object code of ``ir_text``, or None (none stored, or a damaged file)."""
    path = _path(ir_text, folder)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + 32
    if data[:len(MAGIC)] != MAGIC or hashlib.sha256(data[head:]).digest() != data[len(MAGIC):head]:
        return None  # cut short or changed: compiled again and replaced
    try:
        os.utime(path)  # recently used: kept when the folder is pruned
    except OSError:
        pass
    return data[head:]


def store(ir_text: str, code: bytes, *, folder: str | os.PathLike | None = None) -> bool:
    """Keep ``code`` as ``ir_text``'s object code; False if it could not be written (then
    this process stores nothing more, and warns once)."""
    global _broken
    if _broken:
        return False
    path = _path(ir_text, folder)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # os.open's mode passes through the umask, as a plain open(path, "w") would.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.write(fd, MAGIC + hashlib.sha256(code).digest() + code)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        with _lock:
            if not _broken:
                _broken = True
                warnings.warn(f"{path.parent.parent}: cannot write the compiled-kernel cache ({e.strerror}); "
                              "kernels are compiled in every process (set GRAPH_TUNER_CACHE_DIR to a "
                              "writable folder)", stacklevel=2)
        try:
            tmp.unlink()
        except OSError:
            pass
        return False
    root = folder_path(folder)
    with _lock:
        first = str(root) not in _pruned
        _pruned.add(str(root))
    if first:  # once a process: the folder's size, and the temp files of killed writers
        prune(root)
    return True


def prune(folder: str | os.PathLike | None = None, max_bytes: int | None = None) -> int:
    """Remove the least recently used files until the folder holds at most ``max_bytes``
    (default :data:`MAX_BYTES`) less a fifth, and temp files older than an hour, if it holds
    more; returns how many files were removed.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = [store(str(i), bytes(100), folder=folder) for i in range(5)]
    >>> prune(folder, max_bytes=700), sum(load(str(i), folder=folder) is not None for i in range(5))
    (2, 3)
    """
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    files, total, removed, now = [], 0, 0, time.time()
    for sub in folder_path(folder).glob("??"):
        for entry in os.scandir(sub):
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
