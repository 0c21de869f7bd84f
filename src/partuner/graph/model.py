"""Load an ONNX model into partuner's view of it: nodes, values, shapes, bytes and FLOPs.

The loader checks the model, gives every node a unique name (ONNX allows empty or repeated names;
plans refer to nodes by name), fixes dynamic input dimensions from ``--input-shape`` values,
infers every value's shape and dtype, and records the def-use links (through ``onnx-ir``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from partuner.errors import InputShapeError, InvalidModelError
from partuner.graph.flops import node_flops
from partuner.graph.fold import drop_dead_nodes, fold_shape_computations, static_dims
from partuner.graph.model_file import MAX_MODEL_BYTES, read_model_proto
from partuner.graph.subgraphs import outer_names

__all__ = [
    "MAX_INPUT_ELEMENTS",
    "MAX_MODEL_BYTES",
    "ModelGraph",
    "NodeInfo",
    "ValueInfo",
    "load_model",
    "parse_input_shapes",
    "read_model_proto",
]

log = logging.getLogger(__name__)

# An input tensor of more elements than this (8 GiB of float32) is refused as a typo.
MAX_INPUT_ELEMENTS = 2**31


@dataclass(frozen=True)
class ValueInfo:
    """One tensor of the graph: its static shape, dtype, size and def-use links."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"
    nbytes: int
    producer: str | None  # node name, None for graph inputs and initializers
    consumers: tuple[str, ...]
    is_initializer: bool = False
    is_graph_input: bool = False
    is_graph_output: bool = False


@dataclass(frozen=True)
class NodeInfo:
    """One operator: what it is, what it reads and writes, and what it costs in FLOPs."""

    name: str
    index: int  # position in the (topologically sorted) graph
    op_type: str
    domain: str
    attributes: Mapping[str, object]
    inputs: tuple[str, ...]  # value names ("" for an absent optional input)
    outputs: tuple[str, ...]
    flops: int
    weight_bytes: int  # bytes of initializers this node reads
    io_bytes: int  # bytes of non-initializer inputs plus outputs


