"""``partuner run`` and ``partuner check``: execute a plan concurrently and check its outputs.

``run --trace FILE`` writes the Chrome-trace timeline (predicted vs measured); ``run --calibrate``
stores per-unit correction factors (measured / predicted) in the profile store; ``--fallback
UNIT`` runs the partitions whose unit cannot run here on UNIT instead. ``execute`` is shared with
``partuner report``.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import click
import numpy as np
from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    FiniteRange,
    WritePath,
    console,
    db_option,
    emit_json,
    given,
    handle_errors,
    input_options,
    input_shape_option,
    json_option,
    load_graph_and_plan,
    model_argument,
    quiet_option,
    read_inputs,
    refuse_overwrite,
    repeat_option,
    units_option,
)
from partuner.errors import PartunerError

log = logging.getLogger(__name__)


def _units_for_plan(units_file: str | None, pf: Any, fallback: str | None = None) -> Any:
    """The units of ``--units FILE``, else those of the plan's own section: a plan file is
    untrusted, so only units on the allow-list (no command, no code loaded) are built from it.
    A ``fallback`` unit the section lacks comes from this machine's default units."""
    from partuner.cli.stages import load_units_cli
    from partuner.units import units_from_mapping
    from partuner.units.untrusted import check_plan_units

    if units_file or not pf.units:
        units = load_units_cli(units_file)
        _warn_other_units(pf, units)
        return units
    check_plan_units(pf.units, pf.source)
    specs = dict(pf.units)
    if fallback is not None and fallback not in specs:
        local = load_units_cli(None)
        if fallback in local.units:
            specs[fallback] = local[fallback].spec()
    return units_from_mapping({"units": specs}, source=f"{pf.source} (units section)")


def _warn_other_units(pf: Any, units: Any) -> None:
    """Warn when a unit of the plan's own units section is set otherwise in ``units``: the
    plan's predictions were made for the units of its section."""

    def canon(spec: dict[str, Any], other: dict[str, Any]) -> str:
        spec = {k: v for k, v in spec.items() if v is not None}
        if isinstance(spec.get("remote"), dict) and other.get("remote") is True:
            spec["remote"] = True  # the target the plan resolved for `remote: true`
        return json.dumps(spec, sort_keys=True, default=str)

    def planned(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """The plan's entry as a unit built from it would write it (defaults filled in)."""
        from partuner.units import units_from_mapping
        from partuner.units.untrusted import check_plan_units

        try:
            check_plan_units({name: spec}, pf.source)
            return units_from_mapping({"units": {name: spec}}, pf.source)[name].spec()
        except PartunerError:  # not one to build from a plan file: compare as written
            return dict(spec)

    def same(here: dict[str, Any], there: dict[str, Any]) -> bool:
        return canon(here, there) == canon(there, here)

    differ = []
    for name, spec in pf.units.items():
        if name in units.units and not same(units[name].spec(), planned(name, spec)):
            here, there = units[name].backend, spec.get("backend")
            differ.append(
                f"{name!r} ({here} here, {there} in the plan)" if here != there else repr(name)
            )
    if differ:
        log.warning(
            "the units file sets unit(s) %s otherwise than the plan %s was made for; its "
            "predictions are for the plan's units (plan again to predict for these)",
            ", ".join(differ),
            pf.source,
        )


def _feeds(graph: Any, specs: tuple[str, ...], seed: int) -> dict[str, np.ndarray]:
    from partuner.profile.measure import random_feeds

    feeds = random_feeds(graph, list(graph.inputs), seed=seed)
    feeds.update(read_inputs(specs, list(graph.inputs)))
    return feeds


@dataclass
class Ran:
    """What ``execute`` ran, beside its JSON result: for timelines, reports and calibration."""

    graph: Any
    plan: Any  # PlanFile
    parts: list[Any]  # PartitionModel, planned units
    ran_units: dict[str, str]  # partition -> unit it ran on (differs after a fallback)
    units: Any  # UnitSet
    stats: Any  # RunStats
    trace: list[Any]  # PartitionTrace of the last run
    transfers: list[Any]  # TransferTrace of the last run


def execute(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    repeat: int,
    seed: int,
    timeout: float,
    fallback: str | None = None,
) -> tuple[dict[str, Any], Ran]:
    """Run PLAN ``repeat`` times and check it; the JSON result and what was run."""
    from partuner.export import cut
    from partuner.pipeline import measure_session, plan_from_file, reference_outputs
    from partuner.runtime import Session, check_outputs

    g, pf = load_graph_and_plan(model, input_shapes, plan_path)
    us = _units_for_plan(units_file, pf, fallback)
    if fallback is not None and fallback not in us:
        raise PartunerError(
            f"--fallback {fallback!r} is not a unit of {us.source or 'the units given'} "
            f"(its units: {list(us.units)}); name one of them, or pass --units FILE"
        )
    plan_from_file(pf, g, us, fallback=fallback)
    if fallback is not None:
        ok, why = us[fallback].availability()
        if not ok:
            raise PartunerError(f"--fallback unit {fallback!r} is not available here: {why}")
    for u in sorted({p.unit for p in pf.partitions} & set(us.units)):
        ok, why = us[u].availability()
        if not ok and fallback is None:
            raise PartunerError(
                f"unit {u!r} of the plan is not available here: {why}; or pass --fallback UNIT "
                "to run its partitions on another unit"
            )
    feeds = _feeds(g, inputs, seed)
    parts = cut(g, pf.partitions)
    with Session(g, parts, us, timeout_s=timeout, fallback=fallback) as sess:
        stats, got = measure_session(sess, feeds, repeat, warmup=min(3, repeat))
        trace, transfers = _median_trace(sess, feeds, min(repeat, 5))
        ran_units = {p.name: p.unit for p in sess.partitions}
        fallbacks = dict(sess.fallbacks)
        ran = Ran(g, pf, parts, ran_units, us, stats, trace, transfers)
    ref = reference_outputs(g, feeds)
    used = sorted(set(ran_units.values()))
    check = check_outputs(ref, got, [us[u].precision for u in used])
    modeled = any(us[u].modeled for u in used)
    predicted = {  # a NEST-C-only plan (no partuner section) has no times: NaN -> None
        p.name: (p.end_us - p.start_us) / 1e3
        for p in pf.partitions
        if math.isfinite(p.end_us - p.start_us)
    }
    result = {
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
                "unit": ran_units[p.name],
                "planned_unit": p.unit,
                # a modeled unit's outputs are computed on the host: that time is not its own
                "measured": None if emulated else stats.partition_ms.get(p.name),
                "host": stats.partition_ms.get(p.name) if emulated else None,
                "timing": "emulated on the host" if emulated else "measured",
                "predicted": predicted.get(p.name),
            }
            for p in pf.partitions
            for emulated in [us[ran_units[p.name]].modeled]
        },
        "fallback": {
            name: {"planned": unit, "ran_on": fallback, "reason": why}
            for name, (unit, why) in fallbacks.items()
        },
        "check": check.to_dict(),
    }
    return result, ran


