"""Partitions: cutting schedules, simulating partitions, and plans."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partuner.errors import InfeasiblePlanError, InvalidScheduleError, PartitionCycleError
from partuner.plan import (
    Edge,
    Link,
    Partition,
    Plan,
    Problem,
    Schedule,
    Slot,
    get_scheduler,
    lower_bound,
    make_partitions,
    plan_from_assignment,
    plan_from_schedule,
    scheduler_names,
    simulate,
)
from partuner.plan.evaluate import Evaluator
from partuner.plan.simulate import crossings, written
from test_plan_cases import CASES, INF, PROPERTY, make_problem, problems

# -- helpers ---------------------------------------------------------------------------------


def random_schedule(data: st.DataObject, p: Problem) -> Schedule:
    """A valid schedule: a registered scheduler's, or random units with random idle time."""
    how = data.draw(st.sampled_from(["random", *scheduler_names()]))
    if how != "random":
        try:
            return get_scheduler(how).schedule(p)
        except InfeasiblePlanError:
            pass  # 'single' when no unit can run everything
    free: dict[str, float] = {}  # per hardware resource
    slots: dict[str, Slot] = {}
    for n in p.nodes:
        u = data.draw(st.sampled_from(p.runnable_units(n)))
        ready = max(
            (slots[q].end + p.comm_us(q, n, slots[q].unit, u) for q in p.preds(n)), default=0
        )
        busy = max((free.get(r, 0.0) for r in p.resources_of(u)), default=0.0)
        start = max(busy, ready) + data.draw(st.sampled_from([0.0, 0.0, 1.5]))
        slots[n] = Slot(n, u, start, start + p.cost[n][u])
        for r in p.resources_of(u):
            free[r] = slots[n].end
    return Schedule(slots, "random")


def run_order(p: Problem, s: Schedule, unit: str) -> list[str]:
    on = [n for n in p.nodes if s.slots[n].unit == unit]
    return sorted(on, key=lambda n: (s.slots[n].start, s.slots[n].end, p.index(n)))


def deps(p: Problem, parts: list[Partition]) -> dict[int, set[int]]:
    """Partition graph: data edges plus each hardware resource's run order."""
    where = {n: i for i, part in enumerate(parts) for n in part.nodes}
    out: dict[int, set[int]] = {i: set() for i in range(len(parts))}
    for e in p.edges:
        if where[e.src] != where[e.dst]:
            out[where[e.src]].add(where[e.dst])
    last: dict[str, int] = {}
    for i, part in enumerate(parts):
        for r in p.resources_of(part.unit):
            if r in last:
                out[last[r]].add(i)
            last[r] = i
    return out


def feeds_other_unit_early(p: Problem, s: Schedule, a: str, b: str) -> bool:
    """Does another unit start on a's output before b (a's unit's next node) ends?"""
    u = s.slots[a].unit
    return any(s.slots[c].unit != u and s.slots[c].start < s.slots[b].end for c in p.succs(a))


def feeds_other_unit_before_later(p: Problem, s: Schedule, a: str) -> bool:
    """Rule (e), as a necessary condition: another unit starts on a's output before some later
    node of a's unit ends, with more than a call overhead between a's end and that node's."""
    u, end = s.slots[a].unit, s.slots[a].end
    later = [sl.end for sl in s.slots.values() if sl.unit == u and sl.start >= end]
    over = p.call_overhead_us.get(u, 0.0)
    return any(
        s.slots[c].unit != u and s.slots[c].start < t and t - end > over
        for c in p.succs(a)
        for t in later
    )


def shared_ran_between(p: Problem, s: Schedule, a: str, b: str) -> bool:
    """Did a unit sharing hardware with a's unit run a node between nodes a and b?"""
    u = s.slots[a].unit
    lo, hi = s.slots[a], s.slots[b]
    key = lambda sl: (sl.start, sl.end, p.index(sl.node))  # noqa: E731
    return any(
        sl.unit != u and sl.unit in p.conflicts(u) and key(lo) < key(sl) < key(hi)
        for sl in s.slots.values()
    )


