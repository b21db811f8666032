"""Exact MILP (HiGHS through ``scipy.optimize.milp``) with the local-polytope model.

Variables (after the exact :mod:`~solvers.presolve`):

* ``x[i, a]`` binary, ``sum_a x[i, a] = 1`` per node;
* per edge, its matrix grouped into identical rows r / columns c
  (:func:`~solvers.factors.edge_factor`), ``y[r, c] >= 0`` with marginals
  ``sum_c y[r, c] = sum_{a in r} x[i, a]`` and ``sum_r y[r, c] = sum_{b in c} x[j, b]``
  (the marginal / local-polytope linearisation, much tighter than
  ``y >= x_i + x_j - 1``; ``inf`` entries get ``y = 0``);
* per shared conversion with src classes a and needed classes b:

  - one consumer: ``v[a, b] >= 0`` with the same marginal constraints against
    (class of src = a) and (consumer needs b), paying ``table[a][b] * v[a, b]``: the
    local polytope of the pair;
  - several consumers: ``w[a, b] >= 0`` ("src has class a and class b is needed")
    with ``w[a, b] <= X_src[a]`` and, for every consumer k and class b,
    ``sum_a w[a, b] >= X_k[b]``, paying ``table[a][b] * w[a, b]`` (0 when a == b).
    At an integral x only ``w[class(src), b]`` may be non-zero and it must be 1 for
    every needed b, so the cheapest w pays each needed class once: exact.  It is
    tighter than ``w >= X_src[a] + z_b - 1`` (which lets a fractional z_b pay
    nothing) and needs A*B columns per conversion rather than per consumer
    (measured: DenseNet-like 10.7k instead of 36.8k columns, root LP 0.3 s).

Objective coefficients are float64 (no integer scaling); HiGHS runs with relative and
absolute MIP gaps 0.  ``optimal`` is True only when HiGHS reports a proven optimum; with
``time_limit`` the incumbent and HiGHS's dual bound come back with ``optimal=False``.

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> s = solve_ilp(p); s.choice, s.cost, s.optimal
([0, 0], 1.0, True)
"""
from __future__ import annotations

import time
import warnings

import numpy as np
from scipy import sparse
from scipy.optimize import LinearConstraint, milp

from .factors import edge_factor
from .presolve import presolve
from .problem import Problem
from .solution import Infeasible, NoSolutionFound, Solution


class _Model:
    """Sparse MILP under construction: columns with cost/bounds/integrality, rows as triplets."""

    def __init__(self):
        self.cost, self.ub, self.integer = [], [], []
        self.rows, self.cols, self.vals, self.lo, self.hi = [], [], [], [], []
        self.n = 0
        self.m = 0

    def columns(self, cost, ub, integer=False) -> np.ndarray:
        cost = np.asarray(cost, dtype=float)
        ub = np.broadcast_to(np.asarray(ub, dtype=float), cost.shape).reshape(-1)
        cost = cost.reshape(-1)
        forbidden = ~np.isfinite(cost)
        self.cost.append(np.where(forbidden, 0.0, cost))
        self.ub.append(np.where(forbidden, 0.0, ub))
        self.integer.append(np.full(cost.shape, int(integer)))
        ids = np.arange(self.n, self.n + cost.size)
        self.n += cost.size
        return ids

    def rows_equal_zero(self, groups_plus, groups_minus):
        """Rows sum(plus[r]) - sum(minus[r]) = 0; each argument: (row_of_item, col ids)."""
        count = 0
        for sign, (row_of, cols) in ((1.0, groups_plus), (-1.0, groups_minus)):
            self.rows.append(self.m + np.asarray(row_of))
            self.cols.append(np.asarray(cols))
            self.vals.append(np.full(len(cols), sign))
            count = max(count, int(np.max(row_of)) + 1 if len(row_of) else 0)
        self.lo.append(np.zeros(count))
        self.hi.append(np.zeros(count))
        self.m += count

    def row(self, cols, vals, lo, hi):
        self.rows.append(np.full(len(cols), self.m))
        self.cols.append(np.asarray(cols))
        self.vals.append(np.asarray(vals, dtype=float))
        self.lo.append([lo])
        self.hi.append([hi])
        self.m += 1

    def solve(self, time_limit):
        a = sparse.csr_array(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.m, self.n),
        )
        # HiGHS's presolve costs more than it saves on these models (measured: DenseNet-like
        # 3.4 s -> 1.3 s without it)
        options = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0, "presolve": False}
        if time_limit is not None:
            options["time_limit"] = float(time_limit)
        with warnings.catch_warnings():
            # mip_abs_gap is passed to HiGHS verbatim; scipy warns that it does not know it
            warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
            return milp(
                np.concatenate(self.cost),
                integrality=np.concatenate(self.integer),
                bounds=(0.0, np.concatenate(self.ub)),
                constraints=LinearConstraint(a, np.concatenate(self.lo), np.concatenate(self.hi)),
                options=options,
            )


