"""The seed papers' experiments on a measured CPU + NPU stand-in (issue 16).

The units (``--units``, default examples/units/cpu-npu-standin.yaml) are a stand-in, not an
NPU: ``cpu`` is onnxruntime with 1 thread on core 0, ``npu`` OpenVINO with 1 thread on core 1,
allowed only an EVTA-like operator list, so the operators it lacks fall back to the cpu. Every
figure on them is measured. Per model:

* **profile** in a fresh store: per unit where its costs come from (``costs_from``); for each
  restricted unit its maximal supported regions, each timed as one call and from the backend's
  per-layer profile (region error = (parts - whole) / whole), and the share of the model's
  FLOPs it can run; how much the units slow each other side by side (``corun``: plans charge
  it where they run at once, as ``partuner plan`` does);
* **plans**: one per registered scheduler (``make_plan``, ``--time-limit`` seconds, 10 by
  default as for a user), ``cpu alone`` (every node on the cpu) and ``static type-based``:
  the ``static`` scheduler with the restricted units first in its priority order, so that each
  operator the npu supports goes to it and the cpu takes the rest, the "static" placement of
  PartitionTuner's comparison (``static`` as registered follows the units file's order; the
  example file lists the npu first, so there the two agree). ``nestc`` is NEST-C's
  PartitionTuner, the comparison's profiling-based method (its default, CPU, unit is the first
  unit that runs every node; should that not be the cpu, a ``nestc (cpu default)`` plan is
  added with the cpu as its default unit); ``branch`` is the branch-parallel seed's method;
* **measure** every distinct plan (identical plans are measured once and shared) with
  ``partuner run MODEL --plan P --units U --repeat N --json`` in a fresh process of its own:
  ``--rounds`` rounds, each running every distinct plan once, the order rotated each round.
  Figure per plan: the median of its rounds' medians; "spread": (max - min) / median over its
  rounds; "auto vs it": ``faster`` or ``slower`` when auto's plan is so in every round, else
  ``same``; "error": measured / predicted - 1; "groups in parallel": branch groups two of whose
  branches are predicted to run at the same time on different units (as in seed_bench.py).

For squeezenet, also predicted-only rows on examples/units/cpu-npu-modeled.yaml (labelled
modeled). The goals of issue 16 are evaluated per model and over all models (lines after the
table): region error within 10 % (the worst region per model; beside it all the unit's regions
together, weighted by their time); over the multi-partition plans, median |error| <= 10 % and
none over 20 %; auto's plan measured no slower than any other scheduler's; auto faster than
the cpu alone where the npu can run half the FLOPs or more; auto's latency reduction over static
and over the best single unit, beside the seeds' anchors (PartitionTuner 5.03 % over static on
SqueezeNet; branch-parallel SqueezeNet 202.72 -> 180.18 ms, 11.12 %, 4 of 8 groups in
parallel). Reductions are 1 - auto / other.

    python benchmarks/standin_bench.py [--quick] [--models squeezenet,googlenet]
        [--units FILE] [--rounds 5] [--repeat N] [--time-limit 10]
    python benchmarks/standin_bench.py --reprint benchmarks/results/standin.json

Writes benchmarks/results/standin.json after each model and prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, cpu_seconds, machine, run_plan_json, shared_model, temp_dir, write_result  # noqa: E402
from seed_bench import groups_in_parallel  # noqa: E402

from partuner.errors import PartunerError  # noqa: E402
from partuner.export import write_plan  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import (  # noqa: E402
    MEASURED_PLAN_MARGIN,
    build_problem,
    make_plan,
    plan_file,
)
from partuner.plan import (  # noqa: E402
    get_scheduler,
    plan_from_assignment,
    plan_from_schedule,
    scheduler_names,
)
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import load_units  # noqa: E402

STANDIN = ROOT / "examples" / "units" / "cpu-npu-standin.yaml"
MODELED = ROOT / "examples" / "units" / "cpu-npu-modeled.yaml"
SHARED = {"shared:squeezenet1_1": "squeezenet1_1", "shared:googlenet": "googlenet"}
SHARED["shared:resnet18"] = "resnet18"
MODELS = tuple(n for n in zoo.NAMES if n != "synthetic_large") + tuple(SHARED)
METHOD = {
    "single": "best single unit (predicted)",
    "static": "static, units-file order",
    "static type-based": "static type-based (npu first)",
    "nestc": "PartitionTuner (profiling-based)",
    "nestc-repaired": "PartitionTuner, repaired",
    "nestc (cpu default)": "PartitionTuner, cpu as its default unit",
    "branch": "branch-parallel seed",
    "cpu alone": "cpu alone",
    "auto": "partuner",
}
MODELED_PLANS = ("single", "static", "nestc", "branch", "auto")
ANCHORS = {
    "partitiontuner_over_static_squeezenet": 0.0503,
    "branch_parallel_squeezenet": {
        "sequential_ms": 202.72,
        "parallel_ms": 180.18,
        "reduction": 0.1112,
        "groups_parallel": 4,
        "groups": 8,
    },
}
GOAL_REGION_ERROR, GOAL_MEDIAN_ERROR, GOAL_MAX_ERROR, GOAL_NPU_SHARE = 0.10, 0.10, 0.20, 0.50


def load_source(key: str, size: int, work: Path) -> tuple[str, Path] | None:
    """(label, model file) of a zoo or ../shared model; None if a shared one is absent."""
    if key in SHARED:
        path = shared_model(SHARED[key], work)
        return None if path is None else (key, path)
    s = max(size, zoo.MIN_IMAGE_SIZE.get(key, 1))
    path = work / f"{key}@{s}.onnx"
    path.write_bytes(zoo.build(key, image_size=s).SerializeToString())
    return f"zoo:{key}@{s}", path


def unit_roles(units) -> tuple[str, list[str]]:
    """The unit that runs every operator (the cpu) and the restricted ones (the npus)."""
    free = [u.name for u in units.units.values() if u.ops is None]
    if not free:
        raise PartunerError(f"no unit of {units.names} runs every operator (no cpu to fall back)")
    return free[0], [u for u in units.names if u != free[0]]


def unit_rows(graph, units, prof, npus: list[str]) -> dict[str, Any]:
    out = {}
    for name, up in prof.units.items():
        row: dict[str, Any] = {"costs_from": up.costs_from, "modeled": up.modeled}
        row["whole_ms"] = None if up.whole_us is None else up.whole_us / 1e3
        row["layer_error"] = up.layer_additivity_error
        row["per_partition_us"] = up.overhead_us
        row["plan_extra_us"] = up.plan_extra_us  # in per_partition_us (profile/cycle.py)
        row["plan_io_scale"] = up.plan_io_scale  # in the per-byte rates
        row["per_mb_in_out_us"] = [up.boundary_us_per_byte * 1e6, up.boundary_out_us_per_byte * 1e6]
        row["corun"] = up.corun  # beside the other units (profile/corun.py), None: not timed
        if name in npus:
            can = sum(n.flops for n in graph.compute_nodes if units[name].supports(n, graph))
            row["flops_share"] = can / graph.total_flops if graph.total_flops else 0.0
            row["region_error"] = up.region_error
            row["regions"] = [
                {
                    "label": r.label,
                    "whole_ms": None if r.whole_us is None else r.whole_us / 1e3,
                    "parts_ms": None if r.parts_us is None else r.parts_us / 1e3,
                    # the runs the per-layer profile came from: what the error compares with
                    "profiled_runs_ms": None if r.layer_wall_us is None else r.layer_wall_us / 1e3,
                    "error": r.error,
                    "source": r.source,
                    "reason": r.reason,
                }
                for r in up.regions
            ]
            row["region_error_weighted"] = weighted_region_error(row["regions"])
        out[name] = row
    return out


def make_plans(problem, cpu: str, npus: list[str], names, limit: float) -> dict[str, Any]:
    """Plan name -> Plan (or the error string where a scheduler failed)."""
    plans: dict[str, Any] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            plans[name], _ = make_plan(problem, name, time_limit=limit)
        except PartunerError as exc:
            plans[name] = f"{type(exc).__name__}: {exc}"
        print(f"  planned {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    typed = dataclasses.replace(problem, units=[*npus, cpu], default_unit=cpu)
    try:
        s = get_scheduler("static").schedule(typed, time_limit=limit)
        s.validate(typed)
        plans["static type-based"] = plan_from_schedule(typed, s)
    except PartunerError as exc:
        plans["static type-based"] = f"{type(exc).__name__}: {exc}"
    if problem.default != cpu:  # NEST-C's default unit is the first listed: here an npu
        fixed = dataclasses.replace(problem, default_unit=cpu)
        try:
            plans["nestc (cpu default)"], _ = make_plan(fixed, "nestc", time_limit=limit)
        except PartunerError as exc:
            plans["nestc (cpu default)"] = f"{type(exc).__name__}: {exc}"
    try:
        alone = {n: cpu for n in problem.nodes}
        plans["cpu alone"] = plan_from_assignment(problem, alone, scheduler="cpu alone")
    except PartunerError as exc:
        plans["cpu alone"] = f"{type(exc).__name__}: {exc}"
    return plans


def plan_key(plan) -> frozenset:
    return frozenset((p.unit, frozenset(p.nodes)) for p in plan.partitions)


def run_plan(model: Path, plan: Path, units: Path, db: Path, repeat: int) -> tuple[float, bool]:
    """(measured median ms, outputs checked) of ``partuner run`` in a fresh process."""
    got = run_plan_json(model, plan, units, db, repeat)
    return float(got["measured_ms"]), bool(got["check"]["passed"])


def verdict(ratios: list[float]) -> str:
    return "faster" if min(ratios) > 1 else ("slower" if max(ratios) < 1 else "same")


def bench_model(key: str, args, work: Path, units, units_path: Path) -> dict[str, Any] | None:
    src = load_source(key, args.size, work)
    if src is None:
        print(f"{key}: ../shared/models absent, skipped", file=sys.stderr)
        return None
    label, path = src
    graph = load_model(path)
    cpu, npus = unit_roles(units)
    db = work / "profiles.db"
    t0 = time.perf_counter()
    with ProfileStore(db) as store:
        # as `partuner plan` does: the units timed side by side, charged where they run at once
        prof = profile_model(graph, units, store=store, corun=True)
    profile_s = time.perf_counter() - t0
    problem = build_problem(graph, units, prof)
    names = list(scheduler_names())
    t0 = time.perf_counter()
    plans = make_plans(problem, cpu, npus, names, args.time_limit)
    plan_s = time.perf_counter() - t0
    # identical plans are measured once: distinct plan -> its file and rounds
    distinct: dict[frozenset, dict[str, Any]] = {}
    first_of: dict[str, str] = {}
    for name, plan in plans.items():
        if isinstance(plan, str):
            continue
        k = plan_key(plan)
        if k not in distinct:
            f = work / f"{path.stem}-{name.replace(' ', '_')}.yaml"
            write_plan(plan_file(plan, graph, units), f)
            distinct[k] = {"file": f, "name": name, "ms": [], "error": None, "checked": True}
        first_of[name] = distinct[k]["name"]
    whole = prof.units[cpu].whole_us or 1e4
    repeat = args.repeat or max(10, min(100, int(args.target_s * 1e6 / whole)))
    order = list(distinct.values())
    t0 = time.perf_counter()
    busy0, ours0 = cpu_seconds()
    for k in range(args.rounds):
        shift = k % len(order)
        for d in order[shift:] + order[:shift]:
            if d["error"] is not None:
                continue
            try:
                ms, ok = run_plan(path, d["file"], units_path, db, repeat)
                d["ms"].append(ms)
                d["checked"] = d["checked"] and ok
            except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
                d["error"] = str(exc)
        print(f"  round {k + 1} of {args.rounds}", file=sys.stderr)
    measure_s = time.perf_counter() - t0
    busy1, ours1 = cpu_seconds()
    # what other work (and the hypervisor) took of the machine's cores while plans were timed
    other = max((busy1 - busy0) - (ours1 - ours0), 0.0) / (measure_s * (os.cpu_count() or 1))
    load = os.getloadavg()
    by_name = {d["name"]: d for d in distinct.values()}
    auto = by_name.get(first_of.get("auto", ""))
    rows = []
    for name, plan in plans.items():
        row: dict[str, Any] = {"model": label, "plan": name, "method": METHOD.get(name, name)}
        if isinstance(plan, str):
            rows.append({**row, "error_text": plan})
            continue
        d = by_name[first_of[name]]
        par, groups = groups_in_parallel(problem, plan)
        row.update(
            found_by=plan.scheduler,
            status=plan.status,
            partitions=len(plan.partitions),
            units=plan.units,
            predicted_ms=plan.predicted_us / 1e3,
            solve_s=getattr(plan, "solve_s", None),
            groups_parallel=par,
            groups=groups,
            same_plan_as=None if d["name"] == name else d["name"],
            auto_plan=d is auto,
            rounds_ms=d["ms"],
            run_error=d["error"],
            outputs_checked=d["checked"],
            modeled=False,
            measured_ms=None,
        )
        if d["ms"] and d["error"] is None:
            m = statistics.median(d["ms"])
            row["measured_ms"] = m
            row["spread"] = (max(d["ms"]) - min(d["ms"])) / m
            row["error"] = m / row["predicted_ms"] - 1
            if auto is not None and auto["ms"] and auto["error"] is None and d is not auto:
                ratios = [b / a for a, b in zip(auto["ms"], d["ms"], strict=False)]
                row["auto_ratios"] = ratios  # per round: this plan / auto's plan
                row["auto_vs"] = verdict(ratios)
                row["auto_speedup"] = m / statistics.median(auto["ms"])
        rows.append(row)
    result = {
        "model": label,
        "cpu": cpu,
        "npus": npus,
        "units": unit_rows(graph, units, prof, npus),
        "repeat": repeat,
        "profile_s": profile_s,
        "plan_s": plan_s,
        "measure_s": measure_s,
        "loadavg_after": load,
        "other_cpu_share": other,
        "rows": rows,
    }
    if key == "squeezenet":
        result["modeled_rows"] = modeled_rows(graph, label, work, args.time_limit)
    result["goals"] = model_goals(result)
    return result


def modeled_rows(graph, label: str, work: Path, limit: float) -> list[dict[str, Any]] | str:
    """Predicted-only plans on the modeled units file (or why there are none)."""
    if not MODELED.exists():
        return f"{MODELED.relative_to(ROOT)} not found: no modeled rows"
    try:
        units = load_units(MODELED)
        with ProfileStore(work / "modeled.db") as store:
            prof = profile_model(graph, units, store=store)
        problem = build_problem(graph, units, prof)
    except PartunerError as exc:
        return f"{MODELED.relative_to(ROOT)}: {exc}"
    rows = []
    for name in MODELED_PLANS:
        row: dict[str, Any] = {"model": label, "plan": f"{name} [modeled file]"}
        row["method"] = METHOD.get(name, name)
        try:
            plan, _ = make_plan(problem, name, time_limit=limit)
        except PartunerError as exc:
            rows.append({**row, "error_text": str(exc), "predicted_only": True})
            continue
        par, groups = groups_in_parallel(problem, plan)
        row.update(
            found_by=plan.scheduler,
            partitions=len(plan.partitions),
            units=plan.units,
            predicted_ms=plan.predicted_us / 1e3,
            groups_parallel=par,
            groups=groups,
            modeled=plan.modeled,
            predicted_only=True,
            measured_ms=None,
            units_file=str(MODELED.relative_to(ROOT)),
        )
        rows.append(row)
    return rows


def _reduction(rows: dict[str, dict], other: str) -> float | None:
    a, b = rows.get("auto", {}).get("measured_ms"), rows.get(other, {}).get("measured_ms")
    return None if a is None or b is None else 1 - a / b


def model_goals(res: dict[str, Any]) -> dict[str, Any]:
    rows = {r["plan"]: r for r in res["rows"]}
    errs = [res["units"][u].get("region_error") for u in res["npus"]]
    errs = [e for e in errs if e is not None]
    share = max((res["units"][u]["flops_share"] for u in res["npus"]), default=0.0)
    others = [
        r
        for r in res["rows"]
        if r["plan"] in scheduler_names() and r["plan"] != "auto" and "auto_vs" in r
    ]
    singles = [r for r in res["rows"] if r.get("measured_ms") and len(r["units"]) == 1]
    best_single = min(singles, key=lambda r: r["measured_ms"]) if singles else None
    g: dict[str, Any] = {
        "region_error": max(errs, key=abs) if errs else None,
        "region_error_ok": bool(errs) and all(abs(e) <= GOAL_REGION_ERROR for e in errs),
        "npu_flops_share": share,
        "auto_slower_than": [r["plan"] for r in others if r["auto_vs"] == "slower"],
        "auto_not_slower_ok": all(r["auto_vs"] != "slower" for r in others),
        "auto_vs_cpu_alone": rows.get("cpu alone", {}).get("auto_vs"),
        "reduction_vs_static": _reduction(rows, "static"),
        "reduction_vs_static_type_based": _reduction(rows, "static type-based"),
        "best_single": None if best_single is None else best_single["plan"],
        "reduction_vs_best_single": None
        if best_single is None
        else _reduction(rows, best_single["plan"]),
        "nestc_over_static_type_based": None,
        "nestc_cpu_default_over_static_type_based": None,
        "branch_over_single": None,
    }
    if rows.get("cpu alone", {}).get("same_plan_as") == "auto" or (
        rows.get("auto", {}).get("same_plan_as") == "cpu alone"
    ):
        g["auto_vs_cpu_alone"] = "same plan"
    if share >= GOAL_NPU_SHARE:
        g["auto_faster_than_cpu_ok"] = g["auto_vs_cpu_alone"] == "faster"
    for a, b, key in (
        ("nestc", "static type-based", "nestc_over_static_type_based"),
        ("nestc (cpu default)", "static type-based", "nestc_cpu_default_over_static_type_based"),
        ("branch", "single", "branch_over_single"),
    ):
        ma, mb = rows.get(a, {}).get("measured_ms"), rows.get(b, {}).get("measured_ms")
        if ma is not None and mb is not None:
            g[key] = 1 - ma / mb
    return g


def overall_goals(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The goals over every model: multi-partition plans' errors counted once per distinct plan."""
    errs = [
        abs(r["error"])
        for res in results
        for r in res["rows"]
        if r.get("error") is not None and r["partitions"] > 1 and r["same_plan_as"] is None
    ]
    gs = [res["goals"] for res in results]
    return {
        "models": len(results),
        "region_error_ok_models": sum(g["region_error_ok"] for g in gs),
        "multi_partition_plans": len(errs),
        "median_abs_error": statistics.median(errs) if errs else None,
        "max_abs_error": max(errs) if errs else None,
        "error_ok": bool(errs)
        and statistics.median(errs) <= GOAL_MEDIAN_ERROR
        and max(errs) <= GOAL_MAX_ERROR,
        "auto_not_slower_models": sum(g["auto_not_slower_ok"] for g in gs),
        "npu_majority_models": sum("auto_faster_than_cpu_ok" in g for g in gs),
        "auto_faster_than_cpu_models": sum(g.get("auto_faster_than_cpu_ok", False) for g in gs),
    }


