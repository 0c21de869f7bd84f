"""Simulated annealing on a plan's partitions themselves, judged by the partition simulation.

The local searches of :mod:`partuner.plan.local` search ``(unit per node, node order)`` and let
:func:`~partuner.plan.partitions.make_partitions`' rules cut the partitions; those rules cut a
unit's run wherever another unit could start early, and so cannot express a plan that keeps a
larger partition and makes the other unit wait (fewer call overheads), nor the solvers' plans
once they are changed. :func:`anneal_partitions` searches the partitions directly: a list of
``(unit, nodes)`` in a topological order, which is also each unit's run order, exactly what
:func:`~partuner.plan.simulate.simulate` predicts. Its moves keep every edge going from a
partition to itself or to a later one:

* a node, or a chain segment (a node and up to 7 of its only readers in a row), to another
  partition placed between its inputs and its readers, or to a new partition there on any unit
  able to run it all;
* a partition merged into its unit's previous one (where the inputs or readers allow);
* a partition split in two.

Each candidate is judged by :meth:`~partuner.plan.evaluate.Evaluator.simulate_parts` and
charges :data:`~partuner.plan.clock.SIM_S_PER_NODE` per node on the planner's work clock;
random choices come from a fixed seed, so the same problem and budget give the same plan.
Moves that would overfill a unit's memory are skipped uncharged.
"""

from __future__ import annotations

import math
import random
import time

from partuner.errors import PartunerError
from partuner.plan.assemble import schedule_of_parts
from partuner.plan.clock import SIM_S_PER_NODE, SIM_S_PER_PART, WorkClock
from partuner.plan.evaluate import Evaluator
from partuner.plan.local import Run
from partuner.plan.memory import overflow
from partuner.plan.partitions import plan_from_schedule
from partuner.plan.problem import Problem

__all__ = ["anneal_partitions"]

_REL = 1e-9  # relative improvement a new best must bring
_SEGMENT = 8  # the longest chain segment one move takes

Parts = list[tuple[int, list[int]]]


