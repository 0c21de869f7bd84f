"""partuner's plan against plain onnxruntime with 2 threads, each measured in a process of its own.

Measured in one process, configurations disturb each other: a session's thread pool keeps
spinning for a while after its runs, and whatever runs next on the same cores pays for it (the
in-process tables of runtime_bench.py and tune_bench.py interleave and warm up to soften this,
not to remove it). Here each measurement is a fresh process that runs one thing only:

* ``plan``: ``partuner run MODEL --plan PLAN --units UNITS --repeat N --json`` (its median);
* ``ort2``: plain onnxruntime, 2 intra-op threads, default session options, on the same model
  file and input shape (median of N runs after a warm-up).

The plan is the one ``partuner tune`` keeps: ``auto``'s, unless it measures no faster (by 1 %)
than the whole model on the best single unit. The two alternate, ``--rounds`` times each, a
round being one of each (which goes first alternates); the figure per configuration is the
median of its rounds' medians. "rounds spread": the wider of the two configurations' (max -
min) / median over its rounds, the noise between fresh processes; "verdict": ``faster`` or
``slower`` when the plan is so in every round, else ``same``. Plans are made once per unit
set (profile in a fresh store), for two sets: ``onnxruntime`` (cpu0, cpu1, cpuall) and ``default``
(the same + ovall, OpenVINO f32, where OpenVINO is installed).

    python benchmarks/process_ab_bench.py [--quick]

Writes benchmarks/results/process_ab.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RUNTIME_MODELS, machine, run_plan_json, temp_dir, write_result  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import tune  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import default_units  # noqa: E402

MODELS = RUNTIME_MODELS

PLAIN = """
import statistics, sys, time
import numpy as np, onnxruntime as ort
path, repeat = sys.argv[1], int(sys.argv[2])
so = ort.SessionOptions()
so.intra_op_num_threads = 2
s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
feeds = {}
for i in s.get_inputs():
    feeds[i.name] = np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
for _ in range(10):
    s.run(None, feeds)
ts = []
for _ in range(repeat):
    t = time.perf_counter()
    s.run(None, feeds)
    ts.append(time.perf_counter() - t)
print(statistics.median(ts) * 1e3)
"""


def _plain_ms(model: Path, repeat: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, str(model), str(repeat)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _plan_ms(model: Path, plan: Path, units: Path, db: Path, repeat: int) -> float:
    return float(run_plan_json(model, plan, units, db, repeat)["measured_ms"])


def bench(name: str, size: int, sets: dict, work: Path, rounds: int, repeat: int) -> list[dict]:
    model = work / f"{name}.onnx"
    model.write_bytes(zoo.build(name, image_size=size).SerializeToString())
    graph = load_model(model)
    rows = []
    for set_name, units in sets.items():
        units_file = work / f"units-{set_name}.yaml"
        units_file.write_text(yaml.safe_dump({"units": {u.name: u.spec() for u in units}}))
        db = work / f"{name}-{set_name}.db"
        with ProfileStore(db) as store:
            prof = profile_model(graph, units, store=store, skip_unavailable=True)
        # the plan `partuner tune` keeps (auto, then the measured check against the best
        # single unit), as a user gets it
        outdir = work / f"{name}-{set_name}"
        plan = tune(graph, units, prof, outdir, time_limit=10.0).plan
        plan_ms, ort_ms = [], []
        for k in range(rounds):  # each round a pair, the first of the pair alternating
            first_plan = k % 2 == 0
            if not first_plan:
                ort_ms.append(_plain_ms(model, repeat))
            plan_ms.append(_plan_ms(model, outdir / "plan.yaml", units_file, db, repeat))
            if first_plan:
                ort_ms.append(_plain_ms(model, repeat))
        p, o = statistics.median(plan_ms), statistics.median(ort_ms)
        # noise: how far one configuration's rounds spread (of both, the wider)
        spread = max((max(v) - min(v)) / statistics.median(v) for v in (plan_ms, ort_ms))
        ratios = [b / a for a, b in zip(plan_ms, ort_ms, strict=True)]  # per round: ort2 / plan
        rows.append(
            {
                "units": set_name,
                "model": f"zoo:{name}@{size}",
                "plan_units": plan.units,
                "partitions": len(plan.partitions),
                "predicted_ms": plan.predicted_us / 1e3,
                "plan_ms": p,
                "ort2_ms": o,
                "plan_rounds_ms": plan_ms,
                "ort2_rounds_ms": ort_ms,
                "speedup_vs_ort2": o / p,
                "rounds_spread": spread,
                "round_ratios": ratios,
                "verdict": "faster"
                if min(ratios) > 1
                else ("slower" if max(ratios) < 1 else "same"),
            }
        )
        print(f"done {name} ({set_name})", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="two small models, few runs")
    args = ap.parse_args()
    size, rounds, repeat = (64, 2, 20) if args.quick else (224, 5, 100)
    models = MODELS[:2] if args.quick else MODELS
    full = default_units()
    ort_only = [u for u in full if u.backend == "onnxruntime"]
    sets = {"onnxruntime": type(full)(ort_only, {}, default_link=full.default_link)}
    if len(ort_only) < len(full):
        sets["default"] = full
    work = temp_dir("partuner-ab-bench-")
    rows = [r for name in models for r in bench(name, size, sets, work, rounds, repeat)]
    path = write_result(
        "process_ab",
        {
            "machine": machine(),
            "quick": args.quick,
            "rounds": rounds,
            "repeat": repeat,
            "unit_sets": {k: v.names for k, v in sets.items()},
            "rows": rows,
        },
    )
    print(
        "| units | model | plan units | parts | predicted ms | plan ms | ort 2-thr ms | vs ort2 "
        "| rounds spread | verdict |"
    )
    print("|" + "---|" * 10)
    for r in rows:
        print(
            f"| {r['units']} | {r['model']} | {', '.join(r['plan_units'])} | {r['partitions']} "
            f"| {r['predicted_ms']:.3f} | {r['plan_ms']:.3f} | {r['ort2_ms']:.3f} "
            f"| {r['speedup_vs_ort2']:.2f}x | {r['rounds_spread']:.1%} | {r['verdict']} |"
        )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
