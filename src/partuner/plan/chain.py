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
on ``u``, over ``O(n^2 U^2)`` transitions. Each term is at most what
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


def _reads(problem: Problem) -> dict[str, list[tuple[Hashable, float, str]]]:
    """Per node, the values it reads from other nodes: ``(key, bytes, producer)``."""
    out: dict[str, dict[Hashable, tuple[float, str]]] = {n: {} for n in problem.nodes}
    for k, e in enumerate(problem.edges):
        for key, nbytes in problem.payload(k).items():
            out[e.dst][key] = (nbytes, e.src)
    return {n: [(k, b, s) for k, (b, s) in d.items()] for n, d in out.items()}


def _made(
    reads: dict[str, list[tuple[Hashable, float, str]]], pos: dict[str, int]
) -> dict[int, list[tuple[float, int]]]:
    """Per position, the values its node makes for later nodes: ``(bytes, last position
    reading it)`` (a segment ending before that position writes the value out)."""
    last: dict[Hashable, tuple[float, int, int]] = {}
    for v, got in reads.items():
        for key, b, src in got:
            _, at, _ = last.get(key, (b, -1, pos[src]))
            last[key] = (b, max(at, pos[v]), pos[src])
    out: dict[int, list[tuple[float, int]]] = {}
    for b, at, src in last.values():
        out.setdefault(src, []).append((b, at))
    return out


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
    n = len(order)
    units = problem.units
    pos = {v: i for i, v in enumerate(order)}
    reads = _reads(problem)
    made_for = _made(reads, pos)
    groups = _inside_savings(problem, pos)
    inf = math.inf
    best = [dict.fromkeys(units, inf) for _ in range(n)]
    back: list[dict[str, tuple[int, str | None]]] = [{} for _ in range(n)]
    for i in range(n):
        for u in units:
            over = problem.call_overhead_us.get(u, 0.0)
            per_byte = problem.boundary_us_per_byte.get(u, 0.0)
            per_out = problem.boundary_out_us_per_byte.get(u, 0.0)
            out_bytes = 0.0  # values the segment writes out for nodes after it
            work = 0.0
            ext: set[Hashable] = set()  # values the segment reads from before it
            by_src: dict[int, tuple[float, list[Hashable]]] = {}  # ... per producer position
            in_bytes = 0.0
            saving = 0.0
            top, arg = best[i][u], back[i].get(u)
            for j in range(i, -1, -1):  # the segment order[j..i], grown at its front
                v = order[j]
                c = problem.cost[v][u]
                if math.isinf(c):
                    break
                work += c
                for key, b, src in reads[v]:
                    if key not in ext:
                        ext.add(key)
                        in_bytes += b
                        p = pos[src]
                        got, keys = by_src.get(p, (0.0, []))
                        keys.append(key)
                        by_src[p] = (got + b, keys)
                made = by_src.pop(j, None)  # values v makes are inside the segment now
                if made is not None:
                    in_bytes -= made[0]
                    ext.difference_update(made[1])
                out_bytes += sum(b for b, at in made_for.get(j, ()) if at > i)
                for last, g in groups.get(j, ()):
                    if last <= i:
                        saving += max(0.0, g.saving(problem, u))
                seg = over + work + in_bytes * per_byte + out_bytes * per_out - saving
                if j == 0:
                    if seg < top:
                        top, arg = seg, (0, None)
                    continue
                handed = by_src.get(j - 1, (0.0, []))[0]  # the previous segment's last node
                for w in units:
                    before = best[j - 1][w]
                    if before == inf:
                        continue
                    t = before + seg + problem.transfer_us(w, u, handed)
                    if t < top:
                        top, arg = t, (j, w)
            best[i][u] = top
            if arg is not None:
                back[i][u] = arg
    last_unit = min(units, key=lambda u: (best[n - 1][u], units.index(u)))
    bound = best[n - 1][last_unit]
    if math.isinf(bound):
        return None
    parts: list[tuple[str, list[str]]] = []
    i, u = n - 1, last_unit
    while True:
        j, w = back[i][u]
        parts.append((u, order[j : i + 1]))
        if w is None:
            break
        i, u = j - 1, w
    parts.reverse()
    assignment = {v: u for u, vs in parts for v in vs}
    fits = not problem.memory_limited or overflow(problem, assignment) is None
    return SegmentPlan(parts, bound, fits)


