"""From a schedule to partitions (one compiled sub-model call each) and their predicted latency.

A partition is a run of nodes that one unit executes in a single call. :func:`make_partitions`
cuts each unit's node sequence so that a partition's inputs are all available when it starts and
the partitions form a DAG; :func:`~partuner.plan.simulate.simulate` predicts the latency of
running them; a :class:`Plan` holds the partitions and the predicted figures.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass

from partuner.errors import InfeasiblePlanError, PartitionCycleError
from partuner.plan.common import lower_bound
from partuner.plan.memory import overflow
from partuner.plan.problem import Problem
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.simulate import Timing, simulate

__all__ = [
    "Partition",
    "Timing",
    "Plan",
    "make_partitions",
    "simulate",
    "plan_from_schedule",
    "plan_from_assignment",
]

_TOL = 1e-9


@dataclass(frozen=True)
class Partition:
    """Nodes that ``unit`` runs in one call, in order, with their predicted start and end (µs).

    :func:`make_partitions` fills ``start_us``/``end_us`` from :func:`simulate`; they are not
    read back, so partitions built by hand may leave them at 0.
    """

    name: str
    unit: str
    nodes: tuple[str, ...]
    start_us: float = 0.0
    end_us: float = 0.0


def make_partitions(problem: Problem, schedule: Schedule) -> list[Partition]:
    """Cut a valid schedule into partitions, named ``p0, p1, ...`` in a topological order.

    Nodes are visited in schedule order (start, end, topological index: a topological order
    for a valid schedule). Each joins the open run of its unit unless (a) an input from another
    unit reaches it (producer end + transfer) after that run starts, or (b) joining would make
    the partition graph cyclic, counting each unit's run order as dependencies (only possible
    with zero-time nodes and transfers), or (c) a unit sharing hardware with it ran a node since
    the run began; then it opens a new run. A run is also closed right after (d) a node whose
    output another unit starts on before this unit's next node ends: a partition's outputs
    leave only when it ends, so without the cut that unit would wait for the whole run.
    (e) A second sweep closes a run also right after a node whose output another unit starts on
    before the run (as the first sweep cut it) ends, when the rest of the run takes longer than
    a new call costs (the unit's call overhead, and the boundary cost of the node's values the
    rest reads), and no fused group of the node goes on in the run: rule (d) looks one node
    ahead, and a long run would otherwise hold a branch's input back for all of it.
    Partition times come from :func:`simulate`, which can run the result without deadlock.

    Raises
    ------
    InvalidScheduleError
        The schedule does not fit the problem.
    """
    schedule.validate(problem)
    slots = schedule.slots
    order = sorted(problem.nodes, key=lambda n: (slots[n].start, slots[n].end, problem.index(n)))
    groups, out = _runs(problem, slots, order, set())
    early = _early_reads(problem, slots, groups)
    if early:
        groups, out = _runs(problem, slots, order, early)
    first = [slots[nodes[0]] for nodes in groups]
    unit_pos = {u: i for i, u in enumerate(problem.units)}
    indegree = [0] * len(groups)
    for targets in out:
        for g in targets:
            indegree[g] += 1
    heap = [(first[g].start, unit_pos[first[g].unit], g) for g in range(len(groups))]
    heap = [k for k in heap if indegree[k[2]] == 0]
    heapq.heapify(heap)
    parts: list[Partition] = []
    while heap:
        g = heapq.heappop(heap)[2]
        parts.append(Partition(f"p{len(parts)}", first[g].unit, tuple(groups[g])))
        for h in sorted(out[g]):
            indegree[h] -= 1
            if indegree[h] == 0:
                heapq.heappush(heap, (first[h].start, unit_pos[first[h].unit], h))
    timing = simulate(problem, parts)
    return [
        dataclasses.replace(p, start_us=timing.start_us[p.name], end_us=timing.end_us[p.name])
        for p in parts
    ]


def _runs(
    problem: Problem, slots: Mapping[str, Slot], order: list[str], early: set[str]
) -> tuple[list[list[str]], list[set[int]]]:
    """Rules (a) to (d) of :func:`make_partitions`, closing a run also after each node of
    ``early``: the runs' nodes, and per run the runs reading from it or run after it."""
    group_of: dict[str, int] = {}
    groups: list[list[str]] = []
    out: list[set[int]] = []  # out[g]: the groups reading from g or run after it on its hardware
    open_run: dict[str, int] = {}
    last_on: dict[str, int] = {}  # per hardware resource, the group that used it last
    after_on_unit: dict[str, str] = {}  # the node its unit runs next, in schedule order
    prev: dict[str, str] = {}
    for n in order:
        if slots[n].unit in prev:
            after_on_unit[prev[slots[n].unit]] = n
        prev[slots[n].unit] = n
    for n in order:
        unit = slots[n].unit
        res = problem.resources_of(unit)
        inputs = {group_of[p] for p in problem.preds(n)}
        g = open_run.get(unit)
        if g is not None and (
            _late_input(problem, slots, n, slots[groups[g][0]].start)
            or not inputs.isdisjoint(_descendants(out, g))
            or any(last_on.get(r, g) != g for r in res)  # a unit sharing hardware ran since
        ):
            g = None
        if g is None:
            g = len(groups)
            groups.append([])
            out.append(set())
            for r in res:
                if r in last_on:
                    out[last_on[r]].add(g)
            open_run[unit] = g
        for r in res:
            last_on[r] = g
        groups[g].append(n)
        group_of[n] = g
        for q in inputs - {g}:
            out[q].add(g)
        if n in early or _feeds_other_unit_early(problem, slots, n, after_on_unit.get(n)):
            del open_run[unit]  # (d), (e): close the run so its output leaves now
    return groups, out


