"""``partuner batch``: split one batch across units by profiled throughput, run it, merge, check."""

from __future__ import annotations

import io
import sys
import zipfile
from typing import Any

import click
import numpy as np
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    StageLines,
    WritePath,
    console,
    db_option,
    emit_json,
    handle_errors,
    input_options,
    input_shape_option,
    json_option,
    model_argument,
    quiet_option,
    read_inputs,
    refuse_overwrite,
    repeat_option,
    units_option,
)
from partuner.cli.stages import load_units_cli
from partuner.errors import PartunerError
from partuner.export import atomic_write

#: largest batch profiled by ``--table`` when ``--batch`` is not given
TABLE_BATCH = 64


@main.command("batch")
@model_argument
@click.option("--batch", "batch", type=int, default=None, help="Items in the batch to split.")
@input_shape_option
@units_option
@db_option
@repeat_option(10, "Timed runs per configuration.")
@click.option(
    "--table",
    is_flag=True,
    help=f"Only profile and print the batch table (sizes up to --batch, default {TABLE_BATCH}).",
)
@click.option(
    "--hybrid",
    is_flag=True,
    help="Also run the operator-level plan over all units on the whole batch, as a candidate.",
)
@click.option(
    "--retry",
    is_flag=True,
    help="If a unit is lost during the runs (a Ray node gone), re-run its share on the "
    "fastest unit left instead of failing.",
)
@input_options
@click.option(
    "-o",
    "--output",
    type=WritePath(dir_okay=False),
    default=None,
    metavar="FILE.npz",
    help="Write the exact split's merged outputs (in input order) here, one array per output.",
)
@json_option
@quiet_option
@handle_errors
def batch_cmd(
    model: str,
    batch: int | None,
    input_shapes: tuple[str, ...],
    units_file: str | None,
    db: str | None,
    repeat: int,
    table: bool,
    hybrid: bool,
    retry: bool,
    inputs: tuple[str, ...],
    seed: int,
    output: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Split a batch of MODEL's inputs across the units in proportion to their profiled speed,
    run the parts at once, concatenate the outputs in input order and check them.

    MODEL is an ONNX file whose inputs' dimension 0 is the batch (fixed or dynamic), or zoo:NAME.
    Prints the split, its predicted and measured time and throughput, and the baselines: the best
    single unit, the even split and the seed's greedy split.
    """
    from partuner.batch import BatchError, evaluate_batch, profile_batches
    from partuner.profile import ProfileStore

    if table and (inputs or output):
        raise BatchError("--table only profiles: leave out --input and --output")
    if batch is not None and batch < 1:
        raise BatchError(f"--batch must be >= 1, got {batch}")
    if output is not None and not output.endswith(".npz"):
        raise BatchError(f"--output {output!r}: name a .npz file (numpy.load reads it)")
    refuse_overwrite([model, units_file, db], [output], specs=inputs)
    bm = _load(model, input_shapes)
    feeds = read_inputs(inputs, bm.inputs) if inputs else {}
    missing = [n for n in bm.inputs if feeds and n not in feeds]
    if missing:  # the batch is the user's: never fill part of it with random data
        raise PartunerError(
            f"--input gives {sorted(feeds)} but not {missing}; give every input of the model "
            f"({', '.join(bm.inputs)}) as NAME=FILE.npy, or none for a seeded random batch"
        )
    batch = _batch_of(feeds, batch)
    if batch is None and not table:
        raise BatchError("--batch N is required (the number of items to split), e.g. --batch 32")
    us = load_units_cli(units_file)
    quiet = quiet or as_json

    # progress on a terminal only: a run that fails after profiling keeps its one-line error
    with ProfileStore(db) as store, StageLines(quiet or not sys.stderr.isatty()) as say:
        if table:
            prof = profile_batches(bm, us, batch or TABLE_BATCH, store=store)
            _warn(prof.notes(), quiet)
            if as_json:
                emit_json(prof.to_dict())
            else:
                _print_table(prof)
            return
        assert batch is not None
        r = evaluate_batch(
            bm,
            us,
            batch,
            store=store,
            repeat=repeat,
            hybrid=hybrid,
            progress=say,
            retry=retry,
            feeds=feeds,
            seed=seed,
        )
    _warn(r.notes, quiet)
    if output is not None and r.run.check.passed:  # outputs that failed the check: not kept
        atomic_write(output, _npz(r.outputs))
    result = r.to_dict()
    written = output is not None and r.run.check.passed
    result["outputs_file"] = output if written else None
    if as_json:
        emit_json(result)
    else:
        _print_result(result)
        if written:
            console.print(f"merged outputs (the exact split's, in input order) written to {output}")
    if not r.run.check.passed or (r.hybrid is not None and not r.hybrid.check.passed):
        raise SystemExit(1)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    """``arrays`` as the bytes of an ``.npz`` (what ``numpy.savez`` writes, but any output name
    is a key: ``savez(file, **arrays)`` fails on an output named ``file`` and takes one named
    ``allow_pickle`` as its flag)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, a in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()


def _batch_of(feeds: dict[str, np.ndarray], batch: int | None) -> int | None:
    """The batch the ``--input`` arrays hold (their dimension 0, the same in each), which
    ``--batch``, if given, must equal."""
    from partuner.batch import BatchError

    scalar = next((k for k, a in feeds.items() if a.ndim == 0), None)
    if scalar is not None:
        raise BatchError(
            f"--input {scalar} is a 0-d array (one number), which has no batch dimension; give "
            "an array whose dimension 0 is the batch, e.g. of shape (N, ...)"
        )
    sizes = {k: int(a.shape[0]) for k, a in feeds.items()}
    if not sizes:
        return batch
    if all(a.shape[0] == 0 for a in feeds.values()):
        raise BatchError(
            f"the --input arrays hold no items (dimension 0 of each: {sizes}); a batch needs "
            "at least one"
        )
    if len(set(sizes.values())) > 1 or 0 in sizes.values():
        raise BatchError(
            f"the --input arrays must hold one batch, dimension 0 alike: got {sizes}; "
            "give each input the same number of items"
        )
    held = next(iter(sizes.values()))
    if batch is not None and batch != held:
        raise BatchError(
            f"--batch {batch} but the --input arrays hold {held} item(s); leave out --batch "
            "(the arrays' first dimension sets it) or give arrays of that many items"
        )
    return held


def _load(model: str, input_shapes: tuple[str, ...]) -> Any:
    from partuner.batch import BatchModel
    from partuner.graph import parse_input_shapes, read_model_proto

    shapes = parse_input_shapes(input_shapes)
    if model.startswith("zoo:"):
        from partuner.graph import zoo

        return BatchModel(zoo.build(model[4:]), model, shapes)
    try:
        proto = read_model_proto(model)
    except PartunerError as exc:
        raise PartunerError(f"{exc} (or use zoo:NAME for a demo model)") from None
    return BatchModel(proto, model, shapes)


def _warn(notes: list[str], quiet: bool) -> None:
    if not quiet:
        for note in notes:
            click.echo(f"partuner: warning: {note}", err=True)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f} ms"


