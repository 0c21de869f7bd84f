"""Operator signatures: a stable key per node that does not depend on node or value names.

Two nodes with equal signatures cost the same on a unit, so they share one measurement, within a
model and across models. The key holds the op type, domain, every attribute, and the shape and
dtype of each input and output (and whether an input is a weight).
"""

from __future__ import annotations

import hashlib
import json

from partuner.graph import ModelGraph, NodeInfo

__all__ = ["model_digest", "node_signature", "signature_label"]


def node_signature(graph: ModelGraph, node: NodeInfo) -> str:
    """A stable key for ``node``'s cost: ``<Op>-<dims>-<dtype>#<digest>``.

    The readable part follows NEST-C's style (op type, first input's dims, dtype); the digest
    covers everything that changes the cost.

    Examples
    --------
    >>> import onnx
    >>> from onnx import helper, TensorProto
    >>> from partuner.graph import load_model
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="a")], "g", [x], [y])
    >>> m = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    >>> node_signature(m, m.nodes[0]).split("#")[0]
    'Relu-1-8-float32'
    """
    ins = []
    for v in node.inputs:
        if not v:
            ins.append(None)
            continue
        info = graph.values[v]
        ins.append([list(info.shape), info.dtype, info.is_initializer])
    outs = [[list(graph.values[v].shape), graph.values[v].dtype] for v in node.outputs if v]
    payload = json.dumps(
        {
            "op": node.op_type,
            "domain": node.domain,
            "attrs": {k: node.attributes[k] for k in sorted(node.attributes)},
            "in": ins,
            "out": outs,
        },
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha1(payload.encode()).hexdigest()[:12]
    return f"{signature_label(graph, node)}#{digest}"


def signature_label(graph: ModelGraph, node: NodeInfo) -> str:
    """The readable part of a signature: op type, first input's dims and dtype."""
    first = next((v for v in node.inputs if v), None)
    if first is None:
        return node.op_type
    info = graph.values[first]
    dims = "-".join(str(d) for d in info.shape)
    return f"{node.op_type}-{dims}-{info.dtype}" if dims else f"{node.op_type}-{info.dtype}"


def model_digest(graph: ModelGraph) -> str:
    """A short digest of ``graph``'s structure, shapes and dtypes (not its weights' values):
    what a profile, a kit or a results file is tied to."""
    h = hashlib.sha1()
    for n in graph.nodes:
        h.update(f"{n.op_type}|{n.inputs}|{n.outputs}|{sorted(n.attributes.items())}".encode())
    for v in sorted(graph.values.values(), key=lambda v: v.name):
        h.update(f"{v.name}|{v.shape}|{v.dtype}".encode())
    return h.hexdigest()[:16]