def _pct(x: float | None, sign: bool = True) -> str:
    return "-" if x is None else (f"{x:+.1%}" if sign else f"{x:.1%}")


def print_table(results: list[dict[str, Any]]) -> None:
    print(
        "| model | plan | method | found by | parts | units | groups in parallel | predicted ms "
        "| measured ms | error | spread | auto vs it |"
    )
    print("|" + "---|" * 12)
    for res in results:
        npu = res["npus"][0] if res["npus"] else None
        head = res["model"]
        if npu is not None:
            u = res["units"][npu]
            head += (
                f" ({npu}: {u['flops_share']:.0%} of FLOPs, {len(u['regions'])} regions, "
                f"worst region error {_pct(u['region_error'])}, "
                f"{u.get('per_partition_us', 0):.0f} us per partition, of which "
                f"{u.get('plan_extra_us', 0):.0f} as a plan runs its pieces, per-byte costs "
                f"x{u.get('plan_io_scale', 1.0):.2f}"
            )
            co = [f"{k} x{v['corun']:.2f}" for k, v in res["units"].items() if v.get("corun")]
            head += f"; beside each other: {', '.join(co)})" if co else ")"
        extra = res.get("modeled_rows")
        for i, r in enumerate(res["rows"] + (extra if isinstance(extra, list) else [])):
            model = head if i == 0 else ""
            if "error_text" in r:
                print(f"| {model} | {r['plan']} | {r['method']} | failed: {r['error_text']} |")
                continue
            pred = f"{r['predicted_ms']:.3f}" + (" (modeled)" if r["modeled"] else "")
            if r.get("predicted_only"):
                meas = "not run (predicted only)"
            elif r.get("run_error"):
                meas = f"run failed: {r['run_error']}"
            else:
                meas = "-" if r["measured_ms"] is None else f"{r['measured_ms']:.3f}"
                if not r.get("outputs_checked", True):
                    meas += " (check failed)"
            vs = "-"
            if r.get("auto_plan"):
                vs = "auto's plan"
            elif "auto_vs" in r:
                vs = f"{r['auto_vs']} ({r['auto_speedup']:.2f}x)"
            if r.get("same_plan_as") and not r.get("auto_plan"):
                vs += f"; same plan as {r['same_plan_as']}"
            print(
                f"| {model} | {r['plan']} | {r['method']} | {r['found_by']} | {r['partitions']} "
                f"| {', '.join(r['units'])} | {r['groups_parallel']} of {r['groups']} | {pred} "
                f"| {meas} | {_pct(r.get('error'))} | {_pct(r.get('spread'), False)} | {vs} |"
            )


