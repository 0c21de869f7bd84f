"""A CPU and a CUDA GPU as units: profile (with the real host<->device copies), plan, run, check.

Needs onnxruntime with the CUDA execution provider (``onnxruntime-gpu``) and a CUDA GPU; on any
other machine it writes nothing and says why. Units: ``cpu`` (onnxruntime, ``--cpu-threads``
threads on as many cores) and ``gpu`` (onnxruntime's CUDA provider). For each zoo model at 224:

* the fitted cpu-gpu link (the hand-off plus one upload and one download per size, measured as
  half a Relu call of that size on the GPU minus its no-op call);
* each unit alone (the whole model as one partition) and the plans of ``auto``, ``heft`` and
  ``static`` (CPU-first: ``cpu`` is listed first): partitions, predicted and measured latency
  (``partuner.runtime.Session``, median of ``--repeat`` runs) and the output check against
  onnxruntime on the CPU;
* beside them, the whole model in a plain onnxruntime CUDA session, f32 and TF32 (what the
  CUDA provider does unless told not to), and on the gpu unit's own runner without a partuner
  Session (what the Session adds);
* ``partuner batch``'s split of ``--batch`` items of each ``--batch-models`` model across
  both units, against the best unit alone and the sum of both units' throughputs.

    python benchmarks/cuda_units_bench.py [--cpu-threads 8] [--repeat 50] [--out FILE]
        [--gpu-precision f32|tf32] [--batch 64] [--batch-models resnet50,googlenet]

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


def _plain(graph, provider: str, precision: str, feeds, ref, repeat: int) -> dict:
    """The whole model in one plain onnxruntime session on ``provider`` (what a user runs
    without partuner): median and p90 of ``repeat`` timed runs after 5 warm-ups."""
    import time

    import numpy as np
    import onnxruntime as ort

    from partuner.units.onnxruntime_unit import _with_options

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(
        graph.model.SerializeToString(), so, providers=[_with_options(provider, precision)]
    )
    for _ in range(5):
        out = sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    got = dict(zip([o.name for o in sess.get_outputs()], out, strict=True))
    check = check_outputs(ref, got, [precision])
    return {
        "providers": sess.get_providers(),
        "median_ms": float(np.median(times)),
        "p90_ms": float(np.percentile(times, 90)),
        "check_passed": check.passed,
        "max_abs": max((o.max_abs for o in check.outputs), default=0.0),
    }


def _runner(graph, unit, feeds, repeat: int) -> dict:
    """The whole model on ``unit``'s own runner, called straight from this thread (no
    partuner Session): what the Session adds is the difference to a one-partition plan."""
    import time

    import numpy as np

    runner = unit.prepare(graph.model)
    try:
        for _ in range(5):
            runner.run(feeds)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            runner.run(feeds)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        runner.close()
    return {"median_ms": float(np.median(times)), "p90_ms": float(np.percentile(times, 90))}


def _batch(name: str, units, batch: int, store) -> dict:
    """``partuner batch``'s evaluation of ``name`` at ``batch`` items on the cpu and gpu units."""
    from partuner.batch import BatchModel, evaluate_batch

    r = evaluate_batch(
        BatchModel(zoo.build(name, image_size=224), name), units, batch, store=store, repeat=5
    )
    d = r.to_dict()
    keys = ("model", "batch", "split", "predicted_ms", "measured_ms", "throughput", "unit_alone")
    out = {k: d[k] for k in keys}
    out.update(
        best_single=d["baselines"]["best_single"],
        physical_limit=d["physical_limit"],
        efficiency=d["efficiency"],
        check_passed=d["check"]["passed"],
    )
    return out


def _unit_figures(up) -> dict:
    """What the profile holds for one unit (µs): where the whole-model prediction comes from."""
    keys = ("whole_us", "layer_parts_us", "layer_wall_us", "call_us", "overhead_us", "scale")
    out = {k: getattr(up, k) for k in keys}
    out["boundary_us_per_byte"] = up.boundary_us_per_byte
    out["costs_from"] = up.costs_from
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu-threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--out", default=None, help="write the JSON here instead")
    ap.add_argument("--gpu-provider", default="cuda", help="the gpu unit's provider (dry run: cpu)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
    ap.add_argument("--batch", type=int, default=64, help="items for the batch split (0: skip)")
    ap.add_argument("--batch-models", default="resnet50", help="comma-separated zoo names")
    ap.add_argument(
        "--gpu-precision", default="f32", choices=("f32", "tf32"), help="the gpu unit's precision"
    )
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
                "gpu": {"backend": "onnxruntime", "provider": args.gpu_provider}
                | ({} if dry else {"precision": args.gpu_precision}),
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
        provider = units["gpu"].options["provider"]
        plain = {
            p: _plain(graph, provider, p, feeds, ref, args.repeat)
            for p in (("f32", "tf32") if not dry else ("f32",))
        }
        direct = _runner(graph, units["gpu"], feeds, args.repeat)
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
                "profile": {u: _unit_figures(prof.units[u]) for u in units.names},
                "runs": runs,
                "plain_gpu": plain,
                "gpu_runner_direct": direct,
            }
        )
        print(f"done {name}", file=sys.stderr, flush=True)
    batches = []
    if args.batch > 0:
        for name in args.batch_models.split(","):
            with ProfileStore(work / "profiles.db") as store:
                batches.append(_batch(name, units, args.batch, store))
            print(f"done batch {name}", file=sys.stderr, flush=True)
    data = {
        "machine": {**machine(), "gpu": _gpu_name()},
        "onnxruntime": onnxruntime.__version__,
        "cpu_threads": t,
        "gpu_precision": args.gpu_precision,
        "repeat": args.repeat,
        "rows": rows,
        "batches": batches,
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
        for p, x in r.get("plain_gpu", {}).items():
            out.append(
                f"| {r['model']} | - | plain onnxruntime, gpu {p} | gpu | 1 | - | "
                f"{x['median_ms']:.3f} | {'pass' if x['check_passed'] else 'FAIL'} |"
            )
        d = r.get("gpu_runner_direct")
        if d is not None:
            out.append(
                f"| {r['model']} | - | gpu unit's runner, no Session | gpu | 1 | - | "
                f"{d['median_ms']:.3f} | - |"
            )
    if data.get("batches"):
        out += [
            "",
            "| model | batch | split | predicted ms | measured ms | best unit alone ms | "
            "of the physical limit | check |",
            "|" + "---|" * 8,
        ]
        for b in data["batches"]:
            best = b["best_single"] or {}
            split = " ".join(f"{u}:{n}" for u, n in b["split"].items())
            out.append(
                f"| {b['model']} | {b['batch']} | {split} | {b['predicted_ms']:.2f} | "
                f"{b['measured_ms']:.2f} | {best.get('unit', '-')} {best.get('measured_ms', 0):.2f}"
                f" | {100 * (b['efficiency'] or 0):.0f} % | "
                f"{'pass' if b['check_passed'] else 'FAIL'} |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    main()
