"""Batch partitioning (`partuner batch`): one batch split across units, measured end to end.

Unit sets: two 1-thread onnxruntime units (f32), and a 1-thread onnxruntime f32 unit beside a
1-thread OpenVINO bf16 unit (skipped when openvino is missing). Models: resnet18 (zoo) and a
MobileNetV2-shaped model (benchmarks/models.py), at a reduced image size to keep the run short.
For each batch size: the exact split's measured throughput against the physical limit (the sum
of the units' throughputs, each measured alone on the whole batch in the same run; goal >= 95%)
and against the seed's greedy split and an even split, plus the check of the merged outputs.
"ceiling %": the exact split's predicted throughput (each unit at its own speed alone on the
share it gets, timed at those sizes) as a share of the limit. A unit is often slower per item on
part of a batch than on all of it, so the best split on the timed curves can fall short of the
limit before the units run together.

    python benchmarks/batch_bench.py [--quick] [--db PATH]

Writes benchmarks/results/batch.json and prints a markdown table. Profiles go to a fresh
temporary store unless --db is given.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402
from models import mobilenetv2  # noqa: E402

from partuner.batch import BatchModel, evaluate_batch  # noqa: E402
from partuner.graph import zoo  # noqa: E402
from partuner.profile import ProfileStore  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

UNIT_SETS = {
    "2x ort-f32": {
        "cpu0": {"backend": "onnxruntime", "threads": 1, "cores": [0]},
        "cpu1": {"backend": "onnxruntime", "threads": 1, "cores": [1]},
    },
    "ort-f32 + ov-bf16": {
        "ort": {"backend": "onnxruntime", "threads": 1, "cores": [0]},
        "ov": {"backend": "openvino", "threads": 1, "precision": "bf16", "cores": [1]},
    },
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small images, small batches, few runs")
    ap.add_argument("--db", default=None, help="profile store to use (default: a fresh one)")
    args = ap.parse_args()
    size = 56 if args.quick else 112
    batches = (8, 32) if args.quick else (32, 100)
    repeat = 2 if args.quick else 12
    budget_s, min_repeats = (0.05, 2) if args.quick else (0.3, 3)
    db = Path(args.db) if args.db else temp_dir("partuner-batch-bench-") / "profiles.db"
    models = {
        f"resnet18@{size}": BatchModel(zoo.build("resnet18", image_size=size), "resnet18"),
        f"mobilenetv2@{size}": BatchModel(mobilenetv2(size), "mobilenetv2"),
    }
    has_ov = importlib.util.find_spec("openvino") is not None
    rows, skipped = [], []
    t_start = time.perf_counter()
    for set_name, spec in UNIT_SETS.items():
        if "openvino" in str(spec) and not has_ov:
            skipped.append(f"{set_name}: openvino is not installed")
            continue
        units = units_from_mapping({"units": spec}, source=set_name)
        for model_name, bm in models.items():
            for batch in batches:
                t0 = time.perf_counter()
                with ProfileStore(db) as store:
                    r = evaluate_batch(
                        bm, units, batch, store=store, repeat=repeat, budget_s=budget_s,
                        min_repeats=min_repeats,
                    )  # fmt: skip
                rows.append(_row(set_name, model_name, r, time.perf_counter() - t0))
                print(
                    f"  {set_name} {model_name} B={batch}: {rows[-1]['wall_s']:.1f} s", flush=True
                )
    wall = time.perf_counter() - t_start
    note = f"image size {size}x{size} (reduced from 224 to keep the run short)"
    path = write_result(
        "batch",
        {
            "machine": machine(),
            "quick": args.quick,
            "note": note,
            "image_size": size,
            "batches": list(batches),
            "repeat": repeat,
            "wall_s": wall,
            "skipped": skipped,
            "rows": rows,
        },
    )
    _print(rows, note, skipped, wall, path)


def _row(units: str, model: str, r, wall_s: float) -> dict:
    d = r.to_dict()
    b = d["baselines"]
    best = b["best_single"]
    worst = max((o["max_abs"] for o in d["check"]["outputs"]), default=0.0)
    return {
        "units": units,
        "model": model,
        "batch": r.batch,
        "split": d["split"],
        "predicted_ms": d["predicted_ms"],
        "measured_ms": d["measured_ms"],
        "throughput": d["throughput"],
        "unit_throughput": d["unit_throughput"],
        "physical_limit": d["physical_limit"],
        "of_limit": d["efficiency"],
        # the split's own ceiling: each unit at its speed alone on its share (the exact split's
        # predicted time, on sizes timed alone), against the limit's whole-batch speeds
        "ceiling_of_limit": r.batch / (d["predicted_ms"] / 1e3) / d["physical_limit"],
        "greedy": {
            k: b["greedy"][k] for k in ("split", "predicted_ms", "measured_ms", "throughput")
        },
        "even": {k: b["even"][k] for k in ("split", "predicted_ms", "measured_ms", "throughput")},
        "vs_greedy": d["throughput"] / b["greedy"]["throughput"],
        "best_single": best,
        "check": {"passed": d["check"]["passed"], "rule": d["check"]["rule"], "max_abs": worst},
        "profile": d["profile"],
        "wall_s": wall_s,
    }


def _print(rows: list[dict], note: str, skipped: list[str], wall: float, path: Path) -> None:
    print(f"\nBatch partitioning, {note}; measured throughput in items/s\n")
    print(
        "| units | model | B | exact split | pred ms | meas ms | items/s | limit | % limit "
        "| ceiling % | greedy split | greedy items/s | exact/greedy | even items/s | best single "
        "| check |"
    )
    print("|" + "---|" * 16)
    for r in rows:
        sizes = " ".join(f"{u}:{n}" for u, n in r["split"].items())
        gsizes = " ".join(f"{u}:{n}" for u, n in r["greedy"]["split"].items())
        best = r["best_single"]
        best_s = "-" if best is None else f"{best['unit']} {best['throughput']:.1f}"
        check = ("pass" if r["check"]["passed"] else "FAIL") + f" ({r['check']['max_abs']:.2g})"
        print(
            f"| {r['units']} | {r['model']} | {r['batch']} | {sizes} | {r['predicted_ms']:.1f} "
            f"| {r['measured_ms']:.1f} | {r['throughput']:.1f} | {r['physical_limit']:.1f} "
            f"| {100 * r['of_limit']:.0f}% | {100 * r['ceiling_of_limit']:.0f}% | {gsizes} "
            f"| {r['greedy']['throughput']:.1f} "
            f"| {r['vs_greedy']:.2f} | {r['even']['throughput']:.1f} | {best_s} | {check} |"
        )  # fmt: skip
    for s in skipped:
        print(f"\nskipped: {s}")
    print(f"\ntotal {wall:.0f} s; results in {path}")


if __name__ == "__main__":
    main()
