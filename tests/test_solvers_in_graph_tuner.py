"""The solver choice as `graph-tuner solve` reports it: auto says which method ran and why,
a time-limited ILP prints its gap."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from graph_tuner import GraphTuner

X86 = Path(__file__).parent / "data" / "resnet18_x86_v01_typographic.log"


@pytest.fixture(scope="module")
def tuner():
    gt = GraphTuner("resnet-18", X86)
    for shape, a, b in gt.required_transforms():
        gt.transforms.add(shape, a, b, math.prod(shape) * 1e-10)
    return gt


def test_auto_reports_which_method_ran_and_why(tuner):
    auto, ilp = tuner.solve(), tuner.solve(solver="ilp")
    assert auto.solver.startswith("dp (auto: dp's tables fit")
    assert auto.solver in auto.report() and "gap" not in auto.report()
    assert auto.optimal and ilp.optimal and ilp.cost == pytest.approx(auto.cost, rel=1e-9)


def test_time_limited_ilp_reports_its_gap(tuner):
    best = tuner.solve(solver="dp").cost
    plan = tuner.solve(solver="ilp", time_limit=0.0)  # stopped at once: the warm start
    assert not plan.optimal and plan.bound_ms <= best <= plan.cost
    assert f"gap {plan.cost - plan.bound_ms:.4f} ms" in plan.report()
