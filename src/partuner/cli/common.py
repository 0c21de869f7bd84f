"""Pieces every command shares: options, error handling, JSON output, progress."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np
from rich.console import Console

from partuner.errors import PartunerError

__all__ = [
    "console",
    "error_line",
    "fail",
    "handle_errors",
    "input_shape_option",
    "json_option",
    "load_graph",
    "model_argument",
    "progress_bar",
    "quiet_option",
    "input_options",
    "read_inputs",
    "skip_unavailable_option",
    "StageLines",
    "units_option",
    "db_option",
    "emit_json",
    "fuse_options",
    "objective_options",
    "check_objective",
    "WritePath",
    "repeat_option",
    "refuse_overwrite",
    "SEED",
]

F = TypeVar("F", bound=Callable[..., Any])

# Not a terminal (a pipe, a log): rich would wrap tables at 80 columns; use a wider page.
console = Console(
    highlight=False,
    soft_wrap=True,
    width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", 110)),
)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class WritePath(click.Path):
    """A path partuner writes to (``-o``, ``--trace``, ``--db``...), checked when the command
    line is read: a file where a folder on the way should be is refused then, in one line,
    not after the work as an ``OSError`` (missing folders are still made)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        got = super().convert(value, param, ctx)
        path = Path(os.fsdecode(got)).expanduser()
        for folder in path.parents:
            if folder.exists():
                if not folder.is_dir():
                    self.fail(f"{str(folder)!r} is a file, not a folder; choose another path")
                break
        return got


def refuse_overwrite(
    inputs: Iterable[str | None],
    files: Iterable[str | None] = (),
    folder: str | None = None,
    specs: Iterable[str] = (),
) -> None:
    """Fail in one line when this command would write over one of its own ``inputs`` (model,
    plan, units file, store) or ``--input`` ``specs`` (``NAME=FILE.npy``): as one of ``files``,
    or inside ``folder`` (what ``export``/``tune`` write: plan, manifest, ``partitions/``)."""
    ins: dict[Path, str] = {}
    for path in [*inputs, *(s.split("=", 1)[-1] for s in specs)]:
        if path and not path.startswith("zoo:") and Path(path).expanduser().is_file():
            ins[Path(path).expanduser().resolve()] = path
    out = [Path(f).expanduser().resolve() for f in files if f]
    if folder:
        top = Path(folder).expanduser().resolve()
        out += [top / "plan.yaml", top / "manifest.json"]
        out += [p for p in ins if top / "partitions" in p.parents]
    for path in out:
        if path in ins:
            fail(f"{ins[path]} is an input of this command, and it would write over it: "
                 "choose another output path")  # fmt: skip


def fail(message: str, code: int = 2) -> None:
    """Print ``partuner: error: message`` on stderr and exit with ``code``."""
    click.echo(error_line(message), err=True)
    sys.exit(code)


def error_line(message: str) -> str:
    """How every user error is shown: ``partuner: error: message``, one line."""
    return f"partuner: error: {message}"


