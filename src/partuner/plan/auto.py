"""``auto``, the default scheduler: every other scheduler, then a partition-aware local search.

Schedulers optimise a node-level model; what a plan costs is its partition simulation
(:func:`~partuner.plan.partitions.plan_from_schedule`: call overheads, boundary costs, a
partition's outputs leaving only when it ends, fused groups). ``auto`` therefore runs every
registered scheduler (the partition-level exact one, ``pexact``, optimises that cost itself),
judges each by its plan's predicted latency, and then improves the best one by moving
partitions and boundary nodes between units, re-simulating each move.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from partuner.errors import InfeasiblePlanError, PartunerError
from partuner.plan.clock import MOVE_S_PER_NODE, WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.exact import (
    Exact,
    group_slack,
    heuristic_names,
    schedule_order,
    solver_available,
)
from partuner.plan.memory import overflow
from partuner.plan.partitions import Plan, plan_from_schedule
from partuner.plan.pexact import PartitionExact
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, get_scheduler, register
from partuner.plan.schedule import Schedule, Slot

__all__ = ["Auto", "Run", "improve", "list_schedule"]

log = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S = 10.0
_REL = 1e-9  # relative improvement a move must bring


@dataclass
class Run:
    """One scheduler's result inside ``auto``: its schedule, plan and wall time (s)."""

    schedule: Schedule
    plan: Plan
    solve_s: float


def list_schedule(
    problem: Problem, assignment: Mapping[str, str], order: Sequence[str], name: str
) -> Schedule:
    """The schedule running each node on ``assignment[node]``, taken in ``order``
    (topological), each as early as its inputs (``comm_us``) and its unit's hardware allow."""
    free: dict[str, float] = {}
    slots: dict[str, Slot] = {}
    for n in order:
        u = assignment[n]
        res = problem.resources_of(u)
        start = max((free.get(r, 0.0) for r in res), default=0.0)
        for p in problem.preds(n):
            ps = slots[p]
            start = max(start, ps.end + problem.comm_us(p, n, ps.unit, u))
        slots[n] = Slot(n, u, start, start + problem.cost[n][u])
        for r in res:
            free[r] = start + problem.cost[n][u]
    return Schedule(slots, name, "heuristic", lower_bound(problem))


def _chains(problem: Problem) -> list[list[str]]:
    """The maximal chains of the DAG: runs of nodes each the only input of the next, which
    in turn is its only reader (a branch of a fork-join block)."""
    out = []
    for n in problem.nodes:
        preds = problem.preds(n)
        if len(preds) == 1 and len(problem.succs(preds[0])) == 1:
            continue  # not the head of its chain
        chain = [n]
        while (
            len(problem.succs(chain[-1])) == 1
            and len(problem.preds(problem.succs(chain[-1])[0])) == 1
        ):
            chain.append(problem.succs(chain[-1])[0])
        out.append(chain)
    return out


def _moves(
    problem: Problem, plan: Plan, assignment: Mapping[str, str], chains: list[list[str]]
) -> list[dict[str, str]]:
    """Candidate changes: each partition, then each chain (a branch), to every other unit able
    to run it; then each node at a partition boundary to the unit of a neighbouring partition."""
    part_of = {n: i for i, p in enumerate(plan.partitions) for n in p.nodes}
    out: list[dict[str, str]] = []
    for group in [list(p.nodes) for p in plan.partitions] + chains:
        for w in problem.units:
            if any(assignment[n] != w for n in group) and all(
                math.isfinite(problem.cost[n][w]) for n in group
            ):
                out.append(dict.fromkeys(group, w))
    for n in problem.nodes:
        near = {part_of[m] for m in (*problem.preds(n), *problem.succs(n))} - {part_of[n]}
        for w in dict.fromkeys(plan.partitions[i].unit for i in sorted(near)):
            if w != assignment[n] and math.isfinite(problem.cost[n][w]):
                out.append({n: w})
    return out


def improve(
    problem: Problem, start: Run, deadline: float, name: str, clock: WorkClock | None = None
) -> Run:
    """Hill-climb from ``start`` by partition simulation until no move helps or ``deadline``
    passes on ``clock`` (:mod:`partuner.plan.clock`; each move evaluated costs
    :data:`~partuner.plan.clock.MOVE_S_PER_NODE` per node; none: no deadline); the result is
    never worse than ``start``.

    Each move (a partition or a chain of nodes to another unit, or a boundary node to a
    neighbouring partition's unit) is list-scheduled in the current schedule's node order and
    simulated; the first move that lowers the predicted latency is kept. Moves that would
    overfill a unit's memory are skipped.
    """
    t0 = time.perf_counter()
    clock = WorkClock.of(clock, math.inf)
    best = start
    assignment = dict(start.schedule.assignment)
    seen = {tuple(assignment[n] for n in problem.nodes)}
    chains = _chains(problem)
    limited = problem.memory_limited
    improved = True
    while improved and not clock.expired(deadline):
        improved = False
        order = schedule_order(problem, best.schedule)
        for move in _moves(problem, best.plan, assignment, chains):
            if clock.expired(deadline):
                break
            cand = {**assignment, **move}
            key = tuple(cand[n] for n in problem.nodes)
            if key in seen:
                continue
            seen.add(key)
            if limited and overflow(problem, cand) is not None:
                continue
            clock.spend(MOVE_S_PER_NODE * len(problem.nodes))
            s = list_schedule(problem, cand, order, name)
            plan = plan_from_schedule(problem, s)
            if plan.predicted_us < best.plan.predicted_us * (1 - _REL) - 1e-12:
                best = Run(s, plan, start.solve_s + time.perf_counter() - t0)
                assignment = cand
                improved = True
                break
    return best


