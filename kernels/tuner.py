"""The kernel tuner: search one conv workload's AutoTVM config space for fast schedules.

Knows nothing of records or solvers: it measures configs (by index into
:mod:`kernels.config_space`) and hands each :class:`Measurement` to a callback, so
the caller can log it at once. The measuring function is injected
(``measure(workload, config) -> seconds``, raising :class:`MeasureError` on failure);
the default, :class:`KernelTimer`, compiles with :mod:`kernels.conv2d` and times with
:mod:`kernels.timing`.

Search order (it stops at ``trials`` -- counting configs measured by earlier runs --
or at ``time_budget`` seconds, or when the space is exhausted), over the configs the
codegen can build and whose register tile is not :func:`hopeless`:

1. the default config: AutoTVM's fallback schedule with SIMD-width blocks
   (:func:`fallback_config`), so the graph tuner's "untuned" baseline is a measurement;
2. diversity: one config for each of the most plausible ``(ic_bn, oc_bn)`` layout pairs
   (blocks near the SIMD width first) until ``min_pairs`` pairs have a measurement --
   the graph tuner needs several layouts per layer to trade kernel time against
   layout transforms; the config of a pair is the one the cost model ranks best. With
   ``warm`` timings of related workloads, the fastest of their configs that are candidates
   here, one for each of the ``min_pairs`` fastest layout pairs, come first;
3. guided: a ridge regression of log(time) on config features (:func:`features`),
   refitted after every measurement, picks the best-predicted unmeasured config; with
   probability ``epsilon`` a random one from the better-predicted half instead
   (exploration, so a wrong model cannot trap the search);
4. transfer: the last ``trials // 4`` trials put the fastest register tiles (``oc_bn``,
   ``ow_bn``, ``oh_bn``, ``unroll_kw``) under the input blocks they have not run with
   (:func:`transfer_pick`). The graph tuner needs a fast config for every input layout a
   neighbour may hand over (a layout transform can cost as much as the conv saves), and a
   tile fast under one ``ic_bn`` is usually fast under the others; the guided search
   alone had left ResNet-50's 512->128 1x1 conv with its best tile (oc32 x ow3) measured
   under ``ic_bn`` 512 only.

Compiling is most of a trial's time (LLVM, ~60% on DenseNet-121), so the search picks in
pairs: the second config of a pair is the one it would pick after the first if the first
took its predicted time (:meth:`_Search.guess_after`; batch Bayesian optimisation's
"kriging believer"). A ``measure`` with a ``prepare(workload, config, guesses)`` method
(:class:`KernelTimer`) is asked to compile a pair's first config and, on a helper process
meanwhile, its second, which then only links. The pairs depend on the timings alone, never
on the measure, so a rerun after a kill resumes mid-pair as the unkilled run went on.
(Guessing the next pick without committing to it was right 40-44% of the time.)

Before there is data to fit, the model's place is taken by a prior
(:func:`prior_log_time`): full vectors and accumulators filling ~5/8 of the vector
register file (20 on AVX-512, 10 on AVX2) are good.

>>> from kernels.workload import Conv2DWorkload
>>> w = Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 1, 1, 1))
>>> fake = lambda wl, c: 1e-3 * (1 + abs(c.oc_bn - 16) + abs(c.ow_bn - 4))  # a made-up landscape
>>> result = tune(w, trials=20, measure=fake, lanes=16, seed=0)
>>> len(result.measurements), len(result.pairs) >= 8
(20, True)
>>> result.best.config.oc_bn, result.measurements[0].config == fallback_config(w)
(16, True)
"""
from __future__ import annotations

import copy
import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping, Sequence

import numpy as np

from kernels.config import Conv2DConfig
from kernels.config_space import Space, fallback_config, tuning_space
# supported: the codegen's own checks, never try what cannot build
from kernels.conv2d import columns_first, kernel_workload, reduction_block, supported
from kernels.depthwise import runs_lanewise
from kernels.threads import num_threads
from kernels.workload import Conv2DWorkload

__all__ = [
    "KernelTimer", "MeasureError", "Measurement", "TuneResult", "fallback_config", "features",
    "finalists", "hopeless", "max_accumulators", "prior_log_time", "supported", "timed_with_prologue",
    "transfer_pick", "tune", "tuning_space", "worth_trying",
]

# TVM's MeasureErrorNo codes (autotvm/measure/measure.py), written into records as error_no.
INSTANTIATION_ERROR = 1  # the config is invalid for the template (our codegen refused it)
COMPILE_HOST = 2  # LLVM failed
RUNTIME_DEVICE = 4  # the kernel failed while running/timing
UNKNOWN_ERROR = 8

# Re-timing rounds of the winners after the search. Two timings of one config in one
# run differed by 0.86-1.48x (10th-90th percentile) in session 6's ResNet-18 log, up to
# 2.7x in ResNet-50's: one more timing each left near-ties to chance. With 3 rounds
# (session 7's logs) a winner's search time is 0.94-0.96x the median of its re-timings
# (the winner's curse), and its 3 re-timings span 1.19-1.27x (median over winners).
CONFIRM_ROUNDS = 3



def vector_registers(lanes: int) -> int:
    """Architectural vector registers at SIMD width ``lanes``: AVX-512 has 32, AVX2 and SSE 16."""
    return 32 if lanes >= 16 else 16


