"""The same problem as a toulbar2 weighted CSP (the exact C++ baseline).

Unary and edge costs become cost functions; a shared conversion becomes one cost
function over (src, distinct dsts) when its table is small, else binary auxiliary
variables z_b ("class b needed") with pairwise functions, as in solvers.dp.
"""
from __future__ import annotations

import numpy as np
import pytoulbar2

from solvers import Problem
from solvers.factors import conversion_factor, conversion_size

HARD = 1e6  # stands in for inf (ms); far above any real total
DIRECT = 20_000


def _finite(a):
    return np.where(np.isfinite(a), a, HARD).reshape(-1).tolist()


def solve_toulbar2(p: Problem):
    """Returns (choice, toulbar2's reported cost)."""
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
        if conversion_size(conv) <= DIRECT or len(set(conv.dsts) | {conv.src}) <= 2:
            f = conversion_factor(conv)
            if len(f.scope) == 1:
                cfn.AddFunction(list(f.scope), _finite(f.full()))
            else:
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
                if need.any() and d != conv.src:
                    cfn.AddFunction([d, z], _finite(np.stack([np.where(need, np.inf, 0.0), np.zeros(len(c))], 1)))
                elif need.any():  # src needs b itself: a unary condition on (src, z) again
                    cfn.AddFunction([d, z], _finite(np.stack([np.where(need, np.inf, 0.0), np.zeros(len(c))], 1)))
    res = cfn.Solve()
    if res is None:
        raise RuntimeError("toulbar2 found no solution")
    return [int(v) for v in res[0][: p.num_nodes]], float(res[1])