def handle_errors(fn: F) -> F:
    """Turn partuner's errors (and a few common ones) into one line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PartunerError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("interrupted; no half-written file was left, and what was measured is kept", 130)
        except (OSError, MemoryError) as exc:
            fail(f"{type(exc).__name__}: {exc}")
        return None

    return wrapper  # type: ignore[return-value]


def model_argument(fn: F) -> F:
    return click.argument("model", metavar="MODEL")(fn)


def input_shape_option(fn: F) -> F:
    return click.option(
        "--input-shape",
        "input_shapes",
        multiple=True,
        metavar="NAME=DIMS",
        help="Fix a dynamic input, e.g. input=1x3x224x224 (repeatable).",
    )(fn)


def units_option(fn: F) -> F:
    return click.option(
        "--units",
        "units_file",
        type=click.Path(dir_okay=False),
        default=None,
        help="Units file (YAML). Default: a 1-thread onnxruntime unit per CPU core, cpuall "
        "(onnxruntime on all cores) and, with OpenVINO installed, ovall (OpenVINO f32).",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(fn)


#: a random seed: numpy's generators take 0 and up (a negative one was a traceback)
SEED = click.IntRange(min=0, max=2**63 - 1)


def input_options(fn: F) -> F:
    """``--input NAME=FILE.npy`` (repeatable) and ``--seed``: the model's inputs, from files
    or seeded random (:func:`read_inputs`)."""
    fn = click.option("--seed", type=SEED, default=0, show_default=True,
                      help="Seed of the random inputs no --input gives.")(fn)  # fmt: skip
    return click.option(
        "--input",
        "inputs",
        multiple=True,
        metavar="NAME=FILE.npy",
        help="Use this input (a NumPy .npy array) instead of a seeded random one.",
    )(fn)


def read_inputs(specs: tuple[str, ...], names: list[str]) -> dict[str, np.ndarray]:
    """The arrays ``--input NAME=FILE.npy`` names, by input name (``names``: the model's);
    never unpickles. Raises PartunerError naming the option, the file and the fix."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if not path:
            raise PartunerError(f"bad --input {spec!r}: write NAME=FILE.npy, NAME of {names}")
        if name not in names:
            raise PartunerError(f"--input names {name!r}; the model's inputs are {names}")
        if name in out:
            raise PartunerError(f"--input {name} is given twice; give each input once")
        try:
            _check_npy_size(Path(path))
            loaded = np.load(Path(path), allow_pickle=False)
            if not isinstance(loaded, np.ndarray):  # an .npz archive (arrays by name)
                held = ", ".join(loaded.files[:5]) or "nothing"
                loaded.close()
                raise PartunerError(
                    f"cannot read --input {path}: it is an .npz archive ({held}), not one .npy "
                    f"array; save each input alone (numpy.save) and give --input {name}=FILE.npy"
                )
            out[name] = loaded
        except (ValueError, EOFError, OSError) as exc:
            why = "the file is empty" if isinstance(exc, EOFError) else str(exc)
            if why.startswith("Object arrays"):  # an .npy of Python objects (a pickle inside)
                why = "it holds Python objects, which partuner never loads; save a numeric array"
            elif "pickle" in why:  # numpy's word for "not an .npy file" (a text file, say)
                why = "it is not a NumPy .npy array (write one with numpy.save(FILE, array))"
            raise PartunerError(f"cannot read --input {path}: {why}") from None
    return out


def _check_npy_size(path: Path) -> None:
    """Raise ValueError where an .npy file's header is malformed or claims more data than the
    file holds, before numpy allocates what it claims (header versions 1.0, 2.0 and 3.0)."""
    fmt = np.lib.format
    if path.exists() and not path.is_file():  # a FIFO would block, /dev/zero never end
        raise ValueError("it is not a regular file (a folder, pipe or device); give a .npy file")
    with path.open("rb") as f:
        if f.read(6) != fmt.MAGIC_PREFIX:
            return  # not an .npy: np.load says what it is
        f.seek(0)
        try:
            version = fmt.read_magic(f)
        except ValueError:
            raise ValueError("it is not a complete .npy file: it ends inside its header") from None
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        try:
            shape, _, dtype = read(f)
        except ValueError:
            raise ValueError("its .npy header is malformed (write it with numpy.save)") from None
        need, held = math.prod(shape) * dtype.itemsize, os.fstat(f.fileno()).st_size - f.tell()
    if min(shape, default=0) < 0:
        raise ValueError(
            f"its .npy header claims shape {shape}, a negative dimension; write it with numpy.save"
        )
    if need > held:
        raise ValueError(f"its header claims {shape} {dtype}, {need} bytes; it holds {held}")


def skip_unavailable_option(fn: F) -> F:
    """``--skip-unavailable``: leave out the units that cannot run here (each named in a
    warning) instead of stopping; what an unavailable unit's error advises."""
    text = "Leave out the units that are not available here (each named), instead of stopping."
    return click.option("--skip-unavailable", is_flag=True, help=text)(fn)


def repeat_option(default: int, help: str) -> Callable[[F], F]:
    """``--repeat N``: how many timed runs (at least 1), with this command's default."""
    return click.option(
        "--repeat", type=click.IntRange(1, 1_000_000), default=default, show_default=True, help=help
    )


def quiet_option(fn: F) -> F:
    """``--quiet``/``-q``: no progress on stderr; warnings and errors still show (with it or
    ``--json``, stderr carries nothing else)."""
    text = "No progress on stderr (warnings and errors only)."
    return click.option("--quiet", "-q", is_flag=True, help=text)(fn)


def db_option(fn: F) -> F:
    return click.option(
        "--db",
        type=WritePath(dir_okay=False),
        default=None,
        help="Profile store (SQLite). Default: $PARTUNER_DB or ~/.cache/partuner/profiles.db.",
    )(fn)


class FiniteRange(click.FloatRange):
    """A ``click.FloatRange`` that also refuses ``nan`` and ``inf`` (which pass a range check
    and then broke a time budget or a latency bound far from the command line)."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def objective_options(fn: F) -> F:
    """``--objective latency|throughput`` and ``--max-latency-ms`` (plan, tune)."""
    fn = click.option(
        "--max-latency-ms",
        type=FiniteRange(min=0, min_open=True),
        default=None,
        metavar="MS",
        help="With --objective throughput: each frame's p99 latency at most this (plan: as "
        "predicted, which has no jitter; tune: as measured, exit 1 where no stream did).",
    )(fn)
    return click.option(
        "--objective",
        type=click.Choice(["latency", "throughput"]),
        default="latency",
        show_default=True,
        help="latency: one inference as fast as possible; throughput: the most frames per "
        "second on a stream, frames overlapping.",
    )(fn)


def check_objective(objective: str, max_latency_ms: float | None) -> None:
    """``--max-latency-ms`` means something with ``--objective throughput`` only."""
    if max_latency_ms is not None and objective != "throughput":
        raise PartunerError("--max-latency-ms bounds a stream's frames: add --objective throughput")


def given(name: str) -> bool:
    """Whether the current command's parameter ``name`` was given (on the command line or by
    its environment variable), not left at its default: an option that the other options make
    meaningless is refused, not ignored without a word."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    return ctx.get_parameter_source(name) in (
        ParameterSource.COMMANDLINE,
        ParameterSource.ENVIRONMENT,
    )


