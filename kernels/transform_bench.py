"""Layout-transform timings, measured once per CPU and cached on disk.

A key is ``(nchw_shape, src_block, dst_block)``; block 1 is plain NCHW (the same
memory order as NCHW1c). Equal blocks cost nothing and are never measured. Each
transform is compiled for its shape (the codegen bakes shapes into the kernel; a
compile takes ~0.05-0.2 s) and timed with :func:`kernels.timing.measure` on
random-filled buffers, with cold caches and a warm source (:func:`time_transform`).

The cache is one JSON Lines file per CPU and timing protocol -- ``transforms-<protocol>-<cpu
name>-<hash of its LLVM feature string>.jsonl`` in ``$GRAPH_TUNER_CACHE_DIR`` or
``~/.cache/graph-tuner`` -- one ``[shape, src, dst, seconds]`` line per timing, appended
(one ``write`` in append mode) the moment it is measured: a killed run keeps what it
measured and leaves at most a partial last line, concurrent runs add whole lines, and
no temp file is ever made (the whole-file rewrites this replaced left a ``.*.tmp``
behind at every kill; :func:`sweep_stale_temps` removes those). Lines that are not
timings are skipped: a corrupt cache is only a cache. The ``.json`` file of that
rewriting version is still read.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> key = ((1, 8, 4, 4), 1, 4)
>>> t = measure_transforms([key, ((1, 8, 4, 4), 4, 4)], progress=False, cache_dir=folder)
>>> t[key] > 0, t[((1, 8, 4, 4), 4, 4)]
(True, 0.0)
>>> load_cached([key, ((1, 8, 4, 4), 8, 4)], cache_dir=folder) == {key: t[key]}
True
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Iterable

from kernels.cache_folder import default_cache_dir

__all__ = ["Key", "cache_path", "default_cache_dir", "load_cached", "measure_transforms", "normalize_key",
           "sweep_stale_temps", "time_transform"]

Key = tuple[tuple[int, int, int, int], int, int]
# Bumped whenever time_transform measures differently or the kernels it times change:
# timings of another protocol are not comparable, so they live in another file. v2: cold caches, warm source, awake pool;
# v3: no flush, warm source, destination from memory (cold_arrays); v4: v3 with session 24's
# kernels (vector runs between blocks, register tiles into NCHW: 0.21-0.87x the time); v5: v4 on
# buffers that start on a cache line (kernels.timing.random_array, session 30).
PROTOCOL = "v5"


def normalize_key(key) -> Key:
    """``(shape, src, dst)`` with ints, a tuple shape and block None/0 read as 1 (NCHW).

    >>> normalize_key(([1, 64, 56, 56], None, 16))
    ((1, 64, 56, 56), 1, 16)
    """
    shape, src, dst = key
    shape = tuple(int(x) for x in shape)
    if len(shape) != 4:
        raise ValueError(f"transform shape must be NCHW (4-d), got {shape}")
    src, dst = int(src or 1), int(dst or 1)
    for b in (src, dst):
        if b < 1 or shape[1] % b:
            raise ValueError(f"block {b} does not divide the {shape[1]} channels of {shape}")
    return shape, src, dst  # type: ignore[return-value]


def cache_path(cache_dir: str | os.PathLike | None = None, cpu=None) -> Path:
    """The cache file of ``cpu`` (a :class:`kernels.jit.HostCPU`; default: this host).

    >>> from kernels.jit import HostCPU
    >>> cache_path("/c", HostCPU("skylake-avx512", "+avx512f,+fma", 16)).name
    'transforms-v5-skylake-avx512-0a00853d8370.jsonl'
    """
    if cpu is None:
        from kernels.jit import host_cpu

        cpu = host_cpu()
    folder = Path(cache_dir or default_cache_dir())
    digest = hashlib.sha256(cpu.features.encode()).hexdigest()[:12]
    return folder / f"transforms-{PROTOCOL}-{cpu.name}-{digest}.jsonl"


def _read(path: Path) -> dict[Key, float]:
    """The timings in a cache file and in the ``.json`` the rewriting version kept beside
    it (one ``{"transforms": [...]}`` document); later lines win. Anything that is not a
    timing is skipped, an unreadable file is an empty cache: a cache is only a cache."""
    out: dict[Key, float] = {}
    for file in (path.with_suffix(".json"), path):
        try:
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                item = json.loads(line)
                entries = item["transforms"] if isinstance(item, dict) else [item]
            except (ValueError, KeyError, TypeError):
                continue
            for entry in entries if isinstance(entries, list) else []:
                try:
                    shape, a, b, s = entry
                    key, seconds = normalize_key((shape, a, b)), float(s)
                except (ValueError, TypeError):
                    continue
                if seconds > 0 and math.isfinite(seconds):
                    out[key] = seconds
    return out


def _append(path: Path, key: Key, seconds: float) -> None:
    """Add one timing to the cache file as one line, in one ``write`` in append mode, so
    lines of concurrent runs do not mix. After a partial last line (a killed writer) it
    starts a new line, so only that partial line is lost."""
    shape, a, b = key
    line = json.dumps([list(shape), a, b, seconds]) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def sweep_stale_temps(folder: str | os.PathLike, max_age_s: float = 3600.0) -> int:
    """Remove the ``.transforms-*.tmp`` files that runs killed mid-rewrite left in the cache
    folder (versions before the append-only cache rewrote it through a temp file after
    every timing). Only those untouched for ``max_age_s``: a live writer held its temp file
    for milliseconds. Returns how many were removed."""
    removed = 0
    now = time.time()
    for tmp in Path(folder).glob(".transforms-*.tmp"):
        try:
            if now - tmp.stat().st_mtime > max_age_s:
                tmp.unlink()
                removed += 1
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def load_cached(keys: Iterable, *, cache_dir: str | os.PathLike | None = None) -> dict[Key, float]:
    """The cached timings (seconds) of those ``keys`` that have one; identities are 0. Measures nothing."""
    cached = _read(cache_path(cache_dir))
    out = {}
    for key in keys:
        k = normalize_key(key)
        if k[1] == k[2]:
            out[k] = 0.0
        elif k in cached:
            out[k] = cached[k]
    return out


def time_transform(key: Key, *, repeat: int = 9) -> float:
    """Median seconds of one compiled transform on random-filled buffers, timed as it runs in
    a network: its source warm (its producer just wrote it), its destination from memory (a
    freed buffer, last touched long ago; :func:`kernels.timing.cold_arrays` rotates copies).
    ResNet-50's 36 transforms, summed (znver3, session 6): 1.35 ms timed so, 1.37 in the
    network; 2.11 with a cache flush before each call (then the source read back), 1.04 warm
    back to back (on rocketlake warm read 0.50-0.59x and made the solver buy layout changes
    that did not pay). Repeats of 1 ms, 9 of them: 15 ms a transform, against 46 ms for 15 of
    2 ms, at the same level (geomean 1.002x over 40 DenseNet-121 transforms, 4 rounds each)
    and no wider spread (median sd of log time 2.3% against 2.9%; session 20)."""
    from kernels.layout_transform import build_transform
    from kernels.timing import cold_arrays, measure, random_array

    shape, src, dst = normalize_key(key)
    t = build_transform(shape, src, dst)
    arrays = {"src": random_array(t.input_shape), "dst": random_array(t.output_shape, seed=1)}
    run = cold_arrays(t.bind, arrays, ["dst"])
    return measure(run, min_repeat_ms=1, repeat=repeat, warmup=1).median_s


def measure_transforms(
    keys: Iterable,
    progress: bool = True,
    *,
    cache_dir: str | os.PathLike | None = None,
    measure_one: Callable[[Key], float] | None = None,
    callback: Callable[[Key, float], object] | None = None,
    fresh: bool = False,
) -> dict[Key, float]:
    """Seconds for every key: cached values, the rest measured (``measure_one``, default
    :func:`time_transform`) and each added to the cache the moment it is measured.
    ``callback(key, seconds)`` gets every key's timing as soon as it is known (cached ones
    first), so a caller can keep it before the next one is measured. ``fresh``: measure
    every key, cached or not (the new timing then replaces the cached one)."""
    from tqdm import tqdm

    from kernels.layout_transform import PER_MODULE, build_transforms

    built_here = measure_one is None  # time_transform: compile ahead, many to a module
    measure_one = measure_one or time_transform
    wanted = list(dict.fromkeys(normalize_key(k) for k in keys))
    out = {k: 0.0 for k in wanted if k[1] == k[2]} if fresh else load_cached(wanted, cache_dir=cache_dir)
    for key in wanted:
        if key in out and callback is not None:
            callback(key, out[key])
    missing = [k for k in wanted if k not in out]
    path = cache_path(cache_dir)
    if missing:
        sweep_stale_temps(path.parent)
    caching = True
    ahead = 2 * PER_MODULE  # two modules' worth, compiled side by side ahead of their timings
    for i, key in enumerate(tqdm(missing, desc="layout transforms", unit="transform",
                                 disable=not progress or not missing)):
        if built_here and i % ahead == 0:
            build_transforms(missing[i:i + ahead])
        out[key] = float(measure_one(key))
        try:
            if caching:
                _append(path, key, out[key])
        except OSError as e:  # a cache is only a cache: measure on, say so once
            caching = False
            warnings.warn(f"{path.parent}: cannot write the layout-transform cache "
                          f"({e.strerror}); timings are not cached (set GRAPH_TUNER_CACHE_DIR to a "
                          f"writable folder)", stacklevel=2)
        if callback is not None:
            callback(key, out[key])
    return {k: out[k] for k in wanted}
