"""Fused groups: the chain rule, patterns and NEST-C profileConfigs, automatic groups, and their
costs on the node costs' scale, carried into the planner's Problem."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from partuner.errors import ProfileError
from partuner.graph import load_model
from partuner.pipeline import build_problem
from partuner.plan.simulate import partition_cost
from partuner.profile import ProfileStore, find_chains, node_signature, profile_model
from partuner.profile.groups import (
    REGION_MAX_NODES,
    differs_beyond_noise,
    fused_saving,
    group_signature,
    next_in_chain,
    parse_pattern,
    parse_profile_configs,
    region_groups,
    sequential_chains,
)
from partuner.profile.store import Measurement
from partuner.units import load_units


def _conv(name: str, x: str, c_in: int, c_out: int, inits: list) -> helper.NodeProto:
    w = np.random.default_rng(0).standard_normal((c_out, c_in, 3, 3)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, f"{name}.w"))
    return helper.make_node("Conv", [x, f"{name}.w"], [f"{name}.y"], name=name, pads=[1] * 4)


@pytest.fixture(scope="module")
def small():
    """c1 -> r1 -> c2 -> add(c2, r1) -> r2 -> c3 -> r3 -> tail; r3 is also a graph output.

    r1 has two readers (c2 and add), so c1-r1 is a chain but r1-c2 is not; r3 is a graph
    output, so r3-tail is not a chain.
    """
    inits: list = []
    nodes = [
        _conv("c1", "x", 4, 4, inits),
        helper.make_node("Relu", ["c1.y"], ["r1.y"], name="r1"),
        _conv("c2", "r1.y", 4, 4, inits),
        helper.make_node("Add", ["c2.y", "r1.y"], ["add.y"], name="add"),
        helper.make_node("Relu", ["add.y"], ["r2.y"], name="r2"),
        _conv("c3", "r2.y", 4, 4, inits),
        helper.make_node("Relu", ["c3.y"], ["r3.y"], name="r3"),
        helper.make_node("Neg", ["r3.y"], ["tail.y"], name="tail"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    outs = [
        helper.make_tensor_value_info("r3.y", TensorProto.FLOAT, [1, 4, 8, 8]),
        helper.make_tensor_value_info("tail.y", TensorProto.FLOAT, [1, 4, 8, 8]),
    ]
    g = helper.make_graph(nodes, "small", [x], outs, initializer=inits)
    return load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_chain_rule_on_a_hand_made_graph(small):
    assert next_in_chain(small, "c1") == "r1"
    assert next_in_chain(small, "r1") is None  # read by c2 and add
    assert next_in_chain(small, "c2") == "add"  # add also reads r1: allowed
    assert next_in_chain(small, "r3") is None  # a graph output
    assert find_chains(small, ["Conv", "Relu"]) == [("c1", "r1"), ("c3", "r3")]
    assert find_chains(small, ["Conv", "Add", "Relu"]) == [("c2", "add", "r2")]
    assert find_chains(small, ["Relu", "Conv"]) == [("r2", "c3")]
    assert find_chains(small, ["Add", "Conv"]) == []
    assert sequential_chains(small, 2) == [
        ("c1", "r1"),
        ("c2", "add"),
        ("add", "r2"),
        ("r2", "c3"),
        ("c3", "r3"),
    ]
    three = set(sequential_chains(small, 3)) - set(sequential_chains(small, 2))
    assert three == {("c2", "add", "r2"), ("add", "r2", "c3"), ("r2", "c3", "r3")}


def test_every_automatic_chain_follows_the_rule(branchy):
    chains = sequential_chains(branchy, 4)
    assert len(set(chains)) == len(chains)
    for c in chains:
        assert 2 <= len(c) <= 4
        for a, b in zip(c, c[1:], strict=False):
            assert next_in_chain(branchy, a) == b
            assert branchy.successors(a) == [b]


def test_patterns_and_profile_configs(tmp_path):
    assert parse_pattern("Convolution-Relu") == ["Conv", "Relu"]
    assert parse_pattern(" FullyConnected - Relu ") == ["Gemm", "Relu"]
    assert parse_pattern("Conv+Add+Relu") == ["Conv", "Add", "Relu"]
    for bad in ("Xonv-Relu", "Relu", "Conv--Relu", ""):
        with pytest.raises(ProfileError, match="fuse pattern"):
            parse_pattern(bad)
    p = tmp_path / "profileConfigs.yaml"
    p.write_text(
        "---\nname: Profile1\nfuseOperators: |\n  Convolution-Relu\n  Convolution-Add-Relu\n"
        "...\n---\nname: Profile2\nfuseOperators: AvgPool-Relu, Relu-Convolution\n"
    )
    assert parse_profile_configs(p) == [
        ["Conv", "Relu"],
        ["Conv", "Add", "Relu"],
        ["AveragePool", "Relu"],
        ["Relu", "Conv"],
    ]
    p.write_text("name: P\nfuseOperators: Convolution-Xyz\n")
    with pytest.raises(ProfileError, match="Xyz"):
        parse_profile_configs(p)
    p.write_text("- just a list\n")
    with pytest.raises(ProfileError, match="fuseOperators"):
        parse_profile_configs(p)


def test_noise_rule_and_savings_by_hand():
    def m(t: float, w: float) -> Measurement:
        return Measurement(t, t - w, t + w, 9)

    # |100 - 130| = 30 > sqrt(3 * 2**2) = 3.46
    assert differs_beyond_noise(m(100, 2), [m(80, 2), m(50, 2)])
    # |127 - 130| = 3 < 3.46
    assert not differs_beyond_noise(m(127, 2), [m(80, 2), m(50, 2)])
    # wider spreads hide a larger difference: sqrt(3 * 20**2) = 34.6 > 30
    assert not differs_beyond_noise(m(100, 20), [m(80, 20), m(50, 20)])
    cost = {"a": 4.0, "b": 4.0, "c": 8.0, "d": 1.0}
    # (a,b) saves 3, (b,c) saves 7: they overlap, the larger wins
    assert fused_saving(["a", "b", "c"], [(("a", "b"), 5.0), (("b", "c"), 5.0)], cost) == 7.0
    # not consecutive in the order: no saving; a slower group saves nothing
    assert fused_saving(["a", "d", "b"], [(("a", "b"), 1.0)], cost) == 0.0
    assert fused_saving(["a", "b"], [(("a", "b"), 9.0)], cost) == 0.0
    assert fused_saving(["a", "b", "c", "d"], [(("a", "b"), 6.0), (("c", "d"), 7.0)], cost) == 4
    assert group_signature(["A#1", "B#2"]) == "A#1+B#2"


def test_explicit_groups_calibrated_stored_and_planned(branchy, units_file, db):
    units = load_units(units_file)
    kw = {"budget_s": 0.02, "fuse": [["Conv", "Relu"]], "layers": False}  # isolated costs
    with ProfileStore(db) as store:
        prof = profile_model(branchy, units, store=store, **kw)
        again = profile_model(branchy, units, store=store, **kw)
        chains = find_chains(branchy, ["Conv", "Relu"])
        assert [m for m, _ in prof.groups] == chains  # explicit groups are all kept
        for members, cost in prof.groups:
            assert set(cost) == {"cpu0", "cpu1"} and cost["cpu0"] == cost["cpu1"] >= 0
            sig = group_signature(node_signature(branchy, branchy.node(n)) for n in members)
            assert store.get(prof.units["cpu0"].fingerprint, sig) is not None
    assert again.measured == 0 and again.groups == prof.groups
    distinct = {
        group_signature(node_signature(branchy, branchy.node(n)) for n in c) for c in chains
    }
    assert prof.group_signatures == len(distinct)
    up = prof.units["cpu0"]
    order = [n.name for n in branchy.compute_nodes]
    node_cost = {n: prof.costs[n]["cpu0"] for n in order}
    saved = fused_saving(order, [(m, c["cpu0"]) for m, c in prof.groups], node_cost)
    # calibrated with the groups: overhead + nodes - fused savings == the whole model
    assert up.overhead_us + sum(node_cost.values()) - saved == pytest.approx(up.whole_us)
    assert up.fused_parts_us is not None and up.fused_parts_us <= up.parts_us
    # raw fused parts, scaled the same way, give the same identity
    scaled = (sum(node_cost.values()) - saved) / up.scale
    assert up.fused_parts_us - up.call_us == pytest.approx(scaled)
    problem = build_problem(branchy, units, prof)
    problem.validate()
    assert [g.nodes for g in problem.groups] == chains
    whole = partition_cost(problem, "cpu0", order)
    assert whole == pytest.approx(up.whole_us)


def test_automatic_groups_are_chains_within_the_limit(branchy, units_file, db):
    units = load_units(units_file)
    with ProfileStore(db) as store:
        prof = profile_model(branchy, units, store=store, budget_s=0.02, fuse_auto=3)
    candidates = sequential_chains(branchy, 3) + region_groups(branchy)
    sigs = {
        group_signature(node_signature(branchy, branchy.node(n)) for n in c) for c in candidates
    }
    assert prof.group_signatures == len(sigs)
    for members, cost in prof.groups:
        assert members in candidates
        assert all(math.isfinite(c) and c >= 0 for c in cost.values())
    # the modeled-free, equal-fingerprint units keep the same groups
    assert all(set(c) == {"cpu0", "cpu1"} for _, c in prof.groups)


def test_region_groups_are_whole_branch_groups(branchy):
    from partuner.graph import parallel_branch_groups

    regions = region_groups(branchy)
    index = {n.name: i for i, n in enumerate(branchy.nodes)}
    for grp in parallel_branch_groups(branchy):
        inner = {n for b in grp.branches for n in b} | {grp.join}
        mine = [r for r in regions if inner <= set(r)]
        assert tuple(sorted(inner, key=index.__getitem__)) in mine
        if grp.fork is not None:  # with the fork too, members in topological order
            assert any(grp.fork in r and r[0] == grp.fork for r in mine)
    assert all(len(r) <= REGION_MAX_NODES for r in regions)


def test_in_context_units_give_groups_no_discount(branchy, units_file):
    units = load_units(units_file)
    prof = profile_model(branchy, units, budget_s=0.02, fuse=[["Conv", "Relu"]])
    up = prof.units["cpu0"]
    assert up.costs_from == "layers"
    problem = build_problem(branchy, units, prof)
    assert problem.groups  # kept for export, but fusion is in the node costs already
    assert all(g.saving(problem, u) < 1e-6 for g in problem.groups for u in problem.units)
    order = [n.name for n in branchy.compute_nodes]
    assert partition_cost(problem, "cpu0", order) == pytest.approx(up.whole_us)


def test_groups_skip_units_that_cannot_run_a_member(branchy, npu_units_file):
    units = load_units(npu_units_file)
    prof = profile_model(branchy, units, budget_s=0.02, fuse=[["Conv", "Relu"]])
    assert prof.groups and all(set(c) == {"cpu"} for _, c in prof.groups)  # npu is modeled
    problem = build_problem(branchy, units, prof)
    problem.validate()
    assert all(set(g.cost) == {"cpu"} for g in problem.groups)
