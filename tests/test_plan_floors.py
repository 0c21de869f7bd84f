"""Path-and-load floors (:mod:`partuner.plan.floors`): below every plan, and tight where the
links make branch parallelism a loss."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from partuner.plan import Edge, Link, Problem, get_scheduler, plan_from_schedule
from partuner.plan.common import lower_bound
from partuner.plan.decompose import Region
from partuner.plan.floors import Floors, block_floor, floor_bound
from partuner.plan.problem import FusedGroup
from test_plan_cases import PROPERTY, optimum, problems


@st.composite
def costly_problems(draw) -> Problem:
    """Tiny random problems with boundary costs per byte and fused pairs besides."""
    p = draw(problems(max_nodes=5, max_units=3))
    groups = []
    for e in p.edges:
        if draw(st.integers(0, 3)) == 0 and not any(e.src in g.nodes for g in groups):
            pair = (e.src, e.dst)
            groups.append(
                FusedGroup(pair, {u: 0.5 * (p.cost[e.src][u] + p.cost[e.dst][u]) for u in p.units})
            )
    return Problem(
        nodes=p.nodes,
        units=p.units,
        cost=p.cost,
        edges=p.edges,
        links=p.links,
        default_link=p.default_link,
        call_overhead_us=p.call_overhead_us,
        boundary_us_per_byte={u: draw(st.sampled_from([0.0, 1e-4, 1e-2])) for u in p.units},
        boundary_out_us_per_byte={u: draw(st.sampled_from([0.0, 3e-3])) for u in p.units},
        groups=[g for g in groups if all(n in p.nodes for n in g.nodes)],
        name="random",
        resources=p.resources,
    )


@PROPERTY
@given(p=problems(max_nodes=5, max_units=3))
def test_the_floor_is_below_every_plan(p: Problem) -> None:
    best = optimum(p)
    got = floor_bound(p)
    assert got <= best * (1 + 1e-9) + 1e-9, (got, best)


@PROPERTY
@given(p=costly_problems())
def test_the_floor_holds_with_boundary_costs_and_fused_groups(p: Problem) -> None:
    best = optimum(p)
    assert floor_bound(p) <= best * (1 + 1e-9) + 1e-9


def fork_join(latency_us: float, nbytes: int = 0) -> Problem:
    """a -> (b, c) -> d, 10 µs each on two equal units."""
    pairs = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    return Problem(
        list("abcd"),
        ["u", "v"],
        {n: {"u": 10.0, "v": 10.0} for n in "abcd"},
        [Edge(s, t, nbytes, (f"{s}:out",)) for s, t in pairs],
        default_link=Link(latency_us, 1.0),
    )


def test_slow_links_prove_the_one_unit_plan_optimal() -> None:
    # b beside c on the other unit would cost two 30 µs crossings: all on one unit, 40 µs
    p = fork_join(30.0)
    assert optimum(p) == 40.0
    assert lower_bound(p, partitions=True) == 30.0  # the critical path: weaker
    assert math.isclose(floor_bound(p), 40.0, rel_tol=1e-6)


def test_fast_links_leave_room_for_branches_side_by_side() -> None:
    p = fork_join(1.0)
    best = optimum(p)
    assert best == 31.0  # a and b on u, c beside b on v (1 µs to get there), d after it on v
    assert 30.0 <= floor_bound(p) <= best


def test_bytes_count_on_the_links() -> None:
    # 1 GB/s: 20 kB take 20 µs each way, so the branch stays home even with no latency
    p = fork_join(0.0, nbytes=20_000)
    assert math.isclose(floor_bound(p), optimum(p), rel_tol=1e-6)


def test_a_unit_slow_to_call_pays_for_the_branches_it_hands_off() -> None:
    # a -> (b, c, d) -> j -> t; a, j and t run on the cpu only, a call there costs 30 µs.
    # Handing b (40 µs on the cpu, 30 on the npu) to the npu with c and d left beside it
    # needs two more cpu partitions (one beside the npu's, one to take its result back):
    # the best plan keeps everything on the cpu. Counting one call per resumed partition
    # only (paths and loads alone) would allow 100 µs.
    inf = math.inf
    cost = {
        "a": {"cpu": 10.0, "npu": inf},
        "b": {"cpu": 40.0, "npu": 30.0},
        "c": {"cpu": 10.0, "npu": 10.0},
        "d": {"cpu": 5.0, "npu": 10.0},
        "j": {"cpu": 10.0, "npu": inf},
        "t": {"cpu": 10.0, "npu": inf},
    }
    pairs = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "j"), ("c", "j"), ("d", "j"), ("j", "t")]
    p = Problem(
        list("abcdjt"),
        ["cpu", "npu"],
        cost,
        [Edge(s, t, 0, (f"{s}:out",)) for s, t in pairs],
        default_link=Link(0.0, 16.0),
        call_overhead_us={"cpu": 30.0, "npu": 0.0},
    )
    assert optimum(p) == 115.0  # 30 + the six nodes on the cpu
    assert math.isclose(floor_bound(p), 115.0, rel_tol=1e-6)
    block = Region("a", ("b", "c", "d", "j"), "j")
    assert math.isclose(block_floor(p, block, "cpu", "cpu"), 65.0, rel_tol=1e-6)


def test_units_that_take_turns_with_home_do_not_share_its_work() -> None:
    # a -> (b, c) -> j -> t on twin npus and a cpu three times slower, 5 µs a call, 10 µs
    # links. Handing b to the twin without working beside it only adds the hand-off; working
    # beside it costs two more calls and the crossings on b's path: all on one npu is best.
    # Spreading the handed-off work over both other units as if they ran it beside home
    # would allow 75 µs.
    cost = {n: {"npu0": 10.0, "npu1": 10.0, "cpu": 30.0} for n in "acjt"}
    cost["b"] = {"npu0": 40.0, "npu1": 40.0, "cpu": 120.0}
    pairs = [("a", "b"), ("a", "c"), ("b", "j"), ("c", "j"), ("j", "t")]
    p = Problem(
        list("abcjt"),
        ["npu0", "npu1", "cpu"],
        cost,
        [Edge(s, t, 0, (f"{s}:out",)) for s, t in pairs],
        default_link=Link(10.0, 16.0),
        call_overhead_us=dict.fromkeys(("npu0", "npu1", "cpu"), 5.0),
    )
    assert optimum(p) == 85.0  # 5 + the five nodes on one npu
    assert math.isclose(floor_bound(p), 85.0, rel_tol=1e-6)


def test_a_handed_off_node_pays_the_read_back_of_its_output() -> None:
    # a -> (b -> rb, d, c) -> j -> t, all on the cpu but b and d. b is 4x faster on the npu,
    # but rb (cpu only) must read b's 20 kB output back at 2 ns a byte (40 µs) in a partition
    # of its own: all on the cpu is best. Charging only the smallest edge's read (d's 100 B)
    # would allow 85 µs.
    inf = math.inf
    cost = {
        "a": {"cpu": 10.0, "npu": inf},
        "b": {"cpu": 40.0, "npu": 10.0},
        "rb": {"cpu": 5.0, "npu": inf},
        "d": {"cpu": 1.0, "npu": 1.0},
        "c": {"cpu": 40.0, "npu": inf},
        "j": {"cpu": 10.0, "npu": inf},
        "t": {"cpu": 5.0, "npu": inf},
    }
    pairs = [("a", "b"), ("b", "rb"), ("a", "d"), ("a", "c"), ("rb", "j"), ("d", "j")]
    pairs += [("c", "j"), ("j", "t")]
    p = Problem(
        list(cost),
        ["cpu", "npu"],
        cost,
        [Edge(s, t, 20_000 if s == "b" else 100, (f"{s}:out",)) for s, t in pairs],
        default_link=Link(0.0, 16.0),
        call_overhead_us={"cpu": 2.0, "npu": 0.0},
        boundary_us_per_byte={"cpu": 2e-3},
    )
    assert optimum(p) == 113.0  # 2 + the seven nodes on the cpu
    assert math.isclose(floor_bound(p), 113.0, rel_tol=1e-6)


def test_a_block_nobody_can_end_on_a_unit_is_infinite() -> None:
    p = fork_join(1.0)
    p2 = Problem(
        p.nodes,
        p.units,
        {**p.cost, "d": {"u": 10.0, "v": math.inf}},
        p.edges,
        default_link=p.default_link,
    )
    block = Region("a", ("b", "c", "d"), "d")
    assert block_floor(p2, block, "u", "v") == math.inf
    assert block_floor(p2, block, "u", "u") > 0


def test_blocks_split_at_articulation_nodes() -> None:
    p = fork_join(1.0)
    floors = Floors(p)
    whole = Region(None, tuple(p.nodes), None)
    assert [b.nodes for b in floors.blocks(whole)] == [("a",), ("b", "c", "d")]
    assert [(b.entry, b.exit) for b in floors.blocks(whole)] == [(None, "a"), ("a", None)]


def test_auto_reports_the_floor_when_it_is_the_best_bound() -> None:
    # three branches, links too slow to use: the floor proves the one-unit plan optimal
    pairs = [("a", "b"), ("a", "c"), ("a", "e"), ("b", "d"), ("c", "d"), ("e", "d")]
    p = Problem(
        list("abced"),
        ["u", "v", "w"],
        {n: {"u": 10.0, "v": 10.0, "w": 10.0} for n in "abced"},
        [Edge(s, t, 0, (f"{s}:out",)) for s, t in pairs],
        default_link=Link(50.0, 1.0),
        call_overhead_us={"u": 2.0, "v": 2.0, "w": 2.0},
    )
    s = get_scheduler("auto").schedule(p, time_limit=2)
    assert plan_from_schedule(p, s).predicted_us == 52.0
    assert s.lower_bound is not None and math.isclose(s.lower_bound, 52.0, rel_tol=1e-6)
    assert s.status == "optimal"
