"""Nodes with sub-graphs (If, Loop) that read values of the model by name: the read is an input
of the node (order, cuts), and a plan that cuts between the value and the node runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from conftest import TWO_CPUS
from partuner.cli import main
from partuner.export.cut import cut_nodes
from partuner.export.planfile import PartitionSpec, PlanFile, write_plan
from partuner.graph import load_model
from partuner.graph.subgraphs import outer_names

SHAPE = [1, 4, 8, 8]


def _vi(name: str, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape or SHAPE)


def _if_model() -> onnx.ModelProto:
    """conv -> c; cond = sum(c) > 0; if cond: relu(c) else sigmoid(c) (both read ``c`` from
    the model, not as the If's input); tanh of that. The branches' own Mul reads a weight of
    the model too."""
    then_g = helper.make_graph(
        [
            helper.make_node("Relu", ["c"], ["t"], name="then_relu"),
            helper.make_node("Mul", ["t", "k"], ["o"], name="then_mul"),
        ],
        "then", [], [_vi("o")],
    )  # fmt: skip
    else_g = helper.make_graph(
        [helper.make_node("Sigmoid", ["c"], ["o2"], name="else_sig")], "else", [], [_vi("o2")]
    )
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        numpy_helper.from_array(np.full((1,), 0.5, np.float32), "k"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ReduceSum", ["c"], ["s"], name="rsum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["yi"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Tanh", ["yi"], ["y"], name="tanh"),
    ]
    g = helper.make_graph(nodes, "ifm", [_vi("x")], [_vi("y")], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def test_outer_names_are_what_the_branches_read_of_the_model():
    m = _if_model()
    node = next(n for n in m.graph.node if n.op_type == "If")
    assert outer_names(node) == ["c", "k"]  # 't' and 'o' are the branch's own
    assert outer_names(m.graph.node[0]) == []


def test_the_if_reads_c_so_it_follows_conv_and_c_is_read_by_it():
    g = load_model(_if_model())
    assert "c" in g.node("if").inputs and "k" in g.node("if").inputs
    assert set(g.values["c"].consumers) == {"rsum", "if"}  # not the branches' own nodes
    assert "conv" in set(g.predecessors("if"))


def test_a_piece_with_the_if_but_not_conv_takes_c_as_an_input():
    g = load_model(_if_model())
    model, ins, outs = cut_nodes(g, "p", ["if", "tanh"])  # checked by onnx.checker
    assert set(ins) == {"cond", "c"} and outs == ["y"]
    assert [t.name for t in model.graph.initializer] == ["k"]  # the branch's weight comes along


@pytest.mark.parametrize("split", [False, True])
def test_tune_and_a_plan_cut_before_the_if_run_and_check(tmp_path, split):
    onnx.save(_if_model(), tmp_path / "if.onnx")
    (tmp_path / "two.yaml").write_text(TWO_CPUS)
    common = ["--units", str(tmp_path / "two.yaml"), "--db", str(tmp_path / "p.db")]
    if not split:
        r = CliRunner().invoke(
            main,
            ["tune", str(tmp_path / "if.onnx"), *common, "-o", str(tmp_path / "out"),
             "--time-limit", "1", "--repeat", "2"],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        assert "output check passed" in r.output
        return
    plan = PlanFile(
        [
            PartitionSpec("p0", "cpu0", ("conv", "rsum", "gt")),
            PartitionSpec("p1", "cpu1", ("if", "tanh")),
        ]
    )
    write_plan(plan, tmp_path / "plan.yaml")
    r = CliRunner().invoke(
        main,
        ["run", str(tmp_path / "if.onnx"), "--plan", str(tmp_path / "plan.yaml"), *common,
         "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert '"passed": true' in r.output
