"""Demo ONNX models built in memory: torchvision-shaped networks with seeded random weights.

Each model is built with ``onnx.helper`` (no torch, no downloads), as an inference export would
look: BatchNorm is folded into the preceding Conv (Conv with bias, then Relu), opset 17, IR
version 9, float32, one input ``input`` of shape ``(1, 3, S, S)`` and one output ``output``.
Weights are drawn from ``numpy.random.default_rng(seed)`` with He-style scales, so the same name,
size and seed always give the same bytes, and activations stay finite.

===========  ===========================================================  ==========  ========
name         structure                                                    output      min S
===========  ===========================================================  ==========  ========
squeezenet   squeezenet1_1: conv, 3 ceil-mode maxpools, 8 fire modules    (1, 1000)   17
             (squeeze 1x1, expand 1x1 || expand 3x3, Concat), conv head
googlenet    googlenet: stem convs, 4 ceil-mode maxpools, 9 inception     (1, 1000)   15
             blocks (1x1 || 1x1->3x3 || 1x1->3x3 || maxpool->1x1), fc
resnet18     resnet18: 8 BasicBlocks with Add shortcuts, 1x1 downsample   (1, 1000)   1
             conv on the 3 stride-2 blocks, fc
branchy      small synthetic model: 32 nodes, 4 parallel branch groups    (1, 10)     3
             of 2-3 branches of different lengths; < 1 ms at S=32
===========  ===========================================================  ==========  ========

"min S" is the smallest ``image_size`` the model runs at (smaller sizes raise
:class:`~partuner.errors.InputShapeError`).

Examples
--------
>>> model = build("branchy", image_size=32)
>>> len(model.graph.node), model.graph.input[0].name, model.graph.output[0].name
(32, 'input', 'output')
"""

from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from partuner.errors import InputShapeError, InvalidModelError

__all__ = ["MIN_IMAGE_SIZE", "NAMES", "OUTPUT_SHAPES", "build", "save"]

NAMES: tuple[str, ...] = ("squeezenet", "googlenet", "resnet18", "branchy")
MIN_IMAGE_SIZE: dict[str, int] = {"squeezenet": 17, "googlenet": 15, "resnet18": 1, "branchy": 3}
OUTPUT_SHAPES: dict[str, tuple[int, int]] = {
    "squeezenet": (1, 1000),
    "googlenet": (1, 1000),
    "resnet18": (1, 1000),
    "branchy": (1, 10),
}
OPSET = 17
IR_VERSION = 9


