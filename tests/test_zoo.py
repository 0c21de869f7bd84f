"""The demo model zoo: valid ONNX, runs in onnxruntime, torchvision-shaped, seeded."""

from __future__ import annotations

import collections
import functools
import gzip
import math
from collections.abc import Iterator

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from partuner.errors import InputShapeError, InvalidModelError, PartunerError
from partuner.graph import ModelGraph, load_model, zoo

SMALL = 32  # every zoo model runs at this size or at its minimum, when that is larger
CLASSIC = ("squeezenet", "googlenet", "resnet18", "branchy")
NEW = ("resnet50", "mobilenet_v2", "shufflenet_v2", "densenet121", "inception_v3")
LARGE = "synthetic_large"


def _small(name: str) -> int:
    return max(SMALL, zoo.MIN_IMAGE_SIZE[name])


@functools.cache
def _built(name: str, size: int, seed: int = 0) -> onnx.ModelProto:
    """A zoo model, built once while this module runs; callers must not modify it."""
    return zoo.build(name, image_size=size, seed=seed)


@functools.cache
def _graph(name: str, size: int) -> ModelGraph:
    """``load_model`` of :func:`_built`, once while this module runs; not to be modified."""
    return load_model(_built(name, size))


@pytest.fixture(autouse=True, scope="module")
def _free_cached_models() -> Iterator[None]:
    """Drop the cached models (hundreds of MB) once this module's tests are done."""
    yield
    _built.cache_clear()
    _graph.cache_clear()


