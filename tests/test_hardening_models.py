"""Hardening of model loading: gzip bombs, shape sub-graphs folded, external data, --input-shape
overflow, and the file mode of saved zoo models."""

from __future__ import annotations

import gzip
import os
import stat
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partuner.graph.model_file as model_mod
from partuner.errors import InputShapeError, InvalidModelError
from partuner.graph import load_model, parse_input_shapes, read_model_proto, zoo

PARTUNER = str(Path(sys.executable).parent / "partuner")
INT64_MAX = np.iinfo(np.int64).max


def _cli(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PARTUNER, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _cli_inproc(*args: object) -> subprocess.CompletedProcess[str]:
    """The real CLI, run in this process by click's CliRunner (fast; exceptions propagate)."""
    from click.testing import CliRunner

    from partuner.cli import main

    r = CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def _assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partuner: error: "), res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=False)
    return model


def shuffle_split_model(dims: list[int | str] | None = None) -> onnx.ModelProto:
    """torchvision ShuffleNet V2 as exported: the channel split is ``Shape -> Gather -> Div ->
    Slice`` (opset 13+ Slice with tensor inputs) and the flatten ``Shape -> Gather -> Unsqueeze
    -> Concat -> Reshape`` of the split's result, then MatMul to 5 outputs."""
    dims = dims or [1, 4, 3, 3]
    rng = np.random.default_rng(0)
    inits = [
        _i64("one", [1]),
        _i64("zero", [0]),
        _i64("big", [INT64_MAX]),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array(1, np.int64), "chan"),
        _i64("minus1", [-1]),
        numpy_helper.from_array(rng.standard_normal((36, 5)).astype(np.float32), "fc.w"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "chan"], ["c"], name="gather_c", axis=0),
        helper.make_node("Div", ["c", "two"], ["half"], name="div"),
        helper.make_node("Unsqueeze", ["half", "zero"], ["half1"], name="unsq_half"),
        helper.make_node("Slice", ["r", "zero", "half1", "one"], ["a"], name="slice_a"),
        helper.make_node("Slice", ["r", "half1", "big", "one"], ["b"], name="slice_b"),
        helper.make_node("Sigmoid", ["b"], ["sb"], name="branch"),
        helper.make_node("Concat", ["a", "sb"], ["cat"], name="concat", axis=1),
        helper.make_node("Shape", ["cat"], ["s2"], name="shape2"),
        helper.make_node("Gather", ["s2", "zero"], ["n"], name="gather_n", axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["fshape"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["cat", "fshape"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "fc.w"], ["y"], name="fc"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 5])
    return _model(nodes, [x], [y], inits)


