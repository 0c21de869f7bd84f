"""``partuner run`` and ``partuner check``: execute a plan concurrently and check its outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    console,
    emit_json,
    handle_errors,
    input_shape_option,
    json_option,
    load_graph,
    model_argument,
    units_option,
)
from partuner.errors import PartunerError


def _units_for_plan(units_file: str | None, pf: Any) -> Any:
    from partuner.cli.stages import load_units_cli
    from partuner.units import units_from_mapping

    if units_file or not pf.units:
        return load_units_cli(units_file)
    return units_from_mapping({"units": pf.units}, source=f"{pf.source} (units section)")


def _feeds(graph: Any, specs: tuple[str, ...], seed: int) -> dict[str, np.ndarray]:
    from partuner.profile.measure import random_feeds

    feeds = random_feeds(graph, list(graph.inputs), seed=seed)
    for spec in specs:
        name, _, path = spec.partition("=")
        if not path:
            raise PartunerError(f"bad --input {spec!r}: write NAME=FILE.npy")
        if name not in graph.inputs:
            raise PartunerError(f"--input names {name!r}; the model's inputs are {graph.inputs}")
        try:
            feeds[name] = np.load(Path(path), allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise PartunerError(f"cannot read --input {path}: {exc}") from None
    return feeds


def _execute(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    repeat: int,
    seed: int,
    timeout: float,
) -> dict[str, Any]:
    from partuner.export import cut, read_plan
    from partuner.pipeline import measure_session, plan_from_file, reference_outputs
    from partuner.runtime import Session, check_outputs

    g = load_graph(model, input_shapes)
    pf = read_plan(plan_path)
    us = _units_for_plan(units_file, pf)
    plan_from_file(pf, g, us)
    for u in {p.unit for p in pf.partitions}:
        ok, why = us[u].availability()
        if not ok:
            raise PartunerError(f"unit {u!r} of the plan is not available here: {why}")
    feeds = _feeds(g, inputs, seed)
    parts = cut(g, pf.partitions)
    with Session(g, parts, us, timeout_s=timeout) as sess:
        stats, got = measure_session(sess, feeds, repeat, warmup=min(3, repeat))
    ref = reference_outputs(g, feeds)
    used = sorted({p.unit for p in pf.partitions})
    check = check_outputs(ref, got, [us[u].precision for u in used])
    modeled = any(us[u].modeled for u in used)
    predicted = {p.name: (p.end_us - p.start_us) / 1e3 for p in pf.partitions}
    return {
        "model": g.source,
        "plan": plan_path,
        "partitions": len(parts),
        "units": used,
        "measured_ms": None if modeled else stats.median_ms,
        "measured_p10_ms": None if modeled else stats.p10_ms,
        "measured_p90_ms": None if modeled else stats.p90_ms,
        "host_ms": stats.median_ms,
        "modeled": modeled,
        "predicted_ms": None if pf.predicted_us is None else pf.predicted_us / 1e3,
        "runs": stats.runs,
        "partition_ms": {
            p.name: {
                "unit": p.unit,
                "measured": stats.partition_ms.get(p.name),
                "predicted": predicted.get(p.name),
            }
            for p in pf.partitions
        },
        "check": check.to_dict(),
    }


def _print_check(check: dict[str, Any]) -> None:
    verdict = "[green]passed[/green]" if check["passed"] else "[red]FAILED[/red]"
    console.print(f"output check {verdict} (rule {check['rule']})")
    for o in check["outputs"]:
        top1 = "-" if o["top1_agree"] is None else f"{100 * o['top1_agree']:.0f}%"
        console.print(
            f"  {o['name']}: max abs {o['max_abs']:.3g}, max rel {o['max_rel']:.3g}, "
            f"cosine {o['cosine']:.6f}, top-1 agreement {top1}"
        )


_common = [
    model_argument,
    input_shape_option,
    click.option(
        "--plan",
        "plan_path",
        required=True,
        type=click.Path(dir_okay=False),
        help="A plan YAML (partuner's or NEST-C's).",
    ),
    units_option,
    click.option(
        "--input",
        "inputs",
        multiple=True,
        metavar="NAME=FILE.npy",
        help="Use this input instead of a seeded random one.",
    ),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=60.0,
        show_default=True,
        help="Seconds at most per run.",
    ),
]


def _with_common(fn: Any) -> Any:
    for deco in reversed(_common):
        fn = deco(fn)
    return fn


@main.command("run")
@_with_common
@click.option("--repeat", type=click.IntRange(min=1), default=30, show_default=True)
@json_option
@handle_errors
def run_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    seed: int,
    timeout: float,
    repeat: int,
    as_json: bool,
) -> None:
    """Run MODEL as PLAN's partitions, one worker per unit; measure and check it."""
    r = _execute(model, input_shapes, plan_path, units_file, inputs, repeat, seed, timeout)
    if as_json:
        emit_json(r)
    else:
        pred = "-" if r["predicted_ms"] is None else f"{r['predicted_ms']:.3f} ms"
        if r["modeled"]:
            console.print(
                f"plan uses modeled units: no latency can be measured here "
                f"(predicted {pred}, modeled; host run took {r['host_ms']:.3f} ms)"
            )
        else:
            console.print(
                f"measured {r['measured_ms']:.3f} ms median "
                f"(p10 {r['measured_p10_ms']:.3f}, p90 {r['measured_p90_ms']:.3f}, "
                f"{r['runs']} runs); predicted {pred}"
            )
        t = Table(show_edge=False)
        for c in ("partition", "unit", "measured", "predicted"):
            t.add_column(c, justify="left" if c in ("partition", "unit") else "right")
        for name, p in r["partition_ms"].items():
            t.add_row(
                name,
                p["unit"],
                "-" if p["measured"] is None else f"{p['measured']:.3f}",
                "-" if p["predicted"] is None else f"{p['predicted']:.3f}",
            )
        console.print(t)
        _print_check(r["check"])
    if not r["check"]["passed"]:
        raise SystemExit(1)


@main.command("check")
@_with_common
@json_option
@handle_errors
def check_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    seed: int,
    timeout: float,
    as_json: bool,
) -> None:
    """Run PLAN once and compare its outputs with the unpartitioned model's."""
    r = _execute(model, input_shapes, plan_path, units_file, inputs, 1, seed, timeout)
    if as_json:
        emit_json(r["check"])
    else:
        _print_check(r["check"])
    if not r["check"]["passed"]:
        raise SystemExit(1)
