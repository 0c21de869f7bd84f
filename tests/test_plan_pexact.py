"""The partition-level exact scheduler (``pexact``).

Its bound must hold for every plan, not only for the plans some scheduler finds: on tiny
problems :func:`every_plan` lists all of them (every topological order, every assignment, every
way of cutting each unit's sequence into partitions) and the true optimum is compared with the
bound and with pexact's plan. On random problems random plans stand in for "every plan".
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partuner.errors import PartitionCycleError
from partuner.plan import (
    Edge,
    Link,
    Partition,
    Problem,
    Schedule,
    get_scheduler,
    plan_from_schedule,
    simulate,
)
from test_plan_cases import INF, PROPERTY, make_problem, optimum, problems

pytest.importorskip("ortools")

FEW = settings(PROPERTY, max_examples=25)


def _pexact(**kw):
    from partuner.plan.pexact import PartitionExact

    return PartitionExact(workers=1, **kw)


def boundary_problem() -> Problem:
    """A fork-join whose cut costs are mostly boundary costs: two units, 10 kB per value."""
    nodes = ["a", "b", "c", "d", "e"]
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")]
    cost = {"a": 2.0, "b": 6.0, "c": 5.0, "d": 1.0, "e": 3.0}
    return Problem(
        nodes,
        ["u", "v"],
        {n: {"u": c, "v": c * 1.2} for n, c in cost.items()},
        [Edge(s, t, 10_000, (f"{s}:out",)) for s, t in edges],
        default_link=Link(0.5, 20.0),
        call_overhead_us={"u": 0.3, "v": 0.3},
        boundary_us_per_byte={"u": 1e-4, "v": 1e-4},
    )


TINY = [
    ("diamond", "two_equal"),
    ("diamond", "two_unequal_slow_link"),
    ("fork", "some_infinite"),
    ("join", "two_equal"),
    ("chain", "two_unequal_slow_link"),
    ("diamond", "shared_cores"),
]


@pytest.mark.parametrize(("dag", "units"), TINY)
def test_bound_below_the_true_optimum_and_plan_at_it(dag: str, units: str) -> None:
    p = make_problem(dag, units)
    best = optimum(p)
    s = _pexact().schedule(p, time_limit=10)
    s.validate(p)
    latency = plan_from_schedule(p, s).predicted_us
    assert s.lower_bound <= best + 1e-6
    assert latency == pytest.approx(best, rel=1e-6)


def test_boundary_costs_are_charged_once_per_partition() -> None:
    p = boundary_problem()
    best = optimum(p)
    s = _pexact().schedule(p, time_limit=10)
    plan = plan_from_schedule(p, s)
    assert s.lower_bound <= best + 1e-6
    assert plan.predicted_us == pytest.approx(best, rel=1e-6)
    # the node-level bound cannot see the boundary costs; this one does
    exact = get_scheduler("exact").schedule(p, time_limit=10)
    assert s.lower_bound >= exact.lower_bound - 1e-6


def random_plan(p: Problem, rng: random.Random) -> list[Partition]:
    """A random topological order, random units, random cuts."""
    order, left = [], set(p.nodes)
    while left:
        ready = sorted((n for n in left if all(q not in left for q in p.preds(n))), key=p.index)
        n = rng.choice(ready)
        order.append(n)
        left.remove(n)
    runs: list[tuple[str, list[str]]] = []
    open_run: dict[str, int] = {}
    for n in order:
        u = rng.choice(p.runnable_units(n))
        if u in open_run and rng.random() < 0.6:
            runs[open_run[u]][1].append(n)
        else:
            open_run[u] = len(runs)
            runs.append((u, [n]))
    return [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(runs)]


@FEW
@given(p=problems(max_nodes=7, max_units=3), seed=st.integers(0, 2**16))
def test_bound_holds_for_random_plans_and_plan_beats_heuristics(p: Problem, seed: int) -> None:
    s = _pexact().schedule(p, time_limit=5)
    s.validate(p)
    latency = plan_from_schedule(p, s).predicted_us
    assert s.lower_bound <= latency + 1e-6
    rng = random.Random(seed)
    for _ in range(30):
        try:
            got = simulate(p, random_plan(p, rng)).makespan_us
        except PartitionCycleError:
            continue
        assert s.lower_bound <= got * (1 + 1e-9) + 1e-6
    from partuner.plan.exact import heuristic_schedules

    for name, h in heuristic_schedules(p).items():
        assert latency <= plan_from_schedule(p, h).predicted_us * (1 + 1e-9) + 1e-9, name


def series_of_diamonds(k: int, link: Link | None = None) -> Problem:
    """``k`` diamonds in series (articulation nodes between them), two unequal units."""
    nodes, edges, cost = ["s"], [], {"s": 1.0}
    last = "s"
    for i in range(k):
        b, c, j = f"b{i}", f"c{i}", f"j{i}"
        nodes += [b, c, j]
        edges += [(last, b), (last, c), (b, j), (c, j)]
        cost.update({b: 4.0 + i, c: 3.0, j: 0.5})
        last = j
    return Problem(
        nodes,
        ["u", "v"],
        {n: {"u": c, "v": 1.5 * c} for n, c in cost.items()},
        [Edge(s, t, 1000, (f"{s}:out",)) for s, t in edges],
        default_link=link or Link(0.2, 50.0),
        call_overhead_us={"u": 0.1, "v": 0.1},
        boundary_us_per_byte={"u": 1e-4, "v": 1e-4},
    )


def test_regions_compose_to_a_valid_bound_and_plan() -> None:
    p = series_of_diamonds(4)
    whole = _pexact(region_nodes=100).schedule(p, time_limit=20)
    split = _pexact(region_nodes=4).schedule(p, time_limit=20)
    whole_latency = plan_from_schedule(p, whole).predicted_us
    split_latency = plan_from_schedule(p, split).predicted_us
    assert split.lower_bound <= whole_latency + 1e-6
    assert whole.lower_bound <= split_latency + 1e-6
    assert split.lower_bound <= split_latency + 1e-6
    assert split.lower_bound > get_scheduler("exact").schedule(p, time_limit=5).lower_bound * 0.99
    # both solve to a proof here: the decomposition gives the whole model's answer
    assert split_latency == pytest.approx(whole_latency, rel=1e-3)


def test_interchangeable_units() -> None:
    from partuner.plan.pexact import interchangeable

    assert interchangeable(make_problem("diamond", "two_equal")) == [("u0", "u1")]
    assert interchangeable(make_problem("diamond", "two_unequal_slow_link")) == []
    # two 1-thread units beside a 2-thread unit on both their cores
    assert interchangeable(make_problem("diamond", "shared_cores")) == [("cpu0", "cpu1")]
    p = make_problem("diamond", "two_equal")
    p.call_overhead_us["u1"] = 1.0
    assert interchangeable(p) == []


def test_schedule_partitions_are_honoured_or_recut() -> None:
    p = boundary_problem()
    s = get_scheduler("single").schedule(p)
    one = plan_from_schedule(p, s)
    assert len(one.partitions) == 1
    own = Schedule(dict(s.slots), "mine", partitions=[("a", "b"), ("c",), ("d", "e")])
    plan = plan_from_schedule(p, own)
    assert [q.nodes for q in plan.partitions] == [("a", "b"), ("c",), ("d", "e")]
    assert plan.predicted_us > one.predicted_us  # two more calls, boundary costs
    # a list that misses a node is not a plan: the slots are cut as usual
    bad = Schedule(dict(s.slots), "mine", partitions=[("a", "b"), ("d", "e")])
    assert [q.nodes for q in plan_from_schedule(p, bad).partitions] == [tuple(p.nodes)]


def test_merging_drops_calls_that_buy_nothing() -> None:
    from partuner.plan.assemble import merge_partitions

    p = boundary_problem()
    cut_up = [("u", ["a"]), ("u", ["b"]), ("u", ["c"]), ("u", ["d"]), ("u", ["e"])]
    before = simulate(p, [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(cut_up)])
    merged = merge_partitions(p, cut_up)
    after = simulate(p, [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(merged)])
    assert merged == [("u", ["a", "b", "c", "d", "e"])]
    assert after.makespan_us < before.makespan_us
    # u's two partitions cannot merge: the second waits for c on v, which waits for the first
    apart = [("u", ["a", "b"]), ("v", ["c"]), ("u", ["d", "e"])]
    assert merge_partitions(p, apart) == apart


def test_one_unit_bound() -> None:
    from partuner.plan.decompose import Region
    from partuner.plan.region_model import one_unit_bound

    slow = series_of_diamonds(2, Link(20.0, 1.0))  # a cut costs 20 µs, a diamond 8-9 µs
    second = Region("j0", ("b1", "c1", "j1"), "j1")
    bound, sol = one_unit_bound(slow, second, "u", "u")
    assert sol is not None and sol.parts == [("u", ["j0", "b1", "c1", "j1"])]
    assert bound == pytest.approx(5.0 + 3.0 + 0.5, abs=1e-5)
    assert sol.span_us == pytest.approx(8.5)
    bound, sol = one_unit_bound(slow, second, "v", "v")
    assert sol is not None and bound == pytest.approx(1.5 * 8.5, abs=1e-5)
    # entering on u and leaving on v crosses once at least (the link's latency), then j1 on v
    bound, sol = one_unit_bound(slow, second, "u", "v")
    assert sol is None and bound == pytest.approx(20.0 + 0.75, abs=1e-5)
    # links cheap beside the nodes: only the bound of a plan that crosses twice
    fast = series_of_diamonds(2, Link(1.0, 100.0))
    bound, sol = one_unit_bound(fast, second, "u", "u")
    assert sol is None and bound == pytest.approx(2 * 1.0 + 0.5, abs=1e-5)
    # the last region (no exit): one crossing
    last = Region("j0", ("b1", "c1", "j1"), None)
    assert one_unit_bound(fast, last, "u", None)[0] == pytest.approx(1.0, abs=1e-5)
    # nothing is claimed for a region without entry, or with a node not fed from inside it
    assert one_unit_bound(slow, Region(None, ("s", "b0", "c0", "j0"), "j0"), "u", "u") == (0, None)
    assert one_unit_bound(slow, Region("b0", ("c0", "j0"), "j0"), "u", "u") == (0.0, None)


@pytest.mark.parametrize("latency", [20.0, 1.0])
def test_settled_regions_compose_to_the_true_optimum(latency: float, monkeypatch) -> None:
    """Small regions: with a slow link every region but the first settles without a solver;
    with a fast one the solver runs. Either way, the optimum over every plan."""
    import partuner.plan.pexact as pexact

    p = series_of_diamonds(2, Link(latency, 1.0))
    calls = []
    real = pexact.solve_region
    monkeypatch.setattr(
        pexact, "solve_region", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw)
    )
    best = optimum(p)
    s = _pexact(region_nodes=3).schedule(p, time_limit=10)
    latency_us = plan_from_schedule(p, s).predicted_us
    assert s.lower_bound <= best + 1e-6
    assert latency_us == pytest.approx(best, rel=1e-6)
    solved = {r.entry for r in calls}
    if latency == 20.0:  # one partition on u; the first region's solve and the rest settled
        assert solved == {None} and s.status == "optimal"
    else:
        assert solved > {None}


def slow_link_problem(
    cost: dict[str, tuple[float, float]],
    edges: list[tuple[str, str, int, str]],
    overhead: dict[str, float],
) -> Problem:
    """Units ``u`` (CPU-like) and ``v`` (``cost``: node -> (on u, on v)), a link of 1 µs and
    10 B/µs, ``edges`` as (source, target, bytes, value)."""
    return Problem(
        list(cost),
        ["u", "v"],
        {n: {"u": a, "v": b} for n, (a, b) in cost.items()},
        [Edge(s, t, nbytes, (value,)) for s, t, nbytes, value in edges],
        default_link=Link(1.0, 0.01),
        call_overhead_us=overhead,
    )


def two_values_problem() -> Problem:
    """``s`` on the CPU-like unit ``u`` feeds ``x`` and ``y`` two different values of 1 kB;
    ``v`` runs ``x`` and ``y`` 180x faster but the link moves 10 B/µs and a call on ``v`` costs
    50 µs: one transfer of both values takes twice as long as one of either (the smaller model
    charges the larger one), and two calls on ``v`` take turns (the smaller model overlaps
    them)."""
    cost = {"s": (1.0, math.inf), "x": (180.0, 1.0), "y": (180.0, 1.0), "z": (1.0, math.inf)}
    edges = [
        ("s", "x", 1000, "s:a"),
        ("s", "y", 1000, "s:b"),
        ("x", "z", 10, "x:out"),
        ("y", "z", 10, "y:out"),
    ]
    return slow_link_problem(cost, edges, {"v": 50.0})


def test_values_crossing_together_pay_one_transfer_of_both() -> None:
    from partuner.plan.decompose import regions
    from partuner.plan.region_model import solve_region

    p = two_values_problem()
    best = optimum(p)
    # x on v, y on u: s, 101 µs to send s:a, 50 µs call, x, 2 µs back; meanwhile y on u
    assert best == pytest.approx(1 + 180 + 1)
    (region,) = regions(p, 16)
    small = solve_region(p, region, time_limit=10, pairs=False)
    whole = solve_region(p, region, time_limit=10, pairs=True, floor_us=small.bound_us)
    assert small.bound_us < best - 20 and not small.faithful  # both on v, one transfer
    assert whole.faithful and whole.bound_us == pytest.approx(best, abs=1e-3)
    # pexact re-solves its plan's regions with the pairwise parts when time is left
    s = _pexact().schedule(p, time_limit=10)
    assert plan_from_schedule(p, s).predicted_us == pytest.approx(best)
    assert s.lower_bound == pytest.approx(best, abs=1e-3) and s.status == "optimal"


def test_partitions_of_one_unit_take_turns() -> None:
    """With the pairwise parts the model's span is the plan's simulated latency (partitions of
    one unit do not interleave), up to the rounding to ticks, and its bound stays valid."""
    from partuner.plan.decompose import regions
    from partuner.plan.region_model import solve_region

    for dag, units in TINY:
        p = make_problem(dag, units)
        (region,) = regions(p, 16)
        sol = solve_region(p, region, time_limit=10, pairs=True)
        assert sol.status == "optimal" and sol.faithful
        plan = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(sol.parts)]
        got = simulate(p, plan).makespan_us
        assert got == pytest.approx(sol.span_us, abs=0.1 * len(p.nodes) + 1e-6)  # ticks
        assert sol.bound_us <= optimum(p) + 1e-6


def test_interchangeable_units_are_used_in_one_order() -> None:
    """Three equal NPU-like units: the model asks for them in one order (a plan using the
    third before the first is mirrored), which keeps the true optimum."""
    from partuner.plan.region_model import _in_order

    nodes = ["s", "a", "b", "c", "j"]
    edges = [("s", "a"), ("s", "b"), ("s", "c"), ("a", "j"), ("b", "j"), ("c", "j")]
    cost = {"s": 1.0, "a": 6.0, "b": 5.0, "c": 4.0, "j": 1.0}
    npus = ["n0", "n1", "n2"]
    p = Problem(
        nodes,
        ["cpu", *npus],
        {
            n: {"cpu": c, **{u: (c / 3 if n in "abc" else math.inf) for u in npus}}
            for n, c in cost.items()
        },
        [Edge(s, t, 100, (f"{s}:out",)) for s, t in edges],
        default_link=Link(0.5, 1.0),
        call_overhead_us={u: 0.2 for u in npus},
    )
    from partuner.plan.pexact import interchangeable

    assert interchangeable(p) == [("n0", "n1"), ("n0", "n2"), ("n1", "n2")]
    best = optimum(p)
    s = _pexact().schedule(p, time_limit=20)
    assert plan_from_schedule(p, s).predicted_us == pytest.approx(best, rel=1e-6)
    assert s.lower_bound <= best + 1e-6
    hint = {"s": "cpu", "a": "n2", "b": "n0", "c": "n2", "j": "cpu"}
    assert _in_order(hint, nodes, [npus]) == {
        "s": "cpu",
        "a": "n0",
        "b": "n1",
        "c": "n0",
        "j": "cpu",
    }


def test_each_region_takes_the_faster_of_both_models_plans() -> None:
    """The per-region choice between the smaller model's chain and the whole model's
    solutions: a region's whole-model solution replaces its plan in the chain where its span
    is below the region's simulated time there, and only then."""
    from partuner.plan.assemble import (
        assemble,
        best_per_region,
        region_times,
        schedule_of_parts,
    )
    from partuner.plan.decompose import regions
    from partuner.plan.region_model import RegionSolution

    p = series_of_diamonds(2)
    parts = regions(p, 4)
    assert [(r.entry, r.exit) for r in parts] == [(None, "j0"), ("j0", None)]
    first = ["s", "b0", "c0", "j0"]
    second = ["b1", "c1", "j1"]

    def sol(layout, span, entry_unit, exit_unit, faithful=False):
        assign = {n: u for u, ns in layout for n in ns}
        if entry_unit is not None:
            del assign["j0"]  # the entering node belongs to the region before
        return RegionSolution(
            assign, layout, "feasible", 0.0, span, entry_unit, exit_unit, faithful=faithful
        )

    keep0 = sol([("u", first)], 0.0, None, "u")
    slow1 = sol([("u", ["j0"]), ("v", second)], 0.0, "u", None)  # everything on the slow unit
    plan = assemble(parts, [keep0, slow1])
    _, slow = schedule_of_parts(p, plan, "t")
    fast1 = sol([("u", ["j0", *second])], sum(p.cost[n]["u"] for n in second), "u", None, True)
    worse0 = sol([("v", first)], 1e6, None, "u", True)  # a whole-model plan slower than keep0
    faithful = {(0, None, "u"): worse0, (1, "u", None): fast1}
    times = region_times(p, parts, plan)
    assert times is not None and sum(times) == pytest.approx(slow)
    mixed = best_per_region(parts, [keep0, slow1], times, faithful)
    assert mixed == assemble(parts, [keep0, fast1])
    assert schedule_of_parts(p, mixed, "t")[1] < slow
    # nothing faster on offer: no new plan
    slower = {(1, "u", None): sol([("u", ["j0"]), ("v", second)], 1e6, "u", None, True)}
    mixed_times = region_times(p, parts, mixed)
    assert best_per_region(parts, [keep0, fast1], mixed_times, slower) is None


