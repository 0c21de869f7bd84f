"""Simulated annealing on plans, and auto's stages as they are reported."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings

from partuner.plan import get_scheduler, plan_from_schedule
from partuner.plan.auto import Auto
from partuner.plan.clock import EVAL_S_PER_NODE, WorkClock
from partuner.plan.local import Run, anneal, list_schedule
from partuner.plan.problem import Edge, Link, Problem
from test_plan_cases import problems

INF = math.inf


def _run(problem: Problem, assignment: dict[str, str]) -> Run:
    s = list_schedule(problem, assignment, problem.nodes, "start")
    return Run(s, plan_from_schedule(problem, s), 0.0)


def _fork(width: int = 4) -> Problem:
    """A fork of ``width`` equal branches of two nodes each between a head and a tail: on two
    equal units, half the branches belong on each unit, which no single move of one node from
    the all-on-one-unit plan shows (a lone node across the link costs more than it saves)."""
    nodes, edges = ["head"], []
    for b in range(width):
        nodes += [f"b{b}a", f"b{b}b"]
        edges += [Edge("head", f"b{b}a", 1000, ("h",)), Edge(f"b{b}a", f"b{b}b", 1000, (f"x{b}",))]
        edges.append(Edge(f"b{b}b", "tail", 1000, (f"y{b}",)))
    nodes.append("tail")
    return Problem(
        nodes=nodes,
        units=["u0", "u1"],
        cost={n: {"u0": 10.0, "u1": 10.0} for n in nodes},
        edges=edges,
        links={("u0", "u1"): Link(3.0, INF)},
        call_overhead_us={"u0": 2.0, "u1": 2.0},
        name="fork",
    )


def test_annealing_finds_branch_parallelism_from_one_unit():
    p = _fork()
    start = _run(p, dict.fromkeys(p.nodes, "u0"))
    got = anneal(p, start, 400 * EVAL_S_PER_NODE * len(p.nodes), "anneal")
    assert got.plan.predicted_us < start.plan.predicted_us * 0.8
    assert {pt.unit for pt in got.plan.partitions} == {"u0", "u1"}


def test_annealing_is_reproducible_and_charged_as_work():
    p = _fork()
    start = _run(p, dict.fromkeys(p.nodes, "u0"))
    budget = 200 * EVAL_S_PER_NODE * len(p.nodes)
    clock = WorkClock(60.0)
    a = anneal(p, start, budget, "anneal", clock)
    b = anneal(p, start, budget, "anneal")
    assert a.schedule.assignment == b.schedule.assignment
    assert a.plan.predicted_us == b.plan.predicted_us
    assert 0 < clock.now() <= budget + 1e-12  # moves are charged, never past the budget
    other = anneal(p, start, budget, "anneal", seed=5)  # another seed may walk elsewhere
    other.schedule.validate(p)
    assert other.plan.predicted_us <= start.plan.predicted_us


SLOW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(problems(max_nodes=8, max_units=3))
def test_annealing_never_returns_worse_than_its_start(problem):
    problem.validate()
    start_s = get_scheduler("heft").schedule(problem)
    start = Run(start_s, plan_from_schedule(problem, start_s), 0.0)
    got = anneal(problem, start, 50 * EVAL_S_PER_NODE * len(problem.nodes), "anneal")
    assert got.plan.predicted_us <= start.plan.predicted_us
    got.schedule.validate(problem)


def test_auto_reports_its_stages_with_the_best_plan_and_bound_so_far():
    heard = []
    p = _fork()
    auto = Auto(progress=lambda stage, best, bound: heard.append((stage, best, bound)))
    s = auto.schedule(p, time_limit=1.0)
    stages = [h[0] for h in heard]
    assert stages[0] == "annealing" and "annealing again" in stages
    bests = [h[1] for h in heard]
    assert bests == sorted(bests, reverse=True)  # the best so far never gets worse
    final = plan_from_schedule(p, s).predicted_us
    assert all(bound <= final + 1e-9 for _, _, bound in heard)


def test_a_patient_annealing_keeps_its_budget_through_the_hot_half():
    """Where nothing beats the start, the first stage gives its budget back after a quarter of
    its steps without a new best; a patient one (auto's last stage) only in its second half."""
    p = _fork()
    slow = {n: {"u0": 10.0, "u1": 1000.0} for n in p.nodes}
    p = Problem(p.nodes, p.units, slow, p.edges, links=p.links, name="slow u1")
    start = _run(p, dict.fromkeys(p.nodes, "u0"))
    budget = 4000 * EVAL_S_PER_NODE * len(p.nodes)
    spent = {}
    for patient in (False, True):
        clock = WorkClock(60.0)
        got = anneal(p, start, budget, "anneal", clock, patient=patient)
        assert got is start
        spent[patient] = clock.now() / budget
    assert spent[False] < 0.3
    assert spent[True] >= 0.5


def test_auto_stops_once_its_best_plan_meets_a_proven_bound():
    """Where one unit is far faster at every node, the heuristics' plan meets the block bound:
    auto returns it as optimal without running the later stages (no solver, no annealing)."""
    p = _fork()
    slow = {n: {"u0": 10.0, "u1": 1000.0} for n in p.nodes}
    p = Problem(p.nodes, p.units, slow, p.edges, links=p.links, name="slow u1")
    heard = []
    auto = Auto(progress=lambda stage, best, bound: heard.append(stage))
    s = auto.schedule(p, time_limit=5.0)
    assert s.status == "optimal" and set(s.assignment.values()) == {"u0"}
    assert heard == [] and not {"exact", "pexact"} & set(auto.runs)
    # unless asked for every stage's plan (plan --compare, stream candidates)
    every = Auto(progress=lambda stage, best, bound: heard.append(stage), stop_at_bound=False)
    assert every.schedule(p, time_limit=5.0).assignment == s.assignment
    assert heard[0] == "annealing" and "annealing again" in heard
    assert heard[-1] == "annealing the partitions"  # the last stage, with the budget kept for it
    # where the heuristics' plan misses the bound, the stages run as before
    heard.clear()
    Auto(progress=lambda stage, best, bound: heard.append(stage)).schedule(_fork(), time_limit=1)
    assert heard[0] == "annealing"
