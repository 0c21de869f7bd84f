"""Cheap bounds on every plan's latency, block by block: paths and loads, without a solver.

A problem splits exactly at its articulation nodes (:mod:`partuner.plan.decompose`) into
*blocks*: a block's nodes all descend from the node entering it and lead to the node leaving
it, so a plan's latency is the sum over blocks of each block's *span* (the end of the leaving
node less the end of the entering one), and a bound on every block's span for every pair of
units (entering, leaving) composes, by dynamic programming over the unit holding each
articulation node, into a bound on the whole. :func:`block_floor` bounds one block's span; the
bound is the least ``T`` meeting two necessary conditions:

* **paths**: a node ``v`` on unit ``u`` lies on a path from the entering node to the leaving one;
  ``head[v][u]`` (the earliest ``v`` can end on ``u``) plus ``tail[v][u]`` (the least time from
  there to the block's end) is at most ``T``. Both are longest-path recurrences over the block,
  each edge between two units charged :meth:`~partuner.plan.problem.Problem.cut_us` (the
  transfer, and the reader's new partition: its call overhead and boundary cost), no edge within
  a unit charged. A node may therefore only run on the units it *reaches in time*;
* **loads**: for a set ``S`` of units (each single unit, each all-but-one, and all of them), the
  nodes that reach in time only units of ``S`` need at least their least cost there on ``S``'s
  hardware, which has ``T`` per resource (a unit other than the entering one that must run a
  node also pays one call overhead).

Both conditions only grow easier with ``T``, and for ``T`` between two consecutive path values
the units each node reaches are fixed, so the least ``T`` is found by bisection over the sorted
path values.

Where a block enters and leaves on one unit (*home*), a plan either runs it all there (its
costs in a row) or hands some node elsewhere; then home takes a result back in a partition of
its own, and works beside the other units only in yet another one (the partition that takes the
result back waits for it; the one the others wait for ends before they start). So either home's
time and the others' add up (only nodes that reach another unit in time may leave), or home
starts two partitions inside the block (two call overheads, and the bytes of the smallest edges
it can write out and read back): the bound is the least of the three cases, and never below the
paths-and-loads bound. In these two cases a node placed off a unit that alone can run one of
its neighbours also charges that unit's boundary cost for the neighbour (its read of the node's
output; the write-out of a predecessor whose one reader the node is): these are the node's own
values, so no two nodes' charges count one value; each case takes the larger of this and the
smallest-edges charge, never both. Conv-only NPUs beside a CPU whose calls and boundaries are
dear are where this counts: without it, a handed-off convolution looked free to the CPU.

Fused groups are counted at their full saving on every member; memory limits are ignored (a
relaxation: both keep the bound valid). These bounds are weak where branches really
run in parallel and strong where links are slow or units few, where the solvers' relaxations
are weak too (a transfer in a CP-SAT model is an optional delay its LP can ignore).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from partuner.plan.decompose import Region, articulation_nodes
from partuner.plan.problem import Problem

__all__ = ["Floors", "block_floor", "floor_bound"]

_REL = 1e-9  # float noise kept off every bound


def _unit_sets(problem: Problem) -> list[tuple[frozenset[str], int]]:
    """The sets of units whose loads are checked, with the hardware each set has."""
    units = problem.units
    sets = {frozenset(units)}
    for u in units:
        sets.add(frozenset({u}))
        if len(units) > 2:
            sets.add(frozenset(units) - {u})
    return [
        (s, len({r for u in s for r in problem.resources_of(u)}))
        for s in sorted(sets, key=lambda s: (len(s), sorted(s)))
    ]


def _least_costs(problem: Problem) -> dict[str, dict[str, float]]:
    """Each node's cost per unit less the largest saving of a fused group it is in there."""
    out: dict[str, dict[str, float]] = {}
    for n in problem.nodes:
        row = dict(problem.cost[n])
        for g in problem.groups_of(n):
            for u in problem.units:
                row[u] = max(0.0, min(row[u], problem.cost[n][u] - g.saving(problem, u)))
        out[n] = row
    return out


