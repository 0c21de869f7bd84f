"""Chain-shaped problems: the segment DP's bound and plan against every segmentation."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partuner.errors import InfeasiblePlanError
from partuner.plan import get_scheduler
from partuner.plan.chain import chain_order, segment_plan, segment_plan_whole_handoff
from partuner.plan.partitions import Partition, simulate
from partuner.plan.problem import Edge, FusedGroup, Link, Problem

INF = math.inf


@st.composite
def chains(draw, skips: bool = True, groups: bool = True) -> Problem:
    """A chain of 2-6 nodes (each reads the one before it), optionally with skip edges to
    later nodes (DenseNet's concatenations), on 1-3 units with random costs (some infinite),
    links, call overheads, boundary costs and fused pairs."""
    n = draw(st.integers(2, 6))
    k = draw(st.integers(1, 3))
    nodes = [f"n{i}" for i in range(n)]
    units = [f"u{j}" for j in range(k)]
    cost = {}
    for v in nodes:
        row = {u: draw(st.sampled_from([0.0, 1.0, 4.0, 10.0, 25.0, INF])) for u in units}
        if all(math.isinf(c) for c in row.values()):
            row[units[0]] = 3.0
        cost[v] = row
    edges = [
        Edge(nodes[i], nodes[i + 1], draw(st.sampled_from([0, 500, 4000])), (f"v{i}",))
        for i in range(n - 1)
    ]
    if skips:
        for i in range(n):
            for j in range(i + 2, n):
                if draw(st.booleans()):
                    edges.append(Edge(nodes[i], nodes[j], 1000 * (i + 1), (f"v{i}",)))
    links = {}
    for a, b in itertools.combinations(units, 2):
        links[(a, b)] = Link(
            draw(st.sampled_from([0.0, 2.0, 15.0])), draw(st.sampled_from([0.5, 5.0, INF]))
        )
    fused = []
    if groups:
        for i in range(n - 1):
            if draw(st.integers(0, 3)) == 0:
                a, b = nodes[i], nodes[i + 1]
                fused.append(
                    FusedGroup((a, b), {u: (cost[a][u] + cost[b][u]) * 0.5 for u in units})
                )
    return Problem(
        nodes=nodes,
        units=units,
        cost=cost,
        edges=edges,
        links=links,
        call_overhead_us={u: draw(st.sampled_from([0.0, 1.0, 6.0])) for u in units},
        boundary_us_per_byte={u: draw(st.sampled_from([0.0, 1e-3])) for u in units},
        boundary_out_us_per_byte={u: draw(st.sampled_from([0.0, 2e-3])) for u in units},
        groups=fused,
        name="chain",
    )


def every_plan(problem: Problem):
    """Every segmentation of the chain with every unit per segment that runs: its latency."""
    nodes = problem.nodes
    n = len(nodes)
    for cuts in itertools.product((False, True), repeat=n - 1):
        segs, cur = [], [nodes[0]]
        for v, cut in zip(nodes[1:], cuts, strict=True):
            if cut:
                segs.append(cur)
                cur = []
            cur.append(v)
        segs.append(cur)
        for us in itertools.product(problem.units, repeat=len(segs)):
            parts = [
                Partition(f"p{i}", u, tuple(s))
                for i, (u, s) in enumerate(zip(us, segs, strict=True))
            ]
            try:
                yield simulate(problem, parts).makespan_us
            except InfeasiblePlanError:
                continue


def latency(problem: Problem, parts) -> float:
    return simulate(
        problem, [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(parts)]
    ).makespan_us


SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("programme", [segment_plan, segment_plan_whole_handoff])
@SLOW
@given(problem=chains())
def test_the_segment_bounds_hold_for_every_plan_and_their_plans_run(programme, problem):
    got = programme(problem)
    assert got is not None
    best = min(every_plan(problem))
    tol = 1e-9 * max(1.0, best)
    assert got.bound_us <= best + tol
    assert latency(problem, got.parts) >= best - tol  # a real plan, simulated
    # the finer programme's bound is never below the first one's
    assert got.bound_us >= segment_plan(problem).bound_us - tol


def residual_chain() -> Problem:
    """x -> a -> b -> add(x, b), a residual block: x, a and b run faster on the npu, add only
    on the cpu. Running x, a and b in one npu call (the optimum) hands add two values, x's and
    b's, in one transfer of 8 kB."""
    nodes = ["x", "a", "b", "add"]
    cost = {
        "x": {"cpu": 5.0, "npu": 1.0},
        "a": {"cpu": 40.0, "npu": 2.0},
        "b": {"cpu": 40.0, "npu": 2.0},
        "add": {"cpu": 1.0, "npu": INF},
    }
    edges = [
        Edge("x", "a", 4000, ("x_out",)),
        Edge("a", "b", 4000, ("a_out",)),
        Edge("b", "add", 4000, ("b_out",)),
        Edge("x", "add", 4000, ("x_out",)),
    ]
    return Problem(
        nodes=nodes,
        units=["cpu", "npu"],
        cost=cost,
        edges=edges,
        links={("cpu", "npu"): Link(10.0, 1.0)},
        call_overhead_us={"npu": 30.0},
    )


def test_the_whole_handoff_proves_what_the_last_node_bound_cannot():
    p = residual_chain()
    best = min(every_plan(p))
    cheap, finer = segment_plan(p), segment_plan_whole_handoff(p)
    assert best == 54.0  # 30 + 5 on the npu, 10 + 8 to cross, 1 on the cpu
    assert cheap.bound_us == pytest.approx(50.0)  # x's 4 kB crossing with b's left out
    assert finer.bound_us == pytest.approx(best)
    assert latency(p, finer.parts) == pytest.approx(best)
    sched = get_scheduler("auto").schedule(p, time_limit=2)
    assert sched.status == "optimal" and sched.lower_bound == pytest.approx(best)


@SLOW
@given(chains(skips=False, groups=False))
def test_a_plain_chain_is_solved_exactly(problem):
    got = segment_plan(problem)
    best = min(every_plan(problem))
    tol = 1e-9 * max(1.0, best)
    assert got.bound_us == pytest.approx(best, abs=tol)
    assert latency(problem, got.parts) == pytest.approx(best, abs=tol)


def test_a_graph_with_two_branches_is_not_chain_shaped():
    p = Problem(
        nodes=["a", "b", "c", "d"],
        units=["u"],
        cost={v: {"u": 1.0} for v in "abcd"},
        edges=[Edge("a", "b", 1), Edge("a", "c", 1), Edge("b", "d", 1), Edge("c", "d", 1)],
    )
    assert chain_order(p) is None and segment_plan(p) is None


def test_auto_proves_a_chain_optimal_with_the_segment_bound():
    # a conv-like node every other position runs 10x faster on the npu, over a slow link
    nodes = [f"n{i}" for i in range(40)]
    cost = {v: {"cpu": 10.0, "npu": 1.0 if i % 2 == 0 else INF} for i, v in enumerate(nodes)}
    for i in range(10, 20):  # a stretch of npu-only work long enough to be worth the trip
        cost[nodes[i]]["npu"] = 1.0
    p = Problem(
        nodes=nodes,
        units=["cpu", "npu"],
        cost=cost,
        edges=[Edge(a, b, 4000, (f"{a}_out",)) for a, b in zip(nodes, nodes[1:], strict=False)],
        links={("cpu", "npu"): Link(20.0, 2.0)},
        call_overhead_us={"npu": 5.0},
    )
    seg = segment_plan(p)
    sched = get_scheduler("auto").schedule(p, time_limit=5)
    assert sched.status == "optimal"
    assert sched.lower_bound == pytest.approx(seg.bound_us)
    assert latency(p, seg.parts) == pytest.approx(seg.bound_us)


def residual_chain_of(blocks: int) -> Problem:
    """``blocks`` residual blocks of :func:`residual_chain` one after the other (each block's
    x reads the add before it): 4 * blocks nodes."""
    one = residual_chain()
    nodes, cost, edges = [], {}, []
    for b in range(blocks):
        name = {v: f"{v}{b}" for v in one.nodes}
        nodes += [name[v] for v in one.nodes]
        cost.update({name[v]: dict(one.cost[v]) for v in one.nodes})
        edges += [
            Edge(name[e.src], name[e.dst], e.nbytes, tuple(f"{k}{b}" for k in e.values))
            for e in one.edges
        ]
        if b:
            edges.append(Edge(f"add{b - 1}", f"x{b}", 4000, (f"add_out{b - 1}",)))
    return dataclasses.replace(one, nodes=nodes, cost=cost, edges=edges)


def test_the_whole_handoff_closes_the_gap_on_a_long_chain_and_auto_proves_it():
    p = residual_chain_of(40)  # 160 nodes: beyond what the first programme proves
    cheap, finer = segment_plan(p), segment_plan_whole_handoff(p)
    assert finer.bound_us > cheap.bound_us + 1.0
    assert latency(p, finer.parts) == pytest.approx(finer.bound_us)
    sched = get_scheduler("auto").schedule(p, time_limit=2)
    assert sched.status == "optimal" and sched.lower_bound == pytest.approx(finer.bound_us)


def _long_chain(n: int) -> Problem:
    nodes = [f"n{i}" for i in range(n)]
    cost = {v: {"cpu": 1.0, "npu": 2.0 if i % 3 else 0.5} for i, v in enumerate(nodes)}
    edges = [Edge(a, b, 4) for a, b in itertools.pairwise(nodes)]
    return Problem(nodes, ["cpu", "npu"], cost, edges, default_link=Link(10.0, 1.0))


def test_a_chain_too_long_for_the_budget_skips_the_programme_and_keeps_to_the_baselines(
    monkeypatch,
):
    """The segment programme is O(n^2 u^2) (a 20,000-node chain took minutes at
    --time-limit 2): auto runs it only when its charge fits the budget, and a problem whose
    list heuristics alone would pass the budget is planned with the baselines only."""
    import partuner.plan.auto as auto_mod
    from partuner.plan.clock import chain_charge, start_charge

    calls: list[int] = []
    real = auto_mod.segment_plan
    monkeypatch.setattr(auto_mod, "segment_plan", lambda p: calls.append(1) or real(p))
    p = _long_chain(400)
    assert chain_charge(400, 2) > 0.05 and start_charge(400, 2) > 0.05
    auto = get_scheduler("auto")
    s = auto.schedule(p, time_limit=0.05)
    s.validate(p)
    assert not calls
    assert set(auto.runs) <= set(auto_mod.BASELINES) and "heft" in auto.runs
    s = auto.schedule(p, time_limit=10.0)  # the default budget: proven by the programme
    assert calls and s.status == "optimal" and auto.chosen == "chain"


def test_the_problem_bounds_and_default_unit_are_found_once(monkeypatch):
    """Every scheduler asks for the bound and NEST-C's default unit per node: found once per
    problem (asked per node they made planning quadratic in the nodes)."""
    import partuner.plan.common as common

    p = _long_chain(50)
    counted: list[int] = []
    real = common.critical_path_bound
    monkeypatch.setattr(
        common, "critical_path_bound", lambda *a, **k: counted.append(1) or real(*a, **k)
    )
    first = common.lower_bound(p, partitions=True)
    assert common.lower_bound(p, partitions=True) == first and len(counted) == 1
    assert p.default == "cpu" and "default" in p.__dict__  # cached on the problem


def test_a_long_cycle_is_named_in_a_short_line():
    nodes = [f"n{i}" for i in range(60)]
    edges = [Edge(a, b, 4) for a, b in itertools.pairwise(nodes)] + [Edge("n59", "n0", 4)]
    p = Problem(nodes, ["cpu"], {v: {"cpu": 1.0} for v in nodes}, edges)
    with pytest.raises(InfeasiblePlanError) as exc:
        p.validate()
    msg = str(exc.value)
    assert "a cycle of 60 node(s)" in msg and "..." in msg and len(msg) < 200, msg
