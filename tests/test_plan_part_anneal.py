"""Simulated annealing on the partitions themselves (plan/part_anneal.py)."""

from __future__ import annotations

import math

from hypothesis import given

from partuner.plan import get_scheduler, plan_from_schedule
from partuner.plan.clock import SIM_S_PER_NODE, SIM_S_PER_PART, WorkClock
from partuner.plan.evaluate import Evaluator
from partuner.plan.local import anneal
from partuner.plan.part_anneal import anneal_partitions
from partuner.plan.problem import Edge, Link, Problem
from partuner.plan.simulate import simulate
from test_plan_cases import problems
from test_plan_local import SLOW, _run

INF = math.inf


def _side_trip() -> Problem:
    """A chain a-b-c-d on u0 (100 us per call) whose d also reads x, which only u1 runs and
    which reads a. Cut by the schedule's rules (u0 stops after a so that x starts early, and
    again before d, whose input from x comes late) u0 makes three calls: 340 us. Two calls
    (a; then b, c, d once x is back) take 247 us: no unit or order change reaches that plan."""
    cost = {n: {"u0": 10.0, "u1": INF} for n in "abcd"}
    cost["x"] = {"u0": INF, "u1": 5.0}
    edges = [Edge(s, t, 0) for s, t in ("ab", "bc", "cd", "ax", "xd")]
    return Problem(
        list("abxcd"),
        ["u0", "u1"],
        cost,
        edges,
        default_link=Link(1.0, INF),
        call_overhead_us={"u0": 100.0, "u1": 0.0},
        name="side trip",
    )


def _step(problem: Problem, parts: int) -> float:
    return SIM_S_PER_NODE * len(problem.nodes) + SIM_S_PER_PART * parts


def test_partitions_the_schedule_rules_cannot_cut_are_found():
    p = _side_trip()
    start = _run(p, {"a": "u0", "b": "u0", "c": "u0", "d": "u0", "x": "u1"})
    assert len(start.plan.partitions) == 4 and math.isclose(start.plan.predicted_us, 340.0)
    # searching units and order leaves the schedule's cuts where they are
    assert anneal(p, start, 0.05, "anneal").plan.predicted_us == start.plan.predicted_us
    got = anneal_partitions(p, start, 500 * _step(p, 4), "parts")
    assert math.isclose(got.plan.predicted_us, 247.0)
    assert sum(pt.unit == "u0" for pt in got.plan.partitions) == 2
    got.schedule.validate(p)
    assert got.schedule.status == got.plan.status == "heuristic"  # no solver's: not "feasible"
    # the plan the schedule carries is the one predicted (its partitions, not cut anew)
    again = plan_from_schedule(p, got.schedule)
    assert [pt.nodes for pt in again.partitions] == [pt.nodes for pt in got.plan.partitions]


def test_partition_annealing_is_reproducible_and_charged_as_work():
    p = _side_trip()
    start = _run(p, {"a": "u0", "b": "u0", "c": "u0", "d": "u0", "x": "u1"})
    budget = 300 * _step(p, 4)
    clock = WorkClock(60.0)
    a = anneal_partitions(p, start, budget, "parts", clock)
    b = anneal_partitions(p, start, budget, "parts")
    assert [pt.nodes for pt in a.plan.partitions] == [pt.nodes for pt in b.plan.partitions]
    assert 0 < clock.now() <= budget + _step(p, 6)  # charged, at most one step past
    # too small a budget for two steps: the start, untouched, nothing charged
    clock = WorkClock(60.0)
    assert anneal_partitions(p, start, 1.9 * _step(p, 4), "parts", clock) is start
    assert clock.now() == 0.0


@SLOW
@given(problems(max_nodes=8, max_units=3))
def test_partition_annealing_never_returns_worse_and_its_plan_runs(problem):
    problem.validate()
    start = _run(problem, get_scheduler("heft").schedule(problem).assignment)
    got = anneal_partitions(problem, start, 200 * _step(problem, len(problem.nodes)), "parts")
    assert got.plan.predicted_us <= start.plan.predicted_us
    got.schedule.validate(problem)
    covered = [n for pt in got.plan.partitions for n in pt.nodes]
    assert sorted(covered) == sorted(problem.nodes)
    for pt in got.plan.partitions:
        assert all(math.isfinite(problem.cost[n][pt.unit]) for n in pt.nodes)
    timing = simulate(problem, got.plan.partitions)
    assert math.isclose(timing.makespan_us, got.plan.predicted_us, rel_tol=1e-9, abs_tol=1e-9)


@SLOW
@given(problems(max_nodes=8, max_units=3))
def test_the_evaluator_simulates_partitions_as_simulate_does(problem):
    problem.validate()
    s = get_scheduler("heft").schedule(problem)
    plan = plan_from_schedule(problem, s)
    ev = Evaluator(problem)
    parts = [
        (ev.unit_index[pt.unit], [ev.node_index[n] for n in pt.nodes]) for pt in plan.partitions
    ]
    assert math.isclose(ev.simulate_parts(parts), plan.predicted_us, rel_tol=1e-9, abs_tol=1e-9)


def test_partition_moves_never_overfill_a_unit():
    """u1 holds one node's weights only: the plan that moves both b and c beside a (faster)
    does not fit, and is never returned."""
    nodes = ["a", "b", "c", "d"]
    edges = [Edge(s, t, 0) for s, t in (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))]
    p = Problem(
        nodes,
        ["u0", "u1"],
        {n: {"u0": 10.0, "u1": 4.0} for n in nodes},
        edges,
        default_link=Link(0.5, INF),
        weight_bytes={n: 100 for n in nodes},
        memory_bytes={"u1": 150},
        name="tight u1",
    )
    start = _run(p, dict.fromkeys(nodes, "u0"))
    got = anneal_partitions(p, start, 500 * _step(p, 4), "parts")
    on_u1 = [n for pt in got.plan.partitions if pt.unit == "u1" for n in pt.nodes]
    assert len(on_u1) <= 1
    assert got.plan.predicted_us < start.plan.predicted_us  # one node there still helps
