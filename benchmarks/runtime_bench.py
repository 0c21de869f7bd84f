"""The runtime measured: overhead per partition, predicted vs measured, plan vs baselines.

Two unit sets: ``onnxruntime`` (cpu0 and cpu1 with one thread each, cpuall with a thread on each
core: onnxruntime alone, so the plan can only win by how it places and orders) and ``default``
(``partuner.units.default_units()``: the same plus ovall, OpenVINO f32 on every core, where
OpenVINO is installed). For each model and unit set:

* the runtime's own overhead, apart from any model: a chain of 64 tiny ops (Relu on 16 floats)
  run as 1 partition on cpu0, as 64 partitions on cpu0, and as 64 partitions alternating cpu0
  and cpu1 (each a hand-off between two threads); beside them one backend call of a 1-op model
  and a bare wake-up between two Python threads pinned to two cores (the floor of a blocking
  hand-off between cores on this machine);
* overhead per partition (µs): the model cut into ``k`` consecutive partitions, all on cpu0, vs
  the whole model as one partition on cpu0: ``(t_k - t_1) / (k - 1)`` (the runtime's overhead
  plus what cutting costs the backend: layout conversions, lost fusions, cold caches);
* the best plan (``make_plan(..., "auto")``): predicted vs measured latency, and the median
  relative error of its partitions' predicted durations;
* the best plan's measured latency vs (a) the whole model as one partition on the single-thread
  unit cpu0 and (b) plain onnxruntime with 2 intra-op threads on the whole model;
* with the onnxruntime units, also the best plan of cpu0 and cpu1 alone (branch parallelism
  only, no unit with two threads): its measured latency, proven lower bound and ratio to (b).

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

from common import (  # noqa: E402
    RUNTIME_MODELS,
    machine,
    median_us,
    shared_model,
    temp_dir,
    write_result,
)

from partuner.export import PartitionSpec, cut, cut_nodes  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem, make_plan, plan_file, reference_outputs  # noqa: E402
from partuner.profile import ProfileStore, profile_model, random_feeds  # noqa: E402
from partuner.runtime import Session, check_outputs  # noqa: E402
from partuner.units import UnitSet, default_units  # noqa: E402

ZOO = RUNTIME_MODELS
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


def bench_model(
    label, source, units, work, *, rounds, per_round, k, budget_s, time_limit, pair=None
):
    graph = load_model(source)
    t0 = time.perf_counter()
    with ProfileStore(work / f"{label.replace(':', '_')}.db") as store:
        prof = profile_model(graph, units, store=store, budget_s=budget_s, skip_unavailable=True)
        pair_prof = profile_model(graph, pair, store=store, budget_s=budget_s) if pair else None
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
    pair_plan = None
    if pair is not None:  # branch parallelism alone: the best plan of two 1-thread units
        pair_problem = build_problem(graph, pair, pair_prof)
        pair_plan, _ = make_plan(pair_problem, "auto", time_limit=time_limit)
        pair_pf = plan_file(pair_plan, graph, pair)
        sessions["pair"] = Session(graph, cut(graph, pair_pf.partitions), pair)
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
        "pair_partitions": None if pair_plan is None else len(pair_plan.partitions),
        "pair_predicted_ms": None if pair_plan is None else pair_plan.predicted_us / 1e3,
        "pair_lower_bound_ms": None
        if pair_plan is None or pair_plan.lower_bound_us is None
        else pair_plan.lower_bound_us / 1e3,
        "pair_measured_ms": med.get("pair"),
        "pair_vs_ort_2_threads": med["ort2"] / med["pair"] if "pair" in med else None,
        "chain_partitions": n_chain,
        "chain_ms": med["chain"],
        "overhead_us_per_partition": (med["chain"] - med["single"]) * 1e3 / max(n_chain - 1, 1),
        "runs": rounds * per_round,
        "check_passed": check.passed,
    }


def _wake_us(n: int = 4000) -> float:
    """One-way wake-up between two Python threads on two cores (lock ping-pong, each thread
    pinned to its own core as two units' threads run), median of n round trips."""
    import os
    import threading

    cores = sorted(os.sched_getaffinity(0))
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def other() -> None:
        os.sched_setaffinity(0, {cores[-1]})
        for _ in range(n):
            ping.acquire()
            pong.release()

    os.sched_setaffinity(0, {cores[0]})
    try:
        t = threading.Thread(target=other)
        t.start()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            ping.release()
            pong.acquire()
            ts.append(time.perf_counter() - t0)
        t.join()
    finally:
        os.sched_setaffinity(0, cores)
    return statistics.median(ts) * 1e6 / 2


def runtime_overhead(units, work: Path, runs: int) -> dict:
    """The runtime's own cost per partition and per hand-off, on a chain of 64 tiny ops."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    n = 64
    nodes = [
        helper.make_node("Relu", [f"v{i - 1}" if i else "x"], [f"v{i}"], name=f"n{i}")
        for i in range(n)
    ]
    g = helper.make_graph(
        nodes,
        "tiny_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(f"v{n - 1}", TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = work / "tiny_chain.onnx"
    onnx.save(model, path)
    graph = load_model(str(path))
    names = [x.name for x in graph.compute_nodes]
    feeds = {"x": np.ones((1, 16), np.float32)}

    def specs(k: int, alternate: bool) -> list[PartitionSpec]:
        step = n // k
        return [
            PartitionSpec(
                f"c{i}",
                "cpu1" if alternate and i % 2 else "cpu0",
                tuple(names[i * step : (i + 1) * step]),
            )
            for i in range(k)
        ]

    sessions = {
        "whole": Session(graph, cut(graph, specs(1, False)), units),
        "same_unit": Session(graph, cut(graph, specs(n, False)), units),
        "alternating": Session(graph, cut(graph, specs(n, True)), units),
    }
    one = units["cpu0"].prepare(cut_nodes(graph, "one", [names[0]])[0])
    one_feeds = {"x": feeds["x"]}
    med = {k: [] for k in sessions}
    call = []
    for _ in range(3):  # interleaved rounds
        for k, sess in sessions.items():
            med[k].append(median_us(lambda s=sess: s.run(None, feeds), runs, warmup=20))
        call.append(median_us(lambda: one.run(one_feeds), runs, warmup=20))
    for sess in sessions.values():
        sess.close()
    one.close()
    m = {k: statistics.median(v) for k, v in med.items()}
    per_part = (m["same_unit"] - m["whole"]) / (n - 1)
    return {
        "chain_ops": n,
        "whole_us": m["whole"],
        "same_unit_us": m["same_unit"],
        "alternating_us": m["alternating"],
        "per_partition_us": per_part,
        "per_handoff_us": (m["alternating"] - m["same_unit"]) / (n - 1),
        "backend_call_us": statistics.median(call),
        "thread_wake_us": statistics.median(_wake_us() for _ in range(3)),
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
    pair_units = UnitSet(
        [u for u in ort_only if u.name in ("cpu0", "cpu1")], {}, default_link=full.default_link
    )
    if len(ort_only) < len(full):
        unit_sets["default"] = full
    opts = (
        dict(rounds=3, per_round=5, k=16, budget_s=0.05, time_limit=2.0)
        if args.quick
        else dict(rounds=5, per_round=20, k=60, budget_s=0.25, time_limit=20.0)
    )
    overhead = runtime_overhead(ort_only, work, 200 if args.quick else 1000)
    print("done runtime overhead", file=sys.stderr)
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
            pair = pair_units if set_name == "onnxruntime" else None
            row = bench_model(label, source, units, work, pair=pair, **opts)
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
            "runtime_overhead": overhead,
            "rows": rows,
        },
    )
    o = overhead
    print(
        "Runtime overhead, apart from any model (a chain of 64 Relu on 16 floats): "
        f"{o['per_partition_us']:.1f} µs per partition on one unit (one backend call of a 1-op "
        f"model: {o['backend_call_us']:.1f} µs), {o['per_handoff_us']:.1f} µs more per hand-off "
        f"between units on two cores (a bare wake-up between two Python threads on two cores: "
        f"{o['thread_wake_us']:.1f} µs).\n"
    )
    print(
        "| units | model | nodes | plan | units used | parts | predicted ms | measured ms | "
        "error | part. err | 1-thread ms | ort 2-thr ms | vs 1-thr | vs ort2 | "
        "overhead µs/part | check | 2x1-thread plan ms (parts) | its bound ms (predicted) | "
        "vs ort2 |"
    )
    print("|" + "---|" * 19)
    for r in rows:
        print(
            f"| {r['units']} | {r['model']} | {r['nodes']} | {r['scheduler']} | "
            f"{', '.join(r['units_used'])} | {r['partitions']} | "
            f"{_fmt(r['predicted_ms'])} | {_fmt(r['measured_ms'])} | "
            f"{_fmt(r['plan_error'], '+.1%')} | {_fmt(r['partition_median_abs_error'], '.1%')} | "
            f"{_fmt(r['single_thread_ms'])} | {_fmt(r['ort_2_threads_ms'])} | "
            f"{r['speedup_vs_single_thread']:.2f}x | {r['speedup_vs_ort_2_threads']:.2f}x | "
            f"{r['overhead_us_per_partition']:.1f} ({r['chain_partitions']}) | "
            f"{'pass' if r['check_passed'] else 'FAIL'} | "
            + (
                f"{_fmt(r['pair_measured_ms'])} ({r['pair_partitions']}) | "
                f"{_fmt(r['pair_lower_bound_ms'])} | {r['pair_vs_ort_2_threads']:.2f}x |"
                if r.get("pair_measured_ms") is not None
                else "- | - | - |"
            )
        )
    print(
        f"\nmedian |plan error| {_fmt(summary['median_abs_plan_error'], '.1%')}, median "
        f"overhead {_fmt(summary['median_overhead_us_per_partition'], '.1f')} µs per partition; "
        f"wrote {path}"
    )


if __name__ == "__main__":
    main()