def acyclic(out: dict[int, set[int]]) -> bool:
    state: dict[int, int] = {}

    def visit(i: int) -> bool:
        state[i] = 1
        for j in out[i]:
            if state.get(j) == 1 or (j not in state and not visit(j)):
                return False
        state[i] = 2
        return True

    return all(visit(i) for i in out if i not in state)


def late(p: Problem, s: Schedule, n: str, run_start: float) -> bool:
    sl = s.slots[n]
    return any(
        s.slots[q].end + p.comm_us(q, n, s.slots[q].unit, sl.unit) > run_start + 1e-9
        for q in p.preds(n)
        if s.slots[q].unit != sl.unit
    )


def check_partitions(p: Problem, s: Schedule, parts: list[Partition]) -> None:
    assert [x.name for x in parts] == [f"p{i}" for i in range(len(parts))]
    nodes = [n for x in parts for n in x.nodes]
    assert sorted(nodes) == sorted(p.nodes) and len(nodes) == len(set(nodes))
    assert all(s.slots[n].unit == x.unit for x in parts for n in x.nodes)
    out = deps(p, parts)
    assert all(i < j for i, js in out.items() for j in js)  # numbered topologically: acyclic
    for u in p.units:  # each unit's partitions are consecutive runs of its schedule order
        assert [n for x in parts if x.unit == u for n in x.nodes] == run_order(p, s, u)
    for x in parts:  # every input from another unit is there when the partition starts
        assert not any(late(p, s, n, s.slots[x.nodes[0]].start) for n in x.nodes)
    for i, x in enumerate(parts):  # runs are maximal: each cut has a reason
        nxt = next((y for y in parts[i + 1 :] if y.unit == x.unit), None)
        if nxt is None:
            continue
        n = nxt.nodes[0]
        merged = list(parts)
        merged[i] = Partition(x.name, x.unit, (*x.nodes, n))
        merged[parts.index(nxt)] = Partition(nxt.name, nxt.unit, nxt.nodes[1:])
        merged = [y for y in merged if y.nodes]
        assert (
            late(p, s, n, s.slots[x.nodes[0]].start)
            or not acyclic(deps(p, merged))
            or shared_ran_between(p, s, x.nodes[-1], n)
            or feeds_other_unit_early(p, s, x.nodes[-1], n)
            or feeds_other_unit_before_later(p, s, x.nodes[-1])
        )
    timing = simulate(p, parts)
    free: dict[str, float] = {}
    out_bytes = written(crossings(p, parts), len(parts))  # what each writes out for the others
    for i, x in enumerate(parts):
        work = p.call_overhead_us.get(x.unit, 0.0) + sum(p.cost[n][x.unit] for n in x.nodes)
        work += out_bytes[i] * p.boundary_out_us_per_byte.get(x.unit, 0.0)
        assert (x.start_us, x.end_us) == (timing.start_us[x.name], timing.end_us[x.name])
        assert x.end_us - x.start_us == pytest.approx(work)
        for r in p.resources_of(x.unit):  # units sharing hardware never overlap
            assert x.start_us >= free.get(r, 0.0) - 1e-9
            free[r] = x.end_us
    assert timing.makespan_us >= lower_bound(p) * (1 - 1e-9)


def singletons(p: Problem, s: Schedule) -> list[Partition]:
    order = sorted(p.nodes, key=lambda n: (s.slots[n].start, s.slots[n].end, p.index(n)))
    return [Partition(f"p{i}", s.slots[n].unit, (n,)) for i, n in enumerate(order)]


def without_overheads(p: Problem) -> Problem:
    return Problem(
        p.nodes,
        p.units,
        p.cost,
        p.edges,
        p.links,
        p.default_link,
        {},
        p.modeled,
        resources=p.resources,
    )


# schedulers that plan with partition-aware delays (Problem.cut_us) and so may keep idle time
IDLE_KEEPING = {"exact", "pexact", "auto"}


