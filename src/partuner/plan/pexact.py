"""A partition-level exact scheduler: plans (not node schedules) as a CP-SAT model.

The model of one region (:mod:`partuner.plan.region_model`) adds partition start and end
variables to the node-level model of :mod:`partuner.plan.exact`, so its proven bound holds for
every plan's predicted latency.

Whole models are too big for the solver to prove anything; they are split at articulation
nodes (:func:`partuner.plan.decompose.regions`) and solved region by region for every pair
(unit of the node entering it, unit of the one leaving it). A region's span runs from the end
of the entering node to the end of the leaving one (the last region: to its last partition's
end); nodes continuing the entering node's partition pay no new overhead. Everything before
the entering node is its ancestor, so every unit is free when it ends: the regions' bounds add
up, composed by dynamic programming over the boundary units. Regions small beside the links
settle without a solver (:func:`~partuner.plan.region_model.one_unit_bound`); a pair is solved
only while a chain through it could beat the best plan known; interchangeable units are used
in one order only. The regions are solved with the model's smaller form (sooner proven); time
left once every pair that matters is proven (a fifth of the budget, kept while proofs are
open if a region's plan simulates above its span) goes to re-solving the best chain's regions
with the pairwise parts, whose plans the simulation agrees with; what that stage leaves goes
back to the open proofs. The plans both
give assemble the regions' partitions (their node order from the solver), merge a unit's
neighbouring partitions wherever that does not slow the plan down
(:mod:`partuner.plan.assemble`) and are simulated for real: the fastest is returned, or the
best warm-start plan when it predicts faster or the relaxation's partitions cannot run.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from partuner.errors import InfeasiblePlanError, PartunerError
from partuner.plan.assemble import (
    assemble,
    best_per_region,
    merge_partitions,
    region_times,
    schedule_of_parts,
)
from partuner.plan.clock import CALL_S, WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.decompose import regions
from partuner.plan.exact import _cp_model, group_slack, heuristic_schedules
from partuner.plan.floors import Floors
from partuner.plan.memory import overflow
from partuner.plan.partitions import plan_from_schedule
from partuner.plan.problem import Problem
from partuner.plan.region_model import (
    PAIRS_UP_TO,
    TICK_US,
    RegionSolution,
    one_unit_bound,
    solve_region,
)
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule

__all__ = ["PartitionExact", "interchangeable", "solve_plan"]

log = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S = 30.0
DEFAULT_REGION_NODES = 16
_POLISH_SHARE = 0.3  # of a region's time in the last stage, for its placement alone
_LAST_SHARE = 0.2  # of the time, kept for the last stage
_PROVEN_US = 1e-3  # a span within this of its bound is proven (bounds lose float noise)
#: budget seconds below which a proof's solve is not worth starting: each solve is charged
#: CALL_S and its model's rows besides its search, and on Inception-v3 with several NPUs
#: dozens of solves given slivers of time found nothing (the debug log lists each solve)
_MIN_SOLVE_S = 0.1


@dataclass
class PlanSolution:
    """A plan found by :func:`solve_plan`: its partitions (in order) and what is proven."""

    parts: list[tuple[str, list[str]]] | None
    status: str
    bound_us: float
    others: list[list[tuple[str, list[str]]]] = field(default_factory=list)


def solve_plan(
    problem: Problem,
    *,
    time_limit: float,
    hints: Sequence[Mapping[str, str]] = (),
    tick_us: float = TICK_US,
    workers: int = 1,
    max_region: int = DEFAULT_REGION_NODES,
    seed: int = 0,
    upper_us: float = math.inf,
    clock: WorkClock | None = None,
    floors: Floors | None = None,
) -> PlanSolution:
    """Solve ``problem`` region by region (see the module docstring) within about
    ``time_limit`` seconds. ``bound_us`` bounds every plan's predicted latency (fused groups
    aside); ``parts`` the best plan the regions compose to (None if some region found none).

    Each region is solved first with its boundary units left to the solver (a bound for every
    pair of them), then, as time allows, once per pair of boundary units (entering, leaving)
    not already settled: a pair the free solve chose and proved, or one mirroring a solved
    pair across two interchangeable units (:func:`interchangeable`); a free solve not proven
    is repeated first (one search for every pair; a repeat searches for the bound), the widest
    gaps first and longest. Pairs whose region is small beside the links settle without a
    solver (:func:`one_unit_bound`), and a pair is solved only while some chain through it could
    still be faster, by the bounds, than the best chain of solved regions and than
    ``upper_us`` (a known plan's latency). ``time_limit`` is seconds of work on ``clock``
    (:mod:`partuner.plan.clock`; a new one when None). ``floors``: the problem's
    :class:`~partuner.plan.floors.Floors` when the caller has them (each pair's bound starts
    there)."""
    clock = WorkClock.of(clock, time_limit)
    deadline = clock.now() + max(0.0, time_limit)
    # the last stage (whole-model re-solves) keeps a share of the time while proofs are open
    proofs_end = deadline - max(0.0, time_limit) * _LAST_SHARE
    parts = regions(problem, max_region)
    if not parts:
        return PlanSolution([], "optimal", 0.0)
    Job = tuple[int, str | None, str | None]
    solved: dict[Job, RegionSolution] = {}  # pinned jobs, and free solves at their own pair
    free: dict[int, RegionSolution | None] = {}
    swaps = interchangeable(problem)

    mirrors: list[list[str]] = []  # classes of interchangeable units, in problem.units order
    for u in problem.units:
        if not any(u in g for g in mirrors) and any(a == u for a, _ in swaps):
            mirrors.append([u, *(v for a, v in swaps if a == u)])

    faithful: dict[Job, RegionSolution] = {}  # from the model with its pairwise parts

    def solve(k: int, a: str | None, b: str | None, limit: float) -> RegionSolution | None:
        mine = free.get(k) if a is None and b is None else solved.get((k, a, b))  # a start
        tips = [mine.assignment, *hints] if mine is not None else list(hints)
        sol = None
        if limit > CALL_S or mine is None and not tips:  # else no time to search at all
            bound = bound_of((k, a, b))
            sol = region(k, a, b, limit, tips, pairs=False, floor_us=bound, prove=mine is not None)
        if sol is not None or mine is not None or not tips or clock.expired(deadline):
            return sol
        # no plan in time: the best hint's placement, only cut and ordered; its bound not kept
        fix = {n: u for n, u in tips[0].items() if n in parts[k].nodes[:-1]}  # exit: pinned
        got = region(k, a, b, max(limit / 2, _MIN_SOLVE_S), tips, pairs=False, units_of=fix)
        return got and replace(got, status="feasible", bound_us=0.0)

    def region(
        k: int,
        a: str | None,
        b: str | None,
        limit: float,
        tips: Sequence[Mapping[str, str]],
        **model: Any,
    ) -> RegionSolution | None:
        t0 = clock.now()
        sol = solve_region(
            problem,
            parts[k],
            entry_unit=a,
            exit_unit=b,
            time_limit=limit,
            hints=tips,
            mirrored=mirrors,
            tick_us=tick_us,
            workers=workers,
            seed=seed,
            clock=clock,
            **model,
        )
        log.debug(
            "pexact: region %d (%d nodes) %s -> %s%s: %s in %.2f s of %.2f",
            k,
            len(parts[k].nodes),
            a or "*",
            b or "*",
            " (pairs)" if model.get("pairs") else "",
            f"{sol.status} span {sol.span_us:.1f} bound {sol.bound_us:.1f} us" if sol else "none",
            clock.now() - t0,
            limit,
        )
        return sol

    bounds: dict[Job, float] = {}  # proven for that pair of boundary units

    def settle(k: int, sol: RegionSolution, pinned: bool) -> None:
        for u, v in [(None, None), *swaps]:
            job = (k, _swap(sol.entry_unit, u, v), _swap(sol.exit_unit, u, v))
            mine = sol if u is None else _swapped(sol, u, v)
            # spans of one model compare; a faithful plan stands in where no other is known
            kept = faithful if sol.faithful else solved
            if job not in kept or mine.span_us < kept[job].span_us:
                kept[job] = mine
            if job not in solved:
                solved[job] = mine
            if pinned:
                bounds[job] = max(bounds.get(job, 0.0), sol.bound_us)

    def bound_of(job: Job) -> float:
        f = free.get(job[0])
        return max(bounds.get(job, 0.0), f.bound_us if f is not None else 0.0)

    def is_proven(job: Job) -> bool:
        sol = solved.get(job)
        return sol is not None and sol.span_us <= bound_of(job) + _PROVEN_US

    pinned = [
        (k, a, b)
        for k, r in enumerate(parts)
        for a in (problem.runnable_units(r.entry) if r.entry is not None else [None])
        for b in (problem.runnable_units(r.exit) if r.exit is not None else [None])
    ]
    by_region: list[list[Job]] = [[] for _ in parts]
    floors = floors if floors is not None else Floors(problem)
    for job in pinned:
        by_region[job[0]].append(job)
        # paths and loads (µs), less what the model's rounding to ticks may lose on a path
        paths = floors.of(parts[job[0]], job[1], job[2])
        if math.isfinite(paths):
            paths -= 2 * (len(parts[job[0]].nodes) + 1) * tick_us
            bounds[job] = max(bounds.get(job, 0.0), paths)
        if job[1] is not None:  # regions small beside the links settle without a solver
            floor, easy = one_unit_bound(problem, parts[job[0]], job[1], job[2], tick_us=tick_us)
            bounds[job] = max(bounds[job], floor)
            if easy is not None:
                settle(job[0], easy, pinned=True)

    def chain(use_faithful: bool = False) -> tuple[float, list[RegionSolution]] | None:
        """The fastest chain of solved regions (by their spans; with ``use_faithful``, a
        region's faithful solution where it has one), over the unit holding each boundary."""
        best: dict[str | None, tuple[float, Any]] = {None: (0.0, None)}  # span, (sol, back)
        for jobs in by_region:
            nbest: dict[str | None, tuple[float, Any]] = {}
            for job in jobs:
                sol = (faithful.get(job) if use_faithful else None) or solved.get(job)
                prev = best.get(job[1])
                if sol is not None and prev is not None:
                    cand = (prev[0] + sol.span_us, (sol, prev[1]))
                    if job[2] not in nbest or cand[0] < nbest[job[2]][0]:
                        nbest[job[2]] = cand
            best = nbest
        if not best:
            return None
        span, link = min(best.values(), key=lambda v: v[0])
        out: list[RegionSolution] = []
        while link is not None:
            out.append(link[0])
            link = link[1]
        return span, out[::-1]

    def compose() -> tuple[list[dict[str | None, float]], list[dict[str | None, float]], float]:
        """Per region, the least bound of reaching each entering unit (forward) and of going
        on from it to the end (backward); and the span of the best chain of solved regions."""
        fwd: list[dict[str | None, float]] = [{None: 0.0}]
        for jobs in by_region:
            nxt: dict[str | None, float] = {}
            for job in jobs:
                _, a, b = job
                if a in fwd[-1]:
                    nxt[b] = min(nxt.get(b, math.inf), fwd[-1][a] + bound_of(job))
            fwd.append(nxt)
        bwd: list[dict[str | None, float]] = [{} for _ in parts]
        bwd.append(dict.fromkeys(fwd[-1], 0.0))
        for k in range(len(parts) - 1, -1, -1):
            for job in by_region[k]:
                _, a, b = job
                if b in bwd[k + 1]:
                    bwd[k][a] = min(bwd[k].get(a, math.inf), bound_of(job) + bwd[k + 1][b])
        best = chain()
        return fwd, bwd, best[0] if best is not None else math.inf

    fwd, bwd, top = compose()

    def wanted(job: Job) -> bool:
        """Not proven, and on a path of bounds below every plan known: a job whose every
        chain is bound to be slower than a known plan cannot lower the bound or the plan."""
        k, a, b = job
        through = fwd[k].get(a, math.inf) + bound_of(job) + bwd[k + 1].get(b, math.inf)
        return not is_proven(job) and through < min(upper_us, top) - _PROVEN_US

    # each region's share of the time by its size: half of it for the free solve, all of it
    # where one pair of boundary units is possible (the free solve is that pair's solve);
    # what a free solve leaves unused goes to the later ones, the other halves to the pairs
    need = [k for k in range(len(parts)) if any(wanted(j) for j in by_region[k])]
    weight = {k: len(parts[k].nodes) * (0.5 if len(by_region[k]) > 1 else 1.0) for k in need}
    stage_end = clock.now() + max(0.0, proofs_end - clock.now()) * sum(weight.values()) / max(
        1e-9, sum(len(parts[k].nodes) for k in need)
    )
    for i, k in enumerate(need):
        if not any(wanted(j) for j in by_region[k]):
            continue
        left = max(0.0, stage_end - clock.now()) * weight[k] / sum(weight[j] for j in need[i:])
        if len(by_region[k]) == 1:  # one pair of boundary units: that pair's solve
            sol = solve(*by_region[k][0], left)
        else:
            free[k] = sol = solve(k, None, None, left)
        if sol is not None:
            settle(k, sol, pinned=len(by_region[k]) == 1)
            fwd, bwd, top = compose()

    def is_free(job: Job) -> bool:
        """``job`` is its region's free solve (boundary units left to the solver)."""
        return job[1] is None and job[2] is None and len(by_region[job[0]]) > 1

    def open_free(k: int) -> bool:
        """Region ``k`` has a free solve that is not proven."""
        sol = free.get(k)
        return sol is not None and sol.span_us > sol.bound_us + _PROVEN_US

    def wanted_job(job: Job) -> bool:
        if is_free(job):
            return open_free(job[0]) and any(wanted(j) for j in by_region[job[0]])
        return wanted(job)

    def gap(job: Job) -> float:
        """How far ``job``'s bound may lie below its plan (a region's widest gap where the
        job has no plan of its own yet)."""
        f = free.get(job[0])
        if is_free(job) and f is not None:
            return max(_PROVEN_US, f.span_us - f.bound_us)
        sol = solved.get(job) or max(
            (solved[j] for j in by_region[job[0]] if j in solved),
            key=lambda sol: sol.span_us,
            default=None,
        )
        return max(_PROVEN_US, sol.span_us - bound_of(job)) if sol is not None else math.inf

    def retry(until: float, rounds: int) -> None:
        """Solve again what is not proven, the widest gaps first, until ``until``."""
        nonlocal fwd, bwd, top
        for _ in range(rounds):
            todo, tried = [], set()
            for job in pinned:  # one job per class of jobs mirrored by interchangeable units
                if open_free(job[0]):  # one search for every pair: the free solve, once more
                    job = (job[0], None, None)
                images = {(job[0], _swap(job[1], u, v), _swap(job[2], u, v)) for u, v in swaps}
                if wanted_job(job) and not images & tried:
                    todo.append(job)
                    tried.add(job)
            # the widest gaps first and with the most time: a proof needs one long search, and
            # a region far from proven holds the bound of every chain down
            todo.sort(key=gap, reverse=True)
            for i, job in enumerate(todo):
                left = until - clock.now()
                if left <= 0.01 or clock.hit_cap():
                    break
                if wanted_job(job):
                    rest = [gap(j) for j in todo[i:] if wanted_job(j)]
                    share = 1.0 / len(rest) if math.isinf(sum(rest)) else gap(job) / sum(rest)
                    if left < _MIN_SOLVE_S:
                        return  # too little left for a solve to find anything
                    # the widest gaps get a useful solve; those after them what is left
                    sol = solve(*job, max(left * share, _MIN_SOLVE_S))
                    if sol is not None:
                        if is_free(job):
                            free[job[0]] = sol
                        settle(job[0], sol, pinned=not is_free(job))
                        fwd, bwd, top = compose()
                    if clock.expired(until - 0.01):
                        return

    def last_stage() -> tuple[Any, Any, Any, dict[Job, float], bool]:
        """The best chain, its plan, its regions' simulated times, and the regions the last
        stage re-solves with their weights: how far each one's plan simulates above its span
        plus how far its span lies above its bound; and whether any simulates above."""
        first = chain()
        first_plan = assemble(parts, first[1]) if first is not None else None
        times = region_times(problem, parts, first_plan) if first_plan is not None else None
        weight: dict[Job, float] = {}
        mismatch = False
        for k, sol in enumerate(first[1] if first is not None else []):
            job = (k, sol.entry_unit, sol.exit_unit)
            if len(parts[k].nodes) >= PAIRS_UP_TO or sol.faithful:
                continue
            ticks = tick_us * (len(parts[k].nodes) + 1)  # beyond the rounding to ticks
            above = times[k] - sol.span_us if times is not None else math.inf
            mismatch = mismatch or above > ticks
            w = max(0.0, above) + max(0.0, sol.span_us - bound_of(job))
            if w > ticks:
                weight[job] = w
        return first, first_plan, times, weight, mismatch

    retry(proofs_end, 3)  # then once more for what is still unproven, with the time left
    # Time left once every pair that matters is proven: the regions of the best chain again,
    # with the pairwise parts (whose plans the simulation agrees with), from the proven bound.
    # Those whose plan simulates above its span or is not proven, most first and longest.
    # Where every region's plan simulates at its span, open proofs keep the time reserved.
    first, first_plan, times, weight, mismatch = last_stage()
    if not mismatch and not clock.expired(deadline - 0.01):
        retry(deadline, 3)
        first, first_plan, times, weight, mismatch = last_stage()
    redo = sorted(weight, key=weight.get, reverse=True)
    for i, job in enumerate(redo):
        rest = [weight[j] for j in redo[i:]]
        share = 1.0 / len(rest) if math.isinf(sum(rest)) else weight[job] / sum(rest)
        left = (deadline - clock.now()) * share
        if left < _MIN_SOLVE_S or clock.hit_cap():
            break
        # from the smaller model's plan, partitions and all: the whole model's span of it is
        # its simulated time, so the solve starts from there, not from its assignment alone
        grouped = [nodes for _, nodes in solved[job].parts]
        tips = [solved[job].assignment, *hints]
        # first that plan's placement alone, partitioned and ordered anew: a small search that
        # gives a plan the simulation agrees with (its bound is the placement's, not kept)
        t0 = clock.now()
        kept = None
        if (polish := left * _POLISH_SHARE) >= _MIN_SOLVE_S:
            kept = region(*job, polish, tips, pairs=True, grouped=grouped, units_of=tips[0])
        if kept is not None and (job not in faithful or kept.span_us < faithful[job].span_us):
            faithful[job] = kept
        left -= clock.now() - t0
        if left < _MIN_SOLVE_S:
            continue
        sol = region(*job, left, tips, pairs=True, floor_us=bound_of(job), grouped=grouped)
        if sol is not None:
            settle(job[0], sol, pinned=True)
    retry(deadline, 1)  # time the last stage left: proofs still open
    bound_us = min(compose()[0][-1].values(), default=0.0)
    if first is None or first_plan is None:
        return PlanSolution(None, "feasible", bound_us)
    plans = [first_plan]
    best_span = first[0]
    last = chain()
    if last is not None and last[0] < first[0] - _PROVEN_US:  # the retry found better plans
        plans.append(assemble(parts, last[1]))
        best_span = last[0]
    second = chain(use_faithful=True)
    if second is not None and any(s.faithful for s in second[1]):
        plans.append(assemble(parts, second[1]))
        mixed = best_per_region(parts, first[1], times, faithful) if times is not None else None
        if mixed is not None:
            plans.append(mixed)
    status = "optimal" if best_span <= bound_us + _PROVEN_US else "feasible"
    return PlanSolution(plans[0], status, bound_us, plans[1:])


def _swap(unit: str | None, u: str, v: str) -> str | None:
    return v if unit == u else u if unit == v else unit


def _swapped(sol: RegionSolution, u: str, v: str) -> RegionSolution:
    """``sol`` with units ``u`` and ``v`` exchanged."""
    return replace(
        sol,
        assignment={n: _swap(w, u, v) or w for n, w in sol.assignment.items()},
        parts=[(_swap(w, u, v) or w, list(ns)) for w, ns in sol.parts],
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
    if problem.link(u, v) != problem.link(v, u):
        return False
    if any(problem.link(u, w) != problem.link(v, w) for w in others):
        return False
    if any(problem.link(w, u) != problem.link(w, v) for w in others):
        return False
    ru, rv = problem.resources_of(u), problem.resources_of(v)
    if len(ru) != 1 or len(rv) != 1 or ru == rv:
        return False
    return all((ru <= problem.resources_of(w)) == (rv <= problem.resources_of(w)) for w in others)


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
    search workers (default: the CPU count, at least 2, at most 8; see
    :func:`partuner.plan.region_model.solve_region` for what they run).
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
        self.workers = workers or max(2, min(8, os.cpu_count() or 1))
        self.seed = seed

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        return self.solve(problem, time_limit=time_limit)

    def solve(
        self,
        problem: Problem,
        *,
        time_limit: float | None = None,
        hints: Iterable[Schedule] | None = None,
        clock: WorkClock | None = None,
        floors: Floors | None = None,
    ) -> Schedule:
        """Like :meth:`schedule`, warm-starting from ``hints`` (valid schedules) if given,
        else from every registered heuristic; ``clock`` is the caller's, if any, and
        ``floors`` the problem's :class:`~partuner.plan.floors.Floors` if it has them. The
        schedule is the plan's node layout; its ``lower_bound`` bounds every plan's predicted
        latency."""
        problem.validate()
        _cp_model()
        budget = DEFAULT_TIME_LIMIT_S if time_limit is None else max(0.0, time_limit)
        clock = WorkClock.of(clock, budget)
        deadline = clock.now() + budget
        if hints is None:
            hints = heuristic_schedules(problem, budget * 0.1).values()
        scored = sorted(
            ((plan_from_schedule(problem, h).predicted_us, k, h) for k, h in enumerate(hints)),
            key=lambda x: x[:2],
        )
        ranked = [h for _, _, h in scored]
        known = math.inf if problem.memory_limited or not scored else scored[0][0]
        sol = solve_plan(
            problem,
            time_limit=max(0.0, deadline - clock.now()),
            upper_us=known + group_slack(problem),
            hints=[h.assignment for h in ranked],
            tick_us=self.tick_us,
            workers=self.workers,
            # capacity couples the regions: a memory-limited problem is solved whole
            max_region=len(problem.nodes) if problem.memory_limited else self.region_nodes,
            seed=self.seed,
            clock=clock,
            floors=floors,
        )
        bound = lower_bound(problem, partitions=True)
        best: tuple[float, Schedule] | None = None
        bound = max(bound, sol.bound_us - group_slack(problem))
        for parts in [sol.parts, *sol.others] if sol.parts is not None else []:
            try:  # the plans of both models: the simulation decides
                merged = merge_partitions(problem, parts, deadline + 0.1 * budget, clock)
                sched, latency = schedule_of_parts(problem, merged, self.name)
                log.debug("pexact: assembled plan of %d partitions: %.1f us", len(merged), latency)
                if overflow(problem, sched.assignment) is None and (
                    best is None or latency < best[0]
                ):
                    best = (latency, sched)
            except PartunerError as exc:  # the relaxation's partitions cannot run as listed
                log.debug("pexact: assembled partitions do not run: %s", exc)
        if scored and (best is None or scored[0][0] < best[0]):
            best = (scored[0][0], scored[0][2])
        if best is None:
            raise InfeasiblePlanError(
                "no placement of the nodes fits the units' memory was found (pexact, "
                f"{budget:.3g} s); give it more time or the units more memory"
            )
        latency, sched = best
        proven = latency <= bound + _PROVEN_US and group_slack(problem) == 0
        status = "optimal" if proven else "feasible"
        return Schedule(dict(sched.slots), self.name, status, bound, sched.partitions)
