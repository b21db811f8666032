"""Hand-run benchmark: every solver side by side on CNN-shaped and real zoo problems.

    python benchmarks/bench_solvers.py [--repeats 5] [--time-limit 60] [--instances ...]
                                       [--methods ...] [--no-zoo]

Methods: ``auto``, ``dp``, the ILP with each backend (``cp-sat`` on all cores,
``cp-sat-warm`` from the PBQP solution as under a time limit, ``cp-sat-1`` on one
worker, ``scip``; the warm start is set explicitly, ``--time-limit`` only caps the runs),
``pbqp``, and two baselines: ``highs`` (``highs_milp.py``: the same model through
``scipy.optimize.milp``, this package's ILP before OR-Tools) and ``toulbar2``
(``pip install .[bench]``; it gets the presolved problem).  Every time includes presolve
and model building.

Instances: the synthetic ones of ``synthetic.py`` and the zoo models' real problems of
``zoo_problems.py`` (ResNet-50 from a real log; Inception-v3, DenseNet-121 and SSD with
real structure but synthetic times).  Each repeat runs every method once, interleaved, all
in this one process; a method's time is the median over the repeats (one run only when a
run took over ``--slow`` seconds).  Prints one Markdown row per instance: median ms, and
for each method a mark: ``*`` proven optimal, ``+x%`` a worse cost than the best exact
one, ``!`` an exact method that disagrees with another (a bug).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import INSTANCES  # noqa: E402

from solvers import solve  # noqa: E402
from solvers.presolve import presolve  # noqa: E402

METHODS = {  # the ILP's default is cold without a time limit, warm with one
    "auto": ("auto", {}),
    "dp": ("dp", {}),
    "cp-sat": ("ilp", {"backend": "cp-sat", "warm_start": False}),
    "cp-sat-warm": ("ilp", {"backend": "cp-sat", "warm_start": True}),
    "cp-sat-1": ("ilp", {"backend": "cp-sat", "workers": 1, "warm_start": False}),
    "scip": ("ilp", {"backend": "scip", "warm_start": False}),
    "pbqp": ("pbqp", {}),
}
EXACT = {"auto", "dp", "cp-sat", "cp-sat-warm", "cp-sat-1", "scip", "highs", "toulbar2"}


def run(method: str, p, time_limit: float) -> tuple[float, bool]:
    """(cost, proven optimal) of one run."""
    if method == "toulbar2":
        from toulbar2_model import solve_toulbar2

        pre = presolve(p)
        choice, reported, proven = solve_toulbar2(pre.problem, int(time_limit))
        cost = p.evaluate(pre.expand(choice))
        assert abs(cost - reported) <= 1e-5 * max(1.0, cost), (cost, reported)  # same model
        return cost, proven
    if method == "highs":
        from highs_milp import solve_highs

        return solve_highs(p, time_limit)
    name, options = METHODS[method]
    s = solve(p, name, time_limit=time_limit if name in ("auto", "ilp") else None, **options)
    return s.cost, s.optimal


def bench(p, methods, repeats: int, time_limit: float, slow: float) -> dict:
    """{method: (median seconds, cost, proven) or an error string}, runs interleaved."""
    times: dict[str, list[float]] = {m: [] for m in methods}
    out: dict = {}
    for _ in range(repeats):
        for m in methods:
            if isinstance(out.get(m), str) or (times[m] and times[m][-1] > slow):
                continue
            t = time.perf_counter()
            try:
                cost, proven = run(m, p, time_limit)
            except Exception as e:  # noqa: BLE001 - a method's failure is a result
                out[m] = f"{type(e).__name__}"
                continue
            times[m].append(time.perf_counter() - t)
            out[m] = (statistics.median(times[m]), cost, proven)
    return out


def cell(m: str, r, best: float | None, agree: bool) -> str:
    if isinstance(r, str) or r is None:
        return r or "-"
    t, cost, proven = r
    mark = "*" if proven else ""
    if best is not None and cost > best * (1 + 1e-6):
        mark += f" +{100 * (cost / best - 1):.2g}%"
    if m in EXACT and proven and not agree:
        mark += " !"
    return f"{t * 1e3:.1f}{mark}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds for ilp / toulbar2")
    ap.add_argument("--slow", type=float, default=5.0, help="run only once what takes longer")
    ap.add_argument("--instances", nargs="*", default=list(INSTANCES))
    ap.add_argument("--methods", nargs="*", default=["toulbar2", *METHODS, "highs"])
    ap.add_argument("--no-zoo", action="store_true", help="synthetic instances only")
    args = ap.parse_args(argv)
    problems = {name: INSTANCES[name]() for name in args.instances}
    if not args.no_zoo:
        from zoo_problems import zoo_problems
        problems.update(zoo_problems())
    print(f"# {os.cpu_count()} cores; median ms over {args.repeats} interleaved repeats; "
          "* = proven optimal")
    print("| instance | nodes | " + " | ".join(args.methods) + " |")
    print("|---|---|" + "---|" * len(args.methods))
    for name, p in problems.items():
        res = bench(p, args.methods, args.repeats, args.time_limit, args.slow)
        proven = [r[1] for m, r in res.items() if m in EXACT and isinstance(r, tuple) and r[2]]
        best = min(proven) if proven else None
        agree = not proven or max(proven) - min(proven) <= 1e-6 * max(1.0, min(proven))
        cells = [cell(m, res.get(m), best, agree) for m in args.methods]
        print(f"| {name} | {p.num_nodes} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
