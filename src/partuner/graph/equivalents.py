"""Nodes a unit can run although their op type is not in its ``ops`` list: written as one that is.

An accelerator's compiler accepts a fixed operator list, and that list usually holds
``BatchNormalization`` but not the general element-wise ``Mul`` and ``Add``. Exporters write an
inference batch norm that no convolution precedes as a ``Mul`` and an ``Add`` by per-channel
constants (tf2onnx; DenseNet's pre-activation norms), and a plain per-channel scale or shift is
common too. Each such node *is* a batch norm of the values it reads: ``x * c`` is
``BatchNormalization(x, scale=c, B=0, mean=0, var=1, epsilon=0)`` and ``x + c`` is the same with
``scale=1, B=c``: the same values (``(x - 0) / sqrt(1 + 0) * c + 0``), though a backend may
fuse the two forms with their neighbours differently and so round differently.

- :func:`runs_as` says which op type (if any) a node of a loaded graph can be written as; a
  unit whose ``ops`` hold that type runs the node (:meth:`partuner.units.Unit.supports`);
- :func:`rewrite_for_ops` writes every such node of a model that ``ops`` lacks as its
  equivalent, keeping the node's name and output, so that what a unit is given to compile (a
  profiled sub-model, a plan's partition) and what ``partuner export`` writes for it holds only
  op types the unit lists. Models without such nodes come back unchanged (the same object).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

    from partuner.graph.model import ModelGraph, NodeInfo

__all__ = ["AS_BATCHNORM", "channel_broadcast", "rewrite_for_ops", "runs_as"]

AS_BATCHNORM = "BatchNormalization"
#: the element-wise ops written as a batch norm, with the batch norm's (scale, B) of constant c
_AFFINE = ("Mul", "Add")
_FLOATS = ("float32", "float16", "float64")
#: BatchNormalization as it is from opset 9 on (earlier ones carry 'spatial', 'is_test')
MIN_OPSET = 9


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def channel_broadcast(data: Sequence[int], const: Sequence[int]) -> bool:
    """Whether a constant of shape ``const`` broadcasts over values of shape ``data``
    (``N x C x ...``, rank >= 2) per channel or as one scalar, leaving the shape as it is."""
    if len(data) < 2 or len(const) > len(data):
        return False
    padded = (1,) * (len(data) - len(const)) + tuple(const)
    return padded[0] == 1 and padded[1] in (1, data[1]) and all(d == 1 for d in padded[2:])


def runs_as(graph: ModelGraph, node: NodeInfo) -> str | None:
    """The op type ``node`` can be written as (:data:`AS_BATCHNORM`), or None.

    A ``Mul`` or ``Add`` of a float value of rank >= 2 and one constant (an initializer, also
    one listed among the graph inputs as partuner reads those: a weight, or a ``Constant``
    node's output) per channel or scalar, its output shaped as its input, in a model of opset 9
    or later.
    """
    if node.op_type not in _AFFINE or node.domain not in ("", "ai.onnx"):
        return None
    if _opset(graph.model) < MIN_OPSET:
        return None
    if len(node.inputs) != 2 or len(node.outputs) != 1 or not all(node.inputs):
        return None
    const = [v for v in node.inputs if _is_constant(graph, v)]
    if len(const) != 1 or node.inputs[0] == node.inputs[1]:
        return None
    data = node.inputs[1] if node.inputs[0] == const[0] else node.inputs[0]
    x, c, y = graph.values[data], graph.values[const[0]], graph.values[node.outputs[0]]
    if x.dtype not in _FLOATS or c.dtype != x.dtype or y.shape != x.shape:
        return None
    return AS_BATCHNORM if channel_broadcast(x.shape, c.shape) else None


def _is_constant(graph: ModelGraph, value: str) -> bool:
    """An initializer or a ``Constant`` node's output (what :func:`rewrite_for_ops` reads)."""
    v = graph.values[value]
    if v.is_initializer:
        return True
    return v.producer is not None and graph.node(v.producer).op_type == "Constant"


def rewrite_for_ops(model: onnx.ModelProto, ops: Collection[str] | None) -> onnx.ModelProto:
    """``model`` with every node whose op type ``ops`` lacks, and that :func:`runs_as` an op
    type ``ops`` holds, written as that op (a new model; ``model`` itself if there is none).

    ``ops=None`` (a unit that runs every op) returns ``model``. Constants are read from the
    model's initializers and ``Constant`` nodes; shapes from its value infos (inferred where
    missing).
    """
    if ops is None or AS_BATCHNORM not in ops:
        return model
    if not any(n.op_type in _AFFINE and n.op_type not in ops for n in model.graph.node):
        return model
    if _opset(model) < MIN_OPSET:
        return model
    import onnx
    from onnx import numpy_helper

    g = model.graph
    # only the constants a candidate reads are decoded (a whole model's weights are not)
    wanted = {v for n in g.node if n.op_type in _AFFINE and n.op_type not in ops for v in n.input}
    consts: dict[str, np.ndarray] = {
        t.name: numpy_helper.to_array(t) for t in g.initializer if t.name in wanted
    }
    for n in g.node:
        if n.op_type == "Constant" and len(n.output) == 1 and n.output[0] in wanted:
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            if value is not None:
                consts[n.output[0]] = numpy_helper.to_array(value)
    shapes = _shapes(model)
    taken = {t.name for t in g.initializer} | {v for n in g.node for v in (*n.input, *n.output)}
    taken |= {i.name for i in g.input}
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    dropped: set[str] = set()  # constants rewritten nodes no longer read
    changed = False
    for n in g.node:
        bn = None
        if n.op_type in _AFFINE and n.op_type not in ops and n.domain in ("", "ai.onnx"):
            bn = _as_batchnorm(n, consts, shapes, taken)
        if bn is None:
            new_nodes.append(n)
            continue
        node, inits = bn
        new_nodes.append(node)
        new_inits.extend(inits)
        dropped.update(v for v in n.input if v not in node.input)
        changed = True
    if not changed:
        return model
    # the constants only rewritten nodes read go (as an exporter would leave no stray weight)
    read = {v for n in new_nodes for v in n.input}
    read |= {o.name for o in g.output} | {i.name for i in g.input}  # a listed input stays
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    kept = [t for t in out.graph.initializer if t.name in read or t.name not in dropped]
    del out.graph.initializer[:]
    out.graph.initializer.extend([*kept, *new_inits])
    return out


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], int]]:
    """value -> (static shape, ONNX element type), for values whose shape is fully known."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - a model shape inference fails on: what is declared
        inferred = model
    g = inferred.graph
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        if all(d >= 0 for d in dims):
            out[vi.name] = (dims, t.elem_type)
    for init in g.initializer:
        out[init.name] = (tuple(init.dims), init.data_type)
    return out


def _as_batchnorm(
    node: onnx.NodeProto,
    consts: dict[str, np.ndarray],
    shapes: dict[str, tuple[tuple[int, ...], int]],
    taken: set[str],
) -> tuple[onnx.NodeProto, list[onnx.TensorProto]] | None:
    from onnx import helper, numpy_helper

    if len(node.input) != 2 or len(node.output) != 1 or node.input[0] == node.input[1]:
        return None
    known = [v for v in node.input if v in consts]
    if len(known) != 1:
        return None
    data = node.input[1] if node.input[0] == known[0] else node.input[0]
    if data not in shapes or node.output[0] not in shapes:
        return None
    (xs, xt), (ys, _) = shapes[data], shapes[node.output[0]]
    c = consts[known[0]]
    dtype = helper.tensor_dtype_to_np_dtype(xt)
    if c.dtype != dtype or dtype.kind != "f" or ys != xs or not channel_broadcast(xs, c.shape):
        return None
    channels = xs[1]
    flat = np.broadcast_to(c.reshape(-1), (channels,)).astype(dtype)
    ones, zeros = np.ones(channels, dtype), np.zeros(channels, dtype)
    scale, shift = (flat, zeros) if node.op_type == "Mul" else (ones, flat)
    names = []
    inits = []
    for part, arr in (("scale", scale), ("B", shift), ("mean", zeros), ("var", ones)):
        name = _fresh(f"{node.name or node.output[0]}.as_bn.{part}", taken)
        names.append(name)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
    bn = helper.make_node(
        AS_BATCHNORM, [data, *names], list(node.output), name=node.name, epsilon=0.0
    )
    return bn, inits


def _fresh(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        i += 1
        out = f"{name}.{i}"
    taken.add(out)
    return out
