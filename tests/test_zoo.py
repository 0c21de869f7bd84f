"""The demo model zoo: valid ONNX, runs in onnxruntime, torchvision-shaped, seeded."""

from __future__ import annotations

import gzip

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from partuner.errors import InputShapeError, InvalidModelError, PartunerError
from partuner.graph import load_model, zoo

SMALL = 32  # every zoo model runs at this size


def _run(model: onnx.ModelProto, size: int) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(123).standard_normal((1, 3, size, size), dtype=np.float32)
    return sess.run(["output"], {"input": x})[0]


@pytest.mark.parametrize("name", zoo.NAMES)
@pytest.mark.parametrize("size", [SMALL, 224])
def test_builds_checks_and_runs(name: str, size: int) -> None:
    model = zoo.build(name, image_size=size)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version in (8, 9)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["output"]
    y = _run(model, size)
    assert y.shape == zoo.OUTPUT_SHAPES[name]
    assert y.dtype == np.float32
    assert np.isfinite(y).all()
    assert float(y.std()) > 0  # not dead: the random weights give varied outputs


@pytest.mark.parametrize("name", zoo.NAMES)
def test_runs_at_its_minimum_size(name: str) -> None:
    size = zoo.MIN_IMAGE_SIZE[name]
    y = _run(zoo.build(name, image_size=size), size)
    assert y.shape == zoo.OUTPUT_SHAPES[name] and np.isfinite(y).all()
    with pytest.raises(InputShapeError, match=f">= {size}"):
        zoo.build(name, image_size=size - 1)


def test_same_seed_same_bytes_other_seed_other_weights() -> None:
    a = zoo.build("branchy", image_size=SMALL, seed=7)
    b = zoo.build("branchy", image_size=SMALL, seed=7)
    c = zoo.build("branchy", image_size=SMALL, seed=8)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()
    ya, yc = _run(a, SMALL), _run(c, SMALL)
    assert np.array_equal(ya, _run(b, SMALL))
    assert not np.allclose(ya, yc)
    # The structure does not depend on the seed.
    assert [n.name for n in a.graph.node] == [n.name for n in c.graph.node]


# Layer structure of the torchvision namesakes (BatchNorm folded, dropout dropped).
_OPS = {
    "squeezenet": {
        "Conv": 26,
        "Relu": 26,
        "Concat": 8,
        "MaxPool": 3,
        "GlobalAveragePool": 1,
        "Flatten": 1,
    },
    "googlenet": {
        "Conv": 57,
        "Relu": 57,
        "MaxPool": 13,
        "Concat": 9,
        "GlobalAveragePool": 1,
        "Flatten": 1,
        "Gemm": 1,
    },
    "resnet18": {
        "Conv": 20,
        "Relu": 17,
        "Add": 8,
        "MaxPool": 1,
        "GlobalAveragePool": 1,
        "Flatten": 1,
        "Gemm": 1,
    },
}


@pytest.mark.parametrize("name", sorted(_OPS))
def test_torchvision_layer_structure(name: str) -> None:
    g = load_model(zoo.build(name, image_size=64))
    assert g.op_histogram() == dict(sorted(_OPS[name].items(), key=lambda kv: (-kv[1], kv[0])))
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    for n in convs:
        assert len(n.inputs) == 3, f"{n.name}: BN folded into a Conv with bias"
    pools = [n for n in g.nodes if n.op_type == "MaxPool"]
    want_ceil = 0 if name == "resnet18" else 1
    assert {n.attributes["ceil_mode"] for n in pools} == {want_ceil}


def test_torchvision_parameter_counts() -> None:
    # torchvision's parameter counts (googlenet without aux heads). Folding a BatchNorm replaces
    # its 2 affine parameters per channel with 1 conv bias; squeezenet has no BatchNorm.
    counts = {"squeezenet": 1_235_496, "googlenet": 6_624_904, "resnet18": 11_689_512}
    for name, want in counts.items():
        model = zoo.build(name, image_size=SMALL)
        got = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
        folded = 0
        if name != "squeezenet":
            folded = sum(
                t.dims[0]
                for t in model.graph.initializer
                if t.name.endswith(".bias") and t.name != "fc.bias"
            )
        assert got == want - folded, name


def test_googlenet_channels_match_torchvision() -> None:
    g = load_model(zoo.build("googlenet", image_size=SMALL))
    concat_channels = [g.values[n.outputs[0]].shape[1] for n in g.nodes if n.op_type == "Concat"]
    assert concat_channels == [256, 480, 512, 512, 512, 528, 832, 832, 1024]
    assert g.node("fc").attributes["transB"] == 1
    assert g.values["fc.weight"].shape == (1000, 1024)


def test_resnet18_downsample_blocks() -> None:
    g = load_model(zoo.build("resnet18", image_size=SMALL))
    down = [n.name for n in g.nodes if "downsample" in n.name]
    assert down == ["layer2.0.downsample.0", "layer3.0.downsample.0", "layer4.0.downsample.0"]
    assert all(g.node(n).attributes["strides"] == [2, 2] for n in down)
    assert g.values["fc.weight"].shape == (1000, 512)


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidModelError, match=r"unknown zoo model 'resnet'; known: \[") as ei:
        zoo.build("resnet")
    assert isinstance(ei.value, PartunerError)
    for name in zoo.NAMES:
        assert repr(name) in str(ei.value)


@pytest.mark.parametrize("suffix", [".onnx", ".onnx.gz"])
def test_save_writes_atomically_a_loadable_file(tmp_path, suffix: str) -> None:
    path = tmp_path / f"branchy{suffix}"
    zoo.save("branchy", path, image_size=SMALL, seed=3)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    data = path.read_bytes()
    if suffix.endswith(".gz"):
        data = gzip.decompress(data)
    assert data == zoo.build("branchy", image_size=SMALL, seed=3).SerializeToString()
    assert load_model(path).source == str(path)
