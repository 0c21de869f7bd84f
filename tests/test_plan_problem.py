"""Problem: links, adjacency, payloads, validation errors, bounds and the JSON format."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given

from partuner.errors import InfeasiblePlanError, PartunerError, ProfileError
from partuner.plan import (
    Edge,
    Link,
    Problem,
    critical_path_bound,
    lower_bound,
    total_work_bound,
    upward_rank,
)
from test_plan_cases import CASES, INF, PROPERTY, make_problem, problems


def diamond(**kw) -> Problem:
    cost = {"a": {"u": 1.0, "v": 2.0}, "b": {"u": 2.0, "v": INF}, "c": {"u": 3.0, "v": 1.0}}
    cost["d"] = {"u": 4.0, "v": 4.0}
    edges = [
        Edge("a", "b", 100, ("x",)),
        Edge("a", "c", 100, ("x",)),
        Edge("b", "d", 10),
        Edge("c", "d", 20),
    ]
    return Problem(["a", "b", "c", "d"], ["u", "v"], cost, edges, **kw)


def test_link_transfer_time() -> None:
    assert Link(5.0, 2.0).transfer_us(4000) == 7.0  # 2 GB/s = 2000 bytes per µs
    assert Link(5.0, math.inf).transfer_us(10**9) == 5.0
    assert Link(0.0, 0.5).transfer_us(0) == 0.0


def test_problem_transfer_uses_either_order_and_default() -> None:
    p = diamond(links={("v", "u"): Link(3.0, 1.0)}, default_link=Link(100.0, 1.0))
    assert p.transfer_us("u", "v", 2000) == 5.0
    assert p.transfer_us("v", "u", 2000) == 5.0
    assert p.transfer_us("u", "u", 2000) == 0.0
    q = Problem(["a"], ["u", "v", "w"], {"a": {"u": 1, "v": 1, "w": 1}}, default_link=Link(9, 1))
    assert q.transfer_us("u", "w", 1000) == 10.0


def test_adjacency_is_deduplicated_and_topological() -> None:
    p = diamond()
    p.edges.append(Edge("a", "b", 100, ("y",)))  # a second edge a -> b before first use
    assert p.succs("a") == ["b", "c"]
    assert p.preds("d") == ["b", "c"]
    assert p.preds("a") == [] and p.succs("d") == []


def test_payload_counts_a_shared_value_once() -> None:
    p = Problem(
        ["a", "b"],
        ["u"],
        {"a": {"u": 1}, "b": {"u": 1}},
        [Edge("a", "b", 100, ("x",)), Edge("a", "b", 100, ("x",)), Edge("a", "b", 300, ("y", "z"))],
    )
    assert p.pair_nbytes("a", "b") == 400
    assert p.payload(0) == p.payload(1) == {("a", "x"): 100.0}
    assert p.payload(2) == {("a", "y"): 150.0, ("a", "z"): 150.0}


def test_payload_takes_exact_sizes_from_single_value_edges() -> None:
    edges = [Edge("a", "b", 500, ("x", "y")), Edge("a", "c", 100, ("x",)), Edge("a", "c", 7)]
    p = Problem(["a", "b", "c"], ["u"], {n: {"u": 1} for n in "abc"}, edges)
    assert p.payload(0) == {("a", "x"): 100.0, ("a", "y"): 400.0}
    assert p.payload(2) == {("#edge", 2): 7.0}
    assert p.pair_nbytes("a", "c") == 107
    assert p.comm_us("a", "c", "u", "u") == 0.0


def test_cycle_names_the_nodes_on_it() -> None:
    cost = {n: {"u": 1.0} for n in "abcd"}
    edges = [Edge("a", "b", 1), Edge("b", "c", 1), Edge("c", "b", 1), Edge("c", "d", 1)]
    with pytest.raises(InfeasiblePlanError) as info:
        Problem(list("abcd"), ["u"], cost, edges).validate()
    # a and d touch the cycle but are not on it
    assert re.search(r"has a cycle of 2 node\(s\): (b -> c -> b|c -> b -> c);", str(info.value))


def test_self_loop_is_a_cycle() -> None:
    with pytest.raises(InfeasiblePlanError, match="a -> a"):
        Problem(["a"], ["u"], {"a": {"u": 1.0}}, [Edge("a", "a", 1)]).validate()


def test_node_no_unit_can_run() -> None:
    p = diamond()
    p.cost["c"] = {"u": INF, "v": INF}
    with pytest.raises(InfeasiblePlanError) as info:
        p.validate()
    assert str(info.value).startswith("node 'c' cannot run on any unit; tried ['u', 'v']: add")


@pytest.mark.parametrize(
    ("change", "error", "pattern"),
    [
        (lambda p: p.cost["b"].pop("u"), ProfileError, "'b' has no cost on unit 'u'"),
        (lambda p: p.cost.pop("d"), ProfileError, "'d' has no costs"),
        (lambda p: p.cost["a"].update(u=-1.0), ProfileError, "'a' has invalid cost -1.0"),
        (lambda p: p.cost["a"].update(v=math.nan), ProfileError, "'a' has invalid cost nan"),
        (lambda p: p.edges.append(Edge("a", "q", 1)), InfeasiblePlanError, "unknown node 'q'"),
        (lambda p: p.edges.append(Edge("a", "d", -1)), InfeasiblePlanError, "moves -1 bytes"),
        (lambda p: p.edges.append(Edge("a", "d", 10**300)), InfeasiblePlanError, "give 0 to"),
        (lambda p: p.cost["a"].update(u=1e308), ProfileError, r"invalid cost 1e\+308"),
        (lambda p: p.call_overhead_us.update(u=INF), PartunerError, r"from 0 to 1e\+12"),
        (lambda p: p.nodes.reverse(), InfeasiblePlanError, "not in topological order"),
        (lambda p: p.nodes.append("a"), InfeasiblePlanError, "node 'a' is listed twice"),
        (lambda p: p.units.append("u"), InfeasiblePlanError, "unit 'u' is listed twice"),
        (lambda p: p.links.update({("u", "w"): Link(1, 1)}), PartunerError, "unknown unit 'w'"),
        (lambda p: p.links.update({("u", "v"): Link(1, 0)}), PartunerError, "gbps > 0"),
        (lambda p: p.links.update({("u", "v"): Link(-1, 1)}), PartunerError, "latency_us >= 0"),
        (lambda p: p.call_overhead_us.update(w=1.0), PartunerError, "unknown unit 'w'"),
        (
            lambda p: p.call_overhead_us.update(u=-1.0),
            PartunerError,
            r"must be from 0 to 1e\+12 µs",
        ),
        (lambda p: p.corun.update(u=0.9), PartunerError, "'u' must be a factor from 1 to 100"),
        (lambda p: p.corun.update(u=1e300), PartunerError, "'u' must be a factor from 1 to 100"),
        (lambda p: p.corun.update(v=INF), PartunerError, "corun of unit 'v' must be"),
        (lambda p: p.corun.update(w=1.1), PartunerError, "corun given for unknown unit 'w'"),
    ],
)
def test_validate_names_the_problem(change, error, pattern) -> None:
    p = diamond()
    change(p)
    with pytest.raises(error, match=pattern):
        p.validate()


def test_modeled_must_name_units() -> None:
    with pytest.raises(PartunerError, match=r"modeled names unknown units \['npu'\]"):
        diamond(modeled={"npu"}).validate()


def test_bounds_by_hand() -> None:
    p = diamond()
    # min costs a=1, b=2, c=1, d=4: longest path a-b-d = 7; work 8 over 2 units = 4
    assert critical_path_bound(p) == 7.0
    assert total_work_bound(p) == 4.0
    assert lower_bound(p) == 7.0
    empty = Problem([], ["u"], {})
    assert lower_bound(empty) == 0.0


def test_upward_rank_by_hand() -> None:
    p = diamond(links={("u", "v"): Link(1.0, 0.1)})  # 0.1 GB/s = 100 bytes per µs
    rank = upward_rank(p)
    assert rank["d"] == 4.0
    # b runs only on u: its transfer to d averages over (u, v) only = 1 + 0.1
    assert rank["b"] == pytest.approx(2.0 + 1.1 + 4.0)
    assert rank["c"] == pytest.approx(2.0 + 1.2 + 4.0)
    # a -> c moves x (100 bytes): pairs (u, v), (v, u) both 2 µs; a -> b only (v, u): 2 µs
    assert rank["a"] == pytest.approx(1.5 + max(2.0 + rank["b"], 2.0 + rank["c"]))


@PROPERTY
@given(problems())
def test_upward_rank_dominates_successors(p: Problem) -> None:
    rank = upward_rank(p)
    for n in p.nodes:
        for s in p.succs(n):
            assert rank[n] >= rank[s]


@PROPERTY
@given(problems())
def test_lower_bound_is_max_of_the_two(p: Problem) -> None:
    assert lower_bound(p) == max(critical_path_bound(p), total_work_bound(p))
    assert critical_path_bound(p) >= max((min(p.cost[n].values()) for n in p.nodes), default=0)


def test_json_round_trip_keeps_infinity_as_a_string() -> None:
    p = diamond(
        links={("u", "v"): Link(3.0, INF)},
        default_link=Link(1.0, 2.0),
        call_overhead_us={"v": 30.0},
        modeled={"v"},
        name="dia",
        corun={"u": 1.25},
    )
    text = p.to_json()
    assert "Infinity" not in text
    data = json.loads(text)
    assert data["format"] == "partuner.problem" and data["version"] == 1
    assert data["cost"]["b"]["v"] == "inf"
    assert data["links"] == [{"a": "u", "b": "v", "latency_us": 3.0, "gbps": "inf"}]
    assert data["edges"][0] == {"src": "a", "dst": "b", "nbytes": 100, "values": ["x"]}
    assert data["corun"] == {"u": 1.25}
    assert Problem.from_json(text) == p


@pytest.mark.parametrize(("dag", "units"), CASES)
def test_json_round_trip_canonical(dag: str, units: str) -> None:
    p = make_problem(dag, units)
    q = Problem.from_json(p.to_json())
    assert q == p
    assert [q.preds(n) for n in q.nodes] == [p.preds(n) for n in p.nodes]


@PROPERTY
@given(problems())
def test_json_round_trip_random(p: Problem) -> None:
    assert Problem.from_json(p.to_json(indent=None)) == p


def test_from_json_defaults_optional_keys() -> None:
    text = json.dumps(
        {"format": "partuner.problem", "version": 1, "nodes": ["a"], "units": ["u"],
         "cost": {"a": {"u": "inf"}}}
    )  # fmt: skip
    p = Problem.from_json(text)
    assert p.cost == {"a": {"u": INF}}
    assert p.edges == [] and p.links == {} and p.modeled == frozenset()
    assert p.default_link == Link(0.0, INF) and p.name == "problem"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("{", "not valid JSON"),
        ('{"format": "other", "version": 1}', "not a partuner.problem version 1 file"),
        ('{"format": "partuner.problem", "version": 1, "units": []}', "required key 'nodes'"),
        (
            '{"format": "partuner.problem", "version": 1, "nodes": ["a"], "units": ["u"], '
            '"cost": {"a": {"u": "fast"}}}',
            "expected a number or 'inf', got 'fast'",
        ),
        ("[1, 2]", "malformed problem JSON"),
    ],
)
def test_from_json_rejects_malformed(text: str, pattern: str) -> None:
    with pytest.raises(PartunerError, match=pattern):
        Problem.from_json(text)


def test_to_json_rejects_nan() -> None:
    p = diamond()
    p.cost["a"]["u"] = math.nan
    with pytest.raises(PartunerError, match="cannot write nan"):
        p.to_json()


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        ('{"nodes": [' + "9" * 5000 + "]}", "not a problem --dump-problem writes"),
    ],
)
def test_a_problem_file_no_parser_should_swallow_is_one_clear_error(text, pattern) -> None:
    with pytest.raises(PartunerError, match=pattern):
        Problem.from_json(text)


def test_problem_fields_of_the_wrong_kind_are_one_clear_error() -> None:
    data = json.loads(diamond().to_json())
    for change, pattern in [
        (lambda d: d.update(default_unit=[1]), "default_unit must be a unit's name"),
        (lambda d: d["edges"][0].update(nbytes=1e308), "give 0 to"),
        (lambda d: d["edges"][0].update(nbytes="inf"), "whole number of bytes"),
    ]:
        bad = json.loads(json.dumps(data))
        change(bad)
        with pytest.raises(PartunerError, match=pattern):
            Problem.from_json(json.dumps(bad)).validate()


def test_a_malformed_problem_field_is_named() -> None:
    data = json.loads(diamond().to_json())
    for change, pattern in [
        (lambda d: d.update(corun=[1.1, 1.2]), r"`corun`: expected a mapping"),
        (lambda d: d.update(corun=None), r"`corun`: expected a mapping"),
        (lambda d: d.update(resources={"u": 5}), r"`resources`: expected a list"),
        (lambda d: d["edges"].append("a->b"), r"`edges`: "),
        (lambda d: d["edges"][0].pop("dst"), r"`edges` lacks required key 'dst'"),
        (lambda d: d.pop("nodes"), r"problem JSON lacks required key 'nodes'"),
        (lambda d: d["cost"]["a"].update(u="fast"), r"`cost`: expected a number"),
    ]:
        bad = json.loads(json.dumps(data))
        change(bad)
        with pytest.raises(PartunerError, match=pattern):
            Problem.from_json(json.dumps(bad))
