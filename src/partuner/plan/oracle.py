"""A brute-force oracle: the optimal schedule of a tiny problem, by exhaustive search.

A test tool to check heuristics and the exact scheduler against, not a registered scheduler.
"""

from __future__ import annotations

import math

from partuner.plan.common import lower_bound, min_cost
from partuner.plan.memory import Ledger, no_fit_error
from partuner.plan.problem import Problem
from partuner.plan.schedule import Schedule, Slot

__all__ = ["brute_force", "MAX_NODES"]

MAX_NODES = 10

_REL = 1e-12  # relative tolerance for equal times (sums computed in different orders)


def brute_force(problem: Problem, *, max_nodes: int = MAX_NODES) -> Schedule:
    """The schedule of least makespan, found by trying every assignment and every order.

    Every node order that lists predecessors first, with every unit for each node, is list
    scheduled: each node in turn starts as soon as its inputs have arrived (producer end plus
    :meth:`Problem.comm_us <partuner.plan.problem.Problem.comm_us>`) and every hardware resource
    of its unit (:meth:`Problem.resources_of <partuner.plan.problem.Problem.resources_of>`) is
    free of the nodes placed before it. Some such schedule is optimal: list scheduling an
    optimal schedule's nodes by (start, end, topological index) starts no node later. Two
    prunings keep the search small without losing it: orders in which a node starts before
    the one placed just before it (by that same key) are skipped, since repeating the
    re-ordering from an optimal schedule reaches one whose own order has non-decreasing keys;
    and a branch is cut once a lower bound of its makespan (the latest start so far plus, for
    every node left, the cheapest path from it to an exit) cannot beat the best found. With
    memory capacities, a node is never placed on a unit without room left for it
    (:meth:`Problem.memory_use`): which nodes share a unit, not when they run, decides that.

    Parameters
    ----------
    problem : Problem
        A valid problem of at most ``max_nodes`` nodes and a few units: the search grows
        exponentially.
    max_nodes : int
        Refuse bigger problems.

    Returns
    -------
    Schedule
        Status ``"optimal"``, scheduler ``"brute-force"``, with the problem's lower bound.

    Raises
    ------
    ValueError
        More than ``max_nodes`` nodes.
    InfeasiblePlanError
        A node no unit can run (from :meth:`Problem.validate`), or no placement fits the
        units' memory.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Link, Problem
    >>> p = Problem(["a", "b", "c"], ["u", "v"], {n: {"u": 2, "v": 2} for n in "abc"},
    ...             [Edge("a", "b", 0), Edge("a", "c", 0)], default_link=Link(1, math.inf))
    >>> brute_force(p).makespan  # b and c side by side, one of them 1 µs late
    5.0
    """
    problem.validate()
    if len(problem.nodes) > max_nodes:
        raise ValueError(
            f"brute_force handles at most {max_nodes} nodes, {problem.name!r} has "
            f"{len(problem.nodes)}; use the 'exact' scheduler"
        )
    schedule = _Search(problem).run()
    if len(schedule.slots) < len(problem.nodes):
        raise no_fit_error(problem)
    return schedule


class _Search:
    def __init__(self, problem: Problem) -> None:
        self.p = problem
        self.units = {n: problem.runnable_units(n) for n in problem.nodes}
        self.res = {u: tuple(problem.resources_of(u)) for u in problem.units}
        tail: dict[str, float] = {}  # cheapest path from a node to an exit, the node included
        for n in reversed(problem.nodes):
            tail[n] = min_cost(problem, n) + max((tail[s] for s in problem.succs(n)), default=0)
        self.tail = tail
        self.free = {r: 0.0 for rs in self.res.values() for r in rs}
        self.slots: dict[str, Slot] = {}
        self.waiting = {n: len(problem.preds(n)) for n in problem.nodes}
        self.best_time = math.inf
        self.best: dict[str, Slot] = {}
        self.ledger = Ledger(problem) if problem.memory_limited else None

    def run(self) -> Schedule:
        self._search((-math.inf, -math.inf, -1), 0.0)
        return Schedule(self.best, "brute-force", "optimal", lower_bound(self.p))

    def _search(self, last: tuple[float, float, int], makespan: float) -> None:
        p = self.p
        if len(self.slots) == len(p.nodes):
            if makespan < self.best_time:
                self.best_time, self.best = makespan, dict(self.slots)
            return
        ready = [n for n in p.nodes if n not in self.slots and not self.waiting[n]]
        bound = max([makespan] + [max(last[0], 0.0) + self.tail[n] for n in ready])
        if bound >= self.best_time * (1 - _REL):
            return
        moves = []
        for n in ready:
            i = p.index(n)
            for u in self.units[n]:
                start = max(
                    max((self.free[r] for r in self.res[u]), default=0.0),
                    max(
                        (
                            self.slots[q].end + p.comm_us(q, n, self.slots[q].unit, u)
                            for q in p.preds(n)
                        ),
                        default=0.0,
                    ),
                )
                end = start + p.cost[n][u]
                if _before((start, end, i), last):
                    continue
                if self.ledger is not None and not self.ledger.fits(n, u):
                    continue
                moves.append((end, start, i, n, u))
        moves.sort()
        ledger = self.ledger
        for end, start, i, n, u in moves:
            saved = {r: self.free[r] for r in self.res[u]}
            for r in self.res[u]:
                self.free[r] = end
            if ledger is not None:
                held = ledger.weights[u], ledger.peak[u]
                ledger.take(n, u)
            self.slots[n] = Slot(n, u, start, end)
            for s in p.succs(n):
                self.waiting[s] -= 1
            self._search((start, end, i), max(makespan, end))
            for s in p.succs(n):
                self.waiting[s] += 1
            del self.slots[n]
            if ledger is not None:
                ledger.weights[u], ledger.peak[u] = held
            self.free.update(saved)


def _before(key: tuple[float, float, int], last: tuple[float, float, int]) -> bool:
    """True when ``key`` (start, end, index) sorts before ``last``, times within tolerance."""
    for a, b in ((key[0], last[0]), (key[1], last[1])):
        if abs(a - b) > _REL * max(1.0, abs(a), abs(b)):
            return a < b
    return key[2] < last[2]
