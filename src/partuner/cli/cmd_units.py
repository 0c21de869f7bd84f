"""``partuner units``: the processing units a plan may use."""

from __future__ import annotations

import logging
from typing import Any

from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    console,
    db_option,
    emit_json,
    handle_errors,
    json_option,
    link_text,
    units_option,
)
from partuner.cli.stages import load_units_cli
from partuner.errors import PartunerError
from partuner.units import DEFAULT_LINK

log = logging.getLogger(__name__)


def _remote_sources(us: Any, db: str | None) -> dict[str, str]:
    """For each remote unit: where its measurements come from (the kit imports recorded)."""
    remote = [u for u in us if u.remote is not None]
    if not remote:
        return {}
    from pathlib import Path

    from partuner.profile import ProfileStore, default_db_path
    from partuner.profile.remote import find_targets

    out = {}
    path = Path(db) if db else default_db_path()
    # looking creates nothing: with no store there, a store of no rows says the same
    with ProfileStore(path if path.is_file() else ":memory:") as store:
        for unit in remote:
            found = find_targets(store, unit)
            fp = unit.remote.get("fingerprint")
            if len(found) == 1:
                out[unit.name] = f"remote: {found[0].describe()}"
            elif found:
                which = ", ".join(f"{t.fingerprint} on {t.host}" for t in found)
                out[unit.name] = (
                    f"remote: measured on {len(found)} targets ({which}); pick one with "
                    "remote: {fingerprint: FP}"
                )
            elif fp:
                out[unit.name] = f"remote: measurements stored as {fp} (no kit import recorded)"
            else:
                out[unit.name] = (
                    "remote: no kit results imported yet; run the kit on the target and "
                    "partuner profile MODEL --import RESULTS"
                )
    return out


def _stored_links(us: Any, db: str | None, rows: list[dict[str, Any]]) -> dict[frozenset, Any]:
    """The links between real units (local ones, and remote ones whose kit results name one
    target) that an earlier profiling run measured or a kit import stored (read only: nothing
    is timed, and no store is created where there is none)."""
    from pathlib import Path

    from partuner.profile import ProfileStore, default_db_path
    from partuner.profile.remote import find_targets
    from partuner.profile.transfer import profile_links, stored_sizes

    path = Path(db) if db else default_db_path()
    real = [r["name"] for r in rows if r["available"] and not (r["modeled"] or r["ray_node"])]
    remote = [r["name"] for r in rows if r["remote"]]
    if len(real) + len(remote) < 2 or not path.is_file():
        return {}
    try:
        with ProfileStore(path) as store:
            fps = {n: us[n].fingerprint() for n in real}
            for n in remote:  # the target its measurements come from, where there is one
                pinned = us[n].remote.get("fingerprint")
                found = [t.fingerprint for t in find_targets(store, us[n])]
                if pinned or len(found) == 1:
                    fps[n] = pinned or found[0]
            names = [n for n in us.units if n in fps]
            out = {}
            for i, a in enumerate(names):  # each pair at the sizes it was measured at
                for b in names[i + 1 :]:
                    sizes = stored_sizes(store, fps[a], fps[b])
                    if len(sizes) < 2:
                        continue
                    found = profile_links(us, [a, b], fps, set(), {}, store, sizes=sizes)
                    if found.sources[(a, b)] == "measured":
                        out[frozenset((a, b))] = found.links[(a, b)]
    except PartunerError as exc:  # a store that cannot be read: the links as declared
        log.warning("the links measured before are not shown: %s", exc)
        return {}
    return out


def _cluster(us: Any) -> dict[str, Any] | None:
    """The units file's Ray cluster: reachable or why not, and its live nodes."""
    if us.ray is None:
        return None
    from partuner.errors import UnitUnavailableError

    try:
        nodes = us.ray.nodes()
    except UnitUnavailableError as exc:
        return {"address": us.ray.address, "reachable": False, "reason": str(exc), "nodes": []}
    return {"address": us.ray.address, "reachable": True, "reason": "", "nodes": nodes}


def _ops_text(ops: list[str] | None, shown: int = 3) -> str:
    """What a unit's ``ops`` list lets it run, short: ``every op``, or ``N ops: A, B, ...``.

    >>> _ops_text(None), _ops_text(["Conv", "Relu"]), _ops_text(list("abcdef"))
    ('every op', '2 ops: Conv, Relu', '6 ops: a, b, c, ...')
    """
    if ops is None:
        return "every op"
    more = ", ..." if len(ops) > shown else ""
    return f"{len(ops)} op{'' if len(ops) == 1 else 's'}: {', '.join(ops[:shown])}{more}"


