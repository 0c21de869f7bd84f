"""The plan file: NEST-C's partition-plan keys plus partuner's own section.

A plan file is YAML. NEST-C's keys come first so that its compiler can read the file
(``-partition-plan``); partuner's section, under the key ``partuner``, carries what NEST-C has no
key for. See ``docs/plan-file.md``.

    funcName: googlenet.onnx
    numOfPartitions: 3
    backendNames: cpu0:cpu1:cpu0          # the unit of each partition
    partitionNames: p0:p1:p2
    nodeToPartition: conv1-0:relu1-0:...  # node-partitionIndex, colon-joined
    logicalIDs: 0:1:0                     # index of the unit in `partuner.units`
    parallelPartitions: (p1||p2)
    partuner:
      version: 1
      model: googlenet.onnx
      input_shapes: {input: [1, 3, 224, 224]}
      scheduler: heft
      status: heuristic
      predicted_ms: 12.3
      lower_bound_ms: 10.1
      modeled: false
      units: {cpu0: {backend: onnxruntime, threads: 1}, ...}
      partitions:
        - {name: p0, unit: cpu0, start_ms: 0.0, end_ms: 4.1, nodes: [conv1, relu1, ...]}

A file with only NEST-C's keys is read too: partition ``i`` runs on ``backendNames[i]`` (which must
then name a unit of the units file) and holds the nodes ``nodeToPartition`` maps to ``i``.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from partuner.errors import PlanFileError

__all__ = ["PlanFile", "PartitionSpec", "read_plan", "write_plan", "plan_to_dict", "atomic_write"]

FORMAT_VERSION = 1


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    unit: str
    nodes: tuple[str, ...]
    start_us: float = math.nan
    end_us: float = math.nan


@dataclass
class PlanFile:
    """A plan as read from (or written to) a file."""

    partitions: list[PartitionSpec]
    model: str = ""
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    scheduler: str = "imported"
    status: str = "imported"
    predicted_us: float | None = None
    lower_bound_us: float | None = None
    modeled: bool = False
    units: dict[str, dict[str, Any]] = field(default_factory=dict)
    parallel: list[list[str]] = field(default_factory=list)
    source: str = ""

    @property
    def node_unit(self) -> dict[str, str]:
        return {n: p.unit for p in self.partitions for n in p.nodes}


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (no half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _ms(us: float | None) -> float | None:
    if us is None or not math.isfinite(us):
        return None
    return round(us / 1000.0, 6)


def plan_to_dict(plan: PlanFile) -> dict[str, Any]:
    """The YAML document of ``plan``: NEST-C keys first, then partuner's section."""
    unit_names = list(plan.units) or list(dict.fromkeys(p.unit for p in plan.partitions))
    idx = {u: i for i, u in enumerate(unit_names)}
    node_to_part = [f"{n}-{i}" for i, p in enumerate(plan.partitions) for n in p.nodes]
    return {
        "funcName": plan.model,
        "numOfPartitions": len(plan.partitions),
        "backendNames": ":".join(p.unit for p in plan.partitions),
        "partitionNames": ":".join(p.name for p in plan.partitions),
        "nodeToPartition": ":".join(node_to_part),
        "logicalIDs": ":".join(str(idx[p.unit]) for p in plan.partitions),
        "parallelPartitions": ":".join("(" + "||".join(g) + ")" for g in plan.parallel),
        "partuner": {
            "version": FORMAT_VERSION,
            "model": plan.model,
            "input_shapes": {k: list(v) for k, v in plan.input_shapes.items()},
            "scheduler": plan.scheduler,
            "status": plan.status,
            "predicted_ms": _ms(plan.predicted_us),
            "lower_bound_ms": _ms(plan.lower_bound_us),
            "modeled": plan.modeled,
            "units": plan.units,
            "partitions": [
                {
                    "name": p.name,
                    "unit": p.unit,
                    "start_ms": _ms(p.start_us),
                    "end_ms": _ms(p.end_us),
                    "nodes": list(p.nodes),
                }
                for p in plan.partitions
            ],
        },
    }


def write_plan(plan: PlanFile, path: str | Path) -> None:
    """Write ``plan`` as YAML, atomically."""
    text = yaml.safe_dump(plan_to_dict(plan), sort_keys=False, width=100)
    atomic_write(path, text)


