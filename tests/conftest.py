"""Fixtures shared by several test modules."""
import pytest


@pytest.fixture
def cold_calls(monkeypatch):
    """Spy on :func:`kernels.timing.cold_arrays`: a list that gets, for every call it makes,
    each argument's buffer address; the cold arguments rotate through 3 copies."""
    import kernels.timing as timing

    seen = []
    real = timing.cold_arrays

    def spy(bind, arrays, cold, **kw):
        def recording_bind(**a):
            run = bind(**a)
            return lambda: (seen.append({n: v.ctypes.data for n, v in a.items()}), run())

        nbytes = sum(arrays[n].nbytes for n in cold if arrays.get(n) is not None)
        return real(recording_bind, arrays, cold, total_bytes=3 * nbytes)

    monkeypatch.setattr(timing, "cold_arrays", spy)
    return seen


@pytest.fixture
def calls_to(monkeypatch):
    """``calls_to(owner, name)``: replace ``owner.name`` by a wrapper that still calls it, and
    return the list that gets each call's ``(args, kwargs)``."""

    def spy_on(owner, name):
        calls = []
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            calls.append((args, kwargs))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
        return calls

    return spy_on


@pytest.fixture
def tiny_onnx(tmp_path):
    """A two-conv ONNX model (:func:`tiny_model.write_tiny_onnx`) in ``tmp_path``."""
    from tiny_model import write_tiny_onnx

    return write_tiny_onnx(tmp_path / "tiny.onnx")


@pytest.fixture
def two_threads(monkeypatch):
    """Kernels generated for 2 threads (their text depends on it: rows per work item), none
    cached from another count."""
    from kernels.jit import clear_kernel_caches

    monkeypatch.setenv("GRAPH_TUNER_NUM_THREADS", "2")
    clear_kernel_caches()
    yield
    clear_kernel_caches()


@pytest.fixture(autouse=True)
def _no_waiting_for_the_hosts_fast_phase(monkeypatch):
    """No test waits for the host's fast phase (a calibration would wait up to 15 s a run on a
    host in its slow phase), and none sees another test's fork-join readings."""
    from graph_tuner import host_state

    monkeypatch.setattr(host_state, "FAST_PHASE_WAIT_S", 0.0)
    monkeypatch.setattr(host_state, "_lowest_join", {})


@pytest.fixture(autouse=True, scope="session")
def _fresh_caches(tmp_path_factory):
    """No test reads or fills this machine's caches (``~/.cache/graph-tuner``): kernels that
    earlier runs compiled are not linked (kernels.object_cache) and transform timings they took
    are not read, in this process or in the commands tests start. Each session runs as on a
    fresh machine, and a test that counts compiles counts the same every run.
    tests/test_object_cache.py tests the cache; tests that need a folder of their own set it."""
    import kernels.object_cache as object_cache

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(object_cache, "DEFAULT_FOLDER", str(tmp_path_factory.mktemp("objects")))
        mp.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield
