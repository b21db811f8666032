"""The kernel tuner (kernels/tuner.py) with injected fake measuring functions, plus one real tiny run."""
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.tuner as tuner_mod
from graph_tuner.candidates import fallback_config as graph_fallback_config
from graph_tuner.loading import load_model
from kernels.config_space import divisors
from kernels.tuner import (COMPILE_HOST, INSTANTIATION_ERROR, UNKNOWN_ERROR, MeasureError, fallback_config, features,
                           hopeless, prior_log_time, supported, tune, tuning_space)
from kernels.workload import Conv2DWorkload

W3 = Conv2DWorkload((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1))
W1 = Conv2DWorkload((1, 64, 56, 56), (128, 64, 1, 1), strides=(2, 2))


def landscape(workload, c):
    """A made-up smooth landscape: best at oc_bn 32, ic_bn 16, 16-24 accumulators, unroll on."""
    acc = c.ow_bn * c.oh_bn * math.ceil(c.oc_bn / 16)
    return 1e-3 * (1 + abs(math.log2(c.oc_bn / 32)) + 0.5 * abs(math.log2(c.ic_bn / 16))
                   + abs(math.log2(acc / 20)) + (0.0 if c.unroll_kw else 0.2))


class Counting:
    def __init__(self, fn=landscape):
        self.fn, self.calls = fn, []

    def __call__(self, workload, config):
        self.calls.append(config)
        return self.fn(workload, config)


def test_respects_trials_and_never_measures_twice():
    fake = Counting()
    seen = []
    result = tune(W3, trials=25, measure=fake, callback=seen.append, lanes=16)
    indices = [m.index for m in result.measurements]
    assert len(fake.calls) == 25 == len(indices) == len(set(indices))
    assert seen == result.measurements  # the callback saw every measurement, in order
    space = tuning_space(W3)
    assert all(space.config(m.index) == m.config and space.entity_list(m.index) == m.entity for m in seen)


@settings(max_examples=25, deadline=None)
@given(c=st.sampled_from([3, 4, 8, 12]), o=st.sampled_from([4, 8, 16]), hw=st.integers(3, 9),
       k=st.sampled_from([1, 3]), trials=st.integers(1, 60), seed=st.integers(0, 3))
