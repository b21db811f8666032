"""The compiled-kernel cache on disk (kernels.object_cache): a kernel another process compiled
is linked, not compiled, and computes what a fresh compile does; a damaged file is compiled
again; nothing that names a process's addresses, or was compiled for another CPU or pipeline,
is ever linked; an unwritable folder costs the cache only."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from kernels import jit, object_cache
from kernels.config import Conv2DConfig
from kernels.conv2d import Conv2DKernel, conv2d_ir, pack_weight
from kernels.packing import from_blocked, to_blocked
from kernels.reference import conv2d_nchw
from kernels.workload import Conv2DWorkload

ROOT = Path(__file__).resolve().parents[1]
WL = Conv2DWorkload((1, 16, 9, 9), (32, 16, 3, 3), padding=(1, 1, 1, 1))
CONFIG = Conv2DConfig(8, 16, 4)


@pytest.fixture
def folder(monkeypatch, tmp_path):
    """This test's cache folder, an empty compile cache in memory, no helpers, no earlier failure."""
    monkeypatch.setattr(object_cache, "DEFAULT_FOLDER", str(tmp_path / "objects"))
    monkeypatch.setattr(object_cache, "_broken", False)
    monkeypatch.setattr(jit, "_engines", {})
    monkeypatch.setattr(jit, "_objects", {})
    monkeypatch.setattr(jit, "_helpers", False)
    return tmp_path / "objects"


@pytest.fixture
def compiles(monkeypatch):
    """The modules compiled in this process from now on (each still compiled)."""
    seen = []
    real = jit._jit

    def spy(module, keep=None):
        seen.append(module)
        return real(module, keep)

    monkeypatch.setattr(jit, "_jit", spy)
    return seen


def _no_compiling(monkeypatch):
    def refuse(*args):
        raise AssertionError("compiled, though the object code was on disk")

    monkeypatch.setattr(jit, "_jit", refuse)


def _check(module):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(WL.data_shape, dtype=np.float32)
    wt = rng.standard_normal(WL.kernel_shape, dtype=np.float32)
    shapes = Conv2DKernel(WL, CONFIG, False, False, None)
    out = np.zeros(shapes.output_shape, np.float32)
    jit.Kernel(module, "conv2d", shapes.arg_shapes, shapes._scratch)(
        to_blocked(x, CONFIG.ic_bn), pack_weight(wt, CONFIG.ic_bn, CONFIG.oc_bn), out)
    np.testing.assert_allclose(from_blocked(out), conv2d_nchw(x, wt, padding=WL.padding), rtol=1e-4, atol=1e-4)