def block_floor(
    problem: Problem,
    block: Region,
    entry_unit: str | None,
    exit_unit: str | None,
    *,
    costs: dict[str, dict[str, float]] | None = None,
    unit_sets: Sequence[tuple[frozenset[str], int]] | None = None,
) -> float:
    """A bound on ``block``'s span in every plan with its entering node on ``entry_unit`` and
    its leaving node on ``exit_unit`` (see the module docstring); ``math.inf`` when no plan
    has them there.

    Parameters
    ----------
    problem : Problem
        A validated problem.
    block : Region
        Nodes between two consecutive articulation nodes (``entry`` None: the graph's start;
        ``exit`` None: its end). Every node must descend from ``entry``; reads from older
        nodes are taken as free.
    entry_unit, exit_unit : str or None
        The units of ``block.entry`` and ``block.exit`` (None where those are None).

    Returns
    -------
    float
        µs; no plan spans less.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Link, Problem
    >>> def fork_join(latency_us):  # a -> (b, c) -> d, 10 µs each on either unit
    ...     pairs = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    ...     return Problem(list("abcd"), ["u", "v"], {n: {"u": 10.0, "v": 10.0} for n in "abcd"},
    ...                    [Edge(s, t, 0) for s, t in pairs], default_link=Link(latency_us, 1.0))
    >>> block = Region("a", ("b", "c", "d"), "d")
    >>> round(block_floor(fork_join(30.0), block, "u", "u"), 6)  # c on v: 2 crossings of 30 µs
    30.0
    >>> round(block_floor(fork_join(1.0), block, "u", "u"), 6)  # b beside c: 10 + 1 + 10 + 1
    22.0
    """
    cost = costs if costs is not None else _least_costs(problem)
    sets = unit_sets if unit_sets is not None else _unit_sets(problem)
    units = problem.units
    inf = math.inf
    nodes = sorted(block.nodes, key=problem.index)
    inside = set(nodes)
    over = problem.call_overhead_us

    width = {u: len(problem.resources_of(u)) for u in units}
    # cut_us(src, dst, w, u) = fixed[w][u] + bytes * per_byte[w][u] (0 within a unit)
    fixed = {w: {u: 0.0 for u in units} for w in units}
    per_byte = {w: {u: 0.0 for u in units} for w in units}
    for w in units:
        for u in units:
            if w != u:
                link = problem.link(w, u)
                fixed[w][u] = link.latency_us + over.get(u, 0.0)
                per_byte[w][u] = 1 / (link.gbps * 1e3) + problem.boundary_us_per_byte.get(u, 0.0)

    head: dict[str, dict[str, float]] = {}
    for v in nodes:
        row: dict[str, float] = {}
        preds = problem.preds(v)
        # (producer's finishing times per unit, bytes) for each value read inside the block
        ins = [(head[p], problem.pair_nbytes(p, v)) for p in preds if p in inside]
        entry_bytes = (
            problem.pair_nbytes(block.entry, v)
            if entry_unit is not None and block.entry in preds
            else None
        )
        for u in units:
            c = cost[v][u]
            if math.isinf(c):
                row[u] = inf
                continue
            start = over.get(u, 0.0) if block.entry is None and not preds else 0.0
            for hp, nb in ins:
                arrive = min(
                    hp[w] + (fixed[w][u] + nb * per_byte[w][u] if w != u else 0.0) for w in units
                )
                start = max(start, arrive)
            if entry_bytes is not None and entry_unit != u:
                w = entry_unit
                start = max(start, fixed[w][u] + entry_bytes * per_byte[w][u])
            row[u] = start + c
        head[v] = row

    tail: dict[str, dict[str, float]] = {}
    for v in reversed(nodes):
        row = {}
        outs = [
            (tail[s], cost[s], problem.pair_nbytes(v, s)) for s in problem.succs(v) if s in inside
        ]
        for u in units:
            if math.isinf(cost[v][u]):
                row[u] = inf
            elif v == block.exit:
                row[u] = 0.0 if u == exit_unit else inf
            else:
                t = 0.0
                for ts, cs, nb in outs:
                    t = max(
                        t,
                        min(
                            (fixed[u][w] + nb * per_byte[u][w] if w != u else 0.0) + cs[w] + ts[w]
                            for w in units
                        ),
                    )
                row[u] = t
        tail[v] = row

    through = {v: {u: head[v][u] + tail[v][u] for u in units} for v in nodes}
    if not nodes:
        return 0.0
    least = max(min(through[v].values()) for v in nodes)
    if math.isinf(least):
        return inf
    values = sorted({t for row in through.values() for t in row.values() if least <= t < inf})

    bit = {u: 1 << i for i, u in enumerate(units)}
    masks = [(sum(bit[u] for u in su), hardware) for su, hardware in sets]
    single = {bit[u]: u for u in units}

    home_bit = bit[entry_unit] if entry_unit is not None else 0
    others = len(units) - 1
    side: dict[str, dict[str, float]] = {}  # filled below where a case uses it

    def needed(t: float, extra: float = 0.0, apart: bool = False, sides: bool = False) -> float:
        """The least span the loads allow when each node may use the units it reaches by
        ``t``, ``extra`` µs more falling on ``entry_unit``; with ``apart``, also when that
        unit's time and the other units' add up (their share spread over them); with
        ``sides``, each node off a unit that must run its neighbour adds that unit's boundary
        cost for them."""
        tol = t * _REL + 1e-9
        reach: list[tuple[int, list[str]]] = []  # per node: the units it reaches
        serial = extra
        for v in nodes:
            row = through[v]
            got = [u for u in units if row[u] <= t + tol]
            reach.append((sum(bit[u] for u in got), got))
            if apart:
                home_side = side[v].get(entry_unit, 0.0) if sides else 0.0  # type: ignore[arg-type]
                serial += min(
                    (
                        cost[v][u] if u == entry_unit else cost[v][u] / others + home_side
                        for u in got
                    ),
                    default=inf,
                )
        need = max(t, serial) if apart else t
        for s_mask, hardware in masks:
            load = 0.0
            for v, (mask, got) in zip(nodes, reach, strict=True):
                if not sides or not side[v]:
                    if mask & ~s_mask == 0:
                        load += min((cost[v][u] * width[u] for u in got), default=inf)
                    continue
                load += min(
                    (
                        (cost[v][u] * width[u] if bit[u] & s_mask else 0.0)
                        + sum(
                            c * width[w] for w, c in side[v].items() if w != u and bit[w] & s_mask
                        )
                        for u in got
                    ),
                    default=inf,
                )
            u1 = single.get(s_mask)
            if load > 0 and u1 is not None and u1 != entry_unit:
                load += over.get(u1, 0.0) * width[u1]
            if s_mask & home_bit:
                load += extra * width[entry_unit]  # type: ignore[index]
            need = max(need, load / hardware)
        return need

    def least(extra: float, apart: bool = False, sides: bool = False) -> float:
        # the first path value t_i whose loads fit below the next one: in [t_i, t_i+1)
        lo, hi = 0, len(values) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if needed(values[mid], extra, apart, sides) < values[mid + 1]:
                hi = mid
            else:
                lo = mid + 1
        return needed(values[lo], extra, apart, sides)

    if entry_unit is None or entry_unit != exit_unit or not others:
        return least(0.0) * (1 - _REL)
    # Entering and leaving on one unit, ``home``: the block runs there whole (its costs there
    # in a row), or a node runs elsewhere. Then, inside the block's span, home writes out what
    # leaves it (at the end of a partition holding the entering node or a later one) and takes
    # a result back in a new partition C (the entering node's partition cannot wait for it).
    # Either no partition of home overlaps the other units' work (then home's time and theirs
    # add up), or one does: it is neither C nor a partition the other units wait for, so home
    # starts two new partitions in the span.
    home = entry_unit
    alone = math.fsum(cost[v][home] for v in nodes)
    elsewhere = {v for v in nodes if any(math.isfinite(cost[v][u]) for u in units if u != home)}
    on_home = {v for v in nodes if math.isfinite(cost[v][home])} | {block.entry}
    leave = [problem.pair_nbytes(p, v) for v in elsewhere for p in problem.preds(v) if p in on_home]
    back = [
        problem.pair_nbytes(p, v)
        for v in on_home - {block.entry}
        for p in problem.preds(v)
        if p in elsewhere
    ]
    moved = problem.boundary_us_per_byte.get(home, 0.0) * min(
        back, default=0.0
    ) + problem.boundary_out_us_per_byte.get(home, 0.0) * min(leave, default=0.0)
    call = over.get(home, 0.0)
    paths = least(0.0)  # holds in every case
    if paths >= alone:
        return paths * (1 - _REL)
    side.update(_forced_boundaries(problem, nodes, inside, block.entry, entry_unit))
    charged = any(side.values())

    def case(extra: float, apart: bool) -> float:
        # the smallest edges' boundary costs may be the very ones a node's own charge
        # counts: take the larger of the two bounds, never both charges
        got = least(extra + moved, apart=apart)
        if charged and got < alone:
            got = max(got, least(extra, apart=apart, sides=True))
        return got

    beside = case(2 * call, apart=False)
    apart = case(call, apart=True) if beside > paths else paths
    return max(paths, min(alone, apart, beside)) * (1 - _REL)


