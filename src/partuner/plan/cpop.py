"""CPOP: Critical-Path-On-a-Processor list scheduling."""

from __future__ import annotations

import heapq
import math

from partuner.plan.common import mean_comm, mean_cost, upward_rank
from partuner.plan.memory import Ledger
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.static import Timeline, memory_fallback

__all__ = ["CPOP", "downward_rank", "critical_path"]


def downward_rank(problem: Problem) -> dict[str, float]:
    """The downward rank of every node (Topcuoglu, Hariri and Wu 2002, eq. 8).

    ``rank(n) = max over predecessors p of (rank(p) + mean cost of p + mean transfer(p, n))``,
    0 for a node without predecessors; means as in
    :func:`~partuner.plan.common.upward_rank`. It is the longest distance from an entry node
    to ``n``, ``n`` excluded.

    >>> from partuner.plan.problem import Problem, Edge
    >>> p = Problem(["a", "b"], ["u", "v"], {"a": {"u": 2, "v": 4}, "b": {"u": 1, "v": 1}},
    ...             [Edge("a", "b", 0)])
    >>> downward_rank(p)
    {'a': 0.0, 'b': 3.0}
    """
    rank: dict[str, float] = {}
    for n in problem.nodes:
        rank[n] = max(
            (rank[q] + mean_cost(problem, q) + mean_comm(problem, q, n) for q in problem.preds(n)),
            default=0.0,
        )
    return rank


def _priority(problem: Problem) -> dict[str, float]:
    up, down = upward_rank(problem), downward_rank(problem)
    # Priorities equal up to rounding (common with averaged costs) count as ties.
    return {n: float(f"{up[n] + down[n]:.12g}") for n in problem.nodes}


def critical_path(problem: Problem, priority: dict[str, float] | None = None) -> list[str]:
    """CPOP's critical path: from the entry node of highest priority, each time the successor
    of highest priority (ties: topological order), up to a node without successors.

    A node's priority is its upward plus downward rank, the length of the longest path through
    it; the nodes of highest priority lie on a longest path. Empty for an empty problem.

    >>> from partuner.plan.problem import Problem, Edge
    >>> p = Problem(["a", "b", "c"], ["u"], {"a": {"u": 1}, "b": {"u": 5}, "c": {"u": 2}},
    ...             [Edge("a", "b", 0), Edge("a", "c", 0)])
    >>> critical_path(p)
    ['a', 'b']
    """
    if priority is None:
        priority = _priority(problem)
    entries = [n for n in problem.nodes if not problem.preds(n)]
    if not entries:
        return []
    path = [max(entries, key=lambda n: (priority[n], -problem.index(n)))]
    while problem.succs(path[-1]):
        path.append(max(problem.succs(path[-1]), key=lambda n: (priority[n], -problem.index(n))))
    return path


@register
class CPOP(Scheduler):
    """Critical-Path-On-a-Processor, insertion-based.

    H. Topcuoglu, S. Hariri and M.-Y. Wu, "Performance-effective and low-complexity task
    scheduling for heterogeneous computing", IEEE Transactions on Parallel and Distributed
    Systems 13(3):260-274, 2002 (section 4.2).

    A node's priority is its upward plus downward rank. The critical path
    (:func:`critical_path`) goes to the critical-path unit: the one that runs all its nodes at
    the least total cost (ties: the unit listed first; if no unit can run them all, they are
    placed like the other nodes). Nodes are taken by decreasing priority (ties: topological
    order), each once its predecessors are placed: a critical-path node on the critical-path
    unit, any other on the unit where it finishes first (ties: the unit listed first), each in
    the earliest idle gap long enough after its inputs arrive. Units that share hardware
    (``Problem.resources``) are kept from overlapping.

    With memory capacities, the critical-path unit must hold the whole path
    (:meth:`Problem.memory_use`), which is reserved on it first; other nodes skip units without
    room left for them. If a node finds no unit with room, the placement so far is repaired to
    fit and list-scheduled (:func:`~partuner.plan.static.memory_fallback`).
    """

    name = "cpop"

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        priority = _priority(problem)
        path = critical_path(problem, priority)
        totals = {u: sum(problem.cost[n][u] for n in path) for u in problem.units}
        need = problem.memory_use(path)
        able = [
            u for u in problem.units if math.isfinite(totals[u]) and need <= problem.capacity(u)
        ]
        cp_unit = min(able, key=lambda u: totals[u]) if able else None
        on_path = set(path) if cp_unit is not None else set()
        ledger = Ledger(problem) if problem.memory_limited else None
        if ledger is not None and cp_unit is not None:
            for n in path:
                ledger.take(n, cp_unit)

        timeline = Timeline(problem)
        waiting = {n: len(problem.preds(n)) for n in problem.nodes}
        ready = [(-priority[n], problem.index(n), n) for n in problem.nodes if not waiting[n]]
        heapq.heapify(ready)
        while ready:
            n = heapq.heappop(ready)[2]
            if n in on_path:
                assert cp_unit is not None
                timeline.place(n, cp_unit)
            else:
                best: Slot | None = None
                for u in problem.runnable_units(n):
                    if ledger is not None and not ledger.fits(n, u):
                        continue
                    start = timeline.start(n, u)
                    if best is None or start + problem.cost[n][u] < best.end:
                        best = Slot(n, u, start, start + problem.cost[n][u])
                if best is None:  # validate() ensured some unit can run n: memory ran out
                    prefer = {m: sl.unit for m, sl in timeline.slots.items()}
                    if cp_unit is not None:
                        prefer.update(dict.fromkeys(on_path, cp_unit))
                    return memory_fallback(problem, prefer, self.name)
                if ledger is not None:
                    ledger.take(n, best.unit)
                timeline.place(n, best.unit)
            for s in problem.succs(n):
                waiting[s] -= 1
                if not waiting[s]:
                    heapq.heappush(ready, (-priority[s], problem.index(s), s))
        return timeline.schedule(self.name)
