"""Random problems: exact methods equal brute force, pbqp never beats it or lies."""
import itertools
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers import Infeasible, NoSolutionFound, Problem, dp, solve
from solvers.brute import solve_brute

COST = st.sampled_from([0.0, 0.0, 0.25, 1.0, 1.5, 2.0, 3.0, 7.5, math.inf])


@st.composite
def problems(draw, max_nodes=5, inf_weight=1):
    n = draw(st.integers(1, max_nodes))
    sizes = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    cost = COST if inf_weight else COST.filter(math.isfinite)
    costs = [draw(st.lists(cost, min_size=s, max_size=s)) for s in sizes]
    spec = {"costs": costs, "edges": [], "conv": []}
    for _ in range(draw(st.integers(0, 2 * n))):
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        m = [draw(st.lists(cost, min_size=sizes[j], max_size=sizes[j])) for _ in range(sizes[i])]
        spec["edges"].append((i, j, m))
    for _ in range(draw(st.integers(0, 3))):
        k = draw(st.integers(1, 4))
        src = draw(st.integers(0, n - 1))
        dsts = draw(st.lists(st.integers(0, n - 1), min_size=0, max_size=4))  # repeats allowed
        cls = st.integers(0, k - 1)
        spec["conv"].append((
            src, dsts,
            draw(st.lists(cls, min_size=sizes[src], max_size=sizes[src])),
            [draw(st.lists(cls, min_size=sizes[d], max_size=sizes[d])) for d in dsts],
            [draw(st.lists(cost, min_size=k, max_size=k)) for _ in range(k)],
        ))
    return spec


def build(spec) -> Problem:
    p = Problem()
    for c in spec["costs"]:
        p.add_node(c)
    for i, j, m in spec["edges"]:
        p.add_edge(i, j, m)
    for c in spec["conv"]:
        p.add_conversion(*c)
    return p


def reference_cost(spec, x) -> float:
    """Straightforward re-implementation of the objective from the raw spec."""
    total = sum(c[x[i]] for i, c in enumerate(spec["costs"]))
    total += sum(m[x[i]][x[j]] for i, j, m in spec["edges"])
    for src, dsts, src_class, dst_classes, table in spec["conv"]:
        a = src_class[x[src]]
        for b in {dst_classes[k][x[d]] for k, d in enumerate(dsts)}:
            if b != a:
                total += table[a][b]
    return total


def reference_optimum(spec) -> float:
    every = itertools.product(*(range(len(c)) for c in spec["costs"]))
    return min(reference_cost(spec, x) for x in every)


def close(a, b):
    return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problems(), st.data())
def test_evaluate_matches_reference(spec, data):
    p = build(spec)
    x = [data.draw(st.integers(0, len(c) - 1)) for c in spec["costs"]]
    assert close(p.evaluate(x), reference_cost(spec, x))


@SETTINGS
@given(problems())
def test_brute_matches_reference_enumeration(spec):
    p, best = build(spec), reference_optimum(spec)
    if math.isinf(best):
        with pytest.raises(Infeasible):
            solve_brute(p)
    else:
        assert close(solve_brute(p).cost, best)


@pytest.mark.parametrize("variant", ["direct", "needed-set-chain", "aux-z"])
@SETTINGS
@given(spec=problems())
def test_dp_equals_brute(spec, variant):
    """Each exact encoding of shared conversions: one factor, needed-set chain, z_b vars."""
    p, best = build(spec), reference_optimum(spec)
    options = {} if variant == "direct" else {"direct_conversion_entries": 1}
    with mock.patch.object(dp, "MAX_CHAIN_CLASSES", 0 if variant == "aux-z" else 7):
        if math.isinf(best):
            with pytest.raises(Infeasible):
                solve(p, "dp", **options)
            return
        s = solve(p, "dp", **options)
    assert s.optimal and close(s.cost, best) and close(s.cost, p.evaluate(s.choice))
    assert close(s.bound, best) and s.bound <= s.cost


