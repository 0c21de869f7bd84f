"""Streams: the throughput objective's plans against its baselines, measured (issue 18).

Per model (every zoo model but synthetic_large, and the ../shared models when present) and
units configuration (the measured stand-in examples/units/cpu-npu-standin.yaml, and the
modeled examples/units/cpu-npu-modeled.yaml with 1, 2 and 4 NPUs: the ``npu`` entry copied
as npu1.. before the cpu), every step a ``partuner`` command in a fresh process:

* **plan**: ``partuner plan MODEL --units U --db DB --objective throughput --time-limit T -o
  PLAN --json`` profiles (one store per model), plans, and reports the baselines' predicted
  frames per second: the latency plan run as a stream, the best single unit, data-parallel
  copies where units that share no hardware each run the whole model;
* **measure** (the stand-in only; modeled rows are predictions, labelled so): ``partuner run
  MODEL --plan P --units U --db DB --stream N --json`` for (a) the throughput plan; (b) the
  latency plan (``partuner plan`` with the latency objective and the budget the throughput
  planner gives its latency plans, so the same plan) with ``--in-flight K``, K as the planner
  predicted for it; (c) the best single unit (``--scheduler single``, its frames in flight as
  predicted); (d)
  data-parallel copies where the planner has that baseline; (e) the stream that ``partuner
  tune MODEL ... --objective throughput --max-latency-ms B --frames N -o DIR`` keeps (the
  fastest whose p99 latency measured within B in tune's own run), B 1.5x the latency plan's
  predicted single-frame latency, measured again here. ``--rounds
  rounds, each running every configuration once, the order rotated each round. Figure:
  the median of the rounds' frames per second; "spread": (max - min) / median over them;
  "error": measured / predicted - 1; latency and utilisation: medians over the rounds.

Goal lines (issue 18): the throughput plans' measured frames per second within 10 % of the
prediction; on the stand-in at least 1.3x the latency plan run as a stream on the branchy
models, and never below the best single unit or a data-parallel split (below: slower in every
round); under a latency bound, the measured p99 latency within it in every round.

    python benchmarks/stream_bench.py [--quick] [--models squeezenet,branchy] [--rounds 3]
        [--frames 300] [--size 224] [--time-limit 10] [--npus 1,2,4]
    python benchmarks/stream_bench.py --reprint benchmarks/results/stream.json

Writes benchmarks/results/stream.json after each model and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, cpu_seconds, machine, temp_dir, write_result  # noqa: E402
from standin_bench import MODELED, MODELS, SHARED, STANDIN, load_source  # noqa: E402

from partuner.export import StreamSpec, read_plan, write_plan  # noqa: E402
from partuner.throughput import LATENCY_SHARE  # noqa: E402
from partuner.units import load_units  # noqa: E402

CLI = Path(sys.executable).with_name("partuner")
BRANCHY = {"squeezenet", "googlenet", "inception_v3", "branchy", "resnet18", "resnet50"}
BRANCHY |= set(SHARED)
GOAL_ERROR, GOAL_RATIO, BOUND_FACTOR = 0.10, 1.3, 1.5
THROUGHPUT, LATENCY, BOUNDED = "throughput plan", "latency plan", "throughput plan, p99 bound"
SINGLE, DATA_PARALLEL = "best single unit", "data-parallel"
TUNE_KEYS = ("scheduler", "predicted_fps", "measured_fps", "latency_ms", "in_flight", "note")
BOUND_KEYS = ("bound_ms", "predicted_p99_ms", "p99_ms", "p99_worst_ms", "error_text")


def cli(args: list[str], log: list[dict[str, Any]], timeout: float = 1800.0) -> dict[str, Any]:
    """``partuner ARGS --json`` in a fresh process: its JSON answer (also when a stream's check
    failed: exit status 1), or ``{"error": last line}``. Logs the command and its wall time."""
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [str(CLI), *args, "--json"], capture_output=True, text=True, timeout=timeout
        )
        try:
            got = json.loads(out.stdout)
        except ValueError:
            lines = (out.stderr or out.stdout).strip().splitlines()
            got = {"error": lines[-1] if lines else f"exit status {out.returncode}"}
    except subprocess.TimeoutExpired:
        got = {"error": f"timed out after {timeout:.0f} s"}
    log.append({"command": " ".join(["partuner", *args]), "wall_s": time.perf_counter() - t0})
    return got


def modeled_units(n: int, work: Path) -> Path:
    """The modeled units file with ``n`` NPUs: its ``npu`` entry copied as npu1.. before the
    cpu, as the file's comments say."""
    if n == 1:
        return MODELED
    doc = yaml.safe_load(MODELED.read_text())
    npu = doc["units"]["npu"]
    rest = {k: v for k, v in doc["units"].items() if k != "npu"}
    doc["units"] = {"npu": npu, **{f"npu{i}": dict(npu) for i in range(1, n)}, **rest}
    path = work / f"cpu-npu-modeled-{n}npu.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def trim(plan: dict[str, Any]) -> dict[str, Any]:
    """What the table needs of ``plan --json``."""
    keys = ("scheduler", "status", "predicted_fps", "fps_bound", "in_flight", "copies")
    keys += ("latency_ms", "max_latency_ms", "utilisation", "modeled", "predicted_ms", "corun")
    out = {k: plan[k] for k in keys if k in plan}
    out["partitions"] = [[p["unit"], p["nodes"]] for p in plan.get("partitions", [])]
    fields = ("name", "predicted_fps", "partitions", "units", "copies", "in_flight")
    fields += ("latency_ms", "single_frame_ms", "modeled")
    for part in ("baselines", "candidates"):
        if part in plan:
            out[part] = {k: {f: v[f] for f in fields} for k, v in plan[part].items()}
    return out


