"""The partition-level CP-SAT model of one region, the heart of :mod:`partuner.plan.pexact`.

What a plan costs is its partition simulation (:mod:`partuner.plan.simulate`): a partition
starts when all its inputs have arrived, pays its unit's call overhead and the boundary cost of
every value it reads from another partition (same unit or not), and its outputs leave only when
it ends. The node-level model of :mod:`partuner.plan.exact` lets two units trade single nodes at
the price of one transfer, so its bound sits far below what partitions can reach. This model
adds, per node ``n`` (integer ticks, costs and delays rounded down as in ``exact``):

* ``PS[n]``, ``PE[n]``: the start and end of the partition holding ``n``; ``n`` starts after
  ``PS[n]`` plus its unit's call overhead and ends by ``PE[n]``;
* per edge ``q -> n`` a boolean *same partition*: then same unit and equal ``PS``/``PE``; else
  ``PS[n] >= PE[q]`` plus the transfer when the units differ (outputs leave at the end, a
  partition waits for all its inputs);
* per value and consumer, a boolean *charged*: the consumer's unit is busy for the boundary
  cost of that value just before it, unless the producer or an earlier consumer of the value
  shares its partition (each value is paid once per partition that reads it);
* per value read by another partition, a boolean *written*: the producer's partition writes
  it out once (the unit's cost per byte written out), at its end; the model puts that busy time
  right after the producer (``e[n]`` includes it), which changes only the order of work within
  the call, not when the call ends; the entering partition's write-outs keep its unit busy,
  and its end, that long after the region's origin;
* one ``NoOverlap`` per hardware resource over each node's busy interval (boundary cost +
  cost + write-outs), and the span at least each resource's total cost (implied once nodes
  are ordered, stated outright so that the search proves as it places nodes); minimise the
  latest partition end;
* in regions of up to :data:`PAIRS_UP_TO` nodes, per pair of nodes neither of which leads to
  the other, a boolean *same partition* and, for units sharing hardware, partitions that take
  turns: one ends (``PE``) before the other starts (``PS``). This also makes a call's
  overhead busy time, as it lies between ``PS`` and the partition's first node;
* in such regions, per edge, the transfer of its values and of every other value whose
  producer shares its producer's partition and a reader of which shares its reader's (a
  transfer carries every value crossing between two partitions: its time grows with their
  bytes together).

From any plan's simulated run one reads off an assignment of these variables (partition
start/end, each partition's overhead and boundary costs first, then its nodes) that meets
every constraint with the same latency (each call's write-outs moved to just after the nodes
that produce them), less the savings of fused groups it runs whole. The
model rounds each value's transfer down to ticks on its own, and in larger regions lets
partitions interleave, counts a call's overhead only as a delay and each value's transfer
alone, so it is a relaxation: its proven bound, less the total possible group saving, is a
lower bound on the predicted latency of every plan. Where the pairwise parts apply, the model
and the simulation agree closely (``benchmarks/region_model_bench.py``: Inception-v3's regions
with a modeled NPU, within the rounding to ticks), so its plans are the simulation's plans.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partuner.plan.clock import WorkClock
from partuner.plan.decompose import Region
from partuner.plan.exact import _cp_model
from partuner.plan.problem import Problem
from partuner.plan.region_parts import (
    EPS_TICKS,
    ancestors,
    cross_together,
    take_turns,
    ticks,
    write_outs,
)

__all__ = ["PAIRS_UP_TO", "RegionSolution", "TICK_US", "one_unit_bound", "solve_region"]

TICK_US = 0.1
PAIRS_UP_TO = 40  # nodes in a region up to which pairs of nodes and edges are modeled
_TIE_SHARE = 0.2  # of a region's time, at most, for breaking ties once its span is proven
# CP-SAT's full searches for these models, best first (see _solver)
_FULL_SEARCHES = ("no_lp", "max_lp", "quick_restart_no_lp", "default_lp")


@dataclass
class RegionSolution:
    """The best plan found for one region and what is proven about it.

    ``parts`` lists ``(unit, nodes)`` per partition, nodes in run order, partitions by start;
    the one holding ``entry`` (when it continues into the region) lists ``entry`` first.
    ``span_us`` is the relaxation's span of that plan, ``bound_us`` a proven lower bound on the
    span of any plan of the region (both µs); ``status`` ``"optimal"`` when they meet.
    ``faithful``: the model's pairwise parts applied (see the module docstring), so the span
    is the simulated one up to rounding.
    """

    assignment: dict[str, str]
    parts: list[tuple[str, list[str]]]
    status: str
    bound_us: float
    span_us: float
    entry_unit: str | None = None
    exit_unit: str | None = None
    faithful: bool = False


def solve_region(
    problem: Problem,
    region: Region,
    *,
    entry_unit: str | None = None,
    exit_unit: str | None = None,
    time_limit: float,
    hints: Iterable[Mapping[str, str]] = (),
    mirrored: Sequence[Sequence[str]] = (),
    tick_us: float = TICK_US,
    workers: int = 1,
    seed: int = 0,
    pairs: bool = True,
    floor_us: float = 0.0,
    grouped: Sequence[Sequence[str]] = (),
    units_of: Mapping[str, str] | None = None,
    clock: WorkClock | None = None,
    prove: bool = False,
) -> RegionSolution | None:
    """Solve the partition-level model of ``region`` (see :func:`partuner.plan.decompose.regions`):
    its entry node (if any) ends at time 0 on ``entry_unit``, its exit on ``exit_unit`` (either
    unit left to the solver when None). ``hints`` are assignments to warm-start from, the best
    first. ``mirrored`` are classes of interchangeable units
    (:func:`partuner.plan.pexact.interchangeable`): every plan has a mirror image that uses a
    class's units not pinned here in their listed order (by the first node on each), so the
    model asks for that order (and hints are mirrored to it). ``pairs`` False leaves the
    pairwise parts out (a smaller relaxation, often proven sooner); ``floor_us``, a proven
    bound on the span (from that smaller model), helps the solver prove; ``grouped``, the
    partitions of the first hint (lists of nodes), warm-starts which nodes share one.
    ``units_of`` fixes the unit of the nodes it names (mirrored like the hints): the solve then
    only partitions and orders that placement, and its bound holds for it alone. ``prove``:
    search for the bound first (CP-SAT's objective lower-bound search), for a region whose
    plan the hints hold already and whose proof is open. None when the
    solver found no plan in time (then nothing is proven). ``time_limit`` is seconds of work on
    ``clock`` (:mod:`partuner.plan.clock`; a new one when None)."""
    cp_model = _cp_model()
    clock = WorkClock.of(clock, time_limit)
    m = cp_model.CpModel()
    entry = region.entry
    nodes = list(region.nodes)
    run = {n: problem.runnable_units(n) for n in nodes}
    if region.exit is not None and exit_unit is not None:
        run[region.exit] = [exit_unit]
    overhead = {u: ticks(problem.call_overhead_us.get(u, 0.0), tick_us) for u in problem.units}
    every = nodes
    origin = 0
    if entry is not None:
        run[entry] = [entry_unit] if entry_unit is not None else problem.runnable_units(entry)
        every = [entry, *nodes]
    if entry is not None:
        origin = max(overhead[u] for u in run[entry]) + 1  # room for the entering partition
    horizon = origin + sum(max(ticks(problem.cost[n][u], tick_us) for u in run[n]) for n in nodes)
    horizon += sum(
        ticks(_worst_cut(problem, p, n), tick_us) for n in nodes for p in problem.preds(n)
    )
    horizon += max(overhead.values(), default=0) * (len(nodes) + 1) + 1

    def var(name: str) -> dict[str, Any]:
        return {n: m.new_int_var(0, horizon, f"{name}[{n}]") for n in every}

    s, e, busy, ps, pe = var("s"), var("e"), var("busy"), var("PS"), var("PE")
    x = {(n, u): m.new_bool_var(f"x[{n},{u}]") for n in every for u in run[n]}
    for n in every:
        m.add_exactly_one(x[n, u] for u in run[n])
        m.add(e[n] <= pe[n])
    fixed = {entry_unit, exit_unit}
    in_turn = [[u for u in group if u not in fixed] for group in mirrored]
    for group in in_turn:
        for u, v in zip(group, group[1:], strict=False):  # v's first node after u's
            seen: list[Any] = []
            for n in every:
                if (n, v) in x:
                    m.add_bool_or([x[n, v].Not(), *seen])
                if (n, u) in x:
                    seen.append(x[n, u])
    if units_of is not None:
        for n, u in _in_order(units_of, every, in_turn).items():
            if (n, u) in x:
                m.add(x[n, u] == 1)
    if entry is not None:
        m.add(s[entry] == origin)
        m.add(e[entry] == origin)
        for u in run[entry]:
            m.add(ps[entry] + overhead[u] <= origin).only_enforce_if(x[entry, u])

    def together(b: Any, a: str, c: str) -> None:
        """``b`` => ``a`` and ``c`` share a unit and a partition."""
        for u in run[c]:
            if u in run[a]:
                m.add_bool_or([b.Not(), x[c, u].Not(), x[a, u]])
            else:
                m.add_bool_or([b.Not(), x[c, u].Not()])
        m.add(ps[a] == ps[c]).only_enforce_if(b)
        m.add(pe[a] == pe[c]).only_enforce_if(b)

    inside = set(every)
    values: dict[Hashable, tuple[str, dict[str, float]]] = {}
    same: dict[tuple[str, str], Any] = {}
    for i, edge in enumerate(problem.edges):
        if edge.src not in inside or edge.dst not in inside or edge.dst == entry:
            continue
        for key, nbytes in problem.payload(i).items():
            values.setdefault(key, (edge.src, {}))[1][edge.dst] = nbytes
        q, n = edge.src, edge.dst
        if (q, n) in same:
            continue
        b = same[q, n] = m.new_bool_var(f"same[{q},{n}]")
        together(b, q, n)
        m.add(s[n] >= e[q])
        m.add(ps[n] >= pe[q]).only_enforce_if(b.Not())
        nbytes = problem.pair_nbytes(q, n)
        for u in run[q]:
            for v in run[n]:
                d = ticks(problem.transfer_us(u, v, nbytes), tick_us) if u != v else 0
                if d > 0:
                    m.add(ps[n] >= pe[q] + d).only_enforce_if([b.Not(), x[q, u], x[n, v]])

    faithful = pairs and len(every) <= PAIRS_UP_TO
    above = ancestors(problem, every) if faithful else {}
    sibling: dict[tuple[str, str], Any] = {}

    def share(a: str, c: str) -> Any:
        """The "same partition" boolean of two nodes (earlier first). With the pairwise parts
        it is exact: for an ancestor ``a`` of ``c`` in another partition, ``c``'s starts after
        ``a``'s ends (whatever path leads from one to the other leaves ``a``'s partition at its
        end), and nodes of one unit neither of which leads to the other take turns
        (:func:`_take_turns`); so two nodes of one partition cannot pose as two partitions."""
        if (a, c) in same:
            return same[a, c]
        if (a, c) not in sibling:
            b = sibling[a, c] = m.new_bool_var(f"sib[{a},{c}]")
            together(b, a, c)
            if a in above.get(c, ()):
                m.add(ps[c] >= pe[a]).only_enforce_if(b.Not())
        return sibling[a, c]

    charges: dict[str, list[tuple[Any, float]]] = {n: [] for n in every}
    for key, (src, readers) in values.items():
        ordered = sorted(readers, key=problem.index)
        for k, n in enumerate(ordered):
            earlier = [share(a, n) for a in ordered[:k]]
            paid = m.new_bool_var(f"paid[{key},{n}]")
            m.add_bool_or([paid, same[src, n], *earlier])
            charges[n].append((paid, readers[n]))

    written = write_outs(m, problem, values, same, run, every, tick_us)
    if entry is not None:  # the entering partition writes out at its end, inside the region
        for u in run[entry]:
            w = sum(t * b for b, t in written[entry, u])
            if not written[entry, u]:
                continue
            m.add(pe[entry] >= origin + w).only_enforce_if(x[entry, u])
            mine = set(problem.resources_of(u))
            for n in nodes:
                for v in run[n]:
                    if mine & set(problem.resources_of(v)):
                        m.add(busy[n] >= origin + w).only_enforce_if([x[entry, u], x[n, v]])
    if faithful:
        take_turns(m, problem, every, run, x, ps, pe, share)
        cross_together(m, problem, every, entry, run, x, ps, pe, share, tick_us)
    on_resource: dict[str, list[Any]] = {}
    for n in nodes:
        for u in run[n]:
            d = ticks(problem.cost[n][u], tick_us)
            d = d + sum(t * b for b, t in written.get((n, u), ()))  # its writes, right after it
            m.add(e[n] == s[n] + d).only_enforce_if(x[n, u])
            m.add(busy[n] >= ps[n] + overhead[u]).only_enforce_if(x[n, u])
            rate = problem.boundary_us_per_byte.get(u, 0.0)
            paid = [(b, ticks(nb * rate, tick_us)) for b, nb in charges[n]]
            m.add(busy[n] + sum(t * b for b, t in paid if t > 0) <= s[n]).only_enforce_if(x[n, u])
            size = m.new_int_var(0, horizon, f"size[{n},{u}]")
            iv = m.new_optional_interval_var(busy[n], size, e[n], x[n, u], f"iv[{n},{u}]")
            for r in problem.resources_of(u):
                on_resource.setdefault(r, []).append(iv)
    for ivs in on_resource.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    if problem.memory_limited:
        _add_capacity(m, problem, nodes, x)
    span = m.new_int_var(0, horizon, "span")
    _add_loads(m, problem, region, x, span, tick_us)
    if region.exit is not None:
        m.add(span >= e[region.exit] - origin)
    else:
        for n in nodes:
            if not any(c in inside for c in problem.succs(n)):
                m.add(span >= pe[n] - origin)
    m.add(span >= math.floor(floor_us / tick_us + 1e-3))  # bounds come ceiled less noise
    m.minimize(span)
    hint = next(iter(hints), None)  # the best first
    if hint is not None:
        hint = _in_order(hint, every, in_turn)
    if hint is not None:
        for (n, u), b in x.items():
            if n in hint:
                m.add_hint(b, hint[n] == u)
        if grouped:  # and its partitions: which nodes share one
            group = {n: i for i, members in enumerate(grouped) for n in members}
            for (a, c), b in (*same.items(), *sibling.items()):
                if a in group and c in group:
                    m.add_hint(b, group[a] == group[c])

    solver = _solver(cp_model, time_limit, workers, seed, clock)
    solver.parameters.use_objective_lb_search = prove
    t0 = clock.now()
    code = clock.solve(solver, m)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    slack = len(every) * 4 * EPS_TICKS * tick_us  # float noise the rounding tolerated
    bound = solver.objective_value if code == cp_model.OPTIMAL else solver.best_objective_bound
    bound_us = max(0.0, math.ceil(bound - 1e-6) * tick_us - slack)
    best = round(solver.objective_value)
    # Among plans of the proven span, prefer those that call fewer partitions (each call costs
    # more in a real run than in the profile; in large regions the model does not count a
    # call's overhead as busy time at all): spend some of what is left on fewer cut edges.
    left = min(time_limit - (clock.now() - t0), time_limit * _TIE_SHARE)
    if code == cp_model.OPTIMAL and left > 0.01 and same and not clock.hit_cap():
        m.clear_hints()
        for var in (*x.values(), *same.values(), span):
            m.add_hint(var, solver.value(var))
        m.add(span <= best)
        m.minimize(sum(b.Not() for b in same.values()))
        tie = _solver(cp_model, left, workers, seed, clock)
        if clock.solve(tie, m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            solver = tie
            best = solver.value(span)
    assignment = {n: next(u for u in run[n] if solver.boolean_value(x[n, u])) for n in every}
    groups: dict[tuple[str, int, int], list[str]] = {}
    for n in every:
        groups.setdefault((assignment[n], solver.value(ps[n]), solver.value(pe[n])), []).append(n)
    parts = []
    for (u, _, _), members in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        members.sort(key=lambda n: (n != entry, solver.value(s[n]), problem.index(n)))
        parts.append((u, members))
    entered = assignment.pop(entry) if entry is not None else None
    return RegionSolution(
        assignment=assignment,
        parts=parts,
        status="optimal" if code == cp_model.OPTIMAL else "feasible",
        bound_us=min(bound_us, best * tick_us),
        span_us=best * tick_us,
        entry_unit=entered,
        exit_unit=assignment[region.exit] if region.exit is not None else None,
        faithful=faithful,
    )


def _solver(
    cp_model: Any, time_limit: float, workers: int, seed: int, clock: WorkClock | None = None
) -> Any:
    """A CP-SAT solver for these models. Their proofs come from search, not from the LP
    relaxation: CP-SAT's default portfolio rarely moves the bound of an Inception-v3 block
    before its search without LP (``no_lp``) exhausts the tree, and on few cores its LP workers
    take that search's time (docs/algorithms.md). So the full searches are :data:`_FULL_SEARCHES`
    in that order, as many as ``workers`` allow with one worker kept for CP-SAT's neighbourhood
    search."""
    solver = WorkClock.of(clock, time_limit).solver(cp_model, time_limit, workers, seed)
    if workers <= 1:
        solver.parameters.linearization_level = 0
    else:
        solver.parameters.subsolvers.extend(_FULL_SEARCHES[: max(1, workers - 1)])
    return solver


def _in_order(
    assignment: Mapping[str, str], every: Sequence[str], ordered: Sequence[Sequence[str]]
) -> dict[str, str]:
    """``assignment`` with each class of interchangeable units renamed so that their first
    nodes come in the class's order."""
    out = dict(assignment)
    for group in ordered:
        first = list(dict.fromkeys(out[n] for n in every if out.get(n) in group))
        rename = dict(zip([*first, *(u for u in group if u not in first)], group, strict=True))
        out = {n: rename.get(u, u) for n, u in out.items()}
    return out


