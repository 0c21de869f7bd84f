"""``partuner profile``: measure what every node costs on every unit, into the store."""

from __future__ import annotations

import datetime

import click
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    console,
    db_option,
    emit_json,
    fail,
    handle_errors,
    input_shape_option,
    json_option,
    load_graph,
    quiet_option,
    units_option,
)
from partuner.cli.stages import load_units_cli, profile_cli, unit_summary


@main.command("profile")
@click.argument("model", required=False, metavar="MODEL")
@input_shape_option
@units_option
@db_option
@click.option("--show", is_flag=True, help="List what the profile store holds.")
@click.option(
    "--budget",
    type=click.FloatRange(min=0.01),
    default=0.25,
    show_default=True,
    help="Seconds at most per timed item.",
)
@click.option("--skip-unavailable", is_flag=True, help="Profile the units that are available.")
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
    as_json: bool,
    quiet: bool,
) -> None:
    """Time every distinct node of MODEL on every unit (reusing the store), and the links."""
    from partuner.profile import ProfileStore

    if show:
        with ProfileStore(db) as store:
            rows = store.summary()
            if as_json:
                emit_json({"db": str(store.path), "units": rows})
                return
            console.print(f"profile store {store.path}")
            t = Table(show_edge=False)
            for c in ("fingerprint", "unit", "rows", "unsupported", "last"):
                t.add_column(c)
            for r in rows:
                last = datetime.datetime.fromtimestamp(r["last"]).isoformat(timespec="seconds")
                t.add_row(
                    r["fingerprint"], r["unit"][:60], str(r["rows"]), str(r["unsupported"]), last
                )
            console.print(t)
        return
    if model is None:
        fail("name a MODEL to profile, or pass --show to list the store")
    g = load_graph(model, input_shapes)
    us = load_units_cli(units_file)
    prof = profile_cli(g, us, db, quiet or as_json, skip_unavailable, budget)
    summary = unit_summary(prof)
    links = [
        {
            "a": a,
            "b": b,
            "latency_us": link.latency_us,
            "gbps": link.gbps,
            "source": prof.link_sources[(a, b)],
        }
        for (a, b), link in prof.links.items()
    ]
    if as_json:
        emit_json(
            {
                "model": g.source,
                "signatures": prof.signatures,
                "measured": prof.measured,
                "reused": prof.reused,
                "wall_s": prof.wall_s,
                "units": summary,
                "links": links,
                "skipped_units": prof.skipped_units,
                "unsupported": [list(x) for x in prof.unsupported],
            }
        )
        return
    console.print(
        f"{len(g.compute_nodes)} nodes, {prof.signatures} distinct signatures; "
        f"{prof.measured} timed, {prof.reused} reused from the store; "
        f"{prof.wall_s:.1f} s"
    )
    t = Table(show_edge=False)
    for c in (
        "unit",
        "per partition",
        "per MB crossing",
        "whole model",
        "sum of parts",
        "additivity error",
    ):
        t.add_column(c, justify="right" if c != "unit" else "left")
    for r in summary:
        label = " (modeled)" if r["modeled"] else ""
        err = r["additivity_error"]
        t.add_row(
            r["unit"] + label,
            f"{r['call_overhead_us']:.1f} us",
            f"{r['boundary_us_per_mb']:.1f} us",
            "-" if r["whole_model_ms"] is None else f"{r['whole_model_ms']:.3f} ms",
            "-" if r["sum_of_parts_ms"] is None else f"{r['sum_of_parts_ms']:.3f} ms",
            "-" if err is None or r["modeled"] else f"{100 * err:+.1f}%",
        )
    console.print(t)
    for link in links:
        console.print(
            f"  link {link['a']}-{link['b']}: {link['latency_us']:.1f} us + bytes / "
            f"{link['gbps']:g} GB/s ({link['source']})"
        )
    for node, unit, why in prof.unsupported[:10]:
        console.print(f"  [yellow]{unit} cannot run {node}[/yellow]: {why}")
