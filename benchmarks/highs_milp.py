"""The baseline the ILP used before OR-Tools: HiGHS through ``scipy.optimize.milp`` on the
same presolved local-polytope model (:mod:`solvers.linear_model`), no warm start (scipy
passes no MIP start).  Its time includes presolve and model building, like the others'.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import LinearConstraint, milp

from solvers import Problem
from solvers.linear_model import linear_model
from solvers.presolve import presolve


def solve_highs(p: Problem, time_limit: float | None = None) -> tuple[float, bool]:
    """(cost of the best assignment found, proven optimal)."""
    pre = presolve(p)
    m = linear_model(pre.problem)
    # HiGHS's presolve costs more than it saves on these models (measured: DenseNet-like
    # 3.4 s -> 1.3 s without it)
    options = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0, "presolve": False}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    with warnings.catch_warnings():
        # mip_abs_gap is passed to HiGHS verbatim; scipy warns that it does not know it
        warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
        res = milp(m.cost, integrality=np.ones(len(m.cost)), bounds=(0.0, m.upper),
                   constraints=LinearConstraint(m.matrix, m.row_lo, m.row_hi), options=options)
    if res.x is None:
        raise RuntimeError(f"HiGHS found no solution: {res.message}")
    return p.evaluate(pre.expand(m.choice(res.x))), res.status == 0
