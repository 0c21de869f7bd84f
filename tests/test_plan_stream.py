"""The throughput objective's planning side: the stream simulation, its bounds and the search."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partuner.errors import InfeasiblePlanError
from partuner.plan import Edge, Link, Partition, Problem, plan_from_assignment, simulate
from partuner.plan.exact import solver_available
from partuner.plan.stream import handoff_us, simulate_stream, stream_loads, tune_in_flight
from partuner.plan.stream_model import fractional_bound, solve_pipeline
from partuner.plan.stream_plan import (
    StreamPlan,
    data_parallel_units,
    fewer_in_flight,
    greedy_pipelines,
    merge_for_stream,
    plan_throughput,
    stream_plan_of,
)
from test_plan_cases import PROPERTY, make_problem, problems

needs_solver = pytest.mark.skipif(not solver_available(), reason="OR-Tools not installed")


def _chain(costs: list[dict[str, float]], nbytes: int = 0, **kw) -> Problem:
    nodes = [f"n{i}" for i in range(len(costs))]
    edges = [Edge(a, b, nbytes, (f"{a}_out",)) for a, b in zip(nodes, nodes[1:], strict=False)]
    units = sorted({u for c in costs for u in c})
    cost = {n: {u: c.get(u, math.inf) for u in units} for n, c in zip(nodes, costs, strict=True)}
    return Problem(nodes, units, cost, edges, **kw)


def _parts(problem: Problem, assignment: dict[str, str]) -> list[Partition]:
    return plan_from_assignment(problem, assignment).partitions


@given(problems(max_nodes=7, max_units=3))
@PROPERTY
def test_one_frame_in_flight_is_the_latency_simulation(p: Problem) -> None:
    """With one frame in flight nothing overlaps: every frame takes the plan's latency."""
    if not p.nodes:
        return
    plan = plan_from_assignment(p, {n: p.runnable_units(n)[0] for n in p.nodes})
    if p.shares_hardware:  # turns on shared hardware follow the plan's list order there
        return
    s = simulate_stream(p, plan.partitions, in_flight=1, handoff=0.0)
    single = simulate(p, plan.partitions).makespan_us
    assert s.single_us == pytest.approx(single)
    assert s.period_us == pytest.approx(max(single, s.load_bound_us), rel=1e-9, abs=1e-9)
    assert all(lat == pytest.approx(single, rel=1e-9, abs=1e-9) for lat in s.latencies_us)


@given(problems(max_nodes=7, max_units=3), st.integers(1, 4))
@PROPERTY
def test_no_stream_beats_its_busiest_resource(p: Problem, st_k: int) -> None:
    if not p.nodes:
        return
    plan = plan_from_assignment(p, {n: p.runnable_units(n)[-1] for n in p.nodes})
    s = simulate_stream(p, plan.partitions, in_flight=st_k)
    loads = stream_loads(p, plan.partitions)
    assert s.period_us >= max(loads.values()) * (1 - 1e-9)
    # overlapping frames never hurt: no slower than one frame at a time with its hand-offs
    assert s.period_us <= (s.single_us + 2 * handoff_us(p)) * (1 + 1e-9) + 1e-9
    assert s.in_flight == st_k
    assert all(0 <= v <= 1 for v in s.utilisation().values())