def _forced_boundaries(
    problem: Problem,
    nodes: Sequence[str],
    inside: set[str],
    entry: str | None,
    entry_unit: str | None,
) -> dict[str, dict[str, float]]:
    """Per node ``v`` of a block, per unit ``w`` that must run a neighbour of ``v``: the
    boundary cost ``w`` pays whenever ``v`` runs elsewhere. ``w`` then reads ``v``'s output
    (its largest read by a successor only ``w`` runs; ``v``'s own values, so no other node's
    charge counts them), and writes out the output of a predecessor only ``w`` runs (the
    entering node counts as run by ``entry_unit``) whose one reader is ``v``. Both fall
    inside the block's span: the reader and ``v`` are in the block, the writer ends after
    the entering node does."""

    def only(n: str) -> str | None:
        if n == entry:
            return entry_unit
        runs = problem.runnable_units(n)
        return runs[0] if len(runs) == 1 else None

    out: dict[str, dict[str, float]] = {}
    for v in nodes:
        row: dict[str, float] = {}
        reads: dict[str, float] = {}
        for s in problem.succs(v):
            w = only(s) if s in inside else None
            if w is not None:
                reads[w] = max(reads.get(w, 0.0), problem.pair_nbytes(v, s))
        for w, nb in reads.items():
            row[w] = row.get(w, 0.0) + nb * problem.boundary_us_per_byte.get(w, 0.0)
        for p in problem.preds(v):
            w = only(p) if p in inside or p == entry else None
            if w is not None and problem.succs(p) == [v]:
                rate = problem.boundary_out_us_per_byte.get(w, 0.0)
                row[w] = row.get(w, 0.0) + problem.pair_nbytes(p, v) * rate
        out[v] = {w: c for w, c in row.items() if c > 0}
    return out