def test_random_workloads_unique_indices_within_space(c, o, hw, k, trials, seed):
    w = Conv2DWorkload((1, c, hw, hw), (o, c, k, k), padding=(k // 2,) * 4)
    result = tune(w, trials=trials, measure=landscape, lanes=16, seed=seed)
    indices = [m.index for m in result.measurements]
    assert len(indices) == len(set(indices)) == min(trials, len(tuning_space(w)))
    assert all(0 <= i < len(tuning_space(w)) for i in indices)


def test_exhaustive_on_a_small_space_finds_the_brute_force_optimum():
    w = Conv2DWorkload((1, 4, 5, 5), (8, 4, 3, 3), padding=(1, 1, 1, 1))
    space = tuning_space(w)
    result = tune(w, trials=10_000, measure=landscape, lanes=16)
    assert sorted(m.index for m in result.measurements) == list(range(len(space)))
    brute = min(landscape(w, space.config(i)) for i in range(len(space)))
    assert result.best.seconds == brute


def test_time_budget_stops_the_search(monkeypatch):
    clock = itertools.count()  # every reading of the clock advances it by one "second"
    monkeypatch.setattr(tuner_mod.time, "perf_counter", lambda: float(next(clock)))
    result = tune(W3, trials=1000, time_budget=20, measure=landscape, lanes=16)
    # start + 3 readings per trial (budget check, trial start, trial end): far fewer than 1000 trials
    assert 0 < len(result.measurements) <= 10


def test_measured_configs_are_skipped_and_count_toward_trials():
    first = tune(W3, trials=12, measure=landscape, lanes=16)
    previous = {m.index: m.seconds for m in first.measurements}
    previous[first.measurements[-1].index] = None  # a failed one is not retried either
    fake = Counting()
    second = tune(W3, trials=20, measure=fake, measured=previous, lanes=16)
    assert len(second.measurements) == 8 == len(fake.calls)
    assert not {m.index for m in second.measurements} & set(previous)
    assert tune(W3, trials=12, measure=fake, measured=previous, lanes=16).measurements == []


def test_errors_are_reported_with_tvm_codes_and_the_search_goes_on():
    def flaky(w, c):
        if c.ic_bn == 8:
            raise MeasureError(INSTANTIATION_ERROR, "refused")
        if c.oc_bn == 8:
            raise RuntimeError("boom")
        return landscape(w, c)

    result = tune(W3, trials=40, measure=flaky, lanes=16)
    codes = {(m.config.ic_bn == 8, m.config.oc_bn == 8 and m.config.ic_bn != 8): m.error_no
             for m in result.measurements}
    assert codes.get((True, False)) == INSTANTIATION_ERROR and codes.get((False, True)) == UNKNOWN_ERROR
    assert all(m.seconds is None and m.error for m in result.measurements if m.error_no)
    assert result.errors == sum(m.error_no != 0 for m in result.measurements) > 0
    assert len(result.measurements) == 40 and result.best.config.ic_bn != 8


def test_diverse_layout_pairs_and_default_first():
    # A landscape with one dominant pair must still yield >= 8 distinct (ic_bn, oc_bn) pairs.
    def one_pair(w, c):
        return 1e-4 if (c.ic_bn, c.oc_bn) == (16, 16) else 1e-2 * c.ow_bn

    for w in (W3, W1):
        result = tune(w, trials=16, measure=one_pair, lanes=16)
        assert len(result.pairs) >= 8
        assert result.measurements[0].config == fallback_config(w, 16)


def test_fallback_matches_the_graph_tuners_default_on_resnet18():
    for w, _ in load_model("resnet-18").distinct_workloads():
        assert fallback_config(w, 16) == graph_fallback_config(w)
        assert supported(w, fallback_config(w, 16))


def test_a_grouped_convs_default_is_buildable_and_measured_first():
    """Conv with 1 < groups < C: output blocks divide the channels per group, input blocks
    divide them or hold whole groups; the fallback's blocks are buildable too, so the search
    starts from it (an unbuildable default was skipped: no "default" baseline)."""
    w = Conv2DWorkload((1, 32, 16, 16), (64, 8, 3, 3), padding=(1, 1, 1, 1), groups=4)
    assert supported(w, fallback_config(w, 16)) and fallback_config(w, 16) == graph_fallback_config(w)
    result = tune(w, trials=3, measure=lambda wl, c: 1e-4 * c.ow_bn, lanes=16)
    assert result.measurements[0].config == fallback_config(w, 16)
    assert all((8 % c.config.ic_bn == 0 or (c.config.ic_bn % 8 == 0 and 32 % c.config.ic_bn == 0))
               and 16 % c.config.oc_bn == 0 for c in result.measurements)


def test_guided_search_finds_a_near_optimal_config():
    space = tuning_space(W3)
    all_times = sorted(landscape(W3, space.config(i)) for i in range(len(space)))
    result = tune(W3, trials=40, measure=landscape, lanes=16)
    # Within the best 2% of a 980-config space after 40 trials (random search: ~55% chance).
    assert result.best.seconds <= all_times[len(all_times) // 50]


@pytest.mark.parametrize("lanes", [8, 16])
def test_prior_keeps_the_register_tile_within_the_register_file(lanes):
    # AVX2's 16 ymm registers hold a third of the accumulators AVX-512's 32 zmm do: the
    # prior's favourite tile must fit the host's file (28 accumulators spill on AVX2).
    from kernels.config import Conv2DConfig
    from kernels.tuner import max_accumulators, prior_log_time

    space = tuning_space(W3)
    best = min((space.config(i) for i in range(len(space))), key=lambda c: prior_log_time(W3, c, lanes))
    acc = best.ow_bn * best.oh_bn * math.ceil(best.oc_bn / lanes)
    assert acc <= max_accumulators(lanes)
    assert best.oc_bn % lanes == 0  # full vectors
    fits, spills = Conv2DConfig(16, 16, 7), Conv2DConfig(16, 16, 14)  # 14 / 28 accumulators on AVX2
    assert prior_log_time(W3, fits, 8) < prior_log_time(W3, spills, 8)
    assert prior_log_time(W3, spills, 16) < prior_log_time(W3, fits, 16)  # 7 / 14 on AVX-512: 14 is nearer 20


def test_depthwise_only_tries_aligned_blocks():
    w = Conv2DWorkload((1, 16, 8, 8), (16, 1, 3, 3), padding=(1, 1, 1, 1), groups=16)
    result = tune(w, trials=10_000, measure=landscape, lanes=16)
    assert all(m.config.ic_bn == m.config.oc_bn for m in result.measurements)
    n = len(divisors(16))
    assert len(result.measurements) + result.unsupported == len(tuning_space(w))
    assert result.unsupported == len(tuning_space(w)) * (n - 1) // n


def test_bad_arguments():
    with pytest.raises(ValueError):
        tune(W3, trials=0, measure=landscape)
    with pytest.raises(ValueError):
        tune(W3, time_budget=0, measure=landscape)


def test_real_kernel_timer_on_a_tiny_workload():
    w = Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1))
    result = tune(w, trials=3, measure=tuner_mod.KernelTimer(min_repeat_ms=1, repeat=2))
    assert len(result.measurements) == 3 and all(m.ok and m.seconds > 0 for m in result.measurements)
    assert all(m.elapsed >= m.seconds for m in result.measurements)


def test_kernel_timer_reports_build_errors_as_tvm_codes():
    from kernels.config import Conv2DConfig

    w = Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1))
    with pytest.raises(MeasureError) as e:
        tuner_mod.KernelTimer()(w, Conv2DConfig(ic_bn=3, oc_bn=16, ow_bn=4))  # 3 does not divide 16
    assert e.value.error_no in (INSTANTIATION_ERROR, COMPILE_HOST)