def _conversion(model: _Model, x: list[np.ndarray], conv) -> None:
    a_vals, a_of = np.unique(conv.src_class, return_inverse=True)
    b_vals = np.unique(np.concatenate(conv.dst_classes))
    tab = conv.table[np.ix_(a_vals, b_vals)]
    na, nb = tab.shape
    rows_a, cols_b = np.repeat(np.arange(na), nb), np.tile(np.arange(nb), na)
    if len(conv.dsts) == 1:
        # one consumer: the local polytope of the (src class, needed class) pair
        v = model.columns(tab, np.inf).reshape(-1)
        model.rows_equal_zero((rows_a, v), (a_of, x[conv.src]))
        b_of = np.searchsorted(b_vals, conv.dst_classes[0])
        model.rows_equal_zero((cols_b, v), (b_of, x[conv.dsts[0]]))
        return
    # w[a, b]: "src has class a and class b is needed"; w[a, b] <= X_src[a] and, for
    # every consumer k and class b, sum_a w[a, b] >= X_k[b]
    w = model.columns(tab, 1.0).reshape(na, nb)
    for aa in range(na):
        sel = x[conv.src][a_of == aa]
        for bb in range(nb):
            if np.isfinite(tab[aa, bb]):
                model.row(np.r_[sel, w[aa, bb]], np.r_[np.ones(len(sel)), -1.0], 0.0, np.inf)
    seen = set()
    for d, cls in zip(conv.dsts, conv.dst_classes):
        key = (d, cls.tobytes())
        if key in seen:
            continue
        seen.add(key)
        b_of = np.searchsorted(b_vals, cls)
        for bb in np.unique(b_of):
            sel = x[d][b_of == bb]
            model.row(np.r_[w[:, bb], sel], np.r_[np.ones(na), -np.ones(len(sel))], 0.0, np.inf)


def solve_ilp(p: Problem, *, time_limit: float | None = None) -> Solution:
    """Exact MILP (see module docstring); ``time_limit`` in seconds."""
    t0 = time.perf_counter()
    if p.num_nodes == 0:
        return Solution([], 0.0, True, 0.0, "ilp", {})
    pre = presolve(p)
    q = pre.problem
    model = _Model()
    unary = [c.copy() for c in q.costs]
    pending = []
    for (i, j), m in q.edges.items():
        f = edge_factor(i, j, m)
        if f.table.shape[0] == 1:
            unary[j] += f.table[0, f.idx[1]]
        elif f.table.shape[1] == 1:
            unary[i] += f.table[f.idx[0], 0]
        else:
            pending.append(f)
    x = [model.columns(u, 1.0, integer=True) for u in unary]
    for i, ids in enumerate(x):
        model.row(ids, np.ones(len(ids)), 1.0, 1.0)
    for f in pending:
        i, j = f.scope
        r, c = f.table.shape
        y = model.columns(f.table, np.inf).reshape(r, c)
        model.rows_equal_zero((np.repeat(np.arange(r), c), y.reshape(-1)), (f.idx[0], x[i]))
        model.rows_equal_zero((np.tile(np.arange(c), r), y.reshape(-1)), (f.idx[1], x[j]))
    for conv in q.conversions:
        if conv.dsts:
            _conversion(model, x, conv)
    t1 = time.perf_counter()
    res = model.solve(time_limit)
    t2 = time.perf_counter()
    stats = {"variables": model.n, "constraints": model.m, "build_time": t1 - t0,
             "solve_time": t2 - t1, "status": int(res.status), "message": res.message,
             "nodes": getattr(res, "mip_node_count", None)}
    if res.status == 2:
        raise Infeasible("every assignment has infinite cost (MILP infeasible)")
    if res.x is None:
        raise NoSolutionFound(f"ilp found no assignment within the limits ({res.message})")
    choice = pre.expand([int(np.argmax(res.x[ids])) for ids in x])
    cost = p.evaluate(choice)
    if not np.isfinite(cost):
        raise NoSolutionFound("ilp incumbent has infinite cost after rounding; raise time_limit")
    bound = getattr(res, "mip_dual_bound", None)
    bound = None if bound is None or not np.isfinite(bound) else float(min(bound, cost))
    optimal = res.status == 0
    stats["time"] = time.perf_counter() - t0
    return Solution(choice, cost, bool(optimal), cost if optimal else bound, "ilp", stats)
