"""The planner on the demo models and three unit sets: predicted latency, bound, solve time.

Unit sets (the CPU is this machine's, profiled for real; the NPUs are modeled):
  two-cpus     two 1-thread onnxruntime units;
  cpu+npu      one 1-thread CPU unit + a conv-only modeled NPU 5x faster than that CPU on
               convolutions, over a slow link (100 µs + 1 GB/s);
  cpu+2npu, cpu+4npu   the same CPU + two or four such NPUs.
Per model, unit set and scheduler: the predicted latency of the plan as partitions, its ratio
to the best lower bound, the solve time, the status. Planning only: nothing is run.

    python benchmarks/plan_bench.py [--quick] [--time-limit S]

Writes benchmarks/results/plan.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem  # noqa: E402
from partuner.plan import get_scheduler, lower_bound, plan_from_schedule, scheduler_names  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402


def cpu_conv_gflops(graph, profile, unit: str) -> float:
    flops = sum(n.flops for n in graph.compute_nodes if n.op_type == "Conv")
    us = sum(profile.costs[n.name][unit] for n in graph.compute_nodes if n.op_type == "Conv")
    return flops / (us * 1e3) if us > 0 else 10.0


def unit_sets(gflops: float) -> dict[str, dict]:
    npu = {
        "backend": "modeled",
        "gflops": 5 * gflops,
        "gbps": 20,
        "overhead_us": 20,
        "ops": ["Conv"],
    }
    slow = {"latency_us": 100, "gbps": 1}
    return {
        "two-cpus": {
            "units": {
                "cpu0": {"backend": "onnxruntime", "threads": 1},
                "cpu1": {"backend": "onnxruntime", "threads": 1},
            }
        },
        "cpu+npu": {
            "units": {"cpu": {"backend": "onnxruntime", "threads": 1}, "npu": npu},
            "links": {"default": slow},
        },
        "cpu+2npu": {
            "units": {
                "cpu": {"backend": "onnxruntime", "threads": 1},
                **{f"npu{i}": dict(npu) for i in range(2)},
            },
            "links": {"default": slow},
        },
        "cpu+4npu": {
            "units": {
                "cpu": {"backend": "onnxruntime", "threads": 1},
                **{f"npu{i}": dict(npu) for i in range(4)},
            },
            "links": {"default": slow},
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--time-limit", type=float, default=60.0, help="per exact/auto solve")
    args = ap.parse_args()
    size = 64 if args.quick else 224
    names = ["squeezenet", "googlenet", "resnet18"]
    if not args.quick:
        names += [
            n
            for n in ("resnet50", "mobilenet_v2", "inception_v3", "densenet121", "synthetic_large")
            if n in zoo.NAMES
        ]
    limit = 5.0 if args.quick else args.time_limit
    work = temp_dir("partuner-plan-bench-")
    rows = []
    for name in names:
        s = zoo.MIN_IMAGE_SIZE.get(name, 1) if hasattr(zoo, "MIN_IMAGE_SIZE") else 1
        graph = load_model(
            zoo.build(name, image_size=max(size, s) if name != "synthetic_large" else 32)
        )
        with ProfileStore(work / "p.db") as store:
            base = units_from_mapping(unit_sets(10.0)["two-cpus"])
            prof = profile_model(graph, base, store=store)
            gf = cpu_conv_gflops(graph, prof, "cpu0")
            for set_name, spec in unit_sets(gf).items():
                units = units_from_mapping(spec)
                p = profile_model(graph, units, store=store)
                problem = build_problem(graph, units, p)
                lb = lower_bound(problem)
                best_bound = lb
                results = {}
                for sched in scheduler_names():
                    t0 = time.perf_counter()
                    try:
                        sch = get_scheduler(sched).schedule(problem, time_limit=limit)
                    except Exception as exc:  # a baseline that cannot plan this case
                        results[sched] = {"error": str(exc)[:200]}
                        continue
                    solve = time.perf_counter() - t0
                    plan = plan_from_schedule(problem, sch)
                    if sch.lower_bound is not None:
                        best_bound = max(best_bound, sch.lower_bound)
                    results[sched] = {
                        "predicted_ms": plan.predicted_us / 1e3,
                        "solve_s": solve,
                        "status": sch.status,
                        "partitions": len(plan.partitions),
                    }
                rows.append(
                    {
                        "model": name,
                        "nodes": len(problem.nodes),
                        "units": set_name,
                        "lower_bound_ms": best_bound / 1e3,
                        "schedulers": results,
                    }
                )
                print(f"done {name} {set_name}", file=sys.stderr)
    path = write_result(
        "plan", {"machine": machine(), "quick": args.quick, "time_limit_s": limit, "rows": rows}
    )
    scheds = sorted({s for r in rows for s in r["schedulers"]})
    print("| model | nodes | units | bound ms | " + " | ".join(scheds) + " |")
    print("|---|---|---|---|" + "---|" * len(scheds))
    for r in rows:
        cells = []
        for s in scheds:
            x = r["schedulers"].get(s, {})
            if "predicted_ms" in x:
                ratio = x["predicted_ms"] / r["lower_bound_ms"] if r["lower_bound_ms"] else 0
                cells.append(f"{x['predicted_ms']:.2f} ({ratio:.2f}x, {x['solve_s']:.2f}s)")
            else:
                cells.append("-")
        print(
            f"| {r['model']} | {r['nodes']} | {r['units']} | {r['lower_bound_ms']:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