def flatten_model() -> onnx.ModelProto:
    """A dynamic-batch flatten as torchvision exports it (Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape) after a Slice whose end is computed from the shape."""
    rng = np.random.default_rng(1)
    inits = [
        _i64("zero", [0]),
        _i64("one", [1]),
        _i64("minus1", [-1]),
        numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
        numpy_helper.from_array(np.array(3, np.int64), "three_s"),
        numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "fc.w"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "three_s"], ["w"], name="gather_w", axis=0),
        helper.make_node("Unsqueeze", ["w", "zero"], ["w1"], name="unsq_w"),
        helper.make_node("Slice", ["x", "zero", "w1", "one"], ["xs"], name="slice"),
        helper.make_node("Shape", ["xs"], ["s2"], name="shape2"),
        helper.make_node("Gather", ["s2", "zero_s"], ["n"], name="gather_n", axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"], name="unsq_n"),
        helper.make_node("Concat", ["n1", "minus1"], ["fshape"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["xs", "fshape"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "fc.w"], ["y"], name="fc"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    return _model(nodes, [x], [y], inits)


def _run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _assert_folded_like_original(
    original: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], x_shape: tuple[int, ...]
) -> None:
    g = load_model(original, shapes)
    # Every value has a static shape, in the ModelGraph and in the proto it holds.
    assert all(all(isinstance(d, int) for d in v.shape) for v in g.values.values())
    inferred = onnx.shape_inference.infer_shapes(g.model, strict_mode=True)
    typed = {
        vi.name: vi.type.tensor_type
        for vi in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]
    }
    for node in g.model.graph.node:
        for out in node.output:
            assert all(d.HasField("dim_value") for d in typed[out].shape.dim), out
    # No shape computation is left; the nodes that remain keep their names.
    ops = [n.op_type for n in g.model.graph.node]
    assert "Shape" not in ops and "Gather" not in ops
    original_names = {n.name for n in original.graph.node}
    assert {n.name for n in g.nodes} <= original_names
    assert {"slice_a", "flatten", "fc"} & {n.name for n in g.nodes}
    # Deterministic: the same model folds to the same bytes.
    assert load_model(original, shapes).model.SerializeToString() == g.model.SerializeToString()
    # Same outputs as the original model, run by onnxruntime.
    x = np.random.default_rng(2).standard_normal(x_shape).astype(np.float32)
    want = _run_ort(original, {"x": x})
    got = _run_ort(g.model, {"x": x})
    assert len(want) == len(got) == 1
    assert want[0].shape == got[0].shape == g.values[g.outputs[0]].shape
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def test_shufflenet_channel_split_and_flatten_are_folded() -> None:
    m = shuffle_split_model()
    _assert_folded_like_original(m, {}, (1, 4, 3, 3))
    g = load_model(m)
    assert [n.name for n in g.nodes] == [
        "relu_in",
        "slice_a",
        "slice_b",
        "branch",
        "concat",
        "flatten",
        "fc",
    ]
    assert g.values["y"].shape == (1, 5) and g.values["a"].shape == (1, 2, 3, 3)


def test_dynamic_input_fixed_by_input_shapes_then_folded() -> None:
    m = shuffle_split_model(["N", 4, "H", "W"])
    _assert_folded_like_original(m, {"x": (1, 4, 3, 3)}, (1, 4, 3, 3))
    m2 = flatten_model()
    _assert_folded_like_original(m2, {"x": (3, 2, 2, 2)}, (3, 2, 2, 2))
    assert load_model(m2, {"x": (3, 2, 2, 2)}).values["y"].shape == (3, 3)


def test_values_read_by_a_sub_graph_survive_the_fold() -> None:
    """The channel count ``c`` is folded; an If branch still reads it from the outer scope."""
    m = shuffle_split_model()
    branch = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"], name="then_id")],
        "then",
        [],
        [helper.make_tensor_value_info("c_out", TensorProto.INT64, [])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_else"], name="else_id")],
        "else",
        [],
        [helper.make_tensor_value_info("c_else", TensorProto.INT64, [])],
    )
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.append(
        helper.make_node(
            "If", ["cond"], ["cc"], name="if", then_branch=branch, else_branch=else_branch
        )
    )
    m.graph.output.append(helper.make_tensor_value_info("cc", TensorProto.INT64, []))
    onnx.checker.check_model(m)
    g = load_model(m)
    assert "c" in {t.name for t in g.model.graph.initializer}
    onnx.checker.check_model(g.model)
    x = np.ones((1, 4, 3, 3), np.float32)
    got, want = _run_ort(g.model, {"x": x}), _run_ort(m, {"x": x})
    assert int(got[1]) == int(want[1]) == 4
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=f"c_{name}", value=numpy_helper.from_array(value, name)
    )


