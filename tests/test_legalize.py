"""The legalizer: each pass keeps the model's results, and exported partitions stay chainable."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from partuner.cli import main
from partuner.errors import InvalidModelError
from partuner.export import PartitionSpec, PlanFile, cut, write_plan
from partuner.export.legalize import (
    LegalizeOptions,
    convert_opset,
    export_legalized,
    external_data,
    fold_constants,
    legal_name_map,
    legalize,
    legalize_names,
    remove_unused_initializers,
)
from partuner.graph import load_model
from partuner.profile import random_feeds

C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _run(model_or_path, feeds):
    src = model_or_path.SerializeToString() if hasattr(model_or_path, "graph") else model_or_path
    s = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def _const_model() -> onnx.ModelProto:
    """y = x + (a + b) * c + Identity(w), with c a Constant node, a RandomNormal that must stay,
    and an initializer nobody reads."""
    f = np.float32
    inits = [
        numpy_helper.from_array(np.full((2, 3), 1.5, f), "a"),
        numpy_helper.from_array(np.arange(6, dtype=f).reshape(2, 3), "b"),
        numpy_helper.from_array(np.ones((2, 3), f) * 0.25, "w"),
        numpy_helper.from_array(np.zeros(1000, f), "unused"),
    ]
    nodes = [
        helper.make_node(
            "Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.full((2, 3), 2, f))
        ),
        helper.make_node("Add", ["a", "b"], ["ab"], name="ab"),
        helper.make_node("Mul", ["ab", "c"], ["abc"], name="abc"),
        helper.make_node("Identity", ["w"], ["w2"], name="w2"),
        helper.make_node("Add", ["x", "abc"], ["t"], name="t"),
        helper.make_node("Add", ["t", "w2"], ["y"], name="y"),
        helper.make_node("RandomNormal", [], ["r"], name="r", shape=[2, 3], seed=1.0),
        helper.make_node("Mul", ["r", "x"], ["z"], name="z"),
    ]
    g = helper.make_graph(
        nodes,
        "consts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
        ],
        initializer=inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_convert_opset_keeps_results(branchy):
    feeds = random_feeds(branchy, list(branchy.inputs))
    m = convert_opset(branchy.model, 18)
    assert [o.version for o in m.opset_import if o.domain == ""] == [18]
    onnx.checker.check_model(m, full_check=True)
    ref, got = _run(branchy.model, feeds), _run(m, feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-5)
    assert branchy.model.opset_import[0].version == 17  # the argument is untouched
    with pytest.raises(InvalidModelError, match="out of range; use 7 to"):
        convert_opset(branchy.model, 99)
    # onnx's converter has no adapter from Relu-14 to 13 (14 only added bfloat16): the
    # schema step keeps the nodes, the results stay the same
    for v in (13, 11):
        old = convert_opset(branchy.model, v)
        assert [o.version for o in old.opset_import if o.domain == ""] == [v]
        onnx.checker.check_model(old, full_check=True)
        got = _run(old, feeds)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6)


def _one_node(op: str, dtype: int, opset: int, **attrs) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", dtype, [1, 1, 5, 5])
    y = helper.make_tensor_value_info("y", dtype, None)
    node = helper.make_node(op, ["x"], ["y"], name="n", **attrs)
    return helper.make_model(
        helper.make_graph([node], "one", [x], [y]), opset_imports=[helper.make_opsetid("", opset)]
    )


def test_convert_opset_down_refuses_what_the_older_op_cannot_do():
    # Relu takes integers from opset 14 on only
    with pytest.raises(InvalidModelError, match=r"17 to 13: .*node 'n'.*tensor\(int32\)"):
        convert_opset(_one_node("Relu", TensorProto.INT32, 17), 13)
    # MaxPool's ceil_mode came at opset 10: dropped only when it is the default (0)
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    plain = convert_opset(_one_node("MaxPool", TensorProto.FLOAT, 17, ceil_mode=0, **pool), 9)
    assert [a.name for a in plain.graph.node[0].attribute] == ["kernel_shape", "strides"]
    x = {"x": np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)}
    assert _run(plain, x)["y"].shape == (1, 1, 2, 2)
    with pytest.raises(InvalidModelError, match="'ceil_mode' does not exist at opset 9"):
        convert_opset(_one_node("MaxPool", TensorProto.FLOAT, 17, ceil_mode=1, **pool), 9)
    # dilations came at 10 too, with no default in the schema but all ones in its doc
    ones = convert_opset(_one_node("MaxPool", TensorProto.FLOAT, 17, dilations=[1, 1], **pool), 9)
    assert _run(ones, x)["y"].shape == (1, 1, 2, 2)
    with pytest.raises(InvalidModelError, match="'dilations' does not exist at opset 9"):
        convert_opset(_one_node("MaxPool", TensorProto.FLOAT, 17, dilations=[2, 2], **pool), 9)


def test_fold_constants_and_remove_unused_initializers():
    model = _const_model()
    x = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    folded, names = fold_constants(model)
    assert names == ["c", "ab", "abc", "w2"]  # RandomNormal and nodes reading x stay
    assert [n.name for n in folded.graph.node] == ["t", "y", "r", "z"]
    pruned, dropped = remove_unused_initializers(folded)
    assert sorted(dropped) == ["a", "b", "unused", "w"]
    assert sorted(t.name for t in pruned.graph.initializer) == ["abc", "w2"]
    onnx.checker.check_model(pruned, full_check=True)
    np.testing.assert_allclose(_run(pruned, x)["y"], _run(model, x)["y"], rtol=1e-6)
    assert len(model.graph.node) == 8  # the argument is untouched


def test_remove_unused_keeps_initializers_read_by_subgraphs():
    f = np.float32
    then = helper.make_graph(
        [helper.make_node("Identity", ["k"], ["o1"])],
        "then",
        [],
        [helper.make_tensor_value_info("o1", TensorProto.FLOAT, [1])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o2"])],
        "else",
        [],
        [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [1])],
    )
    g = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=[
            numpy_helper.from_array(np.ones(1, f), "k"),
            numpy_helper.from_array(np.ones(1, f), "dead"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out, dropped = remove_unused_initializers(m)
    assert dropped == ["dead"] and [t.name for t in out.graph.initializer] == ["k"]
    assert fold_constants(m)[1] == []  # nodes with subgraphs are never folded


def test_legalize_names_gives_unique_c_identifiers():
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["in:0"], ["/conv1/Conv_output_0"], name="/conv1/Relu"),
            helper.make_node("Neg", ["/conv1/Conv_output_0"], ["a.b"], name="1neg"),
            helper.make_node("Abs", ["a.b"], ["a_b"], name="abs"),
            helper.make_node("Sum", ["a_b", "a.b"], ["out.y"], name="sum"),
        ],
        "names",
        [helper.make_tensor_value_info("in:0", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("out.y", TensorProto.FLOAT, [3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out, io = legalize_names(m)
    assert io == {"in:0": "in_0", "out.y": "out_y"}
    values = {v for n in out.graph.node for v in (*n.input, *n.output)}
    nodes = [n.name for n in out.graph.node]
    assert all(C_IDENT.match(v) for v in values | set(nodes))
    assert len(values) == 5 and len(set(nodes)) == 4
    assert "a_b" in values and "a_b_1" in values  # the legal name kept, the clash suffixed
    onnx.checker.check_model(out, full_check=True)
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_array_equal(_run(out, {"in_0": x})["out_y"], _run(m, {"in:0": x})["out.y"])


def test_one_name_map_keeps_partition_boundaries_matching(branchy):
    names = legal_name_map(branchy.model)
    assert names.values and all(C_IDENT.match(v) for v in names.values.values())
    specs = [PartitionSpec("p0", "cpu0", tuple(n.name for n in branchy.compute_nodes[:12]))]
    specs.append(PartitionSpec("p1", "cpu0", tuple(n.name for n in branchy.compute_nodes[12:])))
    a, b = (legalize_names(p.model, names)[0] for p in cut(branchy, specs))
    assert {o.name for o in a.graph.output} == {i.name for i in b.graph.input}


def test_external_data_moves_big_weights(tmp_path, branchy):
    m, moved = external_data(branchy.model, tmp_path, 1024, location="m.onnx.data")
    big = [
        t.name for t in branchy.model.graph.initializer if numpy_helper.to_array(t).nbytes >= 1024
    ]
    assert moved == big and moved
    onnx.save_model(m, tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx.data").stat().st_size >= sum(
        numpy_helper.to_array(t).nbytes for t in branchy.model.graph.initializer if t.name in big
    )
    assert (tmp_path / "m.onnx").stat().st_size < branchy.model.ByteSize() // 2
    onnx.checker.check_model(str(tmp_path / "m.onnx"), full_check=True)
    feeds = random_feeds(branchy, list(branchy.inputs))
    ref = _run(branchy.model, feeds)
    got = _run(str(tmp_path / "m.onnx"), feeds)
    np.testing.assert_array_equal(got[branchy.outputs[0]], ref[branchy.outputs[0]])


def test_a_threshold_of_zero_alone_is_an_option_given():
    """`--external-data-threshold 0` alone was taken for no option (0 == False): nothing was
    moved and the manifest said nothing (a new user's trial)."""
    assert LegalizeOptions(external_data_threshold=0).any
    assert not LegalizeOptions().any and not LegalizeOptions(fold_constants=False).any


def test_legalize_report_lists_passes(branchy):
    opts = LegalizeOptions(opset=18, fold_constants=True, legal_names=True)
    m, rep = legalize(branchy.model, opts)
    assert rep.passes == [
        "convert_opset",
        "fold_constants",
        "remove_unused_initializers",
        "legalize_names",
    ]
    assert (rep.opset_from, rep.opset_to) == (17, 18)
    assert rep.to_dict()["io_names"] == {"input": "input", "output": "output"}
    onnx.checker.check_model(m, full_check=True)


def _chain(outdir, man, feeds):
    """Run the exported files in order, by the manifest's (legal) names."""
    env = {}
    for e in man["inputs"]:
        env[e.get("onnx_name", e["name"])] = feeds[e["name"]]
    for q in man["partitions"]:
        path = str(outdir / q["file"])
        onnx.checker.check_model(path, full_check=True)
        ins = [e.get("onnx_name", e["name"]) for e in q["inputs"]]
        env.update(_run(path, {k: env[k] for k in ins}))
    return {e["name"]: env[e.get("onnx_name", e["name"])] for e in man["outputs"]}


@pytest.mark.parametrize("threshold", [None, 512])
def test_exported_partitions_check_and_chain(tmp_path, branchy, threshold):
    names = [n.name for n in branchy.compute_nodes]
    specs = [
        PartitionSpec(f"p{i}", f"cpu{i % 2}", tuple(names[i * 8 : (i + 1) * 8])) for i in range(4)
    ]
    opts = LegalizeOptions(18, True, True, threshold)
    parts, man = export_legalized(branchy, PlanFile(specs, model="branchy"), tmp_path / "o", opts)
    assert len(parts) == 4
    on_disk = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert on_disk == man
    assert man["legalize"]["options"]["opset"] == 18
    assert man["legalize"]["value_names"]  # branchy's names hold dots
    assert all(C_IDENT.match(v) for v in man["legalize"]["node_names"].values())
    for q in man["partitions"]:
        assert "convert_opset" in q["legalize"]["passes"]
        assert ("external_data" in q["legalize"]["passes"]) == (threshold is not None)
    feeds = random_feeds(branchy, list(branchy.inputs), seed=1)
    got = _chain(tmp_path / "o", man, feeds)
    ref = _run(branchy.model, feeds)
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5)
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary folder left


