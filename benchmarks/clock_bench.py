"""What the planner's work clock charges against what its CP-SAT solves take on this machine.

The planner counts its budget in work (src/partuner/plan/clock.py): each solve is charged
``CALL_S``, ``ROW_S`` per constraint of its model and its deterministic time over the rate for
its number of workers (``clock.charge``). This benchmark runs ``auto`` at the default budget on
zoo models with generated unit sets (as benchmarks/anytime_bench.py makes them) and the review's
held-out sets, times every solve from the previous one's end (the model's building included),
and reports per problem the solves, that wall time, their deterministic time, what they were
charged, the whole run's wall time and whether the wall-clock cap came first; then a
least-squares fit over all solves of ``wall = start-up + s_per_det * deterministic time +
s_per_row * constraints``, the figures the constants stand for. Planning only.

    python benchmarks/clock_bench.py [--models googlenet,inception_v3] [--configs N]

Writes benchmarks/results/clock.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anytime_bench import REVIEW, generated_config, review_config  # noqa: E402
from common import machine, temp_dir, write_result  # noqa: E402
from plan_bench import cpu_conv_gflops  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.pipeline import build_problem  # noqa: E402
from partuner.plan import clock as clock_module  # noqa: E402
from partuner.plan.auto import DEFAULT_TIME_LIMIT_S, Auto  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

MODELS = ("squeezenet", "googlenet", "shufflenet_v2", "inception_v3")


class Recorder:
    """Wraps ``WorkClock.solve``: each solve's wall time, deterministic time and time since the
    previous solve ended (the model's building included), and whether a clock reached its
    cap."""

    def __init__(self) -> None:
        # wall since the previous solve's end (model building included; the first solve: its
        # own), deterministic time, constraints, workers
        self.solves: list[tuple[float, float, int, int]] = []
        self.capped = False
        self.last = time.perf_counter()
        self._solve = clock_module.WorkClock.solve

    def install(self) -> None:
        rec, solve = self, self._solve

        def timed(clock: Any, solver: Any, model: Any) -> Any:
            t0 = time.perf_counter()
            code = solve(clock, solver, model)
            end = time.perf_counter()
            det = solver.response_proto.deterministic_time
            rows, workers = len(model.proto.constraints), solver.parameters.num_workers
            since = end - (rec.last if rec.solves else t0)
            rec.solves.append((since, det, rows, workers))
            rec.last = end
            rec.capped = rec.capped or clock.capped
            return code

        clock_module.WorkClock.solve = timed  # type: ignore[method-assign]


def run(problem, recorder: Recorder, budget: float) -> dict[str, Any]:
    recorder.solves, recorder.capped = [], False
    t0 = time.perf_counter()
    Auto().schedule(problem, time_limit=budget)
    wall = time.perf_counter() - t0
    walls = [w for w, *_ in recorder.solves]
    dets = [d for _, d, _, _ in recorder.solves]
    charged = sum(clock_module.charge(d, n, w) for _, d, n, w in recorder.solves)
    return {
        "solves": len(dets),
        "solve_wall_s": sum(walls),
        "det_s": sum(dets),
        "charged_s": charged,
        "wall_s": wall,
        "capped": recorder.capped,
        "per_solve": recorder.solves,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--configs", type=int, default=1, help="generated unit sets per model")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    models = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in models if m not in zoo.NAMES]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    budget = DEFAULT_TIME_LIMIT_S
    rng = random.Random(args.seed)
    recorder = Recorder()
    recorder.install()
    work = temp_dir("partuner-clock-bench-")
    rows: list[dict[str, Any]] = []
    for name in models:
        graph = load_model(zoo.build(name, image_size=224))
        with ProfileStore(work / "p.db") as store:
            base = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}})
            gf = cpu_conv_gflops(graph, profile_model(graph, base, store=store), "cpu")
            sets = [generated_config(rng, gf) for _ in range(args.configs)]
            sets += [review_config(n) for m, n in REVIEW if m == name]
            for spec, text in sets:
                units = units_from_mapping(spec)
                problem = build_problem(graph, units, profile_model(graph, units, store=store))
                rows.append({"model": name, "units": text, **run(problem, recorder, budget)})
                print(f"done {name} ({text})", file=sys.stderr)
    pairs = np.array([s for r in rows for s in r["per_solve"]])
    fit = np.linalg.lstsq(np.c_[np.ones(len(pairs)), pairs[:, 1:3]], pairs[:, 0], rcond=None)[0]
    workers = sorted({int(w) for w in pairs[:, 3]})
    rate = clock_module.work_rate(workers[0]) if len(workers) == 1 else float("nan")
    ratio = max(rows, key=lambda r: r["solve_wall_s"] / max(r["charged_s"], 1e-9))
    capped = [f"{r['model']} ({r['units']})" for r in rows if r["capped"]]
    overall = sum(r["solve_wall_s"] for r in rows) / sum(r["charged_s"] for r in rows)
    lines = [
        f"Over {len(pairs)} solves ({'/'.join(map(str, workers))} worker(s)), from one solve's "
        f"end to the next's (building the model included): wall = {fit[0] * 1e3:.1f} ms + "
        f"{fit[1]:.2f} s per deterministic second + {fit[2] * 1e6:.1f} us per constraint (least "
        f"squares); charged: CALL_S = {clock_module.CALL_S * 1e3:g} ms per solve + "
        f"{1 / rate:.2f} s per deterministic second + ROW_S = {clock_module.ROW_S * 1e6:g} us "
        f"per constraint. Wall over charged: {overall:.2f} "
        f"overall, highest {ratio['solve_wall_s'] / max(ratio['charged_s'], 1e-9):.2f} "
        f"({ratio['model']}, {ratio['units']}).",
        f"Wall-clock cap ({budget:g} s) reached: "
        + (f"{len(capped)} of {len(rows)} ({'; '.join(capped)})." if capped else "none."),
    ]
    path = write_result(
        "clock",
        {
            "machine": machine(),
            "budget_s": budget,
            "call_s": clock_module.CALL_S,
            "row_s": clock_module.ROW_S,
            "work_per_s": rate,
            "workers": workers,
            "fit": {"startup_s": fit[0], "wall_per_det_s": fit[1], "wall_per_row_s": fit[2]},
            "rows": [{k: v for k, v in r.items() if k != "per_solve"} for r in rows],
            "goals": lines,
        },
    )
    print(
        "| model | units | solves | solve wall s | deterministic s | charged s | "
        "auto wall s | cap reached |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['units']} | {r['solves']} | {r['solve_wall_s']:.2f} | "
            f"{r['det_s']:.2f} | {r['charged_s']:.2f} | {r['wall_s']:.2f} | "
            f"{'yes' if r['capped'] else 'no'} |"
        )
    print()
    for line in lines:
        print(line)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
