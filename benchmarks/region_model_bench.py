"""pexact's region model with and without its pairwise parts, against the simulation.

Inception-v3 (zoo, 224) on the plan benchmark's `cpu+npu` units (one real 1-thread CPU unit,
profiled here, and a modeled conv-only NPU over a slow link). Every region between
articulation nodes is solved with its boundary nodes on the CPU, once with the smaller model
(no pairwise parts) and once with the whole one, each given the same time. Per region and
model: status, span, proven bound and solve time; then each model's regions are assembled into
one plan and simulated: how far each region's simulated time lies from the model's span, and
the plan's predicted latency. Planning only.

    python benchmarks/region_model_bench.py [--quick] [--seconds S]

Writes benchmarks/results/region_model.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402
from plan_bench import cpu_conv_gflops, unit_sets  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem  # noqa: E402
from partuner.plan.assemble import assemble, merge_partitions, schedule_of_parts  # noqa: E402
from partuner.plan.decompose import regions  # noqa: E402
from partuner.plan.pexact import PartitionExact  # noqa: E402
from partuner.plan.region_model import solve_region  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a 96-pixel image, 3 s per solve")
    ap.add_argument("--seconds", type=float, default=15.0, help="per region and model")
    args = ap.parse_args()
    size, limit = (96, 3.0) if args.quick else (224, args.seconds)
    graph = load_model(zoo.build("inception_v3", image_size=size))
    with ProfileStore(temp_dir("partuner-region-bench-") / "p.db") as store:
        base = units_from_mapping(unit_sets(10.0)["two-cpus"])
        gflops = cpu_conv_gflops(graph, profile_model(graph, base, store=store), "cpu0")
        units = units_from_mapping(unit_sets(gflops)["cpu+npu"])
        problem = build_problem(graph, units, profile_model(graph, units, store=store))
    parts = regions(problem, 16)
    rows, chains = [], {False: [], True: []}
    for k, region in enumerate(parts):
        row = {"region": k, "nodes": len(region.nodes), "exit": region.exit}
        for pairs in (False, True):
            t0 = time.perf_counter()
            sol = solve_region(
                problem,
                region,
                entry_unit="cpu" if region.entry is not None else None,
                exit_unit="cpu" if region.exit is not None else None,
                time_limit=limit,
                workers=PartitionExact().workers,  # pexact's own setting
                pairs=pairs,
            )
            if sol is None:
                raise SystemExit(f"region {k}: no plan found in {limit} s")
            chains[pairs].append(sol)
            row["pairs" if pairs else "smaller"] = {
                "status": sol.status,
                "span_us": sol.span_us,
                "bound_us": sol.bound_us,
                "solve_s": time.perf_counter() - t0,
            }
        rows.append(row)
        print(f"region {k} done", file=sys.stderr)
    plans = {}
    for pairs, chain in chains.items():
        assembled = assemble(parts, chain)
        sched, latency = schedule_of_parts(problem, assembled, "bench")
        _, merged = schedule_of_parts(problem, merge_partitions(problem, assembled), "bench")
        prev = 0.0
        for row, region in zip(rows, parts, strict=True):
            end = sched.slots[region.exit].end if region.exit is not None else latency
            row["pairs" if pairs else "smaller"]["simulated_us"] = end - prev
            prev = end
        plans["pairs" if pairs else "smaller"] = {
            "predicted_ms": latency / 1e3,
            "partitions": len(assembled),
            "sum_of_spans_ms": sum(s.span_us for s in chain) / 1e3,
            "sum_of_bounds_ms": sum(s.bound_us for s in chain) / 1e3,
            "merged_predicted_ms": merged / 1e3,
        }
    path = write_result(
        "region_model",
        {
            "machine": machine(),
            "quick": args.quick,
            "model": f"zoo:inception_v3@{size}",
            "units": "cpu+npu",
            "seconds_per_solve": limit,
            "regions": rows,
            "plans": plans,
        },
    )
    print(
        "| region | nodes | smaller: status, span, bound, simulated (µs), s "
        "| pairwise: status, span, bound, simulated (µs), s |"
    )
    print("|---|---|---|---|")
    for r in rows:
        cells = []
        for key in ("smaller", "pairs"):
            x = r[key]
            cells.append(
                f"{x['status']}, {x['span_us']:.1f}, {x['bound_us']:.1f}, "
                f"{x['simulated_us']:.1f} ({x['simulated_us'] - x['span_us']:+.1f}), "
                f"{x['solve_s']:.1f}"
            )
        print(f"| {r['region']} | {r['nodes']} | " + " | ".join(cells) + " |")
    print()
    for key, x in plans.items():
        print(
            f"{key} model: plan predicted {x['predicted_ms']:.2f} ms ({x['partitions']} "
            f"partitions), its regions' spans add up to {x['sum_of_spans_ms']:.2f} ms, their "
            f"bounds to {x['sum_of_bounds_ms']:.2f} ms"
        )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
