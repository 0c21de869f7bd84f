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

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from partuner.errors import PlanFileError
from partuner.export.files import atomic_write, default_mode
from partuner.export.plan_fields import (
    check_partition_names,
    colon_list,
    flag_field,
    is_safe_name,
    known_keys,
    short_repr,
    text_field,
    unit_name,
    us_field,
)
from partuner.yamlfile import UniqueKeyLoader, read_yaml

__all__ = [
    "PlanFile",
    "PartitionSpec",
    "StreamSpec",
    "read_plan",
    "write_plan",
    "plan_to_dict",
    "atomic_write",
    "warn_keys_differ",
]
__all__ += ["check_partition_names", "default_mode", "is_safe_name", "short_repr"]

FORMAT_VERSION = 1

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64  # frames in flight per copy a plan file may ask for


@dataclass(frozen=True)
class StreamSpec:
    """How to run a plan on a stream of frames (``partuner plan --objective throughput``):
    frames in flight per copy (``in_flight[0]``: the plan's own partitions), the further
    ``copies`` of the plan (each a unit rename: ``{cpu0: cpu1}`` runs the partitions of
    ``cpu0`` on ``cpu1``), and what the planner predicted (frames per second, the bound no
    stream on these units beats, each frame's p50/p99 latency, the latency bound asked for)."""

    in_flight: tuple[int, ...] = (2,)
    copies: tuple[dict[str, str], ...] = ()
    predicted_fps: float | None = None
    fps_bound: float | None = None
    latency_p50_us: float | None = None
    latency_p99_us: float | None = None
    max_latency_us: float | None = None


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
    stream: StreamSpec | None = None  # planned for throughput: how to stream it
    #: where the file's NEST-C keys place a node otherwise than its ``partuner`` section (in
    #: words; "" when they agree): said by :func:`warn_keys_differ` once the plan is accepted
    keys_differ: str = field(default="", compare=False)

    @property
    def node_unit(self) -> dict[str, str]:
        return {n: p.unit for p in self.partitions for n in p.nodes}


def _ms(us: float | None) -> float | None:
    if us is None or not math.isfinite(us):
        return None
    return round(us / 1000.0, 6)


def _logical_ids(plan: PlanFile) -> list[str]:
    """Each partition's logical ID: its unit's index in the units section, then any unit only
    a partition names (a plan edited by hand to run a partition on a unit of the user's units
    file)."""
    unit_names = dict.fromkeys([*plan.units, *(p.unit for p in plan.partitions)])
    idx = {u: str(i) for i, u in enumerate(unit_names)}
    return [idx[p.unit] for p in plan.partitions]


