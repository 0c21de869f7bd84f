"""The local searches' fast evaluator predicts what list_schedule + plan_from_schedule do."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from partuner.plan.evaluate import Evaluator
from partuner.plan.exact import schedule_order
from partuner.plan.local import list_schedule
from partuner.plan.partitions import plan_from_schedule
from partuner.plan.problem import Edge, Link, Problem
from test_plan_cases import PROPERTY, problems
from test_plan_floors import costly_problems


def _random_candidate(p: Problem, rng: random.Random) -> tuple[list[int], list[int]]:
    """A unit per node among those able to run it, and a random topological order."""
    assign = [
        p.units.index(rng.choice([u for u in p.units if math.isfinite(p.cost[n][u])]))
        for n in p.nodes
    ]
    waiting = {n: len(p.preds(n)) for n in p.nodes}
    ready = [n for n in p.nodes if waiting[n] == 0]
    order = []
    while ready:
        n = ready.pop(rng.randrange(len(ready)))
        order.append(p.index(n))
        for s in p.succs(n):
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return assign, order


def _check(p: Problem, seed: int, tries: int = 5) -> None:
    ev = Evaluator(p)
    rng = random.Random(seed)
    for _ in range(tries):
        assign, order = _random_candidate(p, rng)
        names = {p.nodes[i]: p.units[u] for i, u in enumerate(assign)}
        s = list_schedule(p, names, [p.nodes[i] for i in order], "x")
        plan = plan_from_schedule(p, s)
        got, parts, seq = ev.judge(assign, order)
        assert math.isclose(got, plan.predicted_us, rel_tol=1e-9, abs_tol=1e-9)
        assert [(p.units[u], tuple(p.nodes[i] for i in ns)) for u, ns in parts] == [
            (pt.unit, pt.nodes) for pt in plan.partitions
        ]
        assert [p.nodes[i] for i in seq] == schedule_order(p, s)


@PROPERTY
@given(p=problems(max_nodes=9, max_units=4), seed=st.integers(0, 1000))
def test_the_evaluator_agrees_with_the_simulation(p: Problem, seed: int) -> None:
    _check(p, seed)


@PROPERTY
@given(p=problems(max_nodes=9, max_units=3, degenerate=True), seed=st.integers(0, 1000))
def test_the_evaluator_agrees_where_times_tie(p: Problem, seed: int) -> None:
    _check(p, seed)


@PROPERTY
@given(
    p=problems(max_nodes=9, max_units=4),
    seed=st.integers(0, 1000),
    factors=st.lists(st.floats(1.0, 2.0), min_size=4, max_size=4),
)
def test_the_evaluator_agrees_where_units_slow_each_other(
    p: Problem, seed: int, factors: list[float]
) -> None:
    corun = dict(zip(p.units, factors, strict=False))
    _check(replace(p, corun=corun), seed)


@PROPERTY
@given(p=costly_problems(), seed=st.integers(0, 1000))
def test_the_evaluator_agrees_with_boundary_costs_and_fused_groups(p: Problem, seed: int) -> None:
    _check(p, seed)


def test_the_evaluator_agrees_on_a_zoo_sized_problem() -> None:
    """A DAG of 120 nodes with branches, several units sharing a core, payloads of several
    values per edge."""
    rng = random.Random(3)
    nodes = [f"n{i}" for i in range(120)]
    units = ["cpu", "cpuall", "npu0", "npu1"]
    edges = []
    for j in range(1, 120):
        for i in rng.sample(range(max(0, j - 6), j), k=min(j, rng.randint(1, 2))):
            edges.append(Edge(nodes[i], nodes[j], rng.choice([4096, 10**5]), (f"v{i}",)))
    cost = {
        n: {
            "cpu": rng.uniform(5, 50),
            "cpuall": rng.uniform(3, 30),
            "npu0": rng.choice([math.inf, rng.uniform(1, 20)]),
            "npu1": rng.choice([math.inf, rng.uniform(1, 20)]),
        }
        for n in nodes
    }
    p = Problem(
        nodes=nodes,
        units=units,
        cost=cost,
        edges=edges,
        links={("npu0", "npu1"): Link(5.0, 10.0)},
        default_link=Link(20.0, 2.0),
        call_overhead_us={u: 10.0 for u in units},
        boundary_us_per_byte={"cpu": 1e-5},
        boundary_out_us_per_byte={"npu0": 2e-5},
        resources={"cpu": frozenset({"c0"}), "cpuall": frozenset({"c0", "c1"})},
        name="zoo-sized",
    )
    _check(p, 0, tries=30)
    _check(replace(p, corun={"cpu": 1.4, "cpuall": 1.3, "npu0": 1.2}), 1, tries=30)
