"""The public Python API: ``GraphTuner``.

Usage (after tuning kernels into ``resnet-18.log``)::

    from graph_tuner import GraphTuner
    gt = GraphTuner("resnet-18", "resnet-18.log", target="llvm", top_k=20)
    plan = gt.solve(measure=True)             # transforms timed here as a best plan needs them
    # plan.cost, plan.optimal, plan.layers, plan.records
    plan.write_records("opt.log"); print(plan.report())
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Callable, Iterable, Mapping

from graph_tuner import candidates as cand
from graph_tuner.calibration import InNetworkCosts, restricted
from graph_tuner.environment import check_environment
from graph_tuner.errors import GraphTunerError
from graph_tuner.layout_flow import analyse
from graph_tuner.loading import load_model
from graph_tuner.model import Model
from graph_tuner.plan import Plan, passthrough_plan
from graph_tuner.records import read_records, target_cpu
from graph_tuner.selection import required_step_blocks, required_transforms, select, select_measuring
from graph_tuner.transform_costs import EstimateReport, TransformCosts
from graph_tuner.winograd import runs_winograd

SOLVERS = ("auto", "dp", "ilp", "pbqp")


class GraphTuner:
    """Select one schedule per conv layer (x86) or per workload (CUDA) from tuning records.

    ``model``: a zoo name, an .onnx path or a :class:`Model` (``batch``: default the
    model's own, 1 for zoo models). ``records``: a log path or an iterable of record lines. ``target``: ``llvm ...`` (x86: graph-level layout
    selection) or ``cuda ...`` (no layouts: best record per distinct workload).
    """

    def __init__(
        self,
        model: str | os.PathLike | Model,
        records: str | os.PathLike | Iterable[str],
        target: str = "llvm",
        top_k: int = 20,
        *,
        fallback: bool = False,
        skip_bad_lines: bool = False,
        batch: int | None = None,
    ):
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise GraphTunerError(f"--top-k must be a positive integer, got {top_k!r}")
        check_environment()
        self.model = load_model(model, batch=batch)
        self.target = target
        self.kind = target.split()[0] if target.strip() else ""
        if self.kind not in ("llvm", "cuda"):
            raise GraphTunerError(f"unsupported target {target!r}: use 'llvm ...' (x86) or 'cuda ...'")
        self.log = read_records(records, skip_bad_lines=skip_bad_lines)
        self.transforms = TransformCosts()
        self.step_ms: dict[str, dict[int, float]] | None = None  # the other steps' costs (benchmark_steps)
        self.timed_steps: dict[tuple[str, int], float] = {}  # those of them timed here, not in the log
        self.network = InNetworkCosts()  # the log's in-network ratios for this model (written by tune)
        self.warnings: list[str] = list(getattr(self.log, "warnings", []))
        self.convs = self.model.convs()
        self.workloads = [self.model.workload(op) for op in self.convs]
        if self.kind == "llvm":
            self.flow = analyse(self.model)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                # Every layout pair's fastest record: the baselines may need pairs outside the top K.
                per_layer = cand.layer_candidates(
                    self.workloads,
                    self.log,
                    names=[op.name for op in self.convs],
                    k=10**9,
                    fallback=fallback,
                    target=target,
                )
            self.warnings += [str(w.message) for w in caught]
            self.all_candidates = {op.name: cs for op, cs in zip(self.convs, per_layer)}
            self.candidates = {name: cs[:top_k] for name, cs in self.all_candidates.items()}
            self.load_transform_records(self.log)
            self.network = InNetworkCosts.from_records(self.log.network, self.model.name, self.model.digest)
            other = sum(r.model == self.model.name and r.identity != self.model.digest for r in self.log.network)
            if other and not self.network:
                self.warnings.append(
                    f"{self.log.source}: its {other} in-network ratios for {self.model.name} are another version's "
                    "or batch size's, or were written before ratios carried the model's digest: not used; "
                    f"`graph-tuner tune {self.model.name} -o LOG` on this machine retakes them, timing nothing else")
            self.warnings += _foreign_cpu_warnings(self.log, records)

    # -- transform costs -------------------------------------------------------------
    def required_transforms(self) -> list:
        """Every (NCHW shape, src block, dst block) transform some choice could force."""
        if self.kind != "llvm":
            return []
        keys = set(required_transforms(self.flow, self.candidates, self._blocks()))
        for picks in (self._baseline_picks("history_best"), self._baseline_picks("default")):
            if picks is not None:
                keys.update(required_transforms(self.flow, picks, self._blocks()))
        return sorted(keys)

    def missing_transforms(self) -> list:
        return self.transforms.missing(self.required_transforms())

    def benchmark_layout_transforms(self, progress: bool = True) -> int:
        """Fill the missing transform costs from this CPU's cache or by measuring them here."""
        before = len(self.missing_transforms())
        self.transforms.fill(self.required_transforms(), progress=progress)
        return before - len(self.missing_transforms())

    def load_transform_records(self, source, skip_bad_lines: bool = False) -> int:
        """Read AutoTVM ``layout_transform`` records (a path or an already-read log)."""
        log = source if hasattr(source, "transforms") else read_records(source, skip_bad_lines=skip_bad_lines)
        return self.transforms.load_records(log.transforms)

    def estimate_transforms(self) -> EstimateReport:
        """Fill missing transform costs from a per-element model fitted on the known ones."""
        return self.transforms.estimate_missing(self.required_transforms())

    def benchmark_steps(self, fresh: bool = False) -> int:
        """Time the steps that are not convs (pooling, elementwise, dense, ...) in every block
        a plan could run them in, so the objective and the prediction cover the whole network
        (:mod:`graph_tuner.executor.step_timing`), but for those the log has timings of
        (``fresh``: all, none taken from the log or this process's earlier timings). Returns
        how many (step, block) costs."""
        from graph_tuner.executor.step_timing import costed_steps, forget_timings, logged_step_ms, step_ms

        if self.kind != "llvm":
            return 0
        names = [s.ops[0] for s in costed_steps(self.model)]
        wanted = required_step_blocks(self.flow, self.all_candidates, self._blocks(), names)
        # The log's timings (`tune` writes them) first: a step timed anew at each solve moved
        # near-ties between plans with its noise, and a solve then wanted a transform the log
        # lacked (2 of 5 fresh logs, session 20). A later record of a step replaces an earlier.
        if fresh:
            forget_timings()
        logged = {} if fresh else logged_step_ms(self.model, self.log.steps)
        self.step_ms = step_ms(self.model, wanted, known=logged)
        self.timed_steps = {(n, b): ms for n, bs in self.step_ms.items() for b, ms in bs.items()
                            if (n, b) not in logged}
        return sum(len(v) for v in self.step_ms.values())

    # -- solving ---------------------------------------------------------------------
    def _measurer(self, measure) -> Callable | None:
        """What measures transforms for :func:`select_measuring`: ``measure`` itself if callable
        (what it returns also kept in ``self.transforms``, for later solves); True: this CPU's
        cache, else timed here (and cached); False: nothing."""
        if callable(measure):
            def keep(keys: list) -> Mapping:
                got = measure(keys)
                self.transforms.seconds.update(got)
                return got

            return keep
        if not measure:
            return None

        def here(keys: list) -> dict:
            self.transforms.fill(keys, cache=True, measure=True, progress=False)
            return {k: self.transforms.seconds[k] for k in keys}

        return here

    def solve(self, solver: str = "auto", time_limit: float | None = None, measure: bool | Callable = False,
              calibrate: int = 0, calibration_rounds: int = 3) -> Plan:
        """The best plan. Transforms are measured only as a best plan needs them
        (:func:`graph_tuner.selection.select_measuring`): ``measure=True`` times them here
        (this CPU's cache first), a callable ``keys -> {key: seconds}`` is asked instead;
        False: only the known ones (records, cache, estimates) are used, and a plan that needs
        another is a :class:`GraphTunerError`. ``calibrate``: up to that many runs of the
        plan on this CPU, each re-costing what the plan uses with its time in the network,
        then solving again (:func:`graph_tuner.calibration.calibrate`); 0: times taken alone.
        ``calibration_rounds``: rounds of profiles and alone re-timings a run takes the median
        of (:class:`graph_tuner.plan_run.InNetworkTimer`)."""
        if solver not in SOLVERS:
            raise GraphTunerError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
        if time_limit is not None and not (isinstance(time_limit, (int, float)) and 0 <= time_limit < math.inf):
            raise GraphTunerError(f"--time-limit must be a number of seconds >= 0, got {time_limit!r}")
        if not isinstance(calibrate, int) or isinstance(calibrate, bool) or calibrate < 0:
            raise GraphTunerError(f"--calibrate must be a number of runs >= 0, got {calibrate!r}")
        if self.kind == "cuda":
            if calibrate:
                raise GraphTunerError("--calibrate runs the plan on this CPU: it needs an x86 target ('llvm ...')")
            return self._cuda_plan()
        measurer = self._measurer(measure)
        notes = list(self.warnings) + ([] if self.step_ms is not None else
                                       ["other steps (pooling, elementwise, dense) not costed: call benchmark_steps()"])

        def best(costs: InNetworkCosts, only: Mapping | None = None) -> Plan:
            return select_measuring(self.flow, costs.candidates(restricted(self.candidates, only)),
                                    costs.transform_costs(self.transforms.seconds), measurer, self._blocks(),
                                    method=solver, time_limit=time_limit,
                                    estimated=self.transforms.estimated, step_ms=costs.step_costs(self.step_ms),
                                    target=self.target, notes=list(notes))

        costs = InNetworkCosts()
        if calibrate:
            from graph_tuner.calibration import calibrate as run_calibration
            from graph_tuner.plan_run import InNetworkTimer

            self._check_calibration_cpu()
            timer = InNetworkTimer(self.model, self.model.params(0), rounds=calibration_rounds)
            plan, cal = run_calibration(best, timer, max_rounds=calibrate, costs=costs)
            plan.notes.extend([cal.note] + ([timer.slow_note] if timer.slow_note else []))
        scale = 1.0  # what the log's in-network ratios made of the plan's cost (:meth:`_in_network`)
        if not calibrate:
            plan, scale = self._in_network(best(costs), best)
        while True:
            known = len(self.transforms.seconds)
            plan.baselines_ms = {}
            for name in ("history_best", "default"):  # under the same costs as the plan (in-network if calibrated)
                base = self.baseline_plan(name, measure=measure, costs=costs)
                plan.baselines_ms[name] = None if base is None else base.cost * scale
            # Transforms the baselines measured lower the bound unmeasured ones are costed at (the
            # fastest known rate, selection.BOUND_MARGIN): the plan solved before them may no longer
            # be the best, and a solve from the log they go to may want a transform it lacks (seen
            # on a Dask-tuned log; tests/test_graph_tuner_cost_model.py). Solve again until a pass
            # measures nothing. A calibrated plan keeps the costs it was calibrated with.
            if calibrate or len(self.transforms.seconds) == known:
                break
            plan, scale = self._in_network(best(costs), best)
        if plan.baselines_ms["default"] is None:
            plan.notes.append(
                f"default plan n/a: some layer has no record at AutoTVM's default layouts "
                f"(blocks of at most {cand.simd_lanes()} channels, the SIMD width)"
            )
        return plan

    def _in_network(self, plan: Plan, best: Callable) -> tuple[Plan, float]:
        """``plan`` (solved with the times taken alone) costed with the log's in-network ratios
        (``tune``'s last step), and its in-network / alone cost, which the baselines are scaled
        by (solved with the times taken alone, they want only the transforms the log holds).
        The choice stays the alone-timed one: calibration kept it on four of the five bench
        models (benchmarks/README.md, session 19); the costs become what the network pays.
        A cost the ratios lack is its group's median ratio (:class:`InNetworkCosts`)."""
        if not self.network:
            return plan, 1.0
        # The same configs; the joins and other steps may move to blocks cheaper in the network,
        # measuring a transform the log lacks as any solve does (`tune` appends those
        # its own solves want: tuning.settle_transforms).
        try:
            costed = best(self.network, only={lc.name: lc.candidate.config for lc in plan.layers})
        except GraphTunerError:  # not measuring (measure=False), and it wants a transform not known
            plan.notes.append("the log's in-network ratios (written by tune) would move this plan to a transform "
                              "not known here: its costs are times taken alone")
            return plan, 1.0
        left = self.network.unmeasured(costed)
        costed.notes.append(f"costs in the network: the log's in-network ratios (written by tune) for "
                            + (f"all but {left} of the plan's steps (those at their group's median ratio)" if left
                               else "every step of the plan")
                            + f"; taken alone, the plan costs {plan.cost:.3f} ms, and so do the baselines, "
                              f"scaled by {costed.cost / plan.cost:.3f}")
        return costed, costed.cost / plan.cost

    def step_records(self) -> list[dict]:
        """The other steps' timings :meth:`benchmark_steps` took here (not from the log), as
        records to append to the log (:func:`graph_tuner.records.make_step_record`)."""
        from graph_tuner.executor.step_timing import step_identities
        from graph_tuner.records import make_step_record

        ids = step_identities(self.model)
        return [make_step_record(self.model.name, name, block, ids[name], ms / 1e3, self.target)
                for (name, block), ms in self.timed_steps.items()]

    def network_records(self, plan: Plan) -> list[dict]:
        """``plan``'s in-network ratios over this log's alone times, as records to append to
        the log (:func:`graph_tuner.records.make_network_record`): ``tune``'s last step."""
        from graph_tuner.calibration import plan_ratios
        from graph_tuner.records import make_network_record

        conv_s = {(name, c.config): c.time for name, cs in self.all_candidates.items() for c in cs}
        ratios = plan_ratios(plan, conv_s, self.step_ms, self.transforms.seconds)
        entity = {(lc.name, lc.candidate.config): lc.candidate.record.entity for lc in plan.layers}
        rows = ([("conv", layer, entity[(layer, config)], r) for (layer, config), r in ratios.convs.items()]
                + [("step", step, block, r) for (step, block), r in ratios.steps.items()]
                + [("transform", "", key, r) for key, r in ratios.transforms.items()])
        return [make_network_record(self.model.name, self.model.digest, kind, name, key, r, self.target)
                for kind, name, key, r in rows]

    # -- helpers ---------------------------------------------------------------------
    def _blocks(self) -> list[int]:
        return sorted({1} | {b for cs in self.all_candidates.values() for c in cs for b in (c.in_block, c.out_block)})

    def _baseline_picks(self, name: str) -> dict[str, list] | None:
        if name == "history_best":
            fixed = {n: [min(cs, key=lambda c: c.time)] for n, cs in self.all_candidates.items()}
        elif name == "default":
            fixed = {n: self._default_candidates(n, cs) for n, cs in self.all_candidates.items()}
        else:
            raise ValueError(f"unknown baseline {name!r}")
        return None if any(not cs for cs in fixed.values()) else fixed

    def _default_candidates(self, name: str, cs: list) -> list:
        """The layer's candidate at AutoTVM's default layouts (SIMD-width blocks)."""
        config = cand.fallback_config(self.flow.workloads[name], cand.simd_lanes())
        match = [c for c in cs if (c.in_block, c.out_block) == (config.ic_bn, config.oc_bn)]
        return [min(match, key=lambda c: c.time)] if match else []

    def baseline_plan(self, name: str, measure: bool | Callable = False,
                      costs: InNetworkCosts | None = None) -> Plan | None:
        """A reference plan under the same cost model (None if the log cannot form it).

        ``history_best``: each layer's fastest record, whatever its layouts.
        ``default``: each layer at AutoTVM's default layouts (SIMD-width blocks).
        Both let adds and concats take their best layout, which favours them. ``costs``:
        the in-network costs a calibrated plan was solved with (:mod:`graph_tuner.calibration`).
        """
        fixed = self._baseline_picks(name)
        if fixed is None:
            return None
        costs = InNetworkCosts() if costs is None else costs
        return select_measuring(self.flow, costs.candidates(fixed), costs.transform_costs(self.transforms.seconds),
                                self._measurer(measure), self._blocks(),
                                solver=f"{name} (dp over joins)", estimated=self.transforms.estimated,
                                step_ms=costs.step_costs(self.step_ms), target=self.target)

    def bench_plans(self, baselines: Iterable[str] = ("history_best", "default")) -> dict[str, Plan | None]:
        """The plans ``graph-tuner bench`` runs: ``graph_tuned``, with the whole network in the
        objective (the other steps costed: :meth:`benchmark_steps`), and each of ``baselines``
        (:meth:`baseline_plan`, None where the log cannot form it), their transforms measured as
        they need (this CPU's cache)."""
        self.benchmark_steps()
        plans = {"graph_tuned": self.solve(measure=True)}
        for name in baselines:
            plans[name] = self.baseline_plan(name, measure=True)
        return plans

    def _check_calibration_cpu(self) -> None:
        """Calibrated records carry this CPU's times under their target string: only for records
        timed on this CPU."""
        host, other = _foreign_cpus(self.log)
        if other:
            raise GraphTunerError(f"--calibrate writes this CPU's ({host}) in-network times into the records, which "
                                  f"were timed on {', '.join(other)}; tune here first (graph-tuner tune MODEL -o LOG)")

    def _cuda_plan(self) -> Plan:
        best = cand.best_per_workload(self.log, self.workloads, target=self.target)
        return passthrough_plan(self.model.name, self.target, best, list(self.warnings) + [
            f"cuda: no layout selection; the fastest record for each of {len(best)} distinct workloads"])


