"""The planner at 1 s, 10 s (the default) and 60 s on generated problems nobody tuned for.

Problems: torchvision-style zoo models, each with ``--configs`` generated unit sets (seeded):
this machine's CPU (onnxruntime, 1 thread, profiled for real) and 1-4 modeled NPUs running
0.3-10x the CPU's convolution rate (log-uniform), with an operator list from conv-only to
everything, a call overhead of 5-100 µs, over links of 5-200 µs (log-uniform) and 0.5-20 GB/s.
Per problem: ``auto`` at each budget (its plan, its bound, wall time) and every other scheduler
at the default budget; the best plan any run found ("best known") and the best bound any run
proved. Planning only: nothing is run, every figure is a prediction.

    python benchmarks/anytime_bench.py [--quick] [--configs N] [--budgets 1,10,60] [--review]
        [--problems DIR]

``--review`` plans instead the four held-out problems of the independent review in issue 17
(Inception-v3 and DenseNet-121 with a CPU and one modeled conv-only NPU, GoogLeNet and
SqueezeNet with two; 200 GFLOP/s, 40 µs per call, links 60 µs + 1.5 GB/s).

``--problems DIR`` writes every problem there (its costs, unit set and links), and a later run
with the same folder plans those instead of profiling: each run profiles this CPU afresh, so
two runs otherwise plan slightly different problems.

Writes benchmarks/results/anytime.json (anytime_review.json with ``--review``) and prints a
markdown table with the goal lines.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402
from plan_bench import cpu_conv_gflops  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem  # noqa: E402
from partuner.plan import get_scheduler, plan_from_schedule, scheduler_names  # noqa: E402
from partuner.plan.chain import (  # noqa: E402
    chain_order,
    segment_plan,
    segment_plan_whole_handoff,
)
from partuner.plan.partitions import Partition, simulate  # noqa: E402
from partuner.plan.problem_json import problem_from_dict, problem_to_dict  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

MODELS = (
    "squeezenet",
    "googlenet",
    "resnet18",
    "mobilenet_v2",
    "shufflenet_v2",
    "resnet50",
    "inception_v3",
    "densenet121",
)
OP_LISTS = (
    ("conv-only", ["Conv"]),
    ("evta", ["Conv", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool"]),
    (
        "most",
        [
            "Conv",
            "Relu",
            "Clip",
            "MaxPool",
            "AveragePool",
            "GlobalAveragePool",
            "Add",
            "Concat",
            "BatchNormalization",
            "Gemm",
            "MatMul",
            "Flatten",
            "Mul",
            "Sigmoid",
        ],
    ),
    ("everything", None),
)
BASELINES = ("heft", "static", "nestc")
GOAL_NODES = 300
GOAL_GAP = 0.02


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def generated_config(rng: random.Random, cpu_gflops: float) -> tuple[dict[str, Any], str]:
    """One unit set (a units-file mapping) and a one-line description of it."""
    n_npu = rng.randint(1, 4)
    speed = _log_uniform(rng, 0.3, 10.0)
    ops_name, ops = rng.choice(OP_LISTS)
    overhead = round(_log_uniform(rng, 5.0, 100.0), 1)
    latency = round(_log_uniform(rng, 5.0, 200.0), 1)
    gbps = round(_log_uniform(rng, 0.5, 20.0), 2)
    npu: dict[str, Any] = {
        "backend": "modeled",
        "gflops": round(speed * cpu_gflops, 3),
        "gbps": 20,
        "overhead_us": overhead,
    }
    if ops is not None:
        npu["ops"] = list(ops)
    spec = {
        "units": {
            "cpu": {"backend": "onnxruntime", "threads": 1},
            **{f"npu{i}": dict(npu) for i in range(n_npu)},
        },
        "links": {"default": {"latency_us": latency, "gbps": gbps}},
    }
    text = (
        f"cpu+{n_npu} npu x{speed:.2f} {ops_name}, {overhead:g} us/call, "
        f"link {latency:g} us + {gbps:g} GB/s"
    )
    return spec, text


# the independent review's held-out problems (issue 17): model, number of NPUs
REVIEW = (("inception_v3", 1), ("densenet121", 1), ("googlenet", 2), ("squeezenet", 2))


def review_config(n_npu: int) -> tuple[dict[str, Any], str]:
    """The review's unit set: a 1-thread onnxruntime CPU and ``n_npu`` modeled conv-only NPUs
    (200 GFLOP/s, 6 GB/s, 40 µs per call) over links of 60 µs + 1.5 GB/s."""
    npu = {"backend": "modeled", "gflops": 200, "gbps": 6, "overhead_us": 40, "ops": ["Conv"]}
    spec = {
        "units": {
            "cpu": {"backend": "onnxruntime", "threads": 1},
            **{f"npu{i}": dict(npu) for i in range(n_npu)},
        },
        "links": {"default": {"latency_us": 60, "gbps": 1.5}},
    }
    return spec, f"review: cpu+{n_npu} npu conv-only 200 GFLOP/s, 40 us/call, link 60 us + 1.5 GB/s"


def _solve(problem, name: str, limit: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        sch = get_scheduler(name).schedule(problem, time_limit=limit)
    except Exception as exc:  # a baseline that cannot plan this problem
        return {"error": str(exc)[:200]}
    wall = time.perf_counter() - t0
    plan = plan_from_schedule(problem, sch)
    return {
        "predicted_ms": plan.predicted_us / 1e3,
        "bound_ms": (sch.lower_bound or 0.0) / 1e3,
        "status": sch.status,
        "partitions": len(plan.partitions),
        "wall_s": wall,
        "assignment": [plan.node_unit[n] for n in problem.nodes],
    }


def run_problem(problem, budgets: list[float], default: float) -> dict[str, Any]:
    auto = {f"{b:g}": _solve(problem, "auto", b) for b in budgets}
    others = {s: _solve(problem, s, default) for s in scheduler_names() if s != "auto"}
    runs = [*auto.values(), *others.values()]
    best = min(r["predicted_ms"] for r in runs if "predicted_ms" in r)
    bound = max(r.get("bound_ms", 0.0) for r in runs)
    for r in runs:
        if "predicted_ms" in r:
            r["gap"] = r["predicted_ms"] / best - 1
            r["bound_gap"] = 1 - r["bound_ms"] / best if best > 0 else 0.0
        r.pop("assignment", None)
    tied = 1e-9 * best
    winners = [
        f"auto {b} s" for b, r in auto.items() if r.get("predicted_ms", math.inf) <= best + tied
    ]
    winners += sorted(
        s for s, r in others.items() if r.get("predicted_ms", math.inf) <= best + tied
    )
    return {
        "best_known_ms": best,
        "best_bound_ms": bound,
        "auto": auto,
        "schedulers": others,
        "winners": winners,
        "chain_programmes": chain_programmes(problem),
    }


def chain_programmes(problem) -> dict[str, Any] | None:
    """On a chain-shaped problem, each segment programme's wall time and bound, and the
    simulated latency of its plan (both run here whatever ``auto`` needed); else None."""
    if chain_order(problem) is None:
        return None
    out = {}
    for name, programme in (
        ("segments", segment_plan),
        ("whole_handoff", segment_plan_whole_handoff),
    ):
        t0 = time.perf_counter()
        got = programme(problem)
        wall = time.perf_counter() - t0
        if got is None:
            continue
        parts = [(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(got.parts)]
        latency = simulate(problem, [Partition(*p) for p in parts]).makespan_us
        out[name] = {"wall_s": wall, "bound_ms": got.bound_us / 1e3, "plan_ms": latency / 1e3}
    return out


def goals(rows: list[dict[str, Any]], default: float) -> list[str]:
    key = f"{default:g}"
    small = [r for r in rows if r["nodes"] <= GOAL_NODES]
    near = [
        r
        for r in small
        if r["auto"][key].get("gap", 1.0) <= GOAL_GAP
        and r["auto"][key].get("bound_gap", 1.0) <= GOAL_GAP
    ]
    plan_only = [r for r in small if r["auto"][key].get("gap", 1.0) <= GOAL_GAP]
    worse = [
        f"{r['model']} #{r['config']} vs {b}"
        for r in rows
        for b in BASELINES
        if "predicted_ms" in r["schedulers"].get(b, {})
        and r["auto"][key]["predicted_ms"] > r["schedulers"][b]["predicted_ms"] * (1 + 1e-9)
    ]
    chains = [r for r in rows if r["chain_shaped"]]
    proven = [
        r
        for r in chains
        if r["auto"][key].get("status") == "optimal" and r["auto"][key]["wall_s"] < 1.0
    ]
    share = len(near) / len(small) if small else 0.0
    return [
        f"Goal, at the default {default:g} s plan within {GOAL_GAP:.0%} of the best known and "
        f"bound within {GOAL_GAP:.0%} below it on 90 % of problems up to {GOAL_NODES} nodes: "
        f"{'met' if share >= 0.9 else 'NOT met'} ({len(near)} of {len(small)}; the plan alone "
        f"within {GOAL_GAP:.0%} on {len(plan_only)}).",
        f"Goal, never worse than {', '.join(BASELINES)}: "
        f"{'met' if not worse else 'NOT met: ' + '; '.join(worse)}.",
        f"Goal, chain-shaped problems proven optimal in < 1 s: "
        f"{'met' if len(proven) == len(chains) else 'NOT met'} ({len(proven)} of {len(chains)}).",
        *chain_lines(chains),
    ]


def chain_lines(chains: list[dict[str, Any]]) -> list[str]:
    """Per chain-shaped problem, what each segment programme took alone, its bound and its
    plan."""
    out = []
    for r in chains:
        progs = r.get("chain_programmes") or {}
        said = "; ".join(
            f"{name} {p['wall_s']:.2f} s, bound {p['bound_ms']:.3f} ms, plan {p['plan_ms']:.3f} ms"
            for name, p in progs.items()
        )
        out.append(
            f"Chain programmes, {r['model']} #{r['config']} ({r['nodes']} nodes, "
            f"{r['units'].split(',')[0]}): {said}."
        )
    return out


def _problems(
    name: str,
    args: argparse.Namespace,
    size: int,
    configs: int,
    rng: random.Random,
    work: Path,
    keep: Path | None,
) -> list[tuple[Any, dict[str, Any], str]]:
    """``name``'s problems with their unit sets: profiled here (and written to ``keep`` when
    given), or read from ``keep`` when it holds them all (the same problems again, whatever
    this CPU measures today: runs of two planner versions then compare planners)."""
    n = sum(1 for m, _ in REVIEW if m == name) if args.review else configs
    files = [keep / f"{name}@{size}_{k}.json" for k in range(n)] if keep is not None else []
    if files and all(f.is_file() for f in files):
        if not args.review:
            for _ in range(n):  # the seeded draws the profiled run made for this model
                generated_config(rng, 1.0)
        out = []
        for f in files:
            data = json.loads(f.read_text())
            out.append((problem_from_dict(data["problem"]), data["spec"], data["units"]))
        return out
    graph = load_model(zoo.build(name, image_size=size))
    with ProfileStore(work / "p.db") as store:
        base = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}})
        gf = cpu_conv_gflops(graph, profile_model(graph, base, store=store), "cpu")
        todo = (
            [review_config(n) for m, n in REVIEW if m == name]
            if args.review
            else [generated_config(rng, gf) for _ in range(configs)]
        )
        out = []
        for spec, text in todo:
            units = units_from_mapping(spec)
            out.append(
                (build_problem(graph, units, profile_model(graph, units, store=store)), spec, text)
            )
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for f, (problem, spec, text) in zip(files, out, strict=True):
            payload = {"units": text, "spec": spec, "problem": problem_to_dict(problem)}
            f.write_text(json.dumps(payload))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 small models, 1 config, 1 and 3 s")
    ap.add_argument("--configs", type=int, help="generated unit sets per model (default 3)")
    ap.add_argument("--budgets", help="auto's budgets in s, comma-separated (default 1,10,60)")
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument(
        "--problems",
        help="a folder: write each problem there, or plan the ones it holds instead of "
        "profiling (to compare two planner versions on the same problems)",
    )
    ap.add_argument(
        "--review",
        action="store_true",
        help="the review's four held-out problems instead of generated unit sets",
    )
    args = ap.parse_args()
    size = 64 if args.quick else 224
    models = (
        args.models.split(",")
        if args.models
        else (["squeezenet", "resnet18", "mobilenet_v2"] if args.quick else list(MODELS))
    )
    result_name = "anytime_review" if args.review else "anytime"
    if args.review:
        models = [m for m, _ in REVIEW]
    unknown = [m for m in models if m not in zoo.NAMES]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    budgets = [float(b) for b in (args.budgets or ("1,3" if args.quick else "1,10,60")).split(",")]
    default = 3.0 if args.quick else 10.0
    if default not in budgets:
        budgets.append(default)
    configs = args.configs or (1 if args.quick else 3)
    rng = random.Random(args.seed)
    work = temp_dir("partuner-anytime-bench-")
    rows: list[dict[str, Any]] = []
    keep = Path(args.problems) if args.problems else None
    for name in models:
        for k, (problem, spec, text) in enumerate(
            _problems(name, args, size, configs, rng, work, keep)
        ):
            t0 = time.perf_counter()
            res = run_problem(problem, budgets, default)
            rows.append(
                {
                    "model": name,
                    "config": k,
                    "units": text,
                    "spec": spec,
                    "nodes": len(problem.nodes),
                    "chain_shaped": chain_order(problem) is not None,
                    **res,
                    "wall_s": time.perf_counter() - t0,
                }
            )
            print(f"done {name} #{k} ({text}) in {rows[-1]['wall_s']:.0f} s", file=sys.stderr)
            write_result(result_name, {"machine": machine(), "rows": rows})
    lines = goals(rows, default)
    path = write_result(
        result_name,
        {
            "machine": machine(),
            "quick": args.quick,
            "budgets": budgets,
            "default_s": default,
            "seed": args.seed,
            "rows": rows,
            "goals": lines,
        },
    )
    heads = [f"auto {b:g} s" for b in budgets]
    print(
        "| model | nodes | units | best known ms | best bound | "
        + " | ".join(heads)
        + " | best found by |"
    )
    print("|---|---|---|---|---|" + "---|" * len(heads) + "---|")
    for r in rows:
        cells = []
        for b in budgets:
            a = r["auto"][f"{b:g}"]
            cells.append(
                f"{a['predicted_ms']:.3f} (+{a['gap']:.1%}; bound -{max(a['bound_gap'], 0.0):.1%}; "
                f"{a['wall_s']:.1f} s)"
                if "predicted_ms" in a
                else "-"
            )
        win = ", ".join(r["winners"]) or "-"
        print(
            f"| {r['model']}{' (chain)' if r['chain_shaped'] else ''} | {r['nodes']} | "
            f"{r['units']} | {r['best_known_ms']:.3f} | {r['best_bound_ms']:.3f} | "
            + " | ".join(cells)
            + f" | {win} |"
        )
    print()
    for line in lines:
        print(line)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
