"""Schedulers, the registry, insertion slots and Schedule.validate."""

from __future__ import annotations

import logging
import math
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

import partuner.plan.registry as registry
from partuner.errors import InfeasiblePlanError, InvalidScheduleError, PartunerError
from partuner.plan import (
    Edge,
    Link,
    Problem,
    Schedule,
    Scheduler,
    Slot,
    earliest_insertion,
    get_scheduler,
    lower_bound,
    scheduler_names,
    upward_rank,
)
from test_plan_cases import CASES, INF, PROPERTY, make_problem, problems

NAMES = scheduler_names()


def check(problem: Problem, schedule: Schedule, name: str) -> None:
    schedule.validate(problem)
    assert set(schedule.slots) == set(problem.nodes)
    assert schedule.scheduler == name
    if schedule.scheduler in ("exact", "pexact", "auto"):  # a solver's bound may be stronger
        assert schedule.lower_bound >= lower_bound(problem) * (1 - 1e-9)
    else:
        assert schedule.lower_bound == pytest.approx(lower_bound(problem))
    assert schedule.makespan >= lower_bound(problem) * (1 - 1e-9)


def test_builtins_are_registered() -> None:
    assert {"single", "heft"} <= set(NAMES)
    assert NAMES == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("dag", "units"), CASES)
def test_canonical_schedules_are_valid(name: str, dag: str, units: str) -> None:
    p = make_problem(dag, units)
    s = get_scheduler(name).schedule(p)
    check(p, s, name)
    if len(p.units) == 1:  # no transfers, no idle time
        assert s.makespan == pytest.approx(sum(p.cost[n]["u0"] for n in p.nodes))


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(p=problems())
def test_random_schedules_are_valid(name: str, p: Problem) -> None:
    try:
        s = get_scheduler(name).schedule(p)
    except InfeasiblePlanError:
        assert name == "single"
        assert all(any(math.isinf(p.cost[n][u]) for n in p.nodes) for u in p.units)
        return
    check(p, s, name)


@pytest.mark.parametrize(("dag", "units"), CASES)
def test_single_uses_the_cheapest_able_unit(dag: str, units: str) -> None:
    p = make_problem(dag, units)
    s = get_scheduler("single").schedule(p)
    # the model as one partition: the unit's call overhead + the node costs
    totals = {
        u: p.call_overhead_us.get(u, 0.0) + sum(p.cost[n][u] for n in p.nodes) for u in p.units
    }
    best = min(totals.values())
    unit = {sl.unit for sl in s.slots.values()}
    assert unit <= {u for u in p.units if totals[u] == best}
    if p.nodes:
        (u,) = unit
        assert s.makespan == pytest.approx(best - p.call_overhead_us.get(u, 0.0))
    if p.nodes:  # back to back in topological order
        assert s.order(s.slots[p.nodes[0]].unit) == p.nodes
        assert all(s.slots[a].end == s.slots[b].start for a, b in pairwise(p.nodes))


def test_single_without_an_able_unit() -> None:
    p = Problem(["a", "b"], ["u", "v"], {"a": {"u": 1, "v": INF}, "b": {"u": INF, "v": 1}})
    with pytest.raises(InfeasiblePlanError, match="no single unit can run every node"):
        get_scheduler("single").schedule(p)
    assert get_scheduler("heft").schedule(p).assignment == {"a": "u", "b": "v"}


@pytest.mark.parametrize("name", NAMES)
def test_schedulers_reject_a_node_no_unit_can_run(name: str) -> None:
    p = Problem(["a"], ["u"], {"a": {"u": INF}})
    with pytest.raises(InfeasiblePlanError, match="'a' cannot run on any unit"):
        get_scheduler(name).schedule(p)


