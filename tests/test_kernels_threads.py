"""The parallel runtime: libgomp fork/join and the one-thread fallback compute the same."""
import ctypes

import numpy as np

from kernels import threads
from kernels.jit import compile_ir
from kernels.layout_transform import to_blocked, transform_ir


def run_transform_ir(ir, x, out_shape, nthreads):
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(compile_ir(ir)["transform"])
    out = np.full(out_shape, np.nan, np.float32)
    args = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    fn(ctypes.addressof(args), nthreads)
    return out


def test_fallback_without_libgomp_runs_all_items(monkeypatch):
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 4)).astype(np.float32)
    expected = to_blocked(x, 4)
    monkeypatch.setattr(threads, "have_openmp", lambda: False)
    serial_ir = transform_ir(x.shape, None, 4)
    assert "GOMP_parallel" not in serial_ir
    np.testing.assert_array_equal(run_transform_ir(serial_ir, x, expected.shape, 2), expected)
    assert threads.num_threads() == 1


def test_every_thread_count_covers_all_items():
    x = np.random.default_rng(1).standard_normal((1, 6, 5, 3)).astype(np.float32)
    expected = to_blocked(x, 2)
    ir = transform_ir(x.shape, None, 2)  # 15 items: uneven slices for 2, 4 and 7 threads
    for n in (1, 2, 4, 7):
        np.testing.assert_array_equal(run_transform_ir(ir, x, expected.shape, n), expected)
