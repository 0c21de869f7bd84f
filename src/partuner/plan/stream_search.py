"""Pipelines for the throughput objective found without a solver, and what they are made of.

A pipeline here is an assignment of nodes to units whose partitions are the runs of one unit in
the problem's topological order (:func:`interval_parts`), merged wherever no cycle forms
(:func:`merge_for_stream`). :func:`greedy_pipelines` cuts that order into stages filling each
unit in turn up to a period; :func:`balance` is the hill climb that moves work off the busiest
resource. :func:`~partuner.plan.stream_plan.plan_throughput` judges them all by their simulated
streams (docs/algorithms.md, section 10).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

from partuner.errors import InfeasiblePlanError
from partuner.plan.clock import MOVE_S_PER_NODE, WorkClock
from partuner.plan.memory import overflow
from partuner.plan.partitions import Partition
from partuner.plan.problem import Problem
from partuner.plan.simulate import partition_cost
from partuner.plan.stream import stream_loads

__all__ = [
    "MERGE_SEARCH_MAX",
    "balance",
    "busiest_load",
    "greedy_pipelines",
    "interval_parts",
    "merge_for_stream",
]

#: partitions up to which merge_for_stream searches every pair (cubic); above, only neighbours
#: in a topological order are merged (a 2000-node chain's plan took minutes)
MERGE_SEARCH_MAX = 256
#: periods tried above the least one each unit order fills (its boundary costs are left out)
_GREEDY_SLACK = (1.0, 1.05, 1.1)
#: budget seconds per node and unit of one fill (exploratory timing, AMD EPYC, 2026-11-29, the
#: zoo's models with 2-5 units: 0.65 us)
_FILL_S_PER_NODE_UNIT = 2e-6


def greedy_pipelines(problem: Problem, clock: WorkClock | None = None) -> list[dict[str, str]]:
    """Pipelines cut greedily along the problem's topological order, without a solver: for a
    period ``P``, each node stays on the unit of the stage being filled while that unit's
    hardware has work below ``P`` per frame (its call overhead counted at each new run), else
    the stage passes to the next unit in turn with room; a node the stage's unit cannot run
    goes to the unit with the most room that can, and the stage goes on after it. The least
    ``P`` that places every node (bisection) is found for three unit orders (as listed, fastest
    first, slowest first), and the assignments at it and at 5 % and 10 % more are returned
    (boundary bytes, left out here, count when the caller times them), distinct, memory
    permitting. Each fill charges :data:`_FILL_S_PER_NODE_UNIT` per node and unit on
    ``clock``.

    >>> from partuner.plan.problem import Edge, Problem
    >>> chain = Problem(list("abcd"), ["u", "v"], {n: {"u": 10.0, "v": 10.0} for n in "abcd"},
    ...                 [Edge(s, t, 0) for s, t in ("ab", "bc", "cd")])
    >>> [sorted(a.items()) for a in greedy_pipelines(chain)][0]  # two stages of 20 us
    [('a', 'u'), ('b', 'u'), ('c', 'v'), ('d', 'v')]
    """
    units, nodes = problem.units, problem.nodes
    if len(units) < 2 or not nodes:
        return []
    step = _FILL_S_PER_NODE_UNIT * len(nodes) * len(units)
    total = {
        u: math.fsum(problem.cost[n][u] for n in nodes if math.isfinite(problem.cost[n][u]))
        for u in units
    }
    able = {u: sum(math.isfinite(problem.cost[n][u]) for n in nodes) for u in units}
    fast = sorted(units, key=lambda u: (-able[u], total[u] / max(able[u], 1), units.index(u)))
    orders = list(dict.fromkeys(tuple(o) for o in (units, fast, fast[::-1])))
    hi = min((partition_cost(problem, u, nodes) for u in units), default=math.inf)
    least = math.fsum(min(problem.cost[n].values()) for n in nodes)
    hardware = len({r for u in units for r in problem.resources_of(u)})
    lo = max(least / max(hardware, 1), max(min(problem.cost[n].values()) for n in nodes))
    if not math.isfinite(hi):
        hi = math.fsum(max(c for c in problem.cost[n].values() if math.isfinite(c)) for n in nodes)
    out: list[dict[str, str]] = []
    for order in orders:
        if clock is not None:
            clock.spend(step * 24)  # the bisection's fills, and the slack's
        a, b = lo, hi
        best = _fill(problem, list(order), b)
        if best is None:
            continue
        for _ in range(20):  # the least period the greedy fill meets, to 1e-6 of hi
            mid = (a + b) / 2
            got = _fill(problem, list(order), mid)
            if got is None:
                a = mid
            else:
                b, best = mid, got
            if b - a <= 1e-6 * hi:
                break
        for slack in _GREEDY_SLACK:
            got = best if slack == 1.0 else _fill(problem, list(order), b * slack)
            if got is not None and got not in out and overflow(problem, got) is None:
                out.append(got)
    return out


def _fill(problem: Problem, order: list[str], period: float) -> dict[str, str] | None:
    """:func:`greedy_pipelines`' fill for one period; None when some node finds no room."""
    load: dict[str, float] = {}
    assign: dict[str, str] = {}
    prev: str | None = None  # the unit of the node before, in the topological order
    stage = 0

    def cost_of(u: str, n: str) -> float:  # a new run pays the unit's call overhead
        over = problem.call_overhead_us.get(u, 0.0) if u != prev else 0.0
        return problem.cost[n][u] + over

    def room(u: str, n: str) -> float:
        used = max((load.get(r, 0.0) for r in problem.resources_of(u)), default=0.0)
        return period - used - cost_of(u, n)

    for n in problem.nodes:
        u = order[stage]
        if not math.isfinite(problem.cost[n][u]):  # the stage's unit cannot: the most room
            pick = max(order, key=lambda w: (room(w, n), -order.index(w)))
            if room(pick, n) < 0:
                return None
        elif room(u, n) >= 0:
            pick = u
        else:  # the stage is full: the next unit in turn with room
            ahead = [order[(stage + k) % len(order)] for k in range(1, len(order))]
            found = next((w for w in ahead if room(w, n) >= 0), None)
            if found is None:
                return None
            pick, stage = found, order.index(found)
        extra = cost_of(pick, n)
        for r in problem.resources_of(pick):
            load[r] = load.get(r, 0.0) + extra
        assign[n] = prev = pick
    return assign


