"""Parts of the partition-level region model (:mod:`partuner.plan.region_model`) that tie
nodes together: partitions on shared hardware taking turns, values crossing between two
partitions in one transfer, and the write-out of values read by other partitions. Each is a
relaxation of the plan simulation (:mod:`partuner.plan.simulate`); the model's docstring says
why.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from partuner.plan.problem import Problem

__all__ = ["EPS_TICKS", "ancestors", "cross_together", "take_turns", "ticks", "write_outs"]

EPS_TICKS = 1e-6


def ticks(us: float, tick: float) -> int:
    return max(0, math.floor(us / tick + EPS_TICKS))


def ancestors(problem: Problem, every: Sequence[str]) -> dict[str, set[str]]:
    """Per node of ``every`` (topological), its ancestors among ``every``."""
    inside = set(every)
    above: dict[str, set[str]] = {}
    for n in every:
        above[n] = set()
        for q in problem.preds(n):
            if q in inside:
                above[n] |= above[q] | {q}
    return above


def take_turns(
    m: Any,
    problem: Problem,
    every: Sequence[str],
    run: Mapping[str, Sequence[str]],
    x: Mapping[tuple[str, str], Any],
    ps: Mapping[str, Any],
    pe: Mapping[str, Any],
    share: Any,
) -> None:
    """Partitions on units sharing hardware do not overlap: for two nodes neither of which
    leads to the other (``every`` is topological: a partition holding two nodes of a path
    holds the path between, so the edges' constraints order the rest), either they share a
    partition or one's partition ends before the other's starts."""
    above = ancestors(problem, every)
    for i, n in enumerate(every):
        for a in every[:i]:
            if a in above[n]:
                continue
            clash = [
                (u, v)
                for u in run[a]
                for v in run[n]
                if problem.resources_of(u) & problem.resources_of(v)
            ]
            if not clash:
                continue
            b, first = share(a, n), m.new_bool_var(f"first[{a},{n}]")
            for u, v in clash:
                m.add(pe[a] <= ps[n]).only_enforce_if([first, x[a, u], x[n, v], b.Not()])
                m.add(pe[n] <= ps[a]).only_enforce_if([first.Not(), x[a, u], x[n, v], b.Not()])


def cross_together(
    m: Any,
    problem: Problem,
    every: Sequence[str],
    entry: str | None,
    run: Mapping[str, Sequence[str]],
    x: Mapping[tuple[str, str], Any],
    ps: Mapping[str, Any],
    pe: Mapping[str, Any],
    share: Any,
    tick_us: float,
) -> None:
    """Values crossing between two partitions move in one transfer: per edge ``q -> n`` from
    ``u`` to ``v``, ``n``'s partition starts after ``q``'s ends plus the transfer of the edge's
    values and of every other value whose producer shares ``q``'s partition and a reader of
    which shares ``n``'s (each value's bytes rounded down to ticks on its own)."""
    inside = set(every)
    order = {n: i for i, n in enumerate(every)}
    edges = [
        (e.src, e.dst, problem.payload(i))
        for i, e in enumerate(problem.edges)
        if e.src in inside and e.dst in inside and e.dst != entry
    ]
    values: dict[Hashable, tuple[str, float, set[str]]] = {}
    for q, n, load in edges:
        for key, nbytes in load.items():
            values.setdefault(key, (q, nbytes, set()))[2].add(n)

    def joint(a: str, c: str) -> Any:
        return share(a, c) if order[a] < order[c] else share(c, a)

    for q1, n1, load in edges:
        also: list[tuple[Any, str, set[str], float]] = []  # (crosses with it, src, readers, B)
        for key, (q2, nbytes, readers) in values.items():
            if key in load:
                continue
            with_q = [] if q2 == q1 else [joint(q1, q2)]
            if n1 in readers:
                clauses = [with_q]
            else:
                clauses = [[*with_q, joint(n1, n2)] for n2 in sorted(readers, key=order.get)]
            z = m.new_bool_var(f"with[{q1},{n1},{key}]")
            for lits in clauses:
                m.add_bool_or([z, *(b.Not() for b in lits)])
            also.append((z, q2, readers, nbytes))
        if not also:
            continue
        own = sum(load.values())
        for u in run[q1]:
            for v in run[n1]:
                if u == v:
                    continue
                link = problem.link(u, v)
                extra = [
                    (z, ticks(nbytes / (link.gbps * 1e3), tick_us))
                    for z, q2, readers, nbytes in also
                    if u in run[q2] and any(v in run[r] for r in readers)
                ]
                extra = [(z, t) for z, t in extra if t > 0]
                if extra:
                    d = ticks(problem.transfer_us(u, v, own), tick_us)
                    m.add(pe[q1] + d + sum(t * z for z, t in extra) <= ps[n1]).only_enforce_if(
                        [x[q1, u], x[n1, v]]
                    )


def write_outs(
    m: Any,
    problem: Problem,
    values: Mapping[Hashable, tuple[str, Mapping[str, float]]],
    same: Mapping[tuple[str, str], Any],
    run: Mapping[str, Sequence[str]],
    every: Sequence[str],
    tick_us: float,
) -> dict[tuple[str, str], list[tuple[Any, int]]]:
    """Per (producer, unit): ``(written, ticks)`` of each value it writes out for another
    partition, ``written`` true when some reader does not share the producer's partition (a
    partition writes each value once, at its end; the model lets the producer's unit be busy
    with it right after the producer, which moves nothing but the order within the call)."""
    out: dict[tuple[str, str], list[tuple[Any, int]]] = {(n, u): [] for n in every for u in run[n]}
    rates = problem.boundary_out_us_per_byte
    if not any(r > 0 for r in rates.values()):
        return out
    for key, (src, readers) in values.items():
        nbytes = max(readers.values(), default=0.0)
        per = {u: ticks(nbytes * rates.get(u, 0.0), tick_us) for u in run[src]}
        if not any(t > 0 for t in per.values()):
            continue
        w = m.new_bool_var(f"out[{key}]")
        for n in readers:
            m.add_bool_or([w, same[src, n]])
        for u, t in per.items():
            if t > 0:
                out[src, u].append((w, t))
    return out
