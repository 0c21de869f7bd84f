"""``partuner export``: one ONNX file per partition, a manifest and the plan."""

from __future__ import annotations

import click

from partuner.cli import main
from partuner.cli.common import (
    console,
    handle_errors,
    input_shape_option,
    load_graph,
    model_argument,
    units_option,
)
from partuner.cli.stages import load_units_cli


@main.command("export")
@model_argument
@input_shape_option
@click.option(
    "--plan",
    "plan_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="A plan YAML (partuner's or NEST-C's).",
)
@units_option
@click.option(
    "-o", "--output", required=True, type=click.Path(file_okay=False), help="Output folder."
)
@handle_errors
def export_cmd(
    model: str, input_shapes: tuple[str, ...], plan_path: str, units_file: str | None, output: str
) -> None:
    """Cut MODEL along PLAN into standalone ONNX sub-models in OUTPUT."""
    from partuner.export import export_plan, read_plan
    from partuner.pipeline import plan_from_file

    g = load_graph(model, input_shapes)
    pf = read_plan(plan_path)
    if units_file:
        plan_from_file(pf, g, load_units_cli(units_file))
    parts = export_plan(g, pf, output)
    console.print(f"wrote {len(parts)} partitions, manifest.json and plan.yaml to {output}")
