"""Branch-parallel placement: run a fork/join group's branches on different units when faster."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import product

from partuner.plan.dag_branches import ParallelGroup, parallel_groups
from partuner.plan.memory import no_fit_error, overflow, pack
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule
from partuner.plan.static import Timeline, list_schedule

__all__ = ["BranchParallel", "MAX_COMBINATIONS", "best_single_assignment"]

MAX_COMBINATIONS = 4096  # branch-to-unit assignments tried per group before going greedy


def best_single_assignment(problem: Problem) -> dict[str, str]:
    """Every node on the best single unit: the one that cannot run the fewest nodes, then has
    the smallest total cost over those it can (ties: listed first); a node it cannot run goes
    to its own cheapest unit.

    >>> from partuner.plan.problem import Problem
    >>> inf = math.inf
    >>> best_single_assignment(Problem(["a", "b"], ["u", "v"],
    ...                                {"a": {"u": 1, "v": 2}, "b": {"u": inf, "v": 2}}))
    {'a': 'v', 'b': 'v'}
    """

    def rank(u: str) -> tuple[int, float]:
        costs = [problem.cost[n][u] for n in problem.nodes]
        return sum(math.isinf(c) for c in costs), sum(c for c in costs if math.isfinite(c))

    if not problem.units:
        return {}
    best = min(problem.units, key=rank)
    return {
        n: best
        if math.isfinite(problem.cost[n][best])
        else min(problem.units, key=lambda u: problem.cost[n][u])
        for n in problem.nodes
    }


@register
class BranchParallel(Scheduler):
    """Branch-level parallelism: a branch group's branches on different units when faster.

    Each parallel branch group's branches run on different units when that beats running them
    one after another.

    The method of the branch-parallel baselines (parallel execution of the independent branches
    of a DNN, e.g. inception modules, on different processors of a heterogeneous SoC), here on
    the parallel branch groups of :func:`~partuner.plan.dag_branches.parallel_groups`.

    Every node starts on the best single unit (:func:`best_single_assignment`). Then, for each
    group, outermost first (a group inside a branch of a group already made parallel is left
    alone): try every assignment of the group's branches to units, each branch wholly on one
    unit that can run all its nodes, and evaluate the region between fork and join by list
    scheduling it alone (fork output ready at time 0 on the fork's unit; each branch's output
    moved to the join's unit). Keep the best assignment only when its region makespan is
    strictly shorter than the sequential one (every branch on the best single unit). A branch
    no single unit can run keeps its nodes' units. When a group has more than
    ``MAX_COMBINATIONS`` (4096) assignments, a greedy replaces the enumeration: branches by
    decreasing sequential cost, each given the unit that minimises the region makespan with
    the others as chosen so far.

    The final assignment is list-scheduled in topological order, each node at its earliest
    start (inputs arrived, transfers included, earliest idle gap on its unit and on units
    sharing its hardware).

    With memory capacities, a start on the best single unit that does not fit is repaired
    first (:func:`~partuner.plan.memory.pack`, keeping the nodes that fit where they are), and
    assignments of a group's branches that would overfill a unit are not tried.
    """

    name = "branch"

    def __init__(self) -> None:
        #: nodes placed by region list schedules in the last :meth:`schedule` (its work)
        self.placements = 0

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        self.placements = 0
        assign = best_single_assignment(problem)
        if overflow(problem, assign) is not None:
            fitted = pack(problem, assign)
            if fitted is None:
                raise no_fit_error(problem)
            assign = fitted
        done: set[str] = set()
        groups = sorted(parallel_groups(problem), key=lambda g: -sum(map(len, g.branches)))
        for g in groups:
            members = {n for b in g.branches for n in b}
            if members & done:
                continue
            choice, tried = _best_choice(problem, g, assign)
            self.placements += tried * len(members)
            if choice is not None:
                for branch, unit in zip(g.branches, choice, strict=True):
                    if unit is not None:
                        assign.update(dict.fromkeys(branch, unit))
                done |= members
        return list_schedule(problem, assign).schedule(self.name)


Choice = Sequence[str | None]  # per branch: its unit, or None to keep its nodes' units


def _best_choice(
    problem: Problem, g: ParallelGroup, assign: dict[str, str]
) -> tuple[Choice | None, int]:
    """The branch units that make the region fastest, or None if none beats sequential; and
    how many choices' regions were list-scheduled."""
    options: list[list[str | None]] = []
    for branch in g.branches:
        able = [u for u in problem.units if all(math.isfinite(problem.cost[n][u]) for n in branch)]
        options.append(list(able) or [None])
    fits = _memory_check(problem, g, assign)
    sequential = _region_makespan(problem, g, [None] * len(g.branches), assign)
    best: Choice | None = None
    best_time = sequential
    tried = 1
    if math.prod(len(o) for o in options) <= MAX_COMBINATIONS:
        candidates = product(*options)
    else:
        candidates = iter([_greedy(problem, g, options, assign, fits)])
        tried += sum(map(len, options))
    for choice in candidates:
        if not fits(choice):
            continue
        tried += 1
        t = _region_makespan(problem, g, choice, assign)
        if t < best_time - 1e-9 * max(1.0, best_time):
            best, best_time = choice, t
    return best, tried


def _greedy(
    problem: Problem,
    g: ParallelGroup,
    options: list[list[str | None]],
    assign: dict[str, str],
    fits: Callable[[Choice], bool],
) -> Choice:
    choice: list[str | None] = [None] * len(g.branches)
    order = sorted(
        range(len(g.branches)),
        key=lambda i: -sum(problem.cost[n][assign[n]] for n in g.branches[i]),
    )
    for i in order:
        best_t = math.inf
        for unit in options[i]:
            trial = [*choice[:i], unit, *choice[i + 1 :]]
            if not fits(trial):
                continue
            t = _region_makespan(problem, g, trial, assign)
            if t < best_t:
                best_t, choice[i] = t, unit
    return choice


def _memory_check(
    problem: Problem, g: ParallelGroup, assign: dict[str, str]
) -> Callable[[Choice], bool]:
    """A test of whether a choice of branch units keeps every unit within its memory, the nodes
    outside the group staying on their ``assign`` units (always true without capacities)."""
    if not problem.memory_limited:
        return lambda choice: True
    members = {n for b in g.branches for n in b}
    weights = dict.fromkeys(problem.units, 0)
    peak = dict.fromkeys(problem.units, 0)
    for n in problem.nodes:
        if n not in members:
            weights[assign[n]] += problem.weights(n)
            peak[assign[n]] = max(peak[assign[n]], problem.activation_bytes(n))
    sizes = [
        (sum(problem.weights(n) for n in b), max(map(problem.activation_bytes, b), default=0))
        for b in g.branches
    ]

    def fits(choice: Choice) -> bool:
        w, a = dict(weights), dict(peak)
        for branch, u, (bw, ba) in zip(g.branches, choice, sizes, strict=True):
            if u is not None:
                w[u] += bw
                a[u] = max(a[u], ba)
                continue
            for n in branch:
                w[assign[n]] += problem.weights(n)
                a[assign[n]] = max(a[assign[n]], problem.activation_bytes(n))
        return all(w[u] + a[u] <= problem.capacity(u) for u in problem.units)

    return fits


def _region_makespan(
    problem: Problem, g: ParallelGroup, choice: Choice, assign: dict[str, str]
) -> float:
    """When the join's inputs are all on the join's unit if the region starts at time 0."""
    unit = dict(assign)
    for branch, u in zip(g.branches, choice, strict=True):
        if u is not None:
            unit.update(dict.fromkeys(branch, u))
    timeline = Timeline(problem)
    if g.fork is not None:
        timeline.assume(g.fork, assign[g.fork])
    members = sorted((n for b in g.branches for n in b), key=problem.index)
    for n in members:
        timeline.place(n, unit[n])
    join_unit = assign[g.join]
    return max(
        (
            timeline.slots[n].end + problem.comm_us(n, g.join, unit[n], join_unit)
            for n in problem.preds(g.join)
            if n in timeline.slots
        ),
        default=0.0,
    )
