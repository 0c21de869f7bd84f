"""Cut a model into standalone ONNX sub-models, the way ``onnx.utils.Extractor`` does.

Each sub-model keeps the source's node order, opsets, IR version and functions; carries only the
initializers it reads; declares every boundary value with its dtype and static shape; and passes
``onnx.checker``. Constant nodes (see ``ModelGraph.is_constant``) are free: every sub-model that
reads one gets its own copy, so no constant ever crosses a unit boundary.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import helper

from partuner.errors import InvalidModelError, PartitionCycleError, PlanFileError
from partuner.graph import ModelGraph
from partuner.graph.subgraphs import outer_names

__all__ = ["PartitionModel", "cut", "cut_nodes", "dependency_order", "for_unit_ops"]
__all__ += ["partition_order"]

Part = TypeVar("Part", bound=Any)  # a partition: an object with name, unit and nodes


@dataclass
class PartitionModel:
    """One partition as a standalone ONNX model."""

    name: str
    unit: str
    nodes: tuple[str, ...]
    model: onnx.ModelProto
    inputs: list[str]  # boundary values read (graph inputs or other partitions' outputs)
    outputs: list[str]  # values other partitions or the caller read


def _value_info(graph: ModelGraph, name: str) -> onnx.ValueInfoProto:
    v = graph.values[name]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype))
    return helper.make_tensor_value_info(name, elem, list(v.shape))


def cut_nodes(
    graph: ModelGraph,
    name: str,
    node_names: Iterable[str],
    *,
    extra_outputs: Iterable[str] = (),
    check: bool = True,
) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """Cut the nodes ``node_names`` out of ``graph`` as one standalone model.

    Parameters
    ----------
    graph : the loaded model.
    name : the sub-model's graph name.
    node_names : the nodes to keep (any order; kept in the source's order).
    extra_outputs : values produced inside that must be outputs even if nothing outside reads
        them (the caller knows which values other partitions need).
    check : run ``onnx.checker`` on the result.

    Returns
    -------
    (model, input names, output names)

    Raises
    ------
    PlanFileError : a node name is not in the model.
    """
    wanted = set(node_names)
    for n in wanted:
        if not graph.has_node(n):
            raise PlanFileError(f"node {n!r} is not in the model {graph.source}")
    src = graph.model.graph
    # Constant producers of the kept nodes' inputs come along (copied into each sub-model).
    stack = list(wanted)
    while stack:
        for v in graph.node(stack.pop()).inputs:
            p = graph.values[v].producer if v else None
            if p is not None and p not in wanted and graph.is_constant(p):
                wanted.add(p)
                stack.append(p)
    protos = [nd for nd in src.node if nd.name in wanted]
    produced = {o for nd in protos for o in nd.output if o}
    inits = {t.name: t for t in src.initializer}
    inputs: list[str] = []
    used_inits: list[str] = []
    for nd in protos:
        for v in [*nd.input, *outer_names(nd)]:  # and what its sub-graphs read of the model
            if not v or v in produced:
                continue
            if v in inits:
                if v not in used_inits:
                    used_inits.append(v)
            elif v not in inputs:
                inputs.append(v)
    extra = set(extra_outputs)
    outputs: list[str] = []
    for nd in protos:
        for v in nd.output:
            if not v:
                continue
            info = graph.values.get(v)
            if info is None:
                continue
            leaves = info.is_graph_output or v in extra
            leaves = leaves or any(
                c not in wanted and not graph.is_constant(c) for c in info.consumers
            )
            if leaves and v not in outputs:
                outputs.append(v)
    g = helper.make_graph(
        nodes=protos,
        name=name,
        inputs=[_value_info(graph, v) for v in inputs],
        outputs=[_value_info(graph, v) for v in outputs],
        initializer=[inits[v] for v in used_inits],
        value_info=[
            _value_info(graph, o)
            for nd in protos
            for o in nd.output
            if o and o not in outputs and o in graph.values
        ],
    )
    m = helper.make_model(
        g,
        opset_imports=list(graph.model.opset_import),
        # IR 3 wants every initializer listed as an input too; a sub-model is a new model: IR 4
        ir_version=max(graph.model.ir_version, 4),
        producer_name="partuner",
    )
    m.functions.extend(graph.model.functions)
    if check:
        try:
            onnx.checker.check_model(m)
        except onnx.checker.ValidationError as exc:  # one line, not a traceback
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise InvalidModelError(
                f"the sub-model {name!r} cut from {graph.source} fails ONNX's checker: {first}"
            ) from None
    return m, inputs, outputs


def partition_order(
    graph: ModelGraph, parts: Sequence[tuple[str, Sequence[str]]]
) -> dict[str, set[str]]:
    """Dependencies between partitions: ``{partition: {partitions it reads from}}``.

    Raises
    ------
    PartitionCycleError : the partitions depend on each other cyclically (names both).
    """
    owner: dict[str, str] = {}
    for pname, nodes in parts:
        for n in nodes:
            owner[n] = pname
    deps: dict[str, set[str]] = {p: set() for p, _ in parts}
    for pname, nodes in parts:
        for n in nodes:
            for pred in graph.predecessors(n):
                q = owner.get(pred)
                if q is not None and q != pname:
                    deps[pname].add(q)
    # Kahn's algorithm; report a cycle by two partitions on it.
    indeg = {p: len(d) for p, d in deps.items()}
    users: dict[str, list[str]] = {p: [] for p in deps}
    for p, d in deps.items():
        for q in d:
            users[q].append(p)
    ready = [p for p, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        p = ready.pop()
        seen += 1
        for u in users[p]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if seen != len(deps):
        stuck = [p for p, k in indeg.items() if k > 0]
        a = stuck[0]
        b = next((q for q in deps[a] if q in stuck), stuck[-1])
        raise PartitionCycleError(
            f"partitions {a!r} and {b!r} depend on each other (a cycle through other units); "
            "re-plan, or split them so each partition's inputs are ready before it starts"
        )
    return deps


def dependency_order(graph: ModelGraph, partitions: Sequence[Part]) -> list[Part]:
    """``partitions`` listed so that each comes after those it reads from, otherwise in their
    order (unchanged when they already are): a unit runs its partitions in the order listed,
    and NEST-C needs the list in that order. Raises PartitionCycleError on a data cycle."""
    deps = partition_order(graph, [(p.name, p.nodes) for p in partitions])
    index = {p.name: i for i, p in enumerate(partitions)}
    waiting = [len(deps[p.name]) for p in partitions]
    users: list[list[int]] = [[] for _ in partitions]
    for p in partitions:
        for q in deps[p.name]:
            users[index[q]].append(index[p.name])
    ready = [i for i, w in enumerate(waiting) if w == 0]
    out = []
    while ready:  # the earliest listed of those whose inputs are ready
        i = heapq.heappop(ready)
        out.append(partitions[i])
        for k in users[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(ready, k)
    return out


def cut(
    graph: ModelGraph, partitions: Sequence[object], *, check: bool = True
) -> list[PartitionModel]:
    """Cut ``graph`` along ``partitions`` (objects with ``name``, ``unit``, ``nodes``).

    Constant nodes (``graph.is_constant``) need not be listed: they are copied into each partition
    that reads them. Every non-constant node must be in exactly one partition.
    """
    if not isinstance(partitions, Iterable) or isinstance(partitions, str):
        raise PlanFileError(
            f"cut takes the partitions (a plan's .partitions), got {type(partitions).__name__}"
        )
    partitions = list(partitions)
    names: set[str] = set()
    for p in partitions:
        if not all(hasattr(p, k) for k in ("name", "unit", "nodes")):
            raise PlanFileError(
                f"cut takes partitions with a name, a unit and nodes, got {type(p).__name__}"
            )
        if p.name in names:  # type: ignore[attr-defined]
            raise PlanFileError(f"partition name {p.name!r} appears twice; rename one")  # type: ignore[attr-defined]
        names.add(p.name)  # type: ignore[attr-defined]
    seen: dict[str, str] = {}
    for p in partitions:
        if not p.nodes:  # type: ignore[attr-defined]
            raise PlanFileError(
                f"partition {p.name!r} has no nodes: give it nodes or leave it out of the plan"  # type: ignore[attr-defined]
            )
        for n in p.nodes:  # type: ignore[attr-defined]
            if not graph.has_node(n):
                raise PlanFileError(
                    f"partition {p.name!r} names node {n!r}, which is not in {graph.source}; "  # type: ignore[attr-defined]
                    "is the plan for another model?"
                )
            if n in seen:
                raise PlanFileError(
                    f"node {n!r} is listed twice in partition {p.name!r}; list it once"  # type: ignore[attr-defined]
                    if seen[n] == p.name  # type: ignore[attr-defined]
                    else f"node {n!r} is in partitions {seen[n]!r} and {p.name!r}; keep it in one"  # type: ignore[attr-defined]
                )
            seen[n] = p.name  # type: ignore[attr-defined]
    missing = [n.name for n in graph.compute_nodes if n.name not in seen]
    if missing:
        raise PlanFileError(
            f"the plan leaves {len(missing)} node(s) of {graph.source} unplaced, e.g. "
            f"{missing[:3]}; is the plan for another model?"
        )
    partition_order(graph, [(p.name, p.nodes) for p in partitions])  # type: ignore[attr-defined]
    out = []
    for p in partitions:
        m, ins, outs = cut_nodes(graph, p.name, p.nodes, check=check)  # type: ignore[attr-defined]
        out.append(PartitionModel(p.name, p.unit, tuple(p.nodes), m, ins, outs))  # type: ignore[attr-defined]
    return out


def for_unit_ops(
    parts: Sequence[PartitionModel], units: Mapping[str, object]
) -> list[PartitionModel]:
    """``parts`` with each partition written in the op types its unit lists: a node its unit
    runs only as another op (a ``Mul`` by a per-channel constant as a ``BatchNormalization``:
    ``partuner.graph.equivalents``) is written as that op, as the unit is given it to compile.
    ``units`` maps unit names to their specs (a plan file's ``units``, with ``ops``)."""
    from partuner.graph.equivalents import rewrite_for_ops

    out = []
    for p in parts:
        spec = units.get(p.unit)
        ops = spec.get("ops") if isinstance(spec, Mapping) else None
        if not isinstance(ops, list | tuple) or not all(isinstance(o, str) for o in ops):
            ops = None
        model = rewrite_for_ops(p.model, ops)
        out.append(p if model is p.model else replace(p, model=model))
    return out
