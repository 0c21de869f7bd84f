"""How much the same call's time moves on this machine from one moment to the next.

Every prediction partuner makes is checked against a measurement, and every cost it plans with
is a measurement too: neither can be trusted beyond what the machine itself repeats. This
benchmark prepares each unit of the stand-in units file (examples/units/cpu-npu-standin.yaml)
once on one model (the npu: the largest region it can run), then times it in ``--windows``
short windows timed as the profiler times one sub-model (``time_call``: at least 5 runs, up to
``--window-s`` until the median is known to 3 %), spread over the run,
the units taking turns, in this one process, nothing else running. Per unit: the window
medians' fastest, median and slowest, slowest / fastest, and the share of windows more than
10 % above the fastest. A profile takes its costs from one to three such windows; a plan's
measured latency in standin_bench.py is the median of 5 fresh processes' medians.

    python benchmarks/noise_bench.py [--model mobilenet_v2] [--windows 200] [--window-s 0.25]

Writes benchmarks/results/noise.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, cpu_seconds, machine, write_result  # noqa: E402

from partuner.export.cut import cut_nodes  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.profile.measure import random_feeds, time_call  # noqa: E402
from partuner.profile.regions import supported_regions  # noqa: E402
from partuner.units import load_units  # noqa: E402

STANDIN = ROOT / "examples" / "units" / "cpu-npu-standin.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="mobilenet_v2", help=f"one of {', '.join(zoo.NAMES)}")
    ap.add_argument("--units", type=Path, default=STANDIN)
    ap.add_argument("--windows", type=int, default=200)
    ap.add_argument("--window-s", type=float, default=0.25)
    args = ap.parse_args()
    if args.model not in zoo.NAMES:
        ap.error(f"unknown model {args.model!r}; known: {', '.join(zoo.NAMES)}")
    graph = load_model(zoo.build(args.model))
    units = load_units(args.units)
    runners = {}
    for name, unit in units.units.items():
        nodes = {n.name for n in graph.compute_nodes if unit.supports(n, graph)}
        region = max(supported_regions(graph, nodes), key=len, default=())
        if not region:
            continue
        model, ins, _ = cut_nodes(graph, "region", region, check=False)
        runner = unit.prepare(model)
        feeds = random_feeds(graph, ins)
        runners[name] = (runner, feeds, len(region))
    windows: dict[str, list[float]] = {name: [] for name in runners}
    busy0, ours0 = cpu_seconds()
    t0 = time.perf_counter()
    for _ in range(args.windows):
        for name, (runner, feeds, _) in runners.items():
            m = time_call(lambda r=runner, f=feeds: r.run(f), budget_s=args.window_s)
            windows[name].append(m.median_us / 1e3)
    wall = time.perf_counter() - t0
    busy1, ours1 = cpu_seconds()
    other = max((busy1 - busy0) - (ours1 - ours0), 0.0) / (wall * (os.cpu_count() or 1))
    rows = []
    for name, ms in windows.items():
        fast = min(ms)
        rows.append(
            {
                "unit": name,
                "nodes": runners[name][2],
                "windows_ms": ms,
                "fastest_ms": fast,
                "median_ms": statistics.median(ms),
                "slowest_ms": max(ms),
                "slowest_over_fastest": max(ms) / fast,
                "share_10pct_above_fastest": sum(m > 1.1 * fast for m in ms) / len(ms),
            }
        )
    for runner, _, _ in runners.values():
        runner.close()
    write_result(
        "noise",
        {
            "machine": machine(),
            "model": args.model,
            "window_s": args.window_s,
            "rows": rows,
            "wall_s": wall,
            "other_cpu_share": other,
        },
    )
    print(
        f"{args.model}, {args.windows} windows per unit (at most {args.window_s:g} s each) over "
        f"{wall:.1f} s "
        f"(other work on the machine meanwhile: {other:.1%} of its cores' time)\n"
    )
    print(
        "| unit | nodes | fastest window (ms) | median | slowest | slowest / fastest | "
        "windows > 10 % above the fastest |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['unit']} | {r['nodes']} | {r['fastest_ms']:.2f} | {r['median_ms']:.2f} | "
            f"{r['slowest_ms']:.2f} | {r['slowest_over_fastest']:.2f} | "
            f"{r['share_10pct_above_fastest']:.0%} |"
        )


if __name__ == "__main__":
    main()
