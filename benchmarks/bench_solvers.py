"""Hand-run benchmark: dp / ilp / pbqp against toulbar2 on CNN-shaped problems.

    /work/venv/bin/python benchmarks/bench_solvers.py [--repeats 5] [--time-limit 60]

Prints instance, nodes, method, cost (always ``Problem.evaluate`` of the returned
choice), proven optimal, median wall time over the repeats (all in this one process,
side by side) and the time ratio to toulbar2.  toulbar2 gets the presolved problem
(see solvers.presolve) and its time includes presolve and model building, like ours.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import INSTANCES  # noqa: E402
from toulbar2_model import solve_toulbar2  # noqa: E402

from solvers import solve  # noqa: E402
from solvers.presolve import presolve  # noqa: E402


def run_toulbar2(p, time_limit):
    pre = presolve(p)
    choice, reported, proven = solve_toulbar2(pre.problem, int(time_limit))
    choice = pre.expand(choice)
    cost = p.evaluate(choice)
    assert abs(cost - reported) <= 1e-5 * max(1.0, cost), (cost, reported)  # its model == ours
    return cost, proven


def timed(fn, repeats, slow=2.0):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        if times[-1] > slow:  # one run of a slow method is enough
            break
    return out, statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds for ilp and toulbar2")
    ap.add_argument("--instances", nargs="*", default=list(INSTANCES))
    args = ap.parse_args(argv)
    print(f"{'instance':18} {'nodes':>5} {'method':8} {'cost':>12} {'optimal':>7} "
          f"{'time ms':>10} {'/toulbar2':>9}")
    for name in args.instances:
        p = INSTANCES[name]()
        rows = []
        try:
            (ref, proven), t_ref = timed(lambda: run_toulbar2(p, args.time_limit), args.repeats)
            rows.append(("toulbar2", ref, proven, t_ref))
        except Exception as e:  # noqa: BLE001 - report and carry on
            t_ref = None
            print(f"{name:18} {p.num_nodes:5} toulbar2 failed: {e}")
        for method in ("dp", "ilp", "pbqp"):
            try:
                s, t = timed(lambda: solve(p, method, time_limit=args.time_limit), args.repeats)
                rows.append((method, s.cost, s.optimal, t))
            except ValueError as e:
                print(f"{name:18} {p.num_nodes:5} {method:8} {type(e).__name__}: {str(e)[:70]}")
        for method, cost, optimal, t in rows:
            ratio = f"{t / t_ref:9.2f}" if t_ref else f"{'-':>9}"
            print(f"{name:18} {p.num_nodes:5} {method:8} {cost:12.6f} {str(optimal):>7} "
                  f"{t * 1e3:10.1f} {ratio}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
