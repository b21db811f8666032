"""exchange_siblings: each sibling group's fastest configs timed on the members that never tried them."""
from __future__ import annotations

from collections import Counter

from graph_tuner.tuning import conv_input_key, exchange_siblings, sibling_groups
from kernels.config import Conv2DConfig
from kernels.tuner import tuning_space
from kernels.workload import Conv2DWorkload

TARGET = "llvm -mcpu=test"
A, B, C = (Conv2DWorkload((1, ic, 14, 14), (64, ic, 1, 1)) for ic in (64, 96, 128))
OTHER = Conv2DWorkload((1, 64, 7, 7), (64, 64, 1, 1))  # another size: no sibling of theirs


def index(w, c: Conv2DConfig) -> int:
    space = tuning_space(w)
    return space.index(space.config_entity(c))


def run(searches, timings=None, top=1):
    calls = []

    def measure(w, c):
        calls.append((w, c))
        return 1e-3

    got = []
    made = exchange_siblings([A, OTHER, B, C], searches, timings or {}, TARGET, measure=measure,
                             callback=lambda w, m: got.append((w, m.config, m.confirmation)), top=top)
    return made, calls, got


def test_sibling_groups_join_only_workloads_that_differ_in_input_channels():
    assert sibling_groups([A, OTHER, B, C]) == [[A, B, C]]
    assert sibling_groups([A, OTHER]) == []


def test_each_member_times_the_groups_fastest_configs_it_never_tried_three_times():
    fast_b = Conv2DConfig(32, 16, 7, oh_bn=1)  # B's fastest: A and C never tried it
    slow = Conv2DConfig(16, 16, 2, oh_bn=1)  # A's fastest; B and C tried it
    whole = Conv2DConfig(128, 16, 7, oh_bn=1)  # C's fastest: 128-channel blocks fit neither A nor B
    searches = [
        {index(A, slow): 2e-3},
        {index(OTHER, fast_b): 1e-3},
        {index(B, fast_b): 1e-3, index(B, slow): 3e-3},
        {index(C, whole): 1e-3, index(C, slow): 2e-3, index(C, Conv2DConfig(8, 16, 7, oh_bn=1)): None},
    ]
    made, calls, got = run(searches)
    assert made == len(got) == len(calls) == 6
    assert Counter((w, c) for w, c, _ in got) == Counter({(A, fast_b): 3, (C, fast_b): 3})
    assert all(confirmation for *_, confirmation in got)


def test_a_rerun_makes_only_the_timings_a_killed_one_left_missing():
    fast_b = Conv2DConfig(32, 16, 7, oh_bn=1)
    slow = Conv2DConfig(16, 16, 2, oh_bn=1)
    searches = [{index(A, slow): 2e-3}, {}, {index(B, fast_b): 1e-3, index(B, slow): 3e-3}, {index(C, slow): 2e-3}]
    timings = {conv_input_key(A, TARGET): Counter({index(A, fast_b): 3}),
               conv_input_key(C, TARGET): Counter({index(C, fast_b): 1})}
    made, calls, got = run(searches, timings)
    assert made == 2 and calls == [(C, fast_b)] * 2


def test_no_member_starts_its_timings_past_the_deadline():
    """Under a --time-budget the exchange has what the searches left: from the deadline on, no
    member starts (one that has started finishes its rounds)."""
    import time

    fast_b = Conv2DConfig(32, 16, 7, oh_bn=1)
    slow = Conv2DConfig(16, 16, 2, oh_bn=1)
    searches = [{index(A, slow): 2e-3}, {}, {index(B, fast_b): 1e-3, index(B, slow): 3e-3}, {index(C, slow): 2e-3}]
    calls = []

    def measure(w, c):
        calls.append(w)
        return 1e-3

    def exchange(deadline):
        calls.clear()
        made = exchange_siblings([A, OTHER, B, C], searches, {}, TARGET, measure=measure, callback=lambda w, m: None,
                                 deadline=deadline)
        return made, list(calls)

    assert exchange(None) == (6, [A] * 3 + [C] * 3)
    assert exchange(time.perf_counter() - 1) == (0, [])


def test_the_deadline_is_checked_before_each_member(monkeypatch):
    """A member that has started finishes its rounds; the next one does not start."""
    from graph_tuner import tuning

    fast_b = Conv2DConfig(32, 16, 7, oh_bn=1)
    slow = Conv2DConfig(16, 16, 2, oh_bn=1)
    searches = [{index(A, slow): 2e-3}, {}, {index(B, fast_b): 1e-3, index(B, slow): 3e-3}, {index(C, slow): 2e-3}]
    clock, calls = [0.0], []
    monkeypatch.setattr(tuning.time, "perf_counter", lambda: clock[0])

    def measure(w, c):  # each timing takes a second of the fake clock
        calls.append(w)
        clock[0] += 1.0
        return 1e-3

    made = exchange_siblings([A, OTHER, B, C], searches, {}, TARGET, measure=measure, callback=lambda w, m: None,
                             deadline=2.5)
    assert (made, calls) == (3, [A] * 3)
