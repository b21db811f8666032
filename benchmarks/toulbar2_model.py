"""The same problem as a toulbar2 weighted CSP (the exact C++ baseline).

Unary and edge costs become cost functions; a shared conversion becomes one cost
function over (src, distinct dsts) when its table over full domains is small, else
binary auxiliary variables z_b ("class b needed") with pairwise functions, as in
solvers.dp.  toulbar2 runs with its default options.
"""
from __future__ import annotations

import numpy as np
import pytoulbar2

from solvers import Problem
from solvers.factors import conversion_factor

HARD = 1e6  # stands in for inf (ms); far above any real total
DIRECT = 20_000


def _finite(a):
    return np.where(np.isfinite(a), a, HARD).reshape(-1).tolist()


def solve_toulbar2(p: Problem, time_limit: int = 0):
    """Returns (choice, toulbar2's reported cost, proven optimal)."""
    cfn = pytoulbar2.CFN(resolution=6)
    for i, c in enumerate(p.costs):
        cfn.AddVariable(f"x{i}", range(len(c)))
        cfn.AddFunction([i], _finite(c))
    for (i, j), m in p.edges.items():
        cfn.AddFunction([i, j], _finite(m))
    nvar = p.num_nodes
    for conv in p.conversions:
        if not conv.dsts:
            continue
        scope = set(conv.dsts) | {conv.src}
        if len(scope) <= 2 or np.prod([len(p.costs[v]) for v in scope], dtype=float) <= DIRECT:
            f = conversion_factor(conv)
            cfn.AddFunction(list(f.scope), _finite(f.full()))
            continue
        for b in np.unique(np.concatenate(conv.dst_classes)):
            cfn.AddVariable(f"z{nvar}", range(2))
            z = nvar
            nvar += 1
            pay = np.stack([np.zeros(len(conv.src_class)), conv.table[conv.src_class, b]], 1)
            cfn.AddFunction([conv.src, z], _finite(pay))
            for d, c in zip(conv.dsts, conv.dst_classes):
                need = c == b
                if need.any():  # forbidden: consumer needs b but z_b = 0
                    forbid = np.stack([np.where(need, np.inf, 0.0), np.zeros(len(c))], 1)
                    cfn.AddFunction([d, z], _finite(forbid))
    res = cfn.Solve(timeLimit=time_limit)
    if res is None:
        raise RuntimeError("toulbar2 found no solution")
    proven = cfn.GetDDualBound() >= float(res[1]) - 1e-6
    return [int(v) for v in res[0][: p.num_nodes]], float(res[1]), proven