def check_fuse(fuse: tuple[str, ...]) -> None:
    """``--fuse-max`` means something with ``--fuse auto`` only."""
    if given("fuse_max") and not any(f.lower() == "auto" for f in fuse):
        raise PartunerError(
            "--fuse-max sets the longest chain --fuse auto tries: add --fuse auto, or leave "
            "--fuse-max out"
        )


def fuse_options(fn: F) -> F:
    fn = click.option(
        "--fuse-max",
        type=click.IntRange(min=2),
        default=3,
        show_default=True,
        help="Longest chain --fuse auto tries.",
    )(fn)
    return click.option(
        "--fuse",
        multiple=True,
        metavar="PATTERN",
        help="Also time chains of these op types as fused groups, e.g. Conv-Relu (repeatable); "
        "'auto' times every chain of 2..--fuse-max nodes and keeps those that differ.",
    )(fn)


def count_of(n: int, what: str) -> str:
    """``1 partition``, ``3 partitions``."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def link_text(a: str, b: str, latency_us: float, gbps: float, how: str) -> str:
    """One link as ``partuner units`` and ``partuner profile`` print it."""
    size = "zero-copy" if math.isinf(gbps) else f"+ bytes / {gbps:.3g} GB/s"
    return f"  link {a}-{b}: {latency_us:.1f} us {size} ({how})"


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def emit_json(obj: Any) -> None:
    """Print ``obj`` as JSON (non-finite floats become null)."""
    click.echo(json.dumps(_clean(obj), indent=2))


def load_graph(model: str, input_shapes: tuple[str, ...] = ()) -> Any:
    """Load ``model`` (a path, or ``zoo:NAME`` for a built-in demo model)."""
    from partuner.graph import load_model, parse_input_shapes

    shapes = parse_input_shapes(input_shapes)
    if model.startswith("zoo:"):
        from partuner.graph import zoo

        return load_model(zoo.build(model[4:]), shapes)
    if not Path(model).exists():
        raise PartunerError(f"model file not found: {model} (or use zoo:NAME for a demo model)")
    return load_model(model, shapes)


def load_graph_and_plan(model: str, input_shapes: tuple[str, ...], plan_path: str) -> Any:
    """``(graph, plan file)`` for a command that runs or cuts a plan: a model with dynamic
    inputs and no ``--input-shape`` takes the shapes the plan was made for (its
    ``input_shapes``; checked as ``--input-shape`` values are)."""
    from partuner.errors import InputShapeError
    from partuner.export import read_plan

    pf = read_plan(plan_path)
    try:
        return load_graph(model, input_shapes), pf
    except InputShapeError:
        if input_shapes or not pf.input_shapes:
            raise
    specs = tuple(
        f"{name}={'x'.join(str(d) for d in dims)}" for name, dims in pf.input_shapes.items()
    )
    try:
        return load_graph(model, specs), pf
    except PartunerError as exc:  # the shapes are the plan's, not an --input-shape given
        raise PartunerError(
            f"the input shapes of the plan {plan_path} do not fit {model}: {exc}; give "
            "--input-shape, or plan again for this model"
        ) from None


class StageLines(logging.Filter):
    """Progress as one line per stage on stderr, e.g. ``planning ... 0.4 s``: the stage's name
    when it starts, its elapsed seconds when the next one starts or :meth:`end` is called.
    Silent when ``quiet``. A log record met meanwhile ends the line first, and the stage's line
    is then written whole when it ends. As a context manager it ends the last stage (an error
    ends the line without a time, so that the error gets a line of its own)."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.quiet = quiet
        self.label = ""  # the current stage
        self._t0: float | None = None
        self._broken = False  # something else was written after the stage's name

    def __call__(self, label: str) -> None:
        self.end()
        if not self.quiet:
            self._write(f"{label} ...")
            self.label, self._t0, self._broken = label, time.perf_counter(), False
            for h in self._handlers():
                h.addFilter(self)

    def end(self, failed: bool = False) -> None:
        if self._t0 is None:
            return
        for h in self._handlers():
            h.removeFilter(self)
        took = f" {time.perf_counter() - self._t0:.1f} s"
        if failed:
            self._write("" if self._broken else "\n")
        else:
            self._write(f"{self.label} ...{took}\n" if self._broken else f"{took}\n")
        self._t0 = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self._t0 is not None and not self._broken:
            self._write("\n")
            self._broken = True
        return True

    @staticmethod
    def _handlers() -> list[logging.Handler]:
        last = [logging.lastResort] if logging.lastResort is not None else []
        return [*logging.getLogger().handlers, *last]

    @staticmethod
    def _write(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def __enter__(self) -> StageLines:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.end(failed=exc_type is not None)


@contextmanager
def progress_bar(label: str, quiet: bool) -> Iterator[Callable[[int, int, str], None] | None]:
    """A rich progress bar with ETA on stderr; when stderr is not a terminal, one line
    (``label ... 1.2 s``, :class:`StageLines`) from the first progress made; nothing when
    quiet."""
    if quiet or not sys.stderr.isatty():
        # the line starts with the first item of work left (none on a bad input, nor when
        # there is nothing to time, e.g. modeled units only)
        with StageLines(quiet) as stage:

            def first(done: int, total: int, what: str) -> None:
                if done < total and stage.label != label:
                    stage(label)

            yield None if quiet else first
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=err_console,
        transient=True,
    ) as prog:
        task = prog.add_task("", total=None)

        def update(done: int, total: int, what: str) -> None:
            prog.update(task, completed=done, total=total, description=what[:40])

        yield update


class _LogLines(logging.Formatter):
    """Warnings as the docs show them, ``partuner: warning: ...``; with ``-v``/``-vv`` every
    line names its level and logger (``INFO partuner.plan.auto: ...``)."""

    def __init__(self, named: bool) -> None:
        super().__init__("%(message)s")
        self.named = named

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if self.named:
            return f"{record.levelname} {record.name}: {text}"
        return f"partuner: {record.levelname.lower()}: {text}"


def setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler()
    handler.setFormatter(_LogLines(named=verbose > 0))
    logging.basicConfig(level=level, handlers=[handler])
