"""The result of :func:`solvers.solve` and the errors solvers raise.

>>> s = Solution(choice=[0, 1], cost=1.5, optimal=True, bound=1.5, method="brute")
>>> s.cost, s.optimal
(1.5, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field


class Infeasible(ValueError):
    """Every assignment of the problem costs ``inf``."""


class NoSolutionFound(ValueError):
    """A heuristic (or a time-limited run) found no finite-cost assignment, without
    proving that none exists."""


class TableTooLarge(ValueError):
    """The exact DP would need a table larger than its memory cap."""


@dataclass
class Solution:
    """One choice per node and what is known about it.

    ``cost`` is always ``Problem.evaluate(choice)`` (the true objective, finite).
    ``optimal`` is True only when the method proved it; ``bound`` is a proven lower
    bound on the optimum, or None when the method has none.
    """

    choice: list[int]
    cost: float
    optimal: bool
    bound: float | None
    method: str
    stats: dict = field(default_factory=dict)