def max_accumulators(lanes: int) -> int:
    """Accumulators a register tile can hold without spilling: 4 registers stay free for the
    broadcast input, the weight vectors and addresses (28 of AVX-512's 32, 12 of AVX2's 16).

    >>> max_accumulators(16), max_accumulators(8)
    (28, 12)
    """
    return vector_registers(lanes) - 4


def hopeless(workload: Conv2DWorkload, config: Conv2DConfig, lanes: int, prologue: bool = False) -> bool:
    """Whether the register tile needs more than twice the vector register file in
    accumulators, so that it spills on every step, or (a conv timed with an input
    ``prologue``) the buffer its prologue transforms the tile's pixels into overflows L1
    (:func:`kernels.conv2d.prologue_bytes`). Not worth a trial: in session 7's first
    znver3 logs none of the 200 such register tiles came within 2.0x of its workload's best (those of
    17-32 accumulators: 1.5x), and ResNet-50's 159 took 407 s of its 760 s of tuning, an
    ``oc_bn`` of 1024 or 2048 compiling for 4-20 s. Of DenseNet-121's prologue configs in nine
    logs of four CPUs (session 39), none of the 31 whose buffer overflowed the CPU's L1 came within
    1.31x of its workload's best, and an ``ic_bn`` of a whole concatenation (768-960 channels)
    compiled for 10-22 s: they took up to 79 s of a tune.

    >>> w = Conv2DWorkload((1, 512, 7, 7), (2048, 512, 1, 1))
    >>> hopeless(w, Conv2DConfig(64, 2048, 1), 8), hopeless(w, Conv2DConfig(64, 32, 7), 8)
    (True, False)
    >>> dense = Conv2DWorkload((1, 896, 14, 14), (128, 896, 1, 1))
    >>> [hopeless(dense, Conv2DConfig(ic, 8, 11), 8, prologue=True) for ic in (32, 896)]
    [False, True]
    """
    from kernels.conv2d import prologue_bytes
    from kernels.jit import host_cpu

    if _accumulators(config, lanes) > 2 * vector_registers(lanes):  # in any item order
        return True
    if not prologue:
        return False
    # The buffer of a whole oh_bn x ow_bn tile bounds it: only configs over L1 so work out the
    # kernel's tile (a DenseNet-121 tune asks of 172k configs: 3.1 s, 0.7 s so, the same answers).
    l1 = host_cpu().l1d_bytes
    return 2 * config.oh_bn * config.ow_bn * config.ic_bn * 4 > l1 and prologue_bytes(workload, config) > l1


class MeasureError(Exception):
    """A config that could not be measured; ``error_no`` is TVM's code (1 instantiation, 4 runtime, ...)."""

    def __init__(self, error_no: int, message: str):
        super().__init__(message)
        self.error_no = error_no


@dataclass(frozen=True)
class Measurement:
    """One trial: config ``index`` of the space, its record entity, seconds (None if it failed)."""

    index: int
    entity: list  # the record form: [[name, "sp"|"ot", value], ...]
    config: Conv2DConfig
    seconds: float | None
    error_no: int = 0
    error: str = ""
    elapsed: float = 0.0  # wall seconds the trial took (compile + timing): AutoTVM's all_cost
    confirmation: bool = False  # a re-timing of a winner, after the search

    @property
    def ok(self) -> bool:
        return self.error_no == 0 and self.seconds is not None


@dataclass
class TuneResult:
    """The measurements of one :func:`tune` call (not those passed in as ``measured``)."""

    workload: Conv2DWorkload
    space: Space
    measurements: list[Measurement] = field(default_factory=list)
    previous: dict[int, float | None] = field(default_factory=dict)  # index -> seconds from earlier runs
    unsupported: int = 0  # configs of the space the codegen cannot build (never tried)
    hopeless: int = 0  # configs whose register tile spills or prologue overflows L1 (never tried; see hopeless())
    confirmations: list[Measurement] = field(default_factory=list)  # re-timings of the winners, round by round

    @property
    def best(self) -> Measurement | None:
        """The fastest successful measurement of this call."""
        ok = [m for m in self.measurements if m.ok]
        return min(ok, key=lambda m: m.seconds) if ok else None

    @property
    def pairs(self) -> set[tuple[int, int]]:
        """Distinct (ic_bn, oc_bn) layout pairs with a successful measurement (this call or earlier)."""
        out = {(m.config.ic_bn, m.config.oc_bn) for m in self.measurements if m.ok}
        for i, s in self.previous.items():
            if s is not None:
                c = self.space.config(i)
                out.add((c.ic_bn, c.oc_bn))
        return out

    @property
    def errors(self) -> int:
        return sum(not m.ok for m in self.measurements)


def _accumulators(c: Conv2DConfig, lanes: int) -> int:
    """Vector registers a config's register tile accumulates in."""
    return c.ow_bn * c.oh_bn * math.ceil(c.oc_bn / lanes)


_Tile = tuple[int, float, float]