def _cores_text(row: dict[str, Any]) -> str:
    """A unit's declared cores: ``0,1``; ``any`` where it declares none; ``-`` for a modeled
    unit (its host runs say nothing of the device it stands for)."""
    if row["modeled"]:
        return "-"
    return "any" if row["cores"] is None else ",".join(map(str, row["cores"]))


@main.command("units")
@units_option
@db_option
@json_option
@handle_errors
def units_cmd(units_file: str | None, db: str | None, as_json: bool) -> None:
    """List the units (from --units FILE or the local default) and whether each is available;
    for remote units, where their measurements come from, and the links between units as
    profiling measured them (the profile store, --db)."""
    us = load_units_cli(units_file)
    sources = _remote_sources(us, db)
    rows = []
    for name, unit in us.units.items():
        ok, why = unit.availability()
        if name in sources:
            why = sources[name]
        rows.append(
            {
                "name": name,
                "backend": unit.backend,
                "precision": unit.precision,
                "modeled": unit.modeled,
                "remote": unit.remote is not None,
                "available": ok,
                "reason": why,
                "options": unit.describe(),
                "ray_node": unit.node() if hasattr(unit, "placement") else None,
                "cores": None if (c := getattr(unit, "inner", unit).cores) is None else list(c),
                "ops": None if unit.ops is None else sorted(unit.ops),
            }
        )
    links = []
    names = list(us.units)
    stored = _stored_links(us, db, rows)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            link = stored.get(frozenset((a, b))) or us.link(a, b)
            links.append(
                {
                    "a": a,
                    "b": b,
                    "latency_us": link.latency_us,
                    "gbps": link.gbps,
                    "declared": frozenset((a, b)) in us.declared_links,
                    "measured": frozenset((a, b)) in stored,
                }
            )
    cluster = _cluster(us)
    if as_json:
        out = {"source": str(us.source), "units": rows, "links": links}
        if cluster is not None:
            out["ray"] = cluster
        emit_json(out)
        return
    t = Table(title=f"units ({us.source})", show_edge=False)
    for col in ("unit", "backend", "precision", "cores", "runs", "available", "note"):
        t.add_column(col, no_wrap=col != "note")
    for r in rows:
        note = (
            r["reason"]
            if not r["available"]
            else ("modeled: times are computed, not measured" if r["modeled"] else "")
        )
        if r["available"] and r["ray_node"]:
            note = f"on Ray node {r['ray_node']}"
        t.add_row(
            r["name"],
            r["backend"],
            r["precision"],
            _cores_text(r),
            _ops_text(r["ops"]),
            "yes" if r["available"] else ("remote" if r["remote"] else "[red]no[/red]"),
            note,
        )
    console.print(t)
    if cluster is not None:
        if cluster["reachable"]:
            console.print(
                f"  Ray cluster {cluster['address']}: reachable, {len(cluster['nodes'])} node(s)"
            )
            for n in cluster["nodes"]:
                res = ", ".join(f"{k}: {v:g}" for k, v in sorted(n["resources"].items()))
                console.print(f"    node {n['id'][:8]} ({n['ip']}): {res or 'no custom resources'}")
        else:
            console.print(
                f"  Ray cluster {cluster['address']}: [red]unreachable[/red]: {cluster['reason']}"
            )
    ray = {r["name"] for r in rows if r["ray_node"]}
    apart = {r["name"] for r in rows if r["modeled"] or r["remote"]}  # no hand-off to measure
    default = "partuner's default link" if us.default_link == DEFAULT_LINK else "the default link"
    for link in links:
        pair = {link["a"], link["b"]}
        if link["declared"]:
            how = "declared"
        elif link["measured"]:
            how = "measured by an earlier profiling run, as stored"
        elif ray & pair:
            how = "default (measured at profile time for a Ray unit: a hand-off here, and what "
            how += "Ray moves per MB)"
        elif apart & pair:
            how = f"{default}, used as is"
        else:
            how = f"{default} until profiling measures the hand-off between these units"
        console.print(link_text(link["a"], link["b"], link["latency_us"], link["gbps"], how))
