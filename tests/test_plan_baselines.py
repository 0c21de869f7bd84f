"""The baseline schedulers (static, nestc, nestc-repaired, branch, cpop), DAG branches, and the
brute-force oracle: invariants on canonical and random problems, hand-computed expectations."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import partuner.plan.branch as branch_mod
from partuner.errors import InfeasiblePlanError
from partuner.plan import (
    Branch,
    Edge,
    FusedGroup,
    Link,
    ParallelGroup,
    Problem,
    Schedule,
    brute_force,
    get_scheduler,
    lower_bound,
    nest_branches,
    nest_siblings,
    parallel_groups,
)
from partuner.plan.cpop import critical_path, downward_rank
from partuner.plan.nestc import Stage, nestc_stages
from partuner.plan.static import Timeline
from test_plan_cases import CASES, DAGS, INF, PROPERTY, make_problem, problems
from test_plan_schedulers import topcuoglu_fig2

BASELINES = ["static", "nestc", "nestc-repaired", "branch", "cpop"]
COMPARED = [*BASELINES, "heft", "single"]  # what the oracle must never lose to


def check(p: Problem, s: Schedule, name: str) -> None:
    s.validate(p)
    assert s.scheduler == name and set(s.slots) == set(p.nodes)
    assert s.lower_bound == pytest.approx(lower_bound(p))
    assert s.makespan >= lower_bound(p) * (1 - 1e-9)


def dag(nodes: str | list[str], pairs: list[str] | list[tuple[str, str]], **kw) -> Problem:
    """Unit-cost nodes on one unit ``u`` with zero-byte edges ``"ab"`` = a -> b."""
    cost = {n: {"u": 1.0} for n in nodes}
    return Problem(list(nodes), ["u"], cost, [Edge(a, b, 0) for a, b in pairs], **kw)


# -- every baseline: canonical and random problems -------------------------------------------


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize(("dag_name", "units"), CASES)
def test_canonical_schedules_are_valid(name: str, dag_name: str, units: str) -> None:
    p = make_problem(dag_name, units)
    check(p, get_scheduler(name).schedule(p), name)


@PROPERTY
@given(p=st.one_of(problems(max_nodes=7), problems(max_nodes=7, degenerate=True)))
def test_random_schedules_are_valid_and_never_beat_the_oracle(p: Problem) -> None:
    best = brute_force(p)
    check(p, best, "brute-force")
    assert best.status == "optimal"
    for name in COMPARED:
        try:
            s = get_scheduler(name).schedule(p)
        except InfeasiblePlanError:
            assert name == "single"  # no unit runs every node
            continue
        if name != "single":
            check(p, s, name)
        assert best.makespan <= s.makespan + 1e-9 * max(1.0, s.makespan)


# -- static ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("dag_name", "units"), CASES)
def test_static_takes_the_first_able_unit(dag_name: str, units: str) -> None:
    p = make_problem(dag_name, units)
    s = get_scheduler("static").schedule(p)
    assert s.assignment == {n: p.runnable_units(n)[0] for n in p.nodes}


def test_static_by_hand() -> None:
    # npu first: it takes a and c; b falls back to the cpu; a -> b and b -> c cross the link.
    cost = {"a": {"npu": 2, "cpu": 1}, "b": {"npu": INF, "cpu": 3}, "c": {"npu": 2, "cpu": 1}}
    p = Problem(list("abc"), ["npu", "cpu"], cost, [Edge("a", "b", 0), Edge("b", "c", 0)],
                default_link=Link(5.0, INF))  # fmt: skip
    s = get_scheduler("static").schedule(p)
    assert {n: (sl.unit, sl.start, sl.end) for n, sl in s.slots.items()} == {
        "a": ("npu", 0, 2), "b": ("cpu", 7, 10), "c": ("npu", 15, 17),
    }  # fmt: skip


def test_static_keeps_shared_hardware_apart() -> None:
    p = make_problem("fork", "shared_cores")  # cpu0 first, runs everything
    s = get_scheduler("static").schedule(p)
    assert set(s.assignment.values()) == {"cpu0"}
    assert s.makespan == sum(p.cost[n]["cpu0"] for n in p.nodes)


# -- nestc -----------------------------------------------------------------------------------


def conv_chain(conv_cpu: float, conv_npu: float) -> Problem:
    """conv0 -> relu0 -> conv1 -> relu1; the npu runs only convolutions."""
    nodes = ["conv0", "relu0", "conv1", "relu1"]
    cost = {
        n: {"cpu": conv_cpu, "npu": conv_npu} if n.startswith("conv") else {"cpu": 10, "npu": INF}
        for n in nodes
    }
    edges = [Edge(a, b, 1000, (f"{a}_out",)) for a, b in itertools.pairwise(nodes)]
    return Problem(nodes, ["cpu", "npu"], cost, edges, default_link=Link(5.0, 1.0))


def test_nestc_quirk_sends_every_supported_op_to_the_accelerator() -> None:
    p = conv_chain(conv_cpu=100, conv_npu=300)  # the cpu is 3x faster on convolutions
    faithful = get_scheduler("nestc").schedule(p)
    repaired = get_scheduler("nestc-repaired").schedule(p)
    assert faithful.assignment == {"conv0": "npu", "relu0": "cpu", "conv1": "npu", "relu1": "cpu"}
    # 300, transfer 5 + 1000 B at 1 B/ns = 6, 10, 6, 300, 6, 10
    assert faithful.makespan == 638
    assert set(repaired.assignment.values()) == {"cpu"}
    assert repaired.makespan == 220


def test_nestc_repaired_offloads_when_the_accelerator_is_much_faster() -> None:
    p = conv_chain(conv_cpu=5000, conv_npu=10)  # saves more than the 2000 µs penalty
    s = get_scheduler("nestc-repaired").schedule(p)
    assert s.assignment == {"conv0": "npu", "relu0": "cpu", "conv1": "npu", "relu1": "cpu"}


def test_nestc_switch_penalty_keeps_small_savings_on_one_unit() -> None:
    p = conv_chain(conv_cpu=1500, conv_npu=10)  # 1490 saved < 2000 penalty + transfers
    assert set(get_scheduler("nestc-repaired").schedule(p).assignment.values()) == {"cpu"}


def test_nestc_fused_pair_pulls_both_nodes_onto_one_unit() -> None:
    cost = {"p": {"cpu": 10, "npu": 12}, "x": {"cpu": 10, "npu": 12}}
    apart = Problem(["p", "x"], ["cpu", "npu"], cost, [Edge("p", "x", 0)])
    fused = Problem(["p", "x"], ["cpu", "npu"], cost, [Edge("p", "x", 0)],
                    groups=[FusedGroup(("p", "x"), {"npu": 5.0})])  # fmt: skip
    assert set(get_scheduler("nestc-repaired").schedule(apart).assignment.values()) == {"cpu"}
    # on npu: 12 - 12 + 5 = 5 < 20 on cpu
    assert set(get_scheduler("nestc-repaired").schedule(fused).assignment.values()) == {"npu"}
    # a group of three is ignored, as NEST-C fuses pairs only
    cost["y"] = {"cpu": 10, "npu": 12}
    triple = Problem(["p", "x", "y"], ["cpu", "npu"], cost, [Edge("p", "x", 0), Edge("x", "y", 0)],
                     groups=[FusedGroup(("p", "x", "y"), {"npu": 1.0})])  # fmt: skip
    assert set(get_scheduler("nestc-repaired").schedule(triple).assignment.values()) == {"cpu"}


def test_nestc_ties_go_to_the_later_unit() -> None:
    # x costs the same on both accelerators (not identical units: z differs)
    cost = {"x": {"cpu": 9, "a1": 3, "a2": 3}, "z": {"cpu": 9, "a1": 1, "a2": 2}}
    p = Problem(["x", "z"], ["cpu", "a1", "a2"], cost)
    assert get_scheduler("nestc-repaired").schedule(p).assignment == {"x": "a2", "z": "a1"}


def test_nestc_uses_the_declared_default_unit() -> None:
    cost = {"x": {"npu": 1, "cpu": 5}, "y": {"npu": INF, "cpu": 5}}
    p = Problem(["x", "y"], ["npu", "cpu"], cost, default_unit="cpu")
    # quirk (a) on the cpu: x goes to the npu, y (no accelerator runs it) to the cpu
    assert get_scheduler("nestc").schedule(p).assignment == {"x": "npu", "y": "cpu"}


def test_nestc_default_unit_is_the_first_that_runs_everything() -> None:
    """The accelerator listed first (static's priority) does not become NEST-C's default."""
    cost = {"x": {"npu": 1, "cpu": 5}, "y": {"npu": INF, "cpu": 5}}
    p = Problem(["x", "y"], ["npu", "cpu"], cost)
    assert p.default == "cpu"
    assert get_scheduler("nestc").schedule(p).assignment == {"x": "npu", "y": "cpu"}
    p2 = Problem(["x"], ["a", "b"], {"x": {"a": INF, "b": INF}})
    assert p2.default == "a"  # none runs everything: the first, as before


def diamond_cpu_npu() -> Problem:
    """a -> (b, c) -> d; only b runs on the npu."""
    cost = {"a": {"cpu": 1, "npu": INF}, "b": {"cpu": 8, "npu": 4},
            "c": {"cpu": 6, "npu": INF}, "d": {"cpu": 1, "npu": INF}}  # fmt: skip
    edges = [Edge(x, y, 100, (f"{x}_out",)) for x, y in ["ab", "ac", "bd", "cd"]]
    return Problem(list("abcd"), ["cpu", "npu"], cost, edges, default_link=Link(1.0, INF))


@pytest.mark.parametrize("repaired", [False, True])
def test_nestc_one_accelerator_runs_a_cpu_and_an_npu_sibling_in_parallel(repaired: bool) -> None:
    p = diamond_cpu_npu()
    assert nestc_stages(p, repaired=repaired) == [
        Stage(False, (("cpu", ("a",)),)),
        Stage(True, (("npu", ("b",)), ("cpu", ("c",)))),
        Stage(False, (("cpu", ("d",)),)),
    ]
    s = get_scheduler("nestc-repaired" if repaired else "nestc").schedule(p)
    # a 0-1; b on npu 2-6 (1 µs link); c on cpu 1-7; d 7-8
    assert {n: (sl.unit, sl.start, sl.end) for n, sl in s.slots.items()} == {
        "a": ("cpu", 0, 1), "b": ("npu", 2, 6), "c": ("cpu", 1, 7), "d": ("cpu", 7, 8),
    }  # fmt: skip


def test_nestc_one_accelerator_keeps_two_npu_siblings_sequential() -> None:
    p = diamond_cpu_npu()
    p.cost["c"] = {"cpu": 6, "npu": 3}
    stages = nestc_stages(p)
    assert not any(st.parallel for st in stages)
    assert [part for st in stages for part in st.partitions] == [
        ("cpu", ("a",)), ("npu", ("b", "c")), ("cpu", ("d",)),
    ]  # fmt: skip


def two_npus(n_branches: int = 2) -> Problem:
    """a -> n branches of two nodes -> d; npu0 and npu1 identical, a and d cpu-only."""
    nodes = ["a"] + [f"{b}{i}" for b in "bcef"[:n_branches] for i in (1, 2)] + ["d"]
    cost = {n: {"cpu": 10.0, "npu0": 2.0, "npu1": 2.0} for n in nodes}
    cost["a"] = cost["d"] = {"cpu": 1.0, "npu0": INF, "npu1": INF}
    cost["b1"] = {"cpu": 10.0, "npu0": 3.0, "npu1": 3.0}  # the heaviest branch
    edges = []
    for b in "bcef"[:n_branches]:
        edges += [Edge("a", f"{b}1", 0), Edge(f"{b}1", f"{b}2", 0), Edge(f"{b}2", "d", 0)]
    return Problem(nodes, ["cpu", "npu0", "npu1"], cost, edges)


def test_nestc_spreads_parallel_siblings_over_accelerator_instances() -> None:
    p = two_npus()
    assert nestc_stages(p)[1] == Stage(True, (("npu0", ("b1", "b2")), ("npu1", ("c1", "c2"))))
    s = get_scheduler("nestc").schedule(p)
    assert s.slots["b2"].end == 6 and s.slots["c2"].end == 5 and s.makespan == 7


def test_nestc_merges_extra_parallel_partitions_onto_an_instance() -> None:
    p = two_npus(4)  # weights: b 5, c e f 4: b -> npu0, c -> npu1, e -> npu1, f -> npu0
    stage = nestc_stages(p)[1]
    assert stage.parallel
    assert dict((nodes[0][0], unit) for unit, nodes in stage.partitions) == {
        "b": "npu0", "c": "npu1", "e": "npu1", "f": "npu0",
    }  # fmt: skip
    check(p, get_scheduler("nestc").schedule(p), "nestc")


def test_nestc_without_accelerators_runs_everything_on_the_default_unit() -> None:
    p = make_problem("two_branch", "one_unit")
    for name in ("nestc", "nestc-repaired"):
        s = get_scheduler(name).schedule(p)
        assert set(s.assignment.values()) == {"u0"} and s.makespan == 16


# -- branch ----------------------------------------------------------------------------------


def diamond_two_equal(latency: float) -> Problem:
    cost = {"a": {"u0": 1, "u1": 1}, "b": {"u0": 10, "u1": 10},
            "c": {"u0": 10, "u1": 10}, "d": {"u0": 1, "u1": 1}}  # fmt: skip
    edges = [Edge(x, y, 0) for x, y in ["ab", "ac", "bd", "cd"]]
    return Problem(list("abcd"), ["u0", "u1"], cost, edges, default_link=Link(latency, INF))


def test_branch_runs_a_diamond_in_parallel_when_faster() -> None:
    # region: sequential 20; parallel 1 + 10 + 1 = 12 (c on u1, its input and output cross)
    s = get_scheduler("branch").schedule(diamond_two_equal(latency=1.0))
    assert {n: (sl.unit, sl.start, sl.end) for n, sl in s.slots.items()} == {
        "a": ("u0", 0, 1), "b": ("u0", 1, 11), "c": ("u1", 2, 12), "d": ("u0", 13, 14),
    }  # fmt: skip


@pytest.mark.parametrize("latency", [5.0, 6.0])
def test_branch_stays_sequential_unless_strictly_faster(latency: float) -> None:
    # parallel takes 10 + 2 * latency >= 20
    s = get_scheduler("branch").schedule(diamond_two_equal(latency))
    assert set(s.assignment.values()) == {"u0"} and s.makespan == 22


def test_branch_greedy_beyond_the_cap(monkeypatch) -> None:
    monkeypatch.setattr(branch_mod, "MAX_COMBINATIONS", 1)
    s = get_scheduler("branch").schedule(diamond_two_equal(latency=1.0))
    assert s.makespan == 14 and s.assignment["b"] != s.assignment["c"]


def test_branch_puts_nodes_outside_groups_on_the_best_single_unit() -> None:
    for units in ("two_unequal_slow_link", "more_units_than_nodes"):
        p = make_problem("chain", units)
        s = get_scheduler("branch").schedule(p)
        assert s.makespan == get_scheduler("single").schedule(p).makespan
    # no unit runs everything: the cpu cannot run c, the npu cannot run b; the cpu is
    # cheaper on what it can run, and c goes to its own cheapest unit
    cost = {"a": {"cpu": 1, "npu": 5}, "b": {"cpu": 1, "npu": INF}, "c": {"cpu": INF, "npu": 5}}
    q = Problem(list("abc"), ["cpu", "npu"], cost, [Edge("a", "b", 0), Edge("b", "c", 0)])
    assert get_scheduler("branch").schedule(q).assignment == {"a": "cpu", "b": "cpu", "c": "npu"}


def test_branch_keeps_a_branch_wholly_on_one_unit() -> None:
    p = make_problem("two_branch", "two_equal")
    s = get_scheduler("branch").schedule(p)
    for group in parallel_groups(p):
        for br in group.branches:
            assert len({s.slots[n].unit for n in br}) == 1


# -- cpop ------------------------------------------------------------------------------------


def test_cpop_reproduces_topcuoglu_fig2() -> None:
    p = topcuoglu_fig2()
    paper = {"n1": 0, "n2": 31, "n3": 25, "n4": 22, "n5": 24, "n6": 27, "n7": 62.333,
             "n8": 66.667, "n9": 63.667, "n10": 93.333}  # fmt: skip
    assert downward_rank(p) == pytest.approx(paper, abs=1e-3)
    assert critical_path(p) == ["n1", "n2", "n9", "n10"]  # |CP| = 108
    s = get_scheduler("cpop").schedule(p)
    check(p, s, "cpop")
    assert s.makespan == 86.0
    assert all(s.slots[n].unit == "P2" for n in ["n1", "n2", "n9", "n10"])  # 54 on P2


def test_cpop_without_a_unit_for_the_whole_critical_path() -> None:
    # a -> b: no unit runs both; each goes where it finishes first
    cost = {"a": {"u": 2, "v": INF}, "b": {"u": INF, "v": 3}}
    p = Problem(["a", "b"], ["u", "v"], cost, [Edge("a", "b", 0)])
    s = get_scheduler("cpop").schedule(p)
    assert s.assignment == {"a": "u", "b": "v"} and s.makespan == 5


def test_cpop_critical_path_on_one_unit_even_if_slower_there() -> None:
    # critical path a -> b -> d; u is cheapest for it (1 + 10 + 1); c is faster on v
    cost = {"a": {"u": 1, "v": 5}, "b": {"u": 10, "v": 12}, "c": {"u": 5, "v": 2},
            "d": {"u": 1, "v": 5}}  # fmt: skip
    p = Problem(
        list("abcd"), ["u", "v"], cost, [Edge(x, y, 0) for x, y in ["ab", "ac", "bd", "cd"]]
    )
    s = get_scheduler("cpop").schedule(p)
    assert critical_path(p) == ["a", "b", "d"]
    assert s.assignment == {"a": "u", "b": "u", "c": "v", "d": "u"} and s.makespan == 12


# -- dag_branches ----------------------------------------------------------------------------


def levels(p: Problem) -> list[tuple[tuple[str, ...], int]]:
    return [(b.nodes, b.level) for b in nest_branches(p)]


def test_nest_branches_by_hand() -> None:
    nodes, pairs = DAGS["chain"]
    assert levels(dag(nodes, pairs)) == [(("a", "b", "c", "d"), 0)]
    nodes, pairs = DAGS["diamond"]
    assert levels(dag(nodes, pairs)) == [(("a",), 2), (("b",), 1), (("c",), 1), (("d",), 0)]
    nodes, pairs = DAGS["two_branch"]
    assert levels(dag(nodes, pairs)) == [
        (("a",), 2), (("b1", "b2"), 1), (("c1", "c2"), 1), (("d",), 0),
    ]  # fmt: skip
    nodes, pairs = DAGS["fork"]  # a fork without a join: outputs at level 0
    assert levels(dag(nodes, pairs)) == [(("a",), 1), (("b",), 0), (("c",), 0), (("d",), 0)]
    assert levels(dag([], [])) == []


def test_nest_branches_nested_take_the_deepest_level() -> None:
    # s -> a -> (b -> (c, d) -> e, f) -> g -> h
    p = dag(list("sabcdefgh"), ["sa", "ab", "bc", "bd", "ce", "de", "af", "eg", "fg", "gh"])
    assert levels(p) == [
        (("s", "a"), 4), (("b",), 3), (("c",), 2), (("d",), 2), (("e",), 1), (("f",), 1),
        (("g", "h"), 0),
    ]  # fmt: skip
    sib = [(s.join, [b.nodes for b in s.branches]) for s in nest_siblings(p)]
    assert sib == [("e", [("c",), ("d",)]), ("g", [("e",), ("f",)])]
    # a branch read by a shallow and a deep walk: a feeds c directly and through b
    q = dag(list("abc"), ["ab", "bc", "ac"])
    assert levels(q) == [(("a",), 2), (("b",), 1), (("c",), 0)]


def test_parallel_groups_by_hand() -> None:
    nodes, pairs = DAGS["two_branch"]
    assert parallel_groups(dag(nodes, pairs)) == [
        ParallelGroup("a", "d", (("b1", "b2"), ("c1", "c2")))
    ]
    nodes, pairs = DAGS["join"]
    assert parallel_groups(dag(nodes, pairs)) == [
        ParallelGroup(None, "d", (("a",), ("b",), ("c",)))
    ]
    for name in ("chain", "fork", "one", "empty"):
        nodes, pairs = DAGS[name]
        assert parallel_groups(dag(nodes, pairs)) == []
    # a residual shortcut a -> c beside a -> b -> c is one branch only
    assert parallel_groups(dag("abc", ["ab", "bc", "ac"])) == []
    # a side output leaving the region disqualifies that piece
    assert parallel_groups(dag("abcde", ["ab", "ac", "bd", "cd", "ce"])) == []


@st.composite
def dags(draw) -> Problem:
    n = draw(st.integers(0, 10))
    nodes = [f"n{i}" for i in range(n)]
    pairs = [
        (nodes[i], nodes[j]) for j in range(n) for i in range(j) if draw(st.integers(0, 3)) == 0
    ]
    return dag(nodes, pairs)


def reaches(p: Problem, a: str, b: str) -> bool:
    stack, seen = [a], set()
    while stack:
        n = stack.pop()
        if n == b:
            return True
        if n not in seen:
            seen.add(n)
            stack.extend(p.succs(n))
    return False


@PROPERTY
@given(dags())
def test_nest_branches_cover_and_order(p: Problem) -> None:
    branches = nest_branches(p)
    flat = [n for b in branches for n in b.nodes]
    assert sorted(flat) == sorted(p.nodes) and len(flat) == len(set(flat))
    pos = {n: i for i, n in enumerate(flat)}
    assert all(pos[e.src] < pos[e.dst] for e in p.edges)  # deepest first is topological
    level = {n: b.level for b in branches for n in b.nodes}
    for b in branches:
        for x, y in itertools.pairwise(b.nodes):  # chained one to one
            assert p.succs(x) == [y] and p.preds(y) == [x]
        readers = p.succs(b.nodes[-1])
        assert b.level == max((level[s] + 1 for s in readers), default=0)
    for sib in nest_siblings(p, branches):
        assert [b.nodes[-1] for b in sib.branches] == p.preds(sib.join)
        assert all(isinstance(b, Branch) for b in sib.branches)


@PROPERTY
@given(dags())
def test_parallel_groups_are_independent_branches(p: Problem) -> None:
    for g in parallel_groups(p):
        assert len(g.branches) >= 2
        members = [n for br in g.branches for n in br]
        assert len(members) == len(set(members))
        for br in g.branches:
            assert list(br) == sorted(br, key=p.index)
            for n in br:
                assert all(s in br or s == g.join for s in p.succs(n))
                assert all(q in br or q == g.fork for q in p.preds(n))
            assert any(g.join in p.succs(n) for n in br)
        for x, y in itertools.permutations(g.branches, 2):
            assert not any(reaches(p, a, b) for a in x for b in y)


# -- oracle ----------------------------------------------------------------------------------


def test_oracle_hand_optima() -> None:
    # a fork on two equal units, 1 µs link: b and c side by side, one of them a µs late
    cost = {n: {"u": 2, "v": 2} for n in "abc"}
    p = Problem(list("abc"), ["u", "v"], cost, [Edge("a", "b", 0), Edge("a", "c", 0)],
                default_link=Link(1.0, INF))  # fmt: skip
    assert brute_force(p).makespan == 5
    # a slow link: everything on one unit
    p = Problem(list("abc"), ["u", "v"], cost, [Edge("a", "b", 0), Edge("a", "c", 0)],
                default_link=Link(10.0, INF))  # fmt: skip
    assert brute_force(p).makespan == 6
    # an infinite cost forces the split: a on u, b on v after 3 µs
    cost = {"a": {"u": 1, "v": INF}, "b": {"u": INF, "v": 1}}
    p = Problem(["a", "b"], ["u", "v"], cost, [Edge("a", "b", 0)], default_link=Link(3.0, INF))
    assert brute_force(p).makespan == 5
    assert brute_force(Problem([], ["u"], {})).makespan == 0


@pytest.mark.parametrize(("both_cores", "optimum"), [(1.2, 2.0), (0.9, 1.8)])
def test_oracle_respects_shared_hardware(both_cores: float, optimum: float) -> None:
    # two independent nodes: side by side on cpu0 and cpu1 (2 each), or on cpu01 in turn
    units = ["cpu0", "cpu1", "cpu01"]
    cost = {n: {"cpu0": 2.0, "cpu1": 2.0, "cpu01": both_cores} for n in "ab"}
    res = {"cpu0": {"c0"}, "cpu1": {"c1"}, "cpu01": {"c0", "c1"}}
    p = Problem(["a", "b"], units, cost, resources={u: frozenset(r) for u, r in res.items()})
    s = brute_force(p)
    s.validate(p)
    assert s.makespan == pytest.approx(optimum)


def test_oracle_on_topcuoglu_fig2_beats_the_heuristics() -> None:
    p = topcuoglu_fig2()
    s = brute_force(p)
    check(p, s, "brute-force")
    assert s.makespan <= 80  # HEFT's, the best of the paper's schedules


def test_oracle_refuses_big_problems() -> None:
    p = make_problem("wide_fanout", "two_equal")  # 10 nodes
    with pytest.raises(ValueError, match="at most 8 nodes"):
        brute_force(p, max_nodes=8)


def naive_optimum(p: Problem) -> float:
    """Every assignment times every topological order, list-scheduled, no pruning."""

    def orders(done: list[str]):
        if len(done) == len(p.nodes):
            yield list(done)
        for n in p.nodes:
            if n not in done and all(q in done for q in p.preds(n)):
                yield from orders([*done, n])

    best = math.inf
    for units in itertools.product(*(p.runnable_units(n) for n in p.nodes)):
        for order in orders([]):
            timeline = Timeline(p, insertion=False)
            assign = dict(zip(p.nodes, units, strict=True))
            for n in order:
                timeline.place(n, assign[n])
            best = min(best, timeline.end)
    return best if p.nodes else 0.0


@PROPERTY
@given(st.one_of(problems(max_nodes=4, max_units=3), problems(4, 3, degenerate=True)))
def test_oracle_matches_the_unpruned_enumeration(p: Problem) -> None:
    assert brute_force(p).makespan == pytest.approx(naive_optimum(p), rel=1e-9, abs=1e-9)