def topcuoglu_fig2() -> Problem:
    """The 10-task, 3-processor example of Topcuoglu, Hariri and Wu 2002, fig. 2."""
    costs = {
        1: (14, 16, 9), 2: (13, 19, 18), 3: (11, 13, 19), 4: (13, 8, 17), 5: (12, 13, 10),
        6: (13, 16, 9), 7: (7, 15, 11), 8: (5, 11, 14), 9: (18, 12, 20), 10: (21, 7, 16),
    }  # fmt: skip
    comm = {
        (1, 2): 18, (1, 3): 12, (1, 4): 9, (1, 5): 11, (1, 6): 14, (2, 8): 19, (2, 9): 16,
        (3, 7): 23, (4, 8): 27, (4, 9): 23, (5, 9): 13, (6, 8): 15, (7, 10): 17, (8, 10): 11,
        (9, 10): 13,
    }  # fmt: skip
    units = ["P1", "P2", "P3"]
    return Problem(
        nodes=[f"n{i}" for i in costs],
        units=units,
        cost={f"n{i}": dict(zip(units, c, strict=True)) for i, c in costs.items()},
        edges=[Edge(f"n{a}", f"n{b}", c) for (a, b), c in comm.items()],
        default_link=Link(0.0, 1e-3),  # 1 byte per µs: nbytes = the paper's cost
    )


def test_heft_reproduces_topcuoglu_fig2() -> None:
    p = topcuoglu_fig2()
    rank = upward_rank(p)
    paper = {"n1": 108, "n2": 77, "n3": 80, "n4": 80, "n5": 69, "n6": 63.333, "n7": 42.667,
             "n8": 35.667, "n9": 44.333, "n10": 14.667}  # fmt: skip
    assert rank == pytest.approx(paper, abs=1e-3)
    s = get_scheduler("heft").schedule(p)
    check(p, s, "heft")
    assert s.makespan == 80.0
    got = {n: (sl.unit, sl.start, sl.end) for n, sl in s.slots.items()}
    assert got == {
        "n1": ("P3", 0, 9), "n3": ("P3", 9, 28), "n4": ("P2", 18, 26), "n2": ("P1", 27, 40),
        "n5": ("P3", 28, 38), "n6": ("P2", 26, 42), "n9": ("P2", 56, 68), "n7": ("P3", 38, 49),
        "n8": ("P1", 57, 62), "n10": ("P2", 73, 80),
    }  # fmt: skip


def test_heft_breaks_rounding_ties_by_topological_order() -> None:
    # mean costs 0.15 and (0.1 + 0.2) / 2 = 0.15000000000000002: a tie, so b goes first
    cost = {"b": {"u0": 0.15, "u1": 0.15}, "a": {"u0": 0.1, "u1": 0.2}}
    p = Problem(["b", "a"], ["u0", "u1"], cost)
    assert upward_rank(p)["a"] > upward_rank(p)["b"]
    assert get_scheduler("heft").schedule(p).assignment == {"b": "u0", "a": "u1"}


def test_heft_inserts_into_an_idle_gap() -> None:
    # a (u0) -> b (u1) waits 10 µs for its input; c (rank 5) fits in u1's gap before b.
    cost = {"a": {"u0": 1, "u1": INF}, "b": {"u0": INF, "u1": 1}, "c": {"u0": INF, "u1": 5}}
    cost["e"] = {"u0": INF, "u1": 10}
    p = Problem(["a", "b", "c", "e"], ["u0", "u1"], cost,
                [Edge("a", "b", 0), Edge("b", "e", 0)], default_link=Link(10.0, INF))  # fmt: skip
    s = get_scheduler("heft").schedule(p)
    assert s.slots["c"] == Slot("c", "u1", 0.0, 5.0)
    assert s.slots["b"] == Slot("b", "u1", 11.0, 12.0)
    assert s.makespan == 22.0


def test_heft_fork_on_two_equal_units() -> None:
    cost = {"a": {"u": 1, "v": 1}} | {n: {"u": 2, "v": 2} for n in "bcd"}
    edges = [Edge("a", n, 0) for n in "bcd"]
    p = Problem(["a", "b", "c", "d"], ["u", "v"], cost, edges)
    s = get_scheduler("heft").schedule(p)
    assert s.assignment == {"a": "u", "b": "u", "c": "v", "d": "u"}
    assert s.makespan == 5.0 and lower_bound(p) == 3.5