def plan_to_dict(plan: PlanFile) -> dict[str, Any]:
    """The YAML document of ``plan``: NEST-C keys first, then partuner's section."""
    node_to_part = [f"{n}-{i}" for i, p in enumerate(plan.partitions) for n in p.nodes]
    return {
        "funcName": plan.model,
        "numOfPartitions": len(plan.partitions),
        "backendNames": ":".join(p.unit for p in plan.partitions),
        "partitionNames": ":".join(p.name for p in plan.partitions),
        "nodeToPartition": ":".join(node_to_part),
        "logicalIDs": ":".join(_logical_ids(plan)),
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
            **({"stream": _stream_dict(plan.stream)} if plan.stream is not None else {}),
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


def _stream_dict(s: StreamSpec) -> dict[str, Any]:
    return {
        "objective": "throughput",
        "in_flight": list(s.in_flight),
        "copies": [dict(c) for c in s.copies],
        "predicted_fps": s.predicted_fps,
        "fps_bound": s.fps_bound,
        "latency_ms": {"p50": _ms(s.latency_p50_us), "p99": _ms(s.latency_p99_us)},
        "max_latency_ms": _ms(s.max_latency_us),
    }


_STREAM_KEYS = ("objective", "in_flight", "copies", "predicted_fps", "fps_bound", "latency_ms")
_STREAM_KEYS += ("max_latency_ms",)


def _read_stream(value: object, units: set[str], where: str) -> StreamSpec | None:
    """``partuner.stream`` of a plan file (None when absent); every problem one line."""
    if value is None:
        return None
    key = "partuner.stream"
    if not isinstance(value, dict):
        raise PlanFileError(f"{where}: `{key}` must be a mapping, got {short_repr(value)}")
    known_keys(value, _STREAM_KEYS, key, where)  # a misspelt key was dropped unsaid
    objective = value.get("objective", "throughput")
    if objective != "throughput":
        raise PlanFileError(
            f"{where}: `{key}.objective` must be throughput (a stream plan's), got "
            f"{short_repr(objective)}"
        )
    copies = value.get("copies") or []
    if not isinstance(copies, list) or not all(isinstance(c, dict) for c in copies):
        raise PlanFileError(
            f"{where}: `{key}.copies` must be a list of unit renames like [{{cpu0: cpu1}}], "
            f"got {short_repr(copies)}"
        )
    renames = []
    for k, c in enumerate(copies):
        for a, b in c.items():
            unit_name(a, f"{key}.copies[{k}]", where)
            unit_name(b, f"{key}.copies[{k}]", where)
        unknown = sorted(set(c) - units)
        if unknown:
            raise PlanFileError(
                f"{where}: `{key}.copies[{k}]` renames {unknown}, which no partition runs on"
            )
        renames.append({str(a): str(b) for a, b in c.items()})
    flight = value.get("in_flight", [2] * (1 + len(renames)))
    if (
        not isinstance(flight, list)
        or len(flight) != 1 + len(renames)
        or not all(type(k) is int and 1 <= k <= MAX_IN_FLIGHT for k in flight)
    ):
        whose = (
            "the plan's" if not renames else f"the plan's and each of its {len(renames)} copies'"
        )
        raise PlanFileError(
            f"{where}: `{key}.in_flight` must list {whose} frames in flight (1 to "
            f"{MAX_IN_FLIGHT} each, {1 + len(renames)} in all), got {short_repr(flight)}"
        )
    lat = value.get("latency_ms") or {}
    if not isinstance(lat, dict):
        raise PlanFileError(f"{where}: `{key}.latency_ms` must be {{p50: MS, p99: MS}}")
    fps = {}
    for name in ("predicted_fps", "fps_bound"):
        x = value.get(name)
        ok = x is None or (isinstance(x, int | float) and not isinstance(x, bool) and x >= 0)
        if not ok or (x is not None and not math.isfinite(x)):
            raise PlanFileError(
                f"{where}: `{key}.{name}` must be a finite number >= 0, got {short_repr(x)}"
            )
        fps[name] = None if x is None else float(x)
    return StreamSpec(
        in_flight=tuple(flight),
        copies=tuple(renames),
        predicted_fps=fps["predicted_fps"],
        fps_bound=fps["fps_bound"],
        latency_p50_us=us_field(lat.get("p50"), f"{key}.latency_ms.p50", where),
        latency_p99_us=us_field(lat.get("p99"), f"{key}.latency_ms.p99", where),
        max_latency_us=us_field(value.get("max_latency_ms"), f"{key}.max_latency_ms", where),
    )


def write_plan(plan: PlanFile, path: str | Path) -> None:
    """Write ``plan`` as YAML, atomically."""
    text = yaml.safe_dump(plan_to_dict(plan), sort_keys=False, width=100)
    atomic_write(path, text)


def _parallel(
    doc: dict[str, Any], where: str, names: Sequence[str], units: Sequence[str]
) -> list[list[str]]:
    """``parallelPartitions``: groups ``(pA||pB)`` of two or more of the plan's partitions,
    each on another unit (they run at the same time)."""
    groups = colon_list(doc.get("parallelPartitions"), "parallelPartitions", where)
    out = [g[1:-1].split("||") if g[:1] + g[-1:] == "()" else [] for g in groups]
    unit_of = dict(zip(names, units, strict=True))
    for g, got in zip(groups, out, strict=True):
        unknown = next((p for p in got if p not in names), None) if got else g
        if unknown is not None:
            raise PlanFileError(
                f"{where}: `parallelPartitions` group {short_repr(g)} "
                + (f"names no partition {short_repr(unknown)}" if got else "is not (pA||pB)")
            )
        shared, seen = None, set()  # the first unit given twice (linear: the file is untrusted)
        for u in (unit_of[p] for p in got):
            if u in seen:
                shared = u
                break
            seen.add(u)
        if len(got) < 2 or shared is not None:
            raise PlanFileError(
                f"{where}: `parallelPartitions` group {short_repr(g)} "
                + (
                    "names one partition: a group holds two or more that run at the same time"
                    if len(got) < 2
                    else "names a partition twice"
                    if len(set(got)) < len(got)
                    else f"puts two partitions on unit {shared!r}, which runs one at a time"
                )
            )
    return out


def read_plan(path: str | Path) -> PlanFile:
    """Read a partuner or NEST-C plan file.

    The file is untrusted: every field is checked for its type and range, partition and unit
    names must be safe file names (:func:`is_safe_name`) and partition names unique.

    Raises
    ------
    PlanFileError : missing file, YAML error, missing, mistyped or inconsistent keys.
    """
    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise PlanFileError(f"plan file not found: {p}")
    doc = read_yaml(p, PlanFileError, "is it a plan file?", loader=UniqueKeyLoader)
    if not isinstance(doc, dict):
        raise PlanFileError(f"{where} is not a plan file (expected a YAML mapping)")
    own = doc.get("partuner")
    if isinstance(own, dict) and "version" in own:
        version = own["version"]
        if type(version) is not int or version < 1:
            raise PlanFileError(
                f"{where}: `partuner.version` must be a whole number >= 1, got "
                f"{short_repr(version)}"
            )
        if version > FORMAT_VERSION:
            raise PlanFileError(
                f"{where} has plan format {version}, newer than this partuner reads "
                f"({FORMAT_VERSION}); upgrade partuner"
            )
    if own is None:
        return _read_nestc(doc, where)
    if not isinstance(own, dict) or not isinstance(own.get("partitions"), list):
        raise PlanFileError(
            f"{where}: its `partuner` section has no `partitions` list; fix it, or delete the "
            "section to read the NEST-C keys alone"
        )
    known_keys(own, _OWN_KEYS, "partuner", where)
    plan = _read_own(doc, own, where)
    # what NEST-C reads: the same plan? (NEST-C's keys join node names with ':' and cannot
    # hold a name with one: then only the section is read)
    colon = any(":" in n for p in plan.partitions for n in p.nodes)
    if all(key in doc for key in _NESTC_KEYS) and not colon:
        plan.keys_differ = _first_difference(plan, _read_nestc(doc, where))
        ids, want = doc.get("logicalIDs"), _logical_ids(plan)
        if isinstance(ids, str) and colon_list(ids, "logicalIDs", where) != want:
            said = f"logicalIDs {short_repr(ids)}, its units give {short_repr(':'.join(want))}"
            plan.keys_differ = plan.keys_differ or said
    return plan


def warn_keys_differ(plan: PlanFile) -> None:
    """Warn (once) that the plan's NEST-C keys describe another plan than its ``partuner``
    section: called when the plan has been accepted, so that a refused plan gets one line."""
    if plan.keys_differ:
        log.warning(
            "%s: its NEST-C keys describe another plan than its `partuner` section (%s); "
            "partuner runs the section, NEST-C would read the keys: write the plan again "
            "with partuner (partuner export) to bring them in line",
            plan.source,
            plan.keys_differ,
        )
        plan.keys_differ = ""


_OWN_KEYS = ("version", "model", "input_shapes", "scheduler", "status", "predicted_ms")
_OWN_KEYS += ("lower_bound_ms", "modeled", "units", "stream", "partitions")
_PART_KEYS = ("name", "unit", "nodes", "start_ms", "end_ms")
_NESTC_KEYS = ("backendNames", "partitionNames", "nodeToPartition")


def _first_difference(own: PlanFile, nestc: PlanFile) -> str:
    """The first node the partuner section and the NEST-C keys place differently, in words
    (``""`` when they describe one plan)."""
    mine = {n: (p.name, p.unit) for p in own.partitions for n in p.nodes}
    theirs = {n: (p.name, p.unit) for p in nestc.partitions for n in p.nodes}
    for n in sorted(set(mine) | set(theirs), key=str):
        a, b = mine.get(n), theirs.get(n)
        if a != b:
            return (
                f"node {short_repr(n)}: {'/'.join(a) if a else 'absent'} in partuner.partitions, "
                f"{'/'.join(b) if b else 'absent'} in nodeToPartition"
            )
    return ""


def _read_own(doc: dict[str, Any], own: dict[str, Any], where: str) -> PlanFile:
    entries = own["partitions"]
    for k, e in enumerate(entries):
        if not isinstance(e, dict) or not {"name", "unit", "nodes"} <= set(e):
            raise PlanFileError(f"{where}: partuner.partitions[{k}] needs name, unit and nodes")
        known_keys(e, _PART_KEYS, f"partuner.partitions[{k}]", where)
    check_partition_names([e["name"] for e in entries], where)
    parts = []
    for k, e in enumerate(entries):
        key = f"partuner.partitions[{k}]"
        nodes = e["nodes"]
        if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
            raise PlanFileError(
                f"{where}: `{key}.nodes` must be a list of node names, got {short_repr(nodes)}"
            )
        start = us_field(e.get("start_ms"), f"{key}.start_ms", where)
        end = us_field(e.get("end_ms"), f"{key}.end_ms", where)
        if start is not None and end is not None and start > end:
            raise PlanFileError(f"{where}: `{key}` starts at {start / 1e3:g} ms, after its end")
        parts.append(
            PartitionSpec(
                e["name"],
                unit_name(e["unit"], f"{key}.unit", where),
                tuple(nodes),
                math.nan if start is None else start,
                math.nan if end is None else end,
            )
        )
    shapes = own.get("input_shapes") or {}
    if not isinstance(shapes, dict) or not all(
        isinstance(v, list) and all(type(d) is int and d >= 0 for d in v) for v in shapes.values()
    ):
        raise PlanFileError(
            f"{where}: `partuner.input_shapes` must map input names to lists of dimensions >= 0 "
            f"like {{input: [1, 3, 224, 224]}}, got {short_repr(shapes)}"
        )
    units = own.get("units") or {}
    if not isinstance(units, dict) or not all(isinstance(v, dict) for v in units.values()):
        raise PlanFileError(
            f"{where}: `partuner.units` must be a mapping of unit names to units-file entries "
            f"like {{cpu0: {{backend: onnxruntime}}}}, got {short_repr(units)}; fix it or pass "
            "--units FILE"
        )
    for name in units:
        unit_name(name, "partuner.units", where)
    model = own.get("model", doc.get("funcName"))
    return PlanFile(
        partitions=parts,
        model=text_field(model, "partuner.model", where, ""),
        input_shapes={str(k): list(v) for k, v in shapes.items()},
        scheduler=text_field(own.get("scheduler"), "partuner.scheduler", where, "imported"),
        status=text_field(own.get("status"), "partuner.status", where, "imported"),
        predicted_us=us_field(own.get("predicted_ms"), "partuner.predicted_ms", where),
        lower_bound_us=us_field(own.get("lower_bound_ms"), "partuner.lower_bound_ms", where),
        modeled=flag_field(own.get("modeled", False), "partuner.modeled", where)
        or any(units.get(p.unit, {}).get("backend") == "modeled" for p in parts),
        units=dict(units),
        parallel=_parallel(doc, where, [p.name for p in parts], [p.unit for p in parts]),
        source=where,
        stream=_read_stream(own.get("stream"), {p.unit for p in parts}, where),
    )


def _read_nestc(doc: dict[str, Any], where: str) -> PlanFile:
    for key in ("backendNames", "partitionNames", "nodeToPartition"):
        if key not in doc:
            raise PlanFileError(f"{where} has no `{key}`: not a NEST-C or partuner plan file")
    backends = [
        unit_name(b, "backendNames", where)
        for b in colon_list(doc["backendNames"], "backendNames", where)
    ]
    names = colon_list(doc["partitionNames"], "partitionNames", where)
    check_partition_names(names, where)
    if len(backends) != len(names):
        raise PlanFileError(
            f"{where}: {len(names)} partitionNames but {len(backends)} backendNames"
        )
    count = doc.get("numOfPartitions", len(names))
    if type(count) is not int:
        raise PlanFileError(
            f"{where}: numOfPartitions must be a whole number, got {short_repr(count)}"
        )
    if count != len(names):
        raise PlanFileError(
            f"{where}: numOfPartitions is {count} but partitionNames lists {len(names)}; make "
            "them agree"
        )
    # (YAML 1.1 reads an unquoted 1:0:1 as the number 3661: only text is checked)
    ids = doc.get("logicalIDs")
    ids = colon_list(ids, "logicalIDs", where) if isinstance(ids, str) and ids else None
    if ids is not None and (
        len(ids) != len(names) or not all(i.isascii() and i.isdigit() for i in ids)
    ):
        raise PlanFileError(
            f"{where}: `logicalIDs` must hold a whole number >= 0 per partition ({len(names)}), "
            f"got {short_repr(doc['logicalIDs'])}"
        )
    ids = [i.lstrip("0") or "0" for i in ids or ()]
    first: dict[str, int] = {}  # one unit, one logical ID: the first partition of each
    for k, (b, i) in enumerate(zip(backends, ids, strict=False)):
        j = min(first.setdefault(f"u{b}", k), first.setdefault(f"i{i}", k))
        if (backends[j] == b) != (ids[j] == i):
            raise PlanFileError(
                f"{where}: `logicalIDs` give {names[j]} on {backends[j]!r} and {names[k]} on "
                f"{b!r} {'one ID' if ids[j] == i else 'two IDs'}: one unit, one logical ID; make "
                "them agree with backendNames"
            )
    nodes: list[list[str]] = [[] for _ in names]
    for item in colon_list(doc["nodeToPartition"], "nodeToPartition", where):
        # `node-index` or `node-index-backend`; node names may contain '-'.
        bits = item.split("-")
        if len(bits) >= 3 and bits[-2].isdigit() and not bits[-1].isdigit():
            node, idx = "-".join(bits[:-2]), bits[-2]
        elif len(bits) >= 2 and bits[-1].isdigit():
            node, idx = "-".join(bits[:-1]), bits[-1]
        else:
            node, idx = "", ""
        if not node or not idx.isascii():
            raise PlanFileError(
                f"{where}: bad nodeToPartition item {short_repr(item)} (want node-index)"
            )
        if len(idx) > 9 or int(idx) >= len(names):
            raise PlanFileError(
                f"{where}: node {short_repr(node)} maps to partition {short_repr(idx)}, but "
                f"there are only {len(names)}"
            )
        said, on = bits[-1].lower(), backends[int(idx)].lower()  # 'VTA' for 'VTA-0' too
        if node != "-".join(bits[:-1]) and not on.startswith(said):
            raise PlanFileError(
                f"{where}: nodeToPartition item {short_repr(item)} names backend "
                f"{short_repr(bits[-1])}, but partition {idx} is on {backends[int(idx)]!r} "
                "(backendNames); make them agree"
            )
        nodes[int(idx)].append(node)
    parts = [
        PartitionSpec(n, b, tuple(ns))
        for n, b, ns in zip(names, backends, nodes, strict=True)
        if ns
    ]
    return PlanFile(
        partitions=parts,
        model=text_field(doc.get("funcName"), "funcName", where, ""),
        parallel=_parallel(doc, where, names, backends),
        source=where,
    )
