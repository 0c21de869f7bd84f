"""Per-node cost estimates: floating-point operations from op type, attributes and shapes.

A multiply-add counts as two FLOPs. Data-movement ops (Concat, Reshape, Transpose, ...) count zero;
their cost shows in the bytes they touch, which the modeled units charge separately.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["node_flops", "ELEMENTWISE_OPS"]

ELEMENTWISE_OPS = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Sigmoid",
        "Tanh",
        "Clip",
        "HardSigmoid",
        "HardSwish",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Sqrt",
        "Exp",
        "Log",
        "Neg",
        "Abs",
        "Erf",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "Elu",
        "Selu",
        "Softplus",
        "Gelu",
        "Where",
        "Equal",
        "Less",
        "Greater",
        "Not",
        "And",
        "Or",
        "Cast",
        "Reciprocal",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
    }
)


def _prod(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims)


def node_flops(
    op_type: str,
    attributes: Mapping[str, object],
    input_shapes: Sequence[tuple[int, ...] | None],
    output_shapes: Sequence[tuple[int, ...] | None],
) -> int:
    """Estimate the floating-point operations of one ONNX node.

    Parameters
    ----------
    op_type : the ONNX operator type, e.g. ``"Conv"``.
    attributes : the node's attributes as plain Python values.
    input_shapes, output_shapes : static shapes, ``None`` for an absent optional input.

    Returns
    -------
    int : the estimate; 0 for ops that only move data or are unknown.

    Examples
    --------
    >>> node_flops("Conv", {"group": 1}, [(1, 3, 8, 8), (16, 3, 3, 3)], [(1, 16, 8, 8)])
    55296
    >>> node_flops("Relu", {}, [(1, 16, 8, 8)], [(1, 16, 8, 8)])
    1024
    >>> node_flops("Gemm", {}, [(1, 512), (1000, 512)], [(1, 1000)])
    1024000
    >>> node_flops("LSTM", {}, [(20, 1, 32), (1, 256, 32), (1, 256, 64)], [(20, 1, 1, 64)])
    983040
    """
    out = output_shapes[0] if output_shapes else None
    ins = list(input_shapes)
    if out is None:
        return 0
    out_elems = _prod(out)
    if op_type == "Conv" and len(ins) >= 2 and ins[1] is not None:
        w = ins[1]  # (Cout, Cin/group, kH, kW...)
        return 2 * out_elems * _prod(w[1:])
    if op_type == "ConvTranspose" and len(ins) >= 2 and ins[0] is not None and ins[1] is not None:
        w = ins[1]  # (Cin, Cout/group, kH, kW...)
        return 2 * _prod(ins[0]) * _prod(w[1:])
    if op_type == "Gemm" and len(ins) >= 2 and ins[0] is not None:
        a = ins[0]
        k = a[0] if attributes.get("transA", 0) else a[-1]
        return 2 * out_elems * int(k)
    if op_type == "MatMul" and ins and ins[0] is not None:
        return 2 * out_elems * int(ins[0][-1])
    if op_type in ("LSTM", "GRU", "RNN") and len(ins) >= 3 and None not in ins[:3]:
        x, w, r = ins[:3]  # x: (seq, batch, in) or (batch, seq, in); w, r: (dirs, gates*H, .)
        return 2 * int(x[0]) * int(x[1]) * (_prod(w) + _prod(r))
    if op_type in ("MaxPool", "AveragePool", "LpPool"):
        kernel = attributes.get("kernel_shape") or [1]
        return out_elems * _prod(kernel)  # type: ignore[arg-type]
    if op_type in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return _prod(ins[0]) if ins and ins[0] is not None else out_elems
    if op_type == "BatchNormalization":
        return 2 * out_elems
    if op_type in ("Softmax", "LogSoftmax"):
        return 3 * out_elems
    if op_type == "LRN":
        return out_elems * (int(attributes.get("size", 1)) + 3)  # type: ignore[arg-type]
    if op_type in ELEMENTWISE_OPS:
        return out_elems
    return 0
