"""Helper processes that compile LLVM IR to object code, for :func:`kernels.jit.compile_ahead`.

llvmlite serialises every LLVM call behind one lock, so threads cannot compile side by
side; processes can. Each helper is ``python -m kernels.compile_worker``, started once
and fed requests over its stdin: a length-prefixed IR text in, a status byte and
length-prefixed object code (or error text) out. Not ``multiprocessing``: its spawned
children re-run the caller's ``__main__`` (a user script without a main guard would run
again in every helper).

>>> pool = HelperPool(1)
>>> code = pool.submit('define i32 @one() {\\n  ret i32 1\\n}\\n').result()
>>> code[:4] == b'\\x7fELF'
True
>>> pool.close()
"""
from __future__ import annotations

import os
import queue
import struct
import subprocess
import sys
from concurrent.futures import BrokenExecutor, Future, ThreadPoolExecutor
from pathlib import Path

HEADER = struct.Struct("<BQ")  # a reply's status (0 ok, 1 error) and payload length


def read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("helper stream closed")
    return data


class HelperPool:
    """``count`` helper processes; :meth:`submit` returns a future of the object code.
    A dead helper makes its futures (and later ones) raise :class:`BrokenExecutor`."""

    def __init__(self, count: int):
        root = str(Path(__file__).resolve().parent.parent)  # the folder holding `kernels`
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self._procs = [subprocess.Popen([sys.executable, "-m", "kernels.compile_worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
                       for _ in range(count)]
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        for p in self._procs:
            self._idle.put(p)
        # One thread per helper waits on its pipes (pipe I/O releases the GIL), so requests
        # never queue inside a pipe: a helper blocked writing a reply could not read the next.
        self._threads = ThreadPoolExecutor(count)
        self.size, self.broken = count, False

    def submit(self, ir_text: str) -> Future:
        return self._threads.submit(self._compile, ir_text.encode())

    def _compile(self, ir: bytes) -> bytes:
        if self.broken:
            raise BrokenExecutor("a compile helper died")
        proc = self._idle.get()
        try:
            proc.stdin.write(struct.pack("<Q", len(ir)) + ir)
            proc.stdin.flush()
            status, n = HEADER.unpack(read_exact(proc.stdout, HEADER.size))
            payload = read_exact(proc.stdout, n)
        except (OSError, EOFError, struct.error):
            self.broken = True
            raise BrokenExecutor("a compile helper died") from None
        self._idle.put(proc)
        if status:
            raise RuntimeError(payload.decode(errors="replace"))
        return payload

    def cpu_seconds(self) -> float:
        """CPU seconds the helpers have used (Linux ``/proc``; 0 elsewhere), so that load
        meters count them as this process's own work, not another's."""
        total = 0.0
        for p in self._procs:
            try:
                with open(f"/proc/{p.pid}/stat", encoding="ascii") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
            except (OSError, ValueError, IndexError):
                pass
        return total

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        for p in self._procs:
            try:
                p.stdin.close()  # the helper exits at end of input
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
            p.stdout.close()