def solve_log(model: Model, log, top_k: int = 20) -> Plan:
    """The plan a solve of ``log`` for ``model`` (a loaded model) makes with the whole network in
    the objective: the other steps costed (their timings in the log first,
    :meth:`GraphTuner.benchmark_steps`), the transforms it needs measured (this CPU's cache), as
    ``graph-tuner solve`` and ``bench`` do; what the benchmarks that need no more of the tuner
    run. Solved without the steps, a plan leaves them out of the objective and may be another."""
    return GraphTuner(model, log, top_k=top_k).bench_plans(())["graph_tuned"]


def apply_records(
    model: str | os.PathLike | Model,
    records: str | os.PathLike | Iterable[str],
    transforms: TransformCosts | None = None,
    *,
    batch: int | None = None,
    measure: bool = True,
    progress: bool = False,
    tuning=None,
) -> Plan:
    """The plan a positional x86 log describes: conv layer i runs record i.

    This is how TVM's ``apply_graph_best`` reads a graph-tuned log. The log fixes each
    conv's schedule and layouts; adds and concats then take their best layout under the
    cost model, and the transforms follow. Missing transform costs are read from the disk
    cache, else measured (``measure=True``) or estimated. A log whose length or
    workloads do not match the model's conv layers is a :class:`GraphTunerError`.

    The conv records carry what the network pays (``solve`` writes them so); the transforms and
    the other steps are times taken alone, unless ``tuning`` (the tuning log the plan was solved
    from, a path or read) gives the model's transform and step timings and in-network ratios:
    then they are costed as ``solve`` costed them, and the plan's cost is its prediction (a plan
    log holds one record a conv layer and nothing else, as TVM reads it). Exactly so for the
    plan the log's ratios were taken on (``tune``'s); a step or transform of another plan without
    a ratio of its own takes the median of fewer ratios here than in ``solve``.
    """
    check_environment()
    m = load_model(model, batch=batch)
    log = read_records(records)
    convs = m.convs()
    recs = [r for r in log.records if r.target_kind == "llvm" and r.task_name in cand.X86_TASKS]
    if len(recs) != len(convs):
        raise GraphTunerError(
            f"{getattr(records, 'name', records)}: {len(recs)} x86 conv records for {len(convs)} conv layers of "
            f"'{m.name}'; a graph-tuned log has exactly one per layer (write one with `graph-tuner solve`)"
        )
    from kernels.config_space import entity_config

    chosen: dict[str, list] = {}
    for i, (op, rec) in enumerate(zip(convs, recs)):
        w = m.workload(op)
        if cand.match_key(rec.workload) != cand.match_key(w) and not runs_winograd(w, rec.workload):
            raise GraphTunerError(
                f"{rec.source}: record {i} is for {cand.describe(rec.workload)} but layer {i} '{op.name}' is "
                f"{cand.describe(w)}; the log was written for another model"
            )
        config = entity_config(rec.entity)
        if w.is_depthwise and config.ic_bn != config.oc_bn:  # a depthwise channel reads and writes one block
            raise GraphTunerError(f"{rec.source}: record {i} (layer '{op.name}', depthwise) reads blocks of "
                                  f"{config.ic_bn} and writes blocks of {config.oc_bn}; our depthwise kernels need "
                                  "one block: solve the tuning log again with `graph-tuner solve`")
        chosen[op.name] = [cand.Candidate(rec, config.ic_bn, config.oc_bn, rec.time, config)]
    flow = analyse(m)
    costs = transforms or TransformCosts()
    if tuning is not None:
        tuning = tuning if hasattr(tuning, "network") else read_records(tuning)
        costs.load_records(tuning.transforms)
    costs.load_records(log.transforms)
    blocks = sorted({1} | {b for cs in chosen.values() for c in cs for b in (c.in_block, c.out_block)})
    # Joins may also pick the SIMD width's block, as TVM's AlterOpLayout would.
    blocks = sorted(set(blocks) | {cand.simd_lanes()})
    needed = required_transforms(flow, chosen, blocks)
    costs.fill(needed, measure=measure, estimate=not measure, progress=progress)
    network = InNetworkCosts.from_records(tuning.network, m.name, m.digest) if tuning is not None else InNetworkCosts()
    steps = None
    if measure:  # the other steps, in the blocks this log's layouts can give them
        from graph_tuner.executor.step_timing import costed_steps, logged_step_ms, step_ms

        logged = logged_step_ms(m, tuning.steps) if tuning is not None else {}
        steps = step_ms(m, required_step_blocks(flow, chosen, blocks, [s.ops[0] for s in costed_steps(m)]),
                        known=logged)
    return select(flow, chosen, network.transform_costs(costs.seconds), blocks, estimated=costs.estimated,
                  step_ms=network.step_costs(steps), target=recs[0].target)


def _foreign_cpus(log) -> tuple[str, list[str]]:
    """This CPU's LLVM name, and the other CPUs the log's x86 records were timed on."""
    from kernels.jit import host_cpu

    host = host_cpu().name
    return host, sorted({c for r in (*log.records, *log.transforms)
                         if r.target_kind == "llvm" and (c := target_cpu(r.target)) and c != host})


def _foreign_cpu_warnings(log, records) -> list[str]:
    """A warning when the x86 records were timed on other CPUs than this one: the plan is
    then optimal for that machine's times, and ``run``'s prediction is that machine's."""
    host, cpus = _foreign_cpus(log)
    if not cpus:
        return []
    where = f"{records}" if isinstance(records, (str, os.PathLike)) else "the records"
    return [f"{where} were timed on {', '.join(cpus)}, not on this CPU ({host}): the plan is optimal "
            f"for that machine; for this one, tune here first (graph-tuner tune MODEL -o LOG)"]