def attention_like_model() -> onnx.ModelProto:
    """What torch exports for a ViT's class token and nn.MultiheadAttention's head split:
    an Expand to a shape made of ``ConstantOfShape`` / ``Where`` on constants, and a Slice
    whose end is a ``Mod`` of two constants. No ``Shape`` node: shape inference alone cannot
    see through either."""
    rng = np.random.default_rng(3)
    rank = np.array([3], np.int64)
    nodes = [
        _const("rank", rank),
        helper.make_node(
            "ConstantOfShape",
            ["rank"],
            ["ones"],
            name="ones",
            value=numpy_helper.from_array(np.array([1], np.int64)),
        ),
        _const("minus1", np.array(-1, np.int64)),
        helper.make_node("Mul", ["ones", "minus1"], ["neg"], name="neg"),
        _const("want", np.array([2, -1, -1], np.int64)),
        helper.make_node("Equal", ["want", "neg"], ["keep"], name="keep"),
        helper.make_node("Where", ["keep", "ones", "want"], ["tshape"], name="tshape"),
        helper.make_node("Expand", ["tok", "tshape"], ["toks"], name="expand_token"),
        _const("eight", np.array([8], np.int64)),
        _const("five", np.array([5], np.int64)),
        helper.make_node("Mod", ["eight", "five"], ["end"], name="head_end"),
        _const("zero", np.array([0], np.int64)),
        _const("axis2", np.array([2], np.int64)),
        helper.make_node("Slice", ["x", "zero", "end", "axis2"], ["xs"], name="head"),
        helper.make_node("Add", ["toks", "xs"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])
    tok = numpy_helper.from_array(rng.standard_normal((1, 4, 3)).astype(np.float32), "tok")
    return _model(nodes, [x], [y], [tok])


def test_shapes_computed_from_constants_alone_are_folded() -> None:
    m = attention_like_model()
    g = load_model(m)
    assert g.values["y"].shape == (2, 4, 3) and g.values["xs"].shape == (2, 4, 3)
    ops = {n.op_type for n in g.model.graph.node}
    assert not ops & {"ConstantOfShape", "Where", "Mod", "Equal"}
    assert {n.name for n in g.compute_nodes} == {"head", "add"}
    assert g.is_constant("expand_token")  # a weight expanded: what backends fold
    x = np.random.default_rng(4).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run_ort(g.model, {"x": x})[0], _run_ort(m, {"x": x})[0])
    assert load_model(m).model.SerializeToString() == g.model.SerializeToString()


