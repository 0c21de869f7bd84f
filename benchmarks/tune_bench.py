"""`partuner tune` on the demo models with the local default units, against the alternatives.

For each model: profiling wall time (cold store), the chosen plan's predicted and measured
latency, the best single unit's, and, on the whole model, plain onnxruntime with 1 thread and
with all cores, onnxruntime's ORT_PARALLEL executor (1 intra-op thread, inter-op threads = cores)
and OpenVINO with all cores at f32 and bf16 (when installed), all measured in the same process,
plus the output check.

    python benchmarks/tune_bench.py [--quick]

Writes benchmarks/results/tune.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median_us, shared_model, temp_dir, write_result  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import tune  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.profile.measure import random_feeds  # noqa: E402
from partuner.units import default_units, make_unit  # noqa: E402


def _median_ms(fn, repeat: int) -> float:
    return median_us(fn, repeat) / 1e3


def alternatives(graph, repeat: int) -> dict[str, float]:
    """The whole model on the usual runtimes, median ms."""
    import os

    import onnxruntime as ort

    cores = os.cpu_count() or 1
    feeds = random_feeds(graph, list(graph.inputs))
    data = graph.model.SerializeToString()
    out = {}
    for label, intra, inter, parallel in (
        ("onnxruntime 1 thread", 1, 1, False),
        (f"onnxruntime {cores} threads", cores, 1, False),
        (f"onnxruntime ORT_PARALLEL ({cores} inter-op)", 1, cores, True),
    ):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = intra, inter
        if parallel:
            so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        so.log_severity_level = 3
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        out[label] = _median_ms(lambda s=sess: s.run(None, feeds), repeat)
    for prec in ("f32", "bf16"):
        unit = make_unit("ov", "openvino", threads=cores, precision=prec)
        if not unit.availability()[0]:
            continue
        runner = unit.prepare(graph.model)
        out[f"OpenVINO {cores} threads {prec}"] = _median_ms(lambda r=runner: r.run(feeds), repeat)
        runner.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small models and few runs")
    args = ap.parse_args()
    work = temp_dir("partuner-tune-bench-")
    size = 64 if args.quick else 224
    repeat = 10 if args.quick else 50
    names = ["branchy", "squeezenet", "googlenet", "resnet18"]
    if not args.quick:
        names += ["resnet50", "mobilenet_v2", "shufflenet_v2", "inception_v3", "densenet121"]
    models = [(f"zoo:{n}@{size}", zoo.build(n, image_size=size)) for n in names]
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
                "alternatives_ms": alternatives(graph, repeat),
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
