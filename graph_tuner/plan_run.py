"""Running one plan end to end: latency, a per-step profile, and the plan's prediction.

:func:`measure_plan` compiles a plan (:mod:`graph_tuner.executor`), times whole runs
(median, p90) and profiles every step, so the plan's prediction (conv kernels + layout
transforms) can be set against the measured time of the same steps. The prediction is
also evaluated with the same kernels and transforms re-timed alone now
(:func:`retimed_cost_ms`); profile and re-timing alternate in a few rounds
(:func:`prediction_checks`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

from graph_tuner import host_state
from graph_tuner.host_state import FORK_JOIN_MARGIN, same_phase


@dataclass
class RunResult:
    """One plan run end to end: latency, profile, and the plan's prediction."""

    model: str
    batch: int
    threads: int
    median_ms: float
    p90_ms: float
    predicted_ms: float  # plan.cost: conv kernels + layout transforms (+ the other steps when costed)
    profile: object  # graph_tuner.executor.Profile
    outputs: list = field(default_factory=list, repr=False)
    retimed_ms: float | None = None  # the same prediction, its steps re-timed alone now (x ratios: retimed_at_ratios)
    # The thread pool's fork-join (graph_tuner.host_state.fork_join_us) before the timed runs and
    # after the profile: what tells the host's phases apart where the profile cannot.
    fork_join_us: tuple[float, float] | None = None
    retimed_at_ratios: bool = False  # retimed_ms took each step times its in-network ratio (the log's)

    @property
    def measured_planned_ms(self) -> float:
        """Measured time of the steps ``predicted_ms`` covers."""
        return self.profile.measured_planned_ms

    @property
    def steady(self) -> bool:
        """Whether the profile's steps sum to within :data:`STEADY_MARGIN` of the whole-run
        median: if not, the host's speed changed between the timed runs and the profile, and
        neither the per-step figures nor the prediction check compare (on the shared Zen 4 VM a
        neighbour's phase put MobileNet-v2's profile at 5.39 ms against a 3.35 ms median); nor
        when the fork-join read more than :data:`FORK_JOIN_MARGIN` times slower at one end of the
        run than at the other (the host changed phase in between)."""
        return self.profile_agrees and self.one_phase

    @property
    def profile_agrees(self) -> bool:
        """The profile's steps sum to within :data:`STEADY_MARGIN` of the whole-run median."""
        return abs(self.profile.total_ms / self.median_ms - 1) <= STEADY_MARGIN

    @property
    def one_phase(self) -> bool:
        """The fork-join read one phase of the host at both ends of the run (or was not read)."""
        return self.fork_join_us is None or same_phase(*self.fork_join_us)

    @property
    def covers(self) -> str:
        """What ``predicted_ms`` counts: every step, or conv kernels and transforms only."""
        return "every step" if all(s.predicted_ms is not None for s in self.profile.steps) else "convs + transforms"

    def to_json(self, top: int | None = None) -> dict:
        steps = self.profile.steps if top is None else self.profile.top(top)
        return {
            "model": self.model,
            "batch": self.batch,
            "threads": self.threads,
            "median_ms": self.median_ms,
            "p90_ms": self.p90_ms,
            "predicted_ms": self.predicted_ms,
            "prediction_covers": self.covers,
            "retimed_predicted_ms": self.retimed_ms,
            "retimed_at_ratios": self.retimed_at_ratios,
            "measured_planned_ms": self.measured_planned_ms,
            "profile_total_ms": self.profile.total_ms,
            "steady": self.steady,
            "fork_join_us": list(self.fork_join_us) if self.fork_join_us else None,
            "by_category_ms": self.profile.by_category(),
            "layers": [{"name": s.name, "category": s.category, "ops": s.ops, "measured_ms": s.median_ms,
                        "predicted_ms": s.predicted_ms} for s in steps],
        }

    def report(self, top: int = 10) -> str:
        by = self.profile.by_category()
        err = (self.measured_planned_ms - self.predicted_ms) / self.predicted_ms if self.predicted_ms else float("nan")
        lines = [
            f"{self.model}  batch {self.batch}, {self.threads} threads",
            f"latency: median {self.median_ms:.3f} ms, p90 {self.p90_ms:.3f} ms",
            "profile (steps summing to {:.3f} ms, the median run): ".format(self.profile.total_ms)
            + ", ".join(f"{c} {ms:.3f} ms ({sum(s.category == c for s in self.profile.steps)} steps)"
                        for c, ms in by.items()),
            f"predicted ({self.covers}): {self.predicted_ms:.3f} ms; the same steps measured: "
            f"{self.measured_planned_ms:.3f} ms ({err:+.1%}); whole run {self.median_ms:.3f} ms "
            f"({(self.median_ms - self.predicted_ms) / self.predicted_ms:+.1%})",
            *([f"  the same steps re-timed alone now"
               + (", times the in-network ratios they were costed with" if self.retimed_at_ratios else "")
               + f": {self.retimed_ms:.3f} ms (the steps measured "
               f"{(self.measured_planned_ms - self.retimed_ms) / self.retimed_ms:+.1%}; a log timed when this "
               "machine was faster or slower shifts the first figure, not this one)"]
              if self.retimed_ms else []),
            *([f"host: the thread pool's fork-join took {self.fork_join_us[0]:.1f} us before the timed runs, "
               f"{self.fork_join_us[1]:.1f} us after the profile"] if self.fork_join_us else []),
            *([] if self.steady else [
                "warning: " + " and ".join(
                    ([] if self.profile_agrees else
                     [f"the profile's steps sum to {self.profile.total_ms:.3f} ms against a whole-run median of "
                      f"{self.median_ms:.3f} ms ({self.profile.total_ms / self.median_ms - 1:+.0%})"])
                    + ([] if self.one_phase else
                       [f"the fork-join changed from {self.fork_join_us[0]:.1f} to {self.fork_join_us[1]:.1f} us"]))
                + ": the host's speed changed during the run (a shared host's neighbours?); per-step and predicted "
                f"figures compare only in a run whose profile and median agree within {STEADY_MARGIN:.0%} and "
                "whose fork-join stays in one phase: run again"]),
            f"slowest {top} steps:",
            f"  {'step':<36} {'kind':<10} {'measured ms':>11} {'predicted ms':>12}",
        ]
        for s in self.profile.top(top):
            pred = "" if s.predicted_ms is None else f"{s.predicted_ms:.4f}"
            lines.append(f"  {s.name[:36]:<36} {s.category:<10} {s.median_ms:>11.4f} {pred:>12}")
        return "\n".join(lines)


