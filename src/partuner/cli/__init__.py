"""The ``partuner`` command line: thin commands that parse, call the library, and render."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

from partuner import __version__
from partuner.cli.common import error_line, setup_logging

__all__ = ["main"]


class UsageLine(click.UsageError):
    """A usage error click found (a value out of range, an unknown option), shown as one line
    ``partuner: error: ...`` naming the option, like partuner's own errors; exit code 2."""

    def __init__(self, exc: click.UsageError) -> None:
        text = " ".join(exc.format_message().split()).rstrip(".")
        text = text[:1].lower() + text[1:]
        if exc.ctx is not None:  # click's "Did you mean '--fuse'?" ends a sentence
            sub = exc.ctx.command_path.split()[1:]  # the root's name is argv[0]'s ('-c'...)
            see = f"'{' '.join(['partuner', *sub])} --help'"
            text += f" See {see}" if text.endswith("?") else f"; see {see}"
        super().__init__(text, exc.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(error_line(self.format_message()), file=file, err=file is None)


@contextmanager
def _one_line_usage() -> Iterator[None]:
    try:
        yield
    except (click.exceptions.NoArgsIsHelpError, UsageLine):
        raise  # a bare `partuner` prints the help; a converted error is left as it is
    except click.UsageError as exc:
        raise UsageLine(exc) from None


class _Partuner(click.Group):
    """partuner's command group: click's usage errors, in its own arguments or a command's,
    become :class:`UsageLine` (``--help`` output is click's)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_usage():
            return super().invoke(ctx)


@click.group(
    cls=_Partuner,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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