@register
class Auto(Scheduler):
    """The best of every registered scheduler by predicted latency, then improved locally.

    1. Each heuristic (every registered scheduler but ``auto``, ``exact`` and ``pexact``) runs;
       its schedule is cut into partitions and simulated (``plan_from_schedule(...)``).
    2. When OR-Tools is installed: ``exact`` (node-level CP-SAT) with ``exact_share`` (10 %)
       of the remaining budget, then ``pexact`` (partition-level CP-SAT,
       :mod:`partuner.plan.pexact`) with ``pexact_share`` (90 %) of what is left, each
       warm-started from the schedules so far.
    3. From the three best plans, a hill climb (:func:`improve`) moves whole partitions, chains
       of nodes (branches) and partition-boundary nodes to other units, which also merges
       neighbouring partitions, keeping each move that lowers the re-simulated latency
       (first-improvement local search, the partition simulation as the judge), never
       past a unit's memory.

    The result is never worse than any scheduler run. ``time_limit`` (default 10 s) bounds the
    whole. ``lower_bound`` is the best bound proven on the predicted latency of any plan
    (pexact's or exact's, else :func:`~partuner.plan.common.lower_bound`), so it can exceed
    the returned schedule's node-level ``makespan``. ``status`` is ``"optimal"`` only when the
    predicted latency meets that proven bound (no fused groups): exact's node-level optimum
    alone proves nothing about the partitioned plan. Else ``"feasible"`` when the result
    comes from exact or pexact, ``"heuristic"`` otherwise.

    After :meth:`schedule`, ``runs`` holds each scheduler's :class:`Run` by name (the local
    search's as ``"<start>+local"`` when it helped), ``errors`` why the others gave none, and
    ``chosen`` the winner's name.
    """

    name = "auto"

    def __init__(
        self,
        *,
        exact_share: float = 0.1,
        pexact_share: float = 0.9,
        workers: int | None = None,
    ) -> None:
        self.exact_share = exact_share
        self.pexact_share = pexact_share
        self.workers = workers
        self.runs: dict[str, Run] = {}
        self.errors: dict[str, str] = {}
        self.chosen = ""

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        budget = DEFAULT_TIME_LIMIT_S if time_limit is None else max(0.0, time_limit)
        clock = WorkClock(budget)  # deterministic work, the wall clock only a cap
        deadline = clock.now() + budget
        self.runs = {}
        self.errors = {}
        names = heuristic_names()
        for k, name in enumerate(names):
            share = max(0.0, deadline - clock.now()) / (4 * (len(names) - k))
            self._run(problem, name, partial(get_scheduler(name).schedule, time_limit=share))
        if not self.runs:
            why = next((e for n, e in self.errors.items() if n != "single"), "")
            raise InfeasiblePlanError(
                f"no scheduler could plan {problem.name!r} (tried {names})"
                + (f": {why}" if why else "")
            )
        if solver_available():
            left = max(0.0, deadline - clock.now()) * self.exact_share
            hints = [r.schedule for r in self.runs.values()]
            exact = partial(Exact(workers=self.workers).solve, hints=hints, clock=clock)
            self._run(problem, "exact", partial(exact, time_limit=left))
            left = max(0.0, deadline - clock.now()) * self.pexact_share
            hints = [r.schedule for r in self.runs.values()]
            pexact = partial(PartitionExact(workers=self.workers).solve, hints=hints, clock=clock)
            self._run(problem, "pexact", partial(pexact, time_limit=left))
        else:
            log.info("auto: OR-Tools is not installed; skipping the exact scheduler")

        ranked = sorted(self.runs.items(), key=lambda kv: _rank(kv[1]))
        best_name, best = ranked[0]
        tried: set[tuple[str, ...]] = set()
        for name, run in ranked[:3]:
            key = tuple(run.schedule.assignment[n] for n in problem.nodes)
            if key in tried or clock.expired(deadline):
                continue
            tried.add(key)
            got = improve(problem, run, deadline, self.name, clock)
            if got is not run:
                self.runs[f"{name}+local"] = got
                if _rank(got) < _rank(best):
                    best_name, best = f"{name}+local", got

        bound = lower_bound(problem, partitions=True)
        for solver in ("exact", "pexact"):
            run = self.runs.get(solver)
            if run is not None and run.schedule.lower_bound is not None:
                bound = max(bound, run.schedule.lower_bound)
        tol = 1e-9 * max(1.0, best.plan.predicted_us)
        if best.plan.predicted_us <= bound + tol and group_slack(problem) == 0:
            status = "optimal"  # the plan meets a bound no plan can beat: a proof
        elif best_name.startswith(("exact", "pexact")):
            status = "feasible"
        else:
            status = "heuristic"
        self.chosen = best_name
        return Schedule(
            dict(best.schedule.slots), self.name, status, bound, best.schedule.partitions
        )

    def _run(self, problem: Problem, name: str, scheduler: Callable[[Problem], Schedule]) -> None:
        t0 = time.perf_counter()
        try:
            s = scheduler(problem)
            s.validate(problem)
            plan = plan_from_schedule(problem, s)
        except PartunerError as exc:  # e.g. 'single' when no unit runs every node
            log.info("auto: scheduler %r gave no plan: %s", name, exc)
            self.errors[name] = str(exc)
            return
        self.runs[name] = Run(s, plan, time.perf_counter() - t0)


def _rank(run: Run) -> tuple[float, int]:
    return (run.plan.predicted_us, len(run.plan.partitions))
