"""Fold the shape computations of a model whose input shapes are fixed.

Exporters such as ``torch.onnx`` compute some shapes at run time: torchvision's ShuffleNet V2
splits channels with ``Shape -> Gather -> Div -> Slice`` and flattens with ``Shape -> Gather ->
Unsqueeze -> Concat -> Reshape``. ONNX shape inference cannot see through the ``Slice``, so the
values after it have no static shape although the input's is static. Once the inputs are fixed,
these sub-graphs compute constants: :func:`fold_shape_computations` replaces them by
initializers, so shape inference then gives every value a static shape.

Only small computations are folded: a ``Shape`` or ``Size`` of a statically shaped value, then
every node of a small, size-bounded arithmetic op whose inputs are all known (shape-derived
values, initializers, ``Constant`` outputs), at least one of them shape-derived or a ``Constant``
node's (torch's ``nn.MultiheadAttention`` computes a head's size with ``Mod`` of two constants,
a ViT's class token is expanded to a shape made by ``ConstantOfShape`` and ``Where``; neither
is something ONNX shape inference sees through). ``ConstantOfShape`` and ``Range`` only where
what they make stays small. Weight-only constant sub-graphs of initializers are left alone
(partuner treats them as constant nodes), the nodes that remain keep their names and order, and
the same model always folds to the same model. Values are computed with ONNX's reference
evaluator (``onnx.reference``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["MAX_FOLD_ELEMENTS", "drop_dead_nodes", "fold_shape_computations"]

log = logging.getLogger(__name__)

# Shape tensors have a handful of elements; nothing larger is read or written by the fold.
MAX_FOLD_ELEMENTS = 1024

# Ops whose output is no larger than their inputs (broadcast aside): safe to evaluate.
_FOLDABLE = frozenset(
    """Abs Add And Cast Ceil Concat Div Equal Flatten Floor Gather Greater GreaterOrEqual
    Identity Less LessOrEqual Max Min Mod Mul Neg Not Or ReduceMax ReduceMin ReduceProd ReduceSum
    Reshape Sign Slice Squeeze Sub Transpose Unsqueeze Where""".split()
)


# Ops whose output may be larger than their inputs: folded only where it stays small.
_GROWING = frozenset({"ConstantOfShape", "Range"})
# Ops that broadcast their inputs (three small ones can make a huge one).
_BROADCAST = frozenset(
    "Add And Div Equal Greater GreaterOrEqual Less LessOrEqual Max Min Mod Mul Or Sub Where".split()
)


def _out_size(node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> float:
    """How many elements ``node`` would make of ``feeds``, told before it runs (inf: cannot
    tell): a model's file must not make the fold allocate more than it keeps."""
    args = [feeds[x] for x in node.input if x]
    try:
        if node.op_type == "ConstantOfShape":
            dims = [int(d) for d in np.ravel(args[0])]
            return math.prod(dims) if all(d >= 0 for d in dims) else math.inf
        if node.op_type == "Range":
            start, limit, delta = (float(np.ravel(a)[0]) for a in args[:3])
            return max(0.0, math.ceil((limit - start) / delta)) if delta else math.inf
        if node.op_type == "Concat":
            return sum(a.size for a in args)
        if node.op_type in _BROADCAST:
            return math.prod(np.broadcast_shapes(*(a.shape for a in args)))
    except (ValueError, TypeError, IndexError, OverflowError):
        return math.inf
    return max((a.size for a in args), default=0) ** 2  # Gather: data x indices at most


def static_dims(t: onnx.TypeProto | None) -> list[int] | None:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims = t.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return [d.dim_value for d in dims]


