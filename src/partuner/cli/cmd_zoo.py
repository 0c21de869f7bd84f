"""``partuner zoo``: write a built-in demo model."""

from __future__ import annotations

from pathlib import Path

import click

from partuner.cli import main
from partuner.cli.common import SEED, WritePath, console, fail, handle_errors


@main.command("zoo")
@click.argument("name", required=False)
@click.option("-o", "--output", type=WritePath(dir_okay=False), help="Where to write the ONNX.")
@click.option("--image-size", type=click.IntRange(min=16), default=224, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Weights' random seed.")
@click.option("--list", "list_", is_flag=True, help="List the demo models.")
@handle_errors
def zoo_cmd(name: str | None, output: str | None, image_size: int, seed: int, list_: bool) -> None:
    """Write the demo model NAME (built here, seeded weights, no download) to -o FILE."""
    from partuner.graph import zoo

    if list_ or name is None:
        for n in zoo.NAMES:
            console.print(n)
        return
    if output is None:
        fail("say where to write the model: partuner zoo NAME -o FILE.onnx")
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    zoo.save(name, output, image_size=image_size, seed=seed)
    console.print(f"wrote {output}")