# -- properties ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", scheduler_names())
@pytest.mark.parametrize(("dag", "units"), CASES)
def test_canonical_partitions(name: str, dag: str, units: str) -> None:
    p = make_problem(dag, units)
    s = get_scheduler(name).schedule(p)
    check_partitions(p, s, make_partitions(p, s))
    q = without_overheads(p)
    got = simulate(q, singletons(q, s)).makespan_us
    if name in IDLE_KEEPING:  # partition-aware delays leave idle time a replay removes
        assert got <= s.makespan + 1e-9 * max(1.0, s.makespan)
    else:
        assert got == pytest.approx(s.makespan)


@PROPERTY
@given(problems(), st.data())
def test_random_partitions(p: Problem, data: st.DataObject) -> None:
    s = random_schedule(data, p)
    check_partitions(p, s, make_partitions(p, s))


@PROPERTY
@given(problems(degenerate=True), st.data())
def test_random_partitions_with_coinciding_times(p: Problem, data: st.DataObject) -> None:
    s = random_schedule(data, p)
    check_partitions(p, s, make_partitions(p, s))


@PROPERTY
@given(problems(), st.data())
def test_one_node_partitions_replay_the_schedule(p: Problem, data: st.DataObject) -> None:
    q = without_overheads(p)
    s = random_schedule(data, q)
    got = simulate(q, singletons(q, s)).makespan_us
    if s.scheduler == "random" or s.scheduler in IDLE_KEEPING:  # idle time a replay removes
        assert got <= s.makespan + 1e-9 * max(1.0, s.makespan)
    else:
        assert got == pytest.approx(s.makespan)


@PROPERTY
@given(problems(), st.data())
def test_plan_from_schedule_summarises(p: Problem, data: st.DataObject) -> None:
    s = random_schedule(data, p)
    plan = plan_from_schedule(p, s)
    assert plan.predicted_us == max((x.end_us for x in plan.partitions), default=0.0)
    assert plan.predicted_us >= plan.lower_bound_us * (1 - 1e-9)
    assert plan.lower_bound_us == max(s.lower_bound or 0.0, lower_bound(p, partitions=True))
    assert plan.node_unit == s.assignment
    assert plan.units == [u for u in p.units if u in set(s.assignment.values())]
    assert plan.modeled == bool(set(s.assignment.values()) & p.modeled)
    assert (plan.scheduler, plan.status) == (s.scheduler, s.status)
    for group in plan.parallel_groups():
        parts = [x for x in plan.partitions if x.name in group]
        assert len(parts) >= 2 and len({x.unit for x in parts}) == len(parts)
        assert max(x.start_us for x in parts) < min(x.end_us for x in parts)


@PROPERTY
@given(problems(), st.data())
def test_plan_from_assignment_keeps_the_assignment(p: Problem, data: st.DataObject) -> None:
    assignment = {n: data.draw(st.sampled_from(p.runnable_units(n))) for n in p.nodes}
    plan = plan_from_assignment(p, assignment)
    assert plan.node_unit == assignment
    assert (plan.scheduler, plan.status) == ("imported", "feasible")
    assert plan.predicted_us >= lower_bound(p) * (1 - 1e-9)


# -- hand-computed cases ---------------------------------------------------------------------


def diamond() -> Problem:
    cost = {n: {"u0": c, "u1": c} for n, c in zip("abcd", (2.0, 3.0, 3.0, 1.0), strict=True)}
    edges = [Edge(s, d, 0, (f"{s}_out",)) for s, d in ("ab", "ac", "bd", "cd")]
    return Problem(list("abcd"), ["u0", "u1"], cost, edges, default_link=Link(1.0, INF),
                   call_overhead_us={"u0": 0.5, "u1": 0.5}, modeled={"u1"})  # fmt: skip


