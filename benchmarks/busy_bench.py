"""Profiling on a busy machine: what the store would keep, and what the next quiet run repairs.

Four profiles of one zoo model on the local default units (``partuner units``), each in this
process with ``profile_model`` (as ``partuner profile`` does), one after another:

1. **quiet**: a fresh store, nothing else running: the reference;
2. **busy**: a fresh store while ``--spinners`` other processes (default: one per core) spin;
3. **again**: a copy of the busy store, the spinners stopped: the rows timed on the busy
   machine are timed again (the profiler's rule), the rest reused;
4. **quiet, fresh again**: a fresh store on the quiet machine: how far two quiet profiles
   differ on their own (the yardstick for "again").

Per profile: rows timed, rows reused, rows in use marked busy (and the largest share of the
machine's cores other work took while one was timed), wall time; per unit, the whole-model time
and the largest link latency to the other units, each over the quiet profile's. Before rows
noted the machine's load, the busy store's costs were what every later run reused.

    python benchmarks/busy_bench.py [--model squeezenet] [--spinners N] [--budget 0.25] [--quick]

Writes benchmarks/results/busy.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, temp_dir, write_result  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import default_units  # noqa: E402


def _profile(graph, units, db: Path, budget: float) -> dict:
    busy0, ours0 = cpu_seconds()
    t0 = time.perf_counter()
    with ProfileStore(db) as store:
        prof = profile_model(graph, units, store=store, budget_s=budget, corun=True)
    wall = time.perf_counter() - t0
    busy1, ours1 = cpu_seconds()
    other = max((busy1 - busy0) - (ours1 - ours0), 0.0) / (wall * (os.cpu_count() or 1))
    names = list(prof.units)
    return {
        "timed": prof.measured,
        "reused": prof.reused,
        "busy_rows": len(prof.busy),
        "busy_max_share": max((s for _, _, s in prof.busy), default=None),
        "wall_s": wall,
        "other_cpu_share": other,
        "whole_ms": {n: (prof.units[n].whole_us or 0.0) / 1e3 for n in names},
        "link_us": {n: max(prof.link(n, m).latency_us for m in names if m != n) for n in names},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="squeezenet", help=f"one of {', '.join(zoo.NAMES)}")
    ap.add_argument("--spinners", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget", type=float, default=0.25)
    ap.add_argument("--quick", action="store_true", help="a 0.05 s budget per item")
    args = ap.parse_args()
    if args.quick:
        args.budget = 0.05
    if args.model not in zoo.NAMES:
        ap.error(f"unknown model {args.model!r}; known: {', '.join(zoo.NAMES)}")
    logging.basicConfig(level=logging.ERROR)
    graph = load_model(zoo.build(args.model))
    units = default_units()
    work = temp_dir("partuner-busy-")
    try:
        runs = {"quiet": _profile(graph, units, work / "quiet.db", args.budget)}
        spin = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.spinners)
        ]
        try:
            time.sleep(0.5)
            runs["busy"] = _profile(graph, units, work / "busy.db", args.budget)
        finally:
            for p in spin:
                p.kill()
                p.wait()
        time.sleep(2.0)
        shutil.copy(work / "busy.db", work / "again.db")
        runs["again"] = _profile(graph, units, work / "again.db", args.budget)
        runs["quiet, fresh again"] = _profile(graph, units, work / "quiet2.db", args.budget)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    quiet = runs["quiet"]
    for r in runs.values():
        r["whole_over_quiet"] = {
            n: t / quiet["whole_ms"][n] if quiet["whole_ms"][n] else None
            for n, t in r["whole_ms"].items()
        }
        r["link_over_quiet"] = {
            n: t / quiet["link_us"][n] if quiet["link_us"][n] else None
            for n, t in r["link_us"].items()
        }
    write_result(
        "busy",
        {"machine": machine(), "model": args.model, "spinners": args.spinners, "runs": runs},
    )
    names = list(quiet["whole_ms"])
    print(
        f"{args.model}, local default units ({', '.join(names)}); busy: {args.spinners} other "
        f"process(es) spinning\n"
    )
    cols = " | ".join(f"{n}: whole / link vs quiet" for n in names)
    print(
        f"| profile | rows timed | reused | marked busy (max share) | other work | wall | {cols} |"
    )
    print("|---|---|---|---|---|---|" + "---|" * len(names))
    for key, r in runs.items():
        share = r["busy_max_share"]
        marked = f"{r['busy_rows']}" + (f" ({share:.0%})" if share is not None else "")
        ratios = " | ".join(
            f"{r['whole_over_quiet'][n]:.2f}x / {r['link_over_quiet'][n]:.2f}x" for n in names
        )
        print(
            f"| {key} | {r['timed']} | {r['reused']} | {marked} | {r['other_cpu_share']:.0%} | "
            f"{r['wall_s']:.0f} s | {ratios} |"
        )


if __name__ == "__main__":
    main()