def _tile(workload: Conv2DWorkload, c: Conv2DConfig, lanes: int, prologue: bool = False,
          threads: int | None = None) -> _Tile:
    """(accumulator registers, lane utilisation, fraction of wasted columns) of a register tile
    (``prologue``: the kernel transforms its input, which decides its rows' order and joins;
    ``threads``: the kernel's, default :func:`kernels.threads.num_threads`)."""
    vectors = math.ceil(c.oc_bn / lanes)
    utilisation = c.oc_bn / (vectors * lanes)
    main = kernel_workload(workload, c, threads, prologue=prologue)  # rows a 1x1 kernel joins into one have one tail
    ow = main.out_height if columns_first(workload, c) else main.out_width  # or tiles run down a column
    waste = (math.ceil(ow / c.ow_bn) * c.ow_bn - ow) / ow  # tail tiles do less work per loop
    return _accumulators(c, lanes), utilisation, waste


def features(workload: Conv2DWorkload, config: Conv2DConfig, lanes: int = 16, prologue: bool = False) -> np.ndarray:
    """What the cost model sees of a config: block sizes, register tile, tails, options.

    >>> features(Conv2DWorkload((1, 16, 8, 8), (16, 16, 3, 3)), Conv2DConfig(16, 16, 4)).shape
    (11,)
    """
    return _features(config, _tile(workload, config, lanes, prologue), lanes)


def _features(config: Conv2DConfig, tile: _Tile, lanes: int) -> np.ndarray:
    acc, utilisation, waste = tile
    l_ic, l_oc, l_acc = math.log2(config.ic_bn), math.log2(config.oc_bn), math.log2(acc)
    return np.array([
        l_ic, l_ic ** 2, l_oc, l_oc ** 2, math.log2(utilisation), l_acc, l_acc ** 2,
        max(0, acc - max_accumulators(lanes)), waste, float(config.unroll_kw), float(config.oh_bn > 1),
    ])


def prior_log_time(workload: Conv2DWorkload, config: Conv2DConfig, lanes: int = 16, prologue: bool = False) -> float:
    """A guess (up to a constant) of log(time) before anything is measured.

    FMA throughput needs full vectors and enough independent accumulators to hide
    latency without spilling: ~5/8 of the register file (20 of AVX-512's 32, 10 of AVX2's
    16; two FMA pipes of latency 4 need 8 at least); tiny reduction blocks mean short inner
    loops. A dense grouped conv's input block of several whole groups reduces over one group's
    channels (:func:`kernels.conv2d.reduction_block`), as short a loop as a block of one group.

    >>> g4 = Conv2DWorkload((1, 128, 56, 56), (128, 4, 3, 3), padding=(1, 1, 1, 1), groups=32)
    >>> prior_log_time(g4, Conv2DConfig(64, 4, 8)) == prior_log_time(g4, Conv2DConfig(4, 4, 8))
    True
    """
    return _prior(workload, config, _tile(workload, config, lanes, prologue), lanes)


def _prior(workload: Conv2DWorkload, config: Conv2DConfig, tile: _Tile, lanes: int) -> float:
    acc, utilisation, waste = tile
    spill = max(0, acc - max_accumulators(lanes))
    ideal = vector_registers(lanes) * 5 / 8
    g = workload.kernel_shape[1]
    inner = config.ic_bn
    if g > 1 and not runs_lanewise(workload, config):
        inner = reduction_block(workload, config)
    elif g > 1:
        # Blocks of whole groups (kernels.depthwise): each FMA waits on its shuffle, and a tap's g
        # weight vectors stay live (KW taps' when unrolled). ResNeXt-50's groups of 4 alone on the
        # rocketlake Xeon: 8 accumulators fastest (4 and 14 took 1.10x and 1.25x its time).
        live = g * math.ceil(config.oc_bn / lanes) * (workload.kernel_shape[3] if config.unroll_kw else 1)
        ideal = max(2, min(8, vector_registers(lanes) - live - 2))
    return (-math.log(utilisation) + abs(math.log2(acc / ideal)) * 0.5 + spill * 0.2 + waste
            + 0.3 * max(0.0, math.log2(min(8, lanes) / inner)))


