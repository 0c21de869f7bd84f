"""Local search on plans: a hill climb and simulated annealing, judged by the partition simulation.

Both search over ``(unit per node, node order)``: a candidate is list-scheduled
(:func:`list_schedule`: each node, in the order, as early as its inputs and its unit allow),
cut into partitions and simulated, and its predicted latency is the judge; both steps run on
node indices (:class:`~partuner.plan.evaluate.Evaluator`, which predicts what
:func:`~partuner.plan.partitions.plan_from_schedule` does), and the best candidate becomes a
:class:`Run` the usual way at the end. Each candidate evaluated charges
:data:`~partuner.plan.clock.EVAL_S_PER_NODE` per node on the planner's
:class:`~partuner.plan.clock.WorkClock`, and random choices come from a fixed seed, so the same
problem and budget give the same plan on every run.

* :func:`improve` (first improvement) moves whole partitions, chains of nodes (branches) and
  partition-boundary nodes to other units until no move helps;
* :func:`anneal` (simulated annealing, after Kirkpatrick, Gelatt and Vecchi 1983) also moves
  single nodes and swaps neighbours in the order, and accepts a worse candidate with
  probability ``exp(-delta / T)``, the temperature falling geometrically from 2 % to 0.01 % of
  the start's latency over its budget; it returns the best plan it saw, and gives the rest of
  its budget back once a quarter of it (at least 200 steps) passed without a new best (when
  ``patient``, counted only from half of its steps on: while the temperature is high a new
  best is rare, and the gains come later).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partuner.errors import PartunerError
from partuner.plan.clock import EVAL_S_PER_NODE, WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.evaluate import Evaluator
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


def _chains(problem: Problem, ev: Evaluator) -> list[list[int]]:
    """The maximal chains of the DAG (node indices): runs of nodes each the only input of the
    next, which in turn is its only reader (a branch of a fork-join block)."""
    preds, succs = ev.preds, ev.succs
    out = []
    for n in range(ev.n_nodes):
        if len(preds[n]) == 1 and len(succs[preds[n][0]]) == 1:
            continue  # not the head of its chain
        chain = [n]
        while len(succs[chain[-1]]) == 1 and len(preds[succs[chain[-1]][0]]) == 1:
            chain.append(succs[chain[-1]][0])
        out.append(chain)
    return out


class _Search:
    """What both searches share: the evaluator, the moves' tables, the memory check, and the
    way back from indices to a :class:`Run`."""

    def __init__(self, problem: Problem, start: Run, name: str) -> None:
        self.problem, self.start, self.name = problem, start, name
        self.ev = ev = Evaluator(problem)
        self.chains = _chains(problem, ev)
        self.runnable = [
            [k for k, c in enumerate(ev.cost[n]) if math.isfinite(c)] for n in range(ev.n_nodes)
        ]
        self.pred_sets = [set(p) for p in ev.preds]
        self.limited = problem.memory_limited
        self.step_s = EVAL_S_PER_NODE * max(1, ev.n_nodes)
        uidx, idx = ev.unit_index, ev.node_index
        placed = start.schedule.assignment  # a new dict each time it is asked
        self.assign = [uidx[placed[n]] for n in problem.nodes]
        self.order = [idx[n] for n in schedule_order(problem, start.schedule)]
        self.parts = [(uidx[p.unit], [idx[n] for n in p.nodes]) for p in start.plan.partitions]
        self.t0 = time.perf_counter()

    def overfills(self, assign: Sequence[int]) -> bool:
        """Whether ``assign`` puts more on a unit than its memory holds."""
        if not self.limited:
            return False
        units, nodes = self.problem.units, self.problem.nodes
        names = {n: units[u] for n, u in zip(nodes, assign, strict=True)}
        return overflow(self.problem, names) is not None

    def run(self, assign: Sequence[int], order: Sequence[int]) -> Run:
        """The :class:`Run` of a candidate, list-scheduled and simulated by name; ``start``
        when it is not faster after all (or cannot be cut)."""
        p, units = self.problem, self.problem.units
        names = {n: units[u] for n, u in zip(p.nodes, assign, strict=True)}
        try:
            s = list_schedule(p, names, [p.nodes[i] for i in order], self.name)
            plan = plan_from_schedule(p, s)
        except PartunerError:  # not expected: the evaluator agrees with these
            return self.start
        if plan.predicted_us >= self.start.plan.predicted_us * (1 - _REL) - 1e-12:
            return self.start
        return Run(s, plan, self.start.solve_s + time.perf_counter() - self.t0)


def _moves(search: _Search, parts: list[tuple[int, list[int]]], assign: list[int]):
    """Candidate changes ``(nodes, unit)``: each partition, then each chain (a branch), to
    every other unit able to run it; then each node at a partition boundary to the unit of a
    neighbouring partition."""
    ev, runnable = search.ev, search.runnable
    part_of = [0] * ev.n_nodes
    for i, (_, nodes) in enumerate(parts):
        for n in nodes:
            part_of[n] = i
    for group in [nodes for _, nodes in parts] + search.chains:
        for w in range(ev.n_units):
            if any(assign[n] != w for n in group) and all(w in runnable[n] for n in group):
                yield group, w
    for n in range(ev.n_nodes):
        near = {part_of[m] for m in (*ev.preds[n], *ev.succs[n])} - {part_of[n]}
        for w in dict.fromkeys(parts[i][0] for i in sorted(near)):
            if w != assign[n] and w in runnable[n]:
                yield [n], w


def improve(
    problem: Problem, start: Run, deadline: float, name: str, clock: WorkClock | None = None
) -> Run:
    """Hill-climb from ``start`` by partition simulation until no move helps or ``deadline``
    passes on ``clock`` (:mod:`partuner.plan.clock`; each move evaluated costs
    :data:`~partuner.plan.clock.EVAL_S_PER_NODE` per node; none: no deadline); the result is
    never worse than ``start``.

    Each move (a partition or a chain of nodes to another unit, or a boundary node to a
    neighbouring partition's unit) is list-scheduled in the current schedule's node order and
    simulated; the first move that lowers the predicted latency is kept. Moves that would
    overfill a unit's memory are skipped.
    """
    clock = WorkClock.of(clock, math.inf)
    if len(problem.units) < 2 or not problem.nodes:
        return start
    search = _Search(problem, start, name)
    assign, order, parts = search.assign, search.order, search.parts
    best = start.plan.predicted_us
    found = False
    seen = {tuple(assign)}
    improved = True
    while improved and not clock.expired(deadline):
        improved = False
        for group, w in _moves(search, parts, assign):
            if clock.expired(deadline):
                break
            cand = list(assign)
            for n in group:
                cand[n] = w
            key = tuple(cand)
            if key in seen:
                continue
            seen.add(key)
            if search.overfills(cand):
                continue
            clock.spend(search.step_s)
            got = search.ev.judge(cand, order)
            if got.latency < best * (1 - _REL) - 1e-12:
                assign, order, parts, best = cand, got.order, got.parts, got.latency
                found = improved = True
                break
    return search.run(assign, order) if found else start


def anneal(
    problem: Problem,
    start: Run,
    budget_s: float,
    name: str,
    clock: WorkClock | None = None,
    *,
    seed: int = 0,
    patient: bool = False,
) -> Run:
    """Simulated annealing from ``start`` for ``budget_s`` budget seconds on ``clock``; the
    best plan seen (never worse than ``start``).

    Each step draws one move: a node, a chain of nodes (a branch) or a partition of the
    current plan to another unit able to run it; a partition-boundary node to a neighbouring
    partition's unit; or two neighbours in the order that do not depend on each other
    swapped (which decides what a unit runs first, and so where partitions are cut). Moves
    that overfill a unit's memory are skipped uncharged. It stops early once a quarter of its
    steps passed without a new best; ``patient``: only in the second half of its steps (for
    a last stage, which has nothing to give its budget back to).
    """
    clock = WorkClock.of(clock, budget_s)
    step_s = EVAL_S_PER_NODE * max(1, len(problem.nodes))
    steps = int(budget_s / step_s)
    if steps < 2 or len(problem.units) < 2 or len(problem.nodes) < 1:
        return start
    deadline = clock.now() + budget_s
    search = _Search(problem, start, name)
    rng = random.Random(seed)
    chains = [c for c in search.chains if len(c) > 1]
    assign, order, parts = search.assign, search.order, search.parts
    current = best = start.plan.predicted_us
    best_state: tuple[list[int], list[int]] | None = None
    hot = 0.02 * max(current, 1e-9)
    cold = 1e-4 * max(current, 1e-9)
    stall = max(200, steps // 4)  # steps without a new best before giving the budget back
    patience = steps // 2 if patient else 0  # steps before a stall counts
    last_gain = 0
    for k in range(steps):
        if clock.expired(deadline) or (k >= patience and k - max(last_gain, patience) > stall):
            break
        temp = hot * (cold / hot) ** (k / steps)
        move = _random_move(search, rng, parts, assign, order, chains)
        if move is None:
            continue
        cand, cand_order = move
        if search.overfills(cand):
            continue
        clock.spend(step_s)
        got = search.ev.judge(cand, cand_order)
        delta = got.latency - current
        if delta <= 0 or rng.random() < math.exp(-delta / temp):
            assign, order, parts, current = cand, cand_order, got.parts, got.latency
            if current < best * (1 - _REL) - 1e-12:
                best, best_state, last_gain = current, (cand, cand_order), k
    return start if best_state is None else search.run(*best_state)


def _random_move(
    search: _Search,
    rng: random.Random,
    parts: list[tuple[int, list[int]]],
    assign: list[int],
    order: list[int],
    chains: list[list[int]],
) -> tuple[list[int], list[int]] | None:
    """One random neighbour of ``(assignment, order)``, or None when the draw gave none."""
    ev, runnable = search.ev, search.runnable
    n_nodes = ev.n_nodes
    kind = rng.random()
    if kind < 0.2:  # swap two neighbours in the order
        i = rng.randrange(len(order) - 1) if len(order) > 1 else 0
        a, b = order[i], order[i + 1] if i + 1 < len(order) else order[i]
        if a == b or a in search.pred_sets[b]:
            return None
        new_order = list(order)
        new_order[i], new_order[i + 1] = b, a
        return assign, new_order
    if kind < 0.5:  # one node
        group = [rng.randrange(n_nodes)]
    elif kind < 0.65 and chains:  # a branch
        group = rng.choice(chains)
    elif kind < 0.8:  # a partition
        group = rng.choice(parts)[1]
    else:  # a node at a partition boundary to a neighbour's unit
        n = rng.randrange(n_nodes)
        near = [
            assign[m]
            for m in (*ev.preds[n], *ev.succs[n])
            if assign[m] != assign[n] and assign[m] in runnable[n]
        ]
        if not near:
            return None
        cand = list(assign)
        cand[n] = rng.choice(near)
        return cand, order
    options = [
        u
        for u in range(ev.n_units)
        if any(assign[n] != u for n in group) and all(u in runnable[n] for n in group)
    ]
    if not options:
        return None
    u = rng.choice(options)
    cand = list(assign)
    for n in group:
        cand[n] = u
    return cand, order
