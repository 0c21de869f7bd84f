"""Throughput planning with and without the greedy pipelines: predicted frames per second.

For each zoo model, on the stand-in pair (examples/units/cpu-npu-standin.yaml: onnxruntime on
one core, OpenVINO with an EVTA-like operator list on the other) and on the modeled units file
(examples/units/cpu-npu-modeled.yaml) with 1, 2 and 4 NPUs: the planning problem is profiled and
dumped once (``partuner plan --dump-problem``, a fresh store), then, in this process, ``auto``'s
latency plan with 40 % of the default 10 s (as ``partuner plan --objective throughput`` does)
and ``plan_throughput`` with the rest, once with the greedy pipelines among its candidates (as
shipped) and once without (as before them). Reported per problem: the predicted frames per
second of each, the candidate that won, its partitions, the bound, and the latency plan run as
a stream. Planning only: every figure is a prediction (the stream benchmark measures plans on
the stand-in).

Run: python benchmarks/stream_plan_bench.py [--quick]   (about 15 minutes; --quick about 2)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402
from stream_bench import STANDIN, modeled_units  # noqa: E402

from partuner.graph import zoo  # noqa: E402
from partuner.plan.auto import Auto  # noqa: E402
from partuner.plan.partitions import plan_from_schedule  # noqa: E402
from partuner.plan.problem_json import problem_from_dict  # noqa: E402
from partuner.plan.stream_plan import plan_throughput  # noqa: E402
from partuner.throughput import LATENCY_SHARE  # noqa: E402

MODELS = [
    "squeezenet",
    "googlenet",
    "resnet18",
    "branchy",
    "resnet50",
    "mobilenet_v2",
    "shufflenet_v2",
    "densenet121",
    "inception_v3",
]
BUDGET_S = 10.0  # the default a user gets


def dump(model: Path, units: Path, db: Path, out: Path) -> dict:
    """Profile ``model`` on ``units`` (store ``db``) and write its planning problem."""
    args = ["plan", str(model), "--units", str(units), "--db", str(db), "--time-limit", "0.5"]
    args += ["--dump-problem", str(out), "-q"]
    cmd = [sys.executable, "-c", "import sys; from partuner.cli import main; sys.exit(main())"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"partuner {' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    doc = json.loads(out.read_text())
    return doc.get("problem", doc)


def plan_both(problem_doc: dict) -> dict:
    p = problem_from_dict(problem_doc)
    t0 = time.perf_counter()
    s = Auto().schedule(p, time_limit=BUDGET_S * LATENCY_SHARE)
    latency = plan_from_schedule(p, s)
    latency_s = time.perf_counter() - t0
    got = {}
    for greedy in (True, False):
        t1 = time.perf_counter()
        r = plan_throughput(
            p, time_limit=BUDGET_S * (1 - LATENCY_SHARE), plans={"auto": latency}, greedy=greedy
        )
        lat = r.baselines.get("latency plan")
        got["with" if greedy else "without"] = {
            "fps": r.best.fps,
            "plan": r.best.name,
            "partitions": len(r.best.plan.partitions),
            "in_flight": r.best.in_flight,
            "fps_bound": r.fps_bound,
            "latency_plan_fps": lat.fps if lat is not None else None,
            "wall_s": latency_s + time.perf_counter() - t1,
        }
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="squeezenet and branchy at 64x64")
    ap.add_argument("--npus", default="1,2,4", help="modeled NPU counts")
    args = ap.parse_args()
    models = ["squeezenet", "branchy"] if args.quick else MODELS
    size = 64 if args.quick else 224
    work = temp_dir("partuner-stream-plan-bench-")
    configs = [("stand-in", STANDIN)]
    configs += [
        (f"modeled, {n} npu" + "s" * (n > 1), modeled_units(n, work))
        for n in (int(x) for x in args.npus.split(","))
    ]
    t_start = time.perf_counter()
    rows = []
    for model in models:
        db = work / f"{model}.db"
        path = work / f"{model}.onnx"
        zoo.save(model, path, image_size=size)
        for label, units in configs:
            doc = dump(path, units, db, work / f"{model}-{len(rows)}.json")
            got = plan_both(doc)
            rows.append({"model": f"zoo:{model}@{size}", "units": label, **got})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    data = {
        "machine": machine(),
        "quick": args.quick,
        "budget_s": BUDGET_S,
        "rows": rows,
        "wall_s": time.perf_counter() - t_start,
    }
    write_result("stream_plan", data)
    report(data)


def report(data: dict) -> None:
    print(
        "| model | units | with greedy pipelines: fps (plan, partitions) | without | change "
        "| bound fps | latency plan as a stream, fps |"
    )
    print("|---|---|---|---|---|---|---|")
    higher = lower = 0
    for r in data["rows"]:
        a, b = r["with"], r["without"]
        change = a["fps"] / b["fps"] - 1
        higher += change > 0.005
        lower += change < -0.005
        lat = a["latency_plan_fps"]
        print(
            f"| {r['model']} | {r['units']} | {a['fps']:.1f} ({a['plan']}, {a['partitions']}) | "
            f"{b['fps']:.1f} ({b['plan']}, {b['partitions']}) | {change:+.1%} | "
            f"{a['fps_bound']:.1f} | {'-' if lat is None else f'{lat:.1f}'} |"
        )
    n = len(data["rows"])
    print()
    print(
        f"With the greedy pipelines the predicted frames per second are higher on {higher} of "
        f"{n} problems, lower on {lower} (more than 0.5 % either way), at the default "
        f"{data['budget_s']:.0f} s budget; figures are predictions (on the stand-in from its "
        "measured costs, elsewhere for modeled NPUs)."
    )


if __name__ == "__main__":
    main()