def test_region_solver_settings() -> None:
    """Full searches without LP first (see region_model._solver), one worker left for
    neighbourhood search; one worker searches without LP."""
    from partuner.plan.exact import _cp_model
    from partuner.plan.region_model import _FULL_SEARCHES, _solver

    cp_model = _cp_model()
    three = _solver(cp_model, 1.0, 3, 0).parameters
    assert list(three.subsolvers) == list(_FULL_SEARCHES[:2]) == ["no_lp", "max_lp"]
    assert three.num_workers == 3
    one = _solver(cp_model, 1.0, 1, 0).parameters
    assert one.num_workers == 1 and one.linearization_level == 0 and not one.subsolvers


def test_a_fixed_placement_is_partitioned_and_kept() -> None:
    """``units_of``: the solve keeps the given units and only partitions and orders them."""
    from partuner.plan.decompose import regions
    from partuner.plan.region_model import solve_region

    p = two_values_problem()
    (region,) = regions(p, 16)
    sol = solve_region(p, region, time_limit=10, pairs=True, units_of={"x": "u", "y": "u"})
    assert sol.assignment == {"s": "u", "x": "u", "y": "u", "z": "u"}
    assert sol.span_us == pytest.approx(1 + 180 + 180 + 1, abs=0.5)  # one partition on u
    assert sol.span_us > optimum(p)  # x on v is faster: the placement, not the model, holds it


