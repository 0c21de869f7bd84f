"""Same problem, same plan: `partuner plan` run twice in fresh processes at the default budget.

For each zoo model and units setting (a 1-thread onnxruntime CPU plus 1 or 2 modeled conv-only
NPUs), the planning problem is dumped once, then planned twice with `auto` at the default time
limit (`partuner plan --load-problem P --json`), the second time beside a process that keeps a
core busy. Reported per problem: the wall time of each run, whether the run reached its
wall-clock cap (the planner's warning), whether both runs gave the same plan (scheduler, status,
predicted latency, bound and partitions), and the plan's ratio to its bound.

Run: python benchmarks/repro_bench.py [--quick]   (about 5 minutes; --quick about 1)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402

NPU = {
    "backend": "modeled",
    "gflops": 200,
    "gbps": 6,
    "overhead_us": 40,
    "ops": ["Conv", "Relu", "MaxPool", "Concat", "Add", "GlobalAveragePool", "AveragePool"],
}
SETTINGS = {
    "cpu+npu": {"cpu": {"backend": "onnxruntime", "threads": 1, "cores": [0]}, "npu": NPU},
    "cpu+2npu": {
        "cpu": {"backend": "onnxruntime", "threads": 1, "cores": [0]},
        "npu0": NPU,
        "npu1": NPU,
    },
}
LINKS = {"default": {"latency_us": 60, "gbps": 1.5}}
MODELS = ["squeezenet", "googlenet", "resnet50", "inception_v3", "densenet121"]


def _partuner(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from partuner.cli import main; sys.exit(main())"] + [
        *args
    ]


def dump(model: str, setting: str, work: Path) -> Path:
    units = work / f"{setting}.yaml"
    units.write_text(yaml.safe_dump({"units": SETTINGS[setting], "links": LINKS}))
    problem = work / f"{model}-{setting}.json"
    args = ["plan", f"zoo:{model}", "--units", str(units), "--db", str(work / "p.db")]
    args += [
        "--scheduler",
        "heft",
        "-q",
        "-o",
        str(work / "x.yaml"),
        "--dump-problem",
        str(problem),
    ]
    subprocess.run(_partuner(*args), check=True, capture_output=True, timeout=900)
    return problem


def plan(problem: Path, time_limit: str | None, busy: bool) -> dict:
    args = ["-v", "plan", "--load-problem", str(problem), "--json"]
    args += ["--time-limit", time_limit] if time_limit else []
    burner = None
    if busy:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        t0 = time.perf_counter()
        r = subprocess.run(_partuner(*args), capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-500:])
    out = json.loads(r.stdout)
    key = {k: out.get(k) for k in ("scheduler", "status", "predicted_ms", "lower_bound_ms")}
    key["partitions"] = [(p["unit"], p["nodes"]) for p in out["partitions"]]
    return {
        "wall_s": round(wall, 2),
        "capped": "wall-clock limit" in r.stderr,
        "key": key,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two models, a 2 s time limit")
    ns = ap.parse_args()
    models = MODELS[:2] if ns.quick else MODELS
    time_limit = "2" if ns.quick else None  # None: the default a user gets
    work = temp_dir("partuner-repro-")
    rows = []
    for model in models:
        for setting in SETTINGS:
            problem = dump(model, setting, work)
            a = plan(problem, time_limit, busy=False)
            b = plan(problem, time_limit, busy=True)
            k = a["key"]
            rows.append(
                {
                    "model": model,
                    "units": setting,
                    "wall_s": [a["wall_s"], b["wall_s"]],
                    "capped": [a["capped"], b["capped"]],
                    "same_plan": a["key"] == b["key"],
                    "scheduler": k["scheduler"],
                    "predicted_ms": k["predicted_ms"],
                    "lower_bound_ms": k["lower_bound_ms"],
                    "second_predicted_ms": b["key"]["predicted_ms"],
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    data = {"machine": machine(), "quick": ns.quick, "time_limit": time_limit, "rows": rows}
    write_result("repro", data)
    print(
        "| model | units | plan (auto) | predicted ms | bound ms | wall s (quiet / busy) "
        "| cap reached | same plan |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cap = " / ".join("yes" if c else "no" for c in r["capped"])
        same = "yes" if r["same_plan"] else f"no ({r['second_predicted_ms']:.3f} ms)"
        print(
            f"| {r['model']} | {r['units']} | {r['scheduler']} | {r['predicted_ms']:.3f} | "
            f"{r['lower_bound_ms']:.3f} | {r['wall_s'][0]:.1f} / {r['wall_s'][1]:.1f} | {cap} "
            f"| {same} |"
        )
    same = sum(r["same_plan"] for r in rows)
    capped = sum(any(r["capped"]) for r in rows)
    print(
        f"same plan in both runs on {same} of {len(rows)} problems; the wall-clock cap was "
        f"reached in at least one run of {capped}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