def merge_for_stream(problem: Problem, parts: Sequence[Partition]) -> list[Partition]:
    """``parts`` with partitions of one unit merged wherever the merge forms no cycle between
    partitions (each frame pays every call's overhead and boundary bytes, so fewer calls
    stream faster), in a topological order, named ``p0, p1, ...``.

    >>> p = Problem(["a", "b", "c"], ["u", "v"], {n: {"u": 1.0, "v": 1.0} for n in "abc"},
    ...             edges=[])
    >>> got = merge_for_stream(p, [Partition("p0", "u", ("a",)), Partition("p1", "v", ("b",)),
    ...                            Partition("p2", "u", ("c",))])
    >>> [(q.unit, q.nodes) for q in got]
    [('u', ('a', 'c')), ('v', ('b',))]
    """
    groups = [(p.unit, sorted(p.nodes, key=problem.index)) for p in parts]
    if len(groups) > MERGE_SEARCH_MAX:  # the pairwise search is cubic: neighbours only
        groups = _topological(problem, groups)
        runs: list[tuple[str, list[str]]] = []
        for u, ns in groups:  # neighbours in a topological order: no path between them
            if runs and runs[-1][0] == u:
                runs[-1] = (u, sorted(runs[-1][1] + ns, key=problem.index))
            else:
                runs.append((u, ns))
        groups = runs
    while len(groups) <= MERGE_SEARCH_MAX:
        groups = _topological(problem, groups)
        succ: list[set[int]] = [set() for _ in groups]
        for a, b in _crossing_edges(problem, groups):
            succ[a].add(b)
        reach = [0] * len(groups)  # bitset of the groups each reaches
        for i in range(len(groups) - 1, -1, -1):
            for s in succ[i]:
                reach[i] |= reach[s] | (1 << s)
        pair = None
        for i, (u, _) in enumerate(groups):
            via = 0  # what i reaches through each successor, less the direct edges
            for s in succ[i]:
                via |= reach[s]
            for j in range(i + 1, len(groups)):
                if groups[j][0] == u and not (via >> j) & 1:
                    pair = (i, j)
                    break
            if pair:
                break
        if pair is None:
            break
        i, j = pair
        merged = sorted(groups[i][1] + groups[j][1], key=problem.index)
        groups[i] = (groups[i][0], merged)
        del groups[j]
    return [Partition(f"p{k}", u, tuple(ns)) for k, (u, ns) in enumerate(groups)]