def test_two_nodes_of_one_partition_cannot_pose_as_two() -> None:
    """``s -> a -> x`` and ``s -> y``: with ``s`` and ``a`` in one partition on ``u`` and ``x``,
    ``y`` in one on ``v``, both values cross in one transfer (200 µs, not 100 µs each side by
    side). The model's "same partition" booleans are exact, so its span of that placement is
    the simulated one (the model once let ``s`` and ``a`` pose as two partitions there)."""
    from partuner.plan.decompose import regions
    from partuner.plan.region_model import solve_region

    cost = {"s": (1.0, math.inf), "a": (1.0, math.inf), "x": (180.0, 1.0), "y": (180.0, 1.0)}
    cost["z"] = (1.0, math.inf)
    edges = [
        ("s", "a", 1000, "s:out"),
        ("a", "x", 1000, "a:out"),
        ("s", "y", 1000, "s:out"),
        ("x", "z", 10, "x:out"),
        ("y", "z", 10, "y:out"),
    ]
    p = slow_link_problem(cost, edges, {"u": 150.0, "v": 50.0})  # s, a best kept in one call
    (region,) = regions(p, 16)
    placed = {"s": "u", "a": "u", "x": "v", "y": "v", "z": "u"}
    sol = solve_region(p, region, time_limit=10, pairs=True, units_of=placed)
    assert sol.status == "optimal" and sol.assignment == placed
    plan = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(sol.parts)]
    got = simulate(p, plan).makespan_us
    assert got == pytest.approx(sol.span_us, abs=0.1 * len(p.nodes) + 1e-6)  # ticks
    # {s, a} 152; y's call once s:out is over (101 µs) and x's after it (51 µs each): one
    # partition {x, y} would wait for both values together (201 µs); x:out back 2 µs, {z} 151
    assert got == pytest.approx(152 + 101 + 51 + 51 + 2 + 151)