def _evaluated_ops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The op types the fold runs through onnx.reference, recorded."""
    import onnx.reference

    seen: list[str] = []
    real = onnx.reference.ReferenceEvaluator

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, proto, *a, **k):
            if isinstance(proto, onnx.NodeProto):
                seen.append(proto.op_type)
            super().__init__(proto, *a, **k)

    monkeypatch.setattr(onnx.reference, "ReferenceEvaluator", Spy)
    return seen


def test_a_constant_of_shape_too_large_to_fold_is_not_evaluated(monkeypatch) -> None:
    """A ConstantOfShape of 10^8 elements from a Constant: left to the runtime, never made;
    a small computation beside it still folds."""
    seen = _evaluated_ops(monkeypatch)
    nodes = [
        _const("dims", np.array([10**4, 10**4], np.int64)),
        helper.make_node("ConstantOfShape", ["dims"], ["big"], name="big"),
        helper.make_node("ReduceSum", ["big"], ["s"], name="sum", keepdims=0),
        _const("eight", np.array([8], np.int64)),
        _const("five", np.array([5], np.int64)),
        helper.make_node("Mod", ["eight", "five"], ["end"], name="end"),
        _const("zero", np.array([0], np.int64)),
        helper.make_node("Slice", ["x", "zero", "end"], ["xs"], name="head"),
        helper.make_node("Add", ["xs", "s"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    tracemalloc.start()
    try:
        g = load_model(_model(nodes, [x], [y], []))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    assert "Mod" in seen and "ConstantOfShape" not in seen
    assert g.values["xs"].shape == (3,)


def test_small_constants_broadcast_to_a_huge_one_are_not_evaluated(monkeypatch) -> None:
    """Three constants of 1024 elements each broadcast by a Where to 2^30: never made."""
    seen = _evaluated_ops(monkeypatch)
    axes = [(1024, 1, 1), (1, 1024, 1), (1, 1, 1024)]
    nodes = [
        _const("cond", np.ones(axes[0], bool)),
        _const("a", np.zeros(axes[1], np.float32)),
        _const("b", np.zeros(axes[2], np.float32)),
        helper.make_node("Where", ["cond", "a", "b"], ["w"], name="where"),
        helper.make_node("ReduceSum", ["w"], ["s"], name="sum", keepdims=0),
        helper.make_node("Add", ["x", "s"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    tracemalloc.start()
    try:
        load_model(_model(nodes, [x], [y], []))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "Where" not in seen and peak < 64 << 20


def lstm_state_model() -> onnx.ModelProto:
    """torch.nn.LSTM as exported: its zero initial states expanded to a shape computed from
    the input's (Shape -> Gather -> Unsqueeze -> Concat -> Expand). Every shape is static
    (shape inference's data propagation sees through it), but the Expand's shape is a value
    computed at run time: timed alone with zeros for it, the Expand failed on every unit."""
    rng = np.random.default_rng(5)
    seq, batch, inp, hid = 6, 1, 4, 5
    nodes = [
        _const("zero_s", np.array(0.0, np.float32)),
        helper.make_node("Shape", ["x"], ["xs"], name="shape"),
        _const("one_i", np.array(1, np.int64)),
        helper.make_node("Gather", ["xs", "one_i"], ["b"], name="gather_batch", axis=0),
        _const("ax0", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq_batch"),
        _const("dirs", np.array([1], np.int64)),
        _const("hid", np.array([hid], np.int64)),
        helper.make_node("Concat", ["dirs", "b1", "hid"], ["hshape"], name="state_shape", axis=0),
        helper.make_node("Expand", ["zero_s", "hshape"], ["h0"], name="h0"),
        helper.make_node("Expand", ["zero_s", "hshape"], ["c0"], name="c0"),
        helper.make_node(
            "LSTM", ["x", "W", "R", "", "", "h0", "c0"], ["all", "hn"], name="lstm", hidden_size=hid
        ),
        helper.make_node("Relu", ["hn"], ["y"], name="relu"),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((1, 4 * hid, inp)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 4 * hid, hid)).astype(np.float32), "R"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, batch, hid])
    return _model(nodes, [x], [y], inits)


def test_a_static_model_s_computed_state_shape_is_folded_and_profiles() -> None:
    from partuner.profile import profile_model
    from partuner.units import units_from_mapping

    m = lstm_state_model()
    g = load_model(m)
    assert not {"Shape", "Gather", "Concat"} & {n.op_type for n in g.model.graph.node}
    assert [n.name for n in g.compute_nodes] == ["lstm", "relu"]  # the states: constants
    x = np.random.default_rng(6).standard_normal((6, 1, 4)).astype(np.float32)
    np.testing.assert_allclose(_run_ort(g.model, {"x": x})[0], _run_ort(m, {"x": x})[0])
    units = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}})
    prof = profile_model(g, units, budget_s=0.01)
    assert not prof.failed
    assert all(0 < prof.costs[n]["cpu"] < float("inf") for n in ("lstm", "relu"))
    assert g.nodes[[n.name for n in g.nodes].index("lstm")].flops > 0


def test_nodes_nothing_reads_are_dropped() -> None:
    """A dead node (its output read by nothing) is dropped at load, and one only it read with
    it; the outputs stay the same."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Tanh", ["r"], ["t"], name="dead_tanh"),
        helper.make_node("Neg", ["t"], ["u"], name="dead_neg"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="fc"),
    ]
    w = numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    m = _model(nodes, [x], [y], [w])
    g = load_model(m)
    assert [n.name for n in g.nodes] == ["relu", "fc"]
    feeds = {"x": rng.standard_normal((1, 4)).astype(np.float32)}
    np.testing.assert_allclose(_run_ort(g.model, feeds)[0], _run_ort(m, feeds)[0])