def test_a_two_stage_pipeline_runs_at_its_slower_stage() -> None:
    p = _chain([{"a": 3.0, "b": 50.0}, {"a": 50.0, "b": 2.0}])
    parts = [Partition("p0", "a", ("n0",)), Partition("p1", "b", ("n1",))]
    one = simulate_stream(p, parts, in_flight=1)
    two = simulate_stream(p, parts, in_flight=2)
    assert one.period_us == pytest.approx(5.0)  # a frame at a time: both stages in turn
    assert two.period_us == pytest.approx(3.0)  # frame t+1 in stage 1 while t is in stage 2
    assert two.latency_us(99) == pytest.approx(6.0)  # it waits a period behind the other
    assert two.utilisation() == pytest.approx({"a": 1.0, "b": 2 / 3})
    assert tune_in_flight(p, parts).in_flight == 2
    # a bound below two frames' latency keeps one frame in flight
    assert tune_in_flight(p, parts, max_latency_us=5.5).in_flight == 1
    assert tune_in_flight(p, parts, max_latency_us=4.0) is None
    # a frame of slack: the same period, each frame waiting longer; none under a bound
    slack = tune_in_flight(p, parts, slack=1)
    assert slack.in_flight == 3 and slack.period_us == pytest.approx(3.0)
    assert slack.latency_us(99) > two.latency_us(99)
    assert tune_in_flight(p, parts, max_latency_us=100.0, slack=1).in_flight == 2
    assert tune_in_flight(p, parts, slack=1, up_to=2).in_flight == 2
    # fewer frames in flight: each smaller number, less throughput and less latency
    plan = plan_from_assignment(p, {"n0": "a", "n1": "b"})
    sp = StreamPlan("two", plan, (two,))
    (less,) = fewer_in_flight(p, sp)
    assert less.name == "two, 1 in flight" and less.in_flight == 1
    assert less.fps == pytest.approx(one.fps) and less.latency_us(99) == pytest.approx(5.0)
    assert fewer_in_flight(p, less) == []


def test_units_slowing_each_other_stretch_a_pipeline_not_its_bound() -> None:
    """``corun``: each unit's partitions take its factor more in proportion to the share of
    the period the other lane works; a plan on one unit is not slowed; the bound stays."""
    p = _chain([{"a": 3.0, "b": 50.0}, {"a": 50.0, "b": 2.0}], corun={"a": 1.2, "b": 1.5})
    parts = [Partition("p0", "a", ("n0",)), Partition("p1", "b", ("n1",))]
    s = simulate_stream(p, parts, in_flight=2)
    # plain: period 3, b busy 2/3 of it: a takes 3 * (1 + 0.2 * 2/3), b 2 * (1 + 0.5 * 1)
    assert s.period_us == pytest.approx(3.4)
    assert s.busy_us == pytest.approx({"a": 3.4, "b": 3.0})
    assert s.load_bound_us == pytest.approx(3.0)
    plain = simulate_stream(
        _chain([{"a": 3.0, "b": 50.0}, {"a": 50.0, "b": 2.0}]), parts, in_flight=2
    )
    assert plain.period_us == pytest.approx(3.0)
    alone = [Partition("p0", "a", ("n0", "n1"))]
    assert simulate_stream(p, alone, in_flight=2).period_us == pytest.approx(53.0)
    # units sharing hardware are one lane: they never run at once, nothing slows them
    shared = _chain(
        [{"a": 3.0, "b": 50.0}, {"a": 50.0, "b": 2.0}],
        corun={"a": 1.2, "b": 1.5},
        resources={"a": {"c0"}, "b": {"c0"}},
    )
    assert simulate_stream(shared, parts, in_flight=2).period_us == pytest.approx(5.0)
    # beside a unit never timed with it (modeled, remote): nothing to scale by
    lone = _chain([{"a": 3.0, "b": 50.0}, {"a": 50.0, "b": 2.0}], corun={"a": 1.2})
    assert simulate_stream(lone, parts, in_flight=2).period_us == pytest.approx(3.0)
    zero = _chain([{"a": 0.0, "b": 0.0}, {"a": 0.0, "b": 0.0}], corun={"a": 1.5, "b": 1.5})
    assert simulate_stream(zero, parts, in_flight=2).period_us == 0.0


def test_a_unit_with_two_stages_interleaves_frames() -> None:
    """cpu runs the first and last stage, npu the middle one: while frame t waits for the
    npu, the cpu runs frame t+1's first stage."""
    p = _chain([{"cpu": 4.0}, {"npu": 4.0}, {"cpu": 4.0}])
    parts = [Partition("p0", "cpu", ("n0",)), Partition("p1", "npu", ("n1",))]
    parts.append(Partition("p2", "cpu", ("n2",)))
    s = simulate_stream(p, parts, in_flight=3)
    assert s.period_us == pytest.approx(8.0)  # the cpu's load, not the 12 µs of a frame
    assert s.single_us == pytest.approx(12.0)