def test_write_outs_are_charged_as_the_simulation_charges_them() -> None:
    """``s`` on ``u`` feeds ``x`` (placed on ``v``) and ``y``: ``s``'s partition writes its 1 kB
    value out for ``x`` (50 µs at 0.05 µs per byte on ``u``). The model charges the write-out,
    so its span of that placement is the simulated one, and the bound holds (the model once
    left write-outs out: spans 50 µs short of the plans they stood for)."""
    from partuner.plan.decompose import regions
    from partuner.plan.region_model import solve_region

    cost = {"s": (1.0, math.inf), "x": (100.0, 10.0), "y": (100.0, 10.0), "z": (1.0, math.inf)}
    p = Problem(
        list(cost),
        ["u", "v"],
        {n: {"u": a, "v": b} for n, (a, b) in cost.items()},
        [
            Edge("s", "x", 1000, ("s:a",)),
            Edge("s", "y", 1000, ("s:b",)),
            Edge("x", "z", 10, ("x:out",)),
            Edge("y", "z", 10, ("y:out",)),
        ],
        default_link=Link(1.0, 1.0),
        call_overhead_us={"u": 5.0, "v": 5.0},
        boundary_out_us_per_byte={"u": 0.05},
    )
    (region,) = regions(p, 16)
    placed = {"s": "u", "x": "v", "y": "u", "z": "u"}
    sol = solve_region(p, region, time_limit=10, pairs=True, units_of=placed)
    assert sol.status == "optimal" and sol.assignment == placed
    plan = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(sol.parts)]
    got = simulate(p, plan).makespan_us
    assert got == pytest.approx(sol.span_us, abs=0.1 * len(p.nodes) + 1e-6)  # ticks
    unwritten = dataclasses.replace(p, boundary_out_us_per_byte={})
    assert got - simulate(unwritten, plan).makespan_us >= 50.0 - 1e-9  # s:a, at least
    free = solve_region(p, region, time_limit=10, pairs=True)
    assert free.status == "optimal" and free.bound_us <= optimum(p) + 1e-6
    assert free.span_us == pytest.approx(optimum(p), abs=0.1 * len(p.nodes) + 1e-6)


