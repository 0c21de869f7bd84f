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
    """Import every ``cli/cmd_*.py`` module: each adds its command(s) to ``main``."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__name__}.{info.name}")


_register()