def _shape_of(node: onnx.NodeProto, dims: list[int]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(math.prod(dims), np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    # Python slicing clamps like ONNX's Shape(start, end) does.
    return np.array(dims[attrs.get("start", 0) : attrs.get("end", len(dims))], np.int64)


def _types_agree(
    node: onnx.NodeProto, results: list[np.ndarray], types: dict[str, onnx.TypeProto]
) -> bool:
    """True unless shape inference gave an output an element type the evaluator did not."""
    for name, r in zip(node.output, results, strict=False):
        want = types[name].tensor_type.elem_type if name in types else 0
        try:
            got = helper.np_dtype_to_tensor_dtype(r.dtype)
        except Exception:  # a dtype ONNX has no tensor type for
            return False
        if want and got != want:
            return False
    return True


def fold_shape_computations(model: onnx.ModelProto) -> int:
    """Replace, in place, the nodes that compute from static shapes by initializers.

    Parameters
    ----------
    model : a shape-inferred model (``value_info`` filled) whose inputs have fixed shapes.

    Returns
    -------
    int : the number of nodes folded (0 when there was nothing to fold; the model is unchanged).
    """
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        return 0
    types = {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}
    inits = {t.name: t for t in g.initializer}
    known: dict[str, np.ndarray] = {}
    derived: set[str] = set()
    constant: set[str] = set()  # outputs of Constant nodes (kept as nodes)
    folded: list[int] = []

    def value(name: str) -> np.ndarray | None:
        if name not in known and name in inits:
            t = inits[name]
            if math.prod(t.dims) <= MAX_FOLD_ELEMENTS and not t.external_data:
                known[name] = numpy_helper.to_array(t)
        return known.get(name)

    for k, node in enumerate(g.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        ins = [x for x in node.input if x]
        if node.op_type in ("Shape", "Size") and len(ins) == 1:
            dims = static_dims(types.get(ins[0]))
            if dims is None and ins[0] in inits:
                dims = list(inits[ins[0]].dims)
            if dims is None:
                continue
            results = [_shape_of(node, dims)]
        elif node.op_type == "Constant" and any(
            a.type == onnx.AttributeProto.TENSOR and math.prod(a.t.dims) > MAX_FOLD_ELEMENTS
            for a in node.attribute
        ):
            continue
        elif node.op_type == "Constant" or (
            (node.op_type in _FOLDABLE or node.op_type in _GROWING)
            and ins
            and any(x in derived or x in constant for x in ins)
        ):
            feeds = {x: value(x) for x in ins}
            if any(v is None or v.size > MAX_FOLD_ELEMENTS for v in feeds.values()):
                continue
            if _out_size(node, feeds) > MAX_FOLD_ELEMENTS**2:
                continue  # what it makes would be too large to keep: not made at all
            try:
                results = ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
            except Exception as exc:  # an op the evaluator cannot run: leave it to the runtime
                log.debug("not folding %s (%s): %s", node.name, node.op_type, exc)
                continue
            results = [np.asarray(r) for r in results]
            if any(r.size > MAX_FOLD_ELEMENTS for r in results) or not _types_agree(
                node, results, types
            ):
                continue
            if node.op_type == "Constant":  # known, but not shape-derived: kept as a node
                known.update(zip(node.output, results, strict=False))
                constant.update(node.output)
                continue
        else:
            continue
        for name, arr in zip(node.output, results, strict=False):
            if name:
                known[name] = arr
                derived.add(name)
        folded.append(k)
    if not folded:
        return 0
    _replace(model, folded, known)
    log.info("folded %d shape-computing nodes of %s", len(folded), g.name or "<model>")
    return len(folded)


def drop_dead_nodes(model: onnx.ModelProto) -> int:
    """Remove, in place, the nodes whose outputs nothing reads (no node, no sub-graph, no graph
    output), and those only they read; returns how many. ONNX nodes have no side effects, so the
    model computes the same; a runtime drops them anyway, and timed alone such a node is a
    sub-model without outputs, which onnxruntime refuses to run. One pass from the last node
    back (the checker has made sure the nodes are in topological order)."""
    g = model.graph
    used: Counter[str] = Counter(o.name for o in g.output)
    keep = []
    for n in reversed(g.node):
        if any(used[o] for o in n.output if o):
            keep.append(n)
            used.update(_node_reads(n))
    dropped = len(g.node) - len(keep)
    del g.node[:]
    g.node.extend(reversed(keep))
    return dropped


def _node_reads(n: onnx.NodeProto) -> list[str]:
    """The names ``n`` reads: its inputs and what its sub-graphs read of outer scopes."""
    out = [x for x in n.input if x]
    for a in n.attribute:
        for sub in [a.g] if a.HasField("g") else list(a.graphs):
            out += _node_inputs(sub) + [o.name for o in sub.output]
    return out


def _node_inputs(g: onnx.GraphProto) -> list[str]:
    """Every name the nodes of ``g`` read (:func:`_node_reads`)."""
    return [x for n in g.node for x in _node_reads(n)]


def _uses(g: onnx.GraphProto) -> Counter[str]:
    uses: Counter[str] = Counter(_node_inputs(g))
    uses.update(o.name for o in g.output)
    return uses


def _replace(model: onnx.ModelProto, folded: list[int], known: dict[str, np.ndarray]) -> None:
    """Turn the folded nodes' outputs into initializers and drop what only they used."""
    g = model.graph
    before = _uses(g)
    drop = set(folded)
    new_inits = [
        numpy_helper.from_array(known[o], o) for k in folded for o in g.node[k].output if o
    ]
    kept = [n for k, n in enumerate(g.node) if k not in drop]
    del g.node[:]
    g.node.extend(kept)
    g.initializer.extend(new_inits)
    # Nodes and initializers that were used before and are used by nothing now.
    while True:
        uses = _uses(g)
        dead = [
            k
            for k, n in enumerate(g.node)
            if n.output and all(before[o] and not uses[o] for o in n.output if o)
        ]
        if not dead:
            break
        kept = [n for k, n in enumerate(g.node) if k not in set(dead)]
        del g.node[:]
        g.node.extend(kept)
    uses = _uses(g)
    unused = {t.name for t in g.initializer if before[t.name] and not uses[t.name]}
    unused |= {t.name for t in new_inits if not uses[t.name]}
    if unused:
        kept_inits = [t for t in g.initializer if t.name not in unused]
        del g.initializer[:]
        g.initializer.extend(kept_inits)
        kept_inputs = [i for i in g.input if i.name not in unused]
        del g.input[:]
        g.input.extend(kept_inputs)
    names = {t.name for t in g.initializer} | {x for n in g.node for x in n.output}
    kept_vi = [vi for vi in g.value_info if vi.name in names]
    del g.value_info[:]
    g.value_info.extend(kept_vi)
