"""Solving a large problem exactly region by region, split at its articulation nodes.

An *articulation node* ``v`` of a DAG here is one every other node is an ancestor or a
descendant of, with no edge from an ancestor to a descendant skipping over it (ResNet-style
skip connections around ``v`` disqualify it). In any schedule the ancestors end before ``v``
starts and the descendants start after ``v`` ends, and only ``v``'s output crosses, so the
problem splits exactly into the *regions* between consecutive articulation nodes (the
series-parallel / fork-join blocks of CNNs such as GoogLeNet's Inception modules).

:func:`solve_decomposed` solves each region with CP-SAT (:func:`partuner.plan.exact.solve`) once
for every pair (unit of the articulation node entering it, unit of the one leaving it), with
the entering node pinned to its unit and ending at time 0, and composes the regions by dynamic
programming over the unit holding each boundary node. Were every region solved to optimality,
the composition would be optimal; the lower bound is the same dynamic programme over the
regions' proven bounds, so it is a lower bound on the whole problem's optimum whatever the time
limit left unproven. Regions are merged greedily up to ``max_region`` nodes to save solver
calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partuner.plan.clock import CALL_S, WorkClock
from partuner.plan.exact import Instance, Solution, cut_retime, solve
from partuner.plan.problem import Problem

__all__ = ["articulation_nodes", "regions", "Region", "solve_decomposed"]

log = logging.getLogger(__name__)


def articulation_nodes(problem: Problem) -> list[str]:
    """The nodes that split ``problem`` in series, in topological order.

    A node ``v`` qualifies when every other node is its ancestor or its descendant and no edge
    goes from an ancestor straight to a descendant.

    Parameters
    ----------
    problem : Problem
        A validated problem (nodes in topological order).

    Returns
    -------
    list of str
        The articulation nodes, in ``problem.nodes`` order.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Problem
    >>> pairs = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e"), ("a", "e")]
    >>> p = Problem(list("abcde"), ["u"], {n: {"u": 1.0} for n in "abcde"},
    ...             [Edge(s, t, 0) for s, t in pairs])
    >>> articulation_nodes(p)  # the edge a -> e skips d
    ['a', 'e']
    """
    nodes = problem.nodes
    n = len(nodes)
    idx = {v: i for i, v in enumerate(nodes)}
    anc = [0] * n
    for i, v in enumerate(nodes):
        for p in problem.preds(v):
            anc[i] |= anc[idx[p]] | (1 << idx[p])
    desc = [0] * n
    for i in range(n - 1, -1, -1):
        for s in problem.succs(nodes[i]):
            desc[i] |= desc[idx[s]] | (1 << idx[s])
    cover = [0] * (n + 1)  # cover[i]: edges from before i to after i
    for e in problem.edges:
        a, b = idx[e.src], idx[e.dst]
        if b > a + 1:
            cover[a + 1] += 1
            cover[b] -= 1
    out, running = [], 0
    for i, v in enumerate(nodes):
        running += cover[i]
        if running == 0 and anc[i].bit_count() == i and desc[i].bit_count() == n - 1 - i:
            out.append(v)
    return out


@dataclass(frozen=True)
class Region:
    """Nodes between two articulation nodes: ``entry`` (before, not included; None for the
    first region) and ``exit`` (the last of ``nodes``; None for a region ending the graph)."""

    entry: str | None
    nodes: tuple[str, ...]
    exit: str | None


def regions(problem: Problem, max_region: int) -> list[Region]:
    """Split ``problem`` at articulation nodes into regions of about ``max_region`` nodes.

    Consecutive blocks are merged while the merged region stays within ``max_region`` nodes
    (a block larger than that stays whole). Without articulation nodes there is one region.
    """
    nodes = problem.nodes
    if not nodes:
        return []
    cuts_at = [problem.index(v) for v in articulation_nodes(problem)]
    chosen: list[int] = []
    last = -1
    for k, c in enumerate(cuts_at):
        nxt = cuts_at[k + 1] if k + 1 < len(cuts_at) else len(nodes) - 1
        if nxt - last > max_region:
            chosen.append(c)
            last = c
    out: list[Region] = []
    begin = 0
    for c in chosen:
        entry = nodes[begin - 1] if begin > 0 else None
        out.append(Region(entry, tuple(nodes[begin : c + 1]), nodes[c]))
        begin = c + 1
    if begin < len(nodes):
        entry = nodes[begin - 1] if begin > 0 else None
        out.append(Region(entry, tuple(nodes[begin:]), None))
    return out


def _sub_instance(whole: Instance, region: Region, a: str | None, b: str | None) -> Instance:
    """``region`` with its entry node pinned to ``a`` (a zero-length node, no release) and its
    exit pinned to ``b``."""
    names = ([region.entry] if region.entry is not None else []) + list(region.nodes)
    keep = set(names)
    dur = {n: dict(whole.dur[n]) for n in region.nodes}
    release = {n: r for n, r in whole.release.items() if n in keep and n != region.entry}
    if region.entry is not None and a is not None:
        dur[region.entry] = {a: 0.0}
    if region.exit is not None and b is not None:
        dur[region.exit] = {b: whole.dur[region.exit][b]}
    preds = {n: [p for p in whole.preds[n] if p in keep] for n in names}
    if region.entry is not None:
        preds[region.entry] = []
    return Instance(names, dur, preds, whole.delay, whole.resources, release)


def _region_hints(
    inst: Instance, hints: Sequence[tuple[Mapping[str, str], Mapping[str, int]]]
) -> list[tuple[dict[str, str], list[str]]]:
    """The whole problem's ``hints`` (an assignment, and each node's place in the hint's order)
    restricted to the region ``inst``, and one hint per unit (every node on it where it can)."""
    out = []
    for assignment, place in hints:
        a = {n: assignment[n] for n in inst.nodes}
        for n in inst.nodes:
            if a[n] not in inst.dur[n]:  # pinned elsewhere
                a[n] = next(iter(inst.dur[n]))
        o = sorted((n for n in inst.nodes if n in place), key=place.__getitem__)
        o.sort(key=lambda n: n != inst.nodes[0])  # the entry first (stable otherwise)
        out.append((a, o))
    units = {u for n in inst.nodes for u in inst.dur[n]}
    for w in sorted(units):
        a = {
            n: w if w in inst.dur[n] else min(inst.dur[n], key=inst.dur[n].__getitem__)
            for n in inst.nodes
        }
        out.append((a, list(inst.nodes)))
    return out


def solve_decomposed(
    problem: Problem,
    *,
    time_limit: float,
    hints: Sequence[tuple[Mapping[str, str], Sequence[str]]] = (),
    tick_us: float = 0.1,
    workers: int = 1,
    max_region: int = 40,
    seed: int = 0,
    clock: WorkClock | None = None,
) -> Solution:
    """Solve ``problem`` (``cut_us`` delays, as :func:`partuner.plan.exact.solve`) by regions.

    ``hints`` are ``(assignment, order)`` pairs of whole schedules, used to warm-start each
    region and as a fallback. The solution's ``status`` is ``"optimal"`` only when every region
    was solved to optimality for every pair of boundary units; ``bound_us`` is a valid lower
    bound on the whole problem's optimum in any case. ``time_limit`` is seconds of work on
    ``clock`` (:mod:`partuner.plan.clock`; a new one when None).
    """
    whole = Instance.of(problem)
    clock = WorkClock.of(clock, time_limit)
    deadline = clock.now() + max(0.0, time_limit)
    parts = regions(problem, max_region)
    jobs = [
        (k, a, b)
        for k, r in enumerate(parts)
        for a in (list(whole.dur[r.entry]) if r.entry is not None else [None])
        for b in (list(whole.dur[r.exit]) if r.exit is not None else [None])
    ]
    done: dict[tuple[int, str | None, str | None], Solution] = {}
    placed = [(a, {n: i for i, n in enumerate(o)}) for a, o in hints]  # once, not per region

    def run(job: tuple[int, str | None, str | None], limit: float) -> None:
        inst = _sub_instance(whole, parts[job[0]], job[1], job[2])
        old = done.get(job)
        extra = [(old.assignment, old.order)] if old is not None else []
        sol = solve(
            inst,
            time_limit=limit,
            hints=extra + _region_hints(inst, placed),
            tick_us=tick_us,
            workers=workers,
            seed=seed,
            clock=clock,
        )
        if old is not None:  # keep the better schedule and the better bound
            if old.makespan_us <= sol.makespan_us:
                sol = Solution(old.assignment, old.order, sol.status, sol.bound_us, old.makespan_us)
            sol.bound_us = max(sol.bound_us, old.bound_us)
        done[job] = sol

    # First pass: time in proportion to region size; then what is left goes to the unproven.
    # A share that does not pay for a solve's call (CALL_S) would buy no search at all: that
    # job takes its warm start, unproven, and the time goes to the jobs after it.
    weight = {job: len(parts[job[0]].nodes) for job in jobs}
    left_weight = sum(weight.values())
    for job in jobs:
        share = max(0.0, deadline - clock.now()) * weight[job] / max(1, left_weight)
        run(job, share if share > CALL_S else 0.0)
        left_weight -= weight[job]
    open_jobs = [job for job in jobs if done[job].status != "optimal"]
    for k, job in enumerate(open_jobs):
        left = deadline - clock.now()
        if left <= 0.01 or clock.hit_cap():
            break
        if left / (len(open_jobs) - k) > CALL_S:
            run(job, left / (len(open_jobs) - k))
    proven = all(sol.status == "optimal" for sol in done.values())

    # Dynamic programme over the unit holding each boundary node: best[u] = (time the last
    # boundary node ends on u, a lower bound on that time, the regions' solutions).
    best: dict[str | None, tuple[float, float, list[Solution]]] = {None: (0.0, 0.0, [])}
    for k in range(len(parts)):
        nxt: dict[str | None, tuple[float, float, list[Solution]]] = {}
        for (j, a, b), sol in done.items():
            if j != k or a not in best:
                continue
            t0, lb0, chain = best[a]
            t, lb = t0 + sol.makespan_us, lb0 + sol.bound_us
            have = nxt.get(b)
            if have is None:
                nxt[b] = (t, lb, [*chain, sol])
            else:
                nxt[b] = (
                    (t, min(lb, have[1]), [*chain, sol])
                    if t < have[0]
                    else (have[0], min(lb, have[1]), have[2])
                )
        best = nxt
    lb_total = min(v[1] for v in best.values())
    _, _, chain = min(best.values(), key=lambda v: v[0])
    assignment: dict[str, str] = {}
    order: list[str] = []
    for region, sol in zip(parts, chain, strict=True):
        for n in sol.order:
            if n != region.entry:
                assignment[n] = sol.assignment[n]
                order.append(n)
    span = max((e for _, e in cut_retime(whole, assignment, order).values()), default=0.0)
    status = "optimal" if proven else "feasible"
    for h_assignment, h_order in hints:  # never worse than what we were given
        h_span = max((e for _, e in cut_retime(whole, h_assignment, h_order).values()), default=0.0)
        if h_span < span:
            assignment, order, span = dict(h_assignment), list(h_order), h_span
    log.debug(
        "decomposed %d nodes into %d regions: makespan %.3f us, bound %.3f us, %s",
        len(problem.nodes),
        len(parts),
        span,
        lb_total,
        status,
    )
    return Solution(assignment, order, status, min(lb_total, span), span)