def _timed(r: dict[str, Any], ms: float | None = None) -> str:
    """A run's time, labelled when a modeled unit makes it the host's emulation or a model."""
    text = _ms(r["measured_ms"] if ms is None else ms)
    timing = r.get("timing", "measured")
    return text if timing == "measured" else f"{text} ({timing})"


def _sizes(split: dict[str, int]) -> str:
    return " ".join(f"{u}:{b}" for u, b in split.items() if b > 0)


def _print_result(res: dict[str, Any]) -> None:
    b = res["baselines"]
    console.print(
        f"[bold]{res['model']}[/bold], batch {res['batch']} on {', '.join(res['split'])} "
        f"(profile: {res['profile']['measured']} sizes timed, {res['profile']['reused']} "
        "from the store)"
    )
    t = Table(show_edge=False)
    for c in ("configuration", "split", "predicted", "measured", "throughput"):
        t.add_column(c, justify="left" if c in ("configuration", "split") else "right")

    rows: list[tuple[str, str, float | None, str, float]] = []
    for what, r in (
        ("exact split", res),
        ("greedy split (seed)", b["greedy"]),
        ("even split", b["even"]),
    ):
        moved = "".join(f", {u}'s items on {v}" for u, v in (r.get("retried") or {}).items())
        rows.append(
            (what, _sizes(r["split"]) + moved, r["predicted_ms"], _timed(r), r["throughput"])
        )
    s = b["best_single"]
    if s is not None:
        rows.append(
            (
                f"best single unit ({s['unit']})",
                f"{s['unit']}:{res['batch']}",
                s["predicted_ms"],
                _timed(res["unit_alone"][s["unit"]], s["measured_ms"]),
                s["throughput"],
            )
        )
    h = res.get("hybrid")
    if h is not None:
        rows.append(
            (
                f"hybrid: op-level plan ({h['scheduler']}, {h['partitions']} partitions)",
                "+".join(h["units"]),
                h["predicted_ms"],
                _timed(h),
                h["throughput"],
            )
        )
    for what, split, pred, meas, tp in rows:
        t.add_row(what, split, _ms(pred), meas, f"{tp:,.1f} items/s")
    console.print(t)
    if res.get("loses_to_single"):
        console.print(res["loses_to_single"])
    used = [u for u, n in res["split"].items() if n > 0]
    if s is not None and used == [s["unit"]] and res.get("timing", "measured") == "measured":
        console.print(  # one configuration, two rows: each measured its own way
            f"the exact split is {s['unit']} alone: {_ms(res['measured_ms'])} run as a split "
            f"(its thread, the merge), {_ms(s['measured_ms'])} calling {s['unit']} directly"
        )
    alone = ", ".join(f"{u} {tp:,.1f}" for u, tp in res["unit_throughput"].items())
    eff = res["efficiency"]
    console.print(
        f"each unit alone on the batch (items/s): {alone}; physical limit "
        f"({' + '.join(res['limit_units'])}): {res['physical_limit']:,.1f} items/s"
        + (
            " (a modeled unit's part predicted)"
            if any(res["unit_alone"][u].get("modeled") for u in res["limit_units"])
            else ""
        )
        + ("" if eff is None else f"; the exact split reaches {eff:.0%} of it")
    )
    if h is not None:
        console.print(f"best candidate: {res['best']}")
    if res["modeled"]:
        console.print(
            "[yellow]a modeled unit takes part: its times are predicted; the split's time is "
            "the host's emulation, not a measurement[/yellow]"
        )
    c = res["check"]
    verdict = "[green]passed[/green]" if c["passed"] else "[red]FAILED[/red]"
    worst = max((o["max_abs"] for o in c["outputs"]), default=0.0)
    console.print(
        f"merged outputs vs the whole batch on onnxruntime CPU f32: {verdict} "
        f"(max abs diff {worst:.3g}; rule {c['rule']})"
    )


def _print_table(prof: Any) -> None:
    sizes = sorted({b for rows in prof.table.values() for b in rows})
    console.print(
        f"[bold]{prof.model}[/bold]: whole-model latency per batch size, ms (ms per item); "
        f"{prof.measured} timed, {prof.reused} from the store"
    )
    t = Table(show_edge=False)
    t.add_column("batch", justify="right")
    for u in prof.table:
        t.add_column(u, justify="right")
    for b in sizes:
        cells = []
        for rows in prof.table.values():
            m = rows.get(b)
            if m is None:
                cells.append("-")
            elif m.status != "ok":
                cells.append("fails")
            else:
                cells.append(f"{m.median_us / 1e3:.3f} ({m.median_us / 1e3 / b:.3f})")
        t.add_row(str(b), *cells)
    console.print(t)
