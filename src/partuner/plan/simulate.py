"""Predicting the latency of running partitions: call overheads, transfers, one call at a time.

Each unit runs its partitions one at a time in list order (units that share hardware take turns
in list order too); a partition starts once its unit is free and its inputs from other partitions
have arrived, and is charged its unit's call overhead, a boundary cost per byte it reads from
other partitions, and its nodes' costs, less the saving of fused groups it runs whole; each value
crossing between two partitions is moved once.

Units that slow each other down when they work at once (``Problem.corun``: the units the
profiler timed side by side, profile/corun.py, and each one's factor; cores of one machine
share caches and memory, and two "cores" of a VM may be one physical core) are charged for it
(:func:`corun_scales`): a first pass at the plain costs finds how long each such partition runs
beside partitions of another such lane, and a second pass stretches it by that share of its
factor. Only costs grow, so every bound on the plain costs stays a bound.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from partuner.errors import InfeasiblePlanError, PartitionCycleError
from partuner.plan.problem import Problem

if TYPE_CHECKING:
    from partuner.plan.partitions import Partition

__all__ = [
    "Timing",
    "corun_scales",
    "crossings",
    "lanes_of",
    "partition_cost",
    "simulate",
    "written",
]


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
    hardware take turns in list order; units that slow each other down are charged for it
    (:func:`corun_scales`, a second pass).

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
    in_bytes = [sum(sum(crossing.get((q, p), {}).values()) for q in after[p]) for p in order]
    cost = {
        p: partition_cost(problem, partitions[p].unit, partitions[p].nodes, b, out_bytes[p])
        for p, b in zip(order, in_bytes, strict=True)
    }
    start, end = _pass(problem, partitions, crossing, after, order, cost)
    n = range(len(partitions))
    scale = corun_scales(
        problem, [pt.unit for pt in partitions], [start[i] for i in n], [end[i] for i in n]
    )
    if scale is not None:
        cost = {p: c * scale[p] for p, c in cost.items()}
        start, end = _pass(problem, partitions, crossing, after, order, cost)
    return Timing(
        start_us={partitions[i].name: start[i] for i in range(len(partitions))},
        end_us={partitions[i].name: end[i] for i in range(len(partitions))},
    )


def _pass(
    problem: Problem,
    partitions: Sequence[Partition],
    crossing: dict[tuple[int, int], dict[Hashable, float]],
    after: list[set[int]],
    order: list[int],
    cost: dict[int, float],
) -> tuple[dict[int, float], dict[int, float]]:
    """Each partition's start and end (µs), in topological ``order``, at ``cost``."""
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
        end[p] = ready + cost[p]
    return start, end


def lanes_of(problem: Problem, units: Sequence[str]) -> dict[str, int]:
    """A lane per group of units that pairwise share hardware (first fit, in ``units``'
    order): the runtime's threads (``Session`` builds its lanes the same way).

    >>> p = Problem(["a"], ["x", "y", "z"], {"a": {"x": 1, "y": 1, "z": 1}},
    ...             resources={"x": {"c0"}, "y": {"c1"}, "z": {"c0", "c1"}})
    >>> lanes_of(p, ["z", "x", "y"])
    {'z': 0, 'x': 0, 'y': 1}
    """
    lanes: list[list[str]] = []
    out: dict[str, int] = {}
    for u in dict.fromkeys(units):
        for k, members in enumerate(lanes):
            if all(problem.resources_of(u) & problem.resources_of(m) for m in members):
                members.append(u)
                out[u] = k
                break
        else:
            out[u] = len(lanes)
            lanes.append([u])
    return out


def corun_scales(
    problem: Problem, units: Sequence[str], start: Sequence[float], end: Sequence[float]
) -> list[float] | None:
    """Per partition (its unit, start and end at the plain costs), the factor on its cost
    for the units working beside it: ``1 + (factor - 1) * share``, ``share`` the largest part
    of its run that one other lane of units in ``problem.corun`` works (the factor was timed
    with every such unit busy, so with three lanes or more it is charged in full where only
    the busiest other one works); ``None`` where nothing is charged.

    >>> p = Problem(["a", "b"], ["x", "y"], {"a": {"x": 4, "y": 4}, "b": {"x": 4, "y": 4}},
    ...             edges=[], corun={"x": 1.5, "y": 1.2})
    >>> corun_scales(p, ["x", "y"], [0.0, 2.0], [4.0, 6.0])
    [1.25, 1.1]
    """
    factor = {u: f for u, f in problem.corun.items() if f > 1.0}
    if not factor or not any(u in factor for u in units):
        return None
    lane = lanes_of(problem, [u for u in units if u in problem.corun])
    if len(set(lane.values())) < 2:
        return None
    spans: dict[int, list[tuple[float, float]]] = {}
    for u, s, e in zip(units, start, end, strict=True):
        if u in lane and e > s:
            spans.setdefault(lane[u], []).append((s, e))
    for iv in spans.values():
        iv.sort()
    firsts = {k: [s for s, _ in iv] for k, iv in spans.items()}
    scale = [1.0] * len(units)
    found = False
    for i, (u, s, e) in enumerate(zip(units, start, end, strict=True)):
        f = factor.get(u)
        if f is None or e <= s:
            continue
        most = 0.0
        for k, iv in spans.items():
            if k == lane[u]:
                continue
            j = max(bisect_right(firsts[k], s) - 1, 0)  # a lane's runs never overlap
            got = 0.0
            while j < len(iv) and iv[j][0] < e:
                got += max(0.0, min(e, iv[j][1]) - max(s, iv[j][0]))
                j += 1
            most = max(most, got)
        if most > 0.0:
            scale[i] = 1.0 + (f - 1.0) * min(1.0, most / (e - s))
            found = True
    return scale if found else None


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
