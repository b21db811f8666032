"""Hand-run: what tuning on a Dask cluster costs over tuning locally, on this one machine.

    python benchmarks/cluster_tune.py resnet-50 [--trials 40] [--workers 1 2]

Tunes MODEL from scratch (a new log, an empty layout-transform cache) once locally
(``graph-tuner tune``) and once on a ``distributed.LocalCluster`` of N single-thread
worker processes declaring ``measure=1`` for each N of ``--workers`` (``tune --cluster``),
and prints per run:

* the wall time of the tuning call (the cluster already running, as a fleet's would be);
* the conv search's time, summed over the workloads (a job's time on its worker, less
  sending its records; locally, each workload's tuning time);
* the overhead per workload: from the job's start on its worker to its result at the
  client, less its measuring time, as a % of its measuring time (median and max over the
  workloads) -- dispatch, reading and sending the records, the result's way back. (From
  the submit instead, a job would also count its wait for a free worker.)
* the largest workload's measuring time: across real machines the wall time cannot drop
  below it, whatever their number.

Two workers on one machine measure at once, on the same cores: that run shows scheduling
and overhead, not the speed-up of two machines (each worker uses all cores,
``GRAPH_TUNER_NUM_THREADS`` or every core). Minutes of all-core CPU for resnet-50: run it on
a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def local_run(model: str, folder: Path, trials: int) -> dict:
    from graph_tuner.tune_api import tune

    t0 = time.perf_counter()
    summaries = tune(model, folder / "local.log", trials=trials, progress=False)
    wall = time.perf_counter() - t0
    return {"run": "local", "wall": wall, "measuring": sum(s.wall_seconds for s in summaries),
            "largest": max(s.wall_seconds for s in summaries), "overheads": []}


def cluster_run(model: str, folder: Path, trials: int, workers: int) -> dict:
    from distributed import Client, LocalCluster

    from graph_tuner.tune_api import tune

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, resources={"measure": 1},
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        t0 = time.perf_counter()
        result = tune(model, folder / f"cluster-{workers}.log", trials=trials, cluster=client, progress=False)
        wall = time.perf_counter() - t0
    convs = [r for r in result.reports if r.summary is not None]
    return {"run": f"{workers} worker{'s' if workers > 1 else ''}", "wall": wall,
            "measuring": sum(r.seconds for r in convs),
            "largest": max(r.seconds for r in convs),
            "overheads": [(r.received - r.started - r.seconds) / r.seconds for r in convs if r.seconds > 0],
            "overall": result.overhead()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="zoo name or .onnx file")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    rows = []
    for n in [0, *args.workers]:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            # An empty transform cache each run (the workers inherit it): every run measures.
            os.environ["GRAPH_TUNER_CACHE_DIR"] = str(folder / "cache")
            rows.append(local_run(args.model, folder, args.trials) if n == 0
                        else cluster_run(args.model, folder, args.trials, n))
        print(_row(rows[-1], rows[0]["wall"]), flush=True)


def _row(r: dict, local_wall: float) -> str:
    over = r["overheads"]
    per = (f"overhead per workload median {100 * statistics.median(over):.2f}%, max {100 * max(over):.2f}%; "
           f"all jobs {100 * r['overall']:.2f}%" if over else "")
    return (f"{r['run']:>10}: wall {r['wall']:.1f} s ({r['wall'] / local_wall:.2f}x local), conv search "
            f"{r['measuring']:.1f} s (its workloads' summed times), largest workload {r['largest']:.1f} s; {per}")


if __name__ == "__main__":
    main()
