"""Local search on plans: a hill climb and simulated annealing, judged by the partition simulation.

Both search over ``(unit per node, node order)``: a candidate is list-scheduled
(:func:`list_schedule`: each node, in the order, as early as its inputs and its unit allow),
cut into partitions and simulated (:func:`~partuner.plan.partitions.plan_from_schedule`), and
its predicted latency is the judge. Each candidate evaluated charges
:data:`~partuner.plan.clock.MOVE_S_PER_NODE` per node on the planner's
:class:`~partuner.plan.clock.WorkClock`, and random choices come from a fixed seed, so the same
problem and budget give the same plan on every run.

* :func:`improve` (first improvement) moves whole partitions, chains of nodes (branches) and
  partition-boundary nodes to other units until no move helps;
* :func:`anneal` (simulated annealing, after Kirkpatrick, Gelatt and Vecchi 1983) also moves
  single nodes and swaps neighbours in the order, and accepts a worse candidate with
  probability ``exp(-delta / T)``, the temperature falling geometrically from 2 % to 0.01 % of
  the start's latency over its budget; it returns the best plan it saw, and gives the rest of
  its budget back once a quarter of it (at least 200 steps) passed without a new best.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partuner.errors import PartunerError
from partuner.plan.clock import MOVE_S_PER_NODE, WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.exact import schedule_order
from partuner.plan.memory import overflow
from partuner.plan.partitions import Plan, plan_from_schedule
from partuner.plan.problem import Problem
from partuner.plan.schedule import Schedule, Slot

__all__ = ["Run", "anneal", "improve", "list_schedule"]

_REL = 1e-9  # relative improvement a move must bring


@dataclass
class Run:
    """One scheduler's result inside ``auto``: its schedule, plan and wall time (s)."""

    schedule: Schedule
    plan: Plan
    solve_s: float


def list_schedule(
    problem: Problem,
    assignment: Mapping[str, str],
    order: Sequence[str],
    name: str,
    bound_us: float | None = None,
) -> Schedule:
    """The schedule running each node on ``assignment[node]``, taken in ``order``
    (topological), each as early as its inputs (``comm_us``) and its unit's hardware allow;
    ``bound_us``: ``lower_bound(problem)`` when the caller has it already."""
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
    return Schedule(
        slots, name, "heuristic", lower_bound(problem) if bound_us is None else bound_us
    )


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
    node_lb, plan_lb = lower_bound(problem), lower_bound(problem, partitions=True)
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
            s = list_schedule(problem, cand, order, name, node_lb)
            plan = plan_from_schedule(problem, s, plan_bound_us=plan_lb)
            if plan.predicted_us < best.plan.predicted_us * (1 - _REL) - 1e-12:
                best = Run(s, plan, start.solve_s + time.perf_counter() - t0)
                assignment = cand
                improved = True
                break
    return best


def anneal(
    problem: Problem,
    start: Run,
    budget_s: float,
    name: str,
    clock: WorkClock | None = None,
    *,
    seed: int = 0,
) -> Run:
    """Simulated annealing from ``start`` for ``budget_s`` budget seconds on ``clock``; the
    best plan seen (never worse than ``start``).

    Each step draws one move: a node, a chain of nodes (a branch) or a partition of the
    current plan to another unit able to run it; a partition-boundary node to a neighbouring
    partition's unit; or two neighbours in the order that do not depend on each other
    swapped (which decides what a unit runs first, and so where partitions are cut). Moves
    that overfill a unit's memory are skipped uncharged.
    """
    clock = WorkClock.of(clock, budget_s)
    step_s = MOVE_S_PER_NODE * max(1, len(problem.nodes))
    steps = int(budget_s / step_s)
    if steps < 2 or len(problem.units) < 2 or len(problem.nodes) < 1:
        return start
    t0 = time.perf_counter()
    deadline = clock.now() + budget_s
    rng = random.Random(seed)
    nodes = problem.nodes
    chains = [c for c in _chains(problem) if len(c) > 1]
    runnable = {n: problem.runnable_units(n) for n in nodes}
    limited = problem.memory_limited
    assignment = dict(start.schedule.assignment)
    order = schedule_order(problem, start.schedule)
    current, best = start.plan, start
    node_lb, plan_lb = lower_bound(problem), lower_bound(problem, partitions=True)
    hot = 0.02 * max(current.predicted_us, 1e-9)
    cold = 1e-4 * max(current.predicted_us, 1e-9)
    stall = max(200, steps // 4)  # steps without a new best before giving the budget back
    last_gain = 0
    for k in range(steps):
        if clock.expired(deadline) or k - last_gain > stall:
            break
        temp = hot * (cold / hot) ** (k / steps)
        move = _random_move(problem, rng, current, assignment, order, chains, runnable)
        if move is None:
            continue
        cand, cand_order = move
        if limited and overflow(problem, cand) is not None:
            continue
        clock.spend(step_s)
        try:
            s = list_schedule(problem, cand, cand_order, name, node_lb)
            plan = plan_from_schedule(problem, s, plan_bound_us=plan_lb)
        except PartunerError:  # e.g. a partition cycle the cut could not avoid
            continue
        delta = plan.predicted_us - current.predicted_us
        if delta <= 0 or rng.random() < math.exp(-delta / temp):
            assignment, order, current = cand, cand_order, plan
            if plan.predicted_us < best.plan.predicted_us * (1 - _REL) - 1e-12:
                best = Run(s, plan, start.solve_s + time.perf_counter() - t0)
                last_gain = k
    return best


def _random_move(
    problem: Problem,
    rng: random.Random,
    plan: Plan,
    assignment: dict[str, str],
    order: list[str],
    chains: list[list[str]],
    runnable: Mapping[str, list[str]],
) -> tuple[dict[str, str], list[str]] | None:
    """One random neighbour of ``(assignment, order)``, or None when the draw gave none."""
    kind = rng.random()
    if kind < 0.2:  # swap two neighbours in the order
        i = rng.randrange(len(order) - 1) if len(order) > 1 else 0
        a, b = order[i], order[i + 1] if i + 1 < len(order) else order[i]
        if a == b or a in problem.preds(b):
            return None
        new_order = list(order)
        new_order[i], new_order[i + 1] = b, a
        return assignment, new_order
    if kind < 0.5:  # one node
        group = [rng.choice(problem.nodes)]
    elif kind < 0.65 and chains:  # a branch
        group = rng.choice(chains)
    elif kind < 0.8:  # a partition
        group = list(rng.choice(plan.partitions).nodes)
    else:  # a node at a partition boundary to a neighbour's unit
        n = rng.choice(problem.nodes)
        near = [
            assignment[m]
            for m in (*problem.preds(n), *problem.succs(n))
            if assignment[m] != assignment[n] and assignment[m] in runnable[n]
        ]
        if not near:
            return None
        return {**assignment, n: rng.choice(near)}, order
    options = [
        u
        for u in problem.units
        if any(assignment[n] != u for n in group) and all(u in runnable[n] for n in group)
    ]
    if not options:
        return None
    u = rng.choice(options)
    return {**assignment, **dict.fromkeys(group, u)}, order