def _split(value: Any, key: str, where: str) -> list[str]:
    if value is None or value == "":
        return []
    if not isinstance(value, str | int):
        raise PlanFileError(f"{where}: `{key}` must be a colon-joined string")
    return [s.strip() for s in str(value).split(":") if s.strip()]


def read_plan(path: str | Path) -> PlanFile:
    """Read a partuner or NEST-C plan file.

    Raises
    ------
    PlanFileError : missing file, YAML error, missing or inconsistent keys.
    """
    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise PlanFileError(f"plan file not found: {p}")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise PlanFileError(f"{where} is not valid YAML{line}; is it a plan file?") from None
    except UnicodeDecodeError:
        raise PlanFileError(f"{where} is not a text file; is it a plan file?") from None
    if not isinstance(doc, dict):
        raise PlanFileError(f"{where} is not a plan file (expected a YAML mapping)")
    own = doc.get("partuner")
    if isinstance(own, dict) and isinstance(own.get("partitions"), list):
        return _read_own(doc, own, where)
    return _read_nestc(doc, where)


def _us(ms: Any) -> float | None:
    return None if ms is None else float(ms) * 1000.0


def _read_own(doc: dict[str, Any], own: dict[str, Any], where: str) -> PlanFile:
    parts = []
    for k, e in enumerate(own["partitions"]):
        if not isinstance(e, dict) or not {"name", "unit", "nodes"} <= set(e):
            raise PlanFileError(f"{where}: partuner.partitions[{k}] needs name, unit and nodes")
        start, end = _us(e.get("start_ms")), _us(e.get("end_ms"))
        parts.append(
            PartitionSpec(
                str(e["name"]),
                str(e["unit"]),
                tuple(str(n) for n in e["nodes"]),
                math.nan if start is None else start,
                math.nan if end is None else end,
            )
        )
    parallel = [
        g.strip("()").split("||")
        for g in _split(doc.get("parallelPartitions"), "parallelPartitions", where)
    ]
    return PlanFile(
        partitions=parts,
        model=str(own.get("model", doc.get("funcName", ""))),
        input_shapes={k: list(v) for k, v in (own.get("input_shapes") or {}).items()},
        scheduler=str(own.get("scheduler", "imported")),
        status=str(own.get("status", "imported")),
        predicted_us=_us(own.get("predicted_ms")),
        lower_bound_us=_us(own.get("lower_bound_ms")),
        modeled=bool(own.get("modeled", False)),
        units=dict(own.get("units") or {}),
        parallel=parallel,
        source=where,
    )


def _read_nestc(doc: dict[str, Any], where: str) -> PlanFile:
    for key in ("backendNames", "partitionNames", "nodeToPartition"):
        if key not in doc:
            raise PlanFileError(f"{where} has no `{key}`: not a NEST-C or partuner plan file")
    backends = _split(doc["backendNames"], "backendNames", where)
    names = _split(doc["partitionNames"], "partitionNames", where)
    if len(backends) != len(names):
        raise PlanFileError(
            f"{where}: {len(names)} partitionNames but {len(backends)} backendNames"
        )
    nodes: list[list[str]] = [[] for _ in names]
    for item in _split(doc["nodeToPartition"], "nodeToPartition", where):
        # `node-index` or `node-index-backend`; node names may contain '-'.
        bits = item.split("-")
        if len(bits) >= 3 and bits[-2].isdigit() and not bits[-1].isdigit():
            node, idx = "-".join(bits[:-2]), bits[-2]
        elif len(bits) >= 2 and bits[-1].isdigit():
            node, idx = "-".join(bits[:-1]), bits[-1]
        else:
            raise PlanFileError(f"{where}: bad nodeToPartition item {item!r} (want node-index)")
        i = int(idx)
        if i >= len(names):
            raise PlanFileError(
                f"{where}: node {node!r} maps to partition {i}, but there are only {len(names)}"
            )
        nodes[i].append(node)
    parts = [
        PartitionSpec(n, b, tuple(ns))
        for n, b, ns in zip(names, backends, nodes, strict=True)
        if ns
    ]
    parallel = [
        g.strip("()").split("||")
        for g in _split(doc.get("parallelPartitions"), "parallelPartitions", where)
    ]
    return PlanFile(
        partitions=parts, model=str(doc.get("funcName", "")), parallel=parallel, source=where
    )