# A run's profile (its median timed run, the steps' sum) and whole-run median agree within this
# on a steady host: 0.8-2.8% in calm runs of the five bench models, 15-61% in runs a
# neighbour's phase hit (session 20). Since session 28 the profile times the steps inside the
# native run: its median run read 0-3% off the whole-run median taken just before (8 of 9
# rounds of three models; the ninth 7%, the host's phase).
STEADY_MARGIN = 0.05


def seeded_input(model, seed: int = 0) -> np.ndarray:
    """The first input, seeded random normal."""
    return seeded_inputs(model, seed)[0]


def seeded_inputs(model, seed: int = 0) -> list[np.ndarray]:
    """Every input of ``model``, seeded random normal (in the model's input order)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(model.op(name).shape, dtype=np.float32) for name in model.inputs]


def measure_plan(model, plan, *, x: np.ndarray | None = None, params: dict | None = None, repeat: int = 30,
                 warmup: int = 3, retime: bool = False, ratios: Mapping[str, float] | None = None) -> RunResult:
    """Compile ``plan`` for ``model``, run it on ``x`` (default: seeded random), time and profile it;
    with ``retime`` also evaluate its prediction with every kernel and transform re-timed now
    (:func:`retimed_cost_ms`, each times its in-network ratio in ``ratios``)."""
    from graph_tuner.executor import compile_model
    from kernels.threads import num_threads

    prog = compile_model(model, plan, params)
    outputs = prog.run(seeded_input(model) if x is None else x)
    join = host_state.fork_join_call()
    before = host_state.fork_join_us(join)
    timing = prog.benchmark(repeat=repeat, warmup=warmup)
    if retime:
        check = prediction_checks({"plan": prog}, {"plan": plan}, model, repeat, {"plan": ratios})["plan"]
        profile, retimed = check["profile"], check["retimed_predicted_ms"]
    else:
        profile, retimed = prog.profile(repeat=max(5, repeat // 2)), None
    return RunResult(model.name, model.batch, num_threads(), timing.median_s * 1e3, timing.p90_s * 1e3, plan.cost,
                     profile, outputs, retimed, (before, host_state.fork_join_us(join)), bool(retime and ratios))


class InNetworkTimer:
    """How much slower each step of a plan runs in the network than alone:
    ``timer(plan)`` -> profile step name -> (in-network / alone ratio, alone ms).

    Each of ``rounds`` rounds re-times the plan's steps alone (:func:`iter_retimed`, the
    tuner's own protocol) with profiles of the whole program (:meth:`Program.profile`) in
    between, one whenever the re-timing has taken as long as a profile: a step's ratio in a
    round is the mean of its in-network times in the profiles just before and just after
    its re-timing over its alone time, and its ratio is the median over rounds. So both
    sides see the host in the same state: on the 2-core Zen 4 VM the whole of MobileNet-v2
    flips between 3.2 and 5.9 ms every few seconds. Absolute in-network times carried that
    state into the costs (calibrated predictions -3% to +80% off the next run, session 17);
    a ratio taken from one profile and a re-timing seconds later did too (+18%). What
    :func:`graph_tuner.calibration.calibrate` re-costs plans with.
    """

    def __init__(self, model, params: dict | None = None, *, rounds: int = 3, repeat: int = 10):
        self.model, self.params, self.rounds, self.repeat = model, params, rounds, repeat
        self.slow_note: str | None = None  # set when every run of a plan read it suspiciously slow

    def __call__(self, plan) -> dict[str, tuple[float, float]]:
        """``{profile step name: (in-network / alone ratio, alone ms)}``, each the median over
        rounds. A run whose whole plan ran more than :data:`SUSPECT_RATIO` times its steps'
        alone times is run once more, and the run with the lower whole ratio is kept: a
        neighbour on a shared host only slows the network, and one that does so for a whole
        run is not seen by :func:`_calm` (session 20: MobileNet-v2's early depthwise convs got
        ratios of 2.7 and 3.2 in one, 1.1-1.3 in seven runs of the same plan minutes later).
        So is a run after which the thread pool's fork-join reads the host's slow phase
        (:func:`graph_tuner.host_state.in_slow_phase`), once that phase is over, and a run
        outside it is kept; every run starts after a short slow phase is over
        (:func:`~graph_tuner.host_state.await_fast_phase`), and one that lasts the wait keeps the
        run taken in it (a second would be too; session 21's Inception-v3 tune took 180 s so)."""
        from graph_tuner.executor import compile_model

        self.slow_note = None  # about this plan's runs only
        prog = compile_model(self.model, plan, self.params)
        prog.set_inputs(*seeded_inputs(self.model))
        probe = host_state.fork_join_call()

        def run() -> tuple[bool, float, dict]:  # (in a slow phase, whole ratio, the run)
            host_state.await_fast_phase(probe)
            measured = self._run(prog, plan)
            return host_state.in_slow_phase(host_state.fork_join_us(probe)), whole_ratio(measured), measured

        first = run()
        if not first[0] and first[1] <= SUSPECT_RATIO:
            return first[2]
        if first[0] and host_state.in_slow_phase(host_state.await_fast_phase(probe)):
            slow, ratio, kept = first  # the phase lasts: a second run would be taken in it too
        else:
            slow, ratio, kept = min(first, run(), key=lambda r: r[:2])
        if slow:
            self.slow_note = (f"calibration: the thread pool's fork-join read over {FORK_JOIN_MARGIN}x the "
                              f"{host_state.lowest_fork_join_us():.1f} us it read earlier in this process after "
                              "the run: "
                              "the host was in a slow phase (on a Zen 4 VM every step then ran 0.05-0.24 ms slower, "
                              "session 21), and these ratios are that phase's; `graph-tuner tune MODEL -o LOG "
                              "--retime` retakes them (and re-times the finalists)")
        elif ratio > SUSPECT_RATIO:
            self.slow_note = (f"calibration: the network ran the plan {ratio:.2f}x its steps' alone times in "
                              f"both of two runs (calm runs of the bench models on a Zen 4 EPYC: 0.89-1.04x): this "
                              f"network pays that here, or a neighbour on a shared host slowed both runs; "
                              f"`graph-tuner run` of the plan tells which")
        return kept

    def _run(self, prog, plan) -> dict[str, tuple[float, float]]:
        """One run of the rounds: ``{name: (ratio, alone ms)}``, medians over the rounds."""
        ratios: dict[str, list[float]] = {}
        alone: dict[str, list[float]] = {}
        run_by = _run_by(prog, plan)
        for timed in _calm(list(self._rounds(prog, plan, run_by)), run_by):
            for name, ratio in _step_ratios(timed, run_by).items():
                ratios.setdefault(name, []).append(ratio)
                alone.setdefault(name, []).append(float(np.mean([t[1] for t in timed[name]])))
        return {name: (float(np.median(r)), float(np.median(alone[name]))) for name, r in ratios.items()}

    def _rounds(self, prog, plan, run_by: dict[str, str]) -> Iterator[dict[str, list[tuple[float, float, float]]]]:
        """Per round, ``{name: [(in-network ms, alone ms, state ms), ...]}``, one per re-timing
        of the name: the in-network time is its step's mean in the profiles taken just before
        and just after that re-timing (a step running several layers, :func:`_run_by`, stands
        for each); the state, the slower of those two profiles' totals (:func:`_calm`)."""
        clock = time.perf_counter

        def profile() -> tuple[dict[str, float], float]:
            t0 = clock()
            steps = {s.name: s.median_ms for s in prog.profile(repeat=self.repeat).steps}
            return steps, clock() - t0

        def total(steps: dict[str, float]) -> float:
            return sum(steps.values())

        params = self.model.params(0) if plan.steps else None  # for the other steps' alone timings, made once a run
        timers: dict = {}  # the conv timers, their kernels' buffers bound once a run, not once a round
        before, span = profile()
        for _ in range(self.rounds):
            pending: list[tuple[list[str], float]] = []
            started, timed = clock(), {}
            timings = iter_retimed(plan, self.model, params, timers)
            while (item := next(timings, None)) is not None or pending:
                if item is not None:
                    pending.append(item)
                    if clock() - started < span:
                        continue
                after, span = profile()
                for names, alone in pending:
                    for name in names:
                        step = run_by.get(name, name)
                        state = max(total(before), total(after))
                        timed.setdefault(name, []).append(((before[step] + after[step]) / 2, alone, state))
                before, pending, started = after, [], clock()
            yield timed


# A calibration run whose whole plan ran more than this times its steps' alone times is run
# again (InNetworkTimer): calm runs of the five bench models read 0.89-1.04 (session 20), and
# runs a neighbour's phase hit 1.12 (MobileNet-v2) and 1.33 (DenseNet-121).
SUSPECT_RATIO = 1.10


def whole_ratio(measured: dict[str, tuple[float, float]]) -> float:
    """The whole plan's in-network / alone time from a run's ``{name: (ratio, alone ms)}``.

    >>> whole_ratio({"a": (1.0, 3.0), "b": (2.0, 1.0)})
    1.25
    """
    alone = sum(ms for _, ms in measured.values())
    return sum(r * ms for r, ms in measured.values()) / alone if alone > 0 else 1.0


# A re-timing counts if the profiles around it ran the whole program within this of the
# fastest profile of the run: a neighbour on the host that uses the memory bus slows the
# network's memory-bound steps more than their alone re-timings (which stay in cache), so
# their ratio does not divide that state out (MobileNet-v2's classifier, session 19: its
# ratio taken in such a moment predicted 0.154 ms for a step that runs 0.081).
CALM_MARGIN = 0.05


def _calm(rounds: list[dict[str, list[tuple]]], run_by: dict[str, str]) -> list[dict[str, list[tuple]]]:
    """``rounds`` (:meth:`InNetworkTimer._rounds`) without the re-timings taken while the host
    was slow: those whose state (the slower of their two profiles' totals) is more than
    :data:`CALM_MARGIN` over the run's fastest. A step none of whose re-timings was calm keeps
    them all; the layers of one step (:func:`_run_by`) are kept or dropped together in a round.

    >>> r = [{"a": [(2.0, 1.0, 10.0)], "b": [(6.0, 1.0, 15.0)]}, {"a": [(3.0, 1.0, 15.0)], "b": [(6.0, 1.0, 15.0)]}]
    >>> _calm(r, {})
    [{'a': [(2.0, 1.0, 10.0)], 'b': [(6.0, 1.0, 15.0)]}, {'b': [(6.0, 1.0, 15.0)]}]
    """
    states = [t[2] for timed in rounds for pairs in timed.values() for t in pairs]
    if not states:
        return rounds
    calm = min(states) * (1 + CALM_MARGIN)
    some = {name for timed in rounds for name, pairs in timed.items() if any(t[2] <= calm for t in pairs)}
    out = []
    for timed in rounds:
        kept = {n: [t for t in pairs if t[2] <= calm or n not in some] for n, pairs in timed.items()}
        dropped = {run_by.get(n, n) for n, pairs in kept.items() if not pairs}
        out.append({n: pairs for n, pairs in kept.items() if pairs and run_by.get(n, n) not in dropped})
    return out


def _run_by(prog, plan) -> dict[str, str]:
    """``{layer: step}`` for the conv layers that run inside a step of another name: a
    depthwise conv and the 1x1 conv fused with it (:mod:`kernels.dw_project`) run as one."""
    layers = {lc.name for lc in plan.layers}
    return {op: s.name for s in prog.steps for op in s.ops if op in layers and op != s.name}


def _step_ratios(timed: dict[str, list[tuple[float, float]]], run_by: dict[str, str]) -> dict[str, float]:
    """In-network / alone per name (means over its re-timings); the layers of one step share
    their step's: its time over the sum of theirs alone. (A step timed at 0 alone, none is,
    would have no ratio, and calibration would stop on it: it runs as alone.)"""
    steps: dict[str, list[str]] = {}
    for name in timed:
        steps.setdefault(run_by.get(name, name), []).append(name)
    out = {}
    for names in steps.values():
        net = np.mean([np.mean([t[0] for t in timed[n]]) for n in names])
        alone = sum(np.mean([t[1] for t in timed[n]]) for n in names)
        out.update(dict.fromkeys(names, float(net / alone) if alone > 0 else 1.0))
    return out


def retimed_cost_ms(plan, model=None, ratios: Mapping[str, float] | None = None) -> float:
    """The plan's cost model evaluated now, on this machine: every layer's kernel and every
    transform timed alone (the tuner's and the transform benchmark's own routines), each times
    its in-network ratio in ``ratios`` (step name -> ratio, 1 where absent:
    :meth:`graph_tuner.calibration.InNetworkCosts.by_step`), summed. With ``model``, each
    kernel is timed with the epilogue the executor fuses into that layer, and the other steps
    are timed too.

    ``plan.cost`` adds up times from the log, measured whenever and in whatever phase of the
    host the tuning ran; this separates "is the cost model right?" from "is the log current?".
    Session 28, the 11 shipped models with ratios taken from the native profile: the whole run
    0.4-4.7% off this, 1.8-12.5% off ``plan.cost`` (benchmarks/prediction_phase.py).
    """
    ratios = ratios or {}
    return sum(ms * sum(ratios.get(n, 1.0) for n in names) for names, ms in iter_retimed(plan, model))


def retimed_steps(plan, model=None) -> dict[str, float]:
    """Milliseconds per step of the plan, each timed alone now (:func:`retimed_cost_ms`), by the
    step's name in a profile: a conv by its layer, a transform by its label, another step (with
    ``model``) by its name."""
    return {name: ms for names, ms in iter_retimed(plan, model) for name in names}


def iter_retimed(plan, model=None, params: dict | None = None,
                 timers: dict | None = None) -> Iterator[tuple[list[str], float]]:
    """:func:`retimed_steps` one timing at a time: yields ``(step names, ms)``, the names all
    steps that timing stands for (the layers that run one kernel with one epilogue, the
    transforms of one key; another step alone, with ``params``, default ``model.params(0)``).
    ``timers``: the conv timers by epilogue, kept by a caller that re-times the plan again
    (their kernels' bound buffers with them: :class:`kernels.tuner.KernelTimer`)."""
    from graph_tuner.winograd import runs_winograd
    from kernels.transform_bench import time_transform
    from kernels.tuner import KernelTimer

    epilogues = {}
    if model is not None:
        from graph_tuner.fusion import conv_epilogues, plan_steps

        epilogues = conv_epilogues(model, plan_steps(model, plan.blocks, plan.joins))
    timers = {} if timers is None else timers
    for timer in timers.values():
        timer.best.clear()  # each re-timing its own: no cheap reject against an earlier one's times
    kernels: dict[tuple, list] = {}  # (timed workload, config, epilogue) -> [layers], in plan order
    for lc in plan.layers:
        epi = tuple(sorted(epilogues.get(lc.name, {}).items()))
        # A Winograd layer's record is its GEMM's, timed as the whole Winograd conv.
        record = getattr(lc.candidate.record, "workload", None)
        timed = record if runs_winograd(lc.workload, record) else lc.workload
        kernels.setdefault((timed, lc.candidate.config, epi), []).append(lc)
    for (timed, config, epi), layers in kernels.items():
        timer = timers.setdefault(epi, KernelTimer())  # one per epilogue: its own reject baseline
        timer.epilogues[timed] = dict(epi)
        if timed is not layers[0].workload:
            timer.winograd[timed] = layers[0].workload
        yield [lc.name for lc in layers], timer(timed, config) * 1e3
    transforms: dict = {}
    for t in plan.transforms:
        transforms.setdefault(t.key, []).append(t.label)
    for key, labels in transforms.items():
        yield labels, time_transform(key) * 1e3
    if model is not None:
        from graph_tuner.executor.step_timing import step_ms

        if params is None and plan.steps:
            params = model.params(0)
        for c in plan.steps:  # one at a time, so that a caller can pair each with the moment
            yield [c.name], step_ms(model, {c.name: [c.block]}, params=params, memo=False)[c.name][c.block]


PREDICTION_ROUNDS = 3


def prediction_checks(programs: dict, plans: dict, model, repeat: int,
                      ratios: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, dict]:
    """Per plan: its conv + transform steps measured in the network (:meth:`Program.profile`)
    and its prediction re-timed now (:func:`retimed_cost_ms`, at ``ratios[plan key]`` where
    given), in :data:`PREDICTION_ROUNDS`
    alternating rounds over the plans: each step's median (``profile``), and the median
    re-timing. One profile after the timed rounds read ResNet-18's steps at 37.0 ms when the
    rounds' median run took 20.9 (session 8): a burst of load hit it."""
    from graph_tuner.executor import Profile

    measured: dict[str, list] = {k: [] for k in programs}
    retimed: dict[str, list[float]] = {k: [] for k in programs}
    for _ in range(PREDICTION_ROUNDS):
        for k, program in programs.items():
            measured[k].append(program.profile(repeat=max(3, repeat // (3 * PREDICTION_ROUNDS))))
            retimed[k].append(retimed_cost_ms(plans[k], model, (ratios or {}).get(k)))
    out = {}
    for k in programs:
        profile = Profile.median(measured[k])
        out[k] = {"retimed_predicted_ms": float(np.median(retimed[k])), "profile": profile,
                  "measured_planned_ms": profile.measured_planned_ms, "by_category_ms": profile.by_category()}
    return out
