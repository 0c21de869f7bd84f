"""HEFT: heterogeneous earliest finish time list scheduling with insertion."""

from __future__ import annotations

import heapq
import math
from bisect import insort

from partuner.plan.common import earliest_insertion, lower_bound, upward_rank
from partuner.plan.memory import Ledger
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.static import memory_fallback

__all__ = ["HEFT"]


@register
class HEFT(Scheduler):
    """Heterogeneous Earliest Finish Time, insertion-based.

    H. Topcuoglu, S. Hariri and M.-Y. Wu, "Performance-effective and low-complexity task
    scheduling for heterogeneous computing", IEEE Transactions on Parallel and Distributed
    Systems 13(3):260-274, 2002.

    Nodes are taken by decreasing upward rank (ties: topological order), each only once all its
    predecessors are placed. Each goes to the unit where it finishes first (ties: the unit listed
    first), starting in the earliest idle gap of that unit that is long enough and begins after
    its inputs arrive; data moved between units costs the link's transfer time. Units that share
    hardware (``Problem.resources``) are kept from overlapping. With memory capacities, units
    without room left for the node are skipped; if none has room, the placement so far is
    repaired to fit and list-scheduled (:func:`~partuner.plan.static.memory_fallback`).
    """

    name = "heft"

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        # Ranks equal up to rounding (common with averaged costs) count as ties.
        rank = {n: float(f"{r:.12g}") for n, r in upward_rank(problem).items()}
        waiting = {n: len(problem.preds(n)) for n in problem.nodes}
        ready = [(-rank[n], problem.index(n), n) for n in problem.nodes if waiting[n] == 0]
        heapq.heapify(ready)
        # Busy intervals per hardware resource: units sharing one never overlap.
        busy: dict[str, list[tuple[float, float]]] = {
            r: [] for u in problem.units for r in problem.resources_of(u)
        }
        slots: dict[str, Slot] = {}
        ledger = Ledger(problem) if problem.memory_limited else None
        while ready:
            n = heapq.heappop(ready)[2]
            best: Slot | None = None
            for u in problem.units:
                cost = problem.cost[n][u]
                if math.isinf(cost) or (ledger is not None and not ledger.fits(n, u)):
                    continue
                arrive = max(
                    (
                        slots[p].end + problem.comm_us(p, n, slots[p].unit, u)
                        for p in problem.preds(n)
                    ),
                    default=0.0,
                )
                start = earliest_insertion(_merged(busy, problem.resources_of(u)), arrive, cost)
                if best is None or start + cost < best.end:
                    best = Slot(n, u, start, start + cost)
            if best is None:  # validate() ensured some unit can run n: memory ran out
                return memory_fallback(problem, {m: sl.unit for m, sl in slots.items()}, self.name)
            if ledger is not None:
                ledger.take(n, best.unit)
            slots[n] = best
            for r in problem.resources_of(best.unit):
                insort(busy[r], (best.start, best.end))
            for s in problem.succs(n):
                waiting[s] -= 1
                if waiting[s] == 0:
                    heapq.heappush(ready, (-rank[s], problem.index(s), s))
        return Schedule(slots, self.name, "heuristic", lower_bound(problem))


def _merged(
    busy: dict[str, list[tuple[float, float]]], resources: frozenset[str]
) -> list[tuple[float, float]]:
    """The union of the busy intervals of ``resources``, sorted and non-overlapping."""
    if len(resources) == 1:
        return busy[next(iter(resources))]
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv for r in resources for iv in busy[r]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
