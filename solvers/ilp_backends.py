"""MILP backends for :class:`~solvers.linear_model.LinearModel`: OR-Tools CP-SAT and SCIP
(through OR-Tools' model builder).  HiGHS through ``scipy.optimize.milp``, this package's
backend before, was slower than CP-SAT on every instance of ``benchmarks/bench_solvers.py``,
so it is only a baseline there (``benchmarks/highs_milp.py``).

Each takes the model, a complete hint (column values, or None), a time limit and a
number of workers, and returns a :class:`BackendResult` whose ``bound`` is a proven lower
bound on the model's true (float) objective.

Why CP-SAT runs without its own presolve: its presolve rewrites the marginal rows into
clauses and enforced linear constraints, which loses the local-polytope LP relaxation
(measured on the ResNet-50-like instance: root bound 55.6 against an optimum of 60.49,
not proven in 60 s; without presolve, proven in 0.22 s).  The model is already small:
:mod:`~solvers.presolve` ran first.

>>> from solvers import Problem
>>> from solvers.linear_model import linear_model
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> r = cpsat(linear_model(p), None, None, 1); r.status, r.bound
('optimal', 1.0)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .linear_model import LinearModel, PairBlock

# CP-SAT needs an integer objective: costs are scaled by a power of two so that the
# largest possible objective stays under 2**ACTIVITY_BITS (exact in float64, no int64
# overflow in CP-SAT's LP reasoning); measured as fast as CP-SAT's own float scaling.
ACTIVITY_BITS = 50
SUM_BITS = 60


@dataclass
class BackendResult:
    status: str  # "optimal" | "feasible" | "infeasible" | "unknown"
    values: np.ndarray | None  # column values of the best solution found
    bound: float | None  # proven lower bound on the objective (true units)
    stats: dict = field(default_factory=dict)


def integer_objective(m: LinearModel) -> tuple[np.ndarray, float, float]:
    """``(coefficients, scale, error)``: ``round(cost * scale)`` as int64, and a bound on
    ``|scale * objective - integer objective|`` at any solution's cheapest completion."""
    largest = _active_sum(m, m.cost)
    if largest == 0:
        return np.zeros(len(m.cost), dtype=np.int64), 1.0, 0.0
    # CP-SAT also refuses a model whose objective could overflow with every column at 1
    bits = min(ACTIVITY_BITS - math.ceil(math.log2(largest)),
               SUM_BITS - math.ceil(math.log2(m.cost.sum())))
    scale = 2.0 ** min(bits, 1000)  # (tiny costs: stay in float64's range)
    coef = np.round(m.cost * scale)
    return coef.astype(np.int64), scale, _active_sum(m, np.abs(coef - m.cost * scale))


def _active_sum(m: LinearModel, per_column: np.ndarray) -> float:
    """Upper bound of ``per_column @ v`` over integral solutions' cheapest completions: one
    column per node and per pair block, one per needed class of a shared conversion."""
    total = sum(float(per_column[ids].max()) for ids in m.x)
    for b in m.blocks:
        vals = per_column[b.ids]
        total += float(vals.max()) if isinstance(b, PairBlock) else float(vals.max(axis=0).sum())
    return total


def cpsat(m: LinearModel, hint: np.ndarray | None, time_limit: float | None,
          workers: int) -> BackendResult:
    """CP-SAT on the model as is (no CP-SAT presolve: see the module docstring)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    proto = model.proto
    for ub in m.upper:
        proto.variables.add().domain.extend([0, int(ub)])
    a = m.matrix.tocsr()
    coeffs = a.data.astype(np.int64)  # every coefficient is +-1
    big = 1 << 62  # CP-SAT's "unbounded" row side
    for r in range(a.shape[0]):
        s, e = a.indptr[r], a.indptr[r + 1]
        lin = proto.constraints.add().linear
        lin.vars.extend(a.indices[s:e].tolist())
        lin.coeffs.extend(coeffs[s:e].tolist())
        lo, hi = m.row_lo[r], m.row_hi[r]
        lin.domain.extend([int(lo) if np.isfinite(lo) else -big,
                           int(hi) if np.isfinite(hi) else big])
    coef, scale, error = integer_objective(m)
    nz = np.flatnonzero(coef)
    proto.objective.vars.extend(nz.tolist())
    proto.objective.coeffs.extend(coef[nz].tolist())
    if hint is not None:
        proto.solution_hint.vars.extend(range(len(hint)))
        proto.solution_hint.values.extend(hint.astype(np.int64).tolist())
    solver = cp_model.CpSolver()
    # See the module docstring; and: the whole LP from the start (not rows added lazily as
    # they are violated) and no probing at the root (measured on the synthetic instances,
    # 2 workers: ResNet-50-like 0.24 -> 0.06 s, DenseNet-121-like 1.4 -> 0.85 s).
    solver.parameters.cp_model_presolve = False
    solver.parameters.add_lp_constraints_lazily = False
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.num_workers = workers
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = float(time_limit)
    status = solver.solve(model)
    name = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
            cp_model.INFEASIBLE: "infeasible"}.get(status, "unknown")
    values = None
    if name in ("optimal", "feasible"):
        values = np.asarray(solver.response_proto.solution, dtype=float)
    bound = None
    if name != "infeasible" and math.isfinite(solver.best_objective_bound):
        bound = (solver.best_objective_bound - error) / scale
    stats = {"backend": "cp-sat", "workers": workers, "scale": scale,
             "conflicts": solver.num_conflicts, "branches": solver.num_branches,
             "message": solver.status_name(status)}
    return BackendResult(name, values, bound, stats)


def scip(m: LinearModel, hint: np.ndarray | None, time_limit: float | None,
         workers: int) -> BackendResult:
    """SCIP through OR-Tools' model builder (single-threaded: ``workers`` is unused)."""
    from scipy import sparse
    from ortools.linear_solver.python import model_builder_helper as mbh

    n = len(m.cost)
    model = mbh.ModelBuilderHelper()
    model.fill_model_from_sparse_data(np.zeros(n), m.upper, m.cost, m.row_lo, m.row_hi,
                                      sparse.csr_matrix(m.matrix))
    for k in range(n):
        model.set_var_integrality(k, True)
    if hint is not None:
        for k, v in enumerate(hint):
            model.add_hint(k, float(v))
    solver = mbh.ModelSolverHelper("scip")
    if time_limit is not None:
        # a limit of 0 would mean none
        solver.set_time_limit_in_seconds(max(float(time_limit), 1e-3))
    # SCIP's presolve runs for minutes on these models (hundreds of rounds each deleting a
    # couple of columns, deaf to the time limit: chain-20 over 500 s, 17 ms without it)
    solver.set_solver_specific_parameters("presolving/maxrounds = 0")
    solver.solve(model)
    status = str(solver.status()).rsplit(".", 1)[-1]
    name = {"OPTIMAL": "optimal", "FEASIBLE": "feasible",
            "INFEASIBLE": "infeasible"}.get(status, "unknown")
    values = solver.variable_values() if solver.has_solution() else None
    if values is not None and name == "unknown":
        name = "feasible"
    bound = solver.best_objective_bound() if name != "infeasible" else None
    bound = bound if bound is not None and math.isfinite(bound) else None
    return BackendResult(name, None if values is None else np.asarray(values), bound,
                         {"backend": "scip", "message": status})


BACKENDS = {"cp-sat": cpsat, "scip": scip}
