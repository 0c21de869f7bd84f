"""A plan's predicted latency from ``(unit per node, node order)``, fast, for the local searches.

The local searches (:mod:`partuner.plan.local`) judge thousands of candidates, each by
list-scheduling it (:func:`~partuner.plan.local.list_schedule`), cutting the schedule into
partitions (:func:`~partuner.plan.partitions.make_partitions`) and simulating them
(:func:`~partuner.plan.simulate.simulate`). Those functions check their input, build
dataclasses and look everything up by name. :class:`Evaluator` does the same three steps on
integer indices with every lookup (costs, transfers, resources, payloads) tabled once per
problem, and checks nothing: its callers make valid candidates. It predicts the same latency
(to rounding: sums may be taken in another order) and cuts the same partitions; the tests
compare both on random problems and candidates. The local searches keep their best candidate
as indices and build its :class:`~partuner.plan.partitions.Plan` the usual way at the end.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple

from partuner.plan.problem import Problem
from partuner.plan.simulate import corun_scales, partition_cost

__all__ = ["Evaluator", "Judged"]

_TOL = 1e-9  # as make_partitions: an input arriving later than this after a run starts


class Judged(NamedTuple):
    """What :meth:`Evaluator.judge` finds: the predicted latency (µs), the partitions (unit
    index, node indices in run order) in ``make_partitions``' order, and the schedule's node
    order (by start, end and index: ``schedule_order``)."""

    latency: float
    parts: list[tuple[int, list[int]]]
    order: list[int]


class Evaluator:
    """Predict plans of ``problem`` given as ``assign[i]`` (a unit's index in ``problem.units``
    for node ``problem.nodes[i]``) and ``order`` (node indices, topological)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        nodes, units = problem.nodes, problem.units
        self.n_nodes, self.n_units = len(nodes), len(units)
        idx = {n: i for i, n in enumerate(nodes)}
        uidx = {u: k for k, u in enumerate(units)}
        self.cost = [[problem.cost[n][u] for u in units] for n in nodes]
        rid: dict[str, int] = {}
        self.res = [
            tuple(rid.setdefault(r, len(rid)) for r in sorted(problem.resources_of(u)))
            for u in units
        ]
        self.n_res = len(rid)
        self.preds = [[idx[p] for p in problem.preds(n)] for n in nodes]
        self.succs = [[idx[s] for s in problem.succs(n)] for n in nodes]
        # comm[i][j][u][v]: the delay of node i's j-th input from unit u to unit v
        self.links = [[problem.link(u, v) for v in units] for u in units]
        self.comm = [
            [self._delays(problem.pair_nbytes(p, n)) for p in problem.preds(n)] for n in nodes
        ]
        vid: dict[object, int] = {}
        self.edges: list[tuple[int, int, tuple[tuple[int, float], ...]]] = []
        for i, e in enumerate(problem.edges):
            pay = tuple((vid.setdefault(k, len(vid)), b) for k, b in problem.payload(i).items())
            self.edges.append((idx[e.src], idx[e.dst], pay))
        self.nbytes = [{idx[s]: problem.pair_nbytes(n, s) for s in problem.succs(n)} for n in nodes]
        self.overhead = [problem.call_overhead_us.get(u, 0.0) for u in units]
        self.b_in = [problem.boundary_us_per_byte.get(u, 0.0) for u in units]
        self.b_out = [problem.boundary_out_us_per_byte.get(u, 0.0) for u in units]
        self.grouped = bool(problem.groups)
        self.corun = any(f > 1.0 for f in problem.corun.values())
        self.unit_index = uidx
        self.node_index = idx

    def _delays(self, nbytes: float) -> list[list[float]]:
        """``[u][v]``: moving ``nbytes`` from unit ``u`` to ``v`` (``Problem.comm_us``)."""
        k = self.n_units
        return [
            [0.0 if u == v else self.links[u][v].transfer_us(nbytes) for v in range(k)]
            for u in range(k)
        ]

    def latency(self, assign: Sequence[int], order: Sequence[int]) -> float:
        """The predicted latency (µs) of the plan, as ``plan_from_schedule`` predicts it."""
        return self.judge(assign, order).latency

    def judge(self, assign: Sequence[int], order: Sequence[int]) -> Judged:
        """The plan's predicted latency, its partitions and its schedule's node order."""
        start, end = self._list_schedule(assign, order)
        seq = sorted(range(self.n_nodes), key=lambda n: (start[n], end[n], n))
        parts = self._cut(assign, start, end, seq)
        return Judged(self._simulate(parts), parts, seq)

    def _list_schedule(
        self, assign: Sequence[int], order: Sequence[int]
    ) -> tuple[list[float], list[float]]:
        free = [0.0] * self.n_res
        start = [0.0] * self.n_nodes
        end = [0.0] * self.n_nodes
        cost, res, preds, comm = self.cost, self.res, self.preds, self.comm
        for n in order:
            u = assign[n]
            rs = res[u]
            t = max([free[r] for r in rs]) if rs else 0.0
            delays = comm[n]
            for j, p in enumerate(preds[n]):
                a = end[p] + delays[j][assign[p]][u]
                if a > t:
                    t = a
            start[n] = t
            e = t + cost[n][u]
            end[n] = e
            for r in rs:
                free[r] = e
        return start, end

    def _cut(
        self, assign: Sequence[int], start: list[float], end: list[float], seq: list[int]
    ) -> list[tuple[int, list[int]]]:
        """make_partitions' rules (a) to (e), on indices; ``seq``: the nodes by start, end
        and index."""
        groups, out = self._runs(assign, start, end, seq, set())
        early = self._early_reads(assign, start, end, groups)
        if early:
            groups, out = self._runs(assign, start, end, seq, early)
        indegree = [0] * len(groups)
        for targets in out:
            for h in targets:
                indegree[h] += 1
        first = [start[nodes[0]] for nodes in groups]
        unit_of = [assign[nodes[0]] for nodes in groups]
        heap = [(first[g], unit_of[g], g) for g in range(len(groups)) if indegree[g] == 0]
        heapq.heapify(heap)
        parts: list[tuple[int, list[int]]] = []
        while heap:
            g = heapq.heappop(heap)[2]
            parts.append((unit_of[g], groups[g]))
            for h in sorted(out[g]):
                indegree[h] -= 1
                if indegree[h] == 0:
                    heapq.heappush(heap, (first[h], unit_of[h], h))
        return parts

    def _runs(
        self,
        assign: Sequence[int],
        start: list[float],
        end: list[float],
        seq: list[int],
        early: set[int],
    ) -> tuple[list[list[int]], list[set[int]]]:
        """make_partitions' rules (a) to (d), closing a run also after each node of ``early``."""
        after_on_unit = [-1] * self.n_nodes
        prev: dict[int, int] = {}
        for n in seq:
            u = assign[n]
            if u in prev:
                after_on_unit[prev[u]] = n
            prev[u] = n
        group_of = [-1] * self.n_nodes
        groups: list[list[int]] = []
        out: list[set[int]] = []
        open_run: dict[int, int] = {}
        last_on: dict[int, int] = {}
        preds, succs, comm, res = self.preds, self.succs, self.comm, self.res
        for n in seq:
            u = assign[n]
            rs = res[u]
            inputs = {group_of[p] for p in preds[n]}
            g = open_run.get(u)
            if g is not None:
                run_start = start[groups[g][0]]
                limit = run_start + _TOL * max(1.0, abs(run_start))
                closed = False
                for j, p in enumerate(preds[n]):
                    pu = assign[p]
                    if pu != u and end[p] + comm[n][j][pu][u] > limit:
                        closed = True  # (a): an input arrives late
                        break
                if not closed:
                    for r in rs:
                        if last_on.get(r, g) != g:
                            closed = True  # (c): a unit sharing hardware ran since
                            break
                if closed or _reaches(out, g, inputs):
                    g = None
            if g is None:
                g = len(groups)
                groups.append([])
                out.append(set())
                for r in rs:
                    if r in last_on:
                        out[last_on[r]].add(g)
                open_run[u] = g
            for r in rs:
                last_on[r] = g
            groups[g].append(n)
            group_of[n] = g
            for q in inputs:
                if q != g:
                    out[q].add(g)
            nxt = after_on_unit[n]
            if nxt < 0:
                continue
            if n in early:
                del open_run[u]
                continue
            t = end[nxt]
            for s in succs[n]:
                if start[s] < t and assign[s] != u:
                    del open_run[u]
                    break
        return groups, out

    def _early_reads(
        self, assign: Sequence[int], start: list[float], end: list[float], groups: list[list[int]]
    ) -> set[int]:
        """make_partitions' rule (e): the nodes after which a second sweep cuts."""
        cut: set[int] = set()
        names = self.problem.nodes
        for nodes in groups:
            u, last = assign[nodes[0]], end[nodes[-1]]
            over, per_byte = self.overhead[u], self.b_in[u] + self.b_out[u]
            members: set[int] | None = None  # built for the first node that may be cut
            for k, n in enumerate(nodes[:-1]):
                rest = last - end[n]
                if rest <= over or not any(
                    assign[s] != u and start[s] < last for s in self.succs[n]
                ):
                    continue
                members = set(nodes) if members is None else members
                kept = sum(self.nbytes[n][s] for s in self.succs[n] if s in members)
                if rest > over + kept * per_byte and not (
                    self.grouped and self._fused_on(names[n], [names[m] for m in nodes[k + 1 :]])
                ):
                    cut.add(n)
        return cut

    def _fused_on(self, node: str, later: list[str]) -> bool:
        """Whether a fused group of ``node`` has a member among ``later``."""
        rest = set(later)
        return any(not rest.isdisjoint(g.nodes) for g in self.problem.groups_of(node))

    def simulate_parts(self, parts: list[tuple[int, list[int]]]) -> float:
        """:func:`~partuner.plan.simulate.simulate`'s makespan of ``parts`` (unit index, node
        indices), listed in a topological order that is also each unit's run order."""
        return self._simulate(parts)

    def _simulate(self, parts: list[tuple[int, list[int]]]) -> float:
        """simulate's makespan; the parts' list order is topological (make_partitions')."""
        part_of = [0] * self.n_nodes
        for i, (_, nodes) in enumerate(parts):
            for n in nodes:
                part_of[n] = i
        crossing: dict[tuple[int, int], dict[int, float]] = {}
        for src, dst, pay in self.edges:
            q, p = part_of[src], part_of[dst]
            if q != p:
                got = crossing.get((q, p))
                if got is None:
                    got = crossing[(q, p)] = {}
                got.update(pay)
        written: list[dict[int, float]] = [{} for _ in parts]
        reads: list[list[tuple[int, float]]] = [[] for _ in parts]
        for (q, p), vals in crossing.items():
            written[q].update(vals)
            reads[p].append((q, sum(vals.values())))
        problem = self.problem
        names = problem.nodes
        units = problem.units
        work = []
        for i, (u, nodes) in enumerate(parts):
            in_bytes = sum([nbytes for _, nbytes in reads[i]])
            out_bytes = sum(written[i].values())
            if self.grouped:
                w = partition_cost(
                    problem, units[u], [names[n] for n in nodes], in_bytes, out_bytes
                )
            else:
                w = self.overhead[u] + sum([self.cost[n][u] for n in nodes])
                w += in_bytes * self.b_in[u]
                w += out_bytes * self.b_out[u]
            work.append(w)
        start, end = self._pass(parts, reads, work)
        if self.corun:
            scale = corun_scales(problem, [units[u] for u, _ in parts], start, end)
            if scale is not None:
                work = [w * f for w, f in zip(work, scale, strict=True)]
                start, end = self._pass(parts, reads, work)
        return max(end, default=0.0)

    def _pass(
        self,
        parts: list[tuple[int, list[int]]],
        reads: list[list[tuple[int, float]]],
        work: list[float],
    ) -> tuple[list[float], list[float]]:
        """Each partition's start and end, in list order, taking ``work``."""
        last: dict[int, int] = {}
        start = [0.0] * len(parts)
        end = [0.0] * len(parts)
        links = self.links
        for i, (u, _) in enumerate(parts):
            ready = 0.0
            for q, nbytes in reads[i]:
                qu = parts[q][0]
                a = end[q] + (links[qu][u].transfer_us(nbytes) if qu != u else 0.0)
                if a > ready:
                    ready = a
            for r in self.res[u]:
                q = last.get(r)
                if q is not None and end[q] > ready:
                    ready = end[q]
                last[r] = i
            start[i] = ready
            end[i] = ready + work[i]
        return start, end


def _reaches(out: list[set[int]], g: int, targets: set[int]) -> bool:
    """Whether some group in ``targets`` descends from group ``g`` (``g`` itself excluded)."""
    if not targets or (len(targets) == 1 and g in targets):
        return False
    seen = {g}
    stack = [g]
    while stack:
        for h in out[stack.pop()]:
            if h not in seen:
                if h in targets:
                    return True
                seen.add(h)
                stack.append(h)
    return False