class Floors:
    """:func:`block_floor` for every block of ``problem``, composed over stretches of blocks.

    Parameters
    ----------
    problem : Problem
        A validated problem.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Problem
    >>> p = Problem(["a", "b", "c"], ["u", "v"], {"a": {"u": 1.0, "v": 5.0},
    ...             "b": {"u": 5.0, "v": 1.0}, "c": {"u": 1.0, "v": 5.0}},
    ...             [Edge("a", "b", 0), Edge("b", "c", 0)])
    >>> round(Floors(p).whole(), 6)  # a chain: 1 + 1 + 1 (transfers free here)
    3.0
    """

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self._cuts = set(articulation_nodes(problem))
        self._costs = _least_costs(problem)
        self._sets = _unit_sets(problem)
        self._memo: dict[tuple[Region, str | None, str | None], float] = {}

    def blocks(self, region: Region) -> list[Region]:
        """``region`` split at the articulation nodes inside it."""
        out: list[Region] = []
        entry, begin = region.entry, 0
        nodes = sorted(region.nodes, key=self.problem.index)
        for i, v in enumerate(nodes):
            if i == len(nodes) - 1 or v in self._cuts:
                last = region.exit if i == len(nodes) - 1 else v
                out.append(Region(entry, tuple(nodes[begin : i + 1]), last))
                entry, begin = v, i + 1
        return out

    def _floor(self, block: Region, a: str | None, b: str | None) -> float:
        key = (block, a, b)
        if key not in self._memo:
            self._memo[key] = block_floor(
                self.problem, block, a, b, costs=self._costs, unit_sets=self._sets
            )
        return self._memo[key]

    def of(self, region: Region, entry_unit: str | None, exit_unit: str | None) -> float:
        """A bound on ``region``'s span with its entering and leaving nodes on these units:
        its blocks' floors composed over the units of the articulation nodes between them."""
        blocks = self.blocks(region)
        if not blocks:
            return 0.0
        best: dict[str | None, float] = {entry_unit: 0.0}
        for k, block in enumerate(blocks):
            last = k == len(blocks) - 1
            outs: list[str | None]
            if block.exit is None:
                outs = [None]
            elif last:
                outs = [exit_unit]
            else:
                outs = list(self.problem.runnable_units(block.exit))
            nxt: dict[str | None, float] = {}
            for b in outs:
                got = min(
                    (t + self._floor(block, a, b) for a, t in best.items()),
                    default=math.inf,
                )
                if got < math.inf:
                    nxt[b] = got
            best = nxt
            if not best:
                return math.inf
        return min(best.values())

    def whole(self) -> float:
        """A bound on every plan's predicted latency."""
        nodes = tuple(self.problem.nodes)
        if not nodes:
            return 0.0
        got = self.of(Region(None, nodes, None), None, None)
        return 0.0 if math.isinf(got) else got


def floor_bound(problem: Problem) -> float:
    """:meth:`Floors.whole`: a bound on every plan's predicted latency (µs), from paths and
    loads block by block."""
    return Floors(problem).whole()
