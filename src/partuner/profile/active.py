"""Which units a profile measures: those available here (or measured elsewhere), less those
that can run no node of the model."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from partuner.errors import UnitUnavailableError
from partuner.graph import ModelGraph
from partuner.units import Unit, UnitSet

__all__ = ["drop_idle_units", "resolve_units"]

log = logging.getLogger(__name__)


def resolve_units(
    units: UnitSet, remote: Mapping[str, str], skip_unavailable: bool
) -> tuple[dict[str, Unit], dict[str, str]]:
    """The units to profile (name -> unit) and those left out (name -> why): a unit not
    available here raises, unless ``skip_unavailable``; ``remote`` units count as available."""
    active: dict[str, Unit] = {}
    skipped: dict[str, str] = {}
    for name in remote:
        units[name]  # noqa: B018 - names the known units if unknown
    for name, unit in units.units.items():
        ok, why = (True, "") if name in remote else unit.availability()
        if ok:
            active[name] = unit
        elif skip_unavailable:
            skipped[name] = why
            log.warning("skipping unit %s: %s", name, why)
        else:
            raise UnitUnavailableError(
                f"unit {name!r} is not available here: {why}; remove it from the units file "
                "or pass --skip-unavailable"
            )
    if not active:
        raise UnitUnavailableError("no unit of the units file is available here")
    return active, skipped


def drop_idle_units(graph: ModelGraph, active: dict[str, Unit], skipped: dict[str, str]) -> None:
    """Leave out (with a warning, into ``skipped``) the units that can run no node of ``graph``:
    the plan is made without them."""
    nodes = graph.compute_nodes
    for name, unit in list(active.items()):
        if any(unit.supports(n, graph) for n in nodes):
            continue
        ops = ", ".join(sorted(unit.ops)) if unit.ops is not None else "every op"
        have = ", ".join(sorted({n.op_type for n in nodes}))
        why = f"it can run none of the model's {len(nodes)} nodes (its ops: {ops}; "
        why += f"the model has {have})"
        log.warning("unit %s: %s; planning without it", name, why)
        skipped[name] = why
        del active[name]
    if not active:
        raise UnitUnavailableError(
            "no unit of the units file can run any node of this model; add the model's op "
            "types to a unit's 'ops' list, or give a unit no 'ops' list (it then runs every op)"
        )