def test_kernel_timer_times_the_fused_epilogue(calls_to):
    """A workload's epilogue (residual read, second output) is built and fed real buffers, as
    the search's build (kernels.jit.search_build)."""
    import kernels.conv2d as conv2d
    from kernels.config import Conv2DConfig

    w = Conv2DWorkload((1, 16, 8, 8), (32, 16, 1, 1))
    epilogue = dict(bias=True, residual=True, activation=None, affine_out=True, affine_activation="relu")
    built = calls_to(conv2d, "build_conv2d")
    timer = tuner_mod.KernelTimer(min_repeat_ms=1, repeat=2, epilogues={w: epilogue})
    assert timer(w, Conv2DConfig(ic_bn=16, oc_bn=16, ow_bn=4)) > 0
    assert [kw for _, kw in built] == [dict(epilogue, search=True)]
    assert tuner_mod.KernelTimer(min_repeat_ms=1, repeat=2)(w, Conv2DConfig(ic_bn=16, oc_bn=16, ow_bn=4)) > 0
    assert built[-1][1] == {"search": True}


def test_a_timing_runs_only_its_repeats_cold_and_a_finalist_keeps_its_arguments(cold_calls, calls_to,
                                                                                  monkeypatch):
    """The looks warm the kernel and size the repeats: no cold warm-up or calibration run on
    top. A config timed again (a finalist's rounds) reuses its bound arguments, as far as
    BOUND_BYTES keeps them."""
    from kernels.config import Conv2DConfig

    w = Conv2DWorkload((1, 16, 8, 8), (32, 16, 1, 1))
    made = calls_to(tuner_mod, "kernel_arguments")
    timer = tuner_mod.KernelTimer(min_repeat_ms=1e-6, repeat=3)  # one call a repeat
    a, b = Conv2DConfig(16, 16, 4), Conv2DConfig(16, 32, 4)
    assert timer(w, a) > 0 and len(cold_calls) == 3
    timer(w, a), timer(w, b), timer(w, a)
    assert len(made) == 2 and len(cold_calls) == 12
    monkeypatch.setattr(tuner_mod, "BOUND_BYTES", 1)  # room for one: each evicts the other
    timer(w, b), timer(w, a), timer(w, b)  # kept, then made again twice
    assert len(made) == 4


