"""kernels/transform_bench.py: real timings on a tiny shape, the per-CPU disk cache, no re-measuring."""
import json
import os
import time

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
    with open(path, "a") as f:  # another run added a timing meanwhile
        f.write(json.dumps([list(SHAPE), 16, 1, 7e-6]) + "\n")
    measure_transforms(KEYS[1:2], progress=False, cache_dir=tmp_path, measure_one=Counting())
    assert load_cached([(SHAPE, 16, 1), KEYS[0], KEYS[1]], cache_dir=tmp_path).keys() == {
        (SHAPE, 16, 1), KEYS[0], KEYS[1]}
    assert len(path.read_text().splitlines()) == 3  # one line per timing, appended
    path.write_text("{not json")
    count = Counting()
    measure_transforms(KEYS[:1], progress=False, cache_dir=tmp_path, measure_one=count)
    assert count.keys == [KEYS[0]]
    # after the garbage, on a line of its own
    assert load_cached(KEYS[:1], cache_dir=tmp_path) == {KEYS[0]: 2e-6}


@pytest.mark.parametrize("garbage", [
    bytes(range(256)) * 3,  # binary
    b'[[1, 16, 6, 6], 1, 8, 2e-06]\n[[1, 16, 6',  # a writer killed mid-line
    b'{"transforms": 3}\n[[1, 16, 6, 6], 1, 3, 1e-6]\n[[1, 16, 6, 6], 1, 8, -1]\n["x"]\nnull\n',
])
def test_a_garbage_cache_is_only_a_cache(garbage, tmp_path):
    path = cache_path(tmp_path)
    path.write_bytes(garbage)
    kept = load_cached(KEYS, cache_dir=tmp_path)
    assert kept in ({}, {KEYS[0]: 2e-6})  # a whole good line survives, nothing else
    count = Counting()
    t = measure_transforms(KEYS, progress=False, cache_dir=tmp_path, measure_one=count)
    assert count.keys == [k for k in KEYS if k not in kept] and set(t) == set(KEYS)
    assert load_cached(KEYS, cache_dir=tmp_path) == t  # the new lines read back, garbage or not
    assert path.read_bytes().startswith(garbage)  # appended to, never rewritten


def test_no_temp_files_and_stale_ones_of_killed_writers_are_swept(tmp_path):
    """The cache was rewritten through a temp file after every timing: each kill left a
    `.transforms-*.tmp` behind. Now nothing makes temp files, and old stale ones go."""
    old_name = cache_path(tmp_path).with_suffix(".json").name
    stale = tmp_path / f".{old_name}.k2j4x1.tmp"
    fresh = tmp_path / f".{old_name}.a8b7c6.tmp"  # a live writer's
    other = tmp_path / ".notes.tmp"
    for f in (stale, fresh, other):
        f.write_text("{")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    os.utime(other, (time.time() - 7200, time.time() - 7200))
    measure_transforms(KEYS, progress=False, cache_dir=tmp_path, measure_one=Counting())
    assert not stale.exists() and fresh.exists() and other.exists()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([cache_path(tmp_path).name, fresh.name, other.name])


def test_the_previous_versions_json_cache_is_still_read(tmp_path):
    legacy = cache_path(tmp_path).with_suffix(".json")
    timings = [[list(SHAPE), 1, 8, 3e-6], [list(SHAPE), 8, 1, 4e-6]]
    legacy.write_text(json.dumps({"transforms": timings}))
    count = Counting()
    t = measure_transforms(KEYS, progress=False, cache_dir=tmp_path, measure_one=count)
    assert count.keys == KEYS[2:] and t[KEYS[0]] == 3e-6 and t[KEYS[1]] == 4e-6
    assert json.loads(legacy.read_text())["transforms"][0][3] == 3e-6  # read, never written


def test_callback_gets_each_timing_before_the_next_is_measured(tmp_path):
    measure_transforms(KEYS[:1], progress=False, cache_dir=tmp_path, measure_one=Counting())
    events = []
    count = Counting()

    def measure_one(key):
        events.append(("measure", key))
        return count(key)

    measure_transforms(KEYS, progress=False, cache_dir=tmp_path, measure_one=measure_one,
                       callback=lambda key, s: events.append(("got", key)))
    then = [e for k in KEYS[1:] for e in (("measure", k), ("got", k))]
    assert events == [("got", KEYS[0])] + then


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


def test_an_unwritable_cache_only_warns_and_measures_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    count = Counting()
    with pytest.warns(UserWarning, match="cannot write the layout-transform cache"):
        t = measure_transforms(KEYS, progress=False, cache_dir=blocker, measure_one=count)
    assert count.keys == KEYS and set(t) == set(KEYS)
    assert load_cached(KEYS, cache_dir=blocker) == {} and blocker.read_text() == ""
