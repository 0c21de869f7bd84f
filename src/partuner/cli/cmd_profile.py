"""``partuner profile``: measure what every node (and fused group) costs on every unit, and the
links, into the store; write or import a kit for a remote target; NEST-C profile files."""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    FiniteRange,
    WritePath,
    check_fuse,
    console,
    db_option,
    emit_json,
    fail,
    handle_errors,
    input_shape_option,
    json_option,
    link_text,
    load_graph,
    progress_bar,
    quiet_option,
    skip_unavailable_option,
    units_option,
)
from partuner.cli.stages import busy_rows, load_units_cli, unit_summary


@main.command("profile")
@click.argument("model", required=False, metavar="MODEL")
@input_shape_option
@units_option
@db_option
@click.option("--show", is_flag=True, help="List what the profile store holds.")
@click.option(
    "--budget",
    type=FiniteRange(min=0.01),
    default=0.25,
    show_default=True,
    help="Seconds at most per timed item.",
)
@skip_unavailable_option
@click.option(
    "--fuse",
    multiple=True,
    metavar="PATTERN",
    help="Time chains of these op types as fused groups, e.g. Conv-Relu (repeatable); "
    "'auto' times every chain of 2..--fuse-max nodes and keeps those that differ.",
)
@click.option(
    "--fuse-max",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Longest chain --fuse auto tries.",
)
@click.option(
    "--profile-configs",
    type=click.Path(dir_okay=False),
    help="NEST-C profileConfigs.yaml: its fuseOperators patterns become --fuse patterns.",
)
@click.option(
    "--kit",
    type=click.Path(file_okay=False),
    help="Write a profiling kit for a remote target to this folder instead of profiling.",
)
@click.option(
    "--import",
    "import_path",
    type=click.Path(dir_okay=False),
    help="Load a kit's results.json (run on the target) into the store and show the profile.",
)
@click.option(
    "--export-nestc",
    type=WritePath(file_okay=False),
    help="Also write NEST-C profiles (initialProfile<UNIT>.yaml, fusedProfile<UNIT>.yaml) here.",
)
@click.option(
    "--import-nestc",
    type=click.Path(dir_okay=False),
    help="Load a NEST-C profile YAML into the store for --unit NAME.",
)
@click.option("--unit", "unit_name", help="The unit an --import-nestc profile was measured on.")
@click.option(
    "--corun-again",
    is_flag=True,
    help="Time the units side by side again (the 'beside others' factor plans are charged "
    "with), replacing the stored one: after it was timed while other work ran.",
)
@json_option
@quiet_option
@handle_errors
def profile_cmd(
    model: str | None,
    input_shapes: tuple[str, ...],
    units_file: str | None,
    db: str | None,
    show: bool,
    budget: float,
    skip_unavailable: bool,
    fuse: tuple[str, ...],
    fuse_max: int,
    profile_configs: str | None,
    kit: str | None,
    import_path: str | None,
    export_nestc: str | None,
    import_nestc: str | None,
    unit_name: str | None,
    corun_again: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Time every distinct node of MODEL on every unit (reusing the store), and the links."""
    from partuner.profile import ProfileStore, parse_pattern, parse_profile_configs

    if show:
        _show(db, as_json)
        return
    if model is None:
        fail("name a MODEL to profile, or pass --show to list the store")
    if bool(import_nestc) != bool(unit_name):
        fail("--import-nestc FILE and --unit NAME go together: name the unit it was measured on")
    if sum(bool(x) for x in (kit, import_path, import_nestc)) > 1:
        fail("pass one of --kit, --import and --import-nestc at a time")
    patterns = [parse_pattern(f) for f in fuse if f.lower() != "auto"]
    if profile_configs:
        patterns += parse_profile_configs(profile_configs)
    check_fuse(fuse)
    fuse_auto = fuse_max if any(f.lower() == "auto" for f in fuse) else 0
    g = load_graph(model, input_shapes)
    if kit:
        from partuner.profile.kit import write_kit

        us = load_units_cli(units_file)
        manifest = write_kit(g, us, kit, fuse=patterns, fuse_auto=fuse_auto, budget_s=budget)
        _report_kit(manifest, as_json, model, units_file)
        return
    # a wrong units file fails here, before the store is opened (and, if new, created)
    us = load_units_cli(units_file) if not import_path or units_file else None
    with ProfileStore(db) as store:
        if import_nestc:
            _import_nestc(store, g, us, import_nestc, unit_name, as_json)
            return
        from partuner.profile.remote import resolve_remote

        extra: dict[str, Any] = {}
        imported: dict[str, str] = {}
        if import_path:
            us, imported, extra["link_sizes"] = _import_kit(
                store, g, import_path, us, quiet or as_json
            )
        remote = {**resolve_remote(store, us, g), **imported}
        prof = _run_profile(
            g,
            us,
            store,
            quiet or as_json,
            budget=budget,
            skip_unavailable=skip_unavailable,
            remote=remote,
            fuse=patterns,
            fuse_auto=fuse_auto,
            corun_again=corun_again,
            **extra,
        )
    files: list[str] = []
    extra_json = {"units_file": {"units": _remote_specs(us, imported)}} if imported else {}
    if export_nestc:
        from partuner.profile.nestc import export_nestc as write_nestc

        files = [str(p) for p in write_nestc(prof, g, export_nestc)]
    _render(g, prof, files, as_json, extra_json)


def _remote_specs(us: Any, imported: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The units-file entries that mark the imported units remote (``remote: true``)."""
    out = {}
    for name in imported:
        spec = {k: v for k, v in us[name].spec().items() if k != "remote"}
        out[name] = {**spec, "remote": True}
    return out


def _import_kit(
    store: Any, g: Any, path: str, given: Any, quiet: bool
) -> tuple[Any, dict[str, str], list[int]]:
    """Load a kit's results: the units (the file's, else rebuilt as remote units from the
    results), unit name -> the target's fingerprint, and the link sizes measured. Says what to
    put in a units file."""
    import yaml

    from partuner.profile.kit import import_results
    from partuner.units import units_from_mapping

    imp = import_results(store, g, path, given)  # `given`: the units file's units, or None
    if given is None:
        specs = {
            n: {**{k: v for k, v in spec.items() if k != "remote"}, "remote": {"fingerprint": fp}}
            for n, spec in imp.specs.items()
            for fp in [imp.fingerprints[n]]
        }
        us = units_from_mapping({"units": specs}, source=path)
    else:
        us = given
        for name, fp in imp.fingerprints.items():
            if us[name].remote is not None:
                us[name].remote = {"fingerprint": fp}
    if not quiet:
        console.print(
            f"imported {imp.rows} measurements of {len(imp.fingerprints)} unit(s) measured on "
            f"{imp.host}, {imp.links} link(s)"
        )
        console.print(
            "to plan and export with these measurements (partuner plan/export --units FILE), "
            "mark the units remote in the units file:"
        )
        lines = ["units:"]
        for name, spec in _remote_specs(us, imp.fingerprints).items():
            flow = yaml.safe_dump(spec, default_flow_style=True, sort_keys=False, width=10**6)
            lines.append(f"  {name}: {flow.strip()}")
        console.print("\n".join(lines), markup=False, highlight=False)
    return us, dict(imp.fingerprints), imp.sizes


def _run_profile(g: Any, us: Any, store: Any, quiet: bool, **kw: Any) -> Any:
    from partuner.profile import profile_model

    budget = kw.pop("budget")
    with progress_bar("profiling", quiet) as cb:
        return profile_model(g, us, store=store, progress=cb, budget_s=budget, corun=True, **kw)


def _show(db: str | None, as_json: bool) -> None:
    from partuner.profile import ProfileStore, default_db_path

    path = Path(db) if db else default_db_path()
    if not path.exists():  # looking creates nothing
        if as_json:
            emit_json({"db": str(path), "units": []})
        else:
            console.print(f"no profile store at {path} yet: nothing profiled there")
        return
    with ProfileStore(path) as store:
        rows = store.summary()
        if as_json:
            emit_json({"db": str(store.path), "units": rows})
            return
        console.print(f"profile store {store.path}")
        t = Table(show_edge=False)
        cols = ("fingerprint", "unit", "backend", "rows", "unsupported", "failed", "busy", "last")
        for c in cols:
            t.add_column(c)
        for r in rows:
            when = r["last"]
            last = "-" if when is None else datetime.datetime.fromtimestamp(when).isoformat()[:19]
            t.add_row(
                r["fingerprint"],
                r["unit"][:60],
                r["backend"] or "-",
                str(r["rows"]),
                str(r["unsupported"]),
                str(r["failed"]),
                str(r["busy"]),
                last,
            )
        console.print(t)
        if any(r["busy"] for r in rows):
            console.print(
                "busy: rows timed while other work took more than a quarter of the machine's "
                "cores; the next profiling run of a model that uses them times them again"
            )


def _report_kit(manifest: Path, as_json: bool, model: str, units_file: str | None) -> None:
    import json

    data = json.loads(manifest.read_text(encoding="utf-8"))
    kinds: dict[str, int] = {}
    for item in data["items"]:
        kinds[item["kind"]] = kinds.get(item["kind"], 0) + 1
    folder = manifest.parent
    if as_json:
        emit_json(
            {
                "kit": str(folder),
                "digest": data["digest"],
                "units": [u["name"] for u in data["units"]],
                "items": kinds,
            }
        )
        return
    what = ", ".join(f"{n} {k}" for k, n in kinds.items())
    console.print(
        f"wrote the profiling kit {folder} ({what}; units {[u['name'] for u in data['units']]})"
    )
    units = f" --units {units_file}" if units_file else ""
    console.print(
        f"on the target: python {folder / 'run_profile.py'}; then here: partuner profile "
        f"{model}{units} --import {folder / 'results.json'}"
    )


def _import_nestc(
    store: Any, g: Any, us: Any, path: str, unit_name: str | None, as_json: bool
) -> None:
    from partuner.profile.nestc import import_nestc

    unit = us[unit_name]  # unknown names raise UnitError naming the known ones
    imp = import_nestc(store, path, g, unit.fingerprint(), description=str(unit.describe()))
    # units of one backend and settings share their measurements (one fingerprint, one row);
    # only units of the same kind can (no other unit's backend or cluster is asked)
    fp = unit.fingerprint()
    same_kind = [u for u in us if u.name != unit.name and type(u) is type(unit)]
    shared = [u.name for u in same_kind if u.fingerprint() == fp]
    if as_json:
        emit_json(
            {
                "unit": unit.name,
                "shared_with": shared,
                "fingerprint": fp,
                "backend_name": imp.backend,
                "rows": imp.rows,
                "matched": imp.matched,
                "unmatched": imp.unmatched,
            }
        )
        return
    console.print(
        f"imported {len(imp.matched)} NEST-C keys ({imp.rows} signatures) for unit {unit.name}; "
        f"{len(imp.unmatched)} keys match no node of {g.source}"
    )
    if shared:
        console.print(
            f"{unit.name} shares its measurements with {', '.join(shared)} (the same backend "
            "and settings, one fingerprint): their costs are these now too"
        )
    for key in imp.unmatched[:10]:
        console.print(f"  [yellow]unmatched[/yellow] {key}")


def _links(prof: Any) -> list[dict[str, Any]]:
    out = []
    for (a, b), link in prof.links.items():
        row: dict[str, Any] = {
            "a": a,
            "b": b,
            "latency_us": link.latency_us,
            "gbps": link.gbps,  # null in JSON when zero-copy
            "zero_copy": math.isinf(link.gbps),
            "source": prof.link_sources[(a, b)],
        }
        fit = prof.link_fits.get((a, b))
        if fit is not None:
            row["points"] = fit.describe()["points"]
        out.append(row)
    return out


def _render(
    g: Any, prof: Any, files: list[str], as_json: bool, extra: dict[str, Any] | None = None
) -> None:
    summary = unit_summary(prof)
    for r in summary:
        r["fused_additivity_error"] = prof.units[r["unit"]].fused_additivity_error
    links = _links(prof)
    groups = [{"nodes": list(m), "cost_us": c} for m, c in prof.groups]
    if as_json:
        emit_json(
            {
                "model": g.source,
                "signatures": prof.signatures,
                "group_signatures": prof.group_signatures,
                "measured": prof.measured,
                "reused": prof.reused,
                "timed_again": prof.again,
                "links_measured": prof.links_measured,
                "wall_s": prof.wall_s,
                "units": summary,
                "links": links,
                "groups": groups,
                "remote": prof.remote,
                "skipped_units": prof.skipped_units,
                "unsupported": [list(x) for x in prof.unsupported],
                "failed": [list(x) for x in prof.failed],
                "busy": busy_rows(prof),
                "nestc_files": files,
                **(extra or {}),
            }
        )
        return
    console.print(
        f"{len(g.compute_nodes)} nodes, {prof.signatures} distinct signatures; "
        f"{prof.measured} timed"
        + (
            f" ({prof.again} again: stored from a busy machine or before loads were noted)"
            if prof.again
            else ""
        )
        + f", {prof.reused} reused from the store; {prof.wall_s:.1f} s"
    )
    if prof.group_signatures:
        console.print(
            f"{prof.group_signatures} distinct fused groups timed, kept at {prof.groups_kept} "
            f"places in the model; {len(groups)} discount the planner's costs (units costed in "
            "context have fusion in their node costs already)"
        )
    t = Table(show_edge=False)
    cols = ("unit", "per partition", "per MB in", "per MB out", "whole model", "sum of parts")
    for c in (*cols, "additivity error", "with groups", "in context", "costs", "beside others"):
        t.add_column(c, justify="right" if c != "unit" else "left")
    for r in summary:
        label = " (modeled)" if r["modeled"] else ""
        if r["ray_call_us"]:  # profiled on its Ray node; a call from here through Ray
            label += f" (Ray node; {r['ray_call_us']:.0f} us a call)"
        elif r["unit"] in prof.remote:
            label += " (remote)"
        t.add_row(
            r["unit"] + label,
            f"{r['call_overhead_us']:.1f} us",
            f"{r['boundary_us_per_mb']:.1f} us",
            f"{r['boundary_out_us_per_mb']:.1f} us",
            *(_ms(r[k]) for k in ("whole_model_ms", "sum_of_parts_ms")),
            _pct(None if r["modeled"] else r["additivity_error"]),
            _pct(None if r["modeled"] else r["fused_additivity_error"]),
            _pct(r["in_context_additivity_error"]),
            r["costs_from"],
            "-" if r["corun_factor"] is None else f"x{r['corun_factor']:.3f}",
        )
    console.print(t)
    if any(r["corun_factor"] is not None for r in summary):
        console.print(
            "beside others: a unit's run time while the other units run theirs at once, over "
            "its time alone (shared caches and memory; plans charge it where units run at once)"
        )
    for r in summary:
        if r["regions"]:
            _render_regions(r["unit"], r["regions"])
    ray = {r["unit"] for r in summary if r["ray_call_us"]}
    for link in links:
        how = link["source"]
        if ray & {link["a"], link["b"]}:
            how += ": a hand-off here; what Ray moves is in the Ray unit's per-MB costs"
        console.print(link_text(link["a"], link["b"], link["latency_us"], link["gbps"], how))
    for node, unit, why in prof.unsupported[:10]:
        console.print(f"  [yellow]{unit} cannot run {node}[/yellow]: {why}")
    for node, unit, why in prof.failed[:10]:
        again = "(timed again next run)"
        console.print(f"  [yellow]{unit} could not time {node}[/yellow] {again}: {why}")
    for f in files:
        console.print(f"wrote {f}")


def _render_regions(unit: str, regions: list[dict[str, Any]], shown: int = 12) -> None:
    """The regions of a unit that runs only part of the model, each timed as one sub-model."""
    console.print(
        f"unit {unit} runs only part of the model: {len(regions)} region(s) of nodes it runs, "
        "each timed as one sub-model, with the backend's per-layer profile in context (its "
        "kernels + a no-op call against the profiled runs' own time: the additivity error)"
    )
    t = Table(show_edge=False)
    cols = ("region", "nodes", "whole", "in context", "profiled runs", "additivity error", "costs")
    for c in cols:
        t.add_column(c, justify="left" if c in ("region", "costs") else "right")
    big = sorted(regions, key=lambda r: -r["nodes"])[:shown]
    for r in sorted(big, key=regions.index):
        first, last = r["first"], r["last"]
        t.add_row(
            first if r["nodes"] == 1 else f"{first}..{last}",
            str(r["nodes"]),
            "-" if r["whole_ms"] is None else f"{r['whole_ms']:.3f} ms",
            "-" if r["in_context_parts_ms"] is None else f"{r['in_context_parts_ms']:.3f} ms",
            "-" if r.get("profiled_runs_ms") is None else f"{r['profiled_runs_ms']:.3f} ms",
            _pct(r["additivity_error"]),
            r["costs_from"] + (f": {r['reason']}" if r["reason"] else ""),
        )
    console.print(t)
    if len(regions) > shown:
        console.print(f"  ... and {len(regions) - shown} smaller region(s) (--json lists all)")


def _ms(value: float | None) -> str:
    """A model time, "-" when none was taken, "cannot run" where an ops list leaves nodes out."""
    return "-" if value is None else "cannot run" if math.isinf(value) else f"{value:.3f} ms"


def _pct(err: float | None) -> str:
    return "-" if err is None else f"{100 * err:+.1f}%"
