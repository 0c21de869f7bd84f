"""The seed experiment re-run: SqueezeNet's branch groups, sequential vs in parallel.

The branch-parallel seed ran SqueezeNet on CPU + NPU: 202.72 ms sequential, 180.18 ms with 4 of
its 8 branch groups in parallel. Here:

  real      two 1-thread onnxruntime units on this machine's two cores: each plan is run and
            measured (median) beside its prediction;
  modeled   a Cortex-A53-class CPU core and an EVTA-class NPU (conv only, channels multiple
            of 16), both modeled: predicted figures only, labelled modeled. The speed figures
            are assumptions (EVTA publishes none), written in the result file.

Plans: `single` (everything on the best unit: sequential), `branch` (the seed's method: each
branch group's branches on different units when that is faster), `nestc` and `auto`. For each:
how many of the model's parallel branch groups the plan runs on two units at once.

    python benchmarks/seed_bench.py [--quick]

Writes benchmarks/results/seed.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, shared_model, temp_dir, write_result  # noqa: E402

from partuner.export import cut  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem, make_plan, measure_session  # noqa: E402
from partuner.plan import parallel_groups  # noqa: E402
from partuner.profile import ProfileStore, profile_model, random_feeds  # noqa: E402
from partuner.report.html import gantt_svg  # noqa: E402
from partuner.report.trace import measured_slices, predicted_slices  # noqa: E402
from partuner.runtime import Session  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

REAL = {
    "units": {
        "cpu0": {"backend": "onnxruntime", "threads": 1, "cores": [0]},
        "cpu1": {"backend": "onnxruntime", "threads": 1, "cores": [1]},
    }
}
MODELED = {
    "units": {
        "a53": {"backend": "modeled", "gflops": 4.8, "gbps": 2.0, "overhead_us": 20},
        "evta": {
            "backend": "modeled",
            "gflops": 51.2,
            "gbps": 2.0,
            "overhead_us": 150,
            "ops": ["Conv"],
            "conv_channel_multiple": 16,
        },
    },
    "links": {"default": {"latency_us": 50, "gbps": 1.0}},
}
PLANS = ("single", "branch", "nestc", "auto")


def groups_in_parallel(problem, plan) -> tuple[int, int]:
    """(groups two of whose branches are predicted to run at the same time on different units,
    all groups)."""
    part_of = {n: p for p in plan.partitions for n in p.nodes}
    groups = parallel_groups(problem)
    par = 0
    for g in groups:
        spans = []  # per branch: the (unit, start, end) of the partitions holding its nodes
        for b in g.branches:
            parts = {part_of[n].name: part_of[n] for n in b}.values()
            spans.append([(p.unit, p.start_us, p.end_us) for p in parts])
        hit = any(
            u1 != u2 and s1 < e2 and s2 < e1
            for i, a in enumerate(spans)
            for bb in spans[i + 1 :]
            for (u1, s1, e1) in a
            for (u2, s2, e2) in bb
        )
        par += hit
    return par, len(groups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--figures", type=Path, help="write Gantt charts (SVG) of the plans here")
    args = ap.parse_args()
    work = temp_dir("partuner-seed-bench-")
    repeat = 10 if args.quick else 50
    limit = 3.0 if args.quick else 20.0
    models = [("zoo:squeezenet@224", zoo.build("squeezenet", image_size=224))]
    path = None if args.quick else shared_model("squeezenet1_1", work)
    if path is not None:
        models.append(("shared:squeezenet1_1", path))
    rows = []
    for label, source in models:
        graph = load_model(source)
        feeds = random_feeds(graph, list(graph.inputs))
        for setting, spec in (("real", REAL), ("modeled", MODELED)):
            units = units_from_mapping(spec, source=setting)
            with ProfileStore(work / "p.db") as store:
                prof = profile_model(graph, units, store=store)
            problem = build_problem(graph, units, prof)
            for name in PLANS:
                plan, _ = make_plan(problem, name, time_limit=limit)
                par, total = groups_in_parallel(problem, plan)
                row = {
                    "model": label,
                    "setting": setting,
                    "plan": name,
                    "found_by": plan.scheduler,
                    "partitions": len(plan.partitions),
                    "predicted_ms": plan.predicted_us / 1e3,
                    "groups_parallel": par,
                    "groups": total,
                    "modeled": plan.modeled,
                    "measured_ms": None,
                }
                measured = []
                if not plan.modeled:
                    with Session(graph, cut(graph, plan.partitions), units) as sess:
                        stats, _ = measure_session(sess, feeds, repeat)
                        measured = measured_slices(sess.last_trace)
                    row["measured_ms"] = stats.median_ms
                if args.figures and label.startswith("zoo:") and name in ("branch", "auto"):
                    args.figures.mkdir(parents=True, exist_ok=True)
                    svg = gantt_svg(predicted_slices(plan.partitions), measured, list(units.units))
                    out_svg = args.figures / f"gantt-squeezenet-{setting}-{name}.svg"
                    out_svg.write_text(svg)
                    row["figure"] = str(out_svg)
                rows.append(row)
                print(f"done {label} {setting} {name}", file=sys.stderr)
    out = write_result(
        "seed",
        {
            "machine": machine(),
            "quick": args.quick,
            "real_units": REAL,
            "modeled_units": MODELED,
            "rows": rows,
        },
    )
    print(
        "| model | setting | plan | partitions | groups in parallel | predicted ms | measured ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        meas = "modeled" if r["measured_ms"] is None else f"{r['measured_ms']:.2f}"
        pred = f"{r['predicted_ms']:.2f}" + (" (modeled)" if r["modeled"] else "")
        print(
            f"| {r['model']} | {r['setting']} | {r['plan']} | {r['partitions']} | "
            f"{r['groups_parallel']} of {r['groups']} | {pred} | {meas} |"
        )
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
