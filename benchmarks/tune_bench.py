"""`partuner tune` on the demo models with the local default units, measured end to end.

For each model: profiling wall time (cold store), the chosen plan's predicted and measured
latency, the best single unit's, and plain onnxruntime using all cores on the whole model,
all measured in the same process, plus the output check.

    python benchmarks/tune_bench.py [--quick]

Writes benchmarks/results/tune.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, shared_model, temp_dir, write_result  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import tune  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import default_units  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small models and few runs")
    args = ap.parse_args()
    work = temp_dir("partuner-tune-bench-")
    size = 64 if args.quick else 224
    repeat = 10 if args.quick else 50
    models = [
        (f"zoo:{n}@{size}", zoo.build(n, image_size=size))
        for n in ("branchy", "squeezenet", "googlenet", "resnet18")
    ]
    if not args.quick:
        for name in ("squeezenet1_1", "googlenet", "resnet18"):
            path = shared_model(name, work)
            if path is not None:
                models.append((f"shared:{name}", path))
    units = default_units()
    rows = []
    for label, source in models:
        graph = load_model(source)
        with ProfileStore(work / f"{label.replace(':', '_')}.db") as store:
            prof = profile_model(graph, units, store=store)
        r = tune(graph, units, prof, work / "out" / label.replace(":", "_"), repeat=repeat)
        rows.append(
            {
                "model": label,
                "nodes": len(graph.compute_nodes),
                "profile_s": prof.wall_s,
                "scheduler": r.plan.scheduler,
                "partitions": len(r.plan.partitions),
                "units_used": r.plan.units,
                "predicted_ms": r.plan.predicted_us / 1e3,
                "measured_ms": None if r.measured is None else r.measured.median_ms,
                "measured_p90_ms": None if r.measured is None else r.measured.p90_ms,
                "single_unit": r.single_unit,
                "single_measured_ms": None
                if r.single_measured is None
                else r.single_measured.median_ms,
                "ort_all_cores_ms": r.ort_all_cores.median_ms,
                "lower_bound_ms": r.lower_bound_us / 1e3,
                "check_passed": r.check.passed,
                "schedulers": {n: p.predicted_us / 1e3 for n, p in r.plans.items()},
            }
        )
        print(f"done {label}", file=sys.stderr)
    path = write_result(
        "tune",
        {
            "machine": machine(),
            "quick": args.quick,
            "units": list(units.units),
            "repeat": repeat,
            "rows": rows,
        },
    )
    print(
        f"| model | nodes | plan | partitions | predicted ms | measured ms | best single "
        f"unit ms | onnxruntime {units['cpuall'].options['threads'] if 'cpuall' in units else 1}"
        " threads ms | check |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['nodes']} | {r['scheduler']} | {r['partitions']} | "
            f"{r['predicted_ms']:.2f} | {r['measured_ms']:.2f} | "
            f"{r['single_measured_ms']:.2f} ({r['single_unit']}) | "
            f"{r['ort_all_cores_ms']:.2f} | {'pass' if r['check_passed'] else 'FAIL'} |"
        )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