def test_heft_diamond_gives_four_partitions() -> None:
    p = diamond()
    s = get_scheduler("heft").schedule(p)
    # HEFT: a u0 [0,2], b u0 [2,5], c u1 [3,6], d u1 [6,7]. c starts on a's output before b
    # ends, so the u0 run is cut after a; d's input from b arrives at 6, after c's run
    # started at 3, so d starts a new partition.
    assert s.assignment == {"a": "u0", "b": "u0", "c": "u1", "d": "u1"} and s.makespan == 7
    plan = plan_from_schedule(p, s)
    # p0 = 0.5 + 2; p1 (b) right after on u0; p2 (c) once a's output crossed (+1 µs);
    # p3 (d) once p2 is done and b's output crossed: max(7.0, 6.0 + 1)
    assert plan.partitions == [
        Partition("p0", "u0", ("a",), 0.0, 2.5),
        Partition("p1", "u0", ("b",), 2.5, 6.0),
        Partition("p2", "u1", ("c",), 3.5, 7.0),
        Partition("p3", "u1", ("d",), 7.0, 8.5),
    ]
    # the bound: the critical path (6) plus one call overhead (0.5)
    assert plan.predicted_us == 8.5 and plan.lower_bound_us == 6.5
    assert plan.units == ["u0", "u1"] and plan.modeled
    assert plan.parallel_groups() == [["p1", "p2"]]


def test_assigned_diamond_gives_four_partitions() -> None:
    p = diamond()
    plan = plan_from_assignment(p, {"a": "u0", "b": "u0", "c": "u1", "d": "u0"}, scheduler="x")
    # list schedule: a [0,2], b [2,5] on u0, c [3,6] on u1, d [7,8] on u0
    assert plan.partitions == [
        Partition("p0", "u0", ("a",), 0.0, 2.5),
        Partition("p1", "u0", ("b",), 2.5, 6.0),
        Partition("p2", "u1", ("c",), 3.5, 7.0),
        Partition("p3", "u0", ("d",), 8.0, 9.5),
    ]
    assert plan.scheduler == "x" and plan.predicted_us == 9.5
    assert plan.node_unit == {"a": "u0", "b": "u0", "c": "u1", "d": "u0"}


def test_diamond_on_one_unit_is_one_partition() -> None:
    p = diamond()
    plan = plan_from_schedule(p, get_scheduler("single").schedule(p))
    assert plan.partitions == [Partition("p0", "u0", ("a", "b", "c", "d"), 0.0, 9.5)]
    assert plan.units == ["u0"] and not plan.modeled and plan.status == "heuristic"


def test_independent_inputs_run_in_parallel() -> None:
    cost = {"a": {"u0": 4, "u1": INF}, "b": {"u0": INF, "u1": 3}, "c": {"u0": 1, "u1": INF}}
    p = Problem(["a", "b", "c"], ["u0", "u1"], cost, [Edge("a", "c", 0), Edge("b", "c", 0)],
                default_link=Link(1.0, INF))  # fmt: skip
    plan = plan_from_schedule(p, get_scheduler("heft").schedule(p))
    assert [(x.name, x.unit, x.nodes, x.start_us, x.end_us) for x in plan.partitions] == [
        ("p0", "u0", ("a",), 0, 4),
        ("p1", "u1", ("b",), 0, 3),
        ("p2", "u0", ("c",), 4, 5),
    ]
    assert plan.parallel_groups() == [["p0", "p1"]]


