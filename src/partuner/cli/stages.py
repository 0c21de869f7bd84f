"""Steps several commands share: load units, profile with a progress bar, build the problem."""

from __future__ import annotations

from typing import Any

from partuner.cli.common import err_console, progress_bar


def load_units_cli(units_file: str | None) -> Any:
    from partuner.units import default_units, load_units

    return load_units(units_file) if units_file else default_units()


def profile_cli(
    graph: Any,
    units: Any,
    db: str | None,
    quiet: bool,
    skip_unavailable: bool = False,
    budget_s: float = 0.25,
    fuse: tuple[str, ...] = (),
    fuse_max: int = 3,
    corun: bool = False,
) -> Any:
    """Profile with a progress bar; ``fuse`` holds ``--fuse`` patterns (or ``auto``). Remote
    units (``remote: true`` in the units file) come from the kit results imported into the
    store, never timed here. ``corun``: measure the units side by side too (what plans
    charge where units run at once)."""
    from partuner.profile import ProfileStore, parse_pattern, profile_model
    from partuner.profile.remote import resolve_remote

    patterns = [parse_pattern(f) for f in fuse if f.lower() != "auto"]
    fuse_auto = fuse_max if any(f.lower() == "auto" for f in fuse) else 0
    with ProfileStore(db) as store:
        remote = resolve_remote(store, units, graph)  # before the bar: errors stay one line
        with progress_bar("profiling", quiet) as cb:
            return profile_model(
                graph,
                units,
                store=store,
                progress=cb,
                budget_s=budget_s,
                skip_unavailable=skip_unavailable,
                fuse=patterns or None,
                fuse_auto=fuse_auto,
                remote=remote,
                corun=corun,
            )


def corrections_cli(graph: Any, units: Any, db: str | None, quiet: bool) -> dict[str, float]:
    """Per-unit correction factors stored by ``partuner run --calibrate`` for this model, said
    on stderr (unless ``quiet``): they scale every later plan of the model on those units."""
    from partuner.profile import ProfileStore
    from partuner.runtime.calibrate import load_calibration

    with ProfileStore(db) as store:
        got = load_calibration(store, graph, units)
    if got and not quiet:
        said = ", ".join(f"{u} x{f:.3g}" for u, f in got.items())
        err_console.print(
            f"note: node costs scaled by the factors `partuner run --calibrate` stored for this "
            f"model ({said}); another `run --calibrate` replaces them",
            markup=False,
        )
    return got


def busy_rows(profile: Any) -> list[dict[str, Any]]:
    """The profile's rows in use that were timed on a busy machine, for ``--json``."""
    return [{"unit": u, "what": w, "other_load": x} for u, w, x in profile.busy]


def unit_summary(profile: Any) -> list[dict[str, Any]]:
    rows = []
    for name, up in profile.units.items():
        rows.append(
            {
                "unit": name,
                "modeled": up.modeled,
                "call_overhead_us": up.overhead_us,
                "noop_call_us": up.call_us,
                "wake_us": up.wake_us,
                "plan_extra_us": up.plan_extra_us,
                "plan_io_scale": up.plan_io_scale,
                "ray_call_us": up.ray_call_us,
                "corun_factor": up.corun,
                "boundary_us_per_mb": up.boundary_us_per_byte * 1e6,
                "boundary_out_us_per_mb": up.boundary_out_us_per_byte * 1e6,
                "whole_model_ms": None if up.whole_us is None else up.whole_us / 1e3,
                "sum_of_parts_ms": None if up.parts_us is None else up.parts_us / 1e3,
                "additivity_error": up.additivity_error,
                "costs_from": up.costs_from,
                "in_context_additivity_error": up.layer_additivity_error
                if up.layer_additivity_error is not None
                else up.region_error,
                "scale": up.scale,
                "regions": [_region_row(r) for r in up.regions],
            }
        )
    return rows


def _region_row(r: Any) -> dict[str, Any]:
    """One region of a unit that runs only part of the model, as ``profile --json`` shows it."""
    return {
        "nodes": len(r.nodes),
        "first": r.nodes[0],
        "last": r.nodes[-1],
        "whole_ms": None if r.whole_us is None else r.whole_us / 1e3,
        "in_context_parts_ms": None if r.parts_us is None else r.parts_us / 1e3,
        # the wall time of the runs the per-layer profile came from: what the error compares
        "profiled_runs_ms": None if r.layer_wall_us is None else r.layer_wall_us / 1e3,
        "additivity_error": r.error,
        "costs_from": r.source,
        "reason": r.reason,
    }
