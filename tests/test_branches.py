"""Parallel branch groups on the zoo models and on hand-made DAGs."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from partuner.graph import BranchGroup, ModelGraph, load_model, parallel_branch_groups, zoo


def dag(spec: dict[str, list[str]], *, extra_outputs: tuple[str, ...] = ()) -> ModelGraph:
    """A model whose nodes are ``spec``'s keys, in order; each reads the named nodes' outputs.

    ``"input"`` is the graph input and ``"w"`` a (1, 4) initializer. A node with one input is a
    Relu, with several a Sum. Nodes nobody reads, and ``extra_outputs``, are graph outputs.
    """
    nodes = []
    for name, ins in spec.items():
        op = "Relu" if len(ins) == 1 else "Sum"
        nodes.append(helper.make_node(op, ins, [name], name=name))
    read = {i for ins in spec.values() for i in ins}
    outs = [n for n in spec if n not in read or n in extra_outputs]
    graph = helper.make_graph(
        nodes,
        "dag",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 4]) for o in outs],
        initializer=[numpy_helper.from_array(np.ones((1, 4), np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return load_model(model)


def shape(groups: list[BranchGroup]) -> list[tuple[str | None, str, list[list[str]]]]:
    return [(g.fork, g.join, [list(b) for b in g.branches]) for g in groups]


def test_chain_has_no_groups() -> None:
    g = dag({"a": ["input"], "b": ["a"], "c": ["b"]})
    assert parallel_branch_groups(g) == []


def test_diamond_is_one_group() -> None:
    g = dag({"f": ["input"], "a": ["f"], "b1": ["f"], "b2": ["b1"], "j": ["a", "b2"], "o": ["j"]})
    assert shape(parallel_branch_groups(g)) == [("f", "j", [["a"], ["b1", "b2"]])]


def test_branches_starting_at_the_graph_input_have_no_fork() -> None:
    g = dag({"a": ["input"], "b": ["input"], "j": ["a", "b"]})
    assert shape(parallel_branch_groups(g)) == [(None, "j", [["a"], ["b"]])]


def test_three_branches_and_a_direct_edge() -> None:
    # The direct f -> j edge is not a branch; the three real ones are.
    g = dag({"f": ["input"], "a": ["f"], "b": ["f"], "c": ["f"], "j": ["a", "f", "b", "c"]})
    assert shape(parallel_branch_groups(g)) == [("f", "j", [["a"], ["b"], ["c"]])]


def test_identity_shortcut_is_not_a_group() -> None:
    # A ResNet block without downsample: one branch plus the shortcut edge.
    g = dag({"f": ["input"], "c1": ["f"], "c2": ["c1"], "add": ["c2", "f"], "r": ["add"]})
    assert parallel_branch_groups(g) == []


def test_nested_groups_are_both_reported() -> None:
    g = dag(
        {
            "f": ["input"],
            "p": ["f"],
            "p1": ["p"],
            "p2": ["p"],
            "pj": ["p1", "p2"],
            "r": ["pj"],
            "q": ["f"],
            "s": ["q"],
            "j": ["r", "s"],
        }
    )
    assert shape(parallel_branch_groups(g)) == [
        ("f", "j", [["p", "p1", "p2", "pj", "r"], ["q", "s"]]),
        ("p", "pj", [["p1"], ["p2"]]),
    ]


def test_fork_that_never_rejoins_has_no_group() -> None:
    g = dag({"f": ["input"], "a": ["f"], "a2": ["a"], "b": ["f"]})
    assert parallel_branch_groups(g) == []


def test_branch_with_a_side_output_is_not_a_branch() -> None:
    # a also feeds k outside the f..j region, so only b is a clean branch: no group.
    g = dag({"f": ["input"], "a": ["f"], "b": ["f"], "j": ["a", "b"], "k": ["a"]})
    assert parallel_branch_groups(g) == []


def test_nodes_reading_only_constants_neither_fork_nor_join() -> None:
    # An Identity copy of an initializer feeds two nodes of a chain (as in torch exports).
    g = dag({"wc": ["w"], "a": ["input", "wc"], "b": ["a", "wc"], "c": ["b"]})
    assert g.node("wc").op_type == "Relu"
    assert parallel_branch_groups(g) == []
    g = dag({"wc": ["w"], "f": ["input"], "a": ["f", "wc"], "b": ["f", "wc"], "j": ["a", "b"]})
    assert shape(parallel_branch_groups(g)) == [("f", "j", [["a"], ["b"]])]


def test_groups_sorted_by_fork_then_join() -> None:
    g = dag(
        {
            "f": ["input"],
            "a": ["f"],
            "b": ["f"],
            "j1": ["a", "b"],
            "c": ["f"],
            "j2": ["j1", "c"],
            "d": ["j2"],
            "e": ["j2"],
            "j3": ["d", "e"],
        }
    )
    groups = parallel_branch_groups(g)
    assert [(x.fork, x.join) for x in groups] == [("f", "j1"), ("f", "j2"), ("j2", "j3")]
    assert groups[1].branches == (("a", "b", "j1"), ("c",))


def test_branch_group_is_a_frozen_value() -> None:
    grp = BranchGroup("f", "j", (("a",), ("b",)))
    assert grp == BranchGroup("f", "j", (("a",), ("b",)))
    assert len({grp, BranchGroup("f", "j", (("a",), ("b",)))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        grp.join = "k"  # type: ignore[misc]


def _reads_only_constants(g: ModelGraph, name: str) -> bool:
    return all(g.values[v].is_initializer for v in g.node(name).inputs if v)


def _check_invariants(g: ModelGraph, groups: list[BranchGroup]) -> None:
    """Each group: >= 2 disjoint non-empty branches, closed between fork and join, no paths
    between branches."""
    reach: dict[str, set[str]] = {}
    for n in reversed(g.nodes):
        reach[n.name] = set(g.successors(n.name))
        for s in g.successors(n.name):
            reach[n.name] |= reach[s]
    for grp in groups:
        assert len(grp.branches) >= 2 and all(grp.branches)
        members = [set(b) for b in grp.branches]
        assert sum(map(len, members)) == len(set().union(*members))
        for b in grp.branches:
            for name in b:
                assert set(g.successors(name)) <= set(b) | {grp.join}
                preds = [p for p in g.predecessors(name) if not _reads_only_constants(g, p)]
                assert set(preds) <= set(b) | ({grp.fork} if grp.fork else set())
            assert grp.join in reach[b[-1]]
            assert [g.node(x).index for x in b] == sorted(g.node(x).index for x in b)
        for i, bi in enumerate(grp.branches):
            for j, bj in enumerate(grp.branches):
                if i != j:
                    assert not any(reach[x] & set(bj) for x in bi)


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("squeezenet", [2] * 8),
        ("googlenet", [4] * 9),
        ("resnet18", [2] * 3),
        ("branchy", [2, 3, 2, 3]),
    ],
)
def test_zoo_group_counts(name: str, sizes: list[int]) -> None:
    g = load_model(zoo.build(name, image_size=32))
    groups = parallel_branch_groups(g)
    assert [len(x.branches) for x in groups] == sizes
    _check_invariants(g, groups)


def test_zoo_groups_name_the_torchvision_blocks() -> None:
    g = load_model(zoo.build("resnet18", image_size=32))
    groups = parallel_branch_groups(g)
    assert [x.join for x in groups] == ["layer2.0.add", "layer3.0.add", "layer4.0.add"]
    assert groups[0].fork == "layer1.1.relu_1"
    assert groups[0].branches == (
        ("layer2.0.conv1", "layer2.0.relu", "layer2.0.conv2"),
        ("layer2.0.downsample.0",),
    )
    g = load_model(zoo.build("googlenet", image_size=32))
    first = parallel_branch_groups(g)[0]
    assert (first.fork, first.join) == ("maxpool2", "inception3a.concat")
    assert [len(b) for b in first.branches] == [2, 4, 4, 3]
    g = load_model(zoo.build("branchy", image_size=32))
    assert parallel_branch_groups(g)[0].fork is None


@st.composite
def random_dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """Fork/extend/join steps over a frontier of open values, plus a few arbitrary edges."""
    spec: dict[str, list[str]] = {}
    frontier = ["input"]
    for i in range(draw(st.integers(1, 12))):
        name = f"n{i}"
        step = draw(st.sampled_from(["extend", "extend", "fork", "join", "any"]))
        k = draw(st.integers(0, len(frontier) - 1))
        if step == "extend":
            spec[name] = [frontier[k]]
            frontier[k] = name
        elif step == "fork":
            spec[name] = [frontier[k]]
            frontier.append(name)
        elif step == "join" and len(frontier) >= 2:
            other = draw(st.sampled_from([f for f in frontier if f != frontier[k]]))
            spec[name] = [frontier[k], other]
            frontier = [f for f in frontier if f not in spec[name]] + [name]
        else:  # read any earlier value: side edges that break clean branches
            spec[name] = [draw(st.sampled_from(["input", *spec]))]
            frontier.append(name)
    return spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dags_give_well_formed_groups(spec: dict[str, list[str]]) -> None:
    g = dag(spec)
    _check_invariants(g, parallel_branch_groups(g))


def test_model_proto_input_is_accepted_via_load_model() -> None:
    model: onnx.ModelProto = zoo.build("branchy", image_size=8)
    assert len(parallel_branch_groups(load_model(model))) == 4


@functools.cache
def _zoo_graph(name: str, size: int) -> ModelGraph:
    """A zoo model, loaded once while this module runs; callers must not modify it."""
    return load_model(zoo.build(name, image_size=size))


@pytest.fixture(autouse=True, scope="module")
def _free_cached_models() -> Iterator[None]:
    """Drop the cached models (hundreds of MB) once this module's tests are done."""
    yield
    _zoo_graph.cache_clear()