def test_a_kernel_another_process_compiled_is_linked_not_compiled(folder, monkeypatch):
    text = conv2d_ir(WL, CONFIG)
    code = ("from kernels import jit; from kernels.conv2d import conv2d_ir; from kernels.config import Conv2DConfig; "
            "from kernels.workload import Conv2DWorkload as W; "
            "jit.compile_ir(conv2d_ir(W((1, 16, 9, 9), (32, 16, 3, 3), padding=(1, 1, 1, 1)), Conv2DConfig(8, 16, 4)))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRAPH_TUNER_CACHE_DIR": str(folder.parent)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert len(list(folder.glob("??/*.o"))) == 1
    _no_compiling(monkeypatch)
    _check(jit.compile_ir(text))
    jit._engines.clear()
    jit.compile_ahead([text])  # nor does compiling ahead compile it (or start a helper)
    assert text in jit._objects
    _check(jit.compile_ir(text))


def test_compiling_ahead_stores_what_the_helper_compiled(folder, monkeypatch):
    monkeypatch.setattr(jit, "_helpers", None)
    monkeypatch.setattr(jit.threads, "usable_cores", lambda: 2)  # one helper even on one core
    texts = [conv2d_ir(WL, c) for c in (CONFIG, Conv2DConfig(16, 16, 3))]
    try:
        jit.compile_ahead(texts)  # one here, one on the helper
    finally:
        if jit._helpers:
            jit._helpers.close()
    assert all(object_cache.load(t, jit.pipeline_description()) is not None for t in texts)


def test_a_damaged_file_is_compiled_again_and_replaced(folder, compiles):
    text = conv2d_ir(WL, CONFIG)
    jit.compile_ir(text)
    (path,) = folder.glob("??/*.o")
    good = path.read_bytes()
    for damaged in (good[:len(good) // 2], good[:-1] + bytes([good[-1] ^ 1]), b"", good[:10]):
        path.write_bytes(damaged)
        jit._engines.clear()
        before = len(compiles)
        _check(jit.compile_ir(text))
        assert len(compiles) == before + 1
        assert path.read_bytes() == good  # the same compile, stored whole again


def test_text_naming_addresses_is_never_stored(folder):
    jit.compile_ir('define i32 @f() {\n  ret i32 7\n}\n', cache=False)
    assert not list(folder.glob("**/*.o"))


def test_another_pipeline_or_cpu_is_a_miss(folder, monkeypatch, compiles):
    import dataclasses

    text = conv2d_ir(WL, CONFIG)
    jit.compile_ir(text)
    cpu = jit.host_cpu()
    assert cpu.name in jit.pipeline_description() and cpu.features in jit.pipeline_description()
    with monkeypatch.context() as m:
        m.setattr(jit, "PIPELINE", {**jit.PIPELINE, "slp_vectorization": False})
        jit._engines.clear()
        jit.compile_ir(text)
    assert len(compiles) == 2 and len(list(folder.glob("??/*.o"))) == 2
    # Another CPU's features (as a test of AVX2 code on an AVX-512 host makes): another key.
    other = dataclasses.replace(cpu, features=cpu.features + ",-fake")
    with monkeypatch.context() as m:
        m.setattr(jit, "host_cpu", lambda: other)
        assert object_cache.load(text, jit.pipeline_description()) is None
    assert object_cache.load(text, jit.pipeline_description()) is not None


def test_an_unwritable_folder_costs_the_cache_only(monkeypatch, tmp_path, compiles):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(object_cache, "DEFAULT_FOLDER", str(blocker / "objects"))
    monkeypatch.setattr(object_cache, "_broken", False)
    monkeypatch.setattr(jit, "_engines", {})
    with pytest.warns(UserWarning, match="cannot write the compiled-kernel cache"):
        _check(jit.compile_ir(conv2d_ir(WL, CONFIG)))  # compiled, not stored (MCJIT's hook stores it)
    assert object_cache._broken and len(compiles) == 1 and blocker.read_text() == "not a folder"
    monkeypatch.setattr(object_cache, "_broken", False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert not object_cache.store("a", b"code", "p") and not object_cache.store("b", b"code", "p")
    assert len(said) == 1 and "cannot write the compiled-kernel cache" in str(said[0].message)


def test_no_home_folder_costs_the_cache_only(monkeypatch, folder):
    monkeypatch.setattr(object_cache, "DEFAULT_FOLDER", None)
    monkeypatch.delenv("GRAPH_TUNER_CACHE_DIR", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", no_home)
    assert object_cache.load("text", "p") is None
    with pytest.warns(UserWarning, match="compiled-kernel cache"):
        assert not object_cache.store("text", b"code", "p")


def test_files_get_the_umasks_mode_and_no_temp_file_stays(folder):
    old = os.umask(0o027)
    try:
        assert object_cache.store("text", b"code", "p")
    finally:
        os.umask(old)
    (path,) = folder.glob("??/*")
    assert path.stat().st_mode & 0o777 == 0o640 and path.suffix == ".o"


def test_pruning_removes_the_least_recently_used_and_stale_temps(folder):
    for i in range(6):
        object_cache.store(str(i), bytes(1000), "p")
    paths = {i: next(folder.glob(f"??/{object_cache.key(str(i), 'p')}.o")) for i in range(6)}
    for i, p in paths.items():
        os.utime(p, (1000 + i, 1000 + i))  # 0 used longest ago
    object_cache.load("0", "p")  # ... but just used again
    stale = paths[1].with_name(".x.1.1.tmp")
    stale.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    size = len(object_cache.MAGIC) + 32 + 1000
    assert object_cache.prune(max_bytes=5 * size) == 1 + 2  # the temp; down to 4/5 of 5 files: 4
    assert [i for i in range(6) if object_cache.load(str(i), "p") is not None] == [0, 3, 4, 5]


def test_files_another_user_could_have_written_are_compiled_not_linked(folder, monkeypatch, compiles):
    text = conv2d_ir(WL, CONFIG)
    jit.compile_ir(text)
    (path,) = folder.glob("??/*.o")
    pipeline = jit.pipeline_description()
    assert object_cache.load(text, pipeline) is not None
    cases = [(path, 0o666), (path.parent, 0o777), (folder, 0o777)]  # writable by all: file, its folder, the cache
    for where, mode in cases:
        old = where.stat().st_mode & 0o777
        where.chmod(mode)
        monkeypatch.setattr(object_cache, "_distrusted", set())
        try:
            with pytest.warns(UserWarning, match="another user could have written"):
                assert object_cache.load(text, pipeline) is None
            with warnings.catch_warnings(record=True) as said:  # one warning a folder
                warnings.simplefilter("always")
                jit._engines.clear()
                before = len(compiles)
                _check(jit.compile_ir(text))
            assert len(compiles) == before + 1 and not said
        finally:
            where.chmod(old)
    assert object_cache.load(text, pipeline) is not None
    # Owned by another user (the files' owner is not who this process runs as).
    monkeypatch.setattr(object_cache, "_distrusted", set())
    monkeypatch.setattr(os, "getuid", lambda: path.stat().st_uid + 1)
    with pytest.warns(UserWarning, match="not owned by this user"):
        assert object_cache.load(text, pipeline) is None


def test_a_long_process_keeps_the_folder_near_its_cap(folder, monkeypatch):
    size = len(object_cache.MAGIC) + 32 + 1000
    monkeypatch.setattr(object_cache, "MAX_BYTES", 10 * size)
    monkeypatch.setattr(object_cache, "_written", {})
    for i in range(60):  # six caps' worth in one process
        assert object_cache.store(str(i), bytes(1000), "p")
        held = sum(p.stat().st_size for p in folder.glob("??/*.o"))
        assert held <= 10 * size + 10 * size // 5 + size, (i, held)  # the cap, plus at most a fifth of it
    assert object_cache.load("59", "p") is not None  # the newest kept
