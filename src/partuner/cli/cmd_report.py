"""``partuner report``: run a plan and write a static HTML page (Gantt chart, partitions, check)."""

from __future__ import annotations

from pathlib import Path

import click

from partuner.cli import main
from partuner.cli.cmd_run import (
    _off_prediction,
    _print_fallbacks,
    _with_common,
    execute,
    timeline,
)
from partuner.cli.common import (
    WritePath,
    console,
    count_of,
    emit_json,
    handle_errors,
    json_option,
    refuse_overwrite,
    repeat_option,
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"


@main.command("report")
@_with_common
@click.option(
    "-o",
    "--output",
    type=WritePath(dir_okay=False),
    default="report.html",
    show_default=True,
    help="The HTML file to write.",
)
@repeat_option(10, "Runs of the plan to time (the median is reported).")
@json_option
@handle_errors
def report_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    seed: int,
    timeout: float,
    fallback: str | None,
    output: str,
    repeat: int,
    as_json: bool,
) -> None:
    """Run MODEL as PLAN's partitions and write an HTML report: predicted vs measured timeline
    per unit, the partition table and the output check. Exits 1 when the check fails."""
    from partuner.export import atomic_write
    from partuner.report import render_report

    refuse_overwrite([model, plan_path, units_file], [output], specs=inputs)
    r, ran = execute(
        model, input_shapes, plan_path, units_file, inputs, repeat, seed, timeout, fallback
    )
    pred, meas, ph, mh = timeline(ran)
    units = [u for u in ran.units.names if u in {s.unit for s in (*pred, *meas)}]
    rows = [
        {
            "name": p.name,
            "unit": p.unit
            if ran.ran_units[p.name] == p.unit
            else f"{p.unit} -> {ran.ran_units[p.name]}",
            "nodes": len(p.nodes),
            "predicted_start_ms": p.start_us / 1e3,
            "predicted_ms": r["partition_ms"][p.name]["predicted"],
            "measured_ms": r["partition_ms"][p.name]["measured"],
        }
        for p in ran.plan.partitions
    ]
    measured = "not measurable (modeled units)" if r["modeled"] else _ms(r["measured_ms"])
    summary = {
        "model": r["model"],
        "plan": f"{plan_path} ({ran.plan.scheduler}, {ran.plan.status})",
        "units": ", ".join(r["units"]),
        "partitions": r["partitions"],
        "predicted latency": _ms(r["predicted_ms"]) + (" (modeled)" if r["modeled"] else ""),
        "measured latency (median)": measured,
        "measured p10 / p90": f"{_ms(r['measured_p10_ms'])} / {_ms(r['measured_p90_ms'])}",
        "runs": r["runs"],
    }
    r["note"] = _off_prediction(r)  # as `run --json` says it
    notes = [
        f"partition {n}: unit {f['planned']} could not run it here; it ran on {f['ran_on']}"
        for n, f in r["fallback"].items()
    ] + ([r["note"]] if r["note"] else [])
    page = render_report(
        title=f"partuner report: {Path(r['model']).name}",
        summary=summary,
        predicted=pred,
        measured=meas,
        units=units,
        partitions=rows,
        check=r["check"],
        transfers={"predicted": ph, "measured": mh},
        notes=notes,
    )
    atomic_write(output, page)
    if as_json:  # what `run --json` prints, and the page written
        emit_json({"report": str(output), **r})
        if not r["check"]["passed"]:
            raise SystemExit(1)
        return
    _print_fallbacks(r)
    verdict = "passed" if r["check"]["passed"] else "FAILED"
    console.print(
        f"wrote {output}: {count_of(r['partitions'], 'partition')}, measured {measured}, predicted "
        f"{_ms(r['predicted_ms'])}, check {verdict}"
    )
    if not r["check"]["passed"]:
        raise SystemExit(1)