def anneal_partitions(
    problem: Problem,
    start: Run,
    budget_s: float,
    name: str,
    clock: WorkClock | None = None,
    *,
    seed: int = 0,
) -> Run:
    """Anneal ``start``'s partitions for ``budget_s`` budget seconds on ``clock``; the best plan
    seen, never worse than ``start``.

    The temperature falls geometrically from 0.3 % to 0.01 % of the start's latency as the
    budget is spent; the search stops early once, past half its steps (about: a step costs
    more as the partitions grow in number), a quarter of them passed without a new best.

    >>> from partuner.plan.problem import Edge, Link, Problem
    >>> from partuner.plan.single import SingleUnit
    >>> p = Problem(list("abcd"), ["u", "v"], {n: {"u": 10.0, "v": 10.0} for n in "abcd"},
    ...             [Edge(s, t, 0) for s, t in ("ab", "ac", "bd", "cd")],
    ...             default_link=Link(1.0, 1.0))
    >>> s = SingleUnit().schedule(p)
    >>> start = Run(s, plan_from_schedule(p, s), 0.0)
    >>> start.plan.predicted_us
    40.0
    >>> anneal_partitions(p, start, 0.01, "auto").plan.predicted_us  # c and d on v
    31.0
    """
    clock = WorkClock.of(clock, budget_s)
    step_s = SIM_S_PER_NODE * max(1, len(problem.nodes))
    steps = int(budget_s / (step_s + SIM_S_PER_PART * len(start.plan.partitions)))  # about
    if steps < 2 or len(problem.units) < 2 or not problem.nodes:
        return start
    ev = Evaluator(problem)
    idx, uidx = ev.node_index, ev.unit_index
    parts: Parts = [(uidx[p.unit], sorted(idx[n] for n in p.nodes)) for p in start.plan.partitions]
    part_of = {n: i for i, (_, ns) in enumerate(parts) for n in ns}
    if any(part_of[i] > part_of[s] for i in range(ev.n_nodes) for s in ev.succs[i]):
        return start  # not expected: the plan's partitions are listed in a topological order
    current = ev.simulate_parts(parts)
    if abs(current - start.plan.predicted_us) > 1e-6 * max(1.0, current):
        return start  # not expected: the plan's own simulation disagrees
    moves = _Moves(problem, ev, random.Random(seed))
    best, best_parts = current, parts
    hot, cold = 3e-3 * max(current, 1e-9), 1e-4 * max(current, 1e-9)
    began = clock.now()
    deadline = began + budget_s
    stall, patience, last_gain = max(200, steps // 4), steps // 2, 0
    t0 = time.perf_counter()
    for k in range(10 * steps):
        if clock.expired(deadline) or (k >= patience and k - max(last_gain, patience) > stall):
            break
        cand = moves.draw(parts)
        if cand is None or (problem.memory_limited and moves.overfills(cand)):
            continue
        clock.spend(step_s + SIM_S_PER_PART * len(cand))
        got = ev.simulate_parts(cand)
        temp = hot * (cold / hot) ** min(1.0, (clock.now() - began) / budget_s)
        delta = got - current
        if delta <= 0 or moves.rng.random() < math.exp(-delta / temp):
            parts, current = cand, got
            if current < best * (1 - _REL) - 1e-12:
                best, best_parts, last_gain = current, cand, k
    if best >= start.plan.predicted_us * (1 - _REL) - 1e-12:
        return start
    named = [(problem.units[u], [problem.nodes[n] for n in ns]) for u, ns in best_parts]
    try:
        sched, _ = schedule_of_parts(problem, named, name)
        sched.status = "heuristic"  # a local search's plan, as the other local searches'
        plan = plan_from_schedule(problem, sched)
    except PartunerError:  # not expected: every move keeps the partitions runnable
        return start
    if plan.predicted_us >= start.plan.predicted_us * (1 - _REL) - 1e-12:
        return start
    return Run(sched, plan, start.solve_s + time.perf_counter() - t0)


class _Moves:
    """Random valid neighbours of a partition list (module docstring)."""

    def __init__(self, problem: Problem, ev: Evaluator, rng: random.Random) -> None:
        self.problem, self.ev, self.rng = problem, ev, rng
        self.runnable = [
            frozenset(k for k, c in enumerate(ev.cost[n]) if math.isfinite(c))
            for n in range(ev.n_nodes)
        ]

    def overfills(self, parts: Parts) -> bool:
        """Whether ``parts`` put more on a unit than its memory holds."""
        units, nodes = self.problem.units, self.problem.nodes
        names = {nodes[n]: units[u] for u, ns in parts for n in ns}
        return overflow(self.problem, names) is not None

    def draw(self, parts: Parts) -> Parts | None:
        """One neighbour of ``parts``, or None when the draw gave none."""
        kind = self.rng.random()
        if kind < 0.15:
            return self._merge(parts)
        if kind < 0.3:
            return self._split(parts)
        return self._segment(parts)

    def _part_of(self, parts: Parts) -> list[int]:
        out = [0] * self.ev.n_nodes
        for i, (_, ns) in enumerate(parts):
            for n in ns:
                out[n] = i
        return out

    def _merge(self, parts: Parts) -> Parts | None:
        j = self.rng.randrange(len(parts))
        unit, moved = parts[j]
        earlier = [i for i in range(j) if parts[i][0] == unit]
        if not earlier:
            return None
        i = earlier[-1]
        part_of = self._part_of(parts)
        preds, succs = self.ev.preds, self.ev.succs
        merged = (unit, sorted(parts[i][1] + moved))
        if all(part_of[q] <= i or part_of[q] == j for n in moved for q in preds[n]):
            return [*parts[:i], merged, *parts[i + 1 : j], *parts[j + 1 :]]
        if all(part_of[s] >= j or part_of[s] == i for n in parts[i][1] for s in succs[n]):
            return [*parts[:i], *parts[i + 1 : j], merged, *parts[j + 1 :]]
        return None

    def _split(self, parts: Parts) -> Parts | None:
        j = self.rng.randrange(len(parts))
        unit, nodes = parts[j]
        if len(nodes) < 2:
            return None
        m = self.rng.randrange(1, len(nodes))  # nodes are in topological order
        return [*parts[:j], (unit, nodes[:m]), (unit, nodes[m:]), *parts[j + 1 :]]

    def _segment(self, parts: Parts) -> Parts | None:
        ev, rng = self.ev, self.rng
        preds, succs = ev.preds, ev.succs
        seg = [rng.randrange(ev.n_nodes)]
        length = 1 if rng.random() < 0.4 else rng.randint(2, _SEGMENT)
        while len(seg) < length and len(succs[seg[-1]]) == 1 and len(preds[succs[seg[-1]][0]]) == 1:
            seg.append(succs[seg[-1]][0])
        inside = set(seg)
        units = frozenset.intersection(*(self.runnable[n] for n in seg))
        rest: Parts = []
        for u, ns in parts:
            keep = [n for n in ns if n not in inside]
            if keep:
                rest.append((u, keep))
        part_of = self._part_of(rest)
        lo = max((part_of[q] for n in seg for q in preds[n] if q not in inside), default=-1)
        hi = min((part_of[s] for n in seg for s in succs[n] if s not in inside), default=len(rest))
        if hi < lo or not units:
            return None
        if rng.random() < 0.5:
            into = [j for j in range(max(lo, 0), min(hi, len(rest) - 1) + 1) if rest[j][0] in units]
            if into:
                j = rng.choice(into)
                rest[j] = (rest[j][0], sorted(rest[j][1] + seg))
                return rest
        if hi < lo + 1:
            return None
        k = rng.randint(lo + 1, hi)
        rest.insert(k, (rng.choice(sorted(units)), sorted(seg)))
        return rest
