"""Layout-transform timings, measured once per CPU and cached on disk.

A key is ``(nchw_shape, src_block, dst_block)``; block 1 is plain NCHW (the same
memory order as NCHW1c). Equal blocks cost nothing and are never measured. Each
transform is compiled for its shape (the codegen bakes shapes into the kernel; a
compile takes ~0.05-0.2 s) and timed with :func:`kernels.timing.measure` on
random-filled buffers, with cold caches and a warm source (:func:`time_transform`).

The cache is one JSON file per CPU and timing protocol -- ``transforms-<protocol>-<cpu
name>-<hash of its LLVM feature string>.json`` in ``$GRAPH_TUNER_CACHE_DIR`` or ``~/.cache/graph-tuner`` -- rewritten
whole (temp file + ``os.replace``) after every new timing, merged with what is on disk
at that moment, so a concurrent run reading or writing it never sees a partial file
and a killed run keeps what it measured.

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
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["Key", "cache_path", "load_cached", "measure_transforms", "normalize_key", "time_transform"]

Key = tuple[tuple[int, int, int, int], int, int]
# Bumped whenever time_transform measures differently: timings of another protocol are
# not comparable, so they live in another file. v2: cold caches, warm source, awake pool;
# v3: no flush, warm source, destination from memory (cold_arrays).
PROTOCOL = "v3"


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
    'transforms-v3-skylake-avx512-0a00853d8370.json'
    """
    if cpu is None:
        from kernels.jit import host_cpu

        cpu = host_cpu()
    folder = Path(cache_dir or os.environ.get("GRAPH_TUNER_CACHE_DIR") or Path.home() / ".cache" / "graph-tuner")
    digest = hashlib.sha256(cpu.features.encode()).hexdigest()[:12]
    return folder / f"transforms-{PROTOCOL}-{cpu.name}-{digest}.json"


def _read(path: Path) -> dict[Key, float]:
    try:
        doc = json.loads(path.read_text())
        return {normalize_key((shape, a, b)): float(s) for shape, a, b, s in doc["transforms"]}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError):
        return {}  # a corrupt cache is only a cache: measure again and rewrite it


def _write(path: Path, timings: dict[Key, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"transforms": [[list(shape), a, b, s] for (shape, a, b), s in sorted(timings.items())]}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def time_transform(key: Key, *, repeat: int = 15) -> float:
    """Median seconds of one compiled transform on random-filled buffers, timed as it runs in
    a network: its source warm (its producer just wrote it), its destination from memory (a
    freed buffer, last touched long ago; :func:`kernels.timing.cold_arrays` rotates copies).
    ResNet-50's 36 transforms, summed (znver3, session 6): 1.35 ms timed so, 1.37 in the
    network; 2.11 with a cache flush before each call (then the source read back), 1.04 warm
    back to back (on rocketlake warm read 0.50-0.59x and made the solver buy layout changes
    that did not pay)."""
    from kernels.layout_transform import build_transform
    from kernels.timing import cold_arrays, measure, random_array

    shape, src, dst = normalize_key(key)
    t = build_transform(shape, src, dst)
    arrays = {"src": random_array(t.input_shape), "dst": random_array(t.output_shape, seed=1)}
    run = cold_arrays(t.bind, arrays, ["dst"])
    return measure(run, min_repeat_ms=2, repeat=repeat, warmup=1).median_s


def measure_transforms(
    keys: Iterable,
    progress: bool = True,
    *,
    cache_dir: str | os.PathLike | None = None,
    measure_one: Callable[[Key], float] = time_transform,
) -> dict[Key, float]:
    """Seconds for every key: cached values, the rest measured (``measure_one``) and cached."""
    from tqdm import tqdm

    wanted = list(dict.fromkeys(normalize_key(k) for k in keys))
    out = load_cached(wanted, cache_dir=cache_dir)
    missing = [k for k in wanted if k not in out]
    path = cache_path(cache_dir)
    for key in tqdm(missing, desc="layout transforms", unit="transform", disable=not progress or not missing):
        out[key] = float(measure_one(key))
        merged = _read(path)  # another run may have added timings meanwhile: keep them
        merged[key] = out[key]
        _write(path, merged)
    return {k: out[k] for k in wanted}