def test_kernel_timer_rotates_the_parameters_and_keeps_the_activations(cold_calls):
    """Weights, bias and scale/shift are cold on every timed call (copies in turn), the
    activations are the same buffers each call (warm, as the layer before left them)."""
    from kernels.config import Conv2DConfig

    w = Conv2DWorkload((1, 16, 8, 8), (32, 16, 1, 1))
    epilogue = dict(bias=True, residual=True, affine_out=True)
    tuner_mod.KernelTimer(min_repeat_ms=1, repeat=3, epilogues={w: epilogue})(w, Conv2DConfig(16, 16, 4))
    assert len(cold_calls) >= 4
    for name in ("weight", "bias", "scale2", "shift2"):
        assert len({call[name] for call in cold_calls}) == 3, name
    for name in ("data", "out", "residual", "out2"):
        assert len({call[name] for call in cold_calls}) == 1, name


def test_tail_waste_counts_a_plane_run_as_one_row():
    from kernels.config import Conv2DConfig
    from kernels.tuner import _tile

    w = Conv2DWorkload((1, 512, 7, 7), (2048, 512, 1, 1))  # 128 output blocks: one row of 49 pixels
    assert _tile(w, Conv2DConfig(16, 16, 5), 8)[2] == pytest.approx(1 / 49)  # 10 tiles of 5 cover 50
    assert _tile(w, Conv2DConfig(16, 16, 5, oh_bn=2), 8)[2] == pytest.approx(3 / 7)  # rows of 7: 2 tiles cover 10


def test_tail_waste_follows_the_kernels_item_order(two_threads):
    """Rows first (kernels.conv2d.takes_rows_first) an item joins 2 rows of 56 pixels; with an
    input prologue the kernel goes channel blocks first and joins 28: the cost model sees which."""
    from kernels.config import Conv2DConfig
    from kernels.tuner import _tile

    w, cfg = Conv2DWorkload((1, 128, 56, 56), (128, 128, 1, 1)), Conv2DConfig(16, 16, 10)
    assert _tile(w, cfg, 16)[2] == pytest.approx(8 / 112)  # 12 tiles of 10 cover 120
    assert _tile(w, cfg, 16, prologue=True)[2] == pytest.approx(2 / 1568)  # 157 cover 1570


def test_transfer_phase_runs_the_best_tile_under_every_input_block():
    """The last quarter of the trials: the fastest tile under the input blocks it lacks, so the
    graph tuner has a fast config whichever layout the layer before hands over."""
    w = Conv2DWorkload((1, 64, 14, 14), (64, 64, 1, 1))

    def landscape(wl, c):  # oc16 x ow7 is the best tile; ic_bn barely matters
        return 1e-3 * (1 + abs(c.oc_bn - 16) / 8 + abs(c.ow_bn - 7) / 4 + (c.oh_bn - 1) + 0.01 * abs(c.ic_bn - 16) / 16)

    result = tune(w, trials=60, measure=landscape, lanes=8, seed=0)
    best = result.best.config
    tile = (best.oc_bn, best.ow_bn, best.oh_bn, best.unroll_kw)
    under = {m.config.ic_bn for m in result.measurements
             if (m.config.oc_bn, m.config.ow_bn, m.config.oh_bn, m.config.unroll_kw) == tile}
    assert under == set(divisors(64))