@FEW
@given(p=problems(max_nodes=5, max_units=3))
def test_bound_below_the_true_optimum_on_random_problems(p: Problem) -> None:
    """Every part of the model, the busy time per resource included, holds for every plan:
    the bound never passes the best plan of all (shared cores, dangling outputs, overheads)."""
    s = _pexact().schedule(p, time_limit=5)
    assert s.lower_bound <= optimum(p) * (1 + 1e-9) + 1e-6


def inception_block() -> Problem:
    """GoogLeNet's first inception block as profiled on a 1-thread CPU (call overhead 284 µs)
    with two NPUs at about half its speed (costs and bytes from the anytime benchmark's
    problem)."""
    cpu = {
        "b1": 216.6, "b1r": 9.2, "b2": 312.6, "b2r": 18.7, "b2b": 1857.8, "b2br": 25.4,
        "b3": 72.1, "b3r": 1.8, "b3b": 79.3, "b3br": 5.1, "b4": 64.4, "b4b": 117.3,
        "b4br": 3.3, "cat": 61.3,
    }  # fmt: skip
    npu = {
        "b1": 310.5, "b1r": 20.1, "b2": 465.7, "b2r": 30.1, "b2b": 2794.4, "b2br": 40.1,
        "b3": 77.6, "b3r": 5.0, "b3b": 116.4, "b3br": 10.0, "b4": 60.2, "b4b": 155.2,
        "b4br": 10.0, "cat": INF,
    }  # fmt: skip
    kib = {
        "in": 588, "b1": 196, "b1r": 196, "b2": 294, "b2r": 294, "b2b": 392, "b2br": 392,
        "b3": 49, "b3r": 49, "b3b": 98, "b3br": 98, "b4": 588, "b4b": 98, "b4br": 98,
    }  # fmt: skip
    chains = [["b1", "b1r"], ["b2", "b2r", "b2b", "b2br"], ["b3", "b3r", "b3b", "b3br"]]
    chains.append(["b4", "b4b", "b4br"])
    pairs = [(a, b) for c in chains for a, b in zip(["in", *c], [*c, "cat"], strict=False)]
    nodes = ["in", *(n for c in chains for n in c), "cat"]
    cost = {"in": {"cpu": 149.8, "n0": 150.5, "n1": 150.5}}
    cost |= {n: {"cpu": cpu[n], "n0": npu[n], "n1": npu[n]} for n in nodes[1:]}
    return Problem(
        nodes,
        ["cpu", "n0", "n1"],
        cost,
        [Edge(s, t, 1024 * kib[s], (f"{s}:out",)) for s, t in pairs],
        default_link=Link(7.9, 7.0),
        call_overhead_us={"cpu": 284.0, "n0": 13.5, "n1": 13.5},
        boundary_us_per_byte={"cpu": 1.07e-4},
    )