def test_one_frame_in_flight_pays_the_hand_offs_more_hide_them() -> None:
    """The caller takes each frame's outputs and lets the next frame in, a lane picks it up:
    two hand-offs a frame when frames go one at a time, none on the period with two."""
    p = _chain([{"a": 100.0}], links={("a", "b"): Link(15.0, math.inf)})
    whole = [Partition("p0", "a", ("n0",))]
    one = simulate_stream(p, whole, in_flight=1)
    assert one.period_us == pytest.approx(130.0) and one.latency_us(50) == pytest.approx(115.0)
    two = tune_in_flight(p, whole)
    assert two.in_flight == 2 and two.period_us == pytest.approx(100.0)


def test_transfers_delay_frames_but_not_the_period() -> None:
    p = _chain([{"a": 5.0}, {"b": 5.0}], nbytes=1000, links={("a", "b"): Link(20.0, math.inf)})
    parts = [Partition("p0", "a", ("n0",)), Partition("p1", "b", ("n1",))]
    s = tune_in_flight(p, parts)
    assert s.single_us == pytest.approx(30.0)
    assert s.period_us == pytest.approx(5.0)  # links carry any number of values at once
    assert s.in_flight >= 6


def test_merging_a_units_partitions_keeps_the_plan_acyclic() -> None:
    # a -> b -> c with b on another unit: a and c cannot merge (b sits between them)
    p = _chain([{"u": 1.0, "v": 1.0}] * 3, call_overhead_us={"u": 5.0, "v": 5.0})
    split = [Partition("p0", "u", ("n0",)), Partition("p1", "v", ("n1",))]
    split.append(Partition("p2", "u", ("n2",)))
    assert len(merge_for_stream(p, split)) == 3
    # independent nodes on one unit merge into one call
    q = Problem(["x", "y", "z"], ["u", "v"], {n: {"u": 1.0, "v": 1.0} for n in "xyz"})
    apart = [Partition("p0", "u", ("x",)), Partition("p1", "v", ("y",))]
    apart.append(Partition("p2", "u", ("z",)))
    merged = merge_for_stream(q, apart)
    assert [(m.unit, m.nodes) for m in merged] == [("u", ("x", "z")), ("v", ("y",))]
    simulate(q, merged)  # runs: no cycle


@given(problems(max_nodes=7, max_units=3))
@PROPERTY
def test_merged_partitions_run_and_never_stream_slower(p: Problem) -> None:
    if not p.nodes:
        return
    one = {n: p.runnable_units(n)[len(p.nodes) % len(p.runnable_units(n))] for n in p.nodes}
    parts = _parts(p, one)
    merged = merge_for_stream(p, parts)
    assert sorted(n for m in merged for n in m.nodes) == sorted(p.nodes)
    simulate(p, merged)
    before, after = stream_loads(p, parts), stream_loads(p, merged)
    assert max(after.values()) <= max(before.values()) * (1 + 1e-9) + 1e-9


@needs_solver
@given(problems(max_nodes=6, max_units=3))
@PROPERTY
def test_bounds_hold_for_every_plan(p: Problem) -> None:
    """The fractional bound holds for every stream (copies too); the CP-SAT relaxation for
    every single pipeline: checked against every assignment's merged plan."""
    if not p.nodes or len(p.nodes) > 5:
        return
    frac = fractional_bound(p)
    relax = solve_pipeline(p, time_limit=5.0)
    assert relax.status == "optimal"
    import itertools

    for combo in itertools.product(*(p.runnable_units(n) for n in p.nodes)):
        assignment = dict(zip(p.nodes, combo, strict=True))
        for parts in (_parts(p, assignment), merge_for_stream(p, _parts(p, assignment))):
            load = max(stream_loads(p, parts).values())
            assert relax.bound_us <= load * (1 + 1e-9) + 1e-6
            assert frac <= load * (1 + 1e-9) + 1e-6


def test_the_fractional_bound_is_what_copies_reach() -> None:
    p = Problem(
        ["a", "b"],
        ["u", "v"],
        {n: {"u": 6.0, "v": 6.0} for n in "ab"},
        edges=[Edge("a", "b", 0, ("a_out",))],
        call_overhead_us={"u": 2.0, "v": 2.0},
    )
    # two copies, each running every other frame: (6 + 6 + 2) / 2 per frame
    assert fractional_bound(p) == pytest.approx(7.0, rel=1e-6)
    assert data_parallel_units(p) == ["u", "v"]