@pytest.mark.parametrize("prologue", [False, True])
def test_the_searchs_model_sees_what_features_and_the_prior_say(prologue):
    # _Search works out each config's register tile once for both; the public functions stand alone.
    for w in (W3, Conv2DWorkload((1, 256, 28, 28), (128, 256, 1, 1)),
              Conv2DWorkload((1, 192, 17, 17), (192, 192, 7, 1), padding=(3, 0, 3, 0))):
        configs = tuning_space(w).configs()
        search = tuner_mod._Search(w, configs, list(range(len(configs))), {}, 20, 16, 8, 0.2, 0, None, (), prologue)
        assert (search.feats == [features(w, c, 16, prologue) for c in configs]).all()
        assert search.prior.tolist() == [prior_log_time(w, c, 16, prologue) for c in configs]


def test_hopeless_register_tiles_are_never_tried():
    """Tiles of more than twice the register file's accumulators spill on every step: the
    search skips them (they cost seconds to compile), and counts them."""
    result = tune(W3, trials=10_000, measure=landscape, lanes=8)
    space = tuning_space(W3)
    assert result.hopeless > 0
    assert not any(hopeless(W3, m.config, 8) for m in result.measurements)
    assert len(result.measurements) + result.unsupported + result.hopeless == len(space)
    widest = max(tuner_mod._tile(W3, m.config, 8)[0] for m in result.measurements)
    assert 16 < widest <= 32  # spilling tiles up to twice the 16 registers are still tried


def test_prologue_configs_whose_buffer_overflows_l1_are_never_tried():
    """A conv timed with an input prologue transforms each tile's pixels into a stack buffer:
    configs whose buffer overflows L1 (an ``ic_bn`` of the whole input, say) are skipped and
    counted as hopeless; without the prologue they are tried as before."""
    from kernels.conv2d import prologue_bytes
    from kernels.jit import host_cpu

    w = Conv2DWorkload((1, 512, 7, 7), (64, 512, 1, 1))

    class Timed:  # a measure that says it times the workload with a prologue, as KernelTimer does
        def __init__(self, prologue):
            self.epilogues = {w: {"prologue": prologue}}

        def __call__(self, wl, c):
            return landscape(wl, c)

    l1 = host_cpu().l1d_bytes
    space = tuning_space(w)
    over = [c for c in space.configs() if supported(w, c) and prologue_bytes(w, c) > l1]
    assert over  # the space has some
    plain, fused = (tune(w, trials=10_000, measure=Timed(p), lanes=8) for p in (False, True))
    assert any(prologue_bytes(w, m.config) > l1 for m in plain.measurements)
    assert not any(prologue_bytes(w, m.config) > l1 for m in fused.measurements)
    assert fused.hopeless - plain.hopeless == len({c for c in over if not hopeless(w, c, 8)})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_resumed_search_measures_what_the_unkilled_one_would(seed):
    """A rerun after a kill passes what the log holds as ``measured``: from any point, the
    rest of the search (exploration included) must be the unkilled run's."""
    full = tune(W1, trials=30, measure=landscape, lanes=16, seed=seed, epsilon=0.5)
    order = [m.index for m in full.measurements]
    assert len(order) == 30
    for k in (1, 9, 14, 22, 29):
        logged = {m.index: m.seconds for m in full.measurements[:k]}
        rest = tune(W1, trials=30, measure=landscape, lanes=16, seed=seed, epsilon=0.5,
                    measured=logged)
        assert [m.index for m in rest.measurements] == order[k:], k


def test_finalists_are_resumed_round_by_round():
    """Re-timings already logged (``retimed``) are not made again: each finalist ends with
    CONFIRM_ROUNDS, in rounds that start one further along, whatever a killed run did."""
    full = tune(W1, trials=16, measure=landscape, lanes=16, confirm=4)
    chosen = [m.index for m in full.confirmations[:4]]
    rounds = chosen + chosen[1:] + chosen[:1] + chosen[2:] + chosen[:2]
    assert [m.index for m in full.confirmations] == rounds
    logged = {m.index: m.seconds for m in full.measurements}
    for cut in range(len(full.confirmations) + 1):  # killed after `cut` re-timings
        done = dict.fromkeys(chosen, 0)
        for m in full.confirmations[:cut]:
            done[m.index] += 1
        rest = tune(W1, trials=16, measure=landscape, lanes=16, confirm=4, measured=logged,
                    retimed=done)
        assert rest.measurements == []
        assert [m.index for m in rest.confirmations] == [m.index for m in full.confirmations[cut:]]