def data_parallel_file(single: Path, base: dict[str, Any], units: Path) -> Path:
    """``single`` (the whole model as one partition) on the data-parallel baseline's first
    unit, with its copies and frames in flight as the planner predicted them."""
    pf, us = read_plan(single), load_units(units)
    pf.partitions = [type(p)(p.name, base["units"][0], p.nodes) for p in pf.partitions]
    pf.units = {u: us[u].spec() for u in base["units"]}
    copies = tuple(dict(c) for c in base["copies"])
    pf.stream = StreamSpec(tuple(base["in_flight"]), copies, base["predicted_fps"])
    out = single.with_name(single.name.replace("-single", "-data-parallel"))
    write_plan(pf, out)
    return out


def row(label: str, units: str, what: str, **kw: Any) -> dict[str, Any]:
    only = units != "stand-in"  # modeled units files: predictions, never measured
    out = {"model": label, "units": units, "configuration": what, "modeled": False}
    return {**out, "predicted_only": only, "file": None, "in_flight_arg": None, **kw}


def of_plan(label: str, units: str, what: str, sp: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A row for a stream plan of ``plan --json`` (its top level or one of its baselines)."""
    n = sp["partitions"] if isinstance(sp["partitions"], int) else len(sp["partitions"])
    kw |= {"plan": sp.get("name", sp.get("scheduler")), "partitions": n}
    kw |= {k: sp[k] for k in ("in_flight", "predicted_fps", "modeled")}
    kw["predicted_p99_ms"] = sp["latency_ms"]["p99"]
    return row(label, units, what, copies=1 + len(sp["copies"]), **kw)


def plan_config(label, path, units, name, db, work, args, log) -> tuple[list, dict]:
    """Plan ``path`` on ``units`` (configuration ``name``): its rows, with plan files and
    frames in flight where they are to be measured (the stand-in), and the plans' JSON."""
    stem = work / f"{path.stem}-{name.replace(' ', '_').replace(',', '')}"
    common = [str(path), "--units", str(units), "--db", str(db)]
    tp_args = ["plan", *common, "--objective", "throughput", "--time-limit", str(args.time_limit)]
    plans: dict[str, Any] = {}

    def plan(key: str, extra: list[str]) -> dict[str, Any]:
        got = cli([*extra, "-o", f"{stem}-{key}.yaml"], log)
        plans[key] = got if "error" in got else trim(got)
        return got

    tp = plan("throughput", tp_args)
    if "error" in tp:
        return [row(label, name, THROUGHPUT, error_text=tp["error"])], plans
    base, file = tp["baselines"], {"units_file": str(units)}
    rows = [of_plan(label, name, THROUGHPUT, tp, file=f"{stem}-throughput.yaml", **file)]
    rows += [of_plan(label, name, k, base[k], **file) for k in (LATENCY, SINGLE) if k in base]
    if DATA_PARALLEL in base:
        rows.append(of_plan(label, name, DATA_PARALLEL, base[DATA_PARALLEL], **file))
    else:
        rows.append(row(label, name, DATA_PARALLEL, na="n/a: no two units each run the model"))
    if name != "stand-in":
        return rows, plans
    by = {r["configuration"]: r for r in rows}
    if LATENCY in base:  # auto with the budget make_stream_plan gives it: the same plan
        got = plan(
            "latency", ["plan", *common, "--time-limit", str(args.time_limit * LATENCY_SHARE)]
        )
        k, ms = (base[LATENCY]["in_flight"] or [2])[0], base[LATENCY]["single_frame_ms"]
        by[LATENCY].update(file=f"{stem}-latency.yaml", in_flight_arg=k, in_flight=[k])
        by[LATENCY]["same_as_baseline"] = abs(got.get("predicted_ms", 0) - ms) <= 1e-6 * max(1, ms)
    if SINGLE in by or DATA_PARALLEL in base:  # the whole model as one partition on one unit
        got = plan("single", ["plan", *common, "--scheduler", "single"])
        if SINGLE in by:  # with the frames in flight the planner predicted for it
            k = (base[SINGLE]["in_flight"] or [2])[0] if SINGLE in base else 2
            by[SINGLE].update(file=f"{stem}-single.yaml", in_flight_arg=k, in_flight=[k])
        if DATA_PARALLEL in base and "error" not in got:
            out = data_parallel_file(Path(f"{stem}-single.yaml"), base[DATA_PARALLEL], units)
            by[DATA_PARALLEL]["file"] = str(out)
    for key, what in (("latency", LATENCY), ("single", SINGLE), ("single", DATA_PARALLEL)):
        if "error" in plans.get(key, {}) and what in by:
            by[what].update(file=None, error_text=plans[key]["error"])
    if LATENCY in base:  # a throughput plan again, each frame's p99 latency bounded
        bound = BOUND_FACTOR * base[LATENCY]["single_frame_ms"]
        out = f"{stem}-bounded"  # tune: the fastest stream whose measured p99 is within it
        args_ = ["tune", *common, "--objective", "throughput", "--time-limit", str(args.time_limit)]
        args_ += ["--max-latency-ms", f"{bound:.6f}", "--frames", str(args.frames), "-o", out]
        got = cli(args_, log)
        plans["bounded"] = got if "error" in got else {k: got.get(k) for k in TUNE_KEYS}
        what, more = f"{BOUNDED} {bound:.3f} ms", {"bound_ms": bound, **file}
        kept = next(
            (r["plan"] for r in got.get("rows", []) if r["plan"]["name"] == got.get("scheduler")),
            None,
        )
        if "error" in got or kept is None:
            text = got.get("error", "tune named no kept stream")
            rows.append(row(label, name, what, error_text=text, **more))
        else:
            rows.append(of_plan(label, name, what, kept, file=f"{out}/plan.yaml", **more))
    return rows, plans


def measure(rows: list[dict], path: Path, db: Path, args, log: list) -> None:
    """Every row with a plan file, ``--rounds`` times in fresh processes, rotated order."""
    todo = [r for r in rows if r["file"]]
    runs: dict[int, list[dict[str, Any]]] = {id(r): [] for r in todo}
    keep = ("throughput_fps", "latency_ms", "utilisation", "check")
    for k in range(args.rounds):
        shift = k % len(todo) if todo else 0
        for r in todo[shift:] + todo[:shift]:
            cmd = ["run", str(path), "--plan", r["file"], "--units", r["units_file"]]
            cmd += ["--db", str(db), "--stream", str(args.frames)]
            if r["in_flight_arg"] is not None:
                cmd += ["--in-flight", str(r["in_flight_arg"])]
            got = cli(cmd, log, timeout=900)
            runs[id(r)].append(got if "error" in got else {f: got[f] for f in keep})
        print(f"  round {k + 1} of {args.rounds}", file=sys.stderr, flush=True)
    for r in todo:
        ok = [x for x in runs[id(r)] if "error" not in x and x["throughput_fps"]]
        r["run_error"] = next((x["error"] for x in runs[id(r)] if "error" in x), None)
        if not ok:
            continue
        r["rounds_fps"] = fps = [x["throughput_fps"] for x in ok]
        r["measured_fps"] = m = statistics.median(fps)
        r["spread"] = (max(fps) - min(fps)) / m
        r["error"] = m / r["predicted_fps"] - 1 if r.get("predicted_fps") else None
        for q in ("p50", "p99"):
            r[f"{q}_ms"] = statistics.median(x["latency_ms"][q] for x in ok)
        r["p99_worst_ms"] = max(x["latency_ms"]["p99"] for x in ok)
        units = sorted({u for x in ok for u in x["utilisation"]})
        r["utilisation"] = {
            u: statistics.median(x["utilisation"].get(u, 0) for x in ok) for u in units
        }
        r["check_passed"] = all(x["check"]["passed"] for x in ok)


def versus(rows: list[dict], what: str) -> dict[str, Any] | None:
    """The throughput plan's measured fps against row ``what``'s: the median ratio and the
    verdict over rounds (faster / slower in every round, else same; or the same plan)."""
    by = {r["configuration"]: r for r in rows}
    a, b = by.get(THROUGHPUT, {}), by.get(what, {})
    if not a.get("measured_fps") or not b.get("measured_fps"):
        return None
    per = [x / y for x, y in zip(a["rounds_fps"], b["rounds_fps"], strict=False)]
    verdict = "faster" if min(per) > 1 else ("slower" if max(per) < 1 else "same")
    if a["plan"] == b["plan"]:  # the planner kept this baseline: one plan, measured twice
        verdict = "same plan"
    return {"ratio": a["measured_fps"] / b["measured_fps"], "rounds": per, "verdict": verdict}


def bench_model(key: str, args, work: Path) -> dict[str, Any] | None:
    src = load_source(key, args.size, work)
    if src is None:
        print(f"{key}: ../shared/models absent, skipped", file=sys.stderr)
        return None
    label, path = src
    db, log = work / f"{path.stem}.db", []
    configs = [("stand-in", STANDIN)]
    configs += [(f"modeled, {n} npu" + "s" * (n > 1), modeled_units(n, work)) for n in args.npus]
    rows, plans = [], {}
    for name, units in configs:
        got, plans[name] = plan_config(label, path, units, name, db, work, args, log)
        rows += got
        print(f"  planned on {name}", file=sys.stderr, flush=True)
    t0, (busy0, ours0) = time.perf_counter(), cpu_seconds()
    measure([r for r in rows if not r["predicted_only"]], path, db, args, log)
    wall, (busy1, ours1) = time.perf_counter() - t0, cpu_seconds()
    other = max((busy1 - busy0) - (ours1 - ours0), 0.0) / (max(wall, 1e-9) * (os.cpu_count() or 1))
    real = [r for r in rows if not r["predicted_only"]]
    bounded = next((r for r in real if r["configuration"].startswith(BOUNDED)), None)
    return {
        "model": label,
        "branchy": key in BRANCHY,
        "rows": rows,
        "plans": plans,
        "vs_latency": versus(real, LATENCY),
        "vs_single": versus(real, SINGLE),
        "vs_data_parallel": versus(real, DATA_PARALLEL),
        "bounded": bounded and {k: bounded.get(k) for k in BOUND_KEYS},
        "other_cpu_share": other,
        "commands": log,
    }


def _pct(x: float | None, sign: bool = True) -> str:
    return "-" if x is None else (f"{x:+.1%}" if sign else f"{x:.1%}")


def print_table(results: list[dict[str, Any]]) -> None:
    print(
        "| model | units | configuration | partitions | in flight | predicted fps | measured fps "
        "| error | spread | latency p50 / p99 ms | utilisation | check |"
    )
    print("|" + "---|" * 12)
    for res in results:
        for i, r in enumerate(res["rows"]):
            head = f"| {res['model'] if i == 0 else ''} | {r['units']} | {r['configuration']}"
            if "error_text" in r or "na" in r:
                print(f"{head} | {r.get('na') or 'failed: ' + r['error_text']} |")
                continue
            parts = f"{r['partitions']}" + (f" x{r['copies']}" if r["copies"] > 1 else "")
            plan = f" ({r['plan']})" if r["configuration"].startswith(THROUGHPUT) else ""
            pred = f"{r['predicted_fps']:.1f}" + (" (modeled)" if r["modeled"] else "")
            if r["configuration"] == LATENCY and not r.get("same_as_baseline", True):
                pred += " (the planner's latency plan differs)"
            flight = "+".join(str(k) for k in r["in_flight"])
            if r.get("measured_fps"):
                util = ", ".join(f"{u} {v:.0%}" for u, v in r["utilisation"].items())
                tail = (
                    f"{r['measured_fps']:.1f} | {_pct(r['error'])} | {_pct(r['spread'], False)} "
                    f"| {r['p50_ms']:.3f} / {r['p99_ms']:.3f} | {util} "
                    f"| {'passed' if r['check_passed'] else 'FAILED'}"
                )
            elif r["predicted_only"] or not r["file"]:
                tail = (
                    "predicted only (modeled)" if r["predicted_only"] else "not run"
                ) + " | -" * 5
            else:
                tail = f"run failed: {r.get('run_error')}"
            print(f"{head}{plan} | {parts} | {flight} | {pred} | {tail} |")


def goals(results: list[dict[str, Any]]) -> dict[str, Any]:
    real = [r for res in results for r in res["rows"] if r.get("measured_fps")]
    tps = [r for r in real if r["configuration"] == THROUGHPUT and r["error"] is not None]
    errs = [abs(r["error"]) for r in real if r["error"] is not None]
    lat = [res["vs_latency"] for res in results if res["branchy"] and res["vs_latency"]]
    single = [res["vs_single"] for res in results if res["vs_single"]]
    dp = [res["vs_data_parallel"] for res in results if res["vs_data_parallel"]]
    bd = [res["bounded"] for res in results if res["bounded"] and res["bounded"]["p99_worst_ms"]]
    return {
        "throughput_plans": len(tps),
        "throughput_plans_within": sum(abs(r["error"]) <= GOAL_ERROR for r in tps),
        "measured_rows": len(errs),
        "measured_within": sum(e <= GOAL_ERROR for e in errs),
        "median_abs_error": statistics.median(errs) if errs else None,
        "branchy_models": len(lat),
        "branchy_ratio_met": sum(v["ratio"] >= GOAL_RATIO for v in lat),
        "single_models": len(single),
        "single_not_below": sum(v["verdict"] != "slower" for v in single),
        "data_parallel_models": len(dp),
        "data_parallel_not_below": sum(v["verdict"] != "slower" for v in dp),
        "bounded_models": len(bd),
        "bounded_within": sum(b["p99_worst_ms"] <= b["bound_ms"] for b in bd),
        "checks_failed": [
            f"{r['model']} {r['configuration']}" for r in real if not r["check_passed"]
        ],
    }


def _each(results: list[dict[str, Any]], key: str, say) -> str:
    """``say(result, its figure under key)`` for each result that has one, joined."""
    return "; ".join(say(res, res[key]) for res in results if res[key]) or "none measured"


def goal_lines(results: list[dict[str, Any]], g: dict[str, Any]) -> list[str]:
    ok = {True: "met", False: "NOT met"}

    def met(k: str, n: str) -> str:
        return ok[g[n] > 0 and g[k] == g[n]]

    def ratio(res: dict, v: dict) -> str:
        return f"{res['model']} {v['ratio']:.2f}x, {v['verdict']}"

    err = "; ".join(
        f"{r['model']} {_pct(r['error'])}"
        for res in results
        for r in res["rows"]
        if r["configuration"] == THROUGHPUT and r.get("error") is not None
    )
    lat = _each(
        results,
        "vs_latency",
        lambda res, v: f"{res['model']}{' (branchy)' * res['branchy']} {v['ratio']:.2f}x",
    )
    bd = _each(
        results,
        "bounded",
        lambda res, b: (
            f"{res['model']} p99 {b['p99_worst_ms']:.3f} ms (median of rounds "
            f"{b['p99_ms']:.3f}, predicted {b['predicted_p99_ms']:.3f}) vs {b['bound_ms']:.3f} ms"
            if b.get("p99_worst_ms")
            else f"{res['model']} not measured ({b.get('error_text') or 'run failed'})"
        ),
    )
    dp = (
        f"{met('data_parallel_not_below', 'data_parallel_models')}: "
        f"{g['data_parallel_not_below']} of {g['data_parallel_models']} "
        f"({_each(results, 'vs_data_parallel', ratio)})"
        if g["data_parallel_models"]
        else "n/a (no data-parallel split applies on the stand-in)"
    )
    bad = g["checks_failed"]
    slow = "; ".join(
        f"{res['model']} "
        + (", ".join(f"{u} x{f:.3f}" for u, f in co.items()) if co else "none measured")
        for res in results
        if (co := ((res["plans"].get("stand-in") or {}).get("throughput") or {}).get("corun"))
        is not None
    )
    other = "; ".join(f"{res['model']} {_pct(res['other_cpu_share'], False)}" for res in results)
    return [
        f"Goal, the throughput plan's measured frames/s within 10 % of predicted (stand-in): "
        f"{met('throughput_plans_within', 'throughput_plans')}: {g['throughput_plans_within']} "
        f"of {g['throughput_plans']} ({err or 'none measured'}). Every measured row (baselines "
        f"too): {g['measured_within']} of {g['measured_rows']} within 10 %, median |error| "
        f"{_pct(g['median_abs_error'], False)}.",
        f"Goal, the throughput plan >= {GOAL_RATIO}x the latency plan run as a stream on the "
        f"branchy models (stand-in, measured): {met('branchy_ratio_met', 'branchy_models')}: "
        f"holds on {g['branchy_ratio_met']} of {g['branchy_models']} branchy models (every "
        f"model: {lat}).",
        f"Goal, never below the best single unit or a data-parallel split (measured; below: "
        f"slower in every round): single unit {met('single_not_below', 'single_models')}: "
        f"{g['single_not_below']} of {g['single_models']} ({_each(results, 'vs_single', ratio)})"
        f"; data-parallel {dp}.",
        f"Goal, under a latency bound ({BOUND_FACTOR}x the latency plan's predicted single-frame "
        f"latency) the measured p99 within it in every round: "
        f"{met('bounded_within', 'bounded_models')}: {g['bounded_within']} of "
        f"{g['bounded_models']} ({bd}).",
        "Every frame's outputs checked against the whole model: "
        + (f"FAILED on {', '.join(bad)}." if bad else "passed on every measured row."),
        "Units slowing each other when both work (each unit's run time beside the other over "
        "alone, per round of 12, the rounds' mean without the two highest and two lowest; "
        "measured while planning; the stand-in's predictions charge it): "
        f"{slow or 'not recorded'}.",
        f"Other work on the machine while streams ran (share of all cores' time, from "
        f"/proc/stat): {other}.",
    ]


def report(results: list[dict[str, Any]], skipped: list[str]) -> None:
    print_table(results)
    print()
    for line in goal_lines(results, goals(results)):
        print(line)
    if skipped:
        print(f"Skipped (../shared/models absent): {', '.join(skipped)}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="squeezenet and branchy at 64x64")
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--rounds", type=int, help="rounds of fresh processes (default 3, quick 1)")
    ap.add_argument("--frames", type=int, help="frames per stream (default 300, quick 60)")
    ap.add_argument("--size", type=int, help="zoo image size (default 224, quick 64)")
    ap.add_argument("--time-limit", type=float, help="per plan, s (default 10, quick 3)")
    ap.add_argument("--npus", help="modeled NPU counts (default 1,2,4, quick 1)")
    ap.add_argument("--reprint", type=Path, help="print the table of a saved JSON result")
    args = ap.parse_args()
    if args.reprint is not None:
        saved = json.loads(args.reprint.read_text())
        report(saved["results"], saved.get("skipped", []))
        return
    q = args.quick
    args.rounds = args.rounds or (1 if q else 3)
    args.frames = args.frames or (60 if q else 300)
    args.size = args.size or (64 if q else 224)
    args.time_limit = args.time_limit if args.time_limit is not None else (3.0 if q else 10.0)
    args.npus = [int(n) for n in (args.npus or ("1" if q else "1,2,4")).split(",")]
    keys = args.models.split(",") if args.models else (["squeezenet", "branchy"] if q else MODELS)
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    work = temp_dir("partuner-stream-bench-")
    data = {"machine": machine(), "quick": q, "time_limit_s": args.time_limit}
    data |= {k: getattr(args, k) for k in ("rounds", "frames", "size", "npus")}
    data["units_files"] = [str(STANDIN.relative_to(ROOT)), str(MODELED.relative_to(ROOT))]
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    t_all = time.perf_counter()
    for key in keys:
        t0 = time.perf_counter()
        print(f"{key} ...", file=sys.stderr, flush=True)
        res = bench_model(key, args, work)
        if res is None:
            skipped.append(key)
            continue
        res["wall_s"] = time.perf_counter() - t0
        results.append(res)
        print(f"done {res['model']} in {res['wall_s']:.0f} s", file=sys.stderr, flush=True)
        data |= {"skipped": skipped, "results": results, "goals": goals(results)}
        path = write_result("stream", {**data, "wall_s": time.perf_counter() - t_all})
    report(results, skipped)
    if results:
        print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