@needs_solver
def test_throughput_plan_beats_the_latency_plan_where_a_unit_idles() -> None:
    """The npu runs most of a chain of convolutions twice as fast as the cpu: the latency plan
    leaves the cpu idle; a throughput plan gives it a share of the chain."""
    convs = [{"cpu": 100.0, "npu": 50.0}] * 12
    p = _chain([*convs, {"cpu": 5.0}], nbytes=1000, call_overhead_us={"cpu": 10, "npu": 10})
    latency = plan_from_assignment(
        p, {n: "npu" if i < 12 else "cpu" for i, n in enumerate(p.nodes)}
    )
    r = plan_throughput(p, time_limit=5.0, plans={"auto": latency})
    assert r.baselines["latency plan"].fps == pytest.approx(1e6 / (600 + 10), rel=1e-6)
    assert r.best.fps >= 1.3 * r.baselines["latency plan"].fps
    assert r.best.fps >= r.baselines["best single unit"].fps
    assert r.best.fps <= r.fps_bound * (1 + 1e-9)
    assert {q.unit for q in r.best.plan.partitions} == {"cpu", "npu"}
    # a frame of slack beyond what the simulation needs, at the same period
    need = tune_in_flight(p, r.best.plan.partitions)
    assert r.best.in_flight == need.in_flight + 1
    assert r.best.period_us <= need.period_us * (1 + 1e-9)
    again = plan_throughput(p, time_limit=5.0, plans={"auto": latency})
    assert [(q.unit, q.nodes) for q in again.best.plan.partitions] == [
        (q.unit, q.nodes) for q in r.best.plan.partitions
    ]


def test_copies_of_the_whole_model_when_units_run_it_alone() -> None:
    p = make_problem("chain", "two_equal")
    r = plan_throughput(p, time_limit=2.0)
    dp = r.baselines["data-parallel"]
    assert dp.copies == ({"u0": "u1"},)
    # each copy keeps a frame of slack beyond what it needs
    need = plan_throughput(p, time_limit=2.0, slack=0).baselines["data-parallel"]
    assert [t.in_flight for t in dp.timings] == [t.in_flight + 1 for t in need.timings]
    assert dp.fps == pytest.approx(2 * r.baselines["best single unit"].fps)
    assert r.best.fps >= dp.fps * (1 - 1e-9)
    assert r.status == "optimal"  # the copies meet the fractional bound


def test_copies_side_by_side_slow_each_other() -> None:
    p = dataclasses.replace(make_problem("chain", "two_equal"), corun={"u0": 1.25, "u1": 1.25})
    r = plan_throughput(p, time_limit=2.0)
    dp, single = r.baselines["data-parallel"], r.baselines["best single unit"]
    busy = [max(t.utilisation().values()) for t in dp.timings]
    # each copy runs while the other is busy (about all the time): 1.25x slower; one unit
    # alone is not slowed
    assert min(busy) > 0.9
    assert dp.fps == pytest.approx(2 * single.fps / (1 + 0.25 * min(busy)), rel=0.02)
    assert r.status != "optimal"  # the copies no longer meet the plain-cost bound


def test_a_latency_bound_no_plan_meets_names_the_best_latency() -> None:
    p = _chain([{"u": 100.0}, {"u": 100.4}])
    with pytest.raises(InfeasiblePlanError, match=r"fastest plan found takes 0\.201 ms"):
        plan_throughput(p, time_limit=1.0, max_latency_us=150.0)
    ok = plan_throughput(p, time_limit=1.0, max_latency_us=201.0)  # what it said is enough
    assert ok.best.latency_us(99) <= 201.0
    assert ok.best.in_flight == 1  # no frame of slack under a bound: it would wait behind one