def test_finalists_do_not_depend_on_the_order_configs_were_measured_in():
    space = tuning_space(W1)
    configs = [space.config(i) for i in range(len(space))]
    # rounded to 0.1 ms: many ties
    seconds = {i: landscape(W1, configs[i]) // 1e-4 * 1e-4 for i in range(0, len(space), 3)}
    reordered = dict(reversed(list(seconds.items())))
    assert tuner_mod.finalists(configs, seconds, 6) == tuner_mod.finalists(configs, reordered, 6)
    chosen = tuner_mod.finalists(configs, seconds, 6)
    assert len({(configs[i].ic_bn, configs[i].oc_bn) for i in chosen}) == 6
    assert [seconds[i] for i in chosen] == sorted(seconds[i] for i in chosen)


W3_WIDER = Conv2DWorkload((1, 96, 56, 56), (64, 96, 3, 3), padding=(1, 1, 1, 1))  # W3 but for its input channels


def _warm_from(workload, trials=40):
    cold = tune(workload, trials=trials, measure=landscape, lanes=16)
    return [(workload, m.config, m.seconds) for m in cold.measurements if m.ok]


def test_a_warm_search_measures_its_siblings_finalists_first():
    """After the default, the sibling's fastest config of each of its 8 fastest layout pairs
    (those that are configs of this space), fastest first."""
    warm = _warm_from(W3)
    space = tuning_space(W3_WIDER)
    configs = {space.config(i) for i in range(len(space))}
    fastest = {}
    for _, c, s in sorted(warm, key=lambda t: t[2]):
        if c in configs and not hopeless(W3_WIDER, c, 16):
            fastest.setdefault((c.ic_bn, c.oc_bn), c)
    default = fallback_config(W3_WIDER, 16)
    expected = [c for c in list(fastest.values())[:8] if c != default]  # the default is measured already
    assert len(expected) >= 7
    result = tune(W3_WIDER, trials=12, measure=landscape, lanes=16, warm=warm)
    assert result.measurements[0].config == default
    assert [m.config for m in result.measurements[1:1 + len(expected)]] == expected


def odd(workload, c):
    """A landscape the prior misjudges: best at 4 accumulators of oc_bn 64 (4 x ow_bn 1), ic_bn 8."""
    return 1e-3 * (1 + abs(math.log2(c.oc_bn / 64)) + abs(math.log2(c.ic_bn / 8)) + abs(c.ow_bn * c.oh_bn - 1)
                   + (0.0 if c.unroll_kw else 0.2))


def test_a_short_warm_search_finds_what_a_longer_cold_one_does():
    cold_sibling = tune(W3, trials=60, measure=odd, lanes=16)
    warm = [(W3, m.config, m.seconds) for m in cold_sibling.measurements if m.ok]
    cold = tune(W3_WIDER, trials=12, measure=odd, lanes=16)
    warmed = tune(W3_WIDER, trials=12, measure=odd, lanes=16, warm=warm)
    best_known = tune(W3_WIDER, trials=60, measure=odd, lanes=16).best.seconds
    assert warmed.best.seconds <= best_known < cold.best.seconds


@pytest.mark.parametrize("k", [1, 6, 9, 13])
def test_a_resumed_warm_search_measures_what_the_unkilled_one_would(k):
    warm = _warm_from(W3)
    full = tune(W3_WIDER, trials=20, measure=landscape, lanes=16, warm=warm, epsilon=0.5)
    order = [m.index for m in full.measurements]
    logged = {m.index: m.seconds for m in full.measurements[:k]}
    rest = tune(W3_WIDER, trials=20, measure=landscape, lanes=16, warm=warm, epsilon=0.5, measured=logged)
    assert [m.index for m in rest.measurements] == order[k:]
