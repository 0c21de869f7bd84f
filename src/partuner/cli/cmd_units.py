"""``partuner units``: the processing units a plan may use."""

from __future__ import annotations

from rich.table import Table

from partuner.cli import main
from partuner.cli.common import console, emit_json, handle_errors, json_option, units_option
from partuner.cli.stages import load_units_cli


@main.command("units")
@units_option
@json_option
@handle_errors
def units_cmd(units_file: str | None, as_json: bool) -> None:
    """List the units (from --units FILE or the local default) and whether each is available."""
    us = load_units_cli(units_file)
    rows = []
    for name, unit in us.units.items():
        ok, why = unit.availability()
        rows.append(
            {
                "name": name,
                "backend": unit.backend,
                "precision": unit.precision,
                "modeled": unit.modeled,
                "available": ok,
                "reason": why,
                "options": unit.describe(),
            }
        )
    links = []
    names = list(us.units)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            link = us.link(a, b)
            links.append(
                {
                    "a": a,
                    "b": b,
                    "latency_us": link.latency_us,
                    "gbps": link.gbps,
                    "declared": frozenset((a, b)) in us.declared_links,
                }
            )
    if as_json:
        emit_json({"source": str(us.source), "units": rows, "links": links})
        return
    t = Table(title=f"units ({us.source})", show_edge=False)
    for col in ("unit", "backend", "precision", "available", "note"):
        t.add_column(col)
    for r in rows:
        note = (
            r["reason"]
            if not r["available"]
            else ("modeled: times are computed" if r["modeled"] else "")
        )
        t.add_row(
            r["name"],
            r["backend"],
            r["precision"],
            "yes" if r["available"] else "[red]no[/red]",
            note,
        )
    console.print(t)
    for link in links:
        how = "declared" if link["declared"] else "default (measured at profile time for "
        how += "" if link["declared"] else "units sharing host memory)"
        console.print(
            f"  link {link['a']}-{link['b']}: {link['latency_us']:g} us + "
            f"bytes / {link['gbps']:g} GB/s ({how})"
        )