def test_an_ir3_model_is_cut_into_valid_sub_models() -> None:
    """IR 3 (opset 7) lists every initializer as an input too; a partition cut from it is a
    model of its own, which ONNX's checker accepts."""
    from partuner.export import PartitionSpec, cut

    rng = np.random.default_rng(8)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    ins = [x, *(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, t.dims) for t in (w1, w2))]
    m = _model(nodes, ins, [y], [w1, w2], opset=7)
    m.ir_version = 3
    g = load_model(m)
    parts = cut(g, [PartitionSpec("p0", "a", ("fc1", "relu")), PartitionSpec("p1", "b", ("fc2",))])
    for p in parts:
        onnx.checker.check_model(p.model)
    feeds = {"x": rng.standard_normal((1, 4)).astype(np.float32)}
    r = _run_ort(parts[0].model, feeds)[0]
    np.testing.assert_allclose(_run_ort(parts[1].model, {"r": r})[0], _run_ort(m, feeds)[0])


def loop_model(declared: bool) -> onnx.ModelProto:
    """A Loop whose carried value ONNX shape inference leaves without a shape; ``declared``:
    the file declares it in ``value_info``."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
            helper.make_node("Add", ["v_in", "r"], ["v_add"], name="body_add"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", f, [1, 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", f, [1, 4]),
        ],
    )
    body.node[1].output[0] = "v_out"
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Loop", ["trip", "yes", "r"], ["carried"], body=body, name="loop"),
        helper.make_node("Neg", ["carried"], ["y"], name="neg"),
    ]
    inits = [
        numpy_helper.from_array(np.array(3, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "yes"),
    ]
    x = helper.make_tensor_value_info("x", f, [1, 4])
    y = helper.make_tensor_value_info("y", f, [1, 4])
    m = _model(nodes, [x], [y], inits)
    if declared:
        m.graph.value_info.append(helper.make_tensor_value_info("carried", f, [1, 4]))
    return m


def test_a_loop_s_carried_shape_declared_in_the_file_is_kept() -> None:
    with pytest.raises(InvalidModelError, match="declare the value's shape"):
        load_model(loop_model(declared=False))
    m = loop_model(declared=True)
    g = load_model(m)
    assert g.values["carried"].shape == (1, 4)
    assert [n.name for n in g.compute_nodes] == ["relu", "loop", "neg"]
    x = np.random.default_rng(9).standard_normal((1, 4)).astype(np.float32)
    np.testing.assert_allclose(_run_ort(g.model, {"x": x})[0], _run_ort(m, {"x": x})[0])
    np.testing.assert_allclose(_run_ort(m, {"x": x})[0], -4 * np.maximum(x, 0), rtol=1e-6)


def test_a_constant_model_output_is_placed_and_checked(tmp_path: Path) -> None:
    """A module returning a registered buffer (detection anchors) exports as Identity of an
    initializer: that node is placed (not a constant left out of every partition), and the
    plan runs and checks."""
    rng = np.random.default_rng(10)
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Identity", ["anchors.1"], ["anchors"], name="anchors_id"),
    ]
    anchors = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "anchors.1")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    outs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
        helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [3, 4]),
    ]
    path = tmp_path / "anchors.onnx"
    onnx.save(_model(nodes, [x], outs, [anchors]), path)
    assert not load_model(path).is_constant("anchors_id")
    out = tmp_path / "out"
    r = _cli_inproc("tune", path, "--db", tmp_path / "p.db", "--time-limit", "1", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    assert "output check passed" in r.stdout


def test_folded_model_from_file_through_cli(tmp_path: Path) -> None:
    p = tmp_path / "shuffle.onnx"
    onnx.save(shuffle_split_model(), p)
    res = _cli("inspect", p, "--json")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("name", ["branchy", "shufflenet_v2", "squeezenet"])
def test_models_that_loaded_are_unchanged(name: str) -> None:
    built = zoo.build(name, image_size=max(zoo.MIN_IMAGE_SIZE[name], 32))
    g = load_model(built)
    assert [n.name for n in g.model.graph.node] == [n.name for n in built.graph.node]
    assert [n.op_type for n in g.model.graph.node] == [n.op_type for n in built.graph.node]
    assert len(g.model.graph.initializer) == len(built.graph.initializer)


# -- gzip bombs and oversized files -----------------------------------------------------------


def _write_gzip_zeros(path: Path, nbytes: int) -> None:
    chunk = b"\0" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)


def test_gzip_bomb_stops_at_the_cap_without_allocating_beyond_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = 1 << 20
    monkeypatch.setattr(model_mod, "MAX_MODEL_BYTES", cap, raising=False)
    bomb = tmp_path / "bomb.onnx.gz"
    _write_gzip_zeros(bomb, 48 << 20)
    assert bomb.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModelError) as err:
            read_model_proto(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 6 * cap, peak
    msg = str(err.value)
    assert "\n" not in msg and "bomb.onnx.gz" in msg and "decompress" in msg


def test_plain_file_beyond_the_cap_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_mod, "MAX_MODEL_BYTES", 1 << 16, raising=False)
    p = tmp_path / "big.onnx"
    p.write_bytes(b"\0" * (1 << 17))
    with pytest.raises(InvalidModelError, match="big.onnx.*larger than"):
        read_model_proto(p)


def test_small_gzip_model_still_loads(tmp_path: Path) -> None:
    p = zoo.save("branchy", tmp_path / "b.onnx.gz", image_size=8)
    assert len(load_model(p).nodes) == 32


# -- external data ----------------------------------------------------------------------------


def _external_model(folder: Path, location: str) -> Path:
    """A model whose weight ``w`` (4 floats) lives in the external file ``location``."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    onnx.external_data_helper.set_external_data(w, location=location, offset=0, length=16)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes,
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    p = folder / "ext.onnx"
    p.write_bytes(model.SerializeToString())
    return p