def _measured_faster(gains: list[float]) -> str:
    """``N, M measured faster (lo to hi)`` of measured gains (1 - plan / other)."""
    if not gains:
        return "none"
    faster = sum(g > 0 for g in gains)
    return f"{len(gains)}, {faster} measured faster ({min(gains):+.1%} to {max(gains):+.1%})"


def margin_check(results: list[dict[str, Any]]) -> str:
    """What auto's margin on measured units rests on (pipeline.MEASURED_PLAN_MARGIN): every
    scheduler's distinct plan over several units, by its predicted gain over the model's
    fastest predicted one-unit plan, against its measured gain over that plan."""
    small, large = [], []
    for res in results:
        rows = [r for r in res["rows"] if r.get("measured_ms") and r.get("same_plan_as") is None]
        ones = [r for r in rows if len(r["units"]) == 1]
        if not ones:
            continue
        one = min(ones, key=lambda r: r["predicted_ms"])
        for r in rows:
            gain = 1 - r["predicted_ms"] / one["predicted_ms"]
            if len(r["units"]) > 1 and gain > 0:
                got = 1 - r["measured_ms"] / one["measured_ms"]
                (small if gain < MEASURED_PLAN_MARGIN else large).append(got)

    lo, hi = _measured_faster(small), _measured_faster(large)
    return (
        "Plans over several units (every scheduler's) against the model's fastest one-unit "
        f"plan, measured: predicted 0-{MEASURED_PLAN_MARGIN:.0%} faster: {lo}; "
        f"predicted {MEASURED_PLAN_MARGIN:.0%} or more faster: {hi} (auto keeps one "
        f"unit unless a plan over several is predicted {MEASURED_PLAN_MARGIN:.0%} faster)."
    )