@dataclass
class ModelGraph:
    """A checked, shape-inferred ONNX model with partuner's per-node facts.

    ``model`` is the ONNX proto with unique node names and fixed input shapes: sub-models, plans
    and sessions are all built from it, so node names always agree.
    """

    model: onnx.ModelProto
    nodes: list[NodeInfo]
    values: dict[str, ValueInfo]
    inputs: list[str]  # graph inputs that are not initializers
    outputs: list[str]
    source: str = "<memory>"
    _by_name: dict[str, NodeInfo] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {n.name: n for n in self.nodes}
        const: set[str] = set()
        for n in self.nodes:  # topological, so producers are classified first
            ins = [v for v in n.inputs if v]
            if (
                all(self.values[v].is_initializer or self.values[v].producer in const for v in ins)
                and not any(self.values[v].is_graph_input for v in ins)
                and not any(o in self.outputs for o in n.outputs)  # an output: placed
            ):
                const.add(n.name)
        self.constant_nodes: frozenset[str] = frozenset(const)
        # A weight reached through a constant node (e.g. Identity of an initializer) is a weight.
        for k, n in enumerate(self.nodes):
            folded = sum(
                self.values[v].nbytes for v in n.inputs if v and self.values[v].producer in const
            )
            if folded:
                self.nodes[k] = dataclasses.replace(
                    n, weight_bytes=n.weight_bytes + folded, io_bytes=n.io_bytes - folded
                )
        self._by_name = {n.name: n for n in self.nodes}

    def is_constant(self, name: str) -> bool:
        """True for nodes that read only initializers and constants (``Constant``, an
        ``Identity`` of a weight, ...) and write no output of the model: backends fold them, so
        partuner neither plans nor times them and copies them into every partition that reads
        them."""
        return name in self.constant_nodes

    @property
    def compute_nodes(self) -> list[NodeInfo]:
        """The nodes that are not constant: what the planner places."""
        return [n for n in self.nodes if n.name not in self.constant_nodes]

    def node(self, name: str) -> NodeInfo:
        """The node called ``name``; raises KeyError naming a few known nodes otherwise."""
        try:
            return self._by_name[name]
        except KeyError:
            known = [n.name for n in self.nodes[:5]]
            raise KeyError(f"no node named {name!r} in the model; e.g. {known}") from None

    def has_node(self, name: str) -> bool:
        return name in self._by_name

    def predecessors(self, name: str) -> list[str]:
        """Names of the nodes producing the inputs of ``name`` (no duplicates, in input order)."""
        out: list[str] = []
        for v in self.node(name).inputs:
            p = self.values[v].producer if v else None
            if p is not None and p not in out:
                out.append(p)
        return out

    def successors(self, name: str) -> list[str]:
        """Names of the nodes consuming any output of ``name`` (no duplicates)."""
        out: list[str] = []
        for v in self.node(name).outputs:
            if not v:
                continue
            for c in self.values[v].consumers:
                if c not in out:
                    out.append(c)
        return out

    def edges(self) -> list[tuple[str, str, str, int]]:
        """Data edges ``(producer, consumer, value, nbytes)`` between nodes."""
        out = []
        for v in self.values.values():
            if v.producer is None:
                continue
            for c in dict.fromkeys(v.consumers):
                out.append((v.producer, c, v.name, v.nbytes))
        return out

    @property
    def total_flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    @property
    def weight_bytes(self) -> int:
        return sum(v.nbytes for v in self.values.values() if v.is_initializer)

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op_type] = hist.get(n.op_type, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


_SHAPE_RE = re.compile(r"^\s*([^=]+?)\s*=\s*(\d+(?:\s*[x,]\s*\d+)*)\s*$")


def parse_input_shapes(specs: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x224x224`` strings (like NEST-C's ``-model-input``).

    Examples
    --------
    >>> parse_input_shapes(["input=1x3x224x224"])
    {'input': (1, 3, 224, 224)}
    """
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        m = _SHAPE_RE.match(spec)
        if not m:
            raise InputShapeError(
                f"bad --input-shape {spec!r}: write NAME=DIMS with dims joined by 'x', "
                "e.g. input=1x3x224x224"
            )
        dims = tuple(int(d) for d in re.split(r"\s*[x,]\s*", m.group(2)))
        _check_dims(f"bad --input-shape {spec!r}", dims)
        out[m.group(1)] = dims
    return out


def _check_dims(what: str, dims: tuple[int, ...]) -> None:
    if any(int(d) <= 0 for d in dims):
        raise InputShapeError(f"{what}: every dimension must be >= 1")
    n = math.prod(int(d) for d in dims)
    if n > MAX_INPUT_ELEMENTS:
        raise InputShapeError(
            f"{what}: {n:.3g} elements is too large (at most {MAX_INPUT_ELEMENTS}); "
            "check the dimensions"
        )


def _check(model: onnx.ModelProto, source: str) -> None:
    try:
        onnx.checker.check_model(model, full_check=False)
    except Exception as exc:
        # onnx's messages span lines; the node they name is often on the second one.
        what = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise InvalidModelError(
            f"{source} fails the ONNX checker: {what}; fix or re-export the model"
        ) from None


def _name_nodes(model: onnx.ModelProto) -> None:
    # Generated names avoid every name the file gives, so no user-named node is ever renamed.
    given = {node.name for node in model.graph.node if node.name}
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        name = node.name
        if not name or name in seen:
            base = f"{node.op_type}_{i}"
            name = base
            k = 1
            while name in seen or name in given:
                name = f"{base}_{k}"
                k += 1
            node.name = name
        seen.add(name)


def _fix_inputs(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], source: str
) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    real_inputs = [i for i in model.graph.input if i.name not in inits]
    names = [i.name for i in real_inputs]
    for name in shapes:
        if name not in names:
            raise InputShapeError(
                f"--input-shape names {name!r}, but the model's inputs are {names}"
            )
    for vi in real_inputs:
        tt = vi.type.tensor_type
        dims = tt.shape.dim
        if vi.name in shapes:
            want = tuple(shapes[vi.name])
            _check_dims(f"--input-shape {vi.name}", want)
            if len(dims) and len(dims) != len(want):
                raise InputShapeError(
                    f"--input-shape {vi.name} has {len(want)} dims but the model's input has "
                    f"rank {len(dims)}"
                )
            for k, (d, w) in enumerate(zip(dims, want, strict=False)):
                if d.HasField("dim_value") and d.dim_value not in (0, w):
                    raise InputShapeError(
                        f"--input-shape {vi.name}: dim {k} is fixed to {d.dim_value} in the model, "
                        f"not {w}; give {d.dim_value} there, or export the model with a free or "
                        f"other size (for the zoo: partuner zoo NAME --image-size N -o FILE)"
                    )
            tt.shape.ClearField("dim")
            for w in want:
                tt.shape.dim.add().dim_value = w
        else:
            unresolved = [
                (k, d.dim_param or "?")
                for k, d in enumerate(dims)
                if not d.HasField("dim_value") or d.dim_value <= 0
            ]
            if unresolved or not tt.HasField("shape"):
                shown = "x".join(
                    d.dim_param or "?" if not d.HasField("dim_value") else str(d.dim_value)
                    for d in dims
                )
                # the model's fixed sizes as they are, 1 for each one it leaves open
                example = "x".join(
                    str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else "1"
                    for d in dims
                )
                raise InputShapeError(
                    f"input {vi.name!r} of {source} has dynamic shape [{shown}]; fix it with "
                    f"--input-shape {vi.name}={example or '1x3x224x224'} (your sizes)"
                )
            fixed = f"input {vi.name!r} of {source}, fixed in the model (re-export it smaller)"
            _check_dims(fixed, tuple(d.dim_value for d in dims))
    return names


def _static_shape(t: ir.Value) -> tuple[int, ...] | None:
    if t.shape is None:
        return None
    dims = []
    for d in t.shape:
        if not isinstance(d, int):
            return None
        dims.append(d)
    return tuple(dims)


def _np_dtype(v: ir.Value) -> str | None:
    if v.dtype is None:
        return None
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(int(v.dtype))))
    except Exception:
        return v.dtype.name.lower()


def _attr_value(a: onnx.AttributeProto) -> object:
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v).tolist() if math.prod(v.dims) <= 16 else "<tensor>"
    if isinstance(v, onnx.GraphProto):
        return "<graph>"
    return v


def load_model(
    source: str | Path | onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> ModelGraph:
    """Load, check and shape-infer an ONNX model.

    Parameters
    ----------
    source : a path to ``.onnx`` / ``.onnx.gz``, or a ``ModelProto`` (copied, not modified).
    input_shapes : fixed shapes for dynamic inputs, e.g. ``{"input": (1, 3, 224, 224)}``.

    Returns
    -------
    ModelGraph

    Raises
    ------
    InvalidModelError : unreadable file, checker failure, a value whose shape stays unknown.
    InputShapeError : unknown input name, rank mismatch, dynamic dimension left unresolved.
    """
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        name = model.graph.name or "<memory>"
    elif not isinstance(source, str | Path):
        raise InvalidModelError(
            f"load_model takes a path to an .onnx file or an onnx.ModelProto, got "
            f"{type(source).__name__}"
        )
    else:
        model = read_model_proto(source)
        name = str(source)
    _check(model, name)
    _name_nodes(model)
    _check_outputs_computed(model, name)
    drop_dead_nodes(model)
    if input_shapes is not None and (
        not isinstance(input_shapes, Mapping)
        or not all(isinstance(v, list | tuple) for v in input_shapes.values())
    ):
        raise InputShapeError(
            "input_shapes must map input names to dimension tuples, e.g. "
            f"{{'input': (1, 3, 224, 224)}}, got {input_shapes!r:.60}"
        )
    # Shapes the file declares, kept where inference cannot tell one (a Loop's carried values);
    # only when the file fixes every input's shape itself (else they may be another size's)
    declared = _declared_shapes(model)
    inputs = _fix_inputs(model, dict(input_shapes or {}), name)
    model = _infer(model, name)
    # Shapes computed at run time (Shape -> Gather -> ... -> Slice/Reshape/Expand) are constants
    # once the inputs are fixed: fold them all and re-infer until nothing more folds. Also where
    # shape inference sees through them (data propagation): a node timed alone is fed zeros for
    # its integer inputs, and an LSTM's initial state expanded to a computed shape of zeros
    # fails on every unit (a torch.nn.LSTM export).
    while fold_shape_computations(model):
        model = _infer(model, name)
    _keep_declared(model, declared)
    return _build(model, inputs, name)


def _declared_shapes(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """The values whose static shape the file declares (copies), where it fixes every input's
    shape itself."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    if any(static_dims(i.type) is None for i in g.input if i.name not in inits):
        return {}
    return {  # copies: inference clears the shapes of the file's own
        vi.name: onnx.TypeProto.FromString(vi.type.SerializeToString())
        for vi in [*g.value_info, *g.output]
        if static_dims(vi.type) is not None
    }


def _keep_declared(model: onnx.ModelProto, declared: Mapping[str, onnx.TypeProto]) -> None:
    """Give each value inference left without a static shape the one the file declared (of
    the same element type: one that contradicts inference is left to the usual error)."""
    g = model.graph
    known = {vi.name: vi for vi in [*g.value_info, *g.output]}
    produced = {o for n in g.node for o in n.output if o}
    for name, t in declared.items():
        vi = known.get(name)
        if name not in produced or (vi is not None and static_dims(vi.type) is not None):
            continue
        vi = vi if vi is not None else g.value_info.add(name=name)
        if vi.type.tensor_type.elem_type in (0, t.tensor_type.elem_type):
            vi.type.CopyFrom(t)


def _infer(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    del model.graph.value_info[:]
    for out in model.graph.output:  # re-inferred, so fixed inputs propagate to outputs
        out.type.tensor_type.ClearField("shape")
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise InvalidModelError(f"shape inference failed on {name}: {first}") from None


def _check_outputs_computed(model: onnx.ModelProto, name: str) -> None:
    """Every output of the model is computed by one of its nodes: an output that is an input
    or a weight itself has no node for a plan to place."""
    g = model.graph
    produced = {o for n in g.node for o in n.output if o}
    inits = {t.name for t in g.initializer}
    for out in g.output:
        if out.name in produced:
            continue
        what = "a weight of the model" if out.name in inits else "one of its inputs"
        raise InvalidModelError(
            f"output {out.name!r} of {name} is {what} itself, not computed by any node; "
            "partuner plans the nodes between the inputs and the outputs: drop that output "
            "(the caller has it already), or compute it with an Identity node under a new name"
        )


def _build(model: onnx.ModelProto, inputs: list[str], source: str) -> ModelGraph:
    irm = ir.from_proto(model)
    g = irm.graph
    init_names = set(g.initializers)
    values: dict[str, ValueInfo] = {}
    out_names = [v.name for v in g.outputs]

    def add_value(v: ir.Value) -> None:
        if v.name in values or not v.name:
            return
        shape = _static_shape(v)
        dtype = _np_dtype(v)
        if shape is None or dtype is None:
            prod = v.producer()
            if prod is None:
                where = "a weight" if v.name in init_names else "graph input"
                raise InvalidModelError(
                    f"cannot infer a static shape for value {v.name!r} ({where}) in {source}; "
                    "fix the input shapes with --input-shape or simplify the model"
                )
            # every input's shape is fixed by now: this one depends on the data computed
            raise InvalidModelError(
                f"cannot infer a static shape for value {v.name!r} (output of node "
                f"{prod.name!r} ({prod.op_type})) in {source}: ONNX shape inference cannot "
                "tell it from the inputs' shapes (it depends on values computed at run time); "
                "partuner plans models whose every shape is static: export the model with that "
                "size fixed (e.g. a loop unrolled), declare the value's shape in the model's "
                "value_info (where every input's is fixed in the file), or simplify it (onnxsim)"
            )
        itemsize = np.dtype(dtype).itemsize if dtype in np.sctypeDict else 1
        prod = v.producer()
        if prod is not None and (n := math.prod(shape)) > MAX_INPUT_ELEMENTS:  # as inputs
            raise InvalidModelError(
                f"value {v.name!r} (output of node {prod.name!r} ({prod.op_type})) in {source} "
                f"would hold {n:.3g} elements ({'x'.join(map(str, shape))}), more than "
                f"{MAX_INPUT_ELEMENTS}: check the model's shapes"
            )
        consumers = tuple(dict.fromkeys(n.name for n, _ in v.uses()))
        values[v.name] = ValueInfo(
            name=v.name,
            shape=shape,
            dtype=dtype,
            nbytes=int(math.prod(shape)) * itemsize,
            producer=prod.name if prod is not None else None,
            consumers=consumers,
            is_initializer=v.name in init_names,
            is_graph_input=v.name in inputs,
            is_graph_output=v.name in out_names,
        )

    for v in g.inputs:
        add_value(v)
    for v in g.initializers.values():
        add_value(v)
    nodes: list[NodeInfo] = []
    protos = {n.name: n for n in model.graph.node}
    for i, n in enumerate(g):
        for v in n.inputs:
            if v is not None:
                add_value(v)
        for v in n.outputs:
            add_value(v)
        in_names = tuple(v.name if v is not None else "" for v in n.inputs)
        out_names_n = tuple(v.name for v in n.outputs)
        in_shapes = [values[x].shape if x else None for x in in_names]
        out_shapes = [values[x].shape if x else None for x in out_names_n]
        attrs = {a.name: _attr_value(a) for a in protos[n.name].attribute}
        flops = node_flops(n.op_type, attrs, in_shapes, out_shapes)
        # what its sub-graphs read of this graph: inputs too (the order and cuts need them)
        in_names += tuple(x for x in outer_names(protos[n.name]) if x in values)
        weight = sum(values[x].nbytes for x in in_names if x and values[x].is_initializer)
        io = sum(values[x].nbytes for x in in_names if x and not values[x].is_initializer)
        io += sum(values[x].nbytes for x in out_names_n if x)
        nodes.append(
            NodeInfo(
                name=n.name,
                index=i,
                op_type=n.op_type,
                domain=n.domain or "",
                attributes=attrs,
                inputs=in_names,
                outputs=out_names_n,
                flops=flops,
                weight_bytes=weight,
                io_bytes=io,
            )
        )
    # a value read inside a sub-graph is consumed by the node that holds the sub-graph
    readers: dict[str, list[str]] = {}
    for node in nodes:
        for x in dict.fromkeys(node.inputs):
            if x:
                readers.setdefault(x, []).append(node.name)
    for name, v in values.items():
        if set(v.consumers) != set(readers.get(name, ())):
            values[name] = dataclasses.replace(v, consumers=tuple(readers.get(name, ())))
    return ModelGraph(
        model=model, nodes=nodes, values=values, inputs=inputs, outputs=out_names, source=source
    )