@pytest.mark.parametrize(("overhead", "cut"), [(2.0, True), (30.0, False)])
def test_a_run_is_cut_where_another_unit_reads_long_before_it_ends(
    overhead: float, cut: bool
) -> None:
    # a -> b1 -> b2 -> b3 on u0; a -> c on u1, over a 5 µs link. b1 ends before c starts, so
    # looking one node ahead (rule d) keeps a's run going, and c would wait for b3 (rule e).
    # A cut costs u0 a call: worth it at 2 µs, not at 30 µs (more than the 21 µs c waits).
    cost = {n: {"u0": 10.0, "u1": INF} for n in ("a", "b2", "b3")}
    cost |= {"b1": {"u0": 1.0, "u1": INF}, "c": {"u0": INF, "u1": 10.0}}
    edges = [Edge("a", "b1", 0), Edge("b1", "b2", 0), Edge("b2", "b3", 0), Edge("a", "c", 0)]
    p = Problem(["a", "b1", "b2", "b3", "c"], ["u0", "u1"], cost, edges,
                default_link=Link(5.0, INF), call_overhead_us={"u0": overhead})  # fmt: skip
    ends = {"a": 10.0, "b1": 11.0, "b2": 21.0, "b3": 31.0}
    slots = {n: Slot(n, "u0", e - cost[n]["u0"], e) for n, e in ends.items()}
    s = Schedule(slots | {"c": Slot("c", "u1", 15.0, 25.0)}, "hand")
    plan = plan_from_schedule(p, s)
    runs = [x.nodes for x in plan.partitions if x.unit == "u0"]
    assert runs == ([("a",), ("b1", "b2", "b3")] if cut else [("a", "b1", "b2", "b3")])
    whole = simulate(p, [Partition("p0", "u0", ("a", "b1", "b2", "b3")), plan.partitions[-1]])
    # a 2 µs cut: c starts at 12 + 5, not at 33 + 5; b3 ends at 12 + 2 + 21 = 35
    assert plan.predicted_us == (35.0 if cut else whole.makespan_us)
    assert plan.predicted_us <= whole.makespan_us
    order = [p.nodes.index(n) for n in ("a", "b1", "c", "b2", "b3")]  # its list schedule is s
    assign = [p.units.index(s.slots[n].unit) for n in p.nodes]
    assert Evaluator(p).latency(assign, order) == plan.predicted_us


def test_zero_time_cut_keeps_partitions_acyclic() -> None:
    # a (u0) -> b (u1) -> c (u0), all at time 0: c's input is on time, but putting c with a
    # would make {a, c} and {b} depend on each other.
    cost = {n: {"u0": 0.0, "u1": 0.0} for n in "abc"}
    p = Problem(list("abc"), ["u0", "u1"], cost, [Edge("a", "b", 8), Edge("b", "c", 8)])
    s = Schedule(
        {n: Slot(n, u, 0.0, 0.0) for n, u in zip("abc", ["u0", "u1", "u0"], strict=True)}, "hand"
    )
    parts = make_partitions(p, s)
    assert [(x.name, x.unit, x.nodes) for x in parts] == [
        ("p0", "u0", ("a",)),
        ("p1", "u1", ("b",)),
        ("p2", "u0", ("c",)),
    ]


def test_make_partitions_validates_the_schedule() -> None:
    p = diamond()
    s = get_scheduler("heft").schedule(p)
    del s.slots["d"]
    with pytest.raises(InvalidScheduleError, match="'d' is missing"):
        make_partitions(p, s)


def test_simulate_moves_a_shared_value_once() -> None:
    cost = {n: {"u0": 1.0, "u1": 1.0} for n in "abc"}
    edges = [Edge("a", "b", 100, ("x",)), Edge("a", "c", 100, ("x",))]
    p = Problem(list("abc"), ["u0", "u1"], cost, edges, links={("u1", "u0"): Link(1.0, 0.1)})
    together = [Partition("p0", "u0", ("a",)), Partition("p1", "u1", ("b", "c"))]
    # 100 bytes at 100 bytes/µs + 1 µs latency, once
    assert simulate(p, together).start_us == {"p0": 0.0, "p1": 3.0}
    apart = [*together[:1], Partition("p1", "u1", ("b",)), Partition("p2", "u1", ("c",))]
    assert simulate(p, apart).end_us == {"p0": 1.0, "p1": 4.0, "p2": 5.0}
    p.edges.append(Edge("a", "c", 200, ("y",)))
    q = Problem(p.nodes, p.units, p.cost, p.edges, p.links)  # fresh caches
    assert simulate(q, together).start_us["p1"] == 1.0 + 1.0 + 3.0


def test_simulate_charges_call_overhead_per_partition() -> None:
    p = diamond()
    one = [Partition("p0", "u1", ("a", "b", "c", "d"))]
    four = [Partition(f"p{i}", "u1", (n,)) for i, n in enumerate("abcd")]
    assert simulate(p, one).makespan_us == 9.5
    assert simulate(p, four).makespan_us == 9.0 + 4 * 0.5


