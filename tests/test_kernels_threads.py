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


def test_claim_ahead_phase_tells_each_item_its_successor():
    """A next-aware phase runs every item once, and the successor it is told (or -1) is the
    item the same thread runs next: successors are distinct, and with the threads' first
    items they cover every item."""
    from kernels.jit import IRFunction

    total = 37
    f = IRFunction("define internal void @body(ptr %args, i64 %item, i64 %next) nounwind")
    out = f.op("load ptr, ptr %args, align 8")
    f.store("i64", "%next", f.gep(out, "%item", "i64"), align=8)
    f.emit("ret void")
    ir = f.text() + threads.parallel_entry_ir("k", [("body", total, True)])
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(compile_ir(ir)["k"])
    for n in (1, 2, 3, 8):
        seen = np.full(total, -2, np.int64)
        args = (ctypes.c_void_p * 1)(seen.ctypes.data)
        fn(ctypes.addressof(args), n)
        assert (seen >= -1).all() and (seen < total).all()  # every item ran
        succ = seen[seen >= 0]
        assert len(set(succ.tolist())) == len(succ)  # nobody is told another thread's item
        heads = set(range(total)) - set(succ.tolist())  # items no one was told: threads' first items
        assert 1 <= len(heads) <= n and (seen == -1).sum() == len(heads)  # one chain per thread
        if n == 1:
            np.testing.assert_array_equal(seen, [*range(1, total), -1])
