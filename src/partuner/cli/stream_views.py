"""The throughput objective on the command line: ``plan``/``tune --objective throughput`` and
``run --stream N`` call these to run the library and render (tables, or JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from partuner.cli.common import console
from partuner.errors import PartunerError

__all__ = ["plan_result", "print_plan", "print_run", "print_tune", "run_stream", "tune_result"]


def _fps(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f} ms"


def _stream_row(sp: Any) -> dict[str, Any]:
    return {
        "name": sp.name,
        "predicted_fps": sp.fps,
        "partitions": len(sp.plan.partitions),
        "units": sp.units,
        "copies": [dict(c) for c in sp.copies],
        "in_flight": [t.in_flight for t in sp.timings],
        "latency_ms": {"p50": sp.latency_us(50) / 1e3, "p99": sp.latency_us(99) / 1e3},
        "single_frame_ms": sp.plan.predicted_us / 1e3,
        "utilisation": sp.utilisation,
        "modeled": sp.plan.modeled,
    }


def plan_result(result: Any, output: str | None) -> dict[str, Any]:
    """``plan --objective throughput --json``."""
    best = result.best
    return {
        "objective": "throughput",
        "problem": None,
        "scheduler": best.name,
        "status": result.status,
        "predicted_fps": best.fps,
        "fps_bound": None if result.fps_bound == float("inf") else result.fps_bound,
        "period_bound_ms": result.bound_us / 1e3,
        "in_flight": [t.in_flight for t in best.timings],
        "copies": [dict(c) for c in best.copies],
        "latency_ms": {"p50": best.latency_us(50) / 1e3, "p99": best.latency_us(99) / 1e3},
        "max_latency_ms": None if result.max_latency_us is None else result.max_latency_us / 1e3,
        "utilisation": best.utilisation,
        "modeled": best.plan.modeled,
        "partitions": [
            {"name": p.name, "unit": p.unit, "nodes": len(p.nodes)} for p in best.plan.partitions
        ],
        "baselines": {k: _stream_row(v) for k, v in result.baselines.items()},
        "candidates": {k: _stream_row(v) for k, v in result.candidates.items()},
        "plan_file": output,
    }


def print_plan(r: dict[str, Any]) -> None:
    label, n = " (modeled)" if r["modeled"] else "", sum(r["in_flight"])
    console.print(
        f"stream plan by [bold]{r['scheduler']}[/bold] ({r['status']}): predicted "
        f"{r['predicted_fps']:.1f} frames/s{label}, bound {_fps(r['fps_bound'])} frames/s, "
        f"{n} frame{'s' * (n != 1)} in flight, latency p50 {_ms(r['latency_ms']['p50'])} "
        f"p99 {_ms(r['latency_ms']['p99'])}"
    )
    t = Table(show_edge=False)
    for c in ("configuration", "predicted frames/s", "partitions", "in flight", "p99 latency"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    rows = sorted(r["candidates"].items(), key=lambda kv: -kv[1]["predicted_fps"])
    for name, c in rows:
        t.add_row(
            name,
            _fps(c["predicted_fps"]),
            str(c["partitions"]) + (f" x{1 + len(c['copies'])}" if c["copies"] else ""),
            str(sum(c["in_flight"])),
            _ms(c["latency_ms"]["p99"]),
        )
    console.print(t)
    parts = Table(show_edge=False)
    for c in ("partition", "unit", "nodes"):
        parts.add_column(c, justify="left" if c != "nodes" else "right")
    for p in r["partitions"]:
        parts.add_row(p["name"], p["unit"], str(p["nodes"]))
    console.print(parts)
    if r.get("corun"):
        slow = ", ".join(f"{u} x{f:.3f}" for u, f in r["corun"].items())
        console.print(f"units slowing each other when all work (measured): {slow}")
    if r["plan_file"]:
        console.print(f"plan written to {r['plan_file']}")


def run_stream(
    model: str,
    input_shapes: tuple[str, ...],
    plan_path: str,
    units_file: str | None,
    feeds: Any,
    frames: int,
    in_flight: int | None,
    timeout: float,
    trace_path: str | None,
    graph: Any,
    pf: Any,
    units: Any,
) -> dict[str, Any]:
    """``partuner run --stream N``: stream N frames through the plan (and its copies) and
    check each against the whole model; the JSON result."""
    from partuner.throughput import (
        check_stream_spec,
        measure_stream,
        stream_frames,
        stream_sessions,
    )

    if frames < 1:
        raise PartunerError(f"--stream must be 1 or more frames, got {frames}")
    sessions = stream_sessions(graph, pf, units, timeout_s=timeout)
    try:
        flights = check_stream_spec(pf, in_flight, [len(s.lanes) for s in sessions])
        used = sorted({p.unit for s in sessions for p in s.partitions})
        precisions = [units[u].precision for u in used]
        run = measure_stream(
            sessions,
            flights,
            stream_frames(graph, frames, feeds=feeds),
            check=True,
            precisions=precisions,
        )
    finally:
        for s in sessions:
            s.close()
    modeled = any(units[u].modeled for u in used)
    out = run.to_dict()
    spec = pf.stream
    if spec is not None and list(flights) != list(spec.in_flight):
        # the plan's figures are for its own frames in flight, not for --in-flight's
        note = (
            f"the plan's prediction is for {sum(spec.in_flight)} frames in flight, not "
            f"{sum(flights)} (--in-flight); leave it out to compare with it"
        )
        spec = None
    else:
        note = None
    if frames <= sum(flights):  # every frame started at once: no steady state to measure
        few = (
            f"{frames} frame(s) for {sum(flights)} in flight: each started at once, so the "
            "figures are of a start-up, not of a stream; stream many more frames"
        )
        note = f"{note}; {few}" if note else few
    result = {
        "model": graph.source,
        "plan": plan_path,
        "partitions": len(pf.partitions),
        "copies": 1 + (len(spec.copies) if spec is not None else 0),
        "units": used,
        "modeled": modeled,
        **out,
        "throughput_fps": None if modeled else out["throughput_fps"],
        "host_fps": out["throughput_fps"],
        "predicted_fps": None if spec is None else spec.predicted_fps,
        "predicted_latency_ms": None
        if spec is None or spec.latency_p50_us is None
        else {"p50": spec.latency_p50_us / 1e3, "p99": (spec.latency_p99_us or 0) / 1e3},
        "max_latency_ms": None
        if pf.stream is None or pf.stream.max_latency_us is None
        else pf.stream.max_latency_us / 1e3,
        "note": note,
    }
    if modeled:
        result["latency_ms"] = None
        result["utilisation"] = None
    if trace_path:
        _write_stream_trace(trace_path, run.stats, result)
        result["trace"] = trace_path
    return result


def _write_stream_trace(path: str, stats: Any, meta: dict[str, Any]) -> None:
    from partuner.report import Slice, chrome_trace, write_trace

    slices = [
        Slice(f"f{t.frame} {t.partition}", t.unit, t.start_s * 1e6, t.end_s * 1e6)
        for t in stats.tasks
    ]
    keys = ("model", "plan", "frames", "throughput_fps", "predicted_fps")
    write_trace(path, chrome_trace([], slices, metadata={k: meta[k] for k in keys}))


def print_run(r: dict[str, Any]) -> None:
    if r["modeled"]:
        console.print(
            f"the plan uses modeled units: no throughput can be measured here (predicted "
            f"{_fps(r['predicted_fps'])} frames/s, modeled; the host ran {r['host_fps']:.1f})"
        )
    else:
        lat = r["latency_ms"]
        console.print(
            f"streamed {r['frames']} frames: {r['throughput_fps']:.1f} frames/s measured "
            + (
                f"(predicted {_fps(r['predicted_fps'])})"
                if r["predicted_fps"] is not None
                else "(no prediction for these frames in flight)"
                if r.get("note")
                else "(no prediction: a latency plan's file has none; plan --objective "
                "throughput predicts frames/s)"
            )
            + f", latency p50 {lat['p50']:.3f} ms, p99 "
            f"{lat['p99']:.3f} ms, {sum(r['in_flight'])} in flight"
        )
        busy = ", ".join(f"{u} {100 * v:.0f} %" for u, v in sorted(r["utilisation"].items()))
        console.print(f"utilisation: {busy}")
        bound = r.get("max_latency_ms")
        if bound is not None:
            within = lat["p99"] <= bound
            console.print(
                f"p99 latency {lat['p99']:.3f} ms "
                + ("within" if within else "[yellow]over[/yellow]")
                + f" the plan's bound of {bound:.3f} ms (--max-latency-ms)"
                + ("" if within else "; tune --objective throughput measures the candidates")
            )
    if r.get("note"):
        console.print(r["note"])
    c = r["check"]
    verdict = "[green]passed[/green]" if c["passed"] else "[red]FAILED[/red]"
    bad = f" (frames {c['frames_failed'][:10]})" if c["frames_failed"] else ""
    console.print(f"output check of every frame {verdict}{bad} (rule {c['rule']})")
    if r.get("trace"):
        console.print(f"timeline written to {r['trace']} (open it in ui.perfetto.dev)")


def tune_result(r: Any, graph: Any, units: Any, prof: Any) -> dict[str, Any]:
    """``tune --objective throughput --json``."""
    rows = []
    for name, sp, run in r.rows:
        rows.append(
            {
                "what": name,
                "plan": _stream_row(sp),
                "predicted_fps": sp.fps,
                "measured_fps": None if run is None else run.stats.throughput_fps,
                "latency_ms": None
                if run is None
                else {"p50": run.stats.latency_ms(50), "p99": run.stats.latency_ms(99)},
                "utilisation": None if run is None else run.stats.utilisation(),
                "check_passed": None if run is None or run.check is None else run.check.passed,
            }
        )
    kept = next((row for row in rows if row["plan"]["name"] == r.kept.name), rows[0])
    return {
        "objective": "throughput",
        "model": graph.source,
        "scheduler": r.kept.name,
        "status": r.result.status,
        "predicted_fps": r.kept.fps,
        "measured_fps": kept["measured_fps"],
        "fps_bound": None if r.result.fps_bound == float("inf") else r.result.fps_bound,
        "latency_ms": kept["latency_ms"],
        "in_flight": [t.in_flight for t in r.kept.timings],
        "rows": rows,
        "check": None if r.check is None else r.check.to_dict(),
        "note": r.note or None,
        "latency_bound_met": r.bound_met,
        "outdir": str(r.outdir),
        "files": r.files,
    }


def _configuration(what: str, name: str) -> str:
    """A row's label: the configuration and its plan's name, said once (``best single unit
    (ovall)``, not ``best single unit (single unit (ovall))``).

    >>> _configuration("best single unit", "single unit (ovall)")
    'best single unit (ovall)'
    >>> _configuration("partuner plan", "latency plan (auto)")
    'partuner plan: latency plan (auto)'
    """
    head, _, inner = name.partition(" (")
    if name in what:
        return what
    if inner and head in what:
        return f"{what} ({inner}"
    return f"{what}: {name}"


def print_tune(res: dict[str, Any], header: str) -> None:
    console.print(header)
    t = Table(show_edge=False)
    for c in ("configuration", "predicted", "measured", "p50 latency", "p99 latency"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    for row in res["rows"]:
        lat = row["latency_ms"] or {}
        name = row["plan"]["name"]
        what = _configuration(row["what"], name)
        t.add_row(
            what,
            f"{row['predicted_fps']:.1f} /s",
            "-" if row["measured_fps"] is None else f"{row['measured_fps']:.1f} /s",
            _ms(lat.get("p50")),
            _ms(lat.get("p99")),
        )
    console.print(t)
    if res["note"]:
        console.print(f"[yellow]{res['note']}[/yellow]")
    console.print(f"bound: {_fps(res['fps_bound'])} frames/s; status {res['status']}")
    c = res["check"]
    if c is not None:
        verdict = "[green]passed[/green]" if c["passed"] else "[red]FAILED[/red]"
        console.print(f"output check of every frame {verdict} (rule {c['rule']})")
    files = sorted(res["files"], key=lambda f: (f != "plan.yaml", "/" in f, f))
    more = f" and {len(files) - 4} more" if len(files) > 4 else ""
    console.print(f"files in {res['outdir']}/: {', '.join(files[:4])}{more}")