# mobilenet_v2 and densenet121 have no group: a MobileNet residual block is one branch plus the
# identity shortcut (a direct fork -> Add edge, not a branch), and every dense layer's output
# feeds all later Concats of its block, so no piece between a fork and a join is a clean branch.
@pytest.mark.parametrize(
    ("name", "size", "sizes"),
    [
        ("resnet50", 32, [2] * 4),
        ("mobilenet_v2", 32, []),
        ("shufflenet_v2", 32, [2] * 3),
        ("densenet121", 32, []),
        ("inception_v3", 75, [4, 4, 4, 3, 4, 4, 4, 4, 3, 4, 2, 2, 4, 2, 2]),
        ("synthetic_large", 16, [2, 3, 4, 3] * 20),
    ],
)
def test_new_zoo_group_counts(name: str, size: int, sizes: list[int]) -> None:
    g = _zoo_graph(name, size)
    groups = parallel_branch_groups(g)
    assert [len(x.branches) for x in groups] == sizes
    _check_invariants(g, groups)


def test_resnet50_groups_are_the_downsample_blocks() -> None:
    groups = parallel_branch_groups(_zoo_graph("resnet50", 32))
    assert [x.join for x in groups] == [f"layer{i}.0.add" for i in range(1, 5)]
    # Each stage's first block forks at the previous stage's last block.
    forks = ["maxpool", "layer1.2.relu_2", "layer2.3.relu_2", "layer3.5.relu_2"]
    assert [x.fork for x in groups] == forks
    p = "layer3.0"
    assert groups[2].branches == (
        (f"{p}.conv1", f"{p}.relu", f"{p}.conv2", f"{p}.relu_1", f"{p}.conv3"),
        (f"{p}.downsample.0",),
    )


