"""``partuner export``: one ONNX file per partition, a manifest and the plan.

The legalizer options (``--opset``, ``--fold-constants``, ``--legal-names``,
``--external-data-threshold``) run ``partuner.export.legalize`` on every partition; the manifest
records the passes and the name maps (see ``docs/export.md``).
"""

from __future__ import annotations

import click

from partuner.cli import main
from partuner.cli.common import (
    WritePath,
    console,
    handle_errors,
    input_shape_option,
    load_graph_and_plan,
    model_argument,
    refuse_overwrite,
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
    "-o", "--output", required=True, type=WritePath(file_okay=False), help="Output folder."
)
@click.option(
    "--opset",
    type=click.IntRange(min=7),
    default=None,
    help="Convert partitions to this opset (7 to the newest the installed onnx knows).",
)
@click.option("--fold-constants", is_flag=True, help="Fold constant subgraphs into initializers.")
@click.option(
    "--legal-names",
    is_flag=True,
    help="Rename values and nodes to C identifiers (the manifest maps the old names).",
)
@click.option(
    "--external-data-threshold",
    type=click.IntRange(min=0),
    default=None,
    metavar="BYTES",
    help="Store weights of at least BYTES in a .data file beside each partition.",
)
@handle_errors
def export_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    output: str,
    opset: int | None,
    fold_constants: bool,
    legal_names: bool,
    external_data_threshold: int | None,
) -> None:
    """Cut MODEL along PLAN into standalone ONNX sub-models in OUTPUT."""
    from partuner.export import export_plan
    from partuner.export.legalize import LegalizeOptions, export_legalized
    from partuner.pipeline import check_plan_model, plan_from_file

    refuse_overwrite([model, plan_path, units_file], folder=output)
    g, pf = load_graph_and_plan(model, input_shapes, plan_path)
    if units_file:
        units = load_units_cli(units_file)
        plan_from_file(pf, g, units, runs=False)
        # the plan is checked against (and runs on) the units of the file given: written so
        pf.units = {u: units[u].spec() for u in dict.fromkeys(p.unit for p in pf.partitions)}
    else:
        check_plan_model(pf, g)
    options = LegalizeOptions(opset, fold_constants, legal_names, external_data_threshold)
    if not options.any:
        parts = export_plan(g, pf, output)
        many = "partition" if len(parts) == 1 else "partitions"
        console.print(f"wrote {len(parts)} {many}, manifest.json and plan.yaml to {output}")
        return
    parts, man = export_legalized(g, pf, output, options)
    passes = sorted({x for q in man["partitions"] for x in q["legalize"]["passes"]})
    folded = sum(q["legalize"]["folded_nodes"] for q in man["partitions"])
    renamed = len(man["legalize"]["value_names"])
    console.print(
        f"wrote {len(parts)} legalized partition{'' if len(parts) == 1 else 's'}, manifest.json "
        f"and plan.yaml to {output} "
        f"(passes: {', '.join(passes)}; {folded} nodes folded, {renamed} boundary values renamed)"
    )