def partitions_check(results: list[dict[str, Any]]) -> str:
    """What auto's margin between plans of different numbers of partitions rests on
    (pipeline._fewer_partitions_plan, the same MEASURED_PLAN_MARGIN): every pair of distinct
    plans over several units of one model where the one with more partitions is predicted
    faster, by its predicted gain against its measured gain."""
    small, large = [], []
    for res in results:
        rows = [
            r
            for r in res["rows"]
            if r.get("measured_ms") and r.get("same_plan_as") is None and len(r["units"]) > 1
        ]
        for a in rows:
            for b in rows:
                if a["partitions"] > b["partitions"] and a["predicted_ms"] < b["predicted_ms"]:
                    gain = 1 - a["predicted_ms"] / b["predicted_ms"]
                    got = 1 - a["measured_ms"] / b["measured_ms"]
                    (small if gain < MEASURED_PLAN_MARGIN else large).append(got)

    lo, hi = _measured_faster(small), _measured_faster(large)
    return (
        "Plans with more partitions than another plan of the model over several units, "
        f"measured against it: predicted 0-{MEASURED_PLAN_MARGIN:.0%} faster: {lo}; "
        f"predicted {MEASURED_PLAN_MARGIN:.0%} or more faster: {hi} (auto keeps the plan "
        f"with fewer partitions unless the other is predicted {MEASURED_PLAN_MARGIN:.0%} faster)."
    )


