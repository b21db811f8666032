"""Each PBQP reduction on tiny hand-built graphs, answers worked out by hand."""
import numpy as np

from solvers import Problem, solve
from solvers.brute import solve_brute
from solvers.pbqp_graph import Graph, recover, reduce_r0, reduce_ri, reduce_rii, reduce_rn


def test_r0_takes_cheapest_choice():
    g = Graph([np.array([3.0, 1.0, 2.0])])
    step = reduce_r0(g, 0)
    assert step.kind == "R0" and recover(step, {}) == 1 and 0 not in g.adj


def test_ri_folds_min_into_neighbour_and_recovers():
    # u: costs [0, 4]; edge u-v [[5, 0], [0, 5]]; v: costs [1, 1]
    # min_x (c_u[x] + M[x, y]): y=0 -> min(0+5, 4+0) = 4; y=1 -> min(0+0, 4+5) = 0
    g = Graph([np.array([0.0, 4.0]), np.array([1.0, 1.0])])
    g.add_edge(0, 1, np.array([[5.0, 0.0], [0.0, 5.0]]))
    step = reduce_ri(g, 0)
    assert g.vectors[1].tolist() == [5.0, 1.0]
    assert g.degree(1) == 0
    assert recover(step, {1: 1}) == 0 and recover(step, {1: 0}) == 1


def test_rii_creates_exact_edge_between_neighbours():
    # u has 2 choices, neighbours v, w with 2 choices each.
    g = Graph([np.array([0.0, 1.0]), np.zeros(2), np.zeros(2)])
    g.add_edge(0, 1, np.array([[0.0, 2.0], [3.0, 0.0]]))  # rows: u choice
    g.add_edge(0, 2, np.array([[0.0, 5.0], [0.0, 0.0]]))
    step = reduce_rii(g, 0)
    # M_vw[y, z] = min_x c_u[x] + M_uv[x, y] + M_uw[x, z]
    # (0,0): min(0+0+0, 1+3+0)=0 ; (0,1): min(0+0+5, 1+3+0)=4
    # (1,0): min(0+2+0, 1+0+0)=1 ; (1,1): min(0+2+5, 1+0+0)=1
    assert g.adj[1][2].tolist() == [[0.0, 4.0], [1.0, 1.0]]
    assert recover(step, {1: 0, 2: 1}) == 1 and recover(step, {1: 0, 2: 0}) == 0


def test_rii_merges_into_existing_edge():
    g = Graph([np.zeros(2), np.zeros(2), np.zeros(2)])
    g.add_edge(0, 1, np.array([[0.0, 1.0], [1.0, 0.0]]))
    g.add_edge(0, 2, np.array([[0.0, 1.0], [1.0, 0.0]]))
    g.add_edge(1, 2, np.array([[10.0, 0.0], [0.0, 10.0]]))
    reduce_rii(g, 0)
    # folded: [[0, 1], [1, 0]] (pick x equal to y or z), plus the old [[10, 0], [0, 10]]
    assert g.adj[1][2].tolist() == [[10.0, 1.0], [1.0, 10.0]]
    assert g.adj[2][1].tolist() == [[10.0, 1.0], [1.0, 10.0]]


def test_rn_picks_locally_best_choice_and_pushes_its_row():
    # u degree 3 (hub of a star); neighbours all prefer u == their own choice 1
    g = Graph([np.array([0.0, 0.5]), np.zeros(2), np.zeros(2), np.zeros(2)])
    same = np.array([[0.0, 2.0], [2.0, 0.0]])
    for v in (1, 2, 3):
        g.add_edge(0, v, same)
        g.vectors[v] = np.array([3.0, 0.0])
    step = reduce_rn(g, 0)
    # local cost x=0: 0 + 3*min(0+3, 2+0) = 6 ; x=1: 0.5 + 3*min(2+3, 0+0) = 0.5
    assert step.kind == "RN" and recover(step, {}) == 1
    assert [g.vectors[v].tolist() for v in (1, 2, 3)] == [[5.0, 0.0]] * 3


def test_rn_problem_is_not_claimed_optimal():
    """K4 needs RN; whatever pbqp finds, it must not claim a proof."""
    rng = np.random.default_rng(1)
    p = Problem()
    for _ in range(4):
        p.add_node(rng.uniform(0, 1, 3))
    for i in range(4):
        for j in range(i + 1, 4):
            p.add_edge(i, j, rng.uniform(0, 1, (3, 3)))
    s = solve(p, "pbqp")
    assert s.stats["RN"] >= 1 and not s.optimal and s.bound is None
    assert s.cost >= solve_brute(p).cost


def test_shared_conversion_with_two_consumers_is_not_claimed_optimal():
    # src class 0; both consumers need class 1 -> paid once (4), pbqp's pairwise form pays 8
    p = Problem()
    s_, d1, d2 = p.add_node([0.0]), p.add_node([0.0]), p.add_node([0.0])
    p.add_conversion(s_, [d1, d2], [0], [[1], [1]], [[0, 4], [4, 0]])
    s = solve(p, "pbqp")
    assert s.cost == 4.0 and not s.optimal and s.stats["approximated_conversions"] == 1
