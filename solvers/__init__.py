"""Discrete selection problems and their exact and heuristic solvers (filled in by the solvers work)."""