def segment_plan_whole_handoff(problem: Problem) -> SegmentPlan | None:
    """Like :func:`segment_plan`, charging each segment the transfer of **everything** it reads
    from the segment before it (one transfer: the values all leave when that partition ends),
    not only what its last node hands on: a tighter bound where a shortcut's value is made
    inside the previous segment (MobileNet's residual additions). The state is the last
    segment itself (its start, end and unit): ``O(n^3 U^2)`` work, vectorised over the
    previous segment's start; for problems of a few hundred nodes. None if not chain-shaped."""
    import numpy as np

    order = chain_order(problem)
    if order is None or not order:
        return None
    n = len(order)
    units = problem.units
    nu = len(units)
    pos = {v: i for i, v in enumerate(order)}
    reads = _reads(problem)
    made_for = _made(reads, pos)
    groups = _inside_savings(problem, pos)
    inf = math.inf
    # best[j, i, u]: the least latency of nodes 0..i whose last segment is j..i on unit u
    best = np.full((n, n, nu), inf)
    back_k = np.full((n, n, nu), -1, dtype=np.int64)
    back_w = np.full((n, n, nu), -1, dtype=np.int64)
    lat = np.zeros((nu, nu))
    per = np.zeros((nu, nu))
    for a, w in enumerate(units):
        for b, u in enumerate(units):
            if w != u:
                link = problem.link(w, u)
                lat[a, b], per[a, b] = link.latency_us, 1 / (link.gbps * 1e3)
    costs = np.array([[problem.cost[v][u] for u in units] for v in order])
    finite = np.isfinite(costs)
    over = np.array([problem.call_overhead_us.get(u, 0.0) for u in units])
    per_byte = np.array([problem.boundary_us_per_byte.get(u, 0.0) for u in units])
    per_out = np.array([problem.boundary_out_us_per_byte.get(u, 0.0) for u in units])
    for i in range(n):
        out_bytes = 0.0
        ext: set[Hashable] = set()
        by_src: dict[int, float] = {}
        made_keys: dict[int, list[Hashable]] = {}
        in_bytes = 0.0
        work = np.zeros(nu)
        saving = np.zeros(nu)
        runs = np.ones(nu, dtype=bool)
        for j in range(i, -1, -1):
            v = order[j]
            runs &= finite[j]
            if not runs.any():
                break
            work = work + np.where(runs, costs[j], 0.0)
            for key, b, src in reads[v]:
                if key not in ext:
                    ext.add(key)
                    in_bytes += b
                    p = pos[src]
                    by_src[p] = by_src.get(p, 0.0) + b
                    made_keys.setdefault(p, []).append(key)
            if j in by_src:  # values v makes are inside the segment now
                in_bytes -= by_src.pop(j)
                ext.difference_update(made_keys.pop(j))
            out_bytes += sum(b for b, at in made_for.get(j, ()) if at > i)
            for last, g in groups.get(j, ()):
                if last <= i:
                    saving = saving + np.array([max(0.0, g.saving(problem, u)) for u in units])
            seg = over + work + in_bytes * per_byte + out_bytes * per_out - saving
            seg = np.where(runs, seg, inf)
            if j == 0:
                best[0, i] = seg
                continue
            # bytes[k]: what this segment reads from a previous segment k..j-1
            b = np.zeros(j)
            for p, nbytes in by_src.items():
                if p < j:
                    b[p] = nbytes
            bytes_from = np.cumsum(b[::-1])[::-1]
            prev = best[:j, j - 1, :]  # (k, w)
            for ub in range(nu):
                if not runs[ub]:
                    continue
                moved = lat[:, ub][None, :] + bytes_from[:, None] * per[:, ub][None, :]
                moved[:, ub] = 0.0
                total = prev + moved
                flat = int(np.argmin(total))
                k, w = divmod(flat, nu)
                if total[k, w] < inf:
                    best[j, i, ub] = total[k, w] + seg[ub]
                    back_k[j, i, ub], back_w[j, i, ub] = k, w
    last = best[:, n - 1, :]
    flat = int(np.argmin(last))
    j, ub = divmod(flat, nu)
    bound = float(last[j, ub])
    if math.isinf(bound):
        return None
    parts: list[tuple[str, list[str]]] = []
    i = n - 1
    while True:
        parts.append((units[ub], order[j : i + 1]))
        if j == 0:
            break
        k, w = int(back_k[j, i, ub]), int(back_w[j, i, ub])
        i, j, ub = j - 1, k, w
    parts.reverse()
    assignment = {v: u for u, vs in parts for v in vs}
    fits = not problem.memory_limited or overflow(problem, assignment) is None
    return SegmentPlan(parts, bound, fits)