def _runs(model: onnx.ModelProto, size: int, input_seeds: tuple[int, ...]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    rngs = [np.random.default_rng(seed) for seed in input_seeds]
    xs = [rng.standard_normal((1, 3, size, size), dtype=np.float32) for rng in rngs]
    return [sess.run(["output"], {"input": x})[0] for x in xs]


def _run(model: onnx.ModelProto, size: int) -> np.ndarray:
    return _runs(model, size, (123,))[0]


def test_the_zoo_lists_every_model() -> None:
    assert zoo.NAMES == (*CLASSIC, *NEW, LARGE)
    assert set(zoo.MIN_IMAGE_SIZE) == set(zoo.OUTPUT_SHAPES) == set(zoo.NAMES)


# Every model at a small size; the classic ones and two of the big new ones also at 224.
_RUNS = [(n, _small(n)) for n in zoo.NAMES] + [
    (n, 224) for n in (*CLASSIC, "resnet50", "shufflenet_v2")
]


@pytest.mark.parametrize(("name", "size"), _RUNS)
def test_builds_checks_and_runs(name: str, size: int) -> None:
    model = _built(name, size) if size < 224 else zoo.build(name, image_size=size)
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
    y = _run(_built(name, size), size)
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


# --- the torchvision-shaped big models and synthetic_large -----------------------------------


@pytest.mark.parametrize("name", [*NEW, LARGE])
def test_same_seed_same_model_other_seed_other_weights(name: str) -> None:
    size = _small(name)
    a, c = _built(name, size), zoo.build(name, image_size=size, seed=1)
    assert zoo.build(name, image_size=size).SerializeToString() == a.SerializeToString()
    assert [n.name for n in a.graph.node] == [n.name for n in c.graph.node]
    assert [t.name for t in a.graph.initializer] == [t.name for t in c.graph.initializer]
    for ta, tc in zip(a.graph.initializer, c.graph.initializer, strict=True):
        random = ta.data_type == onnx.TensorProto.FLOAT and len(ta.dims) > 0
        assert (ta.raw_data != tc.raw_data) == random, ta.name
    # The output depends on the input, at a sane scale.
    y, y2 = _runs(a, size, (123, 5))
    assert not np.allclose(y, y2)
    assert 1e-2 < float(np.abs(y).max()) < 1e3


class _Arch:
    """Parameter tally of an architecture, the way torchvision builds it.

    ``weights``: conv and fc weights (+ the fc bias); ``folded``: channels of BatchNorms that
    follow a conv (folded into a conv bias here); ``bn``: channels of the other BatchNorms.
    """

    def __init__(self) -> None:
        self.weights = self.folded = self.bn = 0

    def conv(self, cin: int, cout: int, kh: int, kw: int = 0, *, g: int = 1, bn: bool = True):
        self.weights += cout * cin // g * kh * (kw or kh)
        self.folded += cout if bn else 0

    def fc(self, fin: int, fout: int) -> None:
        self.weights += fin * fout + fout

    def torchvision(self) -> int:  # a BatchNorm has a weight and a bias per channel
        return self.weights + 2 * (self.folded + self.bn)

    def zoo(self) -> int:  # a folded BatchNorm leaves one conv bias per channel
        return self.weights + self.folded + 2 * self.bn


def _resnet50() -> _Arch:
    a, cin = _Arch(), 64
    a.conv(3, 64, 7)
    for width, n in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for i in range(n):
            a.conv(cin, width, 1), a.conv(width, width, 3), a.conv(width, 4 * width, 1)
            if i == 0:
                a.conv(cin, 4 * width, 1)  # downsample
            cin = 4 * width
    a.fc(2048, 1000)
    return a


def _mobilenet_v2() -> _Arch:
    a, cin = _Arch(), 32
    a.conv(3, 32, 3)
    for t, c, n in ((1, 16, 1), (6, 24, 2), (6, 32, 3), (6, 64, 4), (6, 96, 3), (6, 160, 3)):
        for _ in range(n):
            if t != 1:
                a.conv(cin, cin * t, 1)
            a.conv(cin * t, cin * t, 3, g=cin * t), a.conv(cin * t, c, 1)
            cin = c
    a.conv(160, 960, 1), a.conv(960, 960, 3, g=960), a.conv(960, 320, 1)
    a.conv(320, 1280, 1)
    a.fc(1280, 1000)
    return a


def _shufflenet_v2() -> _Arch:
    a, cin = _Arch(), 24
    a.conv(3, 24, 3)
    for n, c in ((4, 116), (8, 232), (4, 464)):
        a.conv(cin, cin, 3, g=cin), a.conv(cin, c // 2, 1)  # branch1 of the stride-2 unit
        for i in range(n):
            a.conv(cin if i == 0 else c // 2, c // 2, 1)
            a.conv(c // 2, c // 2, 3, g=c // 2), a.conv(c // 2, c // 2, 1)
        cin = c
    a.conv(464, 1024, 1)
    a.fc(1024, 1000)
    return a


def _densenet121() -> _Arch:
    a, c = _Arch(), 64
    a.conv(3, 64, 7)
    for i, n in enumerate((6, 12, 24, 16)):
        for j in range(n):
            a.bn += c + 32 * j  # norm1
            a.conv(c + 32 * j, 128, 1), a.conv(128, 32, 3, bn=False)
        c += 32 * n
        if i < 3:
            a.bn += c
            a.conv(c, c // 2, 1, bn=False)
            c //= 2
    a.bn += c  # norm5
    a.fc(c, 1000)
    return a


def _inception_v3() -> _Arch:
    a = _Arch()
    for cin, cout, k in ((3, 32, 3), (32, 32, 3), (32, 64, 3), (64, 80, 1), (80, 192, 3)):
        a.conv(cin, cout, k)
    for cin, pool in ((192, 32), (256, 64), (288, 64)):  # InceptionA
        a.conv(cin, 64, 1), a.conv(cin, 48, 1), a.conv(48, 64, 5)
        a.conv(cin, 64, 1), a.conv(64, 96, 3), a.conv(96, 96, 3), a.conv(cin, pool, 1)
    a.conv(288, 384, 3), a.conv(288, 64, 1), a.conv(64, 96, 3), a.conv(96, 96, 3)  # B
    for c7 in (128, 160, 160, 192):  # InceptionC
        a.conv(768, 192, 1), a.conv(768, c7, 1), a.conv(c7, c7, 1, 7), a.conv(c7, 192, 7, 1)
        a.conv(768, c7, 1), a.conv(c7, c7, 7, 1), a.conv(c7, c7, 1, 7), a.conv(c7, c7, 7, 1)
        a.conv(c7, 192, 1, 7), a.conv(768, 192, 1)
    a.conv(768, 192, 1), a.conv(192, 320, 3)  # InceptionD
    a.conv(768, 192, 1), a.conv(192, 192, 1, 7), a.conv(192, 192, 7, 1), a.conv(192, 192, 3)
    for cin in (1280, 2048):  # InceptionE
        a.conv(cin, 320, 1), a.conv(cin, 384, 1), a.conv(384, 384, 1, 3), a.conv(384, 384, 3, 1)
        a.conv(cin, 448, 1), a.conv(448, 384, 3), a.conv(384, 384, 1, 3), a.conv(384, 384, 3, 1)
        a.conv(cin, 192, 1)
    a.fc(2048, 1000)
    return a


# torchvision's published parameter counts; inception_v3 without its aux head (3,326,696
# parameters), which an inference export drops.
_TORCHVISION_PARAMS = {
    "resnet50": (_resnet50, 25_557_032),
    "mobilenet_v2": (_mobilenet_v2, 3_504_872),
    "shufflenet_v2": (_shufflenet_v2, 2_278_604),
    "densenet121": (_densenet121, 7_978_856),
    "inception_v3": (_inception_v3, 23_834_568),
}


@pytest.mark.parametrize("name", NEW)
def test_new_models_match_torchvision_parameter_counts(name: str) -> None:
    arch_fn, published = _TORCHVISION_PARAMS[name]
    arch = arch_fn()
    assert arch.torchvision() == published
    model = _built(name, _small(name))
    params = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    assert sum(math.prod(t.dims) for t in params if t.dims) == arch.zoo()
    conv_bias = [t for t in params if t.name.endswith(".bias") and len(t.dims) == 1]
    assert sum(t.dims[0] for t in conv_bias if t.name != "fc.bias") == arch.folded
    # Besides the weights: ReLU6's two scalar bounds and the channel shuffle's int64 shapes.
    others = sorted(t.name for t in model.graph.initializer if t not in params or not t.dims)
    if name == "mobilenet_v2":
        assert others == ["relu6.max", "relu6.min"]
    elif name == "shufflenet_v2":
        assert len(others) == 32 and all(n.endswith(".shape") for n in others)
    else:
        assert others == []


# Node counts by op type, without the head: GlobalAveragePool, Flatten and a Gemm named fc
# (shufflenet_v2: ReduceMean and fc).
_NEW_OPS = {
    "resnet50": {"Conv": 53, "Relu": 49, "Add": 16, "MaxPool": 1},
    "mobilenet_v2": {"Conv": 52, "Clip": 35, "Add": 10},
    "shufflenet_v2": {
        "Conv": 56,
        "Relu": 37,
        "Reshape": 32,
        "Concat": 16,
        "Transpose": 16,
        "Split": 13,
        "MaxPool": 1,
    },
    "densenet121": {
        "Relu": 121,
        "Conv": 120,
        "Add": 62,
        "Mul": 62,
        "Concat": 58,
        "AveragePool": 3,
        "MaxPool": 1,
    },
    "inception_v3": {
        "Conv": 94,
        "Relu": 94,
        "Concat": 15,
        "AveragePool": 9,
        "MaxPool": 4,
    },
}
_NODE_COUNTS = {
    "resnet50": 122,
    "mobilenet_v2": 100,
    "shufflenet_v2": 173,
    "densenet121": 430,
    "inception_v3": 219,
    LARGE: 1206,
}


def _synthetic_large_ops() -> dict[str, int]:
    """Op counts of synthetic_large, from its plan: stem, branch layers, join + mix + Add, head."""
    from partuner.graph.zoo_synthetic import synthetic_large_plan

    plan = synthetic_large_plan()
    kinds = collections.Counter(k for block in plan for br in block for k in br)
    convs = kinds["c1"] + kinds["c3"] + kinds["dw"]
    n = len(plan)
    return {
        "Conv": 1 + convs + n,
        "Relu": 1 + convs,
        "MaxPool": 1 + kinds["max"],
        "AveragePool": kinds["avg"],
        "Concat": n,
        "Add": n,
    }


@pytest.mark.parametrize("name", [*NEW, LARGE])
def test_new_models_node_counts(name: str) -> None:
    g = _graph(name, _small(name))
    want = dict(_NEW_OPS[name] if name != LARGE else _synthetic_large_ops())
    want["Gemm"] = 1
    if name == "shufflenet_v2":
        want["ReduceMean"] = 1
    else:
        want.update(GlobalAveragePool=1, Flatten=1)
    assert g.node("fc").attributes["transB"] == 1
    assert g.values["fc.weight"].shape[0] == zoo.OUTPUT_SHAPES[name][1]
    assert g.op_histogram() == dict(sorted(want.items(), key=lambda kv: (-kv[1], kv[0])))
    assert len(g.nodes) == len(g.compute_nodes) == _NODE_COUNTS[name]
    # Every Conv but DenseNet's bias-free ones carries its folded BatchNorm as a bias.
    biasless = [n.name for n in g.nodes if n.op_type == "Conv" and len(n.inputs) == 2]
    want_biasless = 58 + 3 if name == "densenet121" else 0
    assert len(biasless) == want_biasless


def _convs(g: ModelGraph, **attrs: object) -> list[str]:
    return [
        n.name
        for n in g.nodes
        if n.op_type == "Conv" and all(n.attributes[k] == v for k, v in attrs.items())
    ]


def test_resnet50_bottlenecks_and_downsamples() -> None:
    g = _graph("resnet50", SMALL)
    down = [n.name for n in g.nodes if "downsample" in n.name]
    assert down == [f"layer{i}.0.downsample.0" for i in range(1, 5)]
    assert [g.node(n).attributes["strides"] for n in down] == [[1, 1]] + [[2, 2]] * 3
    # v1.5: the stride sits on the 3x3 conv; conv3 expands 4x.
    assert _convs(g, strides=[2, 2], kernel_shape=[3, 3]) == [
        f"layer{i}.0.conv2" for i in range(2, 5)
    ]
    widths = [g.values[f"layer{i}.0.conv3.weight"].shape[0] for i in range(1, 5)]
    assert widths == [256, 512, 1024, 2048]
    assert g.values["fc.weight"].shape == (1000, 2048)


def test_mobilenet_v2_depthwise_relu6_and_residuals() -> None:
    g = _graph("mobilenet_v2", SMALL)
    dw = [n for n in g.nodes if n.op_type == "Conv" and n.attributes["group"] > 1]
    assert len(dw) == 17
    for n in dw:
        c = g.values[n.inputs[0]].shape[1]
        assert n.attributes["group"] == c and g.values[n.inputs[1]].shape == (c, 1, 3, 3)
    # The first block of the groups with stride 2 (24, 32, 64 and 160 channels) downsamples.
    assert [i for i, n in enumerate(dw) if n.attributes["strides"] == [2, 2]] == [1, 3, 6, 13]
    for n in g.nodes:
        if n.op_type == "Clip":
            assert tuple(n.inputs[1:]) == ("relu6.min", "relu6.max")
    model = _built("mobilenet_v2", SMALL)
    bounds = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert (float(bounds["relu6.min"]), float(bounds["relu6.max"])) == (0.0, 6.0)
    adds = [n.name for n in g.nodes if n.op_type == "Add"]
    assert adds == [f"features.{i}.add" for i in (3, 5, 6, 8, 9, 10, 12, 13, 15, 16)]
    assert g.values["features.18.0_output"].shape[1] == 1280


@pytest.mark.parametrize("size", [SMALL, 57])
def test_shufflenet_v2_split_concat_shuffle(size: int) -> None:
    g = _graph("shufflenet_v2", size)
    splits = [n for n in g.nodes if n.op_type == "Split"]
    assert len(splits) == 13 and all(len(n.outputs) == 2 for n in splits)
    concats = [g.values[n.outputs[0]].shape for n in g.nodes if n.op_type == "Concat"]
    h = [(size + 7) // 8, (size + 15) // 16, (size + 31) // 32]  # each stride 2 pads by 1
    want = [(1, 116, h[0], h[0]), (1, 232, h[1], h[1]), (1, 464, h[2], h[2])]
    assert [concats[0], concats[4], concats[12]] == want
    assert len(set(concats[0:4])) == len(set(concats[4:12])) == len(set(concats[12:])) == 1
    for n in g.nodes:
        if n.op_type == "Transpose":
            assert n.attributes["perm"] == [0, 2, 1, 3, 4]
            assert g.values[n.inputs[0]].shape[1] == 2
    dw = _convs(g, kernel_shape=[3, 3])[1:]  # all 3x3 convs after conv1 are depthwise
    assert all(g.node(n).attributes["group"] == g.values[g.node(n).inputs[1]].shape[0] for n in dw)
    assert len(dw) == 3 * 2 + 13


def test_densenet121_blocks_and_transitions() -> None:
    g = _graph("densenet121", SMALL)
    ends = [f"features.denseblock{i}.concat" for i in range(1, 5)]
    assert [g.values[g.node(n).outputs[0]].shape[1] for n in ends] == [256, 512, 1024, 1024]
    assert [len(g.node(n).inputs) for n in ends] == [7, 13, 25, 17]
    # Every dense layer adds growth-rate 32 channels; BN-ReLU-Conv order through Mul/Add.
    layer = "features.denseblock2.denselayer3"
    assert g.values[f"{layer}.concat_output"].shape[1] == 128 + 2 * 32
    assert g.predecessors(f"{layer}.norm1.mul") == [f"{layer}.concat"]
    assert g.values[f"{layer}.norm1.weight"].shape == (1, 192, 1, 1)
    pools = [n for n in g.nodes if n.op_type == "AveragePool"]
    assert [n.name for n in pools] == [f"features.transition{i}.pool" for i in (1, 2, 3)]
    assert all(n.attributes["kernel_shape"] == [2, 2] for n in pools)
    # The documented minimum is tight: at 29 the last transition pools a 2x2 map.
    g = _graph("densenet121", 29)
    assert g.values[g.node("features.transition3.pool").inputs[0]].shape[-2:] == (2, 2)


def test_inception_v3_blocks() -> None:
    g = _graph("inception_v3", 75)
    mixed = [n.name for n in g.nodes if n.name.startswith("Mixed_") and n.name.count(".") == 1]
    mixed = [n for n in mixed if n.endswith(".concat")]
    channels = [g.values[g.node(n).outputs[0]].shape[1] for n in mixed]
    assert channels == [256, 288, 288, 768, 768, 768, 768, 768, 1280, 2048, 2048]
    # Factorised 7x7 convs: 6 per InceptionC, 2 in InceptionD; 1x3/3x1 pairs in InceptionE.
    assert len(_convs(g, kernel_shape=[1, 7])) + len(_convs(g, kernel_shape=[7, 1])) == 26
    assert len(_convs(g, kernel_shape=[1, 3])) == len(_convs(g, kernel_shape=[3, 1])) == 4
    pools = [n for n in g.nodes if n.op_type == "AveragePool"]
    assert {n.attributes["count_include_pad"] for n in pools} == {1}  # as F.avg_pool2d
    # The documented minimum (75) is tight: Mixed_7a's 3x3/2 convs see a 3x3 map.
    assert g.values[g.node("Mixed_7a.branch_pool").inputs[0]].shape[-2:] == (3, 3)
    assert g.values["output"].shape == (1, 1000)


def test_synthetic_large_is_a_long_chain_of_fork_join_blocks() -> None:
    from partuner.graph.zoo_synthetic import SYNTHETIC_LARGE_BLOCKS, synthetic_large_plan

    g = _graph(LARGE, SMALL)
    assert len(g.compute_nodes) >= 1000
    plan = synthetic_large_plan()
    assert len(plan) == SYNTHETIC_LARGE_BLOCKS == 80
    assert {len(b) for b in plan} == {2, 3, 4}
    assert {len(br) for b in plan for br in b} == {1, 2, 3, 4}
    concats = [n for n in g.nodes if n.op_type == "Concat"]
    assert [len(n.inputs) for n in concats] == [len(b) for b in plan]
    # Small convs: at most 16 channels, on an S/4 map.
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert max(g.values[n.outputs[0]].shape[1] for n in convs) == 16
    assert g.values["block0.add_output"].shape == (1, 8, SMALL // 4, SMALL // 4)