@pytest.mark.parametrize("variant", ["direct", "needed-set-chain", "aux-z"])
@SETTINGS
@given(spec=problems(max_nodes=6), data=st.data())
def test_dp_equals_brute_in_any_elimination_order(spec, variant, data):
    """Exactness must not hang on the order heuristic: with the variables eliminated in any
    order (more two-stage joins meet factors of unused rows), dp still equals brute force.
    A z_b factor of a consumer needing the same class for every choice had an unused row,
    which a two-stage join let into its min (review, session 51)."""
    p, best = build(spec), reference_optimum(spec)
    options = {} if variant == "direct" else {"direct_conversion_entries": 1}
    with mock.patch.object(dp, "MAX_CHAIN_CLASSES", 0 if variant == "aux-z" else 7), \
            mock.patch.object(dp, "elimination_order", lambda axis, dom: data.draw(st.permutations(sorted(dom)))):
        if math.isinf(best):
            with pytest.raises(Infeasible):
                solve(p, "dp", **options)
            return
        s = solve(p, "dp", **options)
    assert s.optimal and close(s.cost, best) and s.bound <= s.cost and close(s.bound, best)


def test_dp_z_b_encoding_with_a_consumer_that_always_needs_one_class():
    """The review's case: brute force 2.2317, dp returned 3.0654 with optimal=True and bound 2.0031."""
    rng = np.random.default_rng(1)
    q = Problem()
    s = q.add_node(rng.uniform(0, 1, 5))  # the source, classes 0..4
    c = q.add_node(rng.uniform(0, 1, 8))  # every choice needs class 5
    e = q.add_node(rng.uniform(0, 1, 3))
    t = q.add_node(rng.uniform(0, 1, 2))
    q.add_edge(c, t, rng.uniform(0, 1, (8, 2)))
    q.add_conversion(s, [c, e], np.arange(5), [np.full(8, 5), np.array([0, 5, 6])], rng.uniform(1, 2, (8, 8)))
    with mock.patch.object(dp, "MAX_CHAIN_CLASSES", 0), \
            mock.patch.object(dp, "elimination_order", lambda axis, dom: [v for v in dom if v >= 4] + [c, s, e, t]):
        r = dp.solve_dp(q, direct_conversion_entries=1)
    assert r.optimal and close(r.cost, solve_brute(q).cost) and close(r.bound, r.cost)


def test_dp_takes_a_conversion_with_thousands_of_consumers():
    """needed_set recursed once per consumer: 1,200 of them raised RecursionError."""
    q = Problem()
    src = q.add_node([0.0, 1.0])
    dsts = [q.add_node([0.0, 0.5]) for _ in range(1200)]
    # every consumer needs class 1 on its first choice and class 0 on its second
    q.add_conversion(src, dsts, [0, 1], [[1, 0]] * len(dsts), [[0.0, 1.0], [1.0, 0.0]])
    r = solve(q, "dp", direct_conversion_entries=1)
    assert r.optimal and close(r.cost, 1.0) and r.cost == q.evaluate(r.choice)


def test_auto_gives_dp_its_options_and_the_ilp_the_others():
    """auto ignored direct_conversion_entries when dp ran, and passed it to the ILP (a TypeError)
    when dp's cap was hit."""
    q = Problem()
    src = q.add_node([0.0, 1.0])
    dsts = [q.add_node([0.0, 0.5]) for _ in range(3)]
    q.add_conversion(src, dsts, [0, 1], [[1, 0], [1, 1], [0, 1]], [[0.0, 1.0], [1.0, 0.0]])
    assert solve(q, "auto").stats["aux_variables"] == 0  # one factor: its 16 entries are under the default
    assert solve(q, "auto", direct_conversion_entries=1).stats["aux_variables"] > 0
    s = solve(q, "auto", direct_conversion_entries=1, max_table_entries=1)
    assert s.method == "ilp" and close(s.cost, solve_brute(q).cost)


