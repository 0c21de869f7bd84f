"""The legalizer: small passes that make exported partitions easy for other compilers to take.

Each pass takes an ``onnx.ModelProto`` and returns a new one (never modifying its argument):
:func:`convert_opset`, :func:`fold_constants`, :func:`remove_unused_initializers`,
:func:`legalize_names` (C identifiers) and :func:`external_data` (weights in a side file).
:func:`legalize` runs the in-memory passes in that order; :func:`export_legalized` cuts a plan,
legalizes every partition with one name map for the whole model (so boundary values keep matching
names), writes the folder like ``export_plan`` and records passes and name maps in the manifest.
See ``docs/export.md``.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import numpy_helper

from partuner.errors import InvalidModelError
from partuner.export.cut import PartitionModel, cut, for_unit_ops
from partuner.export.opset import convert_opset, default_opset
from partuner.export.planfile import PlanFile, atomic_write, plan_to_dict
from partuner.export.writer import check_outdir, manifest, move_into, temp_folder
from partuner.graph import ModelGraph
from partuner.graph.subgraphs import all_graphs

__all__ = ["LegalizeOptions", "LegalizeReport", "NameMap", "legalize", "export_legalized"]
__all__ += ["convert_opset", "fold_constants", "remove_unused_initializers", "legalize_names"]
__all__ += ["legal_name_map", "external_data"]

_LEGAL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: ops whose result changes from run to run: never folded
_RANDOM_OPS = {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform"}
_RANDOM_OPS.add("RandomUniformLike")


def _replace(field: Any, items: list[Any]) -> None:
    """Replace the items of a repeated protobuf field."""
    del field[:]
    field.extend(items)


def fold_constants(
    model: onnx.ModelProto, *, max_bytes: int | None = None
) -> tuple[onnx.ModelProto, list[str]]:
    """Evaluate nodes whose inputs are all initializers or constants into initializers; returns
    the new model and the nodes folded. Random ops, nodes with subgraphs, other domains, nodes
    producing a graph output and results over ``max_bytes`` are kept."""
    from onnx.reference import ReferenceEvaluator

    m = copy.deepcopy(model)
    g = m.graph
    inputs, outputs = {i.name for i in g.input}, {o.name for o in g.output}
    inits = {t.name: t for t in g.initializer if t.name not in inputs}
    known: dict[str, np.ndarray] = {}  # constant values, converted when first read
    folded: list[str] = []
    keep: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    for node in g.node:
        ok = (
            node.domain in ("", "ai.onnx")
            and node.op_type not in _RANDOM_OPS
            and not any(a.HasField("g") or a.graphs for a in node.attribute)
            and all(v in known or v in inits for v in node.input if v)
            and not any(o in outputs for o in node.output)
            and (len(node.input) > 0 or node.op_type == "Constant")
        )
        results: list[np.ndarray] = []
        try:
            if ok:
                for v in node.input:
                    if v and v not in known:
                        known[v] = numpy_helper.to_array(inits[v])
                ev = ReferenceEvaluator(node, opsets={"": default_opset(m)})
                results = [
                    np.asarray(r) for r in ev.run(None, {v: known[v] for v in node.input if v})
                ]
        except Exception:  # an op the reference cannot evaluate stays a node
            ok = False
        if not ok or (max_bytes is not None and sum(r.nbytes for r in results) > max_bytes):
            keep.append(node)
            continue
        folded.append(node.name)
        for name, arr in zip(node.output, results, strict=False):
            if name:
                known[name] = arr
                new_inits.append(numpy_helper.from_array(arr, name))
    if folded:
        _replace(g.node, keep)
        read = {v for sub in all_graphs(g) for n in sub.node for v in n.input}
        g.initializer.extend(t for t in new_inits if t.name in read)  # not intermediates
        made = {t.name for t in new_inits}
        _replace(g.value_info, [vi for vi in g.value_info if vi.name not in made])
    return m, folded


def remove_unused_initializers(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Drop initializers that no node (subgraphs included) and no graph output reads, and the
    graph-input entries that only declared them. Returns the new model and the names dropped."""
    m = copy.deepcopy(model)
    g = m.graph
    used = {o.name for o in g.output}
    for sub in all_graphs(g):
        used.update(v for n in sub.node for v in n.input if v)
    dropped = [t.name for t in g.initializer if t.name not in used]
    gone = set(dropped)
    _replace(g.initializer, [t for t in g.initializer if t.name not in gone])
    _replace(g.input, [i for i in g.input if i.name not in gone])
    return m, dropped