def _early_reads(problem: Problem, slots: Mapping[str, Slot], groups: list[list[str]]) -> set[str]:
    """Rule (e) of :func:`make_partitions`: the nodes after which a second sweep cuts."""
    cut: set[str] = set()
    for nodes in groups:
        unit, end, inside = slots[nodes[0]].unit, slots[nodes[-1]].end, set(nodes)
        over = problem.call_overhead_us.get(unit, 0.0)
        per_byte = problem.boundary_us_per_byte.get(unit, 0.0)
        per_byte += problem.boundary_out_us_per_byte.get(unit, 0.0)
        for k, n in enumerate(nodes[:-1]):
            rest = end - slots[n].end
            succs = problem.succs(n)
            if rest <= over or not any(
                slots[s].unit != unit and slots[s].start < end for s in succs
            ):
                continue
            kept = sum(problem.pair_nbytes(n, s) for s in succs if s in inside)
            if rest > over + kept * per_byte and not any(
                not set(nodes[k + 1 :]).isdisjoint(g.nodes) for g in problem.groups_of(n)
            ):
                cut.add(n)
    return cut


def _feeds_other_unit_early(
    problem: Problem, slots: Mapping[str, Slot], n: str, nxt: str | None
) -> bool:
    if nxt is None:
        return False
    unit = slots[n].unit
    return any(slots[s].unit != unit and slots[s].start < slots[nxt].end for s in problem.succs(n))


def _late_input(problem: Problem, slots: Mapping[str, Slot], n: str, run_start: float) -> bool:
    unit = slots[n].unit
    for p in problem.preds(n):
        ps = slots[p]
        if ps.unit != unit:
            arrival = ps.end + problem.comm_us(p, n, ps.unit, unit)
            if arrival > run_start + _TOL * max(1.0, abs(run_start)):
                return True
    return False


def _descendants(out: list[set[int]], g: int) -> set[int]:
    seen = {g}
    stack = [g]
    while stack:
        for h in out[stack.pop()]:
            if h not in seen:
                seen.add(h)
                stack.append(h)
    return seen - {g}


@dataclass
class Plan:
    """Partitions to run, in a topological order, and what the planner predicts for them.

    ``predicted_us`` is the :func:`simulate` makespan; ``lower_bound_us`` a lower bound on any
    plan's latency for the problem (transfers and call overheads ignored); ``modeled`` is true
    when some partition's unit has computed rather than measured costs.
    """

    partitions: list[Partition]
    units: list[str]
    scheduler: str
    status: str
    predicted_us: float
    lower_bound_us: float | None = None
    modeled: bool = False

    @property
    def node_unit(self) -> dict[str, str]:
        """``{node: unit}``."""
        return {n: p.unit for p in self.partitions for n in p.nodes}

    def parallel_groups(self) -> list[list[str]]:
        """Partitions predicted to run at the same time on different units.

        The maximal sets of partitions whose predicted intervals all overlap (NEST-C's
        ``(p5||p6)``), in time order, each listed in partition order; only sets of two or more.
        """
        pos = {p.name: i for i, p in enumerate(self.partitions)}
        events = []
        for p in self.partitions:
            if p.end_us > p.start_us:
                events += [(p.start_us, 1, p.name), (p.end_us, 0, p.name)]
        events.sort()  # at equal times ends come first: touching intervals do not overlap
        active: set[str] = set()
        groups: list[list[str]] = []
        grew = False
        for _, is_start, name in events:
            if is_start:
                active.add(name)
                grew = True
                continue
            if grew and len(active) > 1:
                groups.append(sorted(active, key=pos.__getitem__))
            grew = False
            active.discard(name)
        return groups


