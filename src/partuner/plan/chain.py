"""Chain-shaped problems solved by dynamic programming over contiguous segments.

A problem is *chain-shaped* when it has only one topological order: every node reads from the
node before it (DenseNet, whose dense layers read every earlier layer; EfficientNet's and
MobileNet's blocks, whose squeeze-excite and identity shortcuts hold no node of their own). No
two nodes can then run at the same time, a partition is a contiguous segment of that order (a
partition's inputs all exist when it starts), and a plan is a segmentation with a unit per
segment.

:func:`segment_plan` finds, over every segmentation and choice of units, the one minimising

    sum over segments of ( partition_cost(segment, unit, bytes it reads from earlier segments,
                                          bytes it writes out for later ones)
                           + transfer from the previous segment's unit of the bytes the
                             previous segment's last node hands it )

with ``best[i][u]`` = the least such latency of nodes ``0..i`` whose last segment ends at ``i``
on ``u``, over ``O(n^2 U^2)`` transitions, in numpy a segment start at a time (every end and
unit at once: :class:`_Segments`). Each term is at most what
:func:`~partuner.plan.simulate.simulate` charges for the same plan (the segment's call overhead,
boundary bytes and node costs exactly; fused groups inside the segment counted at their full
saving; of the transfers into a segment only the bytes of the previous segment's last node,
which must cross, and none from older segments), so the minimum is a **lower bound** on every
plan's latency, and the segmentation reaching it is a plan. Simulated, that plan usually costs
exactly the bound (then it is optimal); it costs more only when values from older segments on
other units arrive late, or fused groups overlap, and then the bound still holds.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from partuner.plan.memory import overflow
from partuner.plan.problem import FusedGroup, Problem

__all__ = ["SegmentPlan", "chain_order", "segment_plan"]


@dataclass(frozen=True)
class SegmentPlan:
    """The best segmentation of a chain-shaped problem and the bound it proves."""

    parts: list[tuple[str, list[str]]]  # (unit, nodes) per segment, in order
    bound_us: float  # no plan of the problem is faster
    fits: bool  # the plan fits every unit's memory (the bound holds either way)


def chain_order(problem: Problem) -> list[str] | None:
    """The problem's only topological order when every node reads from the one before it
    (``problem.nodes`` is topological), else None."""
    nodes = problem.nodes
    for a, b in zip(nodes, nodes[1:], strict=False):
        if a not in problem.preds(b):
            return None
    return list(nodes)


class _Segments:
    """What every segment ``j..i`` of a chain costs on every unit, a start ``j`` at a time.

    :meth:`at` gives, for the segments starting at ``j`` (ends ``i = j..n-1``, rows ``i - j``),
    their partition cost per unit (call overhead + node costs + the boundary costs of the bytes
    they read from before ``j`` and write out for after ``i`` - the savings of the fused groups
    inside; ``inf`` where the unit cannot run a node), and the values made before ``j`` that they
    read: where each is made, the row of its first reader at or after ``j``, its bytes."""

    def __init__(self, problem: Problem, order: list[str]) -> None:
        self.n, self.units = len(order), problem.units
        pos = {v: i for i, v in enumerate(order)}
        got: dict[Hashable, tuple[int, float, set[int]]] = {}
        for k, e in enumerate(problem.edges):
            for key, nbytes in problem.payload(k).items():
                src, b, seen = got.get(key, (pos[e.src], nbytes, set()))
                seen.add(pos[e.dst])
                got[key] = (src, b, seen)
        vals = list(got.values())
        self.made = np.array([v[0] for v in vals], dtype=np.int64)
        self.size = np.array([v[1] for v in vals], dtype=float)
        readers = [sorted(v[2]) for v in vals]
        self.last = np.array([r[-1] for r in readers], dtype=np.int64)
        # every value's readers in one array, a value's in order; ``_next`` points at the
        # first one at or after the start last asked for (starts are asked in order)
        self._flat = np.array([p for r in readers for p in r] + [-1], dtype=np.int64)
        self._end = np.cumsum([len(r) for r in readers], dtype=np.int64)
        self._next = self._end - np.array([len(r) for r in readers], dtype=np.int64)
        self._start = 0
        costs = np.array([[problem.cost[v][u] for u in self.units] for v in order])
        self.over = np.array([problem.call_overhead_us.get(u, 0.0) for u in self.units])
        self.per_in = np.array([problem.boundary_us_per_byte.get(u, 0.0) for u in self.units])
        self.per_out = np.array([problem.boundary_out_us_per_byte.get(u, 0.0) for u in self.units])
        nu = len(self.units)
        self.lat, self.per = np.zeros((nu, nu)), np.zeros((nu, nu))
        for a, w in enumerate(self.units):
            for b, u in enumerate(self.units):
                if w != u:
                    link = problem.link(w, u)
                    self.lat[a, b], self.per[a, b] = link.latency_us, 1 / (link.gbps * 1e3)
        self.groups = [
            (first, last, np.array([max(0.0, g.saving(problem, u)) for u in self.units]))
            for first, found in _inside_savings(problem, pos).items()
            for last, g in found
        ]
        # the first position at or after each position a unit cannot run (n: none)
        self.stop = np.full((self.n + 1, nu), self.n)
        for j in range(self.n - 1, -1, -1):
            self.stop[j] = np.where(np.isfinite(costs[j]), self.stop[j + 1], j)
        finite = np.where(np.isfinite(costs), costs, 0.0)
        self.work = np.vstack([np.zeros(nu), np.cumsum(finite, 0)])

    def at(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """See the class; ``j`` must not go down from one call to the next."""
        n, m, nu = self.n, self.n - j, len(self.units)
        if j < self._start:
            raise ValueError(f"segment starts are asked in order: {j} after {self._start}")
        for _ in range(j - self._start):  # a reader passed moves its value's pointer on
            passed = (self._next < self._end) & (self._flat[self._next] < j)
            if not passed.any():
                break
            self._next += passed
        self._start = j
        first = np.where(self._next < self._end, self._flat[self._next], -1)
        early = (self.made < j) & (first >= 0)
        made, row, size = self.made[early], first[early] - j, self.size[early]
        in_bytes = np.cumsum(np.bincount(row, weights=size, minlength=m))
        late = self.made >= j  # made inside: written out while a later node reads it
        diff = np.zeros(m + 1)
        np.add.at(diff, self.made[late] - j, self.size[late])
        np.add.at(diff, self.last[late] - j, -self.size[late])
        out_bytes = np.cumsum(diff)[:m]
        saved = np.zeros((m + 1, nu))
        for first_g, last_g, saving in self.groups:
            if first_g >= j:
                saved[last_g - j] += saving
        seg = self.over + (self.work[j + 1 :] - self.work[j])
        seg = seg + in_bytes[:, None] * self.per_in + out_bytes[:, None] * self.per_out
        seg -= np.cumsum(saved, 0)[:m]
        seg[np.arange(j, n)[:, None] >= self.stop[j][None, :]] = math.inf
        return seg, made, row, size

    def moved(self, w: int, u: int, nbytes: np.ndarray) -> np.ndarray | float:
        """The transfer from unit ``w`` to ``u`` of ``nbytes`` (0 on the same unit)."""
        return 0.0 if w == u else self.lat[w, u] + nbytes * self.per[w, u]


def _inside_savings(
    problem: Problem, pos: dict[str, int]
) -> dict[int, list[tuple[int, FusedGroup]]]:
    """Per first position, the fused groups whose members are consecutive in the chain:
    ``(last position, group index)`` (a group is run whole by a segment holding them all)."""
    out: dict[int, list[tuple[int, FusedGroup]]] = {}
    for g in problem.groups:
        idx = [pos[n] for n in g.nodes]
        if idx == list(range(idx[0], idx[0] + len(idx))):
            out.setdefault(idx[0], []).append((idx[-1], g))
    return out


def segment_plan(problem: Problem) -> SegmentPlan | None:
    """The best segmentation of a chain-shaped problem and its bound, else None (not
    chain-shaped). See the module docstring for the model."""
    order = chain_order(problem)
    if order is None or not order:
        return None
    segs = _Segments(problem, order)
    n, nu = len(order), len(problem.units)
    best = np.full((n, nu), math.inf)  # nodes 0..i, the last segment ending at i on u
    back_j = np.full((n, nu), -1, dtype=np.int64)
    back_w = np.full((n, nu), -1, dtype=np.int64)
    for j in range(n):
        seg, made, row, size = segs.at(j)
        m = n - j
        if j == 0:
            best[:] = seg
            continue
        last = made == j - 1  # what the previous segment's last node hands on
        handed = np.cumsum(np.bincount(row[last], weights=size[last], minlength=m))
        zero = np.zeros(m)  # the same shape for every unit, moved or not
        for ub in range(nu):
            total = np.stack([best[j - 1, w] + segs.moved(w, ub, handed) + zero for w in range(nu)])
            w = np.argmin(total, 0)
            got = total[w, np.arange(m)] + seg[:, ub]
            better = got <= best[j:, ub]  # of equals, the later start (as counted down before)
            best[j:, ub] = np.where(better, got, best[j:, ub])
            back_j[j:, ub] = np.where(better, j, back_j[j:, ub])
            back_w[j:, ub] = np.where(better, w, back_w[j:, ub])
    ub = int(np.argmin(best[n - 1]))
    bound = float(best[n - 1, ub])
    if math.isinf(bound):
        return None
    parts: list[tuple[str, list[str]]] = []
    i = n - 1
    while True:
        j = int(back_j[i, ub]) if back_j[i, ub] >= 0 else 0
        parts.append((problem.units[ub], order[j : i + 1]))
        if j == 0:
            break
        i, ub = j - 1, int(back_w[i, ub])
    parts.reverse()
    return _plan(problem, parts, bound)


def segment_plan_whole_handoff(problem: Problem) -> SegmentPlan | None:
    """Like :func:`segment_plan`, charging each segment the transfer of **everything** it reads
    from the segment before it (one transfer: the values all leave when that partition ends),
    not only what its last node hands on: a tighter bound where a shortcut's value is made
    inside the previous segment (MobileNet's residual additions, DenseNet's concatenations).
    The state is the last segment itself (its start, end and unit): ``O(n^3 U^2)`` work, in
    numpy a start at a time (every end and every previous segment at once; the bytes read from
    each possible previous segment a two-way cumulative sum over where each value is made and
    where it is first read; its time per problem: benchmarks/anytime_bench.py). None if not
    chain-shaped."""
    order = chain_order(problem)
    if order is None or not order:
        return None
    segs = _Segments(problem, order)
    n, nu = len(order), len(problem.units)
    inf = math.inf
    best = np.full((n, n, nu), inf)  # best[j, i, u]: nodes 0..i, the last segment j..i on u
    back_k = np.full((n, n, nu), -1, dtype=np.int64)
    back_w = np.full((n, n, nu), -1, dtype=np.int64)
    for j in range(n):
        seg, made, row, size = segs.at(j)
        m = n - j
        if j == 0:
            best[0] = seg
            continue
        # moved[k, i - j]: what the segment j..i reads from a previous segment k..j-1
        grid = np.zeros((j, m))
        np.add.at(grid, (made, row), size)
        moved = np.cumsum(np.cumsum(grid, 1)[::-1], 0)[::-1]
        prev = best[:j, j - 1, :]  # (k, w)
        for ub in range(nu):
            if not np.isfinite(seg[:, ub]).any():
                continue
            top = np.full(m, inf)
            arg_k = np.full(m, -1, dtype=np.int64)
            arg_w = np.full(m, -1, dtype=np.int64)
            for w in range(nu):
                col = prev[:, w]
                if not np.isfinite(col).any():
                    continue
                total = col[:, None] + segs.moved(w, ub, moved) + np.zeros((1, m))
                k = np.argmin(total, 0)
                got = total[k, np.arange(m)]
                better = got < top
                top = np.where(better, got, top)
                arg_k = np.where(better, k, arg_k)
                arg_w = np.where(better, w, arg_w)
            ok = np.isfinite(top) & np.isfinite(seg[:, ub])
            best[j, j:, ub] = np.where(ok, top + seg[:, ub], inf)
            back_k[j, j:, ub] = np.where(ok, arg_k, -1)
            back_w[j, j:, ub] = np.where(ok, arg_w, -1)
    last = best[:, n - 1, :]
    flat = int(np.argmin(last))
    j, ub = divmod(flat, nu)
    bound = float(last[j, ub])
    if math.isinf(bound):
        return None
    parts: list[tuple[str, list[str]]] = []
    i = n - 1
    while True:
        parts.append((problem.units[ub], order[j : i + 1]))
        if j == 0:
            break
        k, w = int(back_k[j, i, ub]), int(back_w[j, i, ub])
        i, j, ub = j - 1, k, w
    parts.reverse()
    return _plan(problem, parts, bound)


def _plan(problem: Problem, parts: list[tuple[str, list[str]]], bound: float) -> SegmentPlan:
    assignment = {v: u for u, vs in parts for v in vs}
    fits = not problem.memory_limited or overflow(problem, assignment) is None
    return SegmentPlan(parts, bound, fits)
