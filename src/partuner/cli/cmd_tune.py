"""``partuner tune``: profile -> plan -> export -> run -> check, in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    FiniteRange,
    StageLines,
    WritePath,
    check_fuse,
    check_objective,
    console,
    db_option,
    emit_json,
    fuse_options,
    given,
    handle_errors,
    input_shape_option,
    json_option,
    load_graph,
    model_argument,
    objective_options,
    quiet_option,
    refuse_overwrite,
    repeat_option,
    skip_unavailable_option,
    units_option,
)
from partuner.cli.stages import (
    busy_rows,
    corrections_cli,
    load_units_cli,
    profile_cli,
    unit_summary,
)
from partuner.errors import PartunerError


@main.command("tune")
@model_argument
@input_shape_option
@units_option
@db_option
@click.option(
    "-o",
    "--output",
    type=WritePath(file_okay=False),
    default=None,
    help="Output folder (default: ./partuner-out/<model name>).",
)
@click.option("--scheduler", default="auto", show_default=True)
@repeat_option(30, "Timed runs per measured configuration.")
@skip_unavailable_option
@click.option(
    "--time-limit",
    type=FiniteRange(min=0),
    default=10.0,
    show_default=True,
    help="Planning time budget, at most (auto, exact, pexact).",
)
@objective_options
@click.option(
    "--frames",
    type=click.IntRange(min=10),
    default=200,
    show_default=True,
    help="With --objective throughput: frames each measured stream runs.",
)
@fuse_options
@json_option
@quiet_option
@handle_errors
def tune_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    units_file: str | None,
    db: str | None,
    output: str | None,
    scheduler: str,
    repeat: int,
    skip_unavailable: bool,
    time_limit: float,
    objective: str,
    max_latency_ms: float | None,
    frames: int,
    fuse: tuple[str, ...],
    fuse_max: int,
    as_json: bool,
    quiet: bool,
) -> None:
    """Profile MODEL, plan it, export the partitions, run the plan concurrently and check it.

    MODEL is an ONNX file, or zoo:NAME for a built-in demo (see `partuner zoo --list`).
    """
    from partuner.pipeline import tune
    from partuner.plan import get_scheduler

    if scheduler != "auto":
        get_scheduler(scheduler)
    check_objective(objective, max_latency_ms)
    check_fuse(fuse)
    if objective != "throughput" and given("frames"):
        raise PartunerError("--frames sets a measured stream's length: add --objective throughput")
    if objective == "throughput" and given("repeat"):
        raise PartunerError(
            "--repeat times single runs; a stream's length is --frames: leave out --repeat"
        )
    if objective == "throughput" and scheduler != "auto":
        raise PartunerError("--objective throughput plans from auto's plans: leave out --scheduler")
    g = load_graph(model, input_shapes)
    us = load_units_cli(units_file)
    far = [u.name for u in us if u.remote is not None]
    if far:  # refused before profiling: tune runs its plans here
        raise PartunerError(
            f"unit {far[0]!r} is a remote target (remote: in the units file), and tune runs its "
            "plans here: plan with `partuner plan MODEL --units FILE -o plan.yaml`, export with "
            "`partuner export`, and run the partitions on the board; or leave the unit out"
        )
    name = Path(model[4:] if model.startswith("zoo:") else model).name.split(".")[0]
    outdir = Path(output) if output else Path("partuner-out") / name
    refuse_overwrite([model, units_file, db], folder=str(outdir))
    quiet = quiet or as_json
    prof = profile_cli(
        *(g, us, db, quiet, skip_unavailable),
        fuse=fuse,
        fuse_max=fuse_max,
        corun=True,  # latency plans charge it too (plan/simulate.py)
    )
    if objective == "throughput":
        _tune_stream(g, us, prof, db, outdir, time_limit, max_latency_ms, frames, as_json, quiet)
        return

    with StageLines(quiet) as stage:
        r = tune(
            g,
            us,
            prof,
            outdir,
            scheduler=scheduler,
            repeat=repeat,
            progress=stage,
            time_limit=time_limit,
            corrections=corrections_cli(g, us, db, quiet),
        )
    plan = r.plan
    summary = _verdict(r, repeat)
    rows = [
        {
            "what": f"partuner plan ({_plan_label(plan)})",
            "predicted_ms": plan.predicted_us / 1e3,
            "measured_ms": None if r.measured is None else r.measured.median_ms,
            "p90_ms": None if r.measured is None else r.measured.p90_ms,
        },
        {
            "what": f"best single unit ({r.single_unit})",
            "predicted_ms": r.plans["single"].predicted_us / 1e3 if "single" in r.plans else None,
            "measured_ms": None if r.single_measured is None else r.single_measured.median_ms,
            "p90_ms": None if r.single_measured is None else r.single_measured.p90_ms,
        },
        {
            "what": f"plain onnxruntime, whole model, {_cores()} threads",
            "predicted_ms": None,
            "measured_ms": r.ort_all_cores.median_ms,
            "p90_ms": r.ort_all_cores.p90_ms,
        },
    ]
    result = {
        "model": g.source,
        "scheduler": plan.scheduler,
        "partitions": len(plan.partitions),
        "parallel_groups": plan.parallel_groups(),
        "predicted_ms": plan.predicted_us / 1e3,
        "lower_bound_ms": r.lower_bound_us / 1e3,
        "measured_ms": None if r.measured is None else r.measured.median_ms,
        "modeled": plan.modeled,
        "baselines": rows,
        "schedulers": {
            n: {"predicted_ms": p.predicted_us / 1e3, "partitions": len(p.partitions)}
            for n, p in r.plans.items()
        },
        "profile": {
            "signatures": prof.signatures,
            "measured": prof.measured,
            "reused": prof.reused,
            "timed_again": prof.again,
            "busy": busy_rows(prof),
            "wall_s": prof.wall_s,
            "units": unit_summary(prof),
        },
        "check": r.check.to_dict(),
        "note": r.note or None,
        "other_load": r.other_load,
        "verdict": summary,
        "outdir": str(r.outdir),
        "files": r.files,
    }
    if as_json:
        emit_json(result)
    else:
        console.print(
            f"[bold]{g.source}[/bold] on {', '.join(us.units)}: "
            f"{len(g.compute_nodes)} nodes, {prof.signatures} signatures "
            f"({prof.measured} timed, {prof.reused} from the store{_store_where(db, prof)}) in "
            f"{prof.wall_s:.1f} s"
        )
        t = Table(show_edge=False)
        for c in ("configuration", "predicted", "measured (median)", "p90"):
            t.add_column(c, justify="left" if c == "configuration" else "right")
        for row in rows:
            t.add_row(
                row["what"],
                _fmt(row["predicted_ms"]),
                _fmt(row["measured_ms"]),
                _fmt(row["p90_ms"]),
            )
        console.print(t)
        if r.note:
            console.print(f"[yellow]{r.note}[/yellow]")
        if plan.modeled:
            console.print(
                "[yellow]the plan uses modeled units: its latency is predicted "
                "(modeled), not measured[/yellow]"
            )
        groups = plan.parallel_groups()
        console.print(
            f"parallel partition groups: {len(groups)}; lower bound {r.lower_bound_us / 1e3:.3f} ms"
        )
        c = r.check
        verdict = "[green]passed[/green]" if c.passed else "[red]FAILED[/red]"
        worst = max((o.max_abs for o in c.outputs), default=0.0)
        console.print(f"output check {verdict}: max abs diff {worst:.3g} (rule {c.rule})")
        console.print(
            f"files in {r.outdir}/: {', '.join(r.files[:4])}{' ...' if len(r.files) > 4 else ''}"
        )
        console.print(f"[bold]{summary}[/bold]")
    if not r.check.passed:
        raise SystemExit(1)


def _tune_stream(
    g: Any,
    us: Any,
    prof: Any,
    db: str | None,
    outdir: Path,
    time_limit: float,
    max_latency_ms: float | None,
    frames: int,
    as_json: bool,
    quiet: bool,
) -> None:
    """``tune --objective throughput``."""
    from partuner.cli.stream_views import print_tune, tune_result
    from partuner.pipeline import build_problem
    from partuner.throughput import tune_stream

    problem = build_problem(g, us, prof, corrections_cli(g, us, db, quiet))
    with StageLines(quiet) as stage:
        r = tune_stream(
            g,
            us,
            problem,
            outdir,
            frames=frames,
            time_limit=time_limit,
            max_latency_us=None if max_latency_ms is None else max_latency_ms * 1e3,
            progress=stage,
        )
    res = tune_result(r, g, us, prof)
    if as_json:
        emit_json(res)
    else:
        print_tune(
            res,
            f"[bold]{g.source}[/bold] on {', '.join(us.units)}, streamed {frames} frames "
            f"per configuration ({prof.signatures} signatures, {prof.measured} timed, "
            f"{prof.reused} from the store{_store_where(db, prof)}, in {prof.wall_s:.1f} s)",
        )
    if r.check is not None and not r.check.passed:
        raise SystemExit(1)
    if r.bound_met is False:  # the files are written; a script must still tell the bound missed
        raise SystemExit(1)


def _store_where(db: str | None, prof: Any) -> str:
    """`` at PATH`` (home as ~) where timings came from the store, else nothing: a user who
    sees nothing timed learns where the timings were kept, and what --db to change."""
    if not prof.reused:
        return ""
    from partuner.profile.store import default_db_path

    path = Path(db) if db else default_db_path()
    home = Path.home()
    return f" at {'~/' + str(path.relative_to(home)) if path.is_relative_to(home) else path}"


def _plan_label(plan: Any) -> str:
    """``pexact: 3 partitions on cpu0+npu``."""
    n = len(plan.partitions)
    used = "+".join(u for u in plan.units if any(p.unit == u for p in plan.partitions))
    return f"{plan.scheduler}: {n} partition{'' if n == 1 else 's'} on {used or '-'}"


#: medians this far apart (relatively) are not called "about as fast", ranges overlapping or not
NOISY_GAP = 0.1


def _verdict(r: Any, repeat: int) -> str:
    """One line: how the kept plan compares with plain onnxruntime on all cores; a difference
    within the runs' spread (their 10-90 % ranges overlap) is not called one."""
    ort = f"plain onnxruntime on {_cores()} threads"
    ort_ms = r.ort_all_cores.median_ms
    kept = ""
    if len(r.plan.partitions) == 1:
        how = "when measured" if r.note else "in the prediction"
        kept = f"no plan beat the whole model on {r.plan.partitions[0].unit} ({how}); kept that: "
    if r.measured is None:  # a modeled unit: nothing to measure here
        return (
            f"{kept}predicted {r.plan.predicted_us / 1e3:.3f} ms on modeled units (not "
            f"measured); {ort} measured {ort_ms:.3f} ms"
        )
    m, o = r.measured, r.ort_all_cores
    ratio = ort_ms / m.median_ms
    if abs(ratio - 1) < 0.01:
        how = "as fast (within 1 %) as"
    elif m.p10_ms <= o.p90_ms and o.p10_ms <= m.p90_ms:  # timed one after the other: noise
        if abs(ratio - 1) < NOISY_GAP:
            return (
                f"{kept}about as fast as {ort} (measured, median of {repeat}: {m.median_ms:.3f} "
                f"against {ort_ms:.3f} ms, their 10-90 % ranges overlap)"
            )
        return (  # medians far apart, runs spread wider: the machine was busy, or drifting
            f"{kept}not clearly faster or slower than {ort} (measured, median of {repeat}: "
            f"{m.median_ms:.3f} against {ort_ms:.3f} ms, but the runs spread over "
            f"{m.p10_ms:.3f}-{m.p90_ms:.3f} and {o.p10_ms:.3f}-{o.p90_ms:.3f} ms (10-90 %): "
            "measure again on a quiet machine (partuner run)"
        )
    else:
        how = f"{ratio:.2f}x faster than" if ratio > 1 else f"{1 / ratio:.2f}x slower than"
    return f"{kept}{how} {ort} (measured, median of {repeat})"


def _fmt(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.3f} ms"


def _cores() -> int:
    import os

    return os.cpu_count() or 1
