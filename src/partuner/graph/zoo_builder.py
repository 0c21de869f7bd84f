"""The graph builder behind the demo zoo (:mod:`partuner.graph.zoo`): nodes + seeded weights.

Every method appends one or a few nodes and returns the name of the value it produces. Weights
are drawn from ``numpy.random.default_rng(seed)`` in the order the layers are added, so a model
is a pure function of its builder calls, its image size and its seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["IR_VERSION", "OPSET", "Builder", "conv_out"]

OPSET = 17
IR_VERSION = 9


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv_out(size: int, k: int, stride: int = 1, pad: int = 0) -> int:
    """Output height of a Conv/pool with kernel ``k`` on a ``size``-high input (floor mode)."""
    return (size + 2 * pad - k) // stride + 1


class Builder:
    """Appends nodes and seeded initializers; every method returns its output value's name.

    ``image_size`` is the input's height and width: builders that need fixed shapes (a Reshape's
    target) read it.
    """

    def __init__(self, seed: int, image_size: int = 224) -> None:
        self.rng = np.random.default_rng(seed)
        self.image_size = int(image_size)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._consts: set[str] = set()

    def _node(
        self, op: str, name: str, inputs: list[str], out: str | None = None, **attrs: object
    ) -> str:
        out = out or f"{name}_output"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def _param(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        data = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        if mean:
            data += np.float32(mean)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        """A fixed (not random) initializer, added once however often it is asked for."""
        if name not in self._consts:
            self._consts.add(name)
            self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def conv(
        self,
        name: str,
        x: str,
        cin: int,
        cout: int,
        k: int | tuple[int, int],
        *,
        stride: int = 1,
        pad: int | tuple[int, int] = 0,
        group: int = 1,
        bias: bool = True,
        gain: float = 2.0,
    ) -> str:
        """Conv with bias (a Conv+BatchNorm pair after folding); He init ``sqrt(gain/fan_in)``.

        ``k`` and ``pad`` are ``(height, width)`` pairs or one int for both; ``group=cin`` makes a
        depthwise conv. ``bias=False`` is a conv that no BatchNorm follows (DenseNet).
        """
        kh, kw = _pair(k)
        ph, pw = _pair(pad)
        fan_in = cin // group * kh * kw
        w = self._param(f"{name}.weight", (cout, cin // group, kh, kw), (gain / fan_in) ** 0.5)
        inputs = [x, w]
        if bias:
            inputs.append(self._param(f"{name}.bias", (cout,), 0.01))
        return self._node(
            "Conv",
            name,
            inputs,
            kernel_shape=[kh, kw],
            strides=[stride, stride],
            pads=[ph, pw, ph, pw],
            dilations=[1, 1],
            group=group,
        )

    def relu(self, name: str, x: str) -> str:
        return self._node("Relu", name, [x])

    def relu6(self, name: str, x: str) -> str:
        """``Clip(x, 0, 6)``, as torch exports ReLU6; the bounds are two shared scalars."""
        lo = self.const("relu6.min", np.array(0.0, np.float32))
        hi = self.const("relu6.max", np.array(6.0, np.float32))
        return self._node("Clip", name, [x, lo, hi])

    def conv_relu(
        self, name: str, x: str, cin: int, cout: int, k: int | tuple[int, int], **kw: Any
    ) -> str:
        return self.relu(f"{name}.relu", self.conv(f"{name}.conv", x, cin, cout, k, **kw))

    def scale_shift(self, name: str, x: str, c: int) -> str:
        """An inference BatchNorm that no conv precedes: ``x * weight + bias`` per channel.

        Two nodes (Mul, Add) and ``2 * c`` parameters, as torch's BatchNorm2d has; the scale is
        drawn near 1 and the shift near 0.
        """
        w = self._param(f"{name}.weight", (1, c, 1, 1), 0.1, mean=1.0)
        b = self._param(f"{name}.bias", (1, c, 1, 1), 0.01)
        return self._node("Add", f"{name}.add", [self._node("Mul", f"{name}.mul", [x, w]), b])

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

    def avgpool(
        self, name: str, x: str, k: int, stride: int, *, pad: int = 0, include_pad: bool = False
    ) -> str:
        return self._node(
            "AveragePool",
            name,
            [x],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            count_include_pad=int(include_pad),
        )

    def concat(self, name: str, xs: list[str]) -> str:
        return self._node("Concat", name, xs, axis=1)

    def add(self, name: str, a: str, b: str) -> str:
        return self._node("Add", name, [a, b])

    def split2(self, name: str, x: str) -> tuple[str, str]:
        """Split the channels in two equal halves (torch's ``x.chunk(2, dim=1)``)."""
        outs = [f"{name}_output_0", f"{name}_output_1"]
        self.nodes.append(helper.make_node("Split", [x], outs, name=name, axis=1))
        return outs[0], outs[1]

    def reshape(self, name: str, x: str, shape: tuple[int, ...]) -> str:
        s = self.const(f"{name}.shape", np.array(shape, np.int64))
        return self._node("Reshape", name, [x, s])

    def transpose(self, name: str, x: str, perm: list[int]) -> str:
        return self._node("Transpose", name, [x], perm=perm)

    def mean(self, name: str, x: str) -> str:
        """The spatial mean ``x.mean([2, 3])``: a ReduceMean without kept dims."""
        return self._node("ReduceMean", name, [x], axes=[2, 3], keepdims=0)

    def fc(self, x: str, fin: int, fout: int) -> str:
        """The classifier: a Gemm named ``fc`` writing ``output``."""
        w = self._param("fc.weight", (fout, fin), (1.0 / fin) ** 0.5)
        b = self._param("fc.bias", (fout,), 0.01)
        return self._node("Gemm", "fc", [x, w, b], out="output", transB=1)

    def head(self, x: str, *, fc: tuple[int, int] | None, prefix: str = "") -> str:
        """GlobalAveragePool, Flatten and (when ``fc=(in, out)``) a Gemm writing ``output``."""
        x = self._node("GlobalAveragePool", f"{prefix}avgpool", [x])
        if fc is None:
            return self._node("Flatten", "flatten", [x], out="output", axis=1)
        x = self._node("Flatten", "flatten", [x], axis=1)
        return self.fc(x, *fc)

    def model(self, graph_name: str, out_dim: int) -> onnx.ModelProto:
        s = self.image_size
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, s, s])
        y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, out_dim])
        graph = helper.make_graph(self.nodes, graph_name, [x], [y], initializer=self.inits)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="partuner.zoo"
        )
        model.ir_version = IR_VERSION
        return model
