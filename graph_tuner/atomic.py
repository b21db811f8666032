"""Write output files atomically: a temp file in the same folder, then rename.

A failed or interrupted run never leaves a partial output file, and an old file
is replaced whole, never appended to.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temp file beside ``path``; on clean exit rename it over ``path``.

    >>> with atomic_open("/tmp/_gt_example.txt") as f:
    ...     _ = f.write("hello\\n")
    >>> open("/tmp/_gt_example.txt").read()
    'hello\\n'
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)
