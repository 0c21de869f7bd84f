"""The ``partuner`` command line: thin commands that parse, call the library, and render."""

from __future__ import annotations

import click

from partuner import __version__
from partuner.cli.common import setup_logging

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="partuner")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """Profile, plan, partition and concurrently run ONNX models across processing units.

    Start with `partuner tune MODEL` (or `partuner tune zoo:googlenet`).
    """
    setup_logging(verbose)


def _register() -> None:
    from partuner.cli import (  # noqa: F401  (each module adds its command to `main`)
        cmd_export,
        cmd_inspect,
        cmd_plan,
        cmd_profile,
        cmd_run,
        cmd_tune,
        cmd_units,
        cmd_zoo,
    )


_register()