@dataclass
class NameMap:
    """Renames ``old -> new`` for values and nodes (only the names that change)."""

    values: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)


def _value_names(model: onnx.ModelProto) -> list[str]:
    names: dict[str, None] = {}
    for g in all_graphs(model.graph):
        names.update((x.name, None) for x in (*g.input, *g.initializer, *g.output, *g.value_info))
        for n in g.node:
            names.update((v, None) for v in (*n.input, *n.output))
    names.pop("", None)
    return list(names)


def _node_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for g in all_graphs(model.graph) for n in g.node if n.name]


def _assign(names: list[str], done: dict[str, str]) -> dict[str, str]:
    """Extend ``done`` with a legal, unused name for each illegal name in ``names``."""
    taken = {n for n in names if _LEGAL.match(n)} | set(done.values())
    for name in names:
        if _LEGAL.match(name) or name in done:
            continue
        base = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if not base or base[0].isdigit():
            base = "_" + base
        new, k = base, 0
        while new in taken:
            k += 1
            new = f"{base}_{k}"
        taken.add(new)
        done[name] = new
    return done


def legal_name_map(model: onnx.ModelProto) -> NameMap:
    """Legal C identifiers for every value and node name of ``model`` that is not one.

    Illegal characters become ``_``; a leading digit gets a ``_`` prefix; clashes get ``_1``,
    ``_2``... Names already legal are kept. Build the map once on a whole model and pass it to
    :func:`legalize_names` for each partition so that boundary values get the same name.

    Examples
    --------
    >>> _assign(["/conv1/Conv_output_0", "a.b", "a_b", "1x"], {})
    {'/conv1/Conv_output_0': '_conv1_Conv_output_0', 'a.b': 'a_b_1', '1x': '_1x'}
    """
    return NameMap(_assign(_value_names(model), {}), _assign(_node_names(model), {}))