@pytest.mark.parametrize("backend, warm_start", [
    ("cp-sat", True), ("cp-sat", False), ("scip", True)])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=problems())
def test_ilp_equals_brute(spec, backend, warm_start):
    """Every backend, with and without the PBQP hint: the optimum and a tight proven bound."""
    p, best = build(spec), reference_optimum(spec)
    options = {"backend": backend, "warm_start": warm_start}
    if math.isinf(best):
        with pytest.raises(Infeasible):
            solve(p, "ilp", **options)
        return
    s = solve(p, "ilp", **options)
    assert s.optimal and close(s.cost, best) and close(s.cost, p.evaluate(s.choice))
    assert s.bound <= s.cost and close(s.bound, best)


@SETTINGS
@given(problems(), st.sampled_from([1, 10**9]))
def test_auto_equals_brute_and_says_which_ran(spec, cap):
    """auto is dp when its tables fit (cap 1e9), else the ILP (cap 1: nothing fits)."""
    p, best = build(spec), reference_optimum(spec)
    if math.isinf(best):
        with pytest.raises(Infeasible):
            solve(p, "auto", max_table_entries=cap)
        return
    s = solve(p, "auto", max_table_entries=cap)
    assert s.optimal and close(s.cost, best) and close(s.cost, p.evaluate(s.choice))
    assert (s.method == "dp") == s.stats["auto"].startswith("dp's tables fit")
    if cap > 1:
        assert s.method == "dp"


@SETTINGS
@given(problems(max_nodes=6))
def test_pbqp_never_beats_brute_nor_lies(spec):
    p, best = build(spec), reference_optimum(spec)
    try:
        s = solve(p, "pbqp")
    except Infeasible:
        assert math.isinf(best)
        return
    except NoSolutionFound:
        return  # heuristic gave up, without claiming anything
    assert math.isfinite(s.cost) and close(s.cost, p.evaluate(s.choice))
    assert s.cost >= best - 1e-9 * max(1.0, best)
    if s.optimal:
        assert close(s.cost, best) and close(s.bound, best)


def test_pbqp_claims_optimal_on_trees():
    """On a tree without shared conversions RI alone solves it: optimal must be claimed."""
    rng = np.random.default_rng(0)
    p = Problem()
    for _ in range(7):
        p.add_node(rng.uniform(0, 5, 3))
    for child, parent in [(1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 2)]:
        p.add_edge(child, parent, rng.uniform(0, 5, (3, 3)))
    s, b = solve(p, "pbqp"), solve_brute(p)
    assert s.optimal and close(s.cost, b.cost)


def test_disconnected_parts_and_single_choice_nodes():
    p = Problem()
    a, b = p.add_node([5.0]), p.add_node([1.0, 0.0])
    c, d = p.add_node([2.0, 1.0, 0.0]), p.add_node([0.0, 0.0, 0.0])
    p.add_edge(a, b, [[0.0, 3.0]])
    p.add_edge(c, d, [[0, 1, 1], [1, 0, 1], [1, 1, math.inf]])
    # independent optimum: a=0 b=0 (5+1), c=1 d=1 (1) -> 7; or c=2,d=0 (0+1) -> 7
    for method in ("dp", "ilp", "brute"):
        assert solve(p, method).cost == 7.0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(max_nodes=8, inf_weight=0))
def test_bigger_problems_against_brute(spec):
    """Denser random problems (brute force itself is checked above on smaller ones)."""
    p = build(spec)
    best = solve_brute(p).cost
    for method in ("dp", "ilp"):
        s = solve(p, method)
        assert s.optimal and close(s.cost, best), method
    s = solve(p, "pbqp")
    assert s.cost >= best - 1e-9 * max(1.0, best)
    assert not s.optimal or close(s.cost, best)
