"""``partuner plan``: find the node-to-unit plan with the lowest predicted latency."""

from __future__ import annotations

import json
import math
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
    count_of,
    db_option,
    emit_json,
    fuse_options,
    given,
    handle_errors,
    input_shape_option,
    json_option,
    load_graph,
    objective_options,
    quiet_option,
    refuse_overwrite,
    skip_unavailable_option,
    units_option,
)
from partuner.cli.stages import corrections_cli, load_units_cli, profile_cli


@main.command("plan")
@click.argument("model", metavar="[MODEL]", required=False)
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
@click.option(
    "--time-limit",
    type=FiniteRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Planning time budget, at most (auto, exact, pexact). Default: 10 s.",
)
@click.option("--explain", is_flag=True, help="Say for each partition why it sits on its unit.")
@click.option(
    "-o",
    "--output",
    type=WritePath(dir_okay=False),
    help="Write the plan here (YAML; JSON if the name ends in .json).",
)
@click.option(
    "--dump-problem",
    type=WritePath(dir_okay=False),
    help="Write the planning problem as JSON (docs/architecture.md).",
)
@click.option(
    "--load-problem",
    type=click.Path(dir_okay=False),
    help="Plan a problem written by --dump-problem instead of profiling (MODEL is optional).",
)
@skip_unavailable_option
@objective_options
@fuse_options
@json_option
@quiet_option
@handle_errors
def plan_cmd(
    model: str | None,
    input_shapes: tuple[str, ...],
    units_file: str | None,
    db: str | None,
    scheduler: str,
    compare: bool,
    time_limit: float | None,
    explain: bool,
    output: str | None,
    dump_problem: str | None,
    load_problem: str | None,
    skip_unavailable: bool,
    objective: str,
    max_latency_ms: float | None,
    fuse: tuple[str, ...],
    fuse_max: int,
    as_json: bool,
    quiet: bool,
) -> None:
    """Profile MODEL on the units (reusing the store), plan it, and print the plan."""
    from partuner.errors import PartunerError
    from partuner.export import atomic_write, plan_to_dict, write_plan
    from partuner.pipeline import build_problem, make_plan, planning_stages, proven_lower_bound
    from partuner.plan import Problem, critical_path_bound, get_scheduler
    from partuner.plan.auto import Auto  # noqa: F401  (registers "auto" and "exact")

    refuse_overwrite([model, units_file, db, load_problem], [output, dump_problem])
    if model is None and load_problem is None:
        raise PartunerError("give a MODEL to profile and plan, or --load-problem PROBLEM.json")
    get_scheduler(scheduler)  # fail on a wrong name before profiling
    check_objective(objective, max_latency_ms)
    check_fuse(fuse)
    if objective == "throughput" and (scheduler != "auto" or compare or explain):
        raise PartunerError(
            "--objective throughput plans from auto's plans: leave out --scheduler, --compare "
            "and --explain"
        )
    g = load_graph(model, input_shapes) if model else None
    us = load_units_cli(units_file) if model else None
    if load_problem:
        path = Path(load_problem)
        if not path.is_file():
            raise PartunerError(f"problem file not found: {path}; write one with --dump-problem")
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            why = "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise PartunerError(
                f"cannot read problem file {path}: {why}; write one with --dump-problem"
            ) from None
        problem = Problem.from_json(text)
        _check_loaded(problem, path, g, us, fuse, skip_unavailable)
    else:
        prof = profile_cli(
            *(g, us, db, quiet or as_json, skip_unavailable),
            fuse=fuse,
            fuse_max=fuse_max,
            corun=True,  # latency plans charge it too (plan/simulate.py)
        )
        problem = build_problem(g, us, prof, corrections_cli(g, us, db, quiet or as_json))
    problem.validate()
    if dump_problem:
        atomic_write(dump_problem, problem.to_json())
    if objective == "throughput":
        _plan_stream(problem, g, us, time_limit, max_latency_ms, output, as_json, quiet)
        return
    with StageLines(quiet or as_json) as stage:
        stage("planning")
        plan, plans = make_plan(
            problem,
            "auto" if compare else scheduler,
            time_limit=time_limit,
            progress=planning_stages(stage),
            every=compare,
        )
        if compare and scheduler != "auto":
            plan = plans.get(scheduler) or make_plan(problem, scheduler, time_limit=time_limit)[0]
    # one figure: printed, in the JSON and in the plan file
    lb = plan.lower_bound_us = proven_lower_bound(problem, plans)
    cp = critical_path_bound(problem)
    pf = _plan_file(plan, problem, g, us)
    if output:
        if output.endswith(".json"):
            atomic_write(output, json.dumps(plan_to_dict(pf), indent=1))
        else:
            write_plan(pf, output)
    why = _explain(problem, plan) if explain else []
    result = {
        "model": g.source if g is not None else None,
        "problem": problem.name,
        "scheduler": plan.scheduler,
        "status": plan.status,
        "predicted_ms": plan.predicted_us / 1e3,
        "lower_bound_ms": lb / 1e3,
        "critical_path_bound_ms": cp / 1e3,
        "solve_s": getattr(plan, "solve_s", None),
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
        "corun": dict(problem.corun),  # each unit's factor beside the others (charged at once)
    }
    if compare:
        result["schedulers"] = {
            n: {
                "predicted_ms": p.predicted_us / 1e3,
                "solve_s": getattr(p, "solve_s", None),
                "status": _own_status(p, lb),
                "partitions": len(p.partitions),
            }
            for n, p in plans.items()
        }
    if explain:
        result["explain"] = why
    if as_json:
        emit_json(result)
        return
    label = " (modeled)" if plan.modeled else ""
    # a heuristic's plan that auto proved optimal (it meets the bound) says so, not "optimal"
    # beside the "heuristic" --compare lists for that scheduler's own run
    status = "optimal: it meets the lower bound" if plan.status == "optimal" else plan.status
    # auto keeps the best plan of its schedulers: say it chose, and which one found it
    if scheduler == "auto" and plan.scheduler != "auto":
        by = f"[bold]auto[/bold] ({plan.scheduler}'s plan; {status})"
    else:
        by = f"[bold]{plan.scheduler}[/bold] ({status})"
    digits = _digits(plan.predicted_us, lb, plan.status == "optimal")
    console.print(
        f"plan by {by}: predicted "
        f"{plan.predicted_us / 1e3:.{digits}f} ms{label}, lower bound {lb / 1e3:.{digits}f} ms, "
        f"{count_of(len(plan.partitions), 'partition')}, "
        f"{count_of(len(pf.parallel), 'parallel group')}"
    )
    slow = {u: f for u, f in problem.corun.items() if f > 1.0}
    if slow and len({p.unit for p in plan.partitions}) > 1:
        console.print(
            "units slow each other when they run at once ("
            + ", ".join(f"{u} x{f:.3f}" for u, f in slow.items())
            + ", timed side by side): charged where their partitions overlap"
        )
    if compare:
        t = Table(show_edge=False)
        for c in ("scheduler", "predicted", "status", "partitions", "solve time"):
            t.add_column(c, justify="left" if c in ("scheduler", "status") else "right")
        for n, p in sorted(plans.items(), key=lambda kv: kv[1].predicted_us):
            t.add_row(
                n,
                f"{p.predicted_us / 1e3:.3f} ms",
                _own_status(p, lb),
                str(len(p.partitions)),
                f"{getattr(p, 'solve_s', 0.0) * 1e3:.1f} ms",
            )
        console.print(t)
        console.print(
            f"critical-path bound {cp / 1e3:.3f} ms (each node on its fastest unit, no sharing: "
            "the simplest bound; the plan's line above gives the best one proven); each "
            "scheduler's status is its own run's, auto's the best plan against the best bound"
            + (
                "; model-optimal: optimal in the scheduler's own model, but its plan, simulated "
                "as partitions, is slower than the lower bound (the model leaves out "
                "partition costs)"
                if any(_own_status(p, lb) == MODEL_OPTIMAL for p in plans.values())
                else ""
            )
        )
    t = Table(show_edge=False)
    for c in ("partition", "unit", "nodes", "start", "end"):
        t.add_column(c, justify="left" if c in ("partition", "unit") else "right")
    for p in plan.partitions:
        t.add_row(
            p.name, p.unit, str(len(p.nodes)), f"{p.start_us / 1e3:.3f}", f"{p.end_us / 1e3:.3f}"
        )
    console.print(t)
    for w in why:
        console.print(w["line"], markup=False)
    if output:
        console.print(f"plan written to {output}")


