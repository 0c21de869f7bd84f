"""The ONNX loader: counts, shapes, bytes, FLOPs, naming, def-use links, and its errors."""

from __future__ import annotations

import gzip

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partuner.errors import InputShapeError, InvalidModelError, PartunerError
from partuner.graph import load_model, parse_input_shapes, read_model_proto, zoo


def conv_gemm_model(batch: int | str = 1) -> onnx.ModelProto:
    """input (N, 3, 8, 8) -> Conv 3x3 pad 1 (4 out, bias) -> Relu -> Flatten -> Gemm (256 -> 10)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "conv.b"),
        numpy_helper.from_array(rng.standard_normal((10, 256)).astype(np.float32), "fc.w"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node(
            "Conv",
            ["input", "conv.w", "conv.b"],
            ["c"],
            name="conv",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["output"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_gemm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_counts_shapes_and_bytes() -> None:
    g = load_model(conv_gemm_model())
    assert [n.name for n in g.nodes] == ["conv", "relu", "flatten", "fc"]
    assert [n.index for n in g.nodes] == [0, 1, 2, 3]
    assert set(g.values) == {"input", "conv.w", "conv.b", "fc.w", "fc.b", "c", "r", "f", "output"}
    assert g.inputs == ["input"] and g.outputs == ["output"]
    assert g.values["c"].shape == (1, 4, 8, 8) and g.values["c"].dtype == "float32"
    assert g.values["f"].shape == (1, 256)
    assert g.values["output"].shape == (1, 10)
    assert g.values["c"].nbytes == 256 * 4
    assert g.values["input"].nbytes == 192 * 4
    assert g.weight_bytes == (108 + 4 + 2560 + 10) * 4
    conv, fc = g.node("conv"), g.node("fc")
    assert conv.weight_bytes == (108 + 4) * 4
    assert conv.io_bytes == (192 + 256) * 4
    assert fc.weight_bytes == (2560 + 10) * 4
    assert fc.io_bytes == (256 + 10) * 4
    assert conv.attributes["kernel_shape"] == [3, 3] and fc.attributes["transB"] == 1
    assert g.op_histogram() == {"Conv": 1, "Flatten": 1, "Gemm": 1, "Relu": 1}


def test_flops_against_hand_computed_numbers() -> None:
    g = load_model(conv_gemm_model())
    # Conv: 2 * outputs (4*8*8) * (Cin 3 * 3 * 3); Relu: one per element; Gemm: 2 * 10 * 256.
    flops = {n.name: n.flops for n in g.nodes}
    assert flops == {"conv": 2 * 256 * 27, "relu": 256, "flatten": 0, "fc": 2 * 10 * 256}
    assert g.total_flops == 13824 + 256 + 5120


def test_flops_scale_with_image_size() -> None:
    small = load_model(zoo.build("branchy", image_size=32))
    large = load_model(zoo.build("branchy", image_size=64))
    fc = small.node("fc").flops
    assert fc == large.node("fc").flops == 2 * 56 * 10  # the classifier does not grow
    assert large.total_flops - fc == 4 * (small.total_flops - fc)  # the rest grows with pixels


def test_def_use_links() -> None:
    g = load_model(conv_gemm_model())
    c = g.values["c"]
    assert (c.producer, c.consumers) == ("conv", ("relu",))
    assert g.values["input"].producer is None and g.values["input"].is_graph_input
    assert g.values["input"].consumers == ("conv",)
    assert g.values["conv.w"].is_initializer and not g.values["conv.w"].is_graph_input
    assert g.values["output"].is_graph_output and g.values["output"].consumers == ()
    assert g.predecessors("relu") == ["conv"] and g.successors("relu") == ["flatten"]
    assert g.predecessors("conv") == [] and g.successors("fc") == []
    assert sorted(g.edges()) == [
        ("conv", "relu", "c", 1024),
        ("flatten", "fc", "f", 1024),
        ("relu", "flatten", "r", 1024),
    ]


def test_def_use_links_with_fan_out() -> None:
    g = load_model(zoo.build("branchy", image_size=16))
    fork = g.node("stem.concat")
    assert g.successors(fork.name) == ["a.b1.conv", "a.b2.0.conv", "a.b3.pool"]
    assert g.predecessors("stem.concat") == ["stem.s1.relu", "stem.s2.relu"]
    assert g.predecessors("b.add") == ["b.b1.relu", "b.b2.conv2"]
    for producer, consumer, value, nbytes in g.edges():
        assert g.values[value].producer == producer
        assert consumer in g.values[value].consumers
        assert nbytes == g.values[value].nbytes
        assert g.node(producer).index < g.node(consumer).index


def test_unnamed_and_duplicate_nodes_get_unique_names() -> None:
    model = conv_gemm_model()
    names = ["", "dup", "dup", "Conv_0"]  # the last name is what node 0 would have got
    for node, name in zip(model.graph.node, names, strict=True):
        node.name = name
    g = load_model(model)
    got = [n.name for n in g.nodes]
    assert len(set(got)) == 4
    assert got[1] == "dup" and got[3] == "Conv_0"  # names the file gives are kept
    assert got[0].startswith("Conv_") and got[2].startswith("Flatten_")
    assert [n.name for n in g.model.graph.node] == got  # the proto carries the same names
    assert [n.name for n in model.graph.node] == names  # the caller's proto is not modified


def test_unknown_node_name_says_so() -> None:
    g = load_model(conv_gemm_model())
    with pytest.raises(KeyError, match="no node named 'nope'"):
        g.node("nope")
    assert g.has_node("conv") and not g.has_node("nope")


def test_load_from_file_and_gzip(tmp_path) -> None:
    model = conv_gemm_model()
    plain, packed = tmp_path / "m.onnx", tmp_path / "m.onnx.gz"
    plain.write_bytes(model.SerializeToString())
    packed.write_bytes(gzip.compress(model.SerializeToString()))
    a, b = load_model(plain), load_model(packed)
    assert a.source == str(plain) and b.source == str(packed)
    assert (
        [n.name for n in a.nodes] == [n.name for n in b.nodes] == ["conv", "relu", "flatten", "fc"]
    )
    assert a.total_flops == b.total_flops == load_model(model).total_flops


def test_dynamic_batch_fixed_by_input_shapes() -> None:
    g = load_model(conv_gemm_model(batch="N"), {"input": (2, 3, 8, 8)})
    assert g.values["input"].shape == (2, 3, 8, 8)
    assert g.values["output"].shape == (2, 10)  # the fixed input propagates to the output
    assert g.node("fc").flops == 2 * 2 * 10 * 256
    dims = g.model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 3, 8, 8]


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["input=1x3x224x224", " x = 2, 3 "]) == {
        "input": (1, 3, 224, 224),
        "x": (2, 3),
    }


# ---- errors: each one a PartunerError subclass with a message naming the problem ----


def test_missing_file(tmp_path) -> None:
    with pytest.raises(InvalidModelError, match="model file not found: .*nope.onnx"):
        load_model(tmp_path / "nope.onnx")


def test_directory(tmp_path) -> None:
    with pytest.raises(InvalidModelError, match="is a folder, not an ONNX file"):
        load_model(tmp_path)


def test_truncated_file(tmp_path) -> None:
    data = zoo.build("branchy", image_size=8).SerializeToString()
    path = tmp_path / "half.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModelError, match=r"half\.onnx.*(complete|no ONNX graph)"):
        read_model_proto(path)


def test_truncated_gzip(tmp_path) -> None:
    data = gzip.compress(zoo.build("branchy", image_size=8).SerializeToString())
    path = tmp_path / "half.onnx.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModelError, match=r"cannot read .*half\.onnx\.gz"):
        load_model(path)


def test_random_bytes(tmp_path) -> None:
    path = tmp_path / "noise.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(InvalidModelError, match=r"noise\.onnx"):
        load_model(path)


def test_empty_file(tmp_path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(InvalidModelError, match="holds no ONNX graph"):
        load_model(path)


def test_model_failing_the_checker() -> None:
    model = conv_gemm_model()
    model.graph.node[1].input[0] = "undefined_value"
    with pytest.raises(
        InvalidModelError, match="fails the ONNX checker: .*'undefined_value'.*name: relu"
    ) as ei:
        load_model(model)
    assert "\n" not in str(ei.value)  # one line, node named
    model = conv_gemm_model()
    model.graph.node[1].op_type = "Relux"
    with pytest.raises(InvalidModelError, match="No Op registered for Relux.*Name: relu"):
        load_model(model)


def test_unknown_input_shape_name() -> None:
    with pytest.raises(
        InputShapeError,
        match=r"names 'images', but the model's inputs are "
        r"\['input'\]",
    ):
        load_model(conv_gemm_model(batch="N"), {"images": (1, 3, 8, 8)})


@pytest.mark.parametrize("spec", ["input", "input=", "input=1x3xx8", "=1x3", "input=1x-3x8x8"])
def test_malformed_input_shape(spec: str) -> None:
    with pytest.raises(InputShapeError, match="bad --input-shape .*NAME=DIMS"):
        parse_input_shapes([spec])


def test_zero_dimension_input_shape() -> None:
    with pytest.raises(InputShapeError, match="every dimension must be >= 1"):
        parse_input_shapes(["input=0x3x8x8"])


def test_rank_mismatch() -> None:
    with pytest.raises(InputShapeError, match="has 3 dims but the model's input has rank 4"):
        load_model(conv_gemm_model(batch="N"), {"input": (1, 3, 8)})


def test_fixed_dimension_conflict() -> None:
    with pytest.raises(InputShapeError, match="dim 1 is fixed to 3 in the model, not 4"):
        load_model(conv_gemm_model(), {"input": (1, 4, 8, 8)})


def test_dynamic_dimension_left_unresolved() -> None:
    with pytest.raises(InputShapeError, match=r"dynamic shape \[Nx3x8x8\].*--input-shape input="):
        load_model(conv_gemm_model(batch="N"))


def test_every_error_is_a_partuner_error() -> None:
    for cls in (InvalidModelError, InputShapeError):
        assert issubclass(cls, PartunerError)
