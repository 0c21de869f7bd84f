"""A CPU and a CUDA GPU as units: profile (with the real host<->device copies), plan, run, check.

Needs onnxruntime with the CUDA execution provider (``onnxruntime-gpu``) and a CUDA GPU; on any
other machine it writes nothing and says why. Units: ``cpu`` (onnxruntime, ``--cpu-threads``
threads on as many cores) and ``gpu`` (onnxruntime's CUDA provider). For each zoo model at 224:

* the fitted cpu-gpu link (the hand-off plus one upload and one download per size, measured as
  half a Relu call of that size on the GPU minus its no-op call);
* each unit alone (the whole model as one partition) and the plans of ``auto``, ``heft`` and
  ``static`` (CPU-first: ``cpu`` is listed first): partitions, predicted and measured latency
  (``partuner.runtime.Session``, median of ``--repeat`` runs) and the output check against
  onnxruntime on the CPU.

    python benchmarks/cuda_units_bench.py [--cpu-threads 8] [--repeat 50] [--out FILE]

``--gpu-provider cpu --models squeezenet`` runs the same steps with both units on the CPU: a
dry run of the script on a machine without a GPU (its figures say nothing about GPUs).

Writes benchmarks/results/cuda_units.json (or ``--out``) and prints a markdown table.
``run_all.py`` does not run it (it needs a GPU); it shows the last results it finds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402

from partuner.export import cut  # noqa: E402
from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import (  # noqa: E402
    build_problem,
    make_plan,
    measure_session,
    plan_file,
    reference_outputs,
)
from partuner.plan import plan_from_assignment  # noqa: E402
from partuner.profile import ProfileStore, profile_model, random_feeds  # noqa: E402
from partuner.runtime import Session, check_outputs  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

MODELS = ("squeezenet", "googlenet", "resnet50")


def _measure(graph, units, plan, feeds, ref, repeat: int) -> dict:
    pf = plan_file(plan, graph, units)
    with Session(graph, cut(graph, pf.partitions), units) as sess:
        stats, got = measure_session(sess, feeds, repeat)
    check = check_outputs(ref, got, [units[u].precision for u in plan.units])
    return {
        "scheduler": plan.scheduler,
        "units_used": plan.units,
        "partitions": len(plan.partitions),
        "predicted_ms": plan.predicted_us / 1e3,
        "measured_ms": stats.median_ms,
        "measured_p90_ms": stats.p90_ms,
        "check_passed": check.passed,
        "max_abs": max((o.max_abs for o in check.outputs), default=0.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu-threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--out", default=None, help="write the JSON here instead")
    ap.add_argument("--gpu-provider", default="cuda", help="the gpu unit's provider (dry run: cpu)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
    args = ap.parse_args()
    import onnxruntime

    dry = args.gpu_provider.lower() != "cuda"
    if not dry and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        print(
            f"skipped: onnxruntime {onnxruntime.__version__} offers "
            f"{onnxruntime.get_available_providers()}, no CUDAExecutionProvider"
        )
        return
    t = args.cpu_threads
    units = units_from_mapping(
        {
            "units": {
                "cpu": {"backend": "onnxruntime", "threads": t, "cores": list(range(t))},
                "gpu": {"backend": "onnxruntime", "provider": args.gpu_provider},
            }
        }
    )
    work = temp_dir("partuner-cuda-bench-")
    rows = []
    for name in args.models.split(","):
        graph = load_model(zoo.build(name, image_size=224))
        with ProfileStore(work / "profiles.db") as store:
            prof = profile_model(graph, units, store=store, budget_s=0.2)
        fit = prof.link_fits.get(("cpu", "gpu"))
        problem = build_problem(graph, units, prof)
        _, plans = make_plan(problem, "auto", time_limit=10.0)
        feeds = random_feeds(graph, list(graph.inputs))
        ref = reference_outputs(graph, feeds)
        runs = {}
        for u in ("cpu", "gpu"):
            alone = plan_from_assignment(problem, {n: u for n in problem.nodes}, scheduler=u)
            runs[f"{u} alone"] = _measure(graph, units, alone, feeds, ref, args.repeat)
        for s in ("auto", "heft", "static"):
            if s in plans:
                runs[s] = _measure(graph, units, plans[s], feeds, ref, args.repeat)
        rows.append(
            {
                "model": f"zoo:{name}@224",
                "nodes": len(graph.compute_nodes),
                "link": None
                if fit is None
                else {
                    "latency_us": fit.latency_us,
                    "gbps": None if math.isinf(fit.gbps) else fit.gbps,
                    "points": fit.describe()["points"],
                },
                "costs_from": {u: prof.units[u].costs_from for u in units.names},
                "runs": runs,
            }
        )
        print(f"done {name}", file=sys.stderr, flush=True)
    data = {
        "machine": {**machine(), "gpu": _gpu_name()},
        "onnxruntime": onnxruntime.__version__,
        "cpu_threads": t,
        "repeat": args.repeat,
        "rows": rows,
    }
    if args.out or dry:  # a dry run never takes the place of GPU results
        path = Path(args.out or temp_dir("partuner-cuda-dry-") / "cuda_units.json")
        path.write_text(json.dumps(data, indent=1))
    else:
        path = write_result("cuda_units", data)
    print(table(data))
    print(f"\nwrote {path}")


def _gpu_name() -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except Exception:
        return "a CUDA GPU"


def table(data: dict) -> str:
    """The markdown table of a cuda_units.json."""
    out = [
        "| model | link cpu-gpu | run | units used | parts | predicted ms | measured ms | check |",
        "|" + "---|" * 8,
    ]
    for r in data["rows"]:
        link = r["link"]
        text = "-"
        if link is not None:
            bw = "zero-copy" if link["gbps"] is None else f"{link['gbps']:.2f} GB/s"
            text = f"{link['latency_us']:.1f} us + bytes / {bw}"
        for name, x in r["runs"].items():
            out.append(
                f"| {r['model']} | {text} | {name} | {', '.join(x['units_used'])} | "
                f"{x['partitions']} | {x['predicted_ms']:.3f} | {x['measured_ms']:.3f} | "
                f"{'pass' if x['check_passed'] else 'FAIL'} |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    main()
