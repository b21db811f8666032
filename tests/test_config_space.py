"""AutoTVM x86 config-space index math, checked against indices in real TVM logs."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from graph_tuner.records import read_records
from kernels.config import Conv2DConfig
from kernels.config_space import (
    ConfigSpace,
    Knob,
    conv2d_space,
    depthwise_conv2d_space,
    divisors,
    entity_config,
    split_factors,
    task_space,
    tuning_space,
)
from kernels.workload import Conv2DWorkload

DATA = Path(__file__).parent / "data"
X86_LOGS = ["resnet18_x86_v01_typographic.log", "resnet18_x86_rfc2018.log", "tvm010_x86_v02.log"]

LAYER1 = Conv2DWorkload((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3))
LAYER2 = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))


def test_seed_indices_136_and_82():
    s1 = conv2d_space(LAYER1, "factors")
    e1 = {"tile_ic": [-1, 1], "tile_oc": [-1, 32], "tile_ow": [-1, 1], "unroll_kw": False}
    assert s1.index(e1) == 136 and s1.entity(136) == e1
    s2 = conv2d_space(LAYER2, "factors")
    e2 = {"tile_ic": [-1, 32], "tile_oc": [-1, 16], "tile_ow": [-1, 2], "unroll_kw": True}
    assert s2.index(e2) == 82 and s2.entity(82) == e2
    assert s2.config(82) == Conv2DConfig(ic_bn=32, oc_bn=16, ow_bn=2, unroll_kw=True)


@pytest.mark.parametrize("name", X86_LOGS)
def test_every_x86_seed_record_round_trips(name):
    records = read_records(DATA / name).records
    assert records
    for rec in records:
        space = task_space(rec.task_name, rec.workload)
        index = space.index(rec.entity)
        assert index == rec.config_index, rec.source
        # old logs write splits [outer, inner], new ones [-1, inner]: compare the schedules
        assert space.config(index) == entity_config(rec.entity)
        assert space.index(space.entity(index)) == index


def test_tvm_010_space_size_is_308():
    # "2*7*11*2=308" for this task, as reported next to the TVM 0.10 records in tests/data.
    assert len(task_space("conv2d_NCHWc.x86", LAYER1)) == 308
    assert len(task_space("topi_x86_conv2d_NCHWc", LAYER1)) == 2 * 7 * 9 * 2


@given(st.integers(1, 5000))
def test_split_factors_are_the_divisors_or_divisors_and_powers_of_two(n):
    brute = [d for d in range(1, n + 1) if n % d == 0]
    assert divisors(n) == split_factors(n, "factors") == brute
    verbose = split_factors(n, "verbose")
    assert len(verbose) == len(set(verbose))
    assert set(verbose) == set(brute) | {2**i for i in range(n.bit_length()) if 2**i <= n}


def _brute_force_entities(space: ConfigSpace) -> list[dict]:
    # itertools.product varies the LAST element fastest; AutoTVM varies the first.
    knobs = list(reversed(space.knobs))
    out = []
    for combo in itertools.product(*(range(len(k)) for k in knobs)):
        out.append({k.name: k.value(i) for k, i in reversed(list(zip(knobs, combo)))})
    return out


@pytest.mark.parametrize("w", [
    Conv2DWorkload((1, 6, 10, 12), (4, 6, 3, 3), padding=(1, 1, 1, 1)),
    Conv2DWorkload((1, 12, 9, 9), (8, 12, 1, 1)),
    Conv2DWorkload((1, 8, 5, 1), (8, 8, 1, 1)),  # out_height 5 but width 1
    Conv2DWorkload((1, 8, 7, 7), (8, 1, 3, 3), padding=(1, 1, 1, 1), groups=8),
])
def test_index_math_matches_brute_force_enumeration(w):
    space = depthwise_conv2d_space(w) if w.is_depthwise else conv2d_space(w)
    entities = _brute_force_entities(space)
    assert len(space) == len(entities)
    assert [space.entity(i) for i in space] == entities


def test_template_knobs():
    assert conv2d_space(LAYER2).names == ("tile_ic", "tile_oc", "tile_ow", "unroll_kw")
    one_by_one = conv2d_space(Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1)))
    assert one_by_one.names[-1] == "tile_oh" and one_by_one.knobs[-1].values == (1, 2)
    single_row = conv2d_space(Conv2DWorkload((1, 8, 1, 4), (8, 8, 1, 1)))
    assert single_row.knobs[-1].values == (1,)
    dw = depthwise_conv2d_space(Conv2DWorkload((1, 8, 7, 7), (8, 1, 3, 3), groups=8))
    assert dw.names == ("tile_ic", "tile_oc", "tile_ow", "unroll_kw")
    assert all(v <= 64 for v in conv2d_space(Conv2DWorkload((1, 1, 1, 300), (1, 1, 1, 1))).knobs[2].values)


def test_bad_entities_and_indices_are_rejected():
    s = conv2d_space(LAYER2)
    with pytest.raises(IndexError):
        s.entity(len(s))
    with pytest.raises(ValueError, match="not in the space"):
        s.index({"tile_ic": [-1, 3], "tile_oc": [-1, 16], "tile_ow": [-1, 2], "unroll_kw": True})
    with pytest.raises(ValueError, match="does not split"):
        s.index({"tile_ic": [3, 32], "tile_oc": [-1, 16], "tile_ow": [-1, 2], "unroll_kw": True})
    with pytest.raises(ValueError, match="do not match"):
        s.index({"tile_ic": [-1, 32]})
    with pytest.raises(ValueError, match="not in the space"):  # 1 is not True for a knob
        s.index({"tile_ic": [-1, 32], "tile_oc": [-1, 16], "tile_ow": [-1, 2], "unroll_kw": 1})
    with pytest.raises(ValueError, match="no x86 config space"):
        task_space("conv2d_nchw.cuda", LAYER2)


def test_entity_list_is_the_record_form():
    s = conv2d_space(LAYER2, "factors")
    assert s.entity_list(82) == [["tile_ic", "sp", [-1, 32]], ["tile_oc", "sp", [-1, 16]],
                                 ["tile_ow", "sp", [-1, 2]], ["unroll_kw", "ot", True]]
    assert s.index(s.entity_list(82)) == 82


@st.composite
def workloads(draw):
    c = draw(st.integers(1, 96))
    depthwise = draw(st.booleans())
    oc = c if depthwise else draw(st.integers(1, 96))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(kh, 130)), draw(st.integers(kw, 130))
    return Conv2DWorkload((1, c, h, w), (oc, 1 if depthwise else c, kh, kw),
                          (draw(st.integers(1, 2)), draw(st.integers(1, 2))), groups=c if depthwise else 1)


@settings(max_examples=150, deadline=None)
@given(workloads(), st.sampled_from(["factors", "verbose"]), st.data())
def test_random_spaces_round_trip(w, policy, data):
    space = depthwise_conv2d_space(w) if w.is_depthwise else conv2d_space(w, policy)
    i = data.draw(st.integers(0, len(space) - 1))
    e = space.entity(i)
    assert space.index(e) == i
    assert space.entity(space.index(e)) == e
    cfg = space.config(i)
    assert w.in_channels % cfg.ic_bn == 0 and w.out_channels % cfg.oc_bn == 0
    assert 1 <= cfg.ow_bn <= 64
    if policy == "factors" or w.is_depthwise:
        assert w.out_width % cfg.ow_bn == 0
    # old-style [outer, inner] splits name the same config
    old = {k: ([w_len // v[1], v[1]] if isinstance(v, list) and w_len % v[1] == 0 else v)
           for (k, v), w_len in zip(e.items(), [w.in_channels, w.out_channels, w.out_width, 0])}
    assert space.index(old) == i


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_the_whole_space_at_once_is_the_space_config_by_config(w):
    # configs() builds a space's configs in one pass (the tuner's setup); tuning_space may be a
    # concatenation of two spaces.
    for space in (tuning_space(w), depthwise_conv2d_space(w) if w.is_depthwise else conv2d_space(w, "factors")):
        assert space.configs() == [space.config(i) for i in space]


def test_knob_value_types():
    k = Knob("unroll_kw", "ot", (True, False))
    assert k.position(False) == 1 and k.value(0) is True


@pytest.mark.parametrize("workload", [LAYER1, LAYER2, Conv2DWorkload((1, 64, 56, 56), (64, 64, 1, 1)),
                                      Conv2DWorkload((1, 8, 1, 1), (8, 8, 1, 1))])
def test_tuning_space_is_autotvms_followed_by_the_extra_tile_widths(workload):
    from kernels.config_space import tuning_space

    tvm, ours = conv2d_space(workload, "verbose"), tuning_space(workload)
    for i in range(len(tvm)):  # AutoTVM's indices keep their meaning
        assert ours.entity(i) == tvm.entity(i) and ours.index(tvm.entity(i)) == i
    extra = range(len(tvm), len(ours))
    widths = {ours.config(i).ow_bn for i in extra}
    assert widths == set(range(3, 17)) - set(tvm.knobs[2].values) - set(range(workload.out_width + 1, 17))
    for i in extra:  # every extra config round-trips and is new
        assert ours.index(ours.entity_list(i)) == i
        with pytest.raises(ValueError):
            tvm.index(ours.entity(i))
    with pytest.raises(IndexError):
        ours.entity(len(ours))