def _add_loads(
    m: Any,
    problem: Problem,
    region: Region,
    x: Mapping[tuple[str, str], Any],
    span: Any,
    tick_us: float,
) -> None:
    """Per hardware resource, the span is at least the cost of the region's nodes on its
    units. Every node but the entry runs after the entry ends (all descend from it) and before
    the exit ends (all lead to it: the exit is an articulation node,
    :func:`partuner.plan.decompose.articulation_nodes`; in the last region, before its last
    partition ends), so this holds for every plan. The model implies it only once the nodes
    are ordered; stated outright, it lets the search prove as it places nodes (a test in
    tests/test_plan_pexact.py: an Inception block proven with it and left open without)."""
    per: dict[str, list[Any]] = {}
    for u in problem.units:
        terms = [ticks(problem.cost[n][u], tick_us) * x[n, u] for n in region.nodes if (n, u) in x]
        for r in problem.resources_of(u):
            per.setdefault(r, []).extend(terms)
    for terms in per.values():
        if terms:
            m.add(span >= sum(terms))


def one_unit_bound(
    problem: Problem,
    region: Region,
    entry_unit: str,
    exit_unit: str | None,
    *,
    tick_us: float = TICK_US,
) -> tuple[float, RegionSolution | None]:
    """A bound on the span of ``region`` (as :func:`solve_region` models it) with its entry on
    ``entry_unit`` and its exit on ``exit_unit``, found without a solver, and the plan that
    meets it when that plan is keeping the whole region in the entering node's partition.

    Every node of such a region descends from the entry and (but the exit) leads to the exit,
    and a value crossing units delays its reader by at least the cheapest transfer ``d``.
    Entering and leaving on different units, the span is at least ``d`` plus the exit's cost.
    Entering and leaving on unit ``a``: a plan keeping every node on ``a`` spans at least the
    sum of their costs there (its nodes share ``a``'s resources) and exactly that in one
    partition; a plan placing any node elsewhere crosses twice on its way to the exit (once,
    in a region ending the graph), so spans at least ``2 d`` plus the exit's cost. The sum is
    optimal when it is not above the latter: the regions of a model whose operators are small
    beside the links settle here. These bounds hold for the plans themselves, so they are in
    µs, without the model's rounding to ticks. ``(0.0, None)`` for a region without entry, a
    problem with memory limits, or a region whose nodes do not all descend from the entry."""
    entry, nodes = region.entry, sorted(region.nodes, key=problem.index)
    if entry is None or problem.memory_limited or not _spanned(problem, region):
        return 0.0, None
    # in µs, not ticks: these bounds hold for the plans themselves, not only for the model
    cross = min(
        (problem.transfer_us(u, v, 0.0) for u in problem.units for v in problem.units if u != v),
        default=math.inf,
    )
    slack = (len(nodes) + 1) * 4 * EPS_TICKS * tick_us  # float noise
    exit_cost = problem.cost[region.exit][exit_unit] if region.exit is not None else 0.0
    if region.exit is not None and exit_unit != entry_unit:
        return max(0.0, cross + exit_cost - slack), None
    a = entry_unit
    whole = math.fsum(problem.cost[n][a] for n in nodes)
    off = 2 * cross + exit_cost if region.exit is not None else cross
    if not whole <= off:
        return max(0.0, off - slack), None
    return max(0.0, whole - slack), RegionSolution(
        assignment=dict.fromkeys(nodes, a),
        parts=[(a, [entry, *nodes])],
        status="optimal",
        bound_us=max(0.0, whole - slack),
        span_us=whole,
        entry_unit=a,
        exit_unit=a if region.exit is not None else None,
        faithful=True,
    )


