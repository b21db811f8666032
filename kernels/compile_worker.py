"""A compile helper process (:mod:`kernels.compile_helpers` starts it): reads length-prefixed
IR texts on stdin until end of input, answers each with its object code
(:func:`kernels.jit.object_code`) or the error, in :data:`kernels.compile_helpers.HEADER`'s
framing, on stdout."""
from __future__ import annotations

import struct
import sys

from kernels.compile_helpers import HEADER, read_exact
from kernels.jit import object_code


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(8)
        if len(head) < 8:
            return
        ir = read_exact(stdin, struct.unpack("<Q", head)[0]).decode()
        try:
            status, payload = 0, object_code(ir)
        except Exception as e:  # bad IR: the caller compiles it itself and sees the error
            status, payload = 1, f"{type(e).__name__}: {e}".encode()
        stdout.write(HEADER.pack(status, len(payload)) + payload)
        stdout.flush()


if __name__ == "__main__":
    main()