def _median_trace(sess: Any, feeds: dict[str, np.ndarray], runs: int) -> tuple[list, list]:
    """The partition and transfer traces of the median-latency run among the last measured run
    and ``runs - 1`` more (one run's timeline can hold a stall; the median one is typical)."""
    kept = []
    for k in range(runs):
        if k:
            sess.run(None, feeds)
        end = max((t.end_s for t in sess.last_trace), default=0.0)
        kept.append((end, sess.last_trace, sess.last_transfers))
    kept.sort(key=lambda item: item[0])
    _, trace, transfers = kept[len(kept) // 2]
    return trace, transfers


def timeline(ran: Ran) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """Predicted and measured slices and hand-offs of a run (for the trace and the report)."""
    from partuner.report import (
        measured_handoffs,
        measured_slices,
        predicted_handoffs,
        predicted_slices,
    )

    pred = predicted_slices(ran.plan.partitions)
    nodes = {p.name: len(p.nodes) for p in ran.parts}
    meas = measured_slices(ran.trace, nodes)
    nbytes = {v: info.nbytes for v, info in ran.graph.values.items()}
    return pred, meas, predicted_handoffs(ran.parts, pred, nbytes), measured_handoffs(ran.transfers)


def _write_trace(path: str, ran: Ran, r: dict[str, Any]) -> None:
    from partuner.report import chrome_trace, write_trace

    pred, meas, ph, mh = timeline(ran)
    meta = {k: r[k] for k in ("model", "plan", "predicted_ms", "measured_ms", "partitions")}
    order = [u for u in ran.units.names if u in {s.unit for s in (*pred, *meas)}]
    emulated = [u for u in order if ran.units[u].modeled]
    trace = chrome_trace(pred, meas, ph, mh, units=order, metadata=meta, emulated=emulated)
    write_trace(path, trace)


def _calibrate(db: str | None, ran: Ran) -> dict[str, Any]:
    from partuner.profile import ProfileStore
    from partuner.runtime.calibrate import calibrate_plan

    with ProfileStore(db) as store:
        sig, factors = calibrate_plan(
            store,
            ran.graph,
            ran.units,
            ran.plan.partitions,
            ran.stats.partition_ms,
            ran.ran_units,
            plan=str(ran.plan.source),
        )
        where = str(store.path)
    return {
        "signature": sig,
        "db": where,
        "units": {
            ",".join(c.units): {
                "fingerprint": fp,
                "factor": c.factor,
                "partitions": c.partitions,
                "measured_ms": c.measured_ms,
                "predicted_ms": c.predicted_ms,
            }
            for fp, c in factors.items()
        },
    }


def _print_fallbacks(r: dict[str, Any]) -> None:
    for name, f in r.get("fallback", {}).items():
        console.print(
            f"[yellow]partition {name}: unit {f['planned']!r} cannot run it here; ran on "
            f"{f['ran_on']!r} instead[/yellow] ({f['reason']})"
        )


def _print_check(check: dict[str, Any]) -> None:
    verdict = "[green]passed[/green]" if check["passed"] else "[red]FAILED[/red]"
    console.print(f"output check {verdict} (rule {check['rule']})")

    def num(x: float | None, spec: str) -> str:  # NaN/inf (a non-finite output) as in JSON
        return "- (not finite)" if x is None or not math.isfinite(x) else format(x, spec)

    for o in check["outputs"]:
        top1 = "-" if o["top1_agree"] is None else f"{100 * o['top1_agree']:.0f}%"
        console.print(
            f"  {o['name']}: max abs {num(o['max_abs'], '.3g')}, max rel "
            f"{num(o['max_rel'], '.3g')}, cosine {num(o['cosine'], '.6f')}, top-1 agreement {top1}"
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
    input_options,
    click.option(
        "--timeout",
        type=FiniteRange(min=0.1),
        default=60.0,
        show_default=True,
        help="Seconds at most per run.",
    ),
    click.option(
        "--fallback",
        metavar="UNIT",
        default=None,
        help="Run partitions whose unit is unavailable (or cannot prepare them) on UNIT.",
    ),
]


def _with_common(fn: Any) -> Any:
    for deco in reversed(_common):
        fn = deco(fn)
    return fn


@main.command("run")
@_with_common
@repeat_option(30, "Runs of the plan to time (the median is reported).")
@click.option(
    "--trace",
    "trace_path",
    type=WritePath(dir_okay=False),
    default=None,
    help="Write the timeline (predicted vs measured) as Chrome trace JSON (Perfetto).",
)
@click.option(
    "--calibrate",
    is_flag=True,
    help="Store each unit's measured/predicted factor in the profile store.",
)
@click.option(
    "--stream",
    "stream_frames",
    type=click.IntRange(min=1, max=1_000_000),
    default=None,
    metavar="N",
    help="Run N frames as a stream (frames overlapping; outputs in order, each checked) and "
    "measure frames per second, latency and utilisation.",
)
@click.option(
    "--in-flight",
    type=click.IntRange(min=1, max=64),
    default=None,
    help="With --stream: frames in flight per copy (default: the plan's, else one per lane "
    "(units that share cores make one lane) and one more).",
)
@db_option
@json_option
@quiet_option
@handle_errors
def run_cmd(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    seed: int,
    timeout: float,
    fallback: str | None,
    repeat: int,
    trace_path: str | None,
    calibrate: bool,
    stream_frames: int | None,
    in_flight: int | None,
    db: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run MODEL as PLAN's partitions, one worker per unit; measure and check it."""
    del quiet  # accepted as on the other commands: run shows no progress, only its result
    refuse_overwrite([model, plan_path, units_file, db], [trace_path], specs=inputs)
    if stream_frames is not None:
        if fallback is not None or calibrate:
            extra = [o for o, on in (("--fallback", fallback), ("--calibrate", calibrate)) if on]
            raise PartunerError(
                f"--stream runs the plan's own units: leave out {' and '.join(extra)}"
            )
        _stream(
            model,
            input_shapes,
            plan_path,
            units_file,
            inputs,
            seed,
            timeout,
            stream_frames,
            in_flight,
            trace_path,
            as_json,
        )
        return
    if in_flight is not None:
        raise PartunerError("--in-flight sets a stream's frames in flight: add --stream N")
    r, ran = execute(
        model, input_shapes, plan_path, units_file, inputs, repeat, seed, timeout, fallback
    )
    if trace_path:
        _write_trace(trace_path, ran, r)
        r["trace"] = trace_path
    if calibrate:
        r["calibration"] = _calibrate(db, ran)
    r["note"] = None if calibrate else _off_prediction(r)
    if as_json:
        emit_json(r)
    else:
        _print_fallbacks(r)
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
                p["unit"]
                if p["unit"] == p["planned_unit"]
                else f"{p['planned_unit']}->{p['unit']}",
                _partition_time(p),
                "-" if p["predicted"] is None else f"{p['predicted']:.3f}",
            )
        console.print(t)
        if r["note"]:
            console.print(f"[yellow]{r['note']}[/yellow]")
        _print_check(r["check"])
        if trace_path:
            console.print(f"timeline written to {trace_path} (open it in ui.perfetto.dev)")
        if calibrate:
            _print_calibration(r["calibration"])
    if not r["check"]["passed"]:
        raise SystemExit(1)


def _stream(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    inputs: tuple[str, ...],
    seed: int,
    timeout: float,
    frames: int,
    in_flight: int | None,
    trace_path: str | None,
    as_json: bool,
) -> None:
    """``run --stream N``."""
    from partuner.cli.stream_views import print_run, run_stream
    from partuner.pipeline import plan_from_file

    if given("repeat"):
        raise PartunerError(
            "--repeat times single runs; a stream runs --stream N frames: drop --repeat"
        )
    from partuner.throughput import check_stream_copies

    g, pf = load_graph_and_plan(model, input_shapes, plan_path)
    us = _units_for_plan(units_file, pf)
    plan_from_file(pf, g, us)
    check_stream_copies(pf, g, us)  # before their units are asked whether they run here
    units = {p.unit for p in pf.partitions}
    for c in pf.stream.copies if pf.stream is not None else ():
        units |= {c.get(u, u) for u in units}
    for u in sorted(units):
        ok, why = us[u].availability()
        if not ok:
            raise PartunerError(f"unit {u!r} of the plan is not available here: {why}")
    feeds = _feeds(g, inputs, seed) if inputs else None
    r = run_stream(
        model,
        input_shapes,
        plan_path,
        units_file,
        feeds,
        frames,
        in_flight,
        timeout,
        trace_path,
        g,
        pf,
        us,
    )
    if as_json:
        emit_json(r)
    else:
        print_run(r)
    if not r["check"]["passed"]:
        raise SystemExit(1)


#: measured this far from the prediction (either way), ``run`` says what to do about it
OFF_PREDICTION = 0.15


def _off_prediction(r: dict[str, Any]) -> str | None:
    """A line for a measured plan whose median is :data:`OFF_PREDICTION` or more off its
    prediction, else None."""
    pred, meas = r.get("predicted_ms"), r.get("measured_ms")
    if r.get("modeled") or not pred or meas is None or not math.isfinite(pred):
        return None
    off = meas / pred - 1
    if abs(off) < OFF_PREDICTION:
        return None
    if r.get("fallback"):  # partitions ran elsewhere than planned: the prediction is not theirs
        return (
            f"measured {100 * abs(off):.0f} % {'above' if off > 0 else 'below'} the prediction, "
            f"which is for the planned units: partition(s) {sorted(r['fallback'])} ran on the "
            "fallback unit instead"
        )
    return (
        f"measured {100 * abs(off):.0f} % {'above' if off > 0 else 'below'} the prediction: "
        "the machine may be busier, or run faster or slower, than when it was profiled; "
        "--calibrate stores each unit's measured/predicted factor for the next plans, or "
        "profile into a new store (--db) on a quiet machine and plan again"
    )


def _print_calibration(cal: dict[str, Any]) -> None:
    if not cal["units"]:
        console.print("calibration: nothing to calibrate (no measured partition has a prediction)")
        return
    for units, c in cal["units"].items():
        console.print(
            f"calibration: {units}: measured/predicted x{c['factor']:.3f} "
            f"(sum measured over sum predicted, {c['partitions']} partitions)"
        )
    console.print(f"stored as {cal['signature']} in {cal['db']}")


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
    fallback: str | None,
    as_json: bool,
) -> None:
    """Run PLAN once and compare its outputs with the unpartitioned model's."""
    r, _ = execute(model, input_shapes, plan_path, units_file, inputs, 1, seed, timeout, fallback)
    if as_json:
        emit_json({**r["check"], "fallback": r["fallback"]} if r["fallback"] else r["check"])
    else:
        _print_fallbacks(r)
        _print_check(r["check"])
    if not r["check"]["passed"]:
        raise SystemExit(1)


def _partition_time(p: dict[str, Any]) -> str:
    """A partition's measured time, or its host time labelled as such (modeled unit)."""
    if p["measured"] is not None:
        return f"{p['measured']:.3f}"
    return "-" if p["host"] is None else f"- (emulated on the host: {p['host']:.3f})"
