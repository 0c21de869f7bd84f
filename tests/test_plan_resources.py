"""Units that share hardware (a 2-thread unit on the cores of two 1-thread units), fused groups."""

from __future__ import annotations

import pytest

from partuner.errors import InvalidScheduleError, PartunerError
from partuner.plan import (
    Edge,
    FusedGroup,
    Partition,
    Problem,
    Schedule,
    Slot,
    get_scheduler,
    make_partitions,
    simulate,
    total_work_bound,
)
from partuner.plan.simulate import partition_cost

CORES = {"cpu0": {"core0"}, "cpu1": {"core1"}, "cpu01": {"core0", "core1"}}


def two_core(cost_2t: float = 6.0) -> Problem:
    """a -> (b, c) -> d; each node costs 10 on a 1-thread unit, cost_2t on the 2-thread one."""
    nodes = ["a", "b", "c", "d"]
    cost = {n: {"cpu0": 10.0, "cpu1": 10.0, "cpu01": cost_2t} for n in nodes}
    edges = [Edge("a", "b", 0), Edge("a", "c", 0), Edge("b", "d", 0), Edge("c", "d", 0)]
    return Problem(nodes, ["cpu0", "cpu1", "cpu01"], cost, edges, resources=CORES)


def test_conflicts_and_work_bound():
    p = two_core()
    assert p.conflicts("cpu0") == {"cpu0", "cpu01"}
    assert p.conflicts("cpu01") == {"cpu0", "cpu1", "cpu01"}
    assert p.shares_hardware
    # 4 nodes x min(10 x 1 core, 6 x 2 cores) = 40 core-µs over 2 cores
    assert total_work_bound(p) == 20.0
    assert not Problem(["a"], ["u", "v"], {"a": {"u": 1, "v": 1}}).shares_hardware


def test_overlap_on_shared_hardware_is_invalid():
    p = two_core()
    s = Schedule(
        {
            "a": Slot("a", "cpu01", 0, 6),
            "b": Slot("b", "cpu0", 6, 16),
            "c": Slot("c", "cpu01", 10, 16),  # overlaps b on core0
            "d": Slot("d", "cpu1", 16, 26),
        },
        "hand",
    )
    with pytest.raises(InvalidScheduleError, match="'cpu0' and 'cpu01', which share 'core0'"):
        s.validate(p)


@pytest.mark.parametrize("name", ["heft", "single"])
def test_schedulers_respect_shared_hardware(name):
    p = two_core()
    s = get_scheduler(name).schedule(p)
    s.validate(p)
    parts = make_partitions(p, s)
    t = simulate(p, parts)
    for x in parts:
        for y in parts:
            if x is not y and y.unit in p.conflicts(x.unit):
                assert (
                    t.end_us[x.name] <= t.start_us[y.name] or t.end_us[y.name] <= t.start_us[x.name]
                )


def test_mixing_intra_op_and_branch_parallel_units_is_valid():
    # a, d on the 2-thread unit (8 each), b || c on the two 1-thread units (10): 26 < 4 x 8
    p = two_core(cost_2t=8.0)
    mixed = Schedule(
        {
            "a": Slot("a", "cpu01", 0, 8),
            "b": Slot("b", "cpu0", 8, 18),
            "c": Slot("c", "cpu1", 8, 18),
            "d": Slot("d", "cpu01", 18, 26),
        },
        "hand",
    )
    mixed.validate(p)
    parts = make_partitions(p, mixed)
    assert [x.unit for x in parts] == ["cpu01", "cpu0", "cpu1", "cpu01"]
    assert simulate(p, parts).makespan_us == 26.0
    assert get_scheduler("single").schedule(p).makespan == 32.0  # all on the 2-thread unit
    assert get_scheduler("heft").schedule(p).makespan >= 26.0  # 26 is optimal here


def test_partition_cost_counts_whole_consecutive_groups():
    p = Problem(
        ["a", "b", "c"],
        ["u"],
        {"a": {"u": 10.0}, "b": {"u": 5.0}, "c": {"u": 5.0}},
        [Edge("a", "b", 0), Edge("b", "c", 0)],
        call_overhead_us={"u": 2.0},
        groups=[FusedGroup(("a", "b"), {"u": 11.0}), FusedGroup(("b", "c"), {"u": 6.0})],
    )
    p.validate()
    # both groups overlap on b: the larger saving (a+b: 4) wins
    assert partition_cost(p, "u", ["a", "b", "c"]) == 2 + 20 - 4
    assert partition_cost(p, "u", ["b", "c"]) == 2 + 10 - 4
    assert partition_cost(p, "u", ["a"]) == 2 + 10
    parts = [Partition("p0", "u", ("a",)), Partition("p1", "u", ("b", "c"))]
    assert simulate(p, parts).makespan_us == (2 + 10) + (2 + 6)


def test_bad_groups_and_resources_are_named():
    p = two_core()
    p.groups = [FusedGroup(("a", "d"), {"cpu0": 1.0})]
    with pytest.raises(PartunerError, match="not a chain"):
        p.validate()
    q = Problem(["a"], ["u"], {"a": {"u": 1.0}}, resources={"gpu": {"x"}})
    with pytest.raises(PartunerError, match="unknown unit 'gpu'"):
        q.validate()


def test_json_round_trip_keeps_resources_and_groups():
    p = two_core()
    p.groups = [FusedGroup(("a", "b"), {"cpu0": 15.0})]
    p.default_unit = "cpu1"
    q = Problem.from_json(p.to_json())
    assert q.resources == p.resources
    assert q.groups == p.groups
    assert q.default == "cpu1"


def test_units_that_slow_each_other_are_charged_where_they_run_at_once():
    """b and c run at once on cpu0 and cpu1, each slowed by its measured factor; a and d run
    alone and pay nothing; auto weighs it (one core beats the branches when they slow each
    other by more than 2x)."""
    from dataclasses import replace

    plain = two_core()
    parts = [
        Partition("p0", "cpu0", ("a",)),
        Partition("p1", "cpu0", ("b",)),
        Partition("p2", "cpu1", ("c",)),
        Partition("p3", "cpu0", ("d",)),
    ]
    assert simulate(plain, parts).makespan_us == pytest.approx(30.0)
    t = simulate(replace(plain, corun={"cpu0": 1.5, "cpu1": 2.0}), parts)
    assert t.end_us["p0"] == pytest.approx(10.0)  # alone: nothing charged
    assert t.end_us["p1"] == pytest.approx(25.0)  # beside c all its run: x1.5
    assert t.end_us["p2"] == pytest.approx(30.0)  # beside b all its run: x2
    assert t.makespan_us == pytest.approx(40.0)
    two = Problem(
        plain.nodes,
        ["cpu0", "cpu1"],
        {n: {"cpu0": 10.0, "cpu1": 10.0} for n in plain.nodes},
        plain.edges,
        resources={"cpu0": {"core0"}, "cpu1": {"core1"}},
    )

    def auto(p: Problem) -> list[Partition]:
        return make_partitions(p, get_scheduler("auto").schedule(p, time_limit=2.0))

    assert simulate(two, auto(two)).makespan_us == pytest.approx(30.0)
    slow = replace(two, corun={"cpu0": 2.2, "cpu1": 2.2})
    parts = auto(slow)
    assert simulate(slow, parts).makespan_us == pytest.approx(40.0)
    assert len({p.unit for p in parts}) == 1
