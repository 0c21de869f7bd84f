"""Where a batch split across two Ray nodes loses (issue 19): moving the inputs, or the split.

The cluster of ``ray_bench.py`` (two raylets on this machine, one CPU each; units ``a`` and
``b``, onnxruntime 1 thread, pinned to cores 0 and 1; the driver is on ``a``'s node). For each
model, the batch of ``--batch`` items split evenly across the two units, and each unit alone
on the whole batch, timed two ways, rounds alternating which goes first:

* **sent**: the inputs handed over as arrays, as ``partuner batch`` does: every run, Ray copies
  them into this node's object store, and ``b``'s node pulls its share from there;
* **placed**: the same arrays put in the object store once; ``b``'s node pulls its share on the
  warm-up run and keeps it, so the timed runs move no inputs.

Per mode: the split's throughput over the sum of each unit's alone (what ``ray_bench.py``'s goal
line compares), and the CPU time the whole machine spent per split run (from /proc/stat: the
two units, the driver, and Ray's own processes moving the objects). The split's outputs are
checked against the whole model. Figures are medians over ``--rounds`` rounds.

    python benchmarks/ray_inputs_bench.py [--models squeezenet,resnet18] [--batch 64]
        [--rounds 5] [--runs 8]

Writes benchmarks/results/ray_inputs.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, write_result  # noqa: E402
from ray_bench import ray_units, release, two_node_cluster  # noqa: E402

from partuner.batch import BatchModel  # noqa: E402
from partuner.graph import zoo  # noqa: E402
from partuner.pipeline import reference_outputs  # noqa: E402
from partuner.runtime import check_outputs  # noqa: E402


def _timed(fn, runs: int) -> tuple[float, float]:
    """Median wall seconds of ``runs`` calls after one warm-up, and the machine's CPU seconds
    per call meanwhile."""
    fn()
    samples = []
    c0 = cpu_seconds()[0]
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), (cpu_seconds()[0] - c0) / runs


def measure(address: str, name: str, batch: int, rounds: int, runs: int) -> dict[str, Any]:
    import ray

    from partuner.units.ray_unit import RayValue

    bm = BatchModel(zoo.build(name, image_size=224), f"zoo:{name}@224")
    half = batch // 2
    us = ray_units(address)
    runners = {(u, n): us[u].prepare(bm.at(n).model) for u in "ab" for n in (half, batch)}
    graph = bm.at(batch)
    inp = graph.model.graph.input[0].name
    x = np.random.default_rng(0).standard_normal(graph.values[inp].shape).astype(np.float32)
    parts = {"a": x[:half], "b": x[half:]}
    pool = ThreadPoolExecutor(1)
    got: dict[str, dict[str, list[float]]] = {
        m: {"efficiency": [], "cpu_s": [], "split_s": [], "a_s": [], "b_s": []}
        for m in ("sent", "placed")
    }
    outs: dict[str, Any] = {}
    try:
        for r in range(rounds):
            for mode in ("sent", "placed") if r % 2 == 0 else ("placed", "sent"):
                if mode == "sent":
                    whole = {u: {inp: x} for u in "ab"}
                    share = {u: {inp: parts[u]} for u in "ab"}
                else:  # put once; b's node keeps the copy it pulls on the warm-up run
                    ref = ray.put(x)
                    whole = {u: {inp: RayValue(us[u], ref, x.nbytes)} for u in "ab"}
                    share = {
                        u: {inp: RayValue(us[u], ray.put(parts[u]), parts[u].nbytes)} for u in "ab"
                    }

                def split(share=share) -> None:
                    f = pool.submit(runners["b", half].run, share["b"])
                    outs["a"] = runners["a", half].run(share["a"])
                    outs["b"] = f.result()

                ta = _timed(lambda w=whole: runners["a", batch].run(w["a"]), runs)[0]
                tb = _timed(lambda w=whole: runners["b", batch].run(w["b"]), runs)[0]
                ts, cpu = _timed(split, runs)
                g = got[mode]
                g["efficiency"].append((batch / ts) / (batch / ta + batch / tb))
                g["cpu_s"].append(cpu)
                g["split_s"].append(ts)
                g["a_s"].append(ta)
                g["b_s"].append(tb)
            last = ", ".join(f"{m} {v['efficiency'][-1]:.1%}" for m, v in got.items())
            print(f"  {name} round {r + 1}: {last}", file=sys.stderr)
    finally:
        pool.shutdown()
        for rn in runners.values():
            rn.close()
        release(us)
    ref = reference_outputs(graph, {inp: x})
    merged = {o: np.concatenate([outs["a"][o], outs["b"][o]]) for o in graph.outputs}
    return {
        "model": bm.name,
        "batch": batch,
        "split": {"a": half, "b": batch - half},
        "moved_mb": parts["b"].nbytes / 1e6,
        "modes": {
            m: {k: statistics.median(v) for k, v in g.items()} | {"rounds": g["efficiency"]}
            for m, g in got.items()
        },
        "check": check_outputs(ref, merged, ["f32"]).passed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="squeezenet,resnet18")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    t_start = time.perf_counter()
    with two_node_cluster() as address:
        rows = [
            measure(address, m, args.batch, args.rounds, args.runs) for m in args.models.split(",")
        ]
    res = {
        "machine": machine(),
        "command": "python benchmarks/ray_inputs_bench.py " + " ".join(sys.argv[1:]),
        "rounds": args.rounds,
        "runs": args.runs,
        "rows": rows,
        "wall_s": time.perf_counter() - t_start,
    }
    write_result("ray_inputs", res)
    report(res)


def report(res: dict[str, Any]) -> None:
    print(
        "| model | batch (split) | inputs | split / sum of each alone | each alone (ms) | split "
        "(ms) | machine CPU per split run (ms) | rounds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        for mode, what in (
            ("sent", "sent each run (as `partuner batch`)"),
            ("placed", "already on the nodes"),
        ):
            m = r["modes"][mode]
            print(
                f"| {r['model']} | {r['batch']} ({r['split']['a']} + {r['split']['b']}) | {what}"
                f" | {m['efficiency']:.1%} | a {m['a_s'] * 1e3:.0f}, b {m['b_s'] * 1e3:.0f} | "
                f"{m['split_s'] * 1e3:.0f} | {m['cpu_s'] * 1e3:.0f} | "
                f"{', '.join(f'{e:.1%}' for e in m['rounds'])} |"
            )
    print()
    for r in res["rows"]:
        s, p = r["modes"]["sent"], r["modes"]["placed"]
        print(
            f"- {r['model']}: moving b's share ({r['moved_mb']:.1f} MB) each run costs the "
            f"machine {(s['cpu_s'] - p['cpu_s']) * 1e3:.0f} ms of CPU per split run; the split "
            f"reaches {s['efficiency']:.1%} of the sum with inputs sent, {p['efficiency']:.1%} "
            f"with them already on the nodes; outputs checked: "
            f"{'passed' if r['check'] else 'FAILED'}"
        )


if __name__ == "__main__":
    main()