def test_shufflenet_v2_groups_are_the_stride_2_units() -> None:
    g = _zoo_graph("shufflenet_v2", 32)
    groups = parallel_branch_groups(g)
    assert [x.join for x in groups] == [f"stage{i}.0.concat" for i in (2, 3, 4)]
    assert [[len(b) for b in x.branches] for x in groups] == [[3, 5]] * 3
    assert groups[0].fork == "maxpool"
    assert groups[1].fork == "stage2.3.shuffle.reshape_1"
    # A stride-1 unit's kept half goes straight from the Split to the Concat: one branch only.
    assert g.predecessors("stage2.1.concat") == ["stage2.1.chunk", "stage2.1.branch2.7"]


def test_mobilenet_v2_and_densenet121_have_no_clean_branches() -> None:
    g = _zoo_graph("mobilenet_v2", 32)
    for add in (n.name for n in g.nodes if n.op_type == "Add"):
        block = add.removesuffix(".add")
        (fork,) = g.predecessors(f"{block}.conv.0.0")
        assert fork in g.predecessors(add)  # the identity shortcut
    g = _zoo_graph("densenet121", 32)
    p = "features.denseblock1"
    assert g.successors(f"{p}.denselayer1.conv2") == [
        *(f"{p}.denselayer{i}.concat" for i in range(2, 7)),
        f"{p}.concat",
    ]


def test_inception_v3_groups_are_its_inception_blocks() -> None:
    groups = parallel_branch_groups(_zoo_graph("inception_v3", 75))
    outer = [x for x in groups if x.join.count(".") == 1]
    assert [x.join for x in outer] == [
        f"Mixed_{t}.concat" for t in ("5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a")
    ] + ["Mixed_7b.concat", "Mixed_7c.concat"]
    assert outer[0].fork == "maxpool2"
    assert [len(b) for b in outer[0].branches] == [2, 4, 6, 3]  # 1x1, 5x5, 3x3dbl, pool
    inner = [x for x in groups if x.join.count(".") == 2]
    assert [x.fork for x in inner] == [
        f"Mixed_7{t}.{b}.relu" for t in "bc" for b in ("branch3x3_1", "branch3x3dbl_2")
    ]
    assert all([len(b) for b in x.branches] == [2, 2] for x in inner)  # 1x3 || 3x1


def test_synthetic_large_groups_follow_its_plan() -> None:
    from partuner.graph.zoo_synthetic import synthetic_large_plan

    groups = parallel_branch_groups(_zoo_graph("synthetic_large", 16))
    plan = synthetic_large_plan()
    assert [x.join for x in groups] == [f"block{i}.concat" for i in range(len(plan))]
    assert [x.fork for x in groups] == ["stem.pool"] + [f"block{i}.add" for i in range(79)]
    nodes = {"c1": 2, "c3": 2, "dw": 2, "max": 1, "avg": 1}  # conv + Relu, or one pool
    for grp, block in zip(groups, plan, strict=True):
        assert [len(b) for b in grp.branches] == [sum(nodes[k] for k in br) for br in block]
