"""Static placement by unit priority, and the list-scheduling helpers the baselines share.

:class:`Timeline` places nodes one at a time at their earliest start given a unit for each;
:func:`memory_fallback` list-schedules a placement that fits the units' memory when a
scheduler's own method ran out of it; :class:`StaticPriority` is the ``static`` scheduler.
"""

from __future__ import annotations

import logging
from bisect import insort
from collections.abc import Iterable, Mapping

from partuner.plan.common import earliest_insertion, lower_bound
from partuner.plan.memory import Ledger, no_fit_error, pack
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule, Slot

__all__ = ["StaticPriority", "Timeline", "list_schedule", "memory_fallback"]

log = logging.getLogger(__name__)


class Timeline:
    """Places nodes, one at a time, at their earliest start on a given unit.

    A node on unit ``u`` waits for each input: the producer's end plus
    :meth:`Problem.comm_us <partuner.plan.problem.Problem.comm_us>`. It then goes into the
    earliest idle gap long enough on every hardware resource ``u`` occupies
    (:meth:`Problem.resources_of <partuner.plan.problem.Problem.resources_of>`), so units that
    share hardware never overlap (HEFT's insertion policy,
    :func:`~partuner.plan.common.earliest_insertion`); with ``insertion=False`` it goes after
    the last node placed on those resources instead, so each unit runs its nodes in the order
    they were placed. Its predecessors must be placed first.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Link, Problem
    >>> p = Problem(["a", "b"], ["u", "v"], {"a": {"u": 2, "v": 9}, "b": {"u": 5, "v": 1}},
    ...             [Edge("a", "b", 0)], default_link=Link(3.0, float("inf")))
    >>> t = Timeline(p)
    >>> t.place("a", "u"), t.place("b", "v")
    (Slot(node='a', unit='u', start=0.0, end=2.0), Slot(node='b', unit='v', start=5.0, end=6.0))
    >>> t.end
    6.0
    """

    def __init__(self, problem: Problem, *, insertion: bool = True) -> None:
        self.problem = problem
        self.insertion = insertion
        self.slots: dict[str, Slot] = {}
        self.end = 0.0
        self._done: dict[str, tuple[str, float]] = {}  # node -> (unit, end), placed or assumed
        self._busy: dict[str, list[tuple[float, float]]] = {
            r: [] for u in problem.units for r in problem.resources_of(u)
        }

    def assume(self, node: str, unit: str, end: float = 0.0) -> None:
        """Treat ``node`` as finished on ``unit`` at ``end`` without occupying any hardware.

        Used to evaluate part of a problem: the node feeding it is taken as already run.
        """
        self._done[node] = (unit, end)

    def arrival(self, node: str, unit: str) -> float:
        """When every input of ``node`` is available on ``unit`` (0 without inputs)."""
        p = self.problem
        arrive = 0.0
        for q in p.preds(node):
            q_unit, q_end = self._done[q]
            arrive = max(arrive, q_end + p.comm_us(q, node, q_unit, unit))
        return arrive

    def start(self, node: str, unit: str, not_before: float = 0.0) -> float:
        """The earliest start of ``node`` on ``unit`` at or after ``not_before``."""
        ready = max(not_before, self.arrival(node, unit))
        if not self.insertion:
            return max([ready] + [self._busy[r][-1][1] for r in self._resources(unit)])
        return earliest_insertion(self._free(unit), ready, self.problem.cost[node][unit])

    def place(self, node: str, unit: str, not_before: float = 0.0) -> Slot:
        """Put ``node`` on ``unit`` at its earliest start at or after ``not_before``."""
        start = self.start(node, unit, not_before)
        slot = Slot(node, unit, start, start + self.problem.cost[node][unit])
        self.slots[node] = slot
        self._done[node] = (unit, slot.end)
        self.end = max(self.end, slot.end)
        for r in self.problem.resources_of(unit):
            insort(self._busy[r], (slot.start, slot.end))
        return slot

    def schedule(self, scheduler: str, status: str = "heuristic") -> Schedule:
        """The placed slots as a :class:`Schedule` carrying the problem's lower bound."""
        return Schedule(dict(self.slots), scheduler, status, lower_bound(self.problem))

    def _resources(self, unit: str) -> list[str]:
        """``unit``'s resources that already hold a node."""
        return [r for r in self.problem.resources_of(unit) if self._busy[r]]

    def _free(self, unit: str) -> list[tuple[float, float]]:
        """The busy intervals of ``unit``'s resources, merged, sorted and non-overlapping."""
        resources = self.problem.resources_of(unit)
        if len(resources) == 1:
            return self._busy[next(iter(resources))]
        out: list[tuple[float, float]] = []
        for a, b in sorted(iv for r in resources for iv in self._busy[r]):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out


def list_schedule(
    problem: Problem, assignment: Mapping[str, str], order: Iterable[str] | None = None
) -> Timeline:
    """Place every node on its assigned unit, in ``order`` (default: topological), as early as
    each can go (see :class:`Timeline`); ``order`` must list predecessors first.

    >>> from partuner.plan.problem import Edge, Problem
    >>> p = Problem(["a", "b", "c"], ["u", "v"], {n: {"u": 1, "v": 1} for n in "abc"},
    ...             [Edge("a", "c", 0), Edge("b", "c", 0)])
    >>> list_schedule(p, {"a": "u", "b": "v", "c": "u"}).end
    2.0
    """
    timeline = Timeline(problem)
    for n in problem.nodes if order is None else order:
        timeline.place(n, assignment[n])
    return timeline


def memory_fallback(problem: Problem, prefer: Mapping[str, str], name: str) -> Schedule:
    """The schedule of :func:`~partuner.plan.memory.pack`'s placement (``prefer``'s units kept
    where they fit), list-scheduled in topological order: what a scheduler returns when its own
    method leaves a node no unit with room.

    Raises
    ------
    InfeasiblePlanError
        ``pack`` found no placement within the units' memory.
    """
    assignment = pack(problem, prefer)
    if assignment is None:
        raise no_fit_error(problem)
    log.info("%s: ran out of memory on the units; repaired the placement to fit", name)
    return list_schedule(problem, assignment).schedule(name)


@register
class StaticPriority(Scheduler):
    """Static placement: each node on the first unit, in priority order, that can run it.

    What production runtimes do with several backends: ONNX Runtime offers the graph to its
    execution providers in registration order and each claims the nodes it supports
    (ONNX Runtime documentation, "Execution Providers"); OpenVINO's HETERO device gives each
    operation to the first device of its priority list that supports it (OpenVINO
    documentation, "Heterogeneous execution"); NEST-C's backend-based partitioning puts each
    operation on the backend that supports it, the CPU taking the rest. No cost is compared.

    Here the priority order is ``Problem.units``. With memory capacities, a unit is skipped
    once the nodes claimed before (in topological order) leave no room for the node; if no
    unit has room, :func:`memory_fallback` repairs the placement. Nodes are then
    list-scheduled in topological order, each at its earliest start on its unit (inputs
    arrived, including transfers; the earliest idle gap on the unit and on every unit it
    shares hardware with).
    """

    name = "static"

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        ledger = Ledger(problem) if problem.memory_limited else None
        assignment: dict[str, str] = {}
        for n in problem.nodes:
            able = [u for u in problem.runnable_units(n) if ledger is None or ledger.fits(n, u)]
            if not able:
                return memory_fallback(problem, assignment, self.name)
            assignment[n] = able[0]
            if ledger is not None:
                ledger.take(n, able[0])
        return list_schedule(problem, assignment).schedule(self.name)
