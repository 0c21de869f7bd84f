"""``partuner plan``: find the node-to-unit plan with the lowest predicted latency."""

from __future__ import annotations

import click
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    console,
    db_option,
    emit_json,
    handle_errors,
    input_shape_option,
    json_option,
    load_graph,
    model_argument,
    quiet_option,
    units_option,
)
from partuner.cli.stages import load_units_cli, profile_cli


@main.command("plan")
@model_argument
@input_shape_option
@units_option
@db_option
@click.option(
    "--scheduler",
    default="auto",
    show_default=True,
    help="A scheduler name (see `partuner schedulers`), or auto = the best of all.",
)
@click.option("--compare", is_flag=True, help="Show every scheduler's predicted latency.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the plan YAML here.")
@click.option(
    "--dump-problem",
    type=click.Path(dir_okay=False),
    help="Write the planning problem as JSON (docs/architecture.md).",
)
@json_option
@quiet_option
@handle_errors
def plan_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    units_file: str | None,
    db: str | None,
    scheduler: str,
    compare: bool,
    output: str | None,
    dump_problem: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Profile MODEL on the units (reusing the store), plan it, and print the plan."""
    from partuner.export import atomic_write, write_plan
    from partuner.pipeline import build_problem, make_plan, plan_file
    from partuner.plan import get_scheduler, lower_bound

    g = load_graph(model, input_shapes)
    us = load_units_cli(units_file)
    if scheduler != "auto":
        get_scheduler(scheduler)  # fail on a wrong name before profiling
    prof = profile_cli(g, us, db, quiet or as_json)
    problem = build_problem(g, us, prof)
    problem.validate()
    if dump_problem:
        atomic_write(dump_problem, problem.to_json())
    plan, plans = make_plan(problem, "auto" if compare else scheduler)
    if compare and scheduler != "auto":
        plan = plans[scheduler]
    lb = lower_bound(problem)
    pf = plan_file(plan, g, us)
    if output:
        write_plan(pf, output)
    result = {
        "model": g.source,
        "scheduler": plan.scheduler,
        "status": plan.status,
        "predicted_ms": plan.predicted_us / 1e3,
        "lower_bound_ms": lb / 1e3,
        "modeled": plan.modeled,
        "partitions": [
            {
                "name": p.name,
                "unit": p.unit,
                "nodes": len(p.nodes),
                "start_ms": p.start_us / 1e3,
                "end_ms": p.end_us / 1e3,
            }
            for p in plan.partitions
        ],
        "parallel_groups": pf.parallel,
        "plan_file": output,
    }
    if compare:
        result["schedulers"] = {
            n: {
                "predicted_ms": p.predicted_us / 1e3,
                "solve_s": getattr(p, "solve_s", None),
                "status": p.status,
                "partitions": len(p.partitions),
            }
            for n, p in plans.items()
        }
    if as_json:
        emit_json(result)
        return
    label = " (modeled)" if plan.modeled else ""
    console.print(
        f"plan by [bold]{plan.scheduler}[/bold]: predicted "
        f"{plan.predicted_us / 1e3:.3f} ms{label}, lower bound {lb / 1e3:.3f} ms, "
        f"{len(plan.partitions)} partitions, {len(pf.parallel)} parallel groups"
    )
    if compare:
        t = Table(show_edge=False)
        for c in ("scheduler", "predicted", "partitions", "solve time"):
            t.add_column(c, justify="left" if c == "scheduler" else "right")
        for n, p in sorted(plans.items(), key=lambda kv: kv[1].predicted_us):
            t.add_row(
                n,
                f"{p.predicted_us / 1e3:.3f} ms",
                str(len(p.partitions)),
                f"{getattr(p, 'solve_s', 0.0) * 1e3:.1f} ms",
            )
        console.print(t)
    t = Table(show_edge=False)
    for c in ("partition", "unit", "nodes", "start", "end"):
        t.add_column(c, justify="left" if c in ("partition", "unit") else "right")
    for p in plan.partitions:
        t.add_row(
            p.name, p.unit, str(len(p.nodes)), f"{p.start_us / 1e3:.3f}", f"{p.end_us / 1e3:.3f}"
        )
    console.print(t)
    if output:
        console.print(f"plan written to {output}")


@main.command("schedulers")
@handle_errors
def schedulers_cmd() -> None:
    """List the registered schedulers (built-in and from plugins)."""
    from partuner.plan import get_scheduler, scheduler_names

    for n in scheduler_names():
        doc = (type(get_scheduler(n)).__doc__ or "").strip().splitlines()
        console.print(f"{n}: {doc[0] if doc else ''}")