def plan_from_schedule(
    problem: Problem, schedule: Schedule, *, plan_bound_us: float | None = None
) -> Plan:
    """Cut ``schedule`` into partitions (its own ``partitions`` when it lists them and they
    run) and predict their latency. ``plan_bound_us``: ``lower_bound(problem,
    partitions=True)`` when the caller has it already (a search evaluating many plans)."""
    parts = _own_partitions(problem, schedule) or make_partitions(problem, schedule)
    if plan_bound_us is None:
        plan_bound_us = lower_bound(problem, partitions=True)
    used = {p.unit for p in parts}
    return Plan(
        partitions=parts,
        units=[u for u in problem.units if u in used],
        scheduler=schedule.scheduler,
        status=schedule.status,
        predicted_us=max((p.end_us for p in parts), default=0.0),
        lower_bound_us=max(schedule.lower_bound or 0.0, plan_bound_us),
        modeled=bool(used & problem.modeled),
    )


def _own_partitions(problem: Problem, schedule: Schedule) -> list[Partition] | None:
    """The partitions ``schedule`` lists, timed, or None when it lists none, or lists some
    that do not cover its slots or cannot run in that order (then the slots are cut anew)."""
    if not schedule.partitions:
        return None
    schedule.validate(problem)
    slots = schedule.slots
    parts = []
    for i, nodes in enumerate(schedule.partitions):
        units = {slots[n].unit for n in nodes if n in slots}
        if len(units) != 1:
            return None
        parts.append(Partition(f"p{i}", units.pop(), tuple(nodes)))
    try:
        timing = simulate(problem, parts)
    except (InfeasiblePlanError, PartitionCycleError):
        return None
    return [
        Partition(
            f"p{k}", parts[i].unit, parts[i].nodes, timing.start_us[f"p{i}"], timing.end_us[f"p{i}"]
        )
        for k, i in enumerate(run_order(problem, parts, timing))
    ]


def run_order(problem: Problem, parts: list[Partition], timing: Timing) -> list[int]:
    """Indices of ``parts`` (which :func:`simulate` ran as ``timing``) in a topological order of
    their data and of each resource's turns (list order), earliest start first."""
    part_of = {n: i for i, p in enumerate(parts) for n in p.nodes}
    out: list[set[int]] = [set() for _ in parts]
    for e in problem.edges:
        if part_of[e.src] != part_of[e.dst]:
            out[part_of[e.src]].add(part_of[e.dst])
    last: dict[str, int] = {}
    for i, p in enumerate(parts):
        for r in problem.resources_of(p.unit):
            if r in last:
                out[last[r]].add(i)
            last[r] = i
    indegree = [0] * len(parts)
    for targets in out:
        for j in targets:
            indegree[j] += 1
    heap = [(timing.start_us[p.name], i) for i, p in enumerate(parts) if indegree[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)[1]
        order.append(i)
        for j in out[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(heap, (timing.start_us[parts[j].name], j))
    return order


def plan_from_assignment(
    problem: Problem,
    assignment: Mapping[str, str],
    *,
    scheduler: str = "imported",
    status: str = "feasible",
) -> Plan:
    """The plan that runs each node on ``assignment[node]`` (e.g. an imported plan file).

    Nodes are list-scheduled in topological order, each as early as its unit (and the units
    sharing its hardware) and its inputs allow.

    Raises
    ------
    InfeasiblePlanError
        A node unassigned or unknown, an unknown unit, a node its unit cannot run, or a unit
        given more than its memory holds (:meth:`Problem.memory_use`).
    """
    problem.validate()
    for n in assignment:
        if n not in problem.cost:
            raise InfeasiblePlanError(f"the assignment names unknown node {n!r}")
    known = set(problem.units)
    free: dict[str, float] = {}  # per hardware resource
    slots: dict[str, Slot] = {}
    for n in problem.nodes:
        unit = assignment.get(n)
        if unit is None:
            raise InfeasiblePlanError(f"node {n!r} is assigned to no unit")
        if unit not in known:
            raise InfeasiblePlanError(
                f"node {n!r} is assigned to unknown unit {unit!r}; units are {problem.units}"
            )
        cost = problem.cost[n][unit]
        if math.isinf(cost):
            raise InfeasiblePlanError(
                f"node {n!r} is assigned to unit {unit!r}, which cannot run it"
            )
        start = max((free.get(r, 0.0) for r in problem.resources_of(unit)), default=0.0)
        for p in problem.preds(n):
            ps = slots[p]
            start = max(start, ps.end + problem.comm_us(p, n, ps.unit, unit))
        slots[n] = Slot(n, unit, start, start + cost)
        for r in problem.resources_of(unit):
            free[r] = start + cost
    full = overflow(problem, assignment)
    if full is not None:
        raise InfeasiblePlanError(
            f"the plan does not fit {problem.name!r} in memory: {full}; move nodes off it or "
            "give it more memory (memory_mb)"
        )
    return plan_from_schedule(problem, Schedule(slots, scheduler, status, lower_bound(problem)))