def test_export_cli_legalizer_options(tmp_path, branchy, branchy_file):
    names = [n.name for n in branchy.compute_nodes]
    plan = tmp_path / "plan.yaml"
    write_plan(
        PlanFile(
            [
                PartitionSpec("p0", "cpu0", tuple(names[:10])),
                PartitionSpec("p1", "cpu1", tuple(names[10:])),
            ]
        ),
        plan,
    )
    out = tmp_path / "exp"
    r = CliRunner().invoke(
        main,
        [
            "export",
            str(branchy_file),
            "--plan",
            str(plan),
            "-o",
            str(out),
            "--opset",
            "18",
            "--fold-constants",
            "--legal-names",
            "--external-data-threshold",
            "4096",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "legalized" in r.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["legalize"]["options"]["external_data_threshold"] == 4096
    assert (out / "partitions" / "p0.onnx.data").exists()
    feeds = random_feeds(branchy, list(branchy.inputs))
    got = _chain(out, man, feeds)
    ref = _run(branchy.model, feeds)
    np.testing.assert_allclose(got["output"], ref["output"], rtol=1e-5, atol=1e-5)
    old = out.parent / "opset13"  # below Relu-14, which onnx's converter has no adapter for
    r = CliRunner().invoke(
        main, ["export", str(branchy_file), "--plan", str(plan), "-o", str(old), "--opset", "13"]
    )
    assert r.exit_code == 0, r.output
    man = json.loads((old / "manifest.json").read_text())
    assert {p["legalize"]["opset"]["to"] for p in man["partitions"]} == {13}
    np.testing.assert_allclose(_chain(old, man, feeds)["output"], ref["output"], rtol=1e-5)
    for opset, said in [("6", "6 is not in the range x>=7"), ("99", "--opset 99 is out of range")]:
        args = ["export", str(branchy_file), "--plan", str(plan), "-o", str(out), "--opset", opset]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and said in r.output, r.output


def test_convert_opset_keeps_what_local_functions_compute():
    """onnx's converter drops a model's local functions: their calls go inline first."""
    fn = helper.make_function(
        "local",
        "MyRelu",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("MyRelu", ["x"], ["y"], name="f", domain="local")
    model = helper.make_model(
        helper.make_graph([node], "fn", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    feeds = {"x": np.arange(-3, 3, dtype=np.float32).reshape(2, 3)}
    for v in (13, 18):
        got = convert_opset(model, v)
        assert [n.op_type for n in got.graph.node] == ["Relu"] and not got.functions
        np.testing.assert_array_equal(_run(got, feeds)["y"], np.maximum(feeds["x"], 0))
    assert len(model.functions) == 1  # the argument is untouched


def test_convert_opset_turns_constant_clip_bounds_into_attributes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    six = numpy_helper.from_array(np.array(6.0, np.float32), "six")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    node = helper.make_node("Clip", ["x", "zero", "six"], ["y"], name="relu6")
    model = helper.make_model(
        helper.make_graph([node], "clip", [x], [y], initializer=[zero, six]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    feeds = {"x": np.linspace(-4, 10, 6, dtype=np.float32).reshape(2, 3)}
    old = convert_opset(model, 9)
    (n,) = old.graph.node
    assert list(n.input) == ["x"] and {a.name: a.f for a in n.attribute} == {"min": 0.0, "max": 6.0}
    np.testing.assert_array_equal(_run(old, feeds)["y"], np.clip(feeds["x"], 0, 6))
    fed = helper.make_model(  # a bound that is also an input may be fed: not a constant
        helper.make_graph(
            [node],
            "clip",
            [x, helper.make_tensor_value_info("six", TensorProto.FLOAT, [])],
            [y],
            initializer=[zero, six],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    with pytest.raises(InvalidModelError, match="node 'relu6': 3 inputs"):
        convert_opset(fed, 9)
    far = copy.deepcopy(model)  # a bound kept in a file elsewhere is never read
    t = far.graph.initializer[1]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="/etc/passwd")
    with pytest.raises(InvalidModelError, match="node 'relu6'"):
        convert_opset(far, 9)


@pytest.mark.parametrize("name", ["squeezenet", "googlenet", "mobilenet_v2", "shufflenet_v2"])
def test_zoo_models_convert_to_opset_11_and_7_or_name_what_stops_them(name):
    from partuner.graph import zoo

    model = zoo.build(name, image_size=64)
    g = load_model(model)
    feeds = random_feeds(g, list(g.inputs))
    ref = _run(model, feeds)
    for v in (11, 7):
        if v == 7 and name in ("squeezenet", "googlenet"):  # MaxPool with ceil_mode: 1
            with pytest.raises(InvalidModelError, match="'ceil_mode' does not exist at opset 9"):
                convert_opset(model, v)
            continue
        got = _run(convert_opset(model, v), feeds)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])
