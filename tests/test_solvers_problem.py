"""Problem validation, evaluate, method limits (brute cap, dp table cap, ilp time limit)."""
import math

import numpy as np
import pytest

from solvers import Infeasible, NoSolutionFound, Problem, TableTooLarge, solve


def test_bad_input_is_rejected():
    p = Problem()
    with pytest.raises(ValueError, match="negative"):
        p.add_node([1.0, -1.0])
    with pytest.raises(ValueError, match="NaN"):
        p.add_node([math.nan])
    with pytest.raises(ValueError, match="non-empty"):
        p.add_node([])
    a, b = p.add_node([0.0, 0.0]), p.add_node([0.0])
    with pytest.raises(ValueError, match="shape"):
        p.add_edge(a, b, [[0.0, 0.0]])
    with pytest.raises(ValueError, match="negative"):
        p.add_edge(a, b, [[0.0], [-2.0]])
    with pytest.raises(ValueError, match="unknown node"):
        p.add_edge(a, 7, [[0.0]])
    with pytest.raises(ValueError, match="negative"):
        p.add_conversion(a, [b], [0, 1], [[1]], [[0, -1], [1, 0]])
    with pytest.raises(ValueError, match=r"integers in \[0, 2\)"):
        p.add_conversion(a, [b], [0, 2], [[1]], [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="one class per choice"):
        p.add_conversion(a, [b], [0], [[1]], [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="square"):
        p.add_conversion(a, [b], [0, 1], [[1]], [[0, 1, 1], [1, 0, 1]])
    with pytest.raises(ValueError, match="out of range"):
        p.evaluate([2, 0])
    with pytest.raises(ValueError, match="unknown method"):
        solve(p, "magic")


def test_table_diagonal_is_ignored_and_repeated_edges_add():
    p = Problem()
    a, b = p.add_node([0.0, 0.0]), p.add_node([0.0, 0.0])
    p.add_edge(a, b, [[1.0, 0.0], [0.0, 0.0]])
    p.add_edge(b, a, [[2.0, 0.0], [0.0, 0.0]])  # transposed orientation, adds to the same pair
    # b listed twice: choice 0 needs {0}, choice 1 needs {1, 0}; the diagonal (99) is ignored
    p.add_conversion(a, [b, b], [0, 1], [[0, 1], [0, 0]], [[99.0, 5.0], [7.0, 99.0]])
    assert p.evaluate([0, 0]) == 1.0 + 2.0  # both edge entries, no conversion
    assert p.evaluate([1, 0]) == 7.0  # class 1 -> needs {0}
    assert p.evaluate([0, 1]) == 5.0  # class 0 -> needs {0, 1}: pays 0->1 once
    assert p.evaluate([1, 1]) == 7.0  # class 1 -> needs {1, 0}: pays 1->0 once


def test_all_inf_is_infeasible_for_every_method():
    p = Problem()
    a, b = p.add_node([0.0, 1.0]), p.add_node([2.0, 0.0])
    p.add_edge(a, b, [[math.inf, math.inf], [math.inf, math.inf]])
    for method in ("dp", "ilp", "pbqp", "brute"):
        with pytest.raises(Infeasible):
            solve(p, method)
    assert issubclass(Infeasible, ValueError)


def test_brute_refuses_huge_problems():
    p = Problem()
    for _ in range(8):
        p.add_node(np.zeros(10))
    with pytest.raises(ValueError, match="refuses"):
        solve(p, "brute")


def dense_problem(n=9, k=6, seed=0):
    rng = np.random.default_rng(seed)
    p = Problem()
    for _ in range(n):
        p.add_node(rng.uniform(0, 1, k))
    for i in range(n):
        for j in range(i + 1, n):
            p.add_edge(i, j, rng.uniform(0, 1, (k, k)))
    return p


def test_dp_table_cap_names_ilp():
    with pytest.raises(TableTooLarge, match="ilp"):
        solve(dense_problem(), "dp", max_table_entries=10_000)
    assert issubclass(TableTooLarge, ValueError)


@pytest.mark.parametrize("backend", ["cp-sat", "scip"])
def test_ilp_time_limit_returns_a_valid_choice_and_a_bound(backend):
    """Anytime: cut off at once, the ILP still returns the PBQP warm start (or better) with
    a proven bound below it; optimal only if that bound closes the gap."""
    p = dense_problem(n=12, k=8, seed=3)
    hint = solve(p, "pbqp")
    s = solve(p, "ilp", time_limit=0.0, backend=backend)
    assert s.cost == p.evaluate(s.choice) and s.cost <= hint.cost
    assert 0.0 <= s.bound <= s.cost
    assert s.optimal == (s.cost - s.bound <= 1e-9 * max(1.0, s.cost))


def test_ilp_time_limit_bound_is_below_the_optimum():
    """A short run's bound never exceeds the proven optimum of a full run."""
    p = dense_problem(n=8, k=5, seed=1)
    best = solve(p, "dp")
    s = solve(p, "ilp", time_limit=0.05)
    assert best.cost <= s.cost == p.evaluate(s.choice)
    assert s.bound <= best.cost + 1e-9 * best.cost


def test_ilp_starts_from_pbqp_only_under_a_time_limit():
    p = cnn_like(0)
    assert solve(p, "ilp").stats["hint_cost"] is None
    assert solve(p, "ilp", time_limit=60).stats["hint_cost"] == solve(p, "pbqp").cost


def test_ilp_without_warm_start_or_solution_is_a_clear_error():
    p = dense_problem(n=12, k=8, seed=3)
    with pytest.raises(NoSolutionFound, match="limit"):
        solve(p, "ilp", time_limit=0.0, warm_start=False)


def test_auto_falls_back_to_ilp_and_says_why():
    p = dense_problem()
    s = solve(p, "auto", max_table_entries=10_000)
    assert s.method == "ilp" and "table cap" in s.stats["auto"] and s.optimal
    assert abs(s.cost - solve(p, "dp").cost) <= 1e-9 * s.cost
    d = solve(p, "auto")
    assert d.method == "dp" and "fit" in d.stats["auto"] and d.cost == s.cost


def test_unknown_ilp_backend_is_rejected():
    with pytest.raises(ValueError, match="cp-sat"):
        solve(dense_problem(), "ilp", backend="gurobi")


def test_shared_conversion_is_paid_once_by_exact_methods():
    # conv output class 0 feeds three consumers that each need class 1 (or class 0 at cost 2)
    p = Problem()
    src = p.add_node([0.0])
    dsts = [p.add_node([2.0, 0.0]) for _ in range(3)]
    p.add_conversion(src, dsts, [0], [[0, 1]] * 3, [[0, 3], [3, 0]])
    # pay the transform once (3) and let all consumers take their free choice
    for method in ("dp", "ilp", "brute"):
        s = solve(p, method)
        assert s.cost == 3.0 and s.choice[1:] == [1, 1, 1] and s.optimal


def test_empty_problem():
    for method in ("dp", "ilp", "pbqp", "brute"):
        s = solve(Problem(), method)
        assert s.choice == [] and s.cost == 0.0 and s.optimal


def cnn_like(seed, n=30):
    """A chain with skip connections and shared conversions, choices = (in, out) classes."""
    rng = np.random.default_rng(seed)
    p = Problem()
    k = 4
    pairs = []
    for _ in range(n):
        m = int(rng.integers(6, 20))
        pairs.append((rng.integers(0, k, m), rng.integers(0, k, m)))
        p.add_node(rng.uniform(0, 10, m))
    table = rng.uniform(0.5, 3, (k, k))
    for i in range(n - 1):
        dsts = [i + 1] + ([i + 3] if i % 3 == 0 and i + 3 < n else [])
        needs = [pairs[d][0] for d in dsts]
        p.add_conversion(i, dsts, pairs[i][1], needs, table * rng.uniform(0.5, 2))
    return p


@pytest.mark.parametrize("backend", ["cp-sat", "scip"])
@pytest.mark.parametrize("seed", range(4))
def test_dp_ilp_agree_beyond_brute_force(seed, backend):
    """Problems too big for brute force, costs not exact in binary (CP-SAT's objective is
    scaled to integers): the exact methods must agree and pbqp never wins."""
    p = cnn_like(seed)
    d, i, b = solve(p, "dp"), solve(p, "ilp", backend=backend), solve(p, "pbqp")
    assert d.optimal and i.optimal
    assert abs(d.cost - i.cost) <= 1e-9 * d.cost
    assert i.bound <= i.cost and abs(i.bound - d.cost) <= 1e-9 * d.cost
    assert b.cost >= d.cost - 1e-9 * d.cost


def test_dp_two_stage_join_is_exact(monkeypatch):
    """A hub feeding three consumers (one 4-way conversion factor) whose outputs meet again:
    eliminating a consumer first joins the big factor with a small one in two stages."""
    rng = np.random.default_rng(7)
    p = Problem()
    k = 4
    hub = p.add_node(rng.uniform(0, 1, k))
    mids = [p.add_node(rng.uniform(0, 3, 16)) for _ in range(3)]
    sink = p.add_node(rng.uniform(0, 1, k))
    pairs = np.array([(i, o) for i in range(k) for o in range(k)])  # every (in, out) class
    table = rng.uniform(0.5, 2, (k, k))
    p.add_conversion(hub, mids, np.arange(k), [pairs[:, 0]] * 3, table)
    for m in mids:
        p.add_conversion(m, [sink], pairs[:, 1], [np.arange(k)], table)
    from solvers import dp
    from solvers.brute import solve_brute

    monkeypatch.setattr(dp, "elimination_order", lambda axis, domain: mids + [hub, sink])
    d = solve(p, "dp")
    assert d.stats["two_stage_joins"] >= 1
    assert abs(d.cost - solve_brute(p).cost) <= 1e-12