def _plan_stream(
    problem: Any,
    graph: Any,
    units: Any,
    time_limit: float | None,
    max_latency_ms: float | None,
    output: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """``plan --objective throughput``: plan, write the plan file, print or emit JSON."""
    from partuner.cli.stream_views import plan_result, print_plan
    from partuner.export import atomic_write, plan_to_dict, write_plan
    from partuner.throughput import make_stream_plan, stream_stages, with_stream

    with StageLines(quiet or as_json) as stage:
        stage("planning")
        result, _, _ = make_stream_plan(
            problem,
            time_limit=time_limit,
            max_latency_us=None if max_latency_ms is None else max_latency_ms * 1e3,
            progress=stream_stages(stage),
        )
    best = result.best
    pf = _plan_file(best.plan, problem, graph, units)
    if units is not None:
        for u in best.units:
            if u in units.units:
                pf.units.setdefault(u, units[u].spec())
    with_stream(pf, best, result)
    if output:
        if output.endswith(".json"):
            atomic_write(output, json.dumps(plan_to_dict(pf), indent=1))
        else:
            write_plan(pf, output)
    r = plan_result(result, output)
    r["problem"] = problem.name
    r["model"] = graph.source if graph is not None else None
    r["corun"] = dict(problem.corun)
    if as_json:
        emit_json(r)
    else:
        print_plan(r)


def _plan_file(plan: Any, problem: Any, graph: Any, units: Any) -> Any:
    """The file form of ``plan``; without a model (``--load-problem``) it names the problem
    and describes only the units the units set knows."""
    from partuner.export import PartitionSpec, PlanFile
    from partuner.pipeline import plan_file

    if graph is not None and all(u in units.units for u in plan.units):
        return plan_file(plan, graph, units)
    return PlanFile(
        partitions=[
            PartitionSpec(p.name, p.unit, tuple(p.nodes), p.start_us, p.end_us)
            for p in plan.partitions
        ],
        model=Path(graph.source).name if graph is not None else problem.name,
        input_shapes={k: list(graph.values[k].shape) for k in graph.inputs} if graph else {},
        scheduler=plan.scheduler,
        status=plan.status,
        predicted_us=plan.predicted_us,
        lower_bound_us=plan.lower_bound_us,
        modeled=plan.modeled,
        units={u: units[u].spec() for u in plan.units if units is not None and u in units.units},
        parallel=plan.parallel_groups(),
    )


def _explain(problem: Any, plan: Any) -> list[dict[str, Any]]:
    """Per partition: its cost on every unit, the transfers it pays and avoids, and why it sits
    on its unit, as data plus a one-line ``line``."""
    from partuner.plan.simulate import partition_cost, written

    parts = plan.partitions
    part_of = {n: i for i, p in enumerate(parts) for n in p.nodes}
    crossing: dict[tuple[int, int], dict[Any, float]] = {}
    for i, e in enumerate(problem.edges):
        q, p = part_of[e.src], part_of[e.dst]
        if q != p:
            crossing.setdefault((q, p), {}).update(problem.payload(i))
    moved = {k: sum(v.values()) for k, v in crossing.items()}
    out = []
    for i, p in enumerate(parts):
        ins = {q: b for (q, r), b in moved.items() if r == i}
        outs = {r: b for (q, r), b in moved.items() if q == i}
        in_bytes = sum(ins.values())
        out_bytes = written(crossing, len(parts))[i]
        cost = {
            u: partition_cost(problem, u, p.nodes, in_bytes, out_bytes)
            if all(math.isfinite(problem.cost[n][u]) for n in p.nodes)
            else math.inf
            for u in problem.units
        }
        paid = sum(problem.transfer_us(parts[q].unit, p.unit, b) for q, b in ins.items())
        others = [u for u in problem.units if u != p.unit and math.isfinite(cost[u])]
        alt = min(others, key=cost.__getitem__) if others else None
        avoided = 0.0  # transfers that moving to `alt` would add, less those it would save
        if alt is not None:
            for k, b in [*ins.items(), *outs.items()]:
                avoided += problem.transfer_us(parts[k].unit, alt, b)
                avoided -= problem.transfer_us(parts[k].unit, p.unit, b)
        busy = [
            r.name
            for r in parts
            if alt is not None
            and r is not p  # a partition does not keep a unit busy from itself
            and r.unit in problem.conflicts(alt)
            and r.start_us < p.end_us
            and p.start_us < r.end_us
        ]
        if alt is None:
            reason = f"only {p.unit} can run all of its nodes"
        elif cost[p.unit] < cost[alt] - 0.05:  # shown to 0.1 us: a tie is no reason
            reason = f"fastest on {p.unit} ({cost[alt] - cost[p.unit]:.1f} us less than {alt})"
        elif busy:
            reason = f"{alt} is busy meanwhile with {', '.join(busy)}"
        elif cost[p.unit] <= cost[alt] + 0.05:
            reason = f"as fast on {p.unit} as on {alt}"
        elif avoided > cost[p.unit] - cost[alt]:
            reason = f"slower than on {alt} but avoids {avoided:.1f} us of transfers"
        else:
            reason = f"where the {plan.scheduler} schedule put it"
        costs = ", ".join(
            f"{u} {c / 1e3:.3f}" if math.isfinite(c) else f"{u} -" for u, c in cost.items()
        )
        line = (
            f"{p.name} on {p.unit}: {len(p.nodes)} nodes; cost ms: {costs}; reads "
            f"{in_bytes / 1e3:.1f} KB from other partitions ({paid:.1f} us transfer paid), "
            f"{max(0.0, avoided):.1f} us avoided; {reason}"
        )
        out.append(
            {
                "partition": p.name,
                "unit": p.unit,
                "cost_ms": {u: c / 1e3 for u, c in cost.items()},
                "in_bytes": in_bytes,
                "transfer_paid_us": paid,
                "transfer_avoided_us": max(0.0, avoided),
                "reason": reason,
                "line": line,
            }
        )
    return out


@main.command("schedulers")
@handle_errors
def schedulers_cmd() -> None:
    """List the registered schedulers (built-in and from plugins)."""
    from partuner.plan import get_scheduler, scheduler_names
    from partuner.plan.auto import Auto  # noqa: F401  (registers "auto" and "exact")

    for n in scheduler_names():
        doc = (type(get_scheduler(n)).__doc__ or "").strip().splitlines()
        console.print(f"{n}: {doc[0] if doc else ''}")


#: ``plan --compare``'s status for a scheduler that proved its own model optimal (``exact``'s
#: node-level model) while its plan, simulated as partitions, misses the lower bound
MODEL_OPTIMAL = "model-optimal"


def _own_status(plan: Any, bound_us: float) -> str:
    """A scheduler's status in ``--compare``: ``optimal`` only for a plan that meets the
    bound (a new-user trial read exact's "optimal" beside a faster pexact plan)."""
    if plan.status == "optimal" and plan.predicted_us > bound_us * (1 + 1e-6) + 1e-6:
        return MODEL_OPTIMAL
    return str(plan.status)


def _digits(predicted_us: float, bound_us: float, optimal: bool) -> int:
    """Decimals of ms (3 to 6: to the ns) that show a plan not proven optimal above its bound.

    >>> _digits(994.2, 993.9, False), _digits(994.2, 993.9, True), _digits(5.0, 4.0, False)
    (4, 3, 3)
    """
    digits = 3
    while digits < 6 and not optimal and predicted_us > bound_us:
        if f"{predicted_us / 1e3:.{digits}f}" != f"{bound_us / 1e3:.{digits}f}":
            break
        digits += 1
    return digits


def _check_loaded(
    problem: Any, path: Path, g: Any, us: Any, fuse: tuple[str, ...], skip: bool
) -> None:
    """A dumped problem is planned as it is: options that profile are refused, not ignored;
    the MODEL and units given (for the plan file) must be the problem's."""
    from partuner.errors import PartunerError

    if given("db") or fuse or given("fuse_max") or skip:
        raise PartunerError(
            "--load-problem plans the problem as dumped, without profiling: leave out --db, "
            "--fuse, --fuse-max and --skip-unavailable (give them when dumping it)"
        )
    if g is not None:
        mine = {n.name for n in g.compute_nodes}
        other = next((n for n in problem.nodes if n not in mine), None)
        if other is not None or len(problem.nodes) != len(mine):
            raise PartunerError(
                f"{path} is a problem of another model than {g.source}"
                + (f" (its node {other!r} is not in the model)" if other else "")
                + "; give the model it was dumped from, or leave MODEL out"
            )
    unknown = [u for u in problem.units if us is not None and u not in us]
    if unknown:
        raise PartunerError(
            f"{path} plans on unit(s) {unknown}, not in {us.source or 'the units given'}; give "
            "the units file it was dumped with"
        )