def test_a_small_predicted_gain_from_more_cuts_keeps_the_simpler_stream() -> None:
    """A two-stage pipeline streams 4 % faster than the whole chain on one unit: on measured
    units (``simpler_within``, the pipeline's MEASURED_PLAN_MARGIN) the one-partition stream
    is kept; a pipeline twice as fast is kept whatever the margin."""
    from partuner.plan.stream_plan import _simplest

    p = _chain([{"u": 100.0, "v": 200.0}, {"u": 4.0, "v": 4.0}])
    one = stream_plan_of(p, plan_from_assignment(p, {"n0": "u", "n1": "u"}), "one")
    two = stream_plan_of(p, plan_from_assignment(p, {"n0": "u", "n1": "v"}), "two")
    assert two.fps / one.fps == pytest.approx(1.04)
    found = {"one": one, "two": two}
    assert _simplest(found, 0.0) is two
    assert _simplest(found, 0.05) is one
    assert _simplest(found, 0.03) is two
    q = _chain([{"u": 100.0, "v": 100.0}, {"u": 100.0, "v": 100.0}])
    one = stream_plan_of(q, plan_from_assignment(q, {"n0": "u", "n1": "u"}), "one")
    two = stream_plan_of(q, plan_from_assignment(q, {"n0": "u", "n1": "v"}), "two")
    assert _simplest({"one": one, "two": two}, 0.05) is two


def test_many_partitions_merge_their_neighbours_as_the_full_search_would(monkeypatch) -> None:
    """Above MERGE_SEARCH_MAX partitions merge_for_stream merges only neighbours in a
    topological order (the pairwise search is cubic: a 2000-node chain took minutes); on a
    chain that is all a merge can do, so both give the same partitions."""
    import random

    from partuner.plan import stream_search

    rng = random.Random(3)
    for _ in range(5):
        units = [rng.choice("uv") for _ in range(40)]
        p = _chain([{"u": 1.0, "v": 1.0}] * len(units))
        parts = [Partition(f"p{i}", u, (f"n{i}",)) for i, u in enumerate(units)]
        full = merge_for_stream(p, parts)
        monkeypatch.setattr(stream_search, "MERGE_SEARCH_MAX", 4)
        quick = merge_for_stream(p, parts)
        monkeypatch.undo()
        assert [(q.unit, q.nodes) for q in quick] == [(q.unit, q.nodes) for q in full]
        runs = 1 + sum(a != b for a, b in zip(units, units[1:], strict=False))
        assert len(full) == runs


def test_a_problem_without_nodes_has_nothing_to_stream() -> None:
    with pytest.raises(InfeasiblePlanError, match="no frame to stream"):
        plan_throughput(Problem([], ["u"], {}), time_limit=1.0)


@given(problems(max_nodes=7, max_units=3))
@PROPERTY
def test_greedy_pipelines_place_every_node_where_it_can_run(p: Problem) -> None:
    """Every greedy pipeline is a plan: each node on a unit able to run it, and it streams."""
    for assignment in greedy_pipelines(p):
        assert set(assignment) == set(p.nodes)
        assert all(math.isfinite(p.cost[n][u]) for n, u in assignment.items())
        parts = merge_for_stream(p, _parts(p, assignment))
        assert simulate_stream(p, parts, in_flight=2).period_us > 0
    assert greedy_pipelines(p) == greedy_pipelines(p)  # the same problem, the same pipelines


def test_greedy_pipeline_cuts_a_chain_into_balanced_stages_on_every_unit() -> None:
    """Twelve equal convolutions, four npus and a cpu as fast, the cpu alone running the last
    node: stages of three convolutions at most (the least a stage can have), where the
    latency plan (all on one npu) streams at a quarter of that."""
    units = ["npu0", "npu1", "npu2", "npu3"]
    convs = [dict.fromkeys([*units, "cpu"], 100.0)] * 12
    p = _chain([*convs, {"cpu": 5.0}], nbytes=1000, call_overhead_us=dict.fromkeys(units, 5.0))
    got = greedy_pipelines(p)
    assert got
    loads = stream_loads(p, merge_for_stream(p, _parts(p, got[0])))
    assert max(loads.values()) <= 3 * 100.0 + 5.0  # three convolutions a stage at most
    on_one = {n: "npu0" if i < 12 else "cpu" for i, n in enumerate(p.nodes)}
    latency = plan_from_assignment(p, on_one)
    r = plan_throughput(p, time_limit=1.0, plans={"auto": latency})
    assert "pipeline (greedy)" in r.candidates
    assert r.best.fps >= 3.0 * r.baselines["latency plan"].fps