def test_heft_keeps_a_chain_on_one_unit() -> None:
    p = make_problem("chain", "two_equal")
    s = get_scheduler("heft").schedule(p)
    assert set(s.assignment.values()) == {"u0"}
    assert s.makespan == 11.0 == lower_bound(p)


# -- registry --------------------------------------------------------------------------------


def test_unknown_scheduler_lists_the_known_ones() -> None:
    with pytest.raises(PartunerError) as info:
        get_scheduler("hef")
    assert str(info.value) == f"unknown scheduler 'hef'; known: {NAMES}"


class _EP:
    def __init__(self, name: str, target) -> None:
        self.name, self.value, self._target = name, f"plugin:{name}", target

    def load(self):
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_plugins_load_lazily_and_broken_ones_are_skipped(monkeypatch, caplog) -> None:
    class Plugged(Scheduler):
        name = "plugged"

        def schedule(self, problem, *, time_limit=None):
            return Schedule({}, self.name)

    class Clash(Plugged):
        name = "heft"

    eps = [
        _EP("plugged", Plugged),
        _EP("broken", ImportError("no module named 'nothing'")),
        _EP("notascheduler", object),
        _EP("clash", Clash),
    ]
    calls = []
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setattr(registry, "entry_points", lambda group: calls.append(group) or eps)
    assert isinstance(get_scheduler("heft"), Scheduler) and calls == []  # built-in: no lookup
    with caplog.at_level(logging.WARNING, logger="partuner.plan.registry"):
        names = scheduler_names()
    assert calls == ["partuner.schedulers"]
    assert names == sorted([*NAMES, "plugged"])
    assert type(get_scheduler("plugged")) is Plugged
    assert type(get_scheduler("heft")).__name__ == "HEFT"
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "'broken'" in warned and "'notascheduler'" in warned and "'clash'" in warned
    assert "'plugged'" not in warned
    scheduler_names()
    assert calls == ["partuner.schedulers"]  # loaded once


def test_register_rejects_a_taken_name() -> None:
    class Other(Scheduler):
        name = "heft"

        def schedule(self, problem, *, time_limit=None):
            raise NotImplementedError

    with pytest.raises(ValueError, match="'heft' is taken"):
        registry.register(Other)


# -- earliest_insertion ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("busy", "ready", "duration", "start"),
    [
        ([], 3.0, 2.0, 3.0),
        ([(0, 5), (8, 12)], 1, 3, 5),
        ([(0, 5), (8, 12)], 1, 4, 12),
        ([(0, 5), (8, 12)], 9, 1, 12),
        ([(2, 5)], 0, 2, 0),
        ([(2, 5)], 0, 3, 5),
        ([(2, 5)], 3, 0, 5),  # a zero-length job does not go inside a busy interval
        ([(2, 5)], 2, 0, 2),
        ([(0, 0), (0, 4)], 0, 0, 0),
    ],
)
def test_earliest_insertion_by_hand(busy, ready, duration, start) -> None:
    assert earliest_insertion(busy, ready, duration) == start


def _fits(busy, t: float, d: float) -> bool:
    return all(not (s < t + d and t < e) and not (d == 0 and s < t < e) for s, e in busy)


@st.composite
def busy_lists(draw):
    t, busy = 0.0, []
    for _ in range(draw(st.integers(0, 6))):
        t += draw(st.sampled_from([0.0, 1.0, 2.5]))
        length = draw(st.sampled_from([0.0, 1.0, 3.0]))
        busy.append((t, t + length))
        t += length
    return busy


