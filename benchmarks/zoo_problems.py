"""The real selection problems of zoo models, as ``graph-tuner solve`` builds them.

ResNet-50 uses a real tuning log (``data/znver4/resnet-50.log``: kernel and transform
times measured on a Zen 4 EPYC), and so does any model with a log shipped in ``data/``.
A model without one (SSD) gets a log made with the real tuner's search over each distinct workload but a *synthetic*,
deterministic kernel time (:func:`synthetic_seconds`), and transform times are estimated
by ``TransformCosts.estimate_missing`` fitted on the ResNet-50 log's measured transforms:
those problems have real structure (layers, candidates per layer, joins, shared
conversions) but synthetic times.  Logs are cached in ``log_dir``.

    >>> problems = zoo_problems(["resnet-50"])  # doctest: +SKIP
"""
from __future__ import annotations

import zlib
from pathlib import Path

from graph_tuner import GraphTuner
from graph_tuner.loading import load_model
from graph_tuner.selection import build_problem
from graph_tuner.tuning import tune_workloads
from solvers import Problem

ROOT = Path(__file__).resolve().parents[1]
REAL_LOG = ROOT / "data" / "znver4" / "resnet-50.log"
MODELS = {"resnet-50": None, "inception-v3": 30, "densenet-121": 30, "ssd-resnet-50": 30}


def synthetic_seconds(workload, config) -> float:
    """A deterministic kernel time: FLOPs at a speed that grows with the channel blocks
    and the register tile, times a hash-seeded factor in [0.8, 1.6) (no real timing)."""
    speed = 40e9 * (1 + 0.15 * min(config.ic_bn, 16) ** 0.5 + 0.25 * min(config.oc_bn, 16) ** 0.5)
    speed *= 1 + 0.05 * min(config.ow_bn, 8)
    noise = zlib.crc32(repr((workload, config)).encode()) / 2**32
    return workload.flops / speed * (0.8 + 0.8 * noise)


def real_log(model: str) -> Path | None:
    """A tuning log shipped for ``model`` (this CPU's first), if any: ResNet-50's always."""
    from graph_tuner.shipped import shipped_log

    return REAL_LOG if model == "resnet-50" else shipped_log(model)


def zoo_problem(model: str, log_dir: Path, trials: int | None = None) -> Problem:
    """The selection problem of ``model`` (top 20 candidates per layer, as the CLI): from its
    shipped log when there is one, else with synthetic times (``trials`` per workload)."""
    if real_log(model) is not None:
        gt = GraphTuner(model, real_log(model))
    else:
        log = log_dir / f"{model}.synthetic-{trials}.log"
        if not log.exists():
            log_dir.mkdir(parents=True, exist_ok=True)
            part = log.with_suffix(".part")
            part.unlink(missing_ok=True)
            tune_workloads(load_model(model).distinct_workloads(), part, trials=trials,
                           measure=synthetic_seconds, transforms=False, progress=False)
            part.rename(log)
        gt = GraphTuner(model, log)
        gt.load_transform_records(REAL_LOG)
    gt.estimate_transforms()
    return build_problem(gt.flow, gt.candidates, gt.transforms.seconds, gt._blocks()).problem


def zoo_problems(models=tuple(MODELS), log_dir: Path = Path("/tmp/graph-tuner-bench-logs")):
    """``{"<model> (real|synthetic times)": Problem}``."""
    out = {}
    for m in models:
        kind = "real" if real_log(m) is not None else "synthetic times"
        out[f"{m} ({kind})"] = zoo_problem(m, log_dir, MODELS[m])
    return out
