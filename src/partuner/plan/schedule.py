"""A schedule: when and where each node of a :class:`~partuner.plan.problem.Problem` runs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

from partuner.errors import InvalidScheduleError
from partuner.plan.memory import overflow
from partuner.plan.problem import Problem

__all__ = ["Slot", "Schedule"]


@dataclass(frozen=True)
class Slot:
    """Node ``node`` runs on ``unit`` from ``start`` to ``end`` (µs)."""

    node: str
    unit: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Schedule:
    """One :class:`Slot` per node, keyed by node name, and how it was found.

    ``status`` is ``"heuristic"`` for list schedulers, ``"optimal"`` or ``"feasible"`` for exact
    solvers (proved optimal, or stopped at a time limit); ``lower_bound`` bounds the makespan of
    any schedule of the problem from below, when known. ``partitions``, when a scheduler
    decides them itself, lists the nodes of each partition in run order, partitions in an
    order they can run in (each unit's in turn); else they are cut from the slots
    (:func:`~partuner.plan.partitions.make_partitions`).
    """

    slots: dict[str, Slot]
    scheduler: str
    status: str = "heuristic"
    lower_bound: float | None = None
    partitions: list[tuple[str, ...]] | None = None

    @property
    def makespan(self) -> float:
        """The time the last node ends (0 for an empty schedule)."""
        return max((s.end for s in self.slots.values()), default=0.0)

    @property
    def assignment(self) -> dict[str, str]:
        """``{node: unit}``."""
        return {n: s.unit for n, s in self.slots.items()}

    def order(self, unit: str) -> list[str]:
        """The nodes on ``unit`` in the order they run (by start, then end, then name)."""
        on = [s for s in self.slots.values() if s.unit == unit]
        return [s.node for s in sorted(on, key=lambda s: (s.start, s.end, s.node))]

    def validate(self, problem: Problem, tol: float = 1e-6) -> None:
        """Check the schedule against ``problem``; raise naming the first violation found.

        ``problem`` must be valid (see :meth:`Problem.validate`). ``tol`` is a relative
        tolerance on times (absolute below 1 µs).

        Raises
        ------
        InvalidScheduleError
            A node missing, unknown or scheduled twice; a unit not in the problem or unable to
            run the node; a duration that differs from the cost; a node starting before its
            inputs arrive (producer end + transfer); two nodes overlapping on one unit or on
            two units that share hardware (``Problem.resources``); a unit holding more than
            its memory (``Problem.memory_bytes``: the weights of its nodes plus their largest
            output, :meth:`Problem.memory_use`).
        """
        self._check_nodes(problem)
        units = set(problem.units)
        for n, s in self.slots.items():
            if s.unit not in units:
                raise InvalidScheduleError(
                    f"node {n!r} is on unknown unit {s.unit!r}; units are {problem.units}"
                )
            cost = problem.cost[n][s.unit]
            if math.isinf(cost):
                raise InvalidScheduleError(f"node {n!r} is on unit {s.unit!r}, which cannot run it")
            if not (math.isfinite(s.start) and s.start >= -tol):
                raise InvalidScheduleError(f"node {n!r} starts at {s.start!r}; starts must be >= 0")
            if abs(s.duration - cost) > tol * max(1.0, cost):
                raise InvalidScheduleError(
                    f"node {n!r} runs {s.duration:.6g} µs on unit {s.unit!r} "
                    f"({s.start:.6g} to {s.end:.6g}) but costs {cost:.6g} µs there"
                )
        full = overflow(problem, self.assignment)
        if full is not None:
            raise InvalidScheduleError(f"{full}; the schedule puts too much on it")
        for n, s in self.slots.items():
            for p in problem.preds(n):
                ps = self.slots[p]
                delay = problem.comm_us(p, n, ps.unit, s.unit)
                arrival = ps.end + delay
                if s.start < arrival - tol * max(1.0, abs(arrival)):
                    raise InvalidScheduleError(
                        f"node {n!r} on unit {s.unit!r} starts at {s.start:.6g} µs before its "
                        f"input from {p!r} on unit {ps.unit!r} arrives at {arrival:.6g} µs "
                        f"(ends {ps.end:.6g} + transfer {delay:.6g})"
                    )
        for r in sorted({r for u in problem.units for r in problem.resources_of(u)}):
            on = sorted(
                (sl for sl in self.slots.values() if r in problem.resources_of(sl.unit)),
                key=lambda sl: (sl.start, sl.end, sl.node),
            )
            for sa, sb in pairwise(on):
                if sb.start < sa.end - tol * max(1.0, abs(sa.end)):
                    where = (
                        f"on unit {sa.unit!r}"
                        if sa.unit == sb.unit
                        else f"on units {sa.unit!r} and {sb.unit!r}, which share {r!r}"
                    )
                    raise InvalidScheduleError(
                        f"nodes {sa.node!r} ({sa.start:.6g} to {sa.end:.6g}) and {sb.node!r} "
                        f"({sb.start:.6g} to {sb.end:.6g}) overlap {where}"
                    )

    def _check_nodes(self, problem: Problem) -> None:
        counts = Counter(s.node for s in self.slots.values())
        for node, k in counts.items():
            if k > 1:
                keys = sorted(key for key, s in self.slots.items() if s.node == node)
                raise InvalidScheduleError(f"node {node!r} is scheduled twice (slots {keys})")
        for key, s in self.slots.items():
            if key != s.node:
                raise InvalidScheduleError(f"slot keyed {key!r} is for node {s.node!r}")
        known = set(problem.nodes)
        for n in problem.nodes:
            if n not in self.slots:
                raise InvalidScheduleError(f"node {n!r} is missing from the schedule")
        for n in self.slots:
            if n not in known:
                raise InvalidScheduleError(f"schedule has node {n!r}, which the problem lacks")