def legalize_names(
    model: onnx.ModelProto, names: NameMap | None = None
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Rename the values and nodes of ``model`` to legal C identifiers, uniquely.

    ``names`` (from :func:`legal_name_map` on the whole model) fixes the new names of values it
    lists; other illegal names get fresh ones. Returns the new model and ``{old: new}`` for every
    graph input and output (unchanged ones map to themselves).
    """
    m = copy.deepcopy(model)
    given = names or NameMap()
    vmap = _assign(_value_names(m), dict(given.values))
    nmap = _assign(_node_names(m), dict(given.nodes))
    io = {x.name: vmap.get(x.name, x.name) for x in (*m.graph.input, *m.graph.output)}

    for g in all_graphs(m.graph):
        for x in (*g.input, *g.initializer, *g.output, *g.value_info):
            x.name = vmap.get(x.name, x.name)
        for n in g.node:
            n.input[:] = [vmap.get(v, v) for v in n.input]
            n.output[:] = [vmap.get(v, v) for v in n.output]
            n.name = nmap.get(n.name, n.name)
    return m, io


def external_data(
    model: onnx.ModelProto, directory: str | Path, threshold_bytes: int, *, location: str
) -> tuple[onnx.ModelProto, list[str]]:
    """Move every numeric initializer of at least ``threshold_bytes`` into ``directory/location``
    (written atomically, each tensor at a 4096-byte aligned offset) and return the model that
    refers to it (save it in ``directory``) plus the names moved. No file when nothing moves."""
    m = copy.deepcopy(model)
    blob = bytearray()
    moved: list[str] = []
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.STRING or t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        raw = t.raw_data if t.HasField("raw_data") else _raw(t)
        if len(raw) < threshold_bytes:
            continue
        blob.extend(b"\0" * (-len(blob) % 4096))
        offset = len(blob)
        blob.extend(raw)
        fresh = onnx.TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
        fresh.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", offset), ("length", len(raw))):
            fresh.external_data.add(key=key, value=str(value))
        t.CopyFrom(fresh)
        moved.append(t.name)
    if moved:
        atomic_write(Path(directory) / location, bytes(blob))
    return m, moved


def _raw(t: onnx.TensorProto) -> bytes:
    """The little-endian bytes of a tensor stored in typed fields (``float_data``...)."""
    return numpy_helper.from_array(numpy_helper.to_array(t), t.name).raw_data


@dataclass(frozen=True)
class LegalizeOptions:
    """Which passes to run. ``external_data_threshold`` (bytes) is applied when saving."""

    opset: int | None = None
    fold_constants: bool = False
    legal_names: bool = False
    external_data_threshold: int | None = None

    @property
    def any(self) -> bool:
        # `is`, not `in`: a threshold of 0 (every weight to a .data file) equals False
        return any(v is not None and v is not False for v in asdict(self).values())


@dataclass
class LegalizeReport:
    """What :func:`legalize` (and saving) did to one model."""

    passes: list[str] = field(default_factory=list)
    opset_from: int = 0
    opset_to: int = 0
    folded: list[str] = field(default_factory=list)
    removed_initializers: list[str] = field(default_factory=list)
    io_names: dict[str, str] = field(default_factory=dict)
    external: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "opset": {"from": self.opset_from, "to": self.opset_to},
            "folded_nodes": len(self.folded),
            "removed_initializers": len(self.removed_initializers),
            "io_names": self.io_names,
            "external_tensors": len(self.external),
        }


def legalize(
    model: onnx.ModelProto, options: LegalizeOptions, *, names: NameMap | None = None
) -> tuple[onnx.ModelProto, LegalizeReport]:
    """Run the passes ``options`` asks for: opset, folding (+ unused initializers), names."""
    rep = LegalizeReport(opset_from=default_opset(model))
    m = model
    if options.opset is not None:
        m = convert_opset(m, options.opset)
        rep.passes.append("convert_opset")
    if options.fold_constants:
        m, rep.folded = fold_constants(m)
        m, rep.removed_initializers = remove_unused_initializers(m)
        rep.passes += ["fold_constants", "remove_unused_initializers"]
    if options.legal_names:
        m, rep.io_names = legalize_names(m, names)
        rep.passes.append("legalize_names")
    rep.opset_to = default_opset(m)
    return m, rep


def _io_entry(entry: dict[str, Any], vmap: dict[str, str]) -> dict[str, Any]:
    return {**entry, "onnx_name": vmap[entry["name"]]} if entry["name"] in vmap else entry


def export_legalized(
    graph: ModelGraph, plan: PlanFile, outdir: str | Path, options: LegalizeOptions
) -> tuple[list[PartitionModel], dict[str, Any]]:
    """``export_plan`` with the legalizer: cut, legalize each partition, check it with
    ``onnx.checker.check_model(full_check=True)``, write the folder atomically. Returns the
    partitions (``model`` legalized, ``inputs``/``outputs`` the original names) and the manifest."""
    outdir = Path(outdir)
    check_outdir(plan, outdir)
    parts = for_unit_ops(cut(graph, plan.partitions), plan.units)
    names = legal_name_map(graph.model) if options.legal_names else None
    tmp = temp_folder(outdir)
    try:
        reports: dict[str, dict[str, Any]] = {}
        done = []
        for p in parts:
            m, rep = legalize(p.model, options, names=names)
            limit = options.external_data_threshold
            if limit is not None:
                data = f"{p.name}.onnx.data"
                m, rep.external = external_data(m, tmp / "partitions", limit, location=data)
                rep.passes.append("external_data")
            path = tmp / "partitions" / f"{p.name}.onnx"
            onnx.save_model(m, path)
            try:
                onnx.checker.check_model(str(path), full_check=True)
            except onnx.checker.ValidationError as exc:
                first = (str(exc).strip().splitlines() or ["?"])[0][:200]
                raise InvalidModelError(
                    f"partition {p.name!r} fails the ONNX checker after {rep.passes}: {first}"
                ) from None
            reports[p.name] = rep.to_dict()
            done.append(replace(p, model=m))
        man = manifest(graph, plan, parts)
        vmap = names.values if names else {}
        boundary = {e["name"] for q in man["partitions"] for e in q["inputs"] + q["outputs"]}
        boundary |= set(graph.inputs) | set(graph.outputs)
        man["legalize"] = {
            "options": asdict(options),
            "value_names": {k: v for k, v in vmap.items() if k in boundary},
            "node_names": dict(names.nodes) if names else {},
        }
        for key in ("inputs", "outputs"):
            man[key] = [_io_entry(e, vmap) for e in man[key]]
        for q in man["partitions"]:
            q["inputs"] = [_io_entry(e, vmap) for e in q["inputs"]]
            q["outputs"] = [_io_entry(e, vmap) for e in q["outputs"]]
            q["legalize"] = reports[q["name"]]
            if reports[q["name"]]["external_tensors"]:
                q["external_data"] = f"partitions/{q['name']}.onnx.data"
        (tmp / "manifest.json").write_text(json.dumps(man, indent=2))
        (tmp / "plan.yaml").write_text(
            yaml.safe_dump(plan_to_dict(plan), sort_keys=False, width=100)
        )
        move_into(tmp, outdir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return done, man
