"""Units on a Ray cluster (issue 19): what Ray costs, fleet profiling, batches across nodes.

A real local 2-node cluster (Ray's own ``ray.cluster_utils.Cluster``: two raylets on this
machine, one CPU each, offering the custom resources ``node-a`` and ``node-b``), units ``a``
and ``b`` (onnxruntime, 1 thread) placed on them, ``cores: [0]`` and ``[1]`` (their actors run
there only), beside the same units in this process:

* **call overhead**: an empty call (the no-op model) through Ray against in this process; what
  Ray's transport adds per MB sent and got back (``partuner.profile.fleet``, as the planner
  charges it); and a chain plan of ``--parts`` partitions alternating between the two units,
  on the Ray units and on two local units, ``partuner.runtime.Session``, median of runs: the
  difference per partition is what a partition pays for running through Ray;
* **profiling** ``MODEL`` on two units at once, each on its own node (``profile_model``, a
  fresh store each time, then profiled again from it: the rows timed while the other node
  worked are timed again, nodes one at a time; ``b`` with onnxruntime's ``optimization:
  extended``, another fingerprint for the same work, as identical units would be profiled
  only once), against one unit and then the other (each alone, fresh stores), and against
  the slower of the two alone; ``--rounds`` rounds alternating which goes first; goal:
  parallel <= 0.6x sequential;
* **batch**: ``evaluate_batch`` at ``--batch`` (64) across the two Ray units (the exact split,
  measured, outputs checked against the whole batch) against the sum of each node's own
  throughput alone on the batch (the physical limit), for each of ``--batch-models`` (a light
  model, where moving the inputs weighs most, a heavier one, and a real exported one from
  ../shared when it is there); goal: >= 90 %. Beside it, the same job on two units in this
  process declaring cores 0 and 1 (no Ray, not pinned): what this machine loses when both
  cores work.

    python benchmarks/ray_bench.py [--model squeezenet] [--batch 64] [--rounds 3] [--quick]
        [--batch-models squeezenet,resnet18,shared:resnet18]

Writes benchmarks/results/ray.json and prints a markdown table with the goal lines.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
from common import machine, median_us, shared_model, temp_dir, write_result  # noqa: E402

from partuner.batch import BatchModel, evaluate_batch  # noqa: E402
from partuner.export import PartitionSpec, cut  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import reference_outputs  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.profile.fleet import FLEET_SIG, transport_costs  # noqa: E402
from partuner.profile.load import is_busy  # noqa: E402
from partuner.profile.measure import overhead_model, random_feeds  # noqa: E402
from partuner.runtime import Session, check_outputs  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

GOAL_PROFILE, GOAL_BATCH = 0.6, 0.9
ORT = {"backend": "onnxruntime", "threads": 1}


#: b's kind when profiling: another fingerprint, the same work (onnxruntime's own fusions only)
OTHER = {**ORT, "optimization": "extended"}
#: one core each: a Ray unit's actor runs on its declared cores of its node only
CORE = {"a": 0, "b": 1}


def ray_units(address: str, names=("a", "b"), kinds: dict | None = None) -> Any:
    """Units ``a`` on node-a and ``b`` on node-b (onnxruntime, 1 thread, unless ``kinds``)."""
    res = {"a": "node-a", "b": "node-b"}
    kinds = kinds or {}
    units = {
        n: {**kinds.get(n, ORT), "cores": [CORE[n]], "ray": {"resources": {res[n]: 1}}}
        for n in names
    }
    return units_from_mapping({"ray": {"address": address}, "units": units}, "ray bench")


@contextlib.contextmanager
def two_node_cluster() -> Iterator[str]:
    """A local Ray cluster of two raylets, one CPU each (resources ``node-a``, ``node-b``; the
    driver on ``node-a``'s): yields its address, shut down after."""
    import ray
    from ray.cluster_utils import Cluster

    logging.getLogger("ray").setLevel(logging.ERROR)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node-a": 1}})
    c.add_node(num_cpus=1, resources={"node-b": 1})
    c.wait_for_nodes()
    try:
        yield c.address
    finally:
        ray.shutdown()
        c.shutdown()


def release(us: Any) -> None:
    for u in us:
        u.release()


def chain_specs(graph, parts: int, units: tuple[str, str]) -> list[PartitionSpec]:
    nodes = [n.name for n in graph.compute_nodes]
    size = -(-len(nodes) // parts)
    return [
        PartitionSpec(f"p{i}", units[i % 2], tuple(nodes[i * size : (i + 1) * size]))
        for i in range(parts)
        if nodes[i * size : (i + 1) * size]
    ]


def deferred_ab(s: Session, feeds, runs: int, rounds: int = 6) -> dict[str, list[float]]:
    """The Ray chain with values between the two nodes left on the nodes (the runtime's way)
    and with every value fetched here and sent again, rounds alternating: median ms per round."""
    own = list(s._defer)
    got: dict[str, list[float]] = {"on the nodes": [], "through here": []}
    for _ in range(rounds):
        for mode in got:
            s._defer = own if mode == "on the nodes" else [False] * len(own)
            got[mode].append(median_us(lambda: s.run(None, feeds), runs) / 1e3)
    s._defer = own
    return got


def call_overhead(address: str, graph, parts: int, runs: int) -> dict[str, Any]:
    local = units_from_mapping({"units": {"a": ORT, "b": ORT}}, "local")
    remote = ray_units(address)
    noop = overhead_model()
    x = {"x": np.zeros(1, np.float32)}
    out: dict[str, Any] = {}
    for label, us in (("local", local), ("ray", remote)):
        with us["a"].prepare(noop) as r:
            out[f"noop_{label}_us"] = median_us(lambda r=r: r.run(x), 200)
    call, rate_in, rate_out = transport_costs(remote["a"], None)
    out.update(ray_call_us=call, ray_in_us_per_mb=rate_in * 1e6, ray_out_us_per_mb=rate_out * 1e6)
    feeds = random_feeds(graph, list(graph.inputs))
    ref = reference_outputs(graph, feeds)
    for label, us in (("local", local), ("ray", remote)):
        specs = chain_specs(graph, parts, ("a", "b"))
        with Session(graph, cut(graph, specs), us) as s:
            outs = s.run(None, feeds)
            out[f"chain_{label}_ms"] = median_us(lambda s=s: s.run(None, feeds), runs) / 1e3
            if label == "ray":  # values left on the nodes (as run) vs fetched here and sent
                out["chain_ray_rounds"] = deferred_ab(s, feeds, runs)
        got = dict(zip(graph.outputs, outs, strict=True))
        out[f"chain_{label}_check"] = check_outputs(ref, got, ["f32"]).passed
    out["chain_parts"] = len(chain_specs(graph, parts, ("a", "b")))
    out["ray_per_partition_us"] = (
        (out["chain_ray_ms"] - out["chain_local_ms"]) * 1e3 / out["chain_parts"]
    )
    release(remote)
    return out


def profiling(address: str, graph, rounds: int) -> dict[str, Any]:
    par: list[float] = []
    seq: list[float] = []
    slowest: list[float] = []

    repairs: list[dict[str, Any]] = []
    nodes: dict[str, list[dict[str, float]]] = {"at_once": [], "alone": []}

    def timed(names) -> float:
        # two kinds of unit of like cost (identical units would be profiled once, on one node)
        us = ray_units(address, names, {"b": OTHER})
        db = temp_dir("partuner-raybench-") / "p.db"
        t0 = time.perf_counter()
        with ProfileStore(db) as store:
            profile_model(graph, us, store=store)
            wall = time.perf_counter() - t0
            # each node's own profiling time (its fleet mark row), apart from this process's
            walls = {n: node_wall(store, us[n].fingerprint()) for n in names}
            nodes["at_once" if len(names) > 1 else "alone"].append(walls)
            if len(names) > 1:  # raylets of one machine make each other busy: the next run
                fps = [us[n].fingerprint() for n in names]  # times those rows again
                busy, top = busy_rows(store, fps)
                t1 = time.perf_counter()
                again = profile_model(graph, us, store=store).measured
                repairs.append(
                    {
                        "busy_rows": busy,
                        "max_load": top,
                        "repair_s": time.perf_counter() - t1,
                        "timed_again": again,
                        "busy_after": busy_rows(store, fps)[0],
                    }
                )
        release(us)
        return wall

    for r in range(rounds):
        order = ("par", "seq") if r % 2 == 0 else ("seq", "par")
        for what in order:
            if what == "par":
                par.append(timed(("a", "b")))
            else:
                alone = (timed(("a",)), timed(("b",)))
                slowest.append(max(alone))
                seq.append(sum(alone))
        print(
            f"  profiling round {r + 1}: parallel {par[-1]:.1f} s, sequential {seq[-1]:.1f} s",
            file=sys.stderr,
        )
    p, s = statistics.median(par), statistics.median(seq)
    return {
        "repairs": repairs,
        "parallel_s": par,
        "sequential_s": seq,
        "slowest_alone_s": slowest,
        "ratio": p / s,
        "over_slowest": p / statistics.median(slowest),
        "node_s": nodes,
    }


def node_wall(store: ProfileStore, fp: str) -> float:
    """Seconds the node took to profile the model, from its fleet mark row (0 if none)."""
    marks = [m for sig, m in store.rows(fp) if sig.startswith(FLEET_SIG.split("#")[0])]
    return marks[0].median_us / 1e6 if marks else 0.0


def busy_rows(store: ProfileStore, fps: list[str]) -> tuple[int, float]:
    """How many ok rows of ``fps`` were timed busy, and the highest load noted."""
    rows = [m for fp in fps for _, m in store.rows(fp) if m.status == "ok"]
    loads = [m.load for m in rows if m.load is not None]
    return sum(is_busy(x) for x in loads), max(loads, default=0.0)


def batch(address: str, model: str, size: int, b: int, repeat: int) -> dict[str, Any]:
    if model.startswith("shared:"):  # a real exported model (../shared), weights grown back
        path = shared_model(model.split(":", 1)[1], temp_dir("partuner-raybench-"))
        if path is None:
            return {"model": model, "skipped": "../shared/models absent"}
        bm = BatchModel(onnx.load(path), model)
    else:
        bm = BatchModel(zoo.build(model, image_size=size), f"zoo:{model}@{size}")
    us = ray_units(address)
    db = temp_dir("partuner-raybench-") / "b.db"
    with ProfileStore(db) as store:
        r = evaluate_batch(bm, us, b, store=store, repeat=repeat)
    release(us)
    # the same job on two units in this process, one core each: what the machine itself loses
    # when both cores work at once (memory, caches), Ray or not
    local = units_from_mapping(
        {"units": {"a": {**ORT, "cores": [0]}, "b": {**ORT, "cores": [1]}}}, "local"
    )
    with ProfileStore(temp_dir("partuner-raybench-") / "l.db") as store:
        here = evaluate_batch(bm, local, b, store=store, repeat=repeat).to_dict()
    d = r.to_dict()
    return {
        "local": {
            k: here[k] for k in ("split", "throughput", "physical_limit", "efficiency", "check")
        },
        "model": bm.name,
        "batch": b,
        "split": d["split"],
        "measured_ms": d["measured_ms"],
        "throughput": d["throughput"],
        "unit_throughput": d["unit_throughput"],
        "physical_limit": d["physical_limit"],
        "efficiency": d["efficiency"],
        "check": d["check"]["passed"],
        "notes": d["notes"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="squeezenet")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batch-image", type=int, default=224, help="image size of the batch models")
    ap.add_argument("--batch-models", default="squeezenet,resnet18,shared:resnet18")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="1 round, batch 16, 20 runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.batch, args.runs, args.batch_models = 1, 16, 20, "squeezenet"
    t_start = time.perf_counter()
    with two_node_cluster() as address:
        graph = load_model(zoo.build(args.model, image_size=args.size))
        over = call_overhead(address, graph, args.parts, args.runs)
        prof = profiling(address, graph, args.rounds)
        bat = [
            batch(address, m, args.batch_image, args.batch, 10)
            for m in args.batch_models.split(",")
        ]
    res = {
        "machine": machine(),
        "command": "python benchmarks/ray_bench.py " + " ".join(sys.argv[1:]),
        "model": f"zoo:{args.model}@{args.size}",
        "nodes": 2,
        "call": over,
        "profiling": prof,
        "batch": bat,
        "wall_s": time.perf_counter() - t_start,
    }
    write_result("ray", res)
    report(res)


def report(res: dict[str, Any]) -> None:
    o, p = res["call"], res["profiling"]
    print("| what | in this process | through Ray (2 local nodes) |")
    print("|---|---|---|")
    print(
        f"| empty call (no-op model), median | {o['noop_local_us']:.0f} us | "
        f"{o['noop_ray_us']:.0f} us |"
    )
    print(
        f"| per MB sent to / got back from a node | - | {o['ray_in_us_per_mb']:.0f} / "
        f"{o['ray_out_us_per_mb']:.0f} us |"
    )
    print(
        f"| {res['model']}, chain of {o['chain_parts']} partitions alternating two units, "
        f"median | {o['chain_local_ms']:.2f} ms | {o['chain_ray_ms']:.2f} ms "
        f"({o['ray_per_partition_us']:.0f} us more per partition) |"
    )
    ab = o["chain_ray_rounds"]
    here, nodes = (statistics.median(ab[k]) for k in ("through here", "on the nodes"))
    wins = sum(a < b for a, b in zip(ab["on the nodes"], ab["through here"], strict=True))
    print(
        f"| the same chain through Ray, values between the nodes fetched here and sent again vs "
        f"left on the nodes (median of {len(ab['through here'])} alternating rounds) | - | "
        f"{here:.2f} ms vs {nodes:.2f} ms (faster in {wins} of {len(ab['through here'])} rounds) |"
    )
    print(
        f"| profiling {res['model']} on 2 units (onnxruntime, optimization all / extended) | "
        f"one after the other: {statistics.median(p['sequential_s']):.1f} s (the slower alone: "
        f"{statistics.median(p['slowest_alone_s']):.1f} s) | each on its node at once: "
        f"{statistics.median(p['parallel_s']):.1f} s ({p['ratio']:.2f}x; "
        f"{p['over_slowest']:.2f}x the slower alone) |"
    )
    rounds = ", ".join(
        f"{a / b:.2f}" for a, b in zip(p["parallel_s"], p["sequential_s"], strict=True)
    )
    print(f"| the same, each round's ratio (at once / one after the other) | - | {rounds} |")
    ns = p.get("node_s")
    if ns and ns["alone"] and ns["at_once"]:  # the nodes' own work, apart from this process's

        def per(rows: list[dict[str, float]], n: str) -> str:
            return "/".join(f"{r[n]:.1f}" for r in rows if n in r)

        slow = [max(r.values()) for r in ns["at_once"]]
        print(
            "| the same, each node's own profiling per round (s; the rest of the wall is this "
            f"process's: connecting, Ray's transport measured per node) | alone: a "
            f"{per(ns['alone'], 'a')}, b {per(ns['alone'], 'b')} | at once: a "
            f"{per(ns['at_once'], 'a')}, b {per(ns['at_once'], 'b')}; the rest "
            + "/".join(f"{w - x:.1f}" for w, x in zip(p["parallel_s"], slow, strict=True))
            + " |"
        )
    reps = p.get("repairs", [])
    if reps:  # one row for the rounds at once: per round, comma-separated

        def each(key: str, fmt: str = "{}") -> str:
            return ", ".join(fmt.format(r[key]) for r in reps)

        print(
            f"| the same, per round at once: rows timed while other work took the unit's core "
            f"(> 25 %) | - | {each('busy_rows')} (loads up to {each('max_load', '{:.0%}')}); "
            f"timed again by the next profile, one node at a time: {each('timed_again')} rows "
            f"in {each('repair_s', '{:.1f}')} s ({each('busy_after')} busy after) |"
        )
    res = {**res, "batch": [b for b in res["batch"] if "skipped" not in b]}
    for b in res["batch"]:
        h = b.get("local")
        here = (
            f"units declaring cores 0 and 1, split {h['split']}: {h['throughput']:.1f} items/s, "
            f"{h['efficiency']:.0%} of the sum of each alone ({h['physical_limit']:.1f})"
            if h
            else "-"
        )
        print(
            f"| {b['model']}: batch of {b['batch']} split across two units | {here} | split "
            f"{b['split']}: {b['throughput']:.1f} items/s, {b['efficiency']:.0%} of the sum of "
            f"each node alone ({b['physical_limit']:.1f}) |"
        )
    print()
    ok = "met" if p["ratio"] <= GOAL_PROFILE else "NOT met"
    print(
        f"- profiling 2 units on 2 nodes <= {GOAL_PROFILE}x the sequential wall time: {ok} "
        f"({p['ratio']:.2f}x)"
    )
    met = [b for b in res["batch"] if b["efficiency"] >= GOAL_BATCH]
    got = ", ".join(f"{b['model']} {b['efficiency']:.0%}" for b in res["batch"])
    ok = "met" if len(met) == len(res["batch"]) else "NOT met"
    print(
        f"- batch across the 2 nodes >= {GOAL_BATCH:.0%} of the sum of their own throughputs "
        f"at B={res['batch'][0]['batch']}: {ok}, {len(met)} of {len(res['batch'])} models "
        f"({got})"
    )
    here = [b for b in res["batch"] if b.get("local")]
    if here:
        got = ", ".join(f"{b['model']} {b['local']['efficiency']:.0%}" for b in here)
        print(
            "- the same batch split across two units in this process (one core each, no Ray): "
            f"{got} of the sum of each alone: what this machine loses when both cores work"
        )
    checks = [o["chain_local_check"], o["chain_ray_check"], *(b["check"] for b in res["batch"])]
    checks += [b["local"]["check"]["passed"] for b in here]
    print(f"- outputs checked against the whole model: {'all passed' if all(checks) else 'FAILED'}")
    for b in res["batch"]:
        for n in b["notes"]:
            print(f"- note ({b['model']}): {n}")


if __name__ == "__main__":
    main()