def _crossing_edges(problem: Problem, groups: list[tuple[str, list[str]]]) -> list[tuple[int, int]]:
    """``(a, b)`` for every edge from group ``a`` to another group ``b``."""
    where = {n: i for i, (_, ns) in enumerate(groups) for n in ns}
    pairs = ((where[e.src], where[e.dst]) for e in problem.edges)
    return [(a, b) for a, b in pairs if a != b]


def _topological(problem: Problem, groups: list[tuple[str, list[str]]]) -> list:
    """``groups`` in a topological order of their data, the earliest first node first."""
    after: list[set[int]] = [set() for _ in groups]
    for a, b in _crossing_edges(problem, groups):
        after[b].add(a)
    first = [min(problem.index(n) for n in ns) for _, ns in groups]
    before = [len(a) for a in after]
    then: list[list[int]] = [[] for _ in groups]
    for b, a_s in enumerate(after):
        for a in a_s:
            then[a].append(b)
    ready = [(first[i], i) for i in range(len(groups)) if before[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(groups[k])
        for b in then[k]:
            before[b] -= 1
            if before[b] == 0:
                heapq.heappush(ready, (first[b], b))
    if len(out) < len(groups):  # not from a plan's partitions, which never form a cycle
        raise InfeasiblePlanError("the partitions depend on each other in a cycle")
    return out


def interval_parts(problem: Problem, assignment: Mapping[str, str]) -> list[Partition]:
    """The runs of one unit in the problem's topological order, as partitions."""
    parts: list[tuple[str, list[str]]] = []
    for n in problem.nodes:
        u = assignment[n]
        if parts and parts[-1][0] == u:
            parts[-1][1].append(n)
        else:
            parts.append((u, [n]))
    return [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(parts)]


def busiest_load(problem: Problem, assignment: Mapping[str, str]) -> tuple[float, float]:
    """(the busiest resource's work per frame, all work per frame) of ``assignment`` as
    merged runs of the topological order."""
    parts = merge_for_stream(problem, interval_parts(problem, assignment))
    loads = stream_loads(problem, parts)
    return max(loads.values(), default=0.0), sum(loads.values())


def balance(
    problem: Problem, start: Mapping[str, str], clock: WorkClock, deadline: float
) -> dict[str, str] | None:
    """A hill climb on the assignment: move a node of the busiest resource's units, or a
    whole run of them, to another unit while the busiest resource's work per frame falls
    (ties: all the work); None when nothing improved. Deterministic: moves in node order."""
    cur = dict(start)
    score = busiest_load(problem, cur)
    first = score
    step = MOVE_S_PER_NODE * len(problem.nodes) * 4  # each move: partitions, merges, loads
    improved = True
    while improved and not clock.expired(deadline):
        improved = False
        loads = stream_loads(problem, merge_for_stream(problem, interval_parts(problem, cur)))
        top = max(loads, key=loads.__getitem__)
        hot = [u for u in problem.units if top in problem.resources_of(u)]
        runs: list[list[str]] = []
        for n in problem.nodes:
            if cur[n] in hot:
                if (
                    runs
                    and cur[runs[-1][-1]] == cur[n]
                    and problem.index(runs[-1][-1]) == problem.index(n) - 1
                ):
                    runs[-1].append(n)
                else:
                    runs.append([n])
        # the first and last 1, 2, 4, ... nodes of each run (halving steps towards a balanced
        # cut), then each node next to another unit's, then whole runs
        ends = []
        for run in runs:
            size = 1
            while size < len(run):
                ends += [run[:size], run[-size:]]
                size *= 2
        edge = [
            [n]
            for n in problem.nodes
            if cur[n] in hot
            and any(cur[m] != cur[n] for m in (*problem.preds(n), *problem.succs(n)))
        ]
        moves = ends + edge + runs
        moves = list({tuple(m): m for m in moves}.values())
        for nodes in moves:
            for v in problem.units:
                if v in hot or any(not math.isfinite(problem.cost[n][v]) for n in nodes):
                    continue
                cand = dict(cur)
                cand.update(dict.fromkeys(nodes, v))
                clock.spend(step)
                if overflow(problem, cand) is not None:
                    continue
                got = busiest_load(problem, cand)
                if got[0] < score[0] * (1 - 1e-9) or (
                    got[0] <= score[0] * (1 + 1e-12) and got[1] < score[1] * (1 - 1e-9)
                ):
                    cur, score, improved = cand, got, True
                    break
                if clock.expired(deadline):
                    break
            if improved or clock.expired(deadline):
                break
    return cur if score < first else None
