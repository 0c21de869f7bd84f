"""From regions' solutions to one plan: assemble their partitions, merge a unit's neighbours
where that costs nothing, simulate, and pick per region the faster of two models' plans.

Used by :mod:`partuner.plan.pexact` (and the region-model benchmark): a region's partitions come
from :func:`partuner.plan.region_model.solve_region`; the plan is what the simulation
(:mod:`partuner.plan.partitions`) says it is.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

from partuner.errors import PartunerError
from partuner.plan.clock import MOVE_S_PER_NODE, WorkClock
from partuner.plan.decompose import Region
from partuner.plan.partitions import Partition, run_order, simulate
from partuner.plan.problem import Problem
from partuner.plan.region_model import RegionSolution
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.simulate import partition_cost

__all__ = [
    "assemble",
    "best_per_region",
    "merge_partitions",
    "region_times",
    "schedule_of_parts",
]

_SHORTER_US = 1e-3  # a span this much below a simulated time is faster (float noise aside)


def assemble(
    parts: Sequence[Region], chain: Sequence[RegionSolution]
) -> list[tuple[str, list[str]]]:
    """The regions' partitions as one list; a partition continuing the entering node's joins
    the one holding that node."""
    out: list[tuple[str, list[str]]] = []
    where: dict[str, int] = {}
    for region, sol in zip(parts, chain, strict=True):
        for unit, members in sol.parts:
            if region.entry is not None and members[0] == region.entry:
                rest = members[1:]
                if rest:
                    out[where[region.entry]][1].extend(rest)
                    for n in rest:
                        where[n] = where[region.entry]
                continue
            where.update(dict.fromkeys(members, len(out)))
            out.append((unit, list(members)))
    return out


def merge_partitions(
    problem: Problem,
    parts: Sequence[tuple[str, Sequence[str]]],
    deadline: float = math.inf,
    clock: WorkClock | None = None,
) -> list[tuple[str, list[str]]]:
    """Merge each partition into the one its unit runs before it wherever the predicted
    latency does not grow (the model does not charge a call's overhead as busy time, so its
    plans may cut a unit's work more often than it pays), until no merge is left or
    ``deadline`` passes on ``clock`` (:mod:`partuner.plan.clock`: each simulation charged
    :data:`~partuner.plan.clock.MOVE_S_PER_NODE` per node; none: no deadline).

    Raises
    ------
    PartitionCycleError
        ``parts`` cannot run in this order.
    """
    out = [(u, list(ns)) for u, ns in parts]
    clock = WorkClock.of(clock, math.inf)
    grace = 0.1 * clock.limit_s  # merging may overrun the wall-clock cap by a tenth

    def latency(cand: list[tuple[str, list[str]]]) -> float:
        clock.spend(MOVE_S_PER_NODE * len(problem.nodes))
        return simulate(
            problem, [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(cand)]
        ).makespan_us

    best = latency(out)
    merged = True
    while merged and not clock.expired(deadline, grace):  # passes until one merges nothing
        merged = False
        last: dict[str, int] = {}  # per unit, the position of its latest partition so far
        j = 0
        while j < len(out) and not clock.expired(deadline, grace):
            unit = out[j][0]
            i = last.get(unit)
            if i is not None:
                cand = [*out[:i], (unit, out[i][1] + out[j][1]), *out[i + 1 : j], *out[j + 1 :]]
                try:
                    got = latency(cand)
                except PartunerError:  # the merged partition would wait for its own outputs
                    got = math.inf
                if got <= best * (1 + 1e-12):
                    out, best, merged = cand, got, True
                    continue  # the next partition now sits at j; i holds the merged one
            last[unit] = j
            j += 1
    return out


def schedule_of_parts(
    problem: Problem, parts: Sequence[tuple[str, Sequence[str]]], name: str
) -> tuple[Schedule, float]:
    """Simulate ``parts`` (in this order) and lay each partition's nodes out after its call
    overhead and boundary cost; returns the schedule and the plan's predicted latency.

    Raises
    ------
    PartitionCycleError
        The partitions cannot run in this order.
    """
    partitions = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(parts)]
    timing = simulate(problem, partitions)
    part_of = {n: i for i, (_, ns) in enumerate(parts) for n in ns}
    slots: dict[str, Slot] = {}
    free: dict[str, float] = {}  # per hardware resource
    read: list[dict[Hashable, float]] = [{} for _ in parts]  # values each reads from others
    for k, edge in enumerate(problem.edges):
        if part_of[edge.src] != part_of[edge.dst]:
            read[part_of[edge.dst]].update(problem.payload(k))
    for i in run_order(problem, partitions, timing):
        unit, members = parts[i]
        res = problem.resources_of(unit)
        t = timing.start_us[f"p{i}"] + partition_cost(problem, unit, [], sum(read[i].values()))
        t = max([t, *(free.get(r, 0.0) for r in res)])
        for n in members:
            for p in problem.preds(n):
                if part_of[p] != i:
                    t = max(t, slots[p].end + problem.comm_us(p, n, slots[p].unit, unit))
                else:
                    t = max(t, slots[p].end)
            slots[n] = Slot(n, unit, t, t + problem.cost[n][unit])
            t = slots[n].end
        for r in res:
            free[r] = t
    own = [tuple(ns) for _, ns in parts]
    return Schedule(slots, name, "feasible", partitions=own), timing.makespan_us


def best_per_region(
    parts: Sequence[Region],
    chain: Sequence[RegionSolution],
    times: Sequence[float],
    faithful: Mapping[tuple[int, str | None, str | None], RegionSolution],
) -> list[tuple[str, list[str]]] | None:
    """``chain`` (the smaller model's best chain, whose regions' simulated times are ``times``:
    :func:`region_times`) with each region replaced by the whole model's solution for the same
    boundary units where that one's span (its simulated time) is shorter, assembled; None when
    no region changes."""
    out, changed = [], False
    for k, sol in enumerate(chain):
        other = faithful.get((k, sol.entry_unit, sol.exit_unit))
        if other is not None and other.span_us < times[k] - _SHORTER_US:
            sol, changed = other, True
        out.append(sol)
    return assemble(parts, out) if changed else None


def region_times(
    problem: Problem, parts: Sequence[Region], plan: list[tuple[str, list[str]]]
) -> list[float] | None:
    """Each region's time in ``plan``'s simulation: from the end of its entering node to the end
    of its leaving node (the last region: to the plan's end); None when ``plan`` does not
    run."""
    try:
        sched, latency = schedule_of_parts(problem, plan, "pexact")
    except PartunerError:
        return None
    out, prev = [], 0.0
    for region in parts:
        end = sched.slots[region.exit].end if region.exit is not None else latency
        out.append(end - prev)
        prev = end
    return out
