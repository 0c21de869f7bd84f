"""The runtime measured: overhead per partition, predicted vs measured, plan vs baselines.

Two unit sets: ``onnxruntime`` (cpu0 and cpu1 with one thread each, cpuall with a thread on each
core: onnxruntime alone, so the plan can only win by how it places and orders) and ``default``
(``partuner.units.default_units()``: the same plus ovall, OpenVINO f32 on every core, where
OpenVINO is installed). For each model and unit set:

* overhead per partition (µs): the model cut into ``k`` consecutive partitions, all on cpu0, vs
  the whole model as one partition on cpu0: ``(t_k - t_1) / (k - 1)``;
* the best plan (``make_plan(..., "auto")``): predicted vs measured latency, and the median
  relative error of its partitions' predicted durations;
* the best plan's measured latency vs (a) the whole model as one partition on the single-thread
  unit cpu0 and (b) plain onnxruntime with 2 intra-op threads on the whole model.

Every configuration is measured in the same process, in interleaved rounds (so a noisy neighbour
hits them alike); latencies are medians over all runs.

    python benchmarks/runtime_bench.py [--quick] [--models zoo:branchy,shared:googlenet]

``--quick``: zoo models at 64x64, few runs, no ../shared models. Writes
benchmarks/results/runtime.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, shared_model, temp_dir, write_result  # noqa: E402

from partuner.export import PartitionSpec, cut  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem, make_plan, plan_file, reference_outputs  # noqa: E402
from partuner.profile import ProfileStore, profile_model, random_feeds  # noqa: E402
from partuner.runtime import Session, check_outputs  # noqa: E402
from partuner.units import UnitSet, default_units  # noqa: E402

ZOO = ("branchy", "squeezenet", "googlenet", "resnet18", "shufflenet_v2", "densenet121")
SHARED = ("squeezenet1_1", "googlenet", "resnet18")


def _chain(graph, unit: str, k: int) -> list[PartitionSpec]:
    names = [n.name for n in graph.compute_nodes]
    step = -(-len(names) // k)
    return [
        PartitionSpec(f"c{i}", unit, tuple(names[i * step : (i + 1) * step]))
        for i in range(k)
        if names[i * step : (i + 1) * step]
    ]


def _ort(graph, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(
        graph.model.SerializeToString(), so, providers=["CPUExecutionProvider"]
    )


def bench_model(label, source, units, work, *, rounds, per_round, k, budget_s, time_limit):
    graph = load_model(source)
    t0 = time.perf_counter()
    with ProfileStore(work / f"{label.replace(':', '_')}.db") as store:
        prof = profile_model(graph, units, store=store, budget_s=budget_s, skip_unavailable=True)
    profile_s = time.perf_counter() - t0
    problem = build_problem(graph, units, prof)
    plan, _ = make_plan(problem, "auto", time_limit=time_limit)
    pf = plan_file(plan, graph, units)
    feeds = random_feeds(graph, list(graph.inputs))
    chain = _chain(graph, "cpu0", k)
    sessions = {
        "plan": Session(graph, cut(graph, pf.partitions), units),
        "single": Session(graph, cut(graph, _chain(graph, "cpu0", 1)), units),
        "chain": Session(graph, cut(graph, chain), units),
    }
    ort2 = _ort(graph, 2)
    calls = {name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()}
    calls["ort2"] = lambda: ort2.run(None, feeds)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    part_ms: dict[str, list[float]] = {}
    for fn in calls.values():  # warm-up
        for _ in range(3):
            fn()
    for _ in range(rounds):
        for name, fn in calls.items():
            for _ in range(3):  # unrecorded: the previous configuration's pools wind down
                fn()
            for _ in range(per_round):
                t = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - t) * 1e3)
                if name == "plan":
                    for tr in sessions["plan"].last_trace:
                        part_ms.setdefault(tr.partition, []).append((tr.end_s - tr.start_s) * 1e3)
    got = dict(zip(graph.outputs, sessions["plan"].run(None, feeds), strict=True))
    check = check_outputs(reference_outputs(graph, feeds), got, ["f32"])
    for s in sessions.values():
        s.close()
    med = {name: statistics.median(v) for name, v in samples.items()}
    errors = [
        abs(statistics.median(part_ms[p.name]) / ((p.end_us - p.start_us) / 1e3) - 1)
        for p in pf.partitions
        if p.name in part_ms and p.end_us > p.start_us
    ]
    n_chain = len(chain)
    predicted = plan.predicted_us / 1e3
    return {
        "model": label,
        "nodes": len(graph.compute_nodes),
        "profile_s": round(profile_s, 2),
        "scheduler": plan.scheduler,
        "partitions": len(plan.partitions),
        "units_used": plan.units,
        "predicted_ms": predicted,
        "measured_ms": med["plan"],
        "plan_error": med["plan"] / predicted - 1 if predicted > 0 else None,
        "partition_median_abs_error": statistics.median(errors) if errors else None,
        "single_thread_ms": med["single"],
        "ort_2_threads_ms": med["ort2"],
        "speedup_vs_single_thread": med["single"] / med["plan"],
        "speedup_vs_ort_2_threads": med["ort2"] / med["plan"],
        "chain_partitions": n_chain,
        "chain_ms": med["chain"],
        "overhead_us_per_partition": (med["chain"] - med["single"]) * 1e3 / max(n_chain - 1, 1),
        "runs": rounds * per_round,
        "check_passed": check.passed,
    }


def _fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small models, few runs")
    ap.add_argument("--models", default="", help="comma-separated labels (zoo:NAME, shared:NAME)")
    args = ap.parse_args()
    work = temp_dir("partuner-runtime-bench-")
    size = 64 if args.quick else 224
    labels = [f"zoo:{n}" for n in ZOO] + ([] if args.quick else [f"shared:{n}" for n in SHARED])
    if args.models:
        labels = [m.strip() for m in args.models.split(",") if m.strip()]
    full = default_units()
    ort_only = UnitSet(
        [u for u in full if u.backend == "onnxruntime"], {}, default_link=full.default_link
    )
    unit_sets = {"onnxruntime": ort_only}
    if len(ort_only) < len(full):
        unit_sets["default"] = full
    opts = (
        dict(rounds=3, per_round=5, k=16, budget_s=0.05, time_limit=2.0)
        if args.quick
        else dict(rounds=5, per_round=20, k=60, budget_s=0.25, time_limit=20.0)
    )
    rows = []
    for label in labels:
        kind, _, name = label.partition(":")
        if kind == "shared":
            source = shared_model(name, work)  # rehydrated via ../shared/tools/onnx_weights.py
            if source is None:
                print(f"skipping {label}: ../shared/models not found", file=sys.stderr)
                continue
        else:
            source = zoo.build(name, image_size=size)
            label = f"zoo:{name}@{size}"
        for set_name, units in unit_sets.items():
            row = bench_model(label, source, units, work, **opts)
            rows.append({"units": set_name, **row})
            print(f"done {label} ({set_name})", file=sys.stderr)
    errors = [abs(r["plan_error"]) for r in rows if r["plan_error"] is not None]
    summary = {
        "median_abs_plan_error": statistics.median(errors) if errors else None,
        "median_overhead_us_per_partition": statistics.median(
            r["overhead_us_per_partition"] for r in rows
        )
        if rows
        else None,
    }
    path = write_result(
        "runtime",
        {
            "machine": machine(),
            "unit_sets": {k: v.names for k, v in unit_sets.items()},
            "quick": args.quick,
            "settings": opts,
            "summary": summary,
            "rows": rows,
        },
    )
    print(
        "| units | model | nodes | plan | units used | parts | predicted ms | measured ms | "
        "error | part. err | 1-thread ms | ort 2-thr ms | vs 1-thr | vs ort2 | "
        "overhead µs/part | check |"
    )
    print("|" + "---|" * 16)
    for r in rows:
        print(
            f"| {r['units']} | {r['model']} | {r['nodes']} | {r['scheduler']} | "
            f"{', '.join(r['units_used'])} | {r['partitions']} | "
            f"{_fmt(r['predicted_ms'])} | {_fmt(r['measured_ms'])} | "
            f"{_fmt(r['plan_error'], '+.1%')} | {_fmt(r['partition_median_abs_error'], '.1%')} | "
            f"{_fmt(r['single_thread_ms'])} | {_fmt(r['ort_2_threads_ms'])} | "
            f"{r['speedup_vs_single_thread']:.2f}x | {r['speedup_vs_ort_2_threads']:.2f}x | "
            f"{r['overhead_us_per_partition']:.1f} ({r['chain_partitions']}) | "
            f"{'pass' if r['check_passed'] else 'FAIL'} |"
        )
    print(
        f"\nmedian |plan error| {_fmt(summary['median_abs_plan_error'], '.1%')}, median "
        f"overhead {_fmt(summary['median_overhead_us_per_partition'], '.1f')} µs per partition; "
        f"wrote {path}"
    )


if __name__ == "__main__":
    main()