def goal_lines(results: list[dict[str, Any]], overall: dict[str, Any]) -> list[str]:
    n = overall["models"]
    worst = [
        f"{res['model']} {_pct(res['goals']['region_error'])} ("
        + ", ".join(_pct(res["units"][u].get("region_error_weighted")) for u in res["npus"])
        + ")"
        for res in results
    ]
    slow = [
        f"{res['model']} (slower than {', '.join(res['goals']['auto_slower_than'])})"
        for res in results
        if not res["goals"]["auto_not_slower_ok"]
    ]
    cpu = [
        f"{res['model']} {res['goals']['auto_vs_cpu_alone']}"
        for res in results
        if "auto_faster_than_cpu_ok" in res["goals"]
    ]
    speed = [
        f"{res['model']}: {_pct(g['reduction_vs_static_type_based'])} / "
        f"{_pct(g['reduction_vs_static'])} / {_pct(g['reduction_vs_best_single'])}"
        for res in results
        for g in [res["goals"]]
    ]
    seeds = [
        f"{res['model']}: nestc over static type-based "
        f"{_pct(res['goals']['nestc_over_static_type_based'])} (with the cpu as its default "
        f"unit {_pct(res['goals']['nestc_cpu_default_over_static_type_based'])}), branch over "
        "single "
        f"{_pct(res['goals']['branch_over_single'])} with "
        f"{next((r['groups_parallel'] for r in res['rows'] if r['plan'] == 'branch'), '-')} of "
        f"{next((r['groups'] for r in res['rows'] if r['plan'] == 'branch'), '-')} groups "
        "in parallel"
        for res in results
        if "squeezenet" in res["model"]
    ]
    med, mx = overall["median_abs_error"], overall["max_abs_error"]
    ok = {True: "met", False: "NOT met"}
    return [
        f"Goal, region error within 10 %: {ok[overall['region_error_ok_models'] == n]}: met on "
        f"{overall['region_error_ok_models']} of {n} models (worst region per model, and in "
        f"brackets all its regions together, weighted by their time: "
        f"{'; '.join(worst)}).",
        f"Goal, multi-partition plans' |measured / predicted - 1|, median <= 10 % and none over "
        f"20 %: {ok[overall['error_ok']]} (median {_pct(med, False)}, max {_pct(mx, False)} "
        f"over {overall['multi_partition_plans']} distinct plans).",
        f"Goal, auto no slower than any scheduler's plan (every round): "
        f"{ok[overall['auto_not_slower_models'] == n]}: met on {overall['auto_not_slower_models']} "
        f"of {n} models" + (f"; not on {'; '.join(slow)}." if slow else "."),
        f"Goal, auto faster than cpu alone where the npu runs >= 50 % of the FLOPs: "
        f"{ok[overall['auto_faster_than_cpu_models'] == overall['npu_majority_models']]}: met on "
        f"{overall['auto_faster_than_cpu_models']} of {overall['npu_majority_models']} models "
        f"({'; '.join(cpu) or 'none'}).",
        "Auto's latency reduction (1 - auto / other, measured) over static type-based / static "
        f"in units-file order / best single unit: {'; '.join(speed)}.",
        "Seed anchors: PartitionTuner 5.03 % over static on SqueezeNet; branch-parallel "
        "SqueezeNet 11.12 % (202.72 -> 180.18 ms) with 4 of 8 groups in parallel. Here: "
        + ("; ".join(seeds) or "no squeezenet measured")
        + ".",
        margin_check(results),
        partitions_check(results),
        "Other work on the machine while plans were timed (share of all cores' time, from "
        "/proc/stat, hypervisor steal included): "
        + "; ".join(f"{res['model']} {_pct(res.get('other_cpu_share'), False)}" for res in results)
        + ".",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="squeezenet and resnet18 at 64x64")
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--units", type=Path, default=STANDIN, help="units file (the stand-in)")
    ap.add_argument("--rounds", type=int, help="rounds of fresh processes (default 5, quick 2)")
    ap.add_argument("--repeat", type=int, help="runs per process (default: about --target-s)")
    ap.add_argument("--target-s", type=float, default=2.0, help="seconds of runs per process")
    ap.add_argument("--size", type=int, help="zoo image size (default 224, quick 64)")
    ap.add_argument("--time-limit", type=float, help="per plan, s (default 10, quick 3)")
    ap.add_argument("--reprint", type=Path, help="print the table of a saved JSON result")
    args = ap.parse_args()
    if args.reprint is not None:
        report(json.loads(args.reprint.read_text())["results"], [])
        return
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.size = args.size or (64 if args.quick else 224)
    args.time_limit = (
        args.time_limit if args.time_limit is not None else (3.0 if args.quick else 10.0)
    )
    if args.quick and args.repeat is None:
        args.repeat = 10
    keys = (
        args.models.split(",")
        if args.models
        else (["squeezenet", "resnet18"] if args.quick else list(MODELS))
    )
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    units_path = args.units.resolve()
    units = load_units(units_path)
    work = temp_dir("partuner-standin-bench-")
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    data: dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "units_file": str(args.units),
        "units": {u.name: u.spec() for u in units.units.values()},
        "precision": {u.name: u.precision for u in units.units.values()},  # as resolved here
        "rounds": args.rounds,
        "time_limit_s": args.time_limit,
        "anchors": ANCHORS,
    }
    t_all = time.perf_counter()
    for key in keys:
        t0 = time.perf_counter()
        print(f"{key} ...", file=sys.stderr, flush=True)
        res = bench_model(key, args, work, units, units_path)
        if res is None:
            skipped.append(key)
            continue
        res["wall_s"] = time.perf_counter() - t0
        results.append(res)
        for line in goal_lines([res], overall_goals([res]))[:4]:
            print("  " + line, file=sys.stderr)
        print(f"done {res['model']} in {res['wall_s']:.0f} s", file=sys.stderr, flush=True)
        overall = overall_goals(results)
        path = write_result(
            "standin",
            {
                **data,
                "skipped": skipped,
                "results": results,
                "goals": overall,
                "wall_s": time.perf_counter() - t_all,
            },
        )
    report(results, skipped)
    if results:
        print(f"\nwritten to {path}")


def weighted_region_error(regions: list[dict[str, Any]]) -> float | None:
    """All of a unit's regions together: their kernels' total against the total time each
    region's error was taken against (parts / (1 + error): the profiled runs, or the region's
    whole time in results of earlier versions), so each region weighs by its time."""
    timed = [r for r in regions if r["error"] is not None and r["parts_ms"]]
    whole = sum(r["parts_ms"] / (1 + r["error"]) for r in timed)
    return sum(r["parts_ms"] for r in timed) / whole - 1 if timed and whole > 0 else None


def report(results: list[dict[str, Any]], skipped: list[str]) -> None:
    """The table and the goal lines."""
    for res in results:
        for u in res["npus"]:
            row = res["units"][u]
            row["region_error_weighted"] = weighted_region_error(row.get("regions", []))
    print_table(results)
    print()
    for line in goal_lines(results, overall_goals(results)):
        print(line)
    for res in results:
        if isinstance(res.get("modeled_rows"), str):
            print(f"Modeled rows: {res['modeled_rows']}.")
    if skipped:
        print(f"Skipped (../shared/models absent): {', '.join(skipped)}.")


if __name__ == "__main__":
    main()