def test_busy_time_per_resource_proves_a_block() -> None:
    """Stated outright, each resource's busy time lets the solver prove the block's optimum
    (the CPU alone: every plan using an NPU needs two more CPU calls or waits) with the
    smaller model within the budget; without it the search leaves it open (longer budgets
    proved no more than the path-and-load floor, 20 % lower)."""
    from partuner.plan.decompose import Region
    from partuner.plan.region_model import solve_region

    p = inception_block()
    region = Region("in", tuple(p.nodes[1:]), "cat")
    sol = solve_region(
        p, region, entry_unit="cpu", exit_unit="cpu", time_limit=30, pairs=False,
        mirrored=[["n0", "n1"]],
    )  # fmt: skip
    assert sol.status == "optimal"
    plan = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(sol.parts)]
    got = simulate(p, plan).makespan_us - 284.0 - 149.8  # from the entry's end
    assert sol.bound_us == pytest.approx(got, abs=0.1 * len(p.nodes))
    assert got == pytest.approx(sum(p.cost[n]["cpu"] for n in p.nodes[1:]), abs=1.0)


def test_a_region_the_solver_leaves_without_a_plan_takes_the_best_hints_placement(
    monkeypatch,
) -> None:
    """A free solve that finds no plan in time (presolve can take a short solve's time) would
    leave no chain of regions to assemble: that region is solved again with the best hint's
    placement fixed, and its bound, which holds for that placement alone, is not kept."""
    import partuner.plan.pexact as pexact

    p = series_of_diamonds(3)
    hint = get_scheduler("heft").schedule(p)
    real = pexact.solve_region
    fixed = []

    def flaky(problem, region, **kw):
        if kw.get("units_of") is None and region.entry is not None:
            return None  # every region but the first: no plan in time
        if kw.get("units_of") is not None:
            fixed.append(region.entry)
        return real(problem, region, **kw)

    monkeypatch.setattr(pexact, "solve_region", flaky)
    place = {n: s.unit for n, s in hint.slots.items()}
    got = pexact.solve_plan(p, time_limit=5, hints=[place], max_region=4)
    assert fixed  # the fallback ran
    assert got.parts  # and a plan was assembled from it
    parts = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(got.parts)]
    latency = simulate(p, parts).makespan_us
    assert got.bound_us <= latency + 1e-6
    assert latency <= plan_from_schedule(p, hint).predicted_us * 1.5


