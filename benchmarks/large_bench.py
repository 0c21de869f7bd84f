"""Planning very large problems: how long `partuner plan --load-problem P --time-limit T` takes.

`--time-limit` bounds the planner's search (counted in work: docs/algorithms.md, "Time budgets");
reading, checking and writing a problem, and the baselines' plans, grow with its nodes. This
benchmark generates seeded problems of 1,000 to 20,000 nodes on a CPU and one modeled NPU (node
costs 20-60 us on the cpu, 3-20 us on the npu, one node in seven the npu cannot run; 5 and 20 us
per call; links 20 us + 2 GB/s): a chain (one topological order: the segment programme's case)
and a ladder of diamonds (a node feeding two that feed a third: branches), and times the whole
command in a fresh process at budgets of 2 and 10 s, with the plan it returns. Planning only.

    python benchmarks/large_bench.py [--sizes 1000,3000] [--budgets 2,10] [--quick]

Writes benchmarks/results/large.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402

SIZES = (1000, 3000, 10000, 20000)
BUDGETS = (2.0, 10.0)


def problem(n: int, shape: str, seed: int) -> dict[str, Any]:
    """A problem file (``plan --dump-problem``'s format) of about ``n`` nodes."""
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(n)]
    cost = {
        v: {"cpu": rng.uniform(20, 60), "npu": rng.uniform(3, 20) if i % 7 else "inf"}
        for i, v in enumerate(nodes)
    }
    edges = []
    for i in range(1, n):
        if shape == "chain" or i % 3 == 1:  # n0 -> n1; a diamond: n1 -> n2, n3 -> n4
            srcs = [i - 1]
        elif i % 3 == 2:
            srcs = [i - 2]
        else:
            srcs = [i - 1, i - 2]
        edges += [
            {
                "src": nodes[s],
                "dst": nodes[i],
                "nbytes": rng.choice((1024, 65536)),
                "values": [nodes[s]],
            }
            for s in srcs
        ]
    return {
        "format": "partuner.problem",
        "version": 1,
        "name": f"{shape}{n}",
        "nodes": nodes,
        "units": ["cpu", "npu"],
        "cost": cost,
        "edges": edges,
        "default_link": {"latency_us": 20.0, "gbps": 2.0},
        "call_overhead_us": {"cpu": 5.0, "npu": 20.0},
        "modeled": ["npu"],
    }


def plan(path: Path, budget: float, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "partuner", "plan", "--load-problem", str(path)]
    cmd += ["--time-limit", f"{budget:g}", "--json", "-o", str(out)]
    t0 = time.perf_counter()
    got = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    doc = json.loads(got.stdout)
    return {
        "wall_s": wall,
        "solve_s": doc["solve_s"],
        "scheduler": doc["scheduler"],
        "status": doc["status"],
        "predicted_ms": doc["predicted_ms"],
        "lower_bound_ms": doc["lower_bound_ms"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS))
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1,000 and 3,000 nodes at 2 s")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")][: 2 if args.quick else None]
    budgets = [float(x) for x in args.budgets.split(",")][: 1 if args.quick else None]
    work = temp_dir("partuner-large-bench-")
    rows = []
    t_all = time.perf_counter()
    for shape in ("chain", "diamonds"):
        for n in sizes:
            path = work / f"{shape}{n}.json"
            path.write_text(json.dumps(problem(n, shape, args.seed)))
            for budget in budgets:
                got = plan(path, budget, work / "plan.yaml")
                rows.append({"shape": shape, "nodes": n, "budget_s": budget, **got})
                print(f"done {shape} {n} at {budget:g} s: {got['wall_s']:.1f} s", file=sys.stderr)
    over = [r for r in rows if r["wall_s"] > r["budget_s"]]
    note = (
        f"The command's wall time (a fresh process: Python's start and partuner's imports, "
        f"reading the problem, planning, writing the plan) passed the budget in {len(over)} of "
        f"{len(rows)} runs; its largest ratio to the budget: "
        f"{max(r['wall_s'] / r['budget_s'] for r in rows):.1f}x."
    )
    path = write_result(
        "large",
        {"machine": machine(), "wall_s": time.perf_counter() - t_all, "rows": rows, "note": note},
    )
    print("| problem | nodes | budget s | wall s | planning s | plan by | status | ms (bound) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['nodes']} | {r['budget_s']:g} | {r['wall_s']:.1f} | "
            f"{r['solve_s']:.1f} | {r['scheduler']} | {r['status']} | "
            f"{r['predicted_ms']:.3f} ({r['lower_bound_ms']:.3f}) |"
        )
    print(f"\n{note} Results: {path.name}.")


if __name__ == "__main__":
    main()
