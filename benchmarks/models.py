"""Benchmark-only models built with onnx.helper (no downloads, seeded weights).

``mobilenetv2(image_size, width)``: torchvision's MobileNetV2 layout as an inference export looks
(BatchNorm folded into Conv biases, ReLU6 as ``Clip(0, 6)``): a stride-2 stem conv, 17 inverted
residual blocks (1x1 expand by 6, 3x3 depthwise, 1x1 linear projection, an ``Add`` shortcut when
the shape allows), a 1x1 conv to 1280 channels, global average pool, Flatten and a 1000-way Gemm.
``width`` scales the channel counts (1.0 = the real network). Input ``input`` of shape
``(1, 3, S, S)``, output ``output`` ``(1, 1000)``; the batch dimension is 1 like the zoo's.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["mobilenetv2"]

# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper
_BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip


def _ch(c: float) -> int:
    """Round channels to a multiple of 8, as torchvision's ``_make_divisible``."""
    return max(8, int(c + 4) // 8 * 8)


class _Net:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = [
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "relu6.min"),
            numpy_helper.from_array(np.array(6.0, dtype=np.float32), "relu6.max"),
        ]

    def param(self, name: str, shape: tuple[int, ...], std: float) -> str:
        arr = (self.rng.standard_normal(shape) * std).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def conv(self, name: str, x: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1, relu6: bool = True, gain: float = 2.0) -> str:  # fmt: skip
        fan_in = cin // group * k * k
        w = self.param(f"{name}.weight", (cout, cin // group, k, k), (gain / fan_in) ** 0.5)
        b = self.param(f"{name}.bias", (cout,), 0.01)
        y = f"{name}.out"
        self.nodes.append(
            helper.make_node("Conv", [x, w, b], [y], name=name, kernel_shape=[k, k],
                             strides=[stride, stride], pads=[k // 2] * 4, group=group)
        )  # fmt: skip
        if not relu6:
            return y
        self.nodes.append(
            helper.make_node("Clip", [y, "relu6.min", "relu6.max"], [f"{name}.relu6"],
                             name=f"{name}.relu6")
        )  # fmt: skip
        return f"{name}.relu6"


def mobilenetv2(image_size: int = 224, width: float = 1.0, seed: int = 0) -> onnx.ModelProto:
    """A MobileNetV2-shaped model (see the module docstring); checked with full_check."""
    net = _Net(seed)
    cin = _ch(32 * width)
    x = net.conv("features.0", "input", 3, cin, 3, stride=2)
    i = 1
    for t, c, n, s in _BLOCKS:
        cout = _ch(c * width)
        for r in range(n):
            stride = s if r == 0 else 1
            p, hidden = f"features.{i}", cin * t
            y = x if t == 1 else net.conv(f"{p}.expand", x, cin, hidden, 1)
            y = net.conv(f"{p}.dw", y, hidden, hidden, 3, stride=stride, group=hidden)
            y = net.conv(f"{p}.project", y, hidden, cout, 1, relu6=False, gain=1.0)
            if stride == 1 and cin == cout:
                net.nodes.append(helper.make_node("Add", [x, y], [f"{p}.add"], name=f"{p}.add"))
                y = f"{p}.add"
            x, cin, i = y, cout, i + 1
    last = _ch(1280 * max(width, 1.0))
    x = net.conv(f"features.{i}", x, cin, last, 1)
    net.nodes += [
        helper.make_node("GlobalAveragePool", [x], ["pool"], name="avgpool"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node(
            "Gemm",
            ["flat", net.param("fc.weight", (1000, last), (1.0 / last) ** 0.5),
             net.param("fc.bias", (1000,), 0.01)],
            ["output"], name="classifier", transB=1,
        ),
    ]  # fmt: skip
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, image_size, image_size])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])
    graph = helper.make_graph(net.nodes, "mobilenetv2", [inp], [out], initializer=net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model
