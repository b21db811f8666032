"""kernels/transform_bench.py: real timings on a tiny shape, the per-CPU disk cache, no re-measuring."""
import json

import pytest

from kernels.jit import HostCPU, host_cpu
from kernels.transform_bench import cache_path, load_cached, measure_transforms, normalize_key

SHAPE = (1, 16, 6, 6)
KEYS = [(SHAPE, 1, 8), (SHAPE, 8, 1), (SHAPE, 8, 16), (SHAPE, 16, 4)]


class Counting:
    def __init__(self):
        self.keys = []

    def __call__(self, key):
        self.keys.append(key)
        return 1e-6 * (len(self.keys) + 1)


def test_real_timings_positive_and_cached(tmp_path):
    t = measure_transforms(KEYS, progress=False, cache_dir=tmp_path)
    assert set(t) == set(KEYS) and all(v > 0 for v in t.values())
    count = Counting()
    assert measure_transforms(KEYS, progress=False, cache_dir=tmp_path, measure_one=count) == t
    assert count.keys == []  # second call: all cache hits
    assert load_cached(KEYS, cache_dir=tmp_path) == t


def test_only_missing_keys_are_measured_and_identities_are_free(tmp_path):
    count = Counting()
    measure_transforms(KEYS[:2], progress=False, cache_dir=tmp_path, measure_one=count)
    t = measure_transforms(KEYS + [(SHAPE, 4, 4), (SHAPE, None, 1)], progress=False, cache_dir=tmp_path,
                           measure_one=count)
    assert count.keys == KEYS  # each measured once, in order; identities never
    assert t[(SHAPE, 4, 4)] == 0.0 and t[(SHAPE, 1, 1)] == 0.0
    assert load_cached([(SHAPE, 2, 8)], cache_dir=tmp_path) == {}  # no measuring in load_cached


def test_cache_file_is_per_cpu_and_env_overridable(tmp_path, monkeypatch):
    a = HostCPU("skylake-avx512", "+avx512f,+fma", 16)
    b = HostCPU("skylake-avx512", "+avx2,+fma", 8)
    assert cache_path(tmp_path, a) != cache_path(tmp_path, b)
    assert "skylake-avx512" in cache_path(tmp_path, a).name
    monkeypatch.setenv("GRAPH_TUNER_CACHE_DIR", str(tmp_path / "env"))
    assert cache_path() == cache_path(tmp_path / "env", host_cpu())
    measure_transforms(KEYS[:1], progress=False, measure_one=Counting())
    assert cache_path().exists() and load_cached(KEYS[:1]) == {normalize_key(KEYS[0]): 2e-6}
    # Another CPU's cache file does not answer for this one.
    assert load_cached(KEYS[:1], cache_dir=tmp_path) == {}


def test_concurrent_additions_are_kept_and_corrupt_cache_is_remeasured(tmp_path):
    measure_transforms(KEYS[:1], progress=False, cache_dir=tmp_path, measure_one=Counting())
    path = cache_path(tmp_path)
    doc = json.loads(path.read_text())
    doc["transforms"].append([list(SHAPE), 16, 1, 7e-6])  # written by another run meanwhile
    path.write_text(json.dumps(doc))
    measure_transforms(KEYS[1:2], progress=False, cache_dir=tmp_path, measure_one=Counting())
    assert load_cached([(SHAPE, 16, 1), KEYS[0], KEYS[1]], cache_dir=tmp_path).keys() == {
        (SHAPE, 16, 1), KEYS[0], KEYS[1]}
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp files
    path.write_text("{not json")
    count = Counting()
    measure_transforms(KEYS[:1], progress=False, cache_dir=tmp_path, measure_one=count)
    assert count.keys == [KEYS[0]]


def test_bad_keys():
    with pytest.raises(ValueError, match="does not divide"):
        normalize_key((SHAPE, 3, 1))
    with pytest.raises(ValueError, match="4-d"):
        normalize_key(((16, 6, 6), 1, 2))


def test_time_transform_reads_a_warm_source_into_a_cold_destination(cold_calls):
    """In a network a transform's source was just written, its destination is a buffer last
    touched long ago: the source is the same buffer every call, the destination rotates."""
    from kernels.transform_bench import time_transform

    assert time_transform(((1, 8, 4, 4), 1, 4), repeat=3) > 0
    assert len({call["src"] for call in cold_calls}) == 1
    assert len({call["dst"] for call in cold_calls}) == 3