@FEW
@given(p=problems(max_nodes=5, max_units=3))
def test_a_solve_that_searches_for_the_bound_proves_the_same_optimum(p: Problem) -> None:
    """pexact's repeated solves search for the bound (``prove``): on problems small enough to
    prove, both searches end at the same optimum, and its bound holds for every plan."""
    from partuner.plan.decompose import Region
    from partuner.plan.region_model import solve_region

    region = Region(None, tuple(p.nodes), None)  # the whole problem as one region
    plain = solve_region(p, region, time_limit=5, pairs=True)
    proved = solve_region(p, region, time_limit=5, pairs=True, prove=True)
    assert plain.status == proved.status == "optimal"
    assert proved.span_us == pytest.approx(plain.span_us, abs=1e-6)
    assert proved.bound_us <= optimum(p) + 1e-6


def test_no_region_solve_starts_without_time_to_search(monkeypatch) -> None:
    """pexact over many regions on a short budget: no solve starts with a limit that cannot
    pay for its call (``CALL_S``; the region takes the best hint's placement instead), and the
    last stage starts no re-solve under ``_MIN_SOLVE_S`` (each is charged its model's rows:
    slivers found nothing and took the time open proofs could use)."""
    import partuner.plan.pexact as pexact
    from partuner.plan.clock import CALL_S, WorkClock

    p = series_of_diamonds(12)
    hint = get_scheduler("heft").schedule(p)
    real = pexact.solve_region
    calls: list[tuple[float, bool]] = []

    def spy(problem, region, **kw):
        calls.append((kw["time_limit"], bool(kw.get("pairs"))))
        return real(problem, region, **kw)

    monkeypatch.setattr(pexact, "solve_region", spy)
    place = {n: s.unit for n, s in hint.slots.items()}
    clock = WorkClock(30.0)  # the work budget runs short, never the wall clock
    got = pexact.solve_plan(p, time_limit=0.6, hints=[place], max_region=4, clock=clock)
    assert calls and all(t > CALL_S for t, _ in calls), sorted(calls)[:5]
    assert all(t >= pexact._MIN_SOLVE_S for t, pairs in calls if pairs)
    assert got.parts  # every region has a plan
    parts = [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(got.parts)]
    assert got.bound_us <= simulate(p, parts).makespan_us + 1e-6