def _ridge(x: np.ndarray, y: np.ndarray, alpha: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """Fit y ~ x with an L2 penalty on standardised columns; returns the predictor."""
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    z = (x - mean) / std
    a = np.vstack([np.hstack([z, np.ones((len(z), 1))]),
                   np.hstack([np.sqrt(alpha) * np.eye(z.shape[1]), np.zeros((z.shape[1], 1))])])
    b = np.concatenate([y, np.zeros(z.shape[1])])
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    return lambda q: np.hstack([(q - mean) / std, np.ones((len(q), 1))]) @ coef


def transfer_pick(configs: list[Conv2DConfig], seconds: Mapping[int, float | None], unmeasured: Iterable[int],
                  lanes: int) -> int | None:
    """The next config of the transfer phase: the fastest measured register tile's first
    input block it has not run with (blocks nearest the SIMD width first); then the next
    tile's. None when the tiles measured have run under every input block.

    >>> cs = [Conv2DConfig(ic, 32, 3) for ic in (8, 16, 512)] + [Conv2DConfig(ic, 8, 13) for ic in (8, 16, 512)]
    >>> transfer_pick(cs, {2: 1.0, 4: 1.5}, [0, 1, 3, 5], lanes=8)  # oc32 x ow3 (1.0 s) under ic8
    0
    >>> transfer_pick(cs, {0: 1.1, 1: 1.2, 2: 1.0, 4: 1.5}, [3, 5], lanes=8)  # then oc8 x ow13's
    3
    """
    left = {}
    for i in unmeasured:
        c = configs[i]
        left.setdefault((c.oc_bn, c.ow_bn, c.oh_bn, c.unroll_kw), []).append(i)
    ranked = sorted((s, i) for i, s in seconds.items() if s is not None)
    for _, i in ranked:
        c = configs[i]
        todo = left.get((c.oc_bn, c.ow_bn, c.oh_bn, c.unroll_kw))
        if todo:
            return min(todo, key=lambda j: abs(math.log2(configs[j].ic_bn / lanes)))
    return None


@dataclass
class _Search:
    """How :func:`tune` picks the next config: ``seconds`` (config index -> search seconds,
    None: failed) grows as it measures; the model's features and prior are per config."""

    workload: Conv2DWorkload
    configs: list[Conv2DConfig]  # the space, by index
    candidates: list[int]  # buildable and not hopeless
    seconds: dict[int, float | None]
    trials: int
    lanes: int
    min_pairs: int
    epsilon: float
    seed: int
    default: int | None  # AutoTVM's fallback schedule, measured first
    warm: Sequence[tuple[Conv2DWorkload, Conv2DConfig, float]] = ()  # a related workload's timings
    prologue: bool = False  # the kernel timed transforms its input (kernels.conv2d.takes_rows_first)
    feats: np.ndarray = field(init=False)
    prior: np.ndarray = field(init=False)
    warm_index: np.ndarray = field(init=False)
    warm_feats: np.ndarray = field(init=False)
    warm_residual: np.ndarray = field(init=False)
    seeds: list[int] = field(init=False)  # the warm workload's fastest config of each pair, fastest first

    def __post_init__(self):
        # Each config's tile once, for the threads the kernels will run on (DenseNet-121's 226k
        # configs took 5 s so, config by config, twice each, with the threads looked up each time).
        threads = num_threads()
        tiles = [_tile(self.workload, c, self.lanes, self.prologue, threads) for c in self.configs]
        self.feats = np.array([_features(c, t, self.lanes) for c, t in zip(self.configs, tiles)])
        self.prior = np.array([_prior(self.workload, c, t, self.lanes) for c, t in zip(self.configs, tiles)])
        # Scaled by FLOPs to this workload's size, as residuals from its prior: the model
        # starts from where the related workload's configs landed instead of the prior alone.
        warm = [(c, s * self.workload.flops / w.flops) for w, c, s in self.warm if s and s > 0]
        where = {c: i for i, c in enumerate(self.configs)}
        self.warm_index = np.array([where.get(c, -1) for c, _ in warm], dtype=int)  # -1: not in this space
        self.warm_feats = np.array([features(self.workload, c, self.lanes, self.prologue)
                                    for c, _ in warm]).reshape(len(warm), self.feats.shape[1])
        self.warm_residual = np.array([math.log(s) - prior_log_time(self.workload, c, self.lanes, self.prologue)
                                       for c, s in warm])
        # Measured first (after the default): the fastest warm config of each of the fastest
        # layout pairs, among this space's candidates (a pair whose fastest is not one offers
        # its next). They stand in for the diversity phase's layout pairs.
        allowed = set(self.candidates)
        scaled: dict[int, float] = {}
        for (c, s), i in zip(warm, self.warm_index):
            if i in allowed:
                scaled[int(i)] = min(scaled.get(int(i), math.inf), s)
        self.seeds = finalists(self.configs, scaled, self.min_pairs)

    def predicted(self) -> np.ndarray:
        """Predicted log times. The model learns the measured landscape's departure from the
        prior, so with few points (strongly regularised) it stays close to the prior instead
        of extrapolating."""
        ok = [(i, s) for i, s in self.seconds.items() if s is not None and s > 0]
        # A warm row of a config measured here gives way to this workload's own timing.
        warm = np.array([i not in self.seconds for i in self.warm_index], dtype=bool)
        n = len(ok) + int(warm.sum())
        if n < 3:
            return self.prior
        idx = np.array([i for i, _ in ok], dtype=int)
        x = np.vstack([self.feats[idx], self.warm_feats[warm]])
        residual = np.concatenate([np.log([s for _, s in ok]) - self.prior[idx], self.warm_residual[warm]])
        return self.prior + _ridge(x, residual, alpha=max(1.0, 30.0 / n))(self.feats)

    def measured_pairs(self) -> set[tuple[int, int]]:
        return {(self.configs[i].ic_bn, self.configs[i].oc_bn) for i, s in self.seconds.items() if s is not None}

    def guess_after(self, i: int) -> int | None:
        """The config :meth:`pick` would choose after ``i`` if ``i`` took its predicted time:
        the second of the pair ``i`` starts (:meth:`next_pick`), compiled while ``i`` compiles."""
        guess = copy.copy(self)
        guess.seconds = {**self.seconds, i: float(np.exp(self.predicted()[i]))}
        return guess.pick()

    def next_pick(self) -> int | None:
        """The next config to measure, None when none is left: with an even number measured,
        the first of a pair (:meth:`pick`); else the pair's second, what :meth:`guess_after` said
        when the last one measured was picked (recomputed from the timings before it, so a
        rerun resuming mid-pair measures it too)."""
        if len(self.seconds) % 2:
            last = next(reversed(self.seconds))
            before = copy.copy(self)
            before.seconds = {i: s for i, s in self.seconds.items() if i != last}
            second = before.guess_after(last)
            if second is not None:
                return second
        return self.pick()

    def pick(self) -> int | None:
        """The best config to measure next by what is measured, None when none is left."""
        configs, seconds, lanes = self.configs, self.seconds, self.lanes
        unmeasured = [i for i in self.candidates if i not in seconds]
        if not unmeasured:
            return None
        if len(seconds) >= self.trials - self.trials // 4:
            moved = transfer_pick(configs, seconds, unmeasured, lanes)
            if moved is not None:
                return moved
        if self.default is not None and self.default not in seconds:  # tune() pins only a buildable one
            return self.default
        seed = next((i for i in self.seeds if i not in seconds), None)
        if seed is not None:
            return seed
        pred = self.predicted()
        have = self.measured_pairs()
        if len(have) < self.min_pairs:
            # A pair whose config failed is tried: another of its configs would likely fail
            # too (a refused block size), and the guided search can still come back to it.
            tried = {(configs[i].ic_bn, configs[i].oc_bn) for i in seconds}
            open_pairs = [i for i in unmeasured if (configs[i].ic_bn, configs[i].oc_bn) not in tried]
            if open_pairs:
                def pair_rank(i: int) -> tuple:
                    c = configs[i]
                    return (abs(math.log2(c.oc_bn / lanes)) + 0.5 * abs(math.log2(c.ic_bn / lanes)), pred[i])
                return min(open_pairs, key=pair_rank)
        unmeasured.sort(key=lambda i: pred[i])
        # Seeded by how far the search is, not once per call: a rerun resuming after a kill
        # makes the choices the unkilled run would have made.
        rng = random.Random(self.seed * 1_000_003 + len(seconds))
        if rng.random() < self.epsilon:
            return rng.choice(unmeasured[: max(1, len(unmeasured) // 2)])
        return unmeasured[0]


def tune(
    workload: Conv2DWorkload,
    *,
    trials: int = 64,
    time_budget: float | None = None,
    measure: Callable[[Conv2DWorkload, Conv2DConfig], float] | None = None,
    measured: Mapping[int, float | None] | None = None,
    callback: Callable[[Measurement], object] | None = None,
    min_pairs: int = 8,
    epsilon: float = 0.2,
    lanes: int | None = None,
    seed: int = 0,
    confirm: int = 0,
    retimed: Mapping[int, int] | None = None,
    warm: Sequence[tuple[Conv2DWorkload, Conv2DConfig, float]] = (),
    skip: Collection[int] = (),
) -> TuneResult:
    """Search ``workload``'s config space; see the module doc for the order.

    Then the finalists -- the fastest config of each of the ``confirm`` fastest layout
    pairs (:func:`finalists`) -- are measured again in :data:`CONFIRM_ROUNDS` rounds
    (:func:`retime`; each timing is also passed to ``callback``). The fastest of ~100
    noisy timings is biased low (the winner's curse), and a shared host's speed drifts
    within a minute: interleaved rounds give every re-timed config the same drift, and
    the graph tuner plans with the median of a config's records.

    Resuming: ``measured`` maps config indices already measured (by an earlier, perhaps
    killed, run) to their search seconds (None: it failed): they are not measured again,
    count toward ``trials`` and feed the cost model. ``retimed`` maps config indices to
    the re-timings an earlier run already made of them: only the missing ones are made.
    The search and the finalists depend only on the search timings, in the order they
    were measured (``measured`` must be in that order: its last entry is the pair's
    first when an odd number are measured), on ``warm``, and on ``seed`` (the random
    choices are seeded by it and the number measured so far), so a rerun after a kill at
    any point measures what the unkilled run would have. ``callback`` gets each new
    :class:`Measurement` as soon as it exists. ``measure`` raises :class:`MeasureError`
    for a failed config (any other exception counts as TVM's unknown error, 8).

    ``warm``: ``(workload, config, seconds)`` search timings of related workloads (the
    same conv but for its input channels, say). Scaled by FLOPs, they join the cost model's
    data from the first pick, so a short search starts where theirs ended (transfer
    learning, as AutoTVM's XGBoost tuner across tasks). Picks then depend on them too.

    ``skip``: config indices timed already but not by a search (a sibling's configs, timed
    after every search: ``graph_tuner.tuning.exchange_siblings``): a longer rerun's search
    does not try them again, and they count toward no trial.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if time_budget is not None and time_budget <= 0:
        raise ValueError(f"time_budget must be > 0 seconds, got {time_budget}")
    if lanes is None:
        from kernels.jit import host_cpu

        lanes = host_cpu().lanes
    measure = measure or KernelTimer()
    space = tuning_space(workload)
    result = TuneResult(workload, space, previous=dict(measured or {}))
    configs = space.configs()
    buildable, candidates = _searchable(workload, configs, measure, lanes)
    skip = set(skip)
    candidates = [i for i in candidates if i not in skip]
    prologue = timed_with_prologue(measure, workload)  # the cost model sees the kernel the timer builds
    result.unsupported = len(space) - len(buildable)
    result.hopeless = len(buildable) - len(candidates)
    seconds: dict[int, float | None] = dict(result.previous)
    try:
        default: int | None = space.index(space.config_entity(fallback_config(workload, lanes)))
    except ValueError:  # a fallback outside AutoTVM's own space (odd shapes): nothing to pin
        default = None
    if default is not None and (default not in buildable or default in skip):
        default = None
    search = _Search(workload, configs, candidates, seconds, trials, lanes, min_pairs, epsilon, seed, default, warm,
                     prologue)
    start = time.perf_counter()

    second = None  # the pair's second, known since its first was picked
    while len(seconds) < trials:
        if time_budget is not None and time.perf_counter() - start >= time_budget:
            break
        # next_pick recomputes a pair's second only for a rerun that resumes mid-pair.
        i = second if second is not None and len(seconds) % 2 else search.next_pick()
        if i is None:
            break
        second = search.guess_after(i) if len(seconds) % 2 == 0 and len(seconds) + 1 < trials else None
        guesses = None
        if hasattr(measure, "prepare"):  # a pair's first: its second compiles meanwhile
            guesses = [configs[second]] if second is not None else []
        m = _run(measure, workload, space, i, configs[i], guesses)
        seconds[i] = m.seconds if m.ok else None
        result.measurements.append(m)
        if callback is not None:
            callback(m)
    if confirm > 0:
        # Over every search timing, a resumed log's past ``trials`` too: a rerun at fewer trials
        # then re-times nothing its first run did. (Configs timed for a sibling's sake are not
        # search timings: the log marks them, graph_tuner.tuning keeps them out of ``measured``
        # and passes them as ``skip``, so none is searched or re-timed as a finalist again.)
        chosen = finalists(configs, seconds, confirm)
        done = [(retimed or {}).get(i, 0) for i in chosen]
        result.confirmations = retime(workload, [configs[i] for i in chosen], measure=measure,
                                      callback=callback, done=done)
    return result


def timed_with_prologue(measure, workload: Conv2DWorkload) -> bool:
    """Whether ``measure`` times ``workload`` with an input prologue (a :class:`KernelTimer`'s
    epilogues say so): the cost model then sees the kernel's rows' order, and its buffer must
    fit L1 (:func:`hopeless`)."""
    return bool(getattr(measure, "epilogues", {}).get(workload, {}).get("prologue"))


def _searchable(workload: Conv2DWorkload, configs: Sequence[Conv2DConfig], measure,
                lanes: int) -> tuple[list[int], list[int]]:
    """Indices of the ``configs`` that build (``measure.builds`` where it has one: a
    :class:`KernelTimer` knows which workloads are Winograd GEMMs; else :func:`supported`),
    and of those the ones not :func:`hopeless`: what :func:`tune`'s search may try."""
    builds = getattr(measure, "builds", supported)
    buildable = [i for i, c in enumerate(configs) if builds(workload, c)]
    prologue = timed_with_prologue(measure, workload)
    return buildable, [i for i in buildable if not hopeless(workload, configs[i], lanes, prologue)]


def worth_trying(workload: Conv2DWorkload, config: Conv2DConfig, measure, lanes: int) -> bool:
    """Whether :func:`tune`'s search would try ``config`` of ``workload`` with ``measure``."""
    return bool(_searchable(workload, [config], measure, lanes)[1])


def finalists(configs: list[Conv2DConfig], seconds: Mapping[int, float | None],
              k: int) -> list[int]:
    """Indices of the fastest config of each of the ``k`` fastest layout pairs, fastest first,
    by search ``seconds`` (index -> seconds, None: failed). Ties go to the lower index, so
    the choice does not depend on the order the configs were measured in.

    >>> cs = [Conv2DConfig(8, 8, 4), Conv2DConfig(8, 8, 2), Conv2DConfig(16, 8, 4)]
    >>> finalists(cs, {0: 2.0, 1: 1.0, 2: 1.0}, 5), finalists(cs, {0: 2.0, 1: 1.0, 2: None}, 1)
    ([1, 2], [1])
    """
    fastest: dict[tuple[int, int], tuple[float, int]] = {}
    for i, s in seconds.items():
        if s is not None:
            pair = (configs[i].ic_bn, configs[i].oc_bn)
            fastest[pair] = min(fastest.get(pair, (math.inf, i)), (s, i))
    return [i for _, i in sorted(fastest.values())[:k]]


def retime(
    workload: Conv2DWorkload,
    configs: list[Conv2DConfig],
    *,
    measure: Callable[[Conv2DWorkload, Conv2DConfig], float] | None = None,
    callback: Callable[[Measurement], object] | None = None,
    rounds: int = CONFIRM_ROUNDS,
    done: list[int] | None = None,
) -> list[Measurement]:
    """Time ``configs`` of ``workload`` again in ``rounds`` rounds, each round timing every
    one of them once, starting one further along each round, so that each sees the same
    drift of a shared host. Returns the timings (``confirmation`` set) round by round;
    each is also passed to ``callback``.

    ``done`` gives the re-timings each config already has (from a run killed while
    re-timing): round ``r`` (from 0) skips the configs with more than ``r``, so a rerun
    makes exactly the missing ones.

    >>> w = Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1))
    >>> ms = retime(w, [Conv2DConfig(8, 8, 4), Conv2DConfig(4, 8, 2)], measure=lambda wl, c: 1e-4 * c.ow_bn)
    >>> [(m.config.ow_bn, m.seconds) for m in ms[:4]], len(ms), all(m.confirmation for m in ms)
    ([(4, 0.0004), (2, 0.0002), (2, 0.0002), (4, 0.0004)], 6, True)
    >>> two = [Conv2DConfig(8, 8, 4), Conv2DConfig(4, 8, 2)]
    >>> len(retime(w, two, measure=lambda wl, c: 1e-4, done=[3, 1]))  # rounds 2 and 3 of the second
    2
    """
    done = list(done) if done is not None else [0] * len(configs)
    if len(done) != len(configs):
        raise ValueError(f"done has {len(done)} counts for {len(configs)} configs")
    if all(d >= rounds for d in done):
        return []
    measure = measure or KernelTimer()
    space = tuning_space(workload)
    indices = [space.index(space.config_entity(c)) for c in configs]
    out = []
    for r in range(rounds):
        k = r % len(configs) if configs else 0
        for j in list(range(k, len(configs))) + list(range(k)):
            if done[j] > r:
                continue  # timed in this round by an earlier run
            m = _run(measure, workload, space, indices[j], configs[j])
            m = dataclasses.replace(m, confirmation=True)
            out.append(m)
            if callback is not None:
                callback(m)
    return out


def _run(measure, workload: Conv2DWorkload, space: Space, index: int, config: Conv2DConfig,
         guesses: list[Conv2DConfig] | None = None) -> Measurement:
    t0 = time.perf_counter()
    entity = space.entity_list(index)
    try:
        if guesses is not None:
            measure.prepare(workload, config, guesses)
        s = float(measure(workload, config))
        if not (s > 0 and math.isfinite(s)):
            raise MeasureError(RUNTIME_DEVICE, f"measured {s} seconds")
    except MeasureError as e:
        return Measurement(index, entity, config, None, e.error_no, str(e), time.perf_counter() - t0)
    except Exception as e:  # an injected measure may fail in any way; log it, keep tuning
        return Measurement(index, entity, config, None, UNKNOWN_ERROR, f"{type(e).__name__}: {e}",
                           time.perf_counter() - t0)
    return Measurement(index, entity, config, s, 0, "", time.perf_counter() - t0)


PARAMETERS = ("weight", "bias", "scale2", "shift2")  # a conv's arguments that are not activations


def kernel_arguments(kernel) -> dict:
    """Every argument ``kernel`` was built with (data, weight, out and its epilogue's), as a
    new random-filled array (:func:`kernels.timing.random_array`, seeded by its place)."""
    from kernels.timing import random_array

    return {name: random_array(shape, seed) for seed, (name, shape) in enumerate(kernel.arg_shapes.items())
            if shape is not None}


class KernelTimer:
    """The default ``measure``: build the kernel (:func:`kernels.conv2d.build_conv2d`, or for a
    Winograd GEMM workload in ``winograd`` the whole :func:`kernels.winograd.build_winograd`;
    cached in-process) and time it with :func:`kernels.timing.measure` on random-filled buffers.

    Timed as inside a network (:func:`kernels.timing.cold_arrays`): the weights, bias and
    second-output scale/shift come from memory on every call (they rotate through copies
    that overflow the last-level cache), the input, output and residual stay in cache (the
    layer before just wrote them). Warm back-to-back timing read ResNet-18's convs 23%
    faster than they ran in the network on an AVX-512 Xeon; a cache flush before each call
    (AutoTVM's ``enable_cpu_cache_flush``) read ResNet-50's 23% slower on znver3, with
    per-layer errors from -20% to +100%, which misranked configs.

    Its kernels compile as the search's (:func:`kernels.jit.search_build`: without loop strength
    reduction, which ranks them the same in about three quarters of the compile time).

    ``epilogues`` gives a workload's fused epilogue (``build_conv2d``'s keyword arguments):
    the kernel is then timed with it, on random bias / residual / second-output buffers.
    A residual read and a second output are memory traffic the bare conv does not have.

    Cheap reject: a config whose faster of two calls (after a warm-up) is already
    ``reject_factor`` times slower than the best time seen for this workload is not worth
    full timing (a bad schedule can take 200 ms a call); that time is returned.
    Build errors raise :class:`MeasureError` with TVM's code 1 (config refused) or 2 (LLVM).
    """

    # Many short repeats: their median skips the repeats another process disturbed (on a
    # shared 2-core machine a 10 ms x 3 median read a 0.9 ms kernel as 1.2-3.6 ms). 5 x 1 ms
    # took 12 ms a timing against 28 for 9 x 2 ms, with a spread (sd of log time, 8 timings of
    # 10 DenseNet-121 convs) of 1.5% against 0.7%: a config's records are a search timing and
    # 3 re-timings, and the plan takes their median.
    def __init__(self, min_repeat_ms: float = 1.0, repeat: int = 5, reject_factor: float = 4.0,
                 epilogues: Mapping[Conv2DWorkload, Mapping] | None = None,
                 winograd: Mapping[Conv2DWorkload, Conv2DWorkload] | None = None):
        self.min_repeat_ms, self.repeat, self.reject_factor = min_repeat_ms, repeat, reject_factor
        # build_conv2d's epilogue arguments per workload (bias, residual, activation,
        # affine_out, affine_activation): time kernels as the network runs them.
        self.epilogues = dict(epilogues or {})
        # Winograd GEMM workload -> its conv (kernels.winograd): a config of the GEMM is
        # timed as the whole Winograd conv, transforms and the conv's epilogue included.
        self.winograd = dict(winograd or {})
        self.best: dict[Conv2DWorkload, float] = {}
        self._bound: dict[int, _BoundCalls] = {}  # by id(kernel), the kernel timed last at the end

    def prepare(self, workload: Conv2DWorkload, config: Conv2DConfig, guesses: Iterable[Conv2DConfig] = ()) -> None:
        """Compile ``config``'s kernel and, on helper processes meanwhile, those of ``guesses``
        (configs likely measured next): :func:`kernels.jit.compile_ahead`. Errors are left to
        the measurement, which builds the kernel again (from the cache where it compiled)."""
        from kernels.jit import compile_ahead

        configs = [config, *guesses]
        if workload in self.winograd:  # its transform phases first, side by side
            from kernels.winograd import compile_phases_ahead, winograd_epilogue

            epilogue = winograd_epilogue(dict(self.epilogues.get(workload, {})))
            compile_phases_ahead((self.winograd[workload], c, epilogue) for c in configs)
        texts = []
        for c in configs:
            try:
                texts.append(self.kernel(workload, c, ir=True))
            except ValueError:
                if c is config:
                    return
        try:
            compile_ahead(texts[:1], texts[1:])
        except RuntimeError:  # LLVM refused it: measured as a failure
            pass

    def builds(self, workload: Conv2DWorkload, config: Conv2DConfig) -> bool:
        """Whether this timer can build ``config`` for ``workload``: :func:`supported`, and for a
        Winograd GEMM :func:`kernels.winograd.gemm_supported` (its input block is the conv's layout)."""
        from kernels.winograd import gemm_supported

        return (gemm_supported if workload in self.winograd else supported)(workload, config)

    def kernel(self, workload: Conv2DWorkload, config: Conv2DConfig, ir: bool = False):
        """The kernel timed for a config (its IR text with ``ir``): the conv with its
        epilogue, or the Winograd conv a GEMM workload stands for."""
        from kernels.conv2d import build_conv2d, kernel_ir
        from kernels.winograd import build_winograd, winograd_epilogue, winograd_ir

        epilogue = dict(self.epilogues.get(workload, {}))
        conv = self.winograd.get(workload)
        if conv is None:
            return (kernel_ir if ir else build_conv2d)(workload, config, search=True, **epilogue)
        return (winograd_ir if ir else build_winograd)(conv, config, **winograd_epilogue(epilogue))

    def __call__(self, workload: Conv2DWorkload, config: Conv2DConfig) -> float:
        from kernels.timing import measure

        try:
            kernel = self.kernel(workload, config)
        except ValueError as e:
            raise MeasureError(INSTANTIATION_ERROR, str(e)) from None
        except RuntimeError as e:  # llvmlite reports LLVM failures as RuntimeError
            raise MeasureError(COMPILE_HOST, str(e)) from None
        try:
            calls = self._calls(kernel)
            run = calls.warm
            run()
            best = self.best.get(workload)
            once = math.inf
            for _ in range(2):  # a second look, so one preempted call does not reject a good config
                t0 = time.perf_counter()
                run()
                once = min(once, time.perf_counter() - t0)
                if best is None or once <= self.reject_factor * best:
                    break
            if best is not None and once > self.reject_factor * best:
                return once
            # The looks warmed the code and sized the repeats (10% past min_repeat_ms, as
            # kernels.timing's calibration aims): a warm-up and a calibration run of the cold
            # calls on top took 2-6 of a timing's 9-28 calls, none of them in its median.
            number = max(1, math.ceil(1.1 * self.min_repeat_ms * 1e-3 / max(once, 1e-9)))
            seconds = measure(calls.cold(), repeat=self.repeat, warmup=0, number=number).median_s
        except Exception as e:
            raise MeasureError(RUNTIME_DEVICE, f"{type(e).__name__}: {e}") from None
        self.best[workload] = min(seconds, best or math.inf)
        return seconds

    def _calls(self, kernel) -> "_BoundCalls":
        """``kernel`` bound to its random-filled arguments (:func:`kernel_arguments`), kept for
        the kernels timed last (up to :data:`BOUND_BYTES` of arguments): a finalist is timed
        again in 3 rounds, and making its arrays and binding its cold copies took 7 ms of a
        re-timing's 30 (Inception-v3, znver3, session 40)."""
        calls = self._bound.pop(id(kernel), None)
        if calls is None:
            calls = _BoundCalls(kernel, kernel_arguments(kernel))
        self._bound[id(kernel)] = calls  # the newest last; it holds the kernel, so the id stays its own
        while sum(c.nbytes for c in self._bound.values()) > BOUND_BYTES and len(self._bound) > 1:
            del self._bound[next(iter(self._bound))]
        return calls


# Arguments the timer keeps bound for kernels it may time again (KernelTimer._calls): 20
# finalists a round fit for all but the largest workloads.
BOUND_BYTES = 256 << 20


class _BoundCalls:
    """A kernel's calls on one set of arguments: ``warm`` (the arrays as made) and ``cold()``
    (the parameters rotated through copies that overflow the last-level cache:
    :func:`kernels.timing.cold_arrays`), bound once, the cold ones when first asked for."""

    def __init__(self, kernel, arrays: dict):
        self.kernel, self.arrays = kernel, arrays
        self.nbytes = sum(a.nbytes for a in arrays.values())
        self.warm = kernel.bind(**arrays)
        self._cold = None

    def cold(self):
        from kernels.timing import cold_arrays

        if self._cold is None:
            self._cold = cold_arrays(self.kernel.bind, self.arrays, PARAMETERS)
        return self._cold
