"""The parallel runtime (our thread pool): every thread count computes the same, every item
runs exactly once, and jobs complete however many workers show up."""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np

from kernels import threads
from kernels.jit import IRFunction, compile_ir
from kernels.layout_transform import to_blocked, transform_ir


def run_transform_ir(ir, x, out_shape, nthreads):
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(compile_ir(ir)["transform"])
    out = np.full(out_shape, np.nan, np.float32)
    args = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    fn(ctypes.addressof(args), nthreads)
    return out


def _counting_kernel(total):
    """A kernel whose item i adds 1 to counts[i] (atomically): each item must run exactly once."""
    f = IRFunction("define internal void @body(ptr %args, i64 %item) nounwind")
    counts = f.op("load ptr, ptr %args, align 8")
    f.emit(f"%old = atomicrmw add ptr {f.gep(counts, '%item', 'i64')}, i64 1 seq_cst, align 8")
    f.emit("ret void")
    ir = f.text() + threads.parallel_entry_ir("k", [("body", total)])
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(compile_ir(ir)["k"])


def test_each_item_runs_once_over_many_back_to_back_jobs():
    fn = _counting_kernel(101)
    counts = np.zeros(101, np.int64)
    args = (ctypes.c_void_p * 1)(counts.ctypes.data)
    for n in [1, 2, 3, 8] * 250:  # 1000 jobs: workers join late, skip jobs, sleep and wake
        fn(ctypes.addressof(args), n)
    np.testing.assert_array_equal(counts, 1000)


def test_jobs_complete_without_workers():
    """In a forked child the pool's workers do not exist: the caller runs every item itself."""
    code = textwrap.dedent("""
        import os, ctypes, numpy as np, sys
        sys.path.insert(0, %r)
        from tests.test_kernels_threads import _counting_kernel
        fn = _counting_kernel(37)
        counts = np.zeros(37, np.int64); args = (ctypes.c_void_p * 1)(counts.ctypes.data)
        fn(ctypes.addressof(args), 2)
        pid = os.fork()
        if pid == 0:
            fn(ctypes.addressof(args), 2)
            os._exit(0 if (counts == 2).all() else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """) % os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0", out.stderr


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