@pytest.mark.parametrize(
    ("parts", "error", "pattern"),
    [
        ([("p0", "u0", "abc")], InfeasiblePlanError, "node 'd' is in no partition"),
        (
            [("p0", "u0", "abcd"), ("p1", "u1", "d")],
            InfeasiblePlanError,
            "in partitions 'p0' and 'p1'",
        ),
        ([("p0", "gpu", "abcd")], InfeasiblePlanError, "unknown unit 'gpu'"),
        (
            [("p0", "u0", "abcd"), ("p0", "u1", "")],
            InfeasiblePlanError,
            "two partitions are named 'p0'",
        ),
        ([("p0", "u0", "abcdz")], InfeasiblePlanError, "unknown node 'z'"),
        (
            [("p0", "u0", "abd"), ("p1", "u1", "c")],
            InfeasiblePlanError,
            "'c' of partition 'p1' cannot run on unit 'u1'",
        ),
        (
            [("p0", "u0", "acd"), ("p1", "u0", "b")],
            PartitionCycleError,
            "'p0' and 'p1' depend on each other",
        ),
        (
            [("p0", "u0", "bcd"), ("p1", "u0", "a")],
            PartitionCycleError,
            "'p0' and 'p1' depend on each other",
        ),
    ],
)
def test_simulate_rejects_bad_partitions(parts, error, pattern: str) -> None:
    p = diamond()
    p.cost["c"]["u1"] = INF
    with pytest.raises(error, match=pattern):
        simulate(p, [Partition(name, unit, tuple(nodes)) for name, unit, nodes in parts])


def test_partition_cycle_across_units() -> None:
    p = Problem(list("abc"), ["u0", "u1"], {n: {"u0": 1, "u1": 1} for n in "abc"},
                [Edge("a", "b", 0), Edge("b", "c", 0)])  # fmt: skip
    parts = [Partition("p0", "u0", ("a", "c")), Partition("p1", "u1", ("b",))]
    with pytest.raises(
        PartitionCycleError, match=r"'p0' and 'p1' depend on each other \(cycle p0 -> p1 -> p0"
    ):
        simulate(p, parts)


@pytest.mark.parametrize(
    ("assignment", "pattern"),
    [
        ({"a": "u0", "b": "u0", "c": "u0"}, "'d' is assigned to no unit"),
        ({"a": "u0", "b": "u0", "c": "u0", "d": "tpu"}, "'d' is assigned to unknown unit 'tpu'"),
        (
            {"a": "u0", "b": "u0", "c": "u1", "d": "u0"},
            "'c' is assigned to unit 'u1', which cannot",
        ),
        ({"a": "u0", "b": "u0", "c": "u0", "d": "u0", "q": "u0"}, "unknown node 'q'"),
    ],
)
def test_plan_from_assignment_rejects(assignment: dict[str, str], pattern: str) -> None:
    p = diamond()
    p.cost["c"]["u1"] = INF
    with pytest.raises(InfeasiblePlanError, match=pattern):
        plan_from_assignment(p, assignment)


def _plan(*intervals: tuple[str, float, float]) -> Plan:
    parts = [
        Partition(f"p{i}", unit, (f"n{i}",), start, end)
        for i, (unit, start, end) in enumerate(intervals)
    ]
    end = max((x.end_us for x in parts), default=0.0)
    return Plan(parts, sorted({x.unit for x in parts}), "hand", "feasible", end)


def test_parallel_groups_are_maximal_overlaps() -> None:
    plan = _plan(("u0", 0, 10), ("u1", 2, 5), ("u2", 4, 12), ("u1", 6, 8), ("u1", 12, 13))
    assert plan.parallel_groups() == [["p0", "p1", "p2"], ["p0", "p2", "p3"]]
    assert _plan(("u0", 0, 5), ("u1", 5, 8)).parallel_groups() == []  # touching only
    assert _plan(("u0", 0, 5), ("u1", 3, 3)).parallel_groups() == []  # zero length
    assert _plan().parallel_groups() == []
    assert math.isclose(_plan(("u0", 0, 5)).predicted_us, 5)