def test_external_data_inside_the_folder_loads(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    g = load_model(_external_model(tmp_path, "w.bin"))
    init = {t.name: numpy_helper.to_array(t) for t in g.model.graph.initializer}
    np.testing.assert_array_equal(init["w"], np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink"])
def test_external_data_outside_the_folder_is_refused(tmp_path: Path, where: str) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\1" * 16)
    if where == "parent":
        location = "../secret.bin"
    elif where == "absolute":
        location = str(secret)
    else:
        (folder / "link.bin").symlink_to(secret)
        location = "link.bin"
    p = _external_model(folder, location)
    with pytest.raises(InvalidModelError) as err:
        read_model_proto(p)
    assert "'w'" in str(err.value) and "outside" in str(err.value)
    run = _cli if where == "parent" else _cli_inproc
    _assert_one_line_error(run("inspect", p), "'w'", "outside", location)


def test_missing_external_data_file(tmp_path: Path) -> None:
    p = _external_model(tmp_path, "gone.bin")
    _assert_one_line_error(_cli("inspect", p), "'w'", "gone.bin", "not found")
    with pytest.raises(InvalidModelError, match="gone.bin"):
        load_model(p)


def test_external_data_shorter_than_declared(tmp_path: Path) -> None:
    (tmp_path / "short.bin").write_bytes(b"\0" * 4)
    with pytest.raises(InvalidModelError, match="'w'"):
        load_model(_external_model(tmp_path, "short.bin"))


# -- --input-shape overflow -------------------------------------------------------------------


def _dynamic_model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["input"], ["output"], name="relu")]
    graph = helper.make_graph(
        nodes,
        "dyn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3, "H", "W"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


BAD_SHAPES = [
    "input=1x3x99999999999999999999x224",  # one dim beyond int64
    "input=99999x99999x99999x99999",  # the product overflows int64
    "input=1x3x100000x100000",  # fits int64 but absurdly large
]


def test_input_shape_overflow_is_one_line_through_the_cli(tmp_path: Path) -> None:
    p = _dynamic_model(tmp_path / "dyn.onnx")
    _assert_one_line_error(_cli("inspect", p, "--input-shape", BAD_SHAPES[0]), "too large")
    for spec in BAD_SHAPES[1:]:
        _assert_one_line_error(_cli_inproc("inspect", p, "--input-shape", spec), "too large")
    for spec in ["input=1x3x0x8", "input=1x3x-1x8"]:
        _assert_one_line_error(_cli_inproc("inspect", p, "--input-shape", spec), "--input-shape")
    ok = _cli_inproc("inspect", p, "--input-shape", "input=2x3x4x4", "--json")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("spec", BAD_SHAPES)
def test_input_shape_overflow_in_the_library(tmp_path: Path, spec: str) -> None:
    with pytest.raises(InputShapeError, match="too large"):
        parse_input_shapes([spec])
    dims = tuple(int(d) for d in spec.split("=")[1].split("x"))
    with pytest.raises(InputShapeError, match="too large"):
        load_model(_dynamic_model(tmp_path / "dyn.onnx"), {"input": dims})


def test_an_absurd_input_shape_fixed_in_the_model_is_one_line(tmp_path: Path) -> None:
    """A model whose own input holds 1e15 elements is refused on loading, before any array of
    that size is made (it was a MemoryError naming no input)."""
    p = tmp_path / "huge.onnx"
    onnx.save(_relu_model(dims=(100000, 100000, 100000)), p)
    with pytest.raises(InputShapeError, match="'x' of .*fixed in the model.*too large"):
        load_model(p)
    _assert_one_line_error(_cli_inproc("inspect", p), "re-export it smaller")


def test_a_computed_value_too_large_is_one_line(tmp_path: Path) -> None:
    """A small input expanded (or tiled) to 1e10 elements is refused on loading, naming the
    value and its node (profiling made a 74.5 GiB array of random inputs to time the next
    node alone: a MemoryError naming nothing)."""
    shape = numpy_helper.from_array(np.array([200000, 50000], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Expand", ["r", "shape"], ["big"], name="grow"),
            helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0, name="sum"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 50000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [shape],
    )
    p = tmp_path / "expand.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), p)
    with pytest.raises(InvalidModelError, match=r"'big' \(output of node 'grow' \(Expand\)\)"):
        load_model(p)
    _assert_one_line_error(_cli_inproc("profile", p), "would hold 1e+10 elements")


@pytest.mark.parametrize("dims", [(1, 3, 0, 8), (1, 3, -4, 8)])
def test_non_positive_dims_in_the_library(tmp_path: Path, dims: tuple[int, ...]) -> None:
    with pytest.raises(InputShapeError, match=">= 1"):
        load_model(_dynamic_model(tmp_path / "dyn.onnx"), {"input": dims})


# -- file mode of zoo.save --------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".onnx", ".onnx.gz"])
def test_zoo_save_follows_the_umask(tmp_path: Path, suffix: str) -> None:
    old = os.umask(0o022)
    try:
        p = zoo.save("branchy", tmp_path / f"m{suffix}", image_size=8)
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert [f.name for f in tmp_path.iterdir()] == [p.name]


# -- outputs no node computes, shapes the data decides, the shape to suggest -------------------


def _relu_model(extra_output: str = "", dims: tuple = (1, 4, 8)) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])]
    if extra_output:
        outs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT, [1, 4, 8]))
    w = numpy_helper.from_array(np.ones((1, 4, 8), np.float32), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "m", [x], outs, initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(("output", "what"), [("x", "one of its inputs"), ("w", "a weight")])
def test_an_output_no_node_computes_is_named(output: str, what: str) -> None:
    with pytest.raises(InvalidModelError) as e:
        load_model(_relu_model(output))
    msg = str(e.value)
    assert f"output {output!r}" in msg and what in msg and "Identity" in msg
    assert "--input-shape" not in msg  # its shape was never the problem


def test_a_shape_the_data_decides_does_not_send_the_user_to_input_shape() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2, "n"])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("NonZero", ["r"], ["y"], name="nz"),
    ]
    g = helper.make_graph(nodes, "nz", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(InvalidModelError) as e:
        load_model(m)
    msg = str(e.value)
    assert "'y' (output of node 'nz' (NonZero))" in msg
    assert "--input-shape" not in msg and "static" in msg


def test_a_dynamic_input_is_suggested_with_the_model_s_own_fixed_sizes() -> None:
    m = _relu_model(dims=("N", 4, 8))
    with pytest.raises(InputShapeError) as e:
        load_model(m)
    assert "--input-shape x=1x4x8 " in str(e.value)
