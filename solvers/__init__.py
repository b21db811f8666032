"""Discrete selection problems (one choice per node, pairwise costs, shared conversions)
and their solvers: exact DP, exact ILP, PBQP reductions and brute force.

>>> from solvers import Problem, solve
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> solve(p).cost
1.0
"""
from .problem import Conversion, Problem
from .solution import Infeasible, NoSolutionFound, Solution, TableTooLarge
from .solve import METHODS, solve

__all__ = ["Problem", "Conversion", "solve", "Solution", "Infeasible", "NoSolutionFound",
           "TableTooLarge", "METHODS"]
