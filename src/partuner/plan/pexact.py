"""A partition-level exact scheduler: plans (not node schedules) as a CP-SAT model.

What a plan costs is its partition simulation (:mod:`partuner.plan.simulate`): a partition
starts when all its inputs have arrived, pays its unit's call overhead and the boundary cost of
every value it reads from another partition (same unit or not), and its outputs leave only when
it ends. The node-level model of :mod:`partuner.plan.exact` lets two units trade single nodes at
the price of one transfer, so its bound sits far below what partitions can reach. This model
adds, per node ``n`` (integer ticks, costs and delays rounded down as in ``exact``):

* ``PS[n]``, ``PE[n]``: the start and end of the partition holding ``n``; ``n`` starts after
  ``PS[n]`` plus its unit's call overhead and ends by ``PE[n]``;
* per edge ``q -> n`` a boolean *same partition*: then same unit and equal ``PS``/``PE``; else
  ``PS[n] >= PE[q]`` plus the transfer when the units differ (outputs leave at the end, a
  partition waits for all its inputs);
* per value and consumer, a boolean *charged*: the consumer's unit is busy for the boundary
  cost of that value just before it, unless the producer or an earlier consumer of the value
  shares its partition (each value is paid once per partition that reads it);
* one ``NoOverlap`` per hardware resource over each node's busy interval (boundary cost +
  cost); minimise the latest partition end.

From any plan's simulated run one reads off an assignment of these variables (partition
start/end, each partition's overhead and boundary costs first, then its nodes) that meets
every constraint with the same latency, less the savings of fused groups it runs whole. The
model leaves out the call overhead's occupancy (only its delay counts) and partitions may
interleave, so it is a relaxation: its proven bound, less the total possible group saving, is
a lower bound on the predicted latency of every plan.

Whole models are too big for the solver to prove anything; they are split at articulation
nodes (:func:`partuner.plan.decompose.regions`) and solved region by region for every pair
(unit of the node entering it, unit of the one leaving it). A region's span runs from the end
of the entering node to the end of the leaving one (the last region: to its last partition's
end); nodes continuing the entering node's partition pay no new overhead. Everything before
the entering node is its ancestor, so every unit is free when it ends: the regions' bounds add
up, composed by dynamic programming over the boundary units. The plan returned assembles the
best regions' partitions (their node order from the solver) and is simulated for real; when
that fails (the relaxation allows partitions a real run cannot order) the solver's assignment
and node order are cut into partitions the usual way.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partuner.errors import InfeasiblePlanError, PartunerError
from partuner.plan.common import lower_bound
from partuner.plan.decompose import Region, regions
from partuner.plan.exact import _cp_model, group_slack, heuristic_schedules
from partuner.plan.memory import overflow
from partuner.plan.partitions import Partition, plan_from_schedule, run_order, simulate
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.simulate import partition_cost

__all__ = ["PartitionExact", "RegionSolution", "solve_region", "solve_plan"]

log = logging.getLogger(__name__)

TICK_US = 0.1
DEFAULT_TIME_LIMIT_S = 30.0
DEFAULT_REGION_NODES = 16
_EPS_TICKS = 1e-6
_PROVEN_US = 1e-3  # a span within this of its bound is proven (bounds lose float noise)


def _ticks(us: float, tick: float) -> int:
    return max(0, math.floor(us / tick + _EPS_TICKS))


@dataclass
class RegionSolution:
    """The best plan found for one region and what is proven about it.

    ``parts`` lists ``(unit, nodes)`` per partition, nodes in run order, partitions by start;
    the one holding ``entry`` (when it continues into the region) lists ``entry`` first.
    ``span_us`` is the relaxation's span of that plan, ``bound_us`` a proven lower bound on the
    span of any plan of the region (both µs); ``status`` ``"optimal"`` when they meet.
    """

    assignment: dict[str, str]
    parts: list[tuple[str, list[str]]]
    status: str
    bound_us: float
    span_us: float
    entry_unit: str | None = None
    exit_unit: str | None = None


def solve_region(
    problem: Problem,
    region: Region,
    *,
    entry_unit: str | None = None,
    exit_unit: str | None = None,
    time_limit: float,
    hints: Iterable[Mapping[str, str]] = (),
    mirrored: frozenset[str] = frozenset(),
    tick_us: float = TICK_US,
    workers: int = 1,
    seed: int = 0,
) -> RegionSolution | None:
    """Solve the partition-level model of ``region`` (see :func:`partuner.plan.decompose.regions`):
    its entry node (if any) ends at time 0 on ``entry_unit``, its exit on ``exit_unit`` (either
    unit left to the solver when None). ``hints`` are assignments to warm-start from, the best
    first. ``mirrored`` are units the first node (the entry, else the first of ``region``) need
    not try when free: each mirrors another unit it can run on (:func:`interchangeable`), so
    every solution has a mirror image that avoids them. None when the solver found no plan in
    time (then nothing is proven)."""
    cp_model = _cp_model()
    m = cp_model.CpModel()
    entry = region.entry
    nodes = list(region.nodes)
    run = {n: problem.runnable_units(n) for n in nodes}
    if region.exit is not None and exit_unit is not None:
        run[region.exit] = [exit_unit]
    overhead = {u: _ticks(problem.call_overhead_us.get(u, 0.0), tick_us) for u in problem.units}
    every = nodes
    origin = 0
    if entry is not None:
        run[entry] = [entry_unit] if entry_unit is not None else problem.runnable_units(entry)
        every = [entry, *nodes]
    run[every[0]] = [u for u in run[every[0]] if u not in mirrored] or run[every[0]]
    if entry is not None:
        origin = max(overhead[u] for u in run[entry]) + 1  # room for the entering partition
    horizon = origin + sum(max(_ticks(problem.cost[n][u], tick_us) for u in run[n]) for n in nodes)
    horizon += sum(
        _ticks(_worst_cut(problem, p, n), tick_us) for n in nodes for p in problem.preds(n)
    )
    horizon += max(overhead.values(), default=0) * (len(nodes) + 1) + 1

    def var(name: str) -> dict[str, Any]:
        return {n: m.new_int_var(0, horizon, f"{name}[{n}]") for n in every}

    s, e, busy, ps, pe = var("s"), var("e"), var("busy"), var("PS"), var("PE")
    x = {(n, u): m.new_bool_var(f"x[{n},{u}]") for n in every for u in run[n]}
    for n in every:
        m.add_exactly_one(x[n, u] for u in run[n])
        m.add(e[n] <= pe[n])
    if entry is not None:
        m.add(s[entry] == origin)
        m.add(e[entry] == origin)
        for u in run[entry]:
            m.add(ps[entry] + overhead[u] <= origin).only_enforce_if(x[entry, u])

    def together(b: Any, a: str, c: str) -> None:
        """``b`` => ``a`` and ``c`` share a unit and a partition."""
        for u in run[c]:
            if u in run[a]:
                m.add_bool_or([b.Not(), x[c, u].Not(), x[a, u]])
            else:
                m.add_bool_or([b.Not(), x[c, u].Not()])
        m.add(ps[a] == ps[c]).only_enforce_if(b)
        m.add(pe[a] == pe[c]).only_enforce_if(b)

    inside = set(every)
    values: dict[Hashable, tuple[str, dict[str, float]]] = {}
    same: dict[tuple[str, str], Any] = {}
    for i, edge in enumerate(problem.edges):
        if edge.src not in inside or edge.dst not in inside or edge.dst == entry:
            continue
        for key, nbytes in problem.payload(i).items():
            values.setdefault(key, (edge.src, {}))[1][edge.dst] = nbytes
        q, n = edge.src, edge.dst
        if (q, n) in same:
            continue
        b = same[q, n] = m.new_bool_var(f"same[{q},{n}]")
        together(b, q, n)
        m.add(s[n] >= e[q])
        m.add(ps[n] >= pe[q]).only_enforce_if(b.Not())
        nbytes = problem.pair_nbytes(q, n)
        for u in run[q]:
            for v in run[n]:
                d = _ticks(problem.transfer_us(u, v, nbytes), tick_us) if u != v else 0
                if d > 0:
                    m.add(ps[n] >= pe[q] + d).only_enforce_if([b.Not(), x[q, u], x[n, v]])

    charges: dict[str, list[tuple[Any, float]]] = {n: [] for n in every}
    sibling: dict[tuple[str, str], Any] = {}
    for key, (src, readers) in values.items():
        ordered = sorted(readers, key=problem.index)
        for k, n in enumerate(ordered):
            earlier = []
            for a in ordered[:k]:
                if (a, n) not in sibling:
                    b = sibling[a, n] = m.new_bool_var(f"sib[{a},{n}]")
                    together(b, a, n)
                earlier.append(sibling[a, n])
            paid = m.new_bool_var(f"paid[{key},{n}]")
            m.add_bool_or([paid, same[src, n], *earlier])
            charges[n].append((paid, readers[n]))

    on_resource: dict[str, list[Any]] = {}
    for n in nodes:
        for u in run[n]:
            d = _ticks(problem.cost[n][u], tick_us)
            m.add(e[n] == s[n] + d).only_enforce_if(x[n, u])
            m.add(busy[n] >= ps[n] + overhead[u]).only_enforce_if(x[n, u])
            rate = problem.boundary_us_per_byte.get(u, 0.0)
            paid = [(b, _ticks(nb * rate, tick_us)) for b, nb in charges[n]]
            m.add(busy[n] + sum(t * b for b, t in paid if t > 0) <= s[n]).only_enforce_if(x[n, u])
            size = m.new_int_var(0, horizon, f"size[{n},{u}]")
            iv = m.new_optional_interval_var(busy[n], size, e[n], x[n, u], f"iv[{n},{u}]")
            for r in problem.resources_of(u):
                on_resource.setdefault(r, []).append(iv)
    for ivs in on_resource.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    if problem.memory_limited:
        _add_capacity(m, problem, nodes, x)
    span = m.new_int_var(0, horizon, "span")
    if region.exit is not None:
        m.add(span >= e[region.exit] - origin)
    else:
        for n in nodes:
            if not any(c in inside for c in problem.succs(n)):
                m.add(span >= pe[n] - origin)
    m.minimize(span)
    hint = next(iter(hints), None)  # the best first
    if hint is not None:
        for (n, u), b in x.items():
            if n in hint:
                m.add_hint(b, hint[n] == u)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit)
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.random_seed = seed
    code = solver.solve(m)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    slack = len(every) * 4 * _EPS_TICKS * tick_us  # float noise the rounding tolerated
    bound = solver.objective_value if code == cp_model.OPTIMAL else solver.best_objective_bound
    bound_us = max(0.0, math.ceil(bound - 1e-6) * tick_us - slack)
    assignment = {n: next(u for u in run[n] if solver.boolean_value(x[n, u])) for n in every}
    groups: dict[tuple[str, int, int], list[str]] = {}
    for n in every:
        groups.setdefault((assignment[n], solver.value(ps[n]), solver.value(pe[n])), []).append(n)
    parts = []
    for (u, _, _), members in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        members.sort(key=lambda n: (n != entry, solver.value(s[n]), problem.index(n)))
        parts.append((u, members))
    entered = assignment.pop(entry) if entry is not None else None
    return RegionSolution(
        assignment=assignment,
        parts=parts,
        status="optimal" if code == cp_model.OPTIMAL else "feasible",
        bound_us=min(bound_us, solver.objective_value * tick_us),
        span_us=solver.objective_value * tick_us,
        entry_unit=entered,
        exit_unit=assignment[region.exit] if region.exit is not None else None,
    )


def _add_capacity(m: Any, problem: Problem, nodes: Sequence[str], x: Mapping[Any, Any]) -> None:
    """Per unit of finite memory: the weights of the nodes on it plus their largest output
    stay within its capacity (:meth:`Problem.memory_use`)."""
    for u in problem.units:
        cap = problem.capacity(u)
        on = [n for n in nodes if (n, u) in x]
        if not on or not math.isfinite(cap):
            continue
        top = max(problem.activation_bytes(n) for n in on)
        peak = m.new_int_var(0, top, f"peak[{u}]")
        for n in on:
            if problem.activation_bytes(n) > 0:
                m.add(peak >= problem.activation_bytes(n)).only_enforce_if(x[n, u])
        m.add(sum(problem.weights(n) * x[n, u] for n in on) + peak <= math.floor(cap))


def _worst_cut(problem: Problem, p: str, n: str) -> float:
    nbytes = problem.pair_nbytes(p, n)
    worst = 0.0
    for u in problem.runnable_units(p):
        for v in problem.runnable_units(n):
            if u != v:
                worst = max(worst, problem.transfer_us(u, v, nbytes))
    rate = max(problem.boundary_us_per_byte.values(), default=0.0)
    return worst + nbytes * rate


@dataclass
class PlanSolution:
    """A plan found by :func:`solve_plan`: its partitions (in order) and what is proven."""

    parts: list[tuple[str, list[str]]] | None
    status: str
    bound_us: float


def solve_plan(
    problem: Problem,
    *,
    time_limit: float,
    hints: Sequence[Mapping[str, str]] = (),
    tick_us: float = TICK_US,
    workers: int = 1,
    max_region: int = DEFAULT_REGION_NODES,
    seed: int = 0,
) -> PlanSolution:
    """Solve ``problem`` region by region (see the module docstring) within about
    ``time_limit`` seconds. ``bound_us`` bounds every plan's predicted latency (fused groups
    aside); ``parts`` the best plan the regions compose to (None if some region found none).

    Each region is solved first with its boundary units left to the solver (a bound for every
    pair of them), then, as time allows, once per pair of boundary units (entering, leaving)
    not already settled: a pair the free solve chose and proved, or one mirroring a solved
    pair across two interchangeable units (:func:`interchangeable`)."""
    deadline = time.monotonic() + max(0.0, time_limit)
    parts = regions(problem, max_region)
    if not parts:
        return PlanSolution([], "optimal", 0.0)
    Job = tuple[int, str | None, str | None]
    solved: dict[Job, RegionSolution] = {}  # pinned jobs, and free solves at their own pair
    free: dict[int, RegionSolution | None] = {}
    swaps = interchangeable(problem)

    mirrors = frozenset(v for _, v in swaps)

    def solve(
        k: int, a: str | None, b: str | None, limit: float, free: bool = False
    ) -> RegionSolution | None:
        t0 = time.monotonic()
        mine = solved.get((k, a, b))  # a solution found before starts this solve
        sol = solve_region(
            problem,
            parts[k],
            entry_unit=a,
            exit_unit=b,
            time_limit=limit,
            hints=[mine.assignment, *hints] if mine is not None else hints,
            mirrored=mirrors if free else frozenset(),
            tick_us=tick_us,
            workers=workers,
            seed=seed,
        )
        log.debug(
            "pexact: region %d (%d nodes) %s -> %s: %s in %.2f s of %.2f",
            k,
            len(parts[k].nodes),
            a or "*",
            b or "*",
            f"{sol.status} span {sol.span_us:.1f} bound {sol.bound_us:.1f} us" if sol else "none",
            time.monotonic() - t0,
            limit,
        )
        return sol

    bounds: dict[Job, float] = {}  # proven for that pair of boundary units

    def settle(k: int, sol: RegionSolution, pinned: bool) -> None:
        for u, v in [(None, None), *swaps]:
            job = (k, _swap(sol.entry_unit, u, v), _swap(sol.exit_unit, u, v))
            mine = sol if u is None else _swapped(sol, u, v)
            if job not in solved or mine.span_us < solved[job].span_us:
                solved[job] = mine
            if pinned:
                bounds[job] = max(bounds.get(job, 0.0), sol.bound_us)

    def bound_of(job: Job) -> float:
        f = free[job[0]]
        return max(bounds.get(job, 0.0), f.bound_us if f is not None else 0.0)

    def is_proven(job: Job) -> bool:
        sol = solved.get(job)
        return sol is not None and sol.span_us <= bound_of(job) + _PROVEN_US

    weight = {k: len(r.nodes) for k, r in enumerate(parts)}
    budget = max(0.0, deadline - time.monotonic()) * (0.5 if len(problem.units) > 1 else 1.0)
    for k in range(len(parts)):
        free[k] = sol = solve(k, None, None, budget * weight[k] / sum(weight.values()), True)
        if sol is not None:
            settle(k, sol, pinned=False)
    pinned = [
        (k, a, b)
        for k, r in enumerate(parts)
        for a in (problem.runnable_units(r.entry) if r.entry is not None else [None])
        for b in (problem.runnable_units(r.exit) if r.exit is not None else [None])
    ]
    for _ in range(3):  # then once more for what is still unproven, with the time left
        todo, tried = [], set()
        for job in pinned:  # one job per class of jobs mirrored by interchangeable units
            mirrors = {(job[0], _swap(job[1], u, v), _swap(job[2], u, v)) for u, v in swaps}
            if not is_proven(job) and not mirrors & tried:
                todo.append(job)
                tried.add(job)
        for i, job in enumerate(todo):
            left = deadline - time.monotonic()
            if left <= 0.01:
                break
            if not is_proven(job):
                sol = solve(*job, left / (len(todo) - i))
                if sol is not None:
                    settle(job[0], sol, pinned=True)

    # dynamic programme over the unit holding each boundary node: lb[u] bounds the time the
    # boundary node ends on u; best[u] is the fastest chain of solved regions ending there
    lb: dict[str | None, float] = {None: 0.0}
    best: dict[str | None, tuple[float, list[RegionSolution]]] = {None: (0.0, [])}
    for k in range(len(parts)):
        nlb: dict[str | None, float] = {}
        nbest: dict[str | None, tuple[float, list[RegionSolution]]] = {}
        for job in pinned:
            if job[0] != k or job[1] not in lb:
                continue
            a, b = job[1], job[2]
            nlb[b] = min(nlb.get(b, math.inf), lb[a] + bound_of(job))
            sol, prev = solved.get(job), best.get(a)
            if sol is not None and prev is not None:
                cand = (prev[0] + sol.span_us, [*prev[1], sol])
                if b not in nbest or cand[0] < nbest[b][0]:
                    nbest[b] = cand
        lb, best = nlb, nbest
    bound_us = min(lb.values(), default=0.0)
    status = "optimal" if all(is_proven(j) for j in pinned) else "feasible"
    if not best:
        return PlanSolution(None, status, bound_us)
    _, chain = min(best.values(), key=lambda v: v[0])
    return PlanSolution(_assemble(parts, chain), status, bound_us)


def _swap(unit: str | None, u: str, v: str) -> str | None:
    return v if unit == u else u if unit == v else unit


def _swapped(sol: RegionSolution, u: str, v: str) -> RegionSolution:
    """``sol`` with units ``u`` and ``v`` exchanged."""
    return RegionSolution(
        assignment={n: _swap(w, u, v) or w for n, w in sol.assignment.items()},
        parts=[(_swap(w, u, v) or w, list(ns)) for w, ns in sol.parts],
        status=sol.status,
        bound_us=sol.bound_us,
        span_us=sol.span_us,
        entry_unit=_swap(sol.entry_unit, u, v),
        exit_unit=_swap(sol.exit_unit, u, v),
    )


def interchangeable(problem: Problem) -> list[tuple[str, str]]:
    """Pairs of units that can be swapped in any plan without changing its latency: the same
    cost for every node, call overhead, boundary cost, memory and modeled flag, the same link
    to every other unit, and each one private resource that every other unit occupies either
    both of or neither (two 1-thread CPU units beside a 2-thread one on both their cores).

    Examples
    --------
    >>> from partuner.plan.problem import Problem
    >>> p = Problem(["a"], ["u", "v", "w"], {"a": {"u": 1.0, "v": 1.0, "w": 2.0}})
    >>> interchangeable(p)
    [('u', 'v')]
    """
    out = []
    units = problem.units
    for i, u in enumerate(units):
        for v in units[i + 1 :]:
            if _same_unit(problem, u, v):
                out.append((u, v))
    return out


def _same_unit(problem: Problem, u: str, v: str) -> bool:
    if any(problem.cost[n][u] != problem.cost[n][v] for n in problem.nodes):
        return False
    for table in (
        problem.call_overhead_us,
        problem.boundary_us_per_byte,
        problem.memory_bytes,
    ):
        if table.get(u) != table.get(v):
            return False
    if (u in problem.modeled) != (v in problem.modeled):
        return False
    if any(g.cost.get(u) != g.cost.get(v) for g in problem.groups):
        return False
    others = [w for w in problem.units if w not in (u, v)]
    if any(problem.link(u, w) != problem.link(v, w) for w in others):
        return False
    ru, rv = problem.resources_of(u), problem.resources_of(v)
    if len(ru) != 1 or len(rv) != 1 or ru == rv:
        return False
    return all((ru <= problem.resources_of(w)) == (rv <= problem.resources_of(w)) for w in others)


def _assemble(
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
    problem: Problem, parts: Sequence[tuple[str, Sequence[str]]], deadline: float = math.inf
) -> list[tuple[str, list[str]]]:
    """Merge each partition into the one its unit runs before it wherever the predicted
    latency does not grow (the model does not charge a call's overhead as busy time, so its
    plans may cut a unit's work more often than it pays), until no merge is left or
    ``deadline`` (:func:`time.monotonic`) passes.

    Raises
    ------
    PartitionCycleError
        ``parts`` cannot run in this order.
    """
    out = [(u, list(ns)) for u, ns in parts]

    def latency(cand: list[tuple[str, list[str]]]) -> float:
        return simulate(
            problem, [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(cand)]
        ).makespan_us

    best = latency(out)
    merged = True
    while merged and time.monotonic() < deadline:
        merged = False
        last: dict[str, int] = {}
        for j, (unit, _) in enumerate(out):
            i = last.get(unit)
            last[unit] = j
            if i is None:
                continue
            cand = [*out[:i], (unit, out[i][1] + out[j][1]), *out[i + 1 : j], *out[j + 1 :]]
            try:
                got = latency(cand)
            except PartunerError:  # the merged partition would wait for its own outputs
                continue
            if got <= best * (1 + 1e-12):
                out, best, merged = cand, got, True
                break
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
    for i in run_order(problem, partitions, timing):
        unit, members = parts[i]
        res = problem.resources_of(unit)
        inside = set(members)
        read: dict[Hashable, float] = {}
        for k, edge in enumerate(problem.edges):
            if edge.dst in inside and edge.src not in inside:
                read.update(problem.payload(k))
        t = timing.start_us[f"p{i}"] + partition_cost(problem, unit, [], sum(read.values()))
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


@register
class PartitionExact(Scheduler):
    """Plans with the least predicted latency, by a partition-level CP-SAT model per region.

    The model (module docstring) extends the disjunctive task-graph formulation of ``exact``
    with partition start/end variables, in the spirit of the graph-partitioning models used to
    place DNN sub-graphs on heterogeneous devices (e.g. Kim et al., "PartitionTuner", ETRI
    Journal 2023, which searches them by profiling instead); solved with CP-SAT (OR-Tools),
    warm-started from the heuristics, reporting the proven bound (SAGA's practice).

    ``time_limit`` (seconds, default 30) covers the warm-start heuristics and the solves;
    ``region_nodes`` (default 16) the size regions are merged up to; ``workers`` CP-SAT's
    search workers (default 8: its portfolio finds proofs faster than with one worker per
    core, even on two cores).
    """

    name = "pexact"

    def __init__(
        self,
        *,
        tick_us: float = TICK_US,
        region_nodes: int = DEFAULT_REGION_NODES,
        workers: int | None = None,
        seed: int = 0,
    ) -> None:
        self.tick_us = tick_us
        self.region_nodes = region_nodes
        self.workers = workers or 8
        self.seed = seed

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        return self.solve(problem, time_limit=time_limit)

    def solve(
        self,
        problem: Problem,
        *,
        time_limit: float | None = None,
        hints: Iterable[Schedule] | None = None,
    ) -> Schedule:
        """Like :meth:`schedule`, warm-starting from ``hints`` (valid schedules) if given,
        else from every registered heuristic. The schedule is the plan's node layout; its
        ``lower_bound`` bounds every plan's predicted latency."""
        problem.validate()
        _cp_model()
        budget = DEFAULT_TIME_LIMIT_S if time_limit is None else max(0.0, time_limit)
        deadline = time.monotonic() + budget
        if hints is None:
            hints = heuristic_schedules(problem, budget * 0.1).values()
        ranked = sorted(hints, key=lambda h: plan_from_schedule(problem, h).predicted_us)
        sol = solve_plan(
            problem,
            time_limit=max(0.0, deadline - time.monotonic()),
            hints=[h.assignment for h in ranked],
            tick_us=self.tick_us,
            workers=self.workers,
            # capacity couples the regions: a memory-limited problem is solved whole
            max_region=len(problem.nodes) if problem.memory_limited else self.region_nodes,
            seed=self.seed,
        )
        bound = lower_bound(problem, partitions=True)
        best: tuple[float, Schedule] | None = None
        bound = max(bound, sol.bound_us - group_slack(problem))
        if sol.parts is not None:
            try:
                merged = merge_partitions(problem, sol.parts, deadline + 0.1 * budget)
                sched, latency = schedule_of_parts(problem, merged, self.name)
                if overflow(problem, sched.assignment) is None:
                    best = (latency, sched)
            except PartunerError as exc:  # the relaxation's partitions cannot run as listed
                log.debug("pexact: assembled partitions do not run: %s", exc)
        if ranked:
            hinted = plan_from_schedule(problem, ranked[0]).predicted_us
            if best is None or hinted < best[0]:
                best = (hinted, ranked[0])
        if best is None:
            raise InfeasiblePlanError(
                "no placement of the nodes fits the units' memory was found (pexact, "
                f"{budget:.3g} s); give it more time or the units more memory"
            )
        latency, sched = best
        proven = latency <= bound + _PROVEN_US and group_slack(problem) == 0
        status = "optimal" if proven else "feasible"
        return Schedule(dict(sched.slots), self.name, status, bound, sched.partitions)
