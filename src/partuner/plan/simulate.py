"""Predicting the latency of running partitions: call overheads, transfers, one call at a time.

Each unit runs its partitions one at a time in list order (units that share hardware take turns
in list order too); a partition starts once its unit is free and its inputs from other partitions
have arrived, and is charged its unit's call overhead, a boundary cost per byte it reads from
other partitions, and its nodes' costs, less the saving of fused groups it runs whole; each value
crossing between two partitions is moved once.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from partuner.errors import InfeasiblePlanError, PartitionCycleError
from partuner.plan.problem import Problem

if TYPE_CHECKING:
    from partuner.plan.partitions import Partition

__all__ = ["Timing", "crossings", "partition_cost", "simulate", "written"]


@dataclass(frozen=True)
class Timing:
    """Predicted start and end (µs) of each partition, by name."""

    start_us: dict[str, float]
    end_us: dict[str, float]

    @property
    def makespan_us(self) -> float:
        return max(self.end_us.values(), default=0.0)


def simulate(problem: Problem, partitions: Sequence[Partition]) -> Timing:
    """Predict when each partition runs.

    Each unit runs its partitions one at a time in list order. A partition starts once its unit
    is free and every input from another partition has arrived: the producer partition's end
    plus the transfer, over the link between their units, of the bytes crossing (each distinct
    value once; nothing between partitions of one unit). It runs for :func:`partition_cost`:
    its unit's call overhead, the boundary costs of the bytes it reads from other partitions
    and writes out for them, and its nodes' costs, less the savings of fused groups it runs
    whole. Units that share
    hardware take turns in list order.

    Raises
    ------
    InfeasiblePlanError
        A node missing or in two partitions, an unknown unit, or a node its unit cannot run.
    PartitionCycleError
        The partitions (with each unit's order) depend on each other cyclically.
    """
    crossing = crossings(problem, partitions)
    out_bytes = written(crossing, len(partitions))
    after: list[set[int]] = [set() for _ in partitions]  # after[p]: what p waits for
    for q, p in crossing:
        after[p].add(q)
    last: dict[str, int] = {}  # per hardware resource, the partition that used it last
    for i, part in enumerate(partitions):
        for r in problem.resources_of(part.unit):
            if r in last and last[r] != i:
                after[i].add(last[r])
            last[r] = i
    order = _topological(partitions, after)
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    for p in order:
        unit = partitions[p].unit
        ready = 0.0
        for q in after[p]:
            nbytes = sum(crossing.get((q, p), {}).values())
            moved = (q, p) in crossing  # a turn on shared hardware moves no data
            arrive = end[q] + (
                problem.transfer_us(partitions[q].unit, unit, nbytes) if moved else 0.0
            )
            ready = max(ready, arrive)
        start[p] = ready
        in_bytes = sum(sum(crossing.get((q, p), {}).values()) for q in after[p])
        out = partition_cost(problem, unit, partitions[p].nodes, in_bytes, out_bytes[p])
        end[p] = ready + out
    return Timing(
        start_us={partitions[i].name: start[i] for i in range(len(partitions))},
        end_us={partitions[i].name: end[i] for i in range(len(partitions))},
    )


def crossings(
    problem: Problem, partitions: Sequence[Partition]
) -> dict[tuple[int, int], dict[Hashable, float]]:
    """``{(q, p): {value key: bytes}}``: what partition ``p`` reads from partition ``q``
    (indices into ``partitions``; each distinct value once), after checking that the
    partitions cover ``problem`` (see :func:`simulate` for what raises)."""
    part_of = _check_cover(problem, partitions)
    crossing: dict[tuple[int, int], dict[Hashable, float]] = {}
    for i, e in enumerate(problem.edges):
        q, p = part_of[e.src], part_of[e.dst]
        if q != p:
            crossing.setdefault((q, p), {}).update(problem.payload(i))
    return crossing


def written(crossing: dict[tuple[int, int], dict[Hashable, float]], n: int) -> list[float]:
    """Per partition, the bytes it writes out for other partitions (each value once, however
    many read it), from :func:`crossings`."""
    keys: list[dict[Hashable, float]] = [{} for _ in range(n)]
    for (q, _), vals in crossing.items():
        keys[q].update(vals)
    return [sum(k.values()) for k in keys]


def partition_cost(
    problem: Problem,
    unit: str,
    nodes: Sequence[str],
    in_bytes: float = 0.0,
    out_bytes: float = 0.0,
) -> float:
    """Time of one call running ``nodes`` on ``unit``: the call overhead, the boundary costs
    of the ``in_bytes`` it reads from other partitions and the ``out_bytes`` it writes out for
    them, the node costs, less the saving of every fused group whose members run consecutively
    in it (non-overlapping groups, the largest savings first)."""
    work = problem.call_overhead_us.get(unit, 0.0) + sum(problem.cost[n][unit] for n in nodes)
    work += in_bytes * problem.boundary_us_per_byte.get(unit, 0.0)
    work += out_bytes * problem.boundary_out_us_per_byte.get(unit, 0.0)
    if not problem.groups:
        return work
    pos = {n: i for i, n in enumerate(nodes)}
    found = []
    for g in {id(g): g for n in nodes for g in problem.groups_of(n)}.values():
        idx = [pos.get(n) for n in g.nodes]
        if None not in idx and idx == list(range(idx[0], idx[0] + len(idx))):  # type: ignore
            save = g.saving(problem, unit)
            if save > 0:
                found.append((save, set(g.nodes)))
    taken: set[str] = set()
    for save, members in sorted(found, key=lambda x: -x[0]):
        if not members & taken:
            work -= save
            taken |= members
    return work


def _check_cover(problem: Problem, partitions: Sequence[Partition]) -> dict[str, int]:
    part_of: dict[str, int] = {}
    names: set[str] = set()
    units = set(problem.units)
    for i, part in enumerate(partitions):
        if part.name in names:
            raise InfeasiblePlanError(f"two partitions are named {part.name!r}")
        names.add(part.name)
        if part.unit not in units:
            raise InfeasiblePlanError(
                f"partition {part.name!r} is on unknown unit {part.unit!r}; units are "
                f"{problem.units}"
            )
        for n in part.nodes:
            if n in part_of:
                other = partitions[part_of[n]].name
                raise InfeasiblePlanError(
                    f"node {n!r} is listed twice in partition {other!r}; list it once"
                    if other == part.name
                    else f"node {n!r} is in partitions {other!r} and {part.name!r}; keep it in one"
                )
            if n not in problem.cost:
                raise InfeasiblePlanError(f"partition {part.name!r} has unknown node {n!r}")
            if math.isinf(problem.cost[n][part.unit]):
                raise InfeasiblePlanError(
                    f"node {n!r} of partition {part.name!r} cannot run on unit {part.unit!r}"
                )
            part_of[n] = i
    for n in problem.nodes:
        if n not in part_of:
            raise InfeasiblePlanError(f"node {n!r} is in no partition")
    return part_of


def _topological(partitions: Sequence[Partition], after: list[set[int]]) -> list[int]:
    before: list[set[int]] = [set() for _ in partitions]
    for p, qs in enumerate(after):
        for q in qs:
            before[q].add(p)
    waiting = [len(qs) for qs in after]
    ready = [p for p in range(len(partitions)) if waiting[p] == 0]
    order: list[int] = []
    while ready:
        q = ready.pop()
        order.append(q)
        for p in before[q]:
            waiting[p] -= 1
            if waiting[p] == 0:
                ready.append(p)
    if len(order) < len(partitions):
        done = set(order)
        walk = [next(p for p in range(len(partitions)) if p not in done)]
        while True:
            q = next(q for q in after[walk[-1]] if q not in done)
            if q in walk:
                loop = walk[walk.index(q) :][::-1]  # producers first
                first = loop.index(min(loop))
                cycle = [partitions[i].name for i in loop[first:] + loop[:first]]
                break
            walk.append(q)
        a, b = cycle[0], cycle[1]
        raise PartitionCycleError(
            f"partitions {a!r} and {b!r} depend on each other (cycle "
            f"{' -> '.join([*cycle, cycle[0]])}, counting each unit's order); merge or reorder them"
        )
    return order