class _Builder:
    """Appends nodes and seeded initializers; every method returns its output value's name."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def _node(
        self, op: str, name: str, inputs: list[str], out: str | None = None, **attrs: object
    ) -> str:
        out = out or f"{name}_output"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def _param(self, name: str, shape: tuple[int, ...], std: float) -> str:
        data = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def conv(
        self,
        name: str,
        x: str,
        cin: int,
        cout: int,
        k: int,
        *,
        stride: int = 1,
        pad: int = 0,
        gain: float = 2.0,
    ) -> str:
        """Conv with bias (a Conv+BatchNorm pair after folding); He init ``sqrt(gain/fan_in)``."""
        w = self._param(f"{name}.weight", (cout, cin, k, k), (gain / (cin * k * k)) ** 0.5)
        b = self._param(f"{name}.bias", (cout,), 0.01)
        return self._node(
            "Conv",
            name,
            [x, w, b],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            dilations=[1, 1],
            group=1,
        )

    def relu(self, name: str, x: str) -> str:
        return self._node("Relu", name, [x])

    def conv_relu(self, name: str, x: str, cin: int, cout: int, k: int, **kw: Any) -> str:
        return self.relu(f"{name}.relu", self.conv(f"{name}.conv", x, cin, cout, k, **kw))

    def maxpool(
        self, name: str, x: str, k: int, stride: int, *, pad: int = 0, ceil: bool = False
    ) -> str:
        return self._node(
            "MaxPool",
            name,
            [x],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            ceil_mode=int(ceil),
        )

    def avgpool(self, name: str, x: str, k: int, stride: int, *, pad: int = 0) -> str:
        return self._node(
            "AveragePool",
            name,
            [x],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            count_include_pad=0,
        )

    def concat(self, name: str, xs: list[str]) -> str:
        return self._node("Concat", name, xs, axis=1)

    def add(self, name: str, a: str, b: str) -> str:
        return self._node("Add", name, [a, b])

    def head(self, x: str, *, fc: tuple[int, int] | None, prefix: str = "") -> str:
        """GlobalAveragePool, Flatten and (when ``fc=(in, out)``) a Gemm writing ``output``."""
        x = self._node("GlobalAveragePool", f"{prefix}avgpool", [x])
        if fc is None:
            return self._node("Flatten", "flatten", [x], out="output", axis=1)
        x = self._node("Flatten", "flatten", [x], axis=1)
        fin, fout = fc
        w = self._param("fc.weight", (fout, fin), (1.0 / fin) ** 0.5)
        b = self._param("fc.bias", (fout,), 0.01)
        return self._node("Gemm", "fc", [x, w, b], out="output", transB=1)

    def model(self, graph_name: str, image_size: int, out_dim: int) -> onnx.ModelProto:
        x = helper.make_tensor_value_info(
            "input", TensorProto.FLOAT, [1, 3, image_size, image_size]
        )
        y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, out_dim])
        graph = helper.make_graph(self.nodes, graph_name, [x], [y], initializer=self.inits)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="partuner.zoo"
        )
        model.ir_version = IR_VERSION
        return model


def _squeezenet(b: _Builder) -> str:
    """torchvision ``squeezenet1_1`` (dropout dropped, as in an inference export)."""

    def fire(i: int, x: str, cin: int, squeeze: int, e1: int, e3: int) -> str:
        p = f"features.{i}"
        s = b.relu(f"{p}.squeeze_activation", b.conv(f"{p}.squeeze", x, cin, squeeze, 1))
        a = b.relu(f"{p}.expand1x1_activation", b.conv(f"{p}.expand1x1", s, squeeze, e1, 1))
        c = b.relu(f"{p}.expand3x3_activation", b.conv(f"{p}.expand3x3", s, squeeze, e3, 3, pad=1))
        return b.concat(f"{p}.concat", [a, c])

    x = b.relu("features.1", b.conv("features.0", "input", 3, 64, 3, stride=2))
    x = b.maxpool("features.2", x, 3, 2, ceil=True)
    x = fire(3, x, 64, 16, 64, 64)
    x = fire(4, x, 128, 16, 64, 64)
    x = b.maxpool("features.5", x, 3, 2, ceil=True)
    x = fire(6, x, 128, 32, 128, 128)
    x = fire(7, x, 256, 32, 128, 128)
    x = b.maxpool("features.8", x, 3, 2, ceil=True)
    x = fire(9, x, 256, 48, 192, 192)
    x = fire(10, x, 384, 48, 192, 192)
    x = fire(11, x, 384, 64, 256, 256)
    x = fire(12, x, 512, 64, 256, 256)
    x = b.relu("classifier.2", b.conv("classifier.1", x, 512, 1000, 1))
    return b.head(x, fc=None, prefix="classifier.3.")


# googlenet inception blocks: (name, in, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj)
_INCEPTION = {
    "3a": (192, 64, 96, 128, 16, 32, 32),
    "3b": (256, 128, 128, 192, 32, 96, 64),
    "4a": (480, 192, 96, 208, 16, 48, 64),
    "4b": (512, 160, 112, 224, 24, 64, 64),
    "4c": (512, 128, 128, 256, 24, 64, 64),
    "4d": (512, 112, 144, 288, 32, 64, 64),
    "4e": (528, 256, 160, 320, 32, 128, 128),
    "5a": (832, 256, 160, 320, 32, 128, 128),
    "5b": (832, 384, 192, 384, 48, 128, 128),
}


def _googlenet(b: _Builder) -> str:
    """torchvision ``googlenet`` (no aux heads, no transform_input; the 5x5 branch is 3x3)."""

    def inception(tag: str, x: str) -> str:
        cin, c1, c3r, c3, c5r, c5, pp = _INCEPTION[tag]
        p = f"inception{tag}"
        y1 = b.conv_relu(f"{p}.branch1", x, cin, c1, 1)
        y2 = b.conv_relu(f"{p}.branch2.0", x, cin, c3r, 1)
        y2 = b.conv_relu(f"{p}.branch2.1", y2, c3r, c3, 3, pad=1)
        y3 = b.conv_relu(f"{p}.branch3.0", x, cin, c5r, 1)
        y3 = b.conv_relu(f"{p}.branch3.1", y3, c5r, c5, 3, pad=1)
        y4 = b.maxpool(f"{p}.branch4.0", x, 3, 1, pad=1, ceil=True)
        y4 = b.conv_relu(f"{p}.branch4.1", y4, cin, pp, 1)
        return b.concat(f"{p}.concat", [y1, y2, y3, y4])

    x = b.conv_relu("conv1", "input", 3, 64, 7, stride=2, pad=3)
    x = b.maxpool("maxpool1", x, 3, 2, ceil=True)
    x = b.conv_relu("conv2", x, 64, 64, 1)
    x = b.conv_relu("conv3", x, 64, 192, 3, pad=1)
    x = b.maxpool("maxpool2", x, 3, 2, ceil=True)
    x = inception("3b", inception("3a", x))
    x = b.maxpool("maxpool3", x, 3, 2, ceil=True)
    for tag in ("4a", "4b", "4c", "4d", "4e"):
        x = inception(tag, x)
    x = b.maxpool("maxpool4", x, 2, 2, ceil=True)
    x = inception("5b", inception("5a", x))
    return b.head(x, fc=(1024, 1000))


def _resnet18(b: _Builder) -> str:
    """torchvision ``resnet18``: BasicBlocks, a 1x1 stride-2 downsample conv where shapes change."""

    def block(p: str, x: str, cin: int, cout: int, stride: int) -> str:
        y = b.relu(f"{p}.relu", b.conv(f"{p}.conv1", x, cin, cout, 3, stride=stride, pad=1))
        # The residual branch's last conv gets half the He gain so the Add keeps activations tame.
        y = b.conv(f"{p}.conv2", y, cout, cout, 3, pad=1, gain=1.0)
        if stride != 1 or cin != cout:
            x = b.conv(f"{p}.downsample.0", x, cin, cout, 1, stride=stride, gain=1.0)
        return b.relu(f"{p}.relu_1", b.add(f"{p}.add", y, x))

    x = b.relu("relu", b.conv("conv1", "input", 3, 64, 7, stride=2, pad=3))
    x = b.maxpool("maxpool", x, 3, 2, pad=1)
    cin = 64
    for layer, cout in enumerate((64, 128, 256, 512), start=1):
        for i in range(2):
            stride = 2 if (i == 0 and layer > 1) else 1
            x = block(f"layer{layer}.{i}", x, cin, cout, stride)
            cin = cout
    return b.head(x, fc=(512, 1000))


def _branchy(b: _Builder) -> str:
    """A small synthetic network with 4 parallel branch groups of 2-3 branches each.

    Groups (fork -> join): input -> stem.concat (2 branches: 2, 2 nodes), stem.concat ->
    a.concat (3 branches: 2, 3, 3 nodes), a.concat -> b.add (2 branches: 2, 3 nodes), pool ->
    c.concat (3 branches: 2, 3, 1 nodes).
    """
    s1 = b.conv_relu("stem.s1", "input", 3, 8, 3, stride=2, pad=1)
    s2 = b.conv_relu("stem.s2", "input", 3, 8, 1, stride=2)
    x = b.concat("stem.concat", [s1, s2])  # 16 channels, S/2
    a1 = b.conv_relu("a.b1", x, 16, 8, 1)
    a2 = b.conv("a.b2.conv2", b.conv_relu("a.b2.0", x, 16, 8, 3, pad=1), 8, 8, 3, pad=1, gain=1.0)
    a3 = b.conv_relu("a.b3.1", b.maxpool("a.b3.pool", x, 3, 1, pad=1), 16, 8, 1)
    x = b.concat("a.concat", [a1, a2, a3])  # 24 channels
    b1 = b.conv_relu("b.b1", x, 24, 24, 1, gain=1.0)
    b2 = b.conv(
        "b.b2.conv2", b.conv_relu("b.b2.0", x, 24, 24, 3, pad=1), 24, 24, 3, pad=1, gain=1.0
    )
    x = b.relu("b.relu", b.add("b.add", b1, b2))
    x = b.maxpool("pool", x, 2, 2)  # S/4
    c1 = b.conv_relu("c.b1", x, 24, 16, 1)
    c2 = b.conv("c.b2.conv2", b.conv_relu("c.b2.0", x, 24, 16, 3, pad=1), 16, 16, 3, pad=1)
    c3 = b.avgpool("c.b3.pool", x, 3, 1, pad=1)
    x = b.concat("c.concat", [c1, c2, c3])  # 16 + 16 + 24 = 56 channels
    return b.head(x, fc=(56, 10))


_BUILDERS = {
    "squeezenet": _squeezenet,
    "googlenet": _googlenet,
    "resnet18": _resnet18,
    "branchy": _branchy,
}


def build(name: str, *, image_size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """Build the zoo model ``name`` for ``(1, 3, image_size, image_size)`` inputs.

    Parameters
    ----------
    name : one of :data:`NAMES`.
    image_size : the input's height and width; at least ``MIN_IMAGE_SIZE[name]``.
    seed : seeds the weights; the same arguments always give the same model bytes.

    Returns
    -------
    onnx.ModelProto : checked with ``onnx.checker.check_model(full_check=True)``.

    Raises
    ------
    InvalidModelError : ``name`` is not a zoo model.
    InputShapeError : ``image_size`` is below the model's minimum.
    """
    if name not in _BUILDERS:
        raise InvalidModelError(f"unknown zoo model {name!r}; known: {list(NAMES)}")
    if int(image_size) < MIN_IMAGE_SIZE[name]:
        raise InputShapeError(
            f"image_size {image_size} is too small for zoo model {name!r}; use "
            f">= {MIN_IMAGE_SIZE[name]}"
        )
    b = _Builder(seed)
    _BUILDERS[name](b)
    model = b.model(name, int(image_size), OUTPUT_SHAPES[name][1])
    onnx.checker.check_model(model, full_check=True)
    return model


def save(name: str, path: str | Path, **kw: int) -> Path:
    """Build the zoo model ``name`` (``kw`` as for :func:`build`) and write it to ``path``.

    A path ending in ``.gz`` is gzip-compressed. The file is written to a temporary file in the
    same folder and moved into place, so readers never see a half-written model.
    """
    p = Path(path)
    data = build(name, **kw).SerializeToString()
    if p.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
