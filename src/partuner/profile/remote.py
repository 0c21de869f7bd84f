"""Remote units: which imported kit measurements a ``remote: true`` unit of a units file uses.

``partuner profile MODEL --import RESULTS`` stores a kit's measurements under the fingerprints
the units have on the board (``profile/kit.py``) and, per unit, a *target record*: the row
``(board fingerprint, __target__#<unit name>)`` whose ``detail`` holds the board's host, backend
version and the unit's fingerprint fields. A unit marked ``remote: true`` in a units file is
resolved from these records (:func:`resolve_remote`): the record with its name whose fields
match its definition (its fingerprint recomputed for that board is the recorded one) and that
holds the model's measurements. ``remote: {fingerprint: FP}`` names the target directly.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partuner.errors import ProfileError
from partuner.graph import ModelGraph
from partuner.profile.kit_runner import fingerprint as target_fingerprint
from partuner.profile.signature import node_signature
from partuner.profile.store import Measurement, ProfileStore
from partuner.units import Unit, UnitSet

__all__ = [
    "TARGET_SIG",
    "Target",
    "find_targets",
    "record_target",
    "resolve_remote",
    "unit_fields",
]

log = logging.getLogger(__name__)

#: The store row that records where a remote unit's measurements come from.
TARGET_SIG = "__target__#{}"


@dataclass(frozen=True)
class Target:
    """A unit as measured on a target by a profiling kit (what ``--import`` recorded)."""

    unit: str  # the unit's name in the kit
    fingerprint: str  # its fingerprint on the target
    host: str  # the target's CPU model
    backend_version: str
    results: str  # the results file imported

    def describe(self) -> str:
        return f"measured on {self.host} ({self.fingerprint}, imported from {self.results})"


def unit_fields(unit: Unit) -> dict[str, Any]:
    """What a unit's fingerprint is computed from, less the backend version and host."""
    speed = json.loads(json.dumps(unit._speed_options(), default=str))
    return {
        "backend": unit.backend,
        "precision": unit.precision,
        "speed": speed,
        "tag": unit._fingerprint_tag(),
        "host_dependent": unit.host_dependent,
    }


def record_target(store: ProfileStore, target: Target, fields: dict[str, Any]) -> None:
    """Store ``target`` (with the unit's fingerprint ``fields``) as a target record."""
    detail = {
        "host": target.host,
        "backend_version": target.backend_version,
        "results": target.results,
        "fields": fields,
    }
    row = Measurement(0.0, 0.0, 0.0, 0, "ok", json.dumps(detail, sort_keys=True))
    store.put(target.fingerprint, TARGET_SIG.format(target.unit), row)


def _matches(unit: Unit, fields: dict[str, Any], version: str, host: str, fp: str) -> bool:
    """Whether ``unit``, measured on ``host`` with backend ``version``, has fingerprint ``fp``."""
    local = unit_fields(unit)
    speed = fields.get("speed")
    if isinstance(speed, dict) and "device_name" in speed:  # the board's device, not ours
        local["speed"] = dict(local["speed"], device_name=speed["device_name"])
    return target_fingerprint(local, version, host) == fp


def find_targets(store: ProfileStore, unit: Unit) -> list[Target]:
    """The target records for ``unit``: those under its name whose fingerprint its definition
    gives on that target, or, for a unit with ``remote: {fingerprint: FP}``, those of ``FP``."""
    pinned = (unit.remote or {}).get("fingerprint")
    out = []
    for row in store.summary():
        fp = str(row["fingerprint"])
        if pinned and fp != pinned:
            continue
        m = store.get(fp, TARGET_SIG.format(unit.name))
        try:
            rec = json.loads(m.detail) if m is not None else None
            host, version = str(rec["host"]), str(rec["backend_version"])
            fields, results = rec["fields"], str(rec["results"])
        except (ValueError, TypeError, KeyError):
            continue
        if pinned or _matches(unit, fields, version, host, fp):
            out.append(Target(unit.name, fp, host, version, results))
    return out


def _holds_model(store: ProfileStore, fp: str, unit: Unit, graph: ModelGraph) -> bool:
    sigs = {node_signature(graph, n) for n in graph.compute_nodes if unit.supports(n, graph)}
    return all(store.get(fp, s) is not None for s in sigs)


def resolve_remote(
    store: ProfileStore, units: UnitSet, graph: ModelGraph | None = None
) -> dict[str, str]:
    """Unit name -> target fingerprint for every remote unit of ``units``, for
    ``profile_model(..., remote=...)``. A ``remote: true`` unit takes the one target record of
    its name and definition (holding ``graph``'s measurements when a graph is given) and is
    pinned to it: its ``fingerprint()`` becomes the target's from then on.

    Raises
    ------
    ProfileError : a remote unit with no imported measurements (for ``graph``), or with
        measurements from several targets (the message says how to pick one).
    """
    out: dict[str, str] = {}
    for unit in units:
        if unit.remote is None:
            continue
        pinned = unit.remote.get("fingerprint")
        if pinned:
            found = [Target(unit.name, pinned, "?", "?", "?")]
        else:
            found = find_targets(store, unit)
        if graph is not None:
            found = [t for t in found if _holds_model(store, t.fingerprint, unit, graph)]
        if not found:
            model = Path(graph.source).name if graph is not None else "MODEL"
            raise ProfileError(
                f"remote unit {unit.name!r}{' (' + pinned + ')' if pinned else ''} has no "
                "imported measurements"
                f"{' for ' + model if graph is not None else ''} in {store.path}; write a kit "
                f"(partuner profile {model} --units UNITS --kit DIR), run DIR/run_profile.py on "
                f"the target, then partuner profile {model} --import DIR/results.json"
            )
        if len(found) > 1:
            which = ", ".join(f"{t.fingerprint} on {t.host}" for t in found)
            raise ProfileError(
                f"remote unit {unit.name!r} has imported measurements from {len(found)} targets "
                f"({which}); pick one in the units file: "
                f"remote: {{fingerprint: {found[0].fingerprint}}}"
            )
        unit.remote = {"fingerprint": found[0].fingerprint}
        out[unit.name] = found[0].fingerprint
        if not pinned:
            log.info("remote unit %s: %s", unit.name, found[0].describe())
    return out