@PROPERTY
@given(busy_lists(), st.sampled_from([0.0, 0.5, 1.0, 4.0, 20.0]), st.sampled_from([0.0, 1.0, 2.5]))
def test_earliest_insertion_is_earliest_fit(busy, ready: float, duration: float) -> None:
    t = earliest_insertion(busy, ready, duration)
    assert t >= ready
    assert _fits(busy, t, duration)
    candidates = [ready] + [e for _, e in busy if e >= ready]
    assert t == min(c for c in candidates if _fits(busy, c, duration))


# -- Schedule.validate -----------------------------------------------------------------------


def small() -> Problem:
    cost = {"a": {"u0": 2, "u1": INF}, "b": {"u0": 3, "u1": 1}, "c": {"u0": 2, "u1": 2}}
    return Problem(["a", "b", "c"], ["u0", "u1"], cost, [Edge("a", "b", 500)],
                   links={("u0", "u1"): Link(10.0, 0.1)})  # fmt: skip


def good() -> dict[str, Slot]:
    # a -> b crosses units: 10 µs latency + 500 bytes at 100 bytes/µs = 15 µs
    return {
        "a": Slot("a", "u0", 0, 2),
        "b": Slot("b", "u1", 17, 18),
        "c": Slot("c", "u0", 2, 4),
    }


def test_schedule_properties() -> None:
    s = Schedule(good(), "hand")
    s.validate(small())
    assert s.makespan == 18 and s.order("u0") == ["a", "c"] and s.order("u1") == ["b"]
    assert s.assignment == {"a": "u0", "b": "u1", "c": "u0"}
    assert s.status == "heuristic" and s.lower_bound is None
    assert Schedule({}, "hand").makespan == 0.0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("b"), "node 'b' is missing from the schedule"),
        (lambda d: d.update(z=Slot("z", "u0", 9, 10)), "schedule has node 'z', which the problem"),
        (
            lambda d: d.update(c=Slot("a", "u0", 2, 4)),
            r"node 'a' is scheduled twice \(slots \['a', 'c'\]\)",
        ),
        (lambda d: d.update(c=Slot("x", "u0", 2, 4)), "slot keyed 'c' is for node 'x'"),
        (lambda d: d.update(c=Slot("c", "gpu", 2, 4)), "node 'c' is on unknown unit 'gpu'"),
        (
            lambda d: d.update(a=Slot("a", "u1", 0, 2)),
            "node 'a' is on unit 'u1', which cannot run it",
        ),
        (
            lambda d: d.update(b=Slot("b", "u1", 17, 19)),
            "node 'b' runs 2 µs on unit 'u1' \\(17 to 19\\) but costs 1",
        ),
        (lambda d: d.update(c=Slot("c", "u0", -2, 0)), "node 'c' starts at -2"),
        (
            lambda d: d.update(b=Slot("b", "u1", 16, 17)),
            "node 'b' on unit 'u1' starts at 16 µs before its input from 'a' on unit 'u0' "
            r"arrives at 17 µs \(ends 2 \+ transfer 15\)",
        ),
        (
            lambda d: d.update(b=Slot("b", "u0", 1.5, 4.5)),
            r"node 'b' on unit 'u0' starts at 1.5 µs before its input from 'a' on unit 'u0' "
            r"arrives at 2 µs \(ends 2 \+ transfer 0\)",
        ),
        (
            lambda d: d.update(c=Slot("c", "u0", 1, 3)),
            r"nodes 'a' \(0 to 2\) and 'c' \(1 to 3\) overlap on unit 'u0'",
        ),
    ],
)
def test_validate_names_each_violation(edit, message: str) -> None:
    slots = good()
    edit(slots)
    with pytest.raises(InvalidScheduleError, match=message):
        Schedule(slots, "hand").validate(small())


def test_validate_tolerates_rounding_only() -> None:
    slots = good()
    slots["b"] = Slot("b", "u1", 17 - 1e-9, 18 - 1e-9)
    Schedule(slots, "hand").validate(small())
    slots["b"] = Slot("b", "u1", 17 - 1e-3, 18 - 1e-3)
    with pytest.raises(InvalidScheduleError, match="before its input"):
        Schedule(slots, "hand").validate(small())