def _spanned(problem: Problem, region: Region) -> bool:
    """Every node of ``region`` descends from its entry and, but its exit, leads to a later
    node of it (hence to the exit, when it has one)."""
    inside = set(region.nodes)
    for n in region.nodes:
        if not any(p == region.entry or p in inside for p in problem.preds(n)):
            return False
        if region.exit is not None and n != region.exit:
            if not any(c in inside for c in problem.succs(n)):
                return False
    return True


def _add_capacity(m: Any, problem: Problem, nodes: Sequence[str], x: Mapping[Any, Any]) -> None:
    """Per unit of finite memory: the weights of the nodes on it plus their largest output
    stay within its capacity (:meth:`Problem.memory_use`)."""
    for u in problem.units:
        cap = problem.capacity(u)
        on = [n for n in nodes if (n, u) in x]
        if not on or not math.isfinite(cap):
            continue
        top = max(problem.activation_bytes(n) for n in on)
        peak = m.new_int_var(0, top, f"peak[{u}]")
        for n in on:
            if problem.activation_bytes(n) > 0:
                m.add(peak >= problem.activation_bytes(n)).only_enforce_if(x[n, u])
        m.add(sum(problem.weights(n) * x[n, u] for n in on) + peak <= math.floor(cap))


def _worst_cut(problem: Problem, p: str, n: str) -> float:
    nbytes = problem.pair_nbytes(p, n)
    worst = 0.0
    for u in problem.runnable_units(p):
        for v in problem.runnable_units(n):
            if u != v:
                worst = max(worst, problem.transfer_us(u, v, nbytes))
    rate = max(problem.boundary_us_per_byte.values(), default=0.0)
    return worst + nbytes * rate
