"""Nodes a unit runs written as an op type it lists: a per-channel Mul or Add as a BatchNorm."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from partuner.cli import main
from partuner.export.cut import cut_nodes
from partuner.graph import load_model
from partuner.graph.equivalents import channel_broadcast, rewrite_for_ops, runs_as
from partuner.profile.kit import write_kit
from partuner.units import units_from_mapping

C, H = 4, 8
NPU_OPS = ["Conv", "Relu", "BatchNormalization", "Concat"]


def _model() -> onnx.ModelProto:
    """conv -> x*s (1,C,1,1) -> +b (C,1,1) -> relu -> *2 (scalar) -> *spatial (1,1,H,H)
    -> *itself -> out; the first three are batch norms in disguise, the last two are not."""
    rng = np.random.default_rng(0)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [
        init("w", (C, 3, 3, 3)),
        init("s", (1, C, 1, 1)),
        init("b", (C, 1, 1)),
        init("spatial", (1, 1, H, H)),
    ]
    two = helper.make_node(
        "Constant", [], ["two"], name="two", value=numpy_helper.from_array(np.float32(2.0))
    )
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s"], ["m"], name="scale"),
        helper.make_node("Add", ["b", "m"], ["a"], name="shift"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        two,
        helper.make_node("Mul", ["r", "two"], ["d"], name="double"),
        helper.make_node("Mul", ["d", "spatial"], ["p"], name="spatial_mul"),
        helper.make_node("Mul", ["p", "p"], ["y"], name="square"),
    ]
    g = helper.make_graph(
        nodes,
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])],
        initializer=inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _units():
    return units_from_mapping(
        {
            "units": {
                "npu": {"backend": "onnxruntime", "ops": NPU_OPS},
                "cpu": {"backend": "onnxruntime"},
            }
        }
    )


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    ("data", "const", "ok"),
    [
        ((1, 4, 8, 8), (1, 4, 1, 1), True),
        ((1, 4, 8, 8), (4, 1, 1), True),
        ((1, 4, 8, 8), (), True),
        ((1, 4, 8, 8), (1,), True),
        ((2, 4), (4,), True),
        ((1, 4, 8, 8), (1, 1, 8, 8), False),
        ((1, 4, 8, 8), (4,), False),  # broadcasts over the last axis, not the channels
        ((1, 4, 8, 8), (2, 4, 1, 1), False),
        ((4,), (4,), False),
    ],
)
def test_channel_broadcast(data, const, ok):
    assert channel_broadcast(data, const) is ok


def test_runs_as_names_the_per_channel_and_scalar_nodes_only():
    g = load_model(_model())
    found = {n.name: runs_as(g, n) for n in g.compute_nodes}
    assert found == {
        "conv": None,
        "scale": "BatchNormalization",
        "shift": "BatchNormalization",
        "relu": None,
        "double": "BatchNormalization",
        "spatial_mul": None,
        "square": None,
    }


def test_rewrite_keeps_names_and_results_and_drops_stray_weights():
    model = _model()
    out = rewrite_for_ops(model, NPU_OPS)
    by_name = {n.name: n for n in out.graph.node}
    assert [by_name[k].op_type for k in ("scale", "shift", "double")] == ["BatchNormalization"] * 3
    assert by_name["spatial_mul"].op_type == "Mul" and by_name["square"].op_type == "Mul"
    assert [n.output for n in out.graph.node] == [n.output for n in model.graph.node]
    inits = {t.name for t in out.graph.initializer}
    assert {"s", "b"}.isdisjoint(inits) and {"w", "spatial"} <= inits
    onnx.checker.check_model(out, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 3, H, H)).astype(np.float32)
    np.testing.assert_array_equal(_run(out, x), _run(model, x))
    assert rewrite_for_ops(model, ["Conv"]) is model  # no BatchNormalization to write
    assert rewrite_for_ops(model, [*NPU_OPS, "Mul", "Add"]) is model  # nothing it lacks
    assert rewrite_for_ops(model, None) is model


def test_a_unit_runs_what_it_can_write_and_is_given_it_written():
    g = load_model(_model())
    units = _units()
    npu = units["npu"]
    runs = {n.name for n in g.compute_nodes if npu.supports(n, g)}
    assert runs == {"conv", "scale", "shift", "relu", "double"}
    assert not npu.supports(g.node("scale"))  # without the graph: by op type only
    sub, ins, _ = cut_nodes(g, "sub", ["conv", "scale", "shift", "relu", "double"])
    given = npu.for_ops(sub)
    assert "Mul" not in {n.op_type for n in given.graph.node}
    assert units["cpu"].for_ops(sub) is sub
    x = np.random.default_rng(2).standard_normal((1, 3, H, H)).astype(np.float32)
    with npu.prepare(sub) as runner:  # prepared from the written model, same values
        got = runner.run({"x": x})["d"]
    np.testing.assert_allclose(got, _run_sub(sub, x), rtol=1e-6)


def _run_sub(sub: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["d"], {"x": x})[0]


def test_plan_export_and_run_put_the_batch_norms_on_the_npu(tmp_path):
    path = tmp_path / "affine.onnx"
    onnx.save(_model(), path)
    units = tmp_path / "units.yaml"
    units.write_text(
        "units:\n"
        f"  npu: {{backend: onnxruntime, threads: 1, ops: [{', '.join(NPU_OPS)}]}}\n"
        "  cpu: {backend: onnxruntime, threads: 1}\n"
    )
    db = tmp_path / "p.db"
    plan = tmp_path / "plan.yaml"
    common = ["--units", str(units), "--db", str(db)]
    res = CliRunner().invoke(
        main, ["plan", str(path), *common, "--scheduler", "static", "-o", str(plan), "-q"]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        main, ["export", str(path), "--plan", str(plan), "-o", str(tmp_path / "ex")]
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "ex" / "manifest.json").read_text())
    on_npu = [p for p in manifest["partitions"] if p["unit"] == "npu"]
    ops = set()
    for p in on_npu:
        ops |= {n.op_type for n in onnx.load(tmp_path / "ex" / p["file"]).graph.node}
    assert "BatchNormalization" in ops and ops <= {*NPU_OPS, "Constant"}
    assert sum(p["nodes"] for p in on_npu) == 5
    res = CliRunner().invoke(main, ["run", str(path), "--plan", str(plan), *common, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["check"]["passed"] is True


def test_kit_gives_a_unit_the_model_it_compiles(tmp_path):
    g = load_model(_model())
    units = _units()
    manifest = json.loads(write_kit(g, units, tmp_path, link_sizes=()).read_text())
    scale_items = [i for i in manifest["items"] if i["kind"] == "node" and "Mul" in i["signature"]]
    forms = {}
    for item in scale_items:
        m = onnx.load(tmp_path / item["files"][0])
        for unit in item["units"]:
            forms.setdefault(unit, set()).add(m.graph.node[-1].op_type)
    assert "BatchNormalization" in forms["npu"] and "Mul" not in forms["npu"]
    assert forms["cpu"] == {"Mul"}


def test_an_initializer_listed_as_a_graph_input_is_rewritten_and_stays_declared():
    model = _model()
    model.graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, C, 1, 1]))
    g = load_model(model)
    assert runs_as(g, g.node("scale")) == "BatchNormalization"  # a weight, as partuner reads it
    out = rewrite_for_ops(model, NPU_OPS)
    assert {n.name: n.op_type for n in out.graph.node}["scale"] == "BatchNormalization"
    assert "s" in {t.name for t in out.graph.initializer}  # the declared input keeps its value
    onnx.checker.check_model(out, full_check=True)
    x = np.random.default_rng(3).standard_normal((1, 3, H, H)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(model, x), rtol=1e-5, atol=1e-6 * 4096)
