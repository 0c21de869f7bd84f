"""Run the whole benchmark suite and regenerate docs/results.md from what it measured.

    python benchmarks/run_all.py            # the full suite (2.7 hours on 2 cores, recorded)
    python benchmarks/run_all.py --quick    # small models and few runs (a few minutes)
    python benchmarks/run_all.py --only seed,tune   # re-run these, keep the other sections
    python benchmarks/run_all.py --record standin=OUT   # a section from a run made by hand

Each benchmark script writes benchmarks/results/<name>.json (machine, versions, every figure
with its spread) and prints a markdown table; this script runs them one after another (never
two at once: they time things), then writes docs/results.md from their tables, and the figures
under docs/figures/. Nothing in docs/results.md is written by hand.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, ROOT, machine  # noqa: E402

DOCS = ROOT / "docs"
FIGURES = DOCS / "figures"

#: seconds a benchmark may run (``--timeout``), and for the suites that measure every model on
#: real units: the stream suite took over an hour on a 2-core AMD EPYC without avx512 (it timed
#: out at 3600 s on 2026-11-28, on its 12th model)
DEFAULT_TIMEOUT_S = 3600.0
LONG_TIMEOUT_S = {"stream": 7200.0, "standin": 7200.0}


def timeout_of(name: str) -> float:
    """Seconds benchmark ``name`` may run unless ``--timeout`` says otherwise."""
    return LONG_TIMEOUT_S.get(name, DEFAULT_TIMEOUT_S)


# name, script, extra arguments, what it shows (the section text in docs/results.md)
SUITE = [
    (
        "seed",
        "seed_bench.py",
        ["--figures", str(FIGURES)],
        "The branch-parallel seed experiment re-run: SqueezeNet's 8 branch groups, sequential "
        "(`single`) vs the seed's method (`branch`), NEST-C's (`nestc`) and partuner's (`auto`), "
        "on two real 1-thread units here (measured) and on a modeled Cortex-A53-class CPU + "
        'EVTA-class NPU (predicted, modeled). "Groups in parallel": branch groups two of whose '
        "branches are predicted to run at the same time on different units.",
    ),
    (
        "tune",
        "tune_bench.py",
        [],
        "`partuner tune` with the local default units (`cpu0`, `cpu1`: onnxruntime, 1 thread "
        "each; `cpuall`: onnxruntime on both cores; `ovall`: OpenVINO f32 on both cores) against "
        "the alternatives on the whole model, measured in the same process.",
    ),
    (
        "plan",
        "plan_bench.py",
        ["--time-limit", "60"],
        "Every scheduler's predicted latency (ratio to the best proven lower bound, solve time) on "
        "two real CPU units and on CPU + 1, 2 or 4 modeled conv-only NPUs, each scheduler given "
        "60 s. Planning only.",
    ),
    (
        "anytime",
        "anytime_bench.py",
        [],
        "The planner on generated problems nobody tuned for: the zoo's torchvision-style models, "
        "each with seeded unit sets (this machine's CPU, onnxruntime 1 thread, profiled; 1-4 "
        "modeled NPUs at 0.3-10x its convolution rate, op lists from conv-only to everything, "
        "5-100 us per call, links 5-200 us and 0.5-20 GB/s). `auto` at 1, 10 (the default) and "
        "60 s: its plan's gap to the best plan any run found, its bound's gap below it, wall "
        "time; every other scheduler at 10 s (the best known includes them). Planning only.",
    ),
    (
        "anytime_review",
        "anytime_bench.py",
        ["--review"],
        "The independent review's held-out problems of issue 17: Inception-v3 and DenseNet-121 "
        "with a 1-thread onnxruntime CPU and one modeled conv-only NPU, GoogLeNet and SqueezeNet "
        "with two (200 GFLOP/s, 6 GB/s, 40 us per call; links 60 us + 1.5 GB/s). `auto` at 1, 10 "
        "and 60 s against the best plan any run found and the best bound; every other scheduler "
        "at 10 s. Planning only.",
    ),
    (
        "clock",
        "clock_bench.py",
        [],
        "What the planner's work clock charges against what its CP-SAT solves take here: "
        "`auto` at the default 10 s on zoo models with a generated unit set each (as in "
        "anytime) and the review's held-out sets; per problem the solves, their wall time (from "
        "one solve's end to the next's, building the model included) and deterministic time, "
        "what they were charged (`clock.charge`: 14 ms per solve, 70 us per constraint of its "
        "model, deterministic time over 0.09 for one worker), the run's wall time and whether "
        "the wall-clock cap came first. Planning only.",
    ),
    (
        "repro",
        "repro_bench.py",
        [],
        "Same problem, same plan: `partuner plan --load-problem P` with `auto` at the default "
        "time limit (10 s), run twice in fresh processes, the second beside a process keeping a "
        "core busy, on a 1-thread onnxruntime CPU + 1 or 2 modeled conv-only NPUs (links 60 us "
        "+ 1.5 GB/s). Budgets are counted in CP-SAT deterministic time (docs/algorithms.md); "
        '"cap reached": the wall-clock limit came first, and the plan may then differ.',
    ),
    (
        "large",
        "large_bench.py",
        [],
        "Planning very large problems: `partuner plan --load-problem P --time-limit T` in a fresh "
        "process on seeded problems of 1,000 to 20,000 nodes (a chain, and a ladder of diamonds) "
        "on a CPU and one modeled NPU, at budgets of 2 and 10 s: the command's wall time "
        "(start-up, reading, planning, writing the plan), the planner's own time, and the plan. "
        "The budget bounds the search; reading, checking and writing grow with the nodes.",
    ),
    (
        "region_model",
        "region_model_bench.py",
        [],
        "pexact's region model with and without its pairwise parts (partitions of a unit take "
        "turns; values crossing together pay one transfer) on Inception-v3 with CPU + a modeled "
        "NPU, 15 s per region and model: each region's span, bound and simulated time, and "
        "each model's assembled plan. Planning only.",
    ),
    (
        "runtime",
        "runtime_bench.py",
        [],
        "The runtime: overhead per partition, measured vs predicted latency, and the best plan "
        "against one 1-thread unit and plain onnxruntime with 2 threads, with onnxruntime units "
        "only (`cpu0`, `cpu1`, `cpuall`) and with the default units (the same + `ovall`, "
        "OpenVINO f32 on both cores). First the runtime's own cost on a chain of tiny ops; the "
        "last three columns: the best plan of `cpu0` and `cpu1` alone (branch parallelism only), "
        "measured, with the lower bound the planner proved for such plans on the profiled costs.",
    ),
    (
        "process_ab",
        "process_ab_bench.py",
        [],
        "The plan `partuner tune` keeps against plain onnxruntime with 2 threads, each measured "
        "in a fresh process that runs nothing else (in one process, one session's spinning "
        "thread pool slows whatever runs next on the same cores): median of 5 rounds of 100 "
        "runs (which goes first alternates), with onnxruntime units only and with the default "
        'units. "rounds spread": the wider of the two configurations\' (max - min) / median '
        'over its rounds, the noise between fresh processes; "verdict": faster or slower '
        "when the plan is so in every round, else same.",
    ),
    (
        "standin",
        "standin_bench.py",
        [],
        "The seed papers' experiments on a CPU + NPU *stand-in* (examples/units/"
        "cpu-npu-standin.yaml): a measured stand-in on this machine's two cores, not an NPU "
        "(`cpu`: onnxruntime, 1 thread, core 0; `npu`: OpenVINO, 1 thread, core 1, allowed only "
        "an EVTA-like operator list, the other operators falling back to the cpu). Per model: "
        "the npu's share of the FLOPs, its regions' in-context error; every scheduler's plan, "
        '`cpu alone` and `static type-based` (the npu first: the "static" of PartitionTuner\'s '
        "comparison; `nestc` is its profiling-based method, `branch` the branch-parallel "
        "seed's), each distinct plan measured with `partuner run` in a fresh process, 5 rounds "
        'in rotated order (median of round medians; "auto vs it": faster or slower when auto\'s '
        "plan is so in every round, else same), beside its prediction; for squeezenet also the "
        "predicted-only plans on the modeled units file (cpu-npu-modeled.yaml). The goal lines "
        "under the table are issue 16's, with the seeds' anchors.",
    ),
    (
        "stream",
        "stream_bench.py",
        [],
        "Streams of frames (issue 18): `partuner plan --objective throughput` on the stand-in "
        "(examples/units/cpu-npu-standin.yaml) and on the modeled units file with 1, 2 and 4 "
        "modeled NPUs, each plan and its baselines' predicted frames per second; on the "
        "stand-in each configuration measured with `partuner run --stream 300` in a fresh "
        "process, rounds in rotated order (3 unless the run's command says otherwise; median "
        'of the rounds\' frames/s; "spread": (max '
        "- min) / median): the throughput plan, the latency plan run as a stream with the frames "
        "in flight the planner predicted for it, the best single unit (likewise), "
        "data-parallel copies where units each run the whole model, and a throughput plan "
        "under a p99 bound of 1.5x the latency plan's predicted single-frame latency. The "
        "stand-in's predictions charge how much its two units slow each other when both work "
        "(measured while planning; the factors are under the table). Rows on modeled units are "
        "predictions, never measured. The goal lines under the table are issue 18's.",
    ),
    (
        "stream_plan",
        "stream_plan_bench.py",
        [],
        "Throughput planning (issue 18) with and without the greedy pipelines among its "
        "candidates: each zoo model on the stand-in and on the modeled units file with 1, 2 and 4 "
        "NPUs, profiled and dumped once, then `auto`'s latency plan with 40 % of the default 10 s "
        "and `plan_throughput` with the rest, each way. Planning only: predicted frames per "
        "second (the stream benchmark measures plans on the stand-in).",
    ),
    (
        "stream_slack",
        "stream_slack_bench.py",
        [],
        "A frame of slack (issue 18): each throughput plan that `partuner plan --objective "
        "throughput` makes on the stand-in (examples/units/cpu-npu-standin.yaml), streamed in "
        "one process with the frames in flight it plans (the simulation's need and one more) "
        "and with one fewer, alternately, 8 rounds of about 2 s of frames each (medians over "
        'the rounds; "with / without": the median of the rounds\' ratios). Measured on real '
        "units: the simulation, whose costs are the same on every frame, predicts no "
        "difference.",
    ),
    (
        "noise",
        "noise_bench.py",
        [],
        "How much one call's time moves on this machine from moment to moment: each stand-in "
        "unit runs the largest part of the model it can (one prepared sub-model), timed in "
        "short windows as the profiler times a sub-model, the units taking turns, nothing else "
        "running. A profile takes a cost from one to three such windows; the stand-in's "
        "measured plans are medians of 5 fresh processes.",
    ),
    (
        "busy",
        "busy_bench.py",
        [],
        "Profiling while other work runs: the zoo's squeezenet on the local default units, "
        "profiled on a quiet machine (fresh store), then while one spinning process per core "
        "runs (fresh store), then again on the quiet machine from the busy run's store, then "
        "on the quiet machine into a fresh store once more (how far two quiet profiles differ "
        "on their own). Rows timed while other work took more than a quarter of the cores are "
        "marked busy, warned of and timed again by the next run. Each unit's whole-model time "
        "and largest link latency against the first quiet profile's.",
    ),
    (
        "profile",
        "profile_bench.py",
        [],
        "Profiling cost (cold store, then warm) and the additivity error (whole model vs the sum "
        "of its profiled parts): isolated parts without and with fused groups, and in context "
        "(onnxruntime's own per-kernel times of a whole-model run mapped back to the ONNX nodes, "
        "which the planner's node costs are built from).",
    ),
    (
        "batch",
        "batch_bench.py",
        [],
        "Splitting one batch across units by measured throughput: measured throughput against "
        "the sum of the units' own throughputs (the physical limit) and against the seed's "
        'greedy split. "ceiling %": the exact split\'s predicted throughput (each unit at its '
        "own speed alone on its share, timed at that size) against the same limit.",
    ),
    (
        "ray",
        "ray_bench.py",
        [],
        "Units on a Ray cluster (issue 19): a real local cluster of two raylets on this machine"
        " (one CPU each, custom resources `node-a` and `node-b`), an onnxruntime unit (1 "
        "thread) placed on each, `cores: [0]` and `[1]` (each actor runs on its core only). "
        "What a call through Ray costs against the same call in this process; profiling the "
        "model on two units (onnxruntime, two fingerprints) at once, each on its own node, "
        "against one after the other (fresh stores, rounds alternating which goes first); a "
        "batch split across the two nodes by `evaluate_batch` against the sum of each node's "
        "own throughput on the batch, beside the same job on two units in this process "
        "declaring cores 0 and 1 (no Ray, threads not pinned: what the machine itself loses "
        "when both cores work). Outputs checked against the whole model. The goal lines are "
        "issue 19's.",
    ),
    (
        "ray_inputs",
        "ray_inputs_bench.py",
        [],
        "Where a batch split across two Ray nodes loses (issue 19): the cluster of `ray` (two "
        "raylets on this machine, units `a` and `b` pinned to cores 0 and 1, the driver on `a`'s"
        " node), the batch split evenly, and each unit alone on the whole batch, with the inputs"
        " sent each run (as `partuner batch` does: Ray copies them into this node's store and "
        "`b`'s node pulls its share) against put once and left on the nodes; per mode the split's"
        " throughput over the sum of each unit's alone, and the CPU time the whole machine spent"
        " per split run (/proc/stat). Rounds alternate which mode goes first; medians of rounds.",
    ),
    (
        "example",
        "example_tune.py",
        [],
        "The README's worked example: `partuner tune zoo:googlenet` with the default units, "
        "exactly as printed.",
    ),
    (
        "unit_settings",
        "unit_settings_bench.py",
        [],
        "The measurements behind the units' default settings (docs/units.md).",
    ),
]


def run(
    name: str,
    script: str,
    extra: list[str],
    quick: bool,
    timeout: float,
    recorded: tuple[str, float, str] | None = None,
) -> dict:
    """Run one benchmark, or take ``recorded`` (its stdout, wall time, command line) from a run
    made by hand with other options (``--record``)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / script), *extra]
    if quick:
        cmd.append("--quick")
    t0 = time.perf_counter()
    command = None
    if recorded is not None:
        out, wall, command = recorded
        ok, err = True, ""
    else:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            ok, out, err = proc.returncode == 0, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            ok, out, err = False, exc.stdout or "", f"timed out after {timeout:.0f} s"
            out = out.decode() if isinstance(out, bytes) else out
        wall = time.perf_counter() - t0
    table = [ln for ln in out.splitlines() if ln.startswith("|")]
    if name == "example":  # the whole output is the exhibit
        table = out.rstrip().splitlines()
    notes = [
        ln
        for ln in out.splitlines()
        if ln.strip()
        and not ln.startswith("|")
        and not ln.startswith("written to")
        and not ln.lstrip().startswith(("{", "}", '"'))
        and name != "example"
    ]
    print(f"{name}: {'ok' if ok else 'FAILED'} in {wall:.0f} s", file=sys.stderr)
    if not ok:
        print(err[-2000:], file=sys.stderr)
    return {
        "name": name,
        "ok": ok,
        "wall_s": wall,
        "command": command,
        "table": table,
        "notes": notes[:8],
        "error": None if ok else err.strip().splitlines()[-1:],
    }


def unit_settings_table() -> list[str]:
    path = RESULTS / "unit_settings.json"
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    rows = ["| setting | figure |", "|---|---|"]
    for k, v in d.get("onnxruntime_2thread_spinning", {}).items():
        rows.append(
            f"| onnxruntime 2 threads, spinning {k}: alone / two units at once | "
            f"{v['alone_us']:.0f} / {v['two_at_once_us']:.0f} µs |"
        )
    for k, v in d.get("onnxruntime_2thread_chain_of_8_sessions_us", {}).items():
        rows.append(
            f"| onnxruntime 2 threads, chain of 8 sessions (one unit's partitions), "
            f"spinning {k} | {v:.0f} µs |"
        )
    for k, v in d.get("onnxruntime_2thread_squeezenet_alone_us", {}).items():
        rows.append(
            f"| onnxruntime 2 threads, whole squeezenet run back to back (a one-partition plan), "
            f"spinning {k} | {v:.0f} µs |"
        )
    for k, v in d.get("openvino_1thread_pinning", {}).items():
        rows.append(
            f"| OpenVINO 1 thread, pinning {k}: speedup of two units at once | "
            f"{v['speedup']:.2f}x |"
        )
    for k, v in d.get("openvino_precision_us", {}).items():
        rows.append(f"| OpenVINO 1 thread {k} ({d.get('op', '')}) | {v:.0f} µs |")
    if "thread_handoff_us" in d:
        rows.append(
            f"| handing an array to another Python thread | {d['thread_handoff_us']:.1f} µs |"
        )
        rows.append(f"| copying 1 MiB | {d['copy_1mib_gbps']:.1f} GB/s |")
    return rows


def latency_chart() -> str | None:
    """A bar chart (SVG) of tune.json: per model, partuner's plan vs the alternatives."""
    path = RESULTS / "tune.json"
    if not path.exists():
        return None
    rows = json.loads(path.read_text())["rows"]
    series: list[tuple[str, str]] = [("partuner plan", "#1f77b4")]
    alts = list(rows[0].get("alternatives_ms", {})) if rows else []
    palette = ["#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
    series += [(a, palette[i % len(palette)]) for i, a in enumerate(alts)]
    bar, gap, left, top = 10, 14, 190, 30
    group_h = bar * len(series) + gap
    vmax = max(
        [r["measured_ms"] or 0 for r in rows]
        + [v for r in rows for v in r.get("alternatives_ms", {}).values()]
        + [1e-9]
    )
    width, plot_w = 900, 900 - 190 - 120
    height = top + group_h * len(rows) + 20 + 18 * len(series)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13">Latency per model (ms, median, lower is '
        f"better; measured on this machine, see docs/results.md)</text>",
    ]
    for i, r in enumerate(rows):
        y0 = top + i * group_h
        out.append(
            f'<text x="{left - 6}" y="{y0 + group_h / 2}" text-anchor="end">{r["model"]}</text>'
        )
        values = [r["measured_ms"]] + [r.get("alternatives_ms", {}).get(a) for a in alts]
        for j, ((label, color), v) in enumerate(zip(series, values, strict=True)):
            if v is None:
                continue
            w = plot_w * v / vmax
            y = y0 + j * bar
            out.append(
                f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 1}" '
                f'fill="{color}"><title>{label}: {v:.3f} ms</title></rect>'
            )
            out.append(
                f'<text x="{left + w + 3:.1f}" y="{y + bar - 2}" font-size="9">{v:.2f}</text>'
            )
    ly = top + group_h * len(rows) + 10
    for j, (label, color) in enumerate(series):
        out.append(
            f'<rect x="{left}" y="{ly + 18 * j}" width="12" height="12" fill="{color}"/>'
            f'<text x="{left + 18}" y="{ly + 18 * j + 10}">{label}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def write_results_md(runs: list[dict], quick: bool) -> Path:
    m = machine()
    lines = [
        "# Results",
        "",
        "Generated by `python benchmarks/run_all.py"
        + (" --quick" if quick else "")
        + "`: do not edit by hand. Every figure below comes "
        "from the JSON files in `benchmarks/results/`, which hold the spreads and settings.",
        "",
        f"Last written on: {m['cpu']}, {m['cores']} cores; Python {m['python']}, onnxruntime "
        f"{m['onnxruntime']}, onnx {m['onnx']}"
        + (f", OpenVINO {m['openvino']}" if "openvino" in m else "")
        + f"; {m['date']}. Sections re-run with `--only` keep the others: each names the "
        "machine and date it was measured on (the CPU model changes between sessions here).",
        "Figures labelled *modeled* are computed for hardware that is not here, never measured.",
        "",
    ]
    if (FIGURES / "latency.svg").exists():
        lines += ["![latency per model](figures/latency.svg)", ""]
    for r in runs:
        desc = next(d for n, _, _, d in SUITE if n == r["name"])
        lines += [
            f"## {r['name']}",
            "",
            desc,
            "",
            f"`benchmarks/{next(s for n, s, _, _ in SUITE if n == r['name'])}` "
            f"({r['wall_s']:.0f} s; results in `benchmarks/results/{r['name']}.json`)"
            + _measured_on(r["name"])
            + (f"; this section's run: `{r['command']}`" if r.get("command") else ""),
            "",
        ]
        if not r["ok"]:
            lines += [f"**This benchmark failed in this run**: {' '.join(r['error'] or [])}", ""]
            continue
        table = unit_settings_table() if r["name"] == "unit_settings" else r["table"]
        lines += table + [""]
        if r["notes"]:
            lines += [f"> {n}" for n in r["notes"]] + [""]
        if r["name"] == "seed":
            for svg in sorted(FIGURES.glob("gantt-squeezenet-*.svg")):
                lines += [f"![{svg.stem}](figures/{svg.name})", ""]
    lines += cuda_section()
    path = DOCS / "results.md"
    path.write_text("\n".join(lines))
    return path


def _measured_on(name: str) -> str:
    """``; measured on CPU, N cores, DATE`` from a result's JSON (empty if it has none)."""
    try:
        m = json.loads((RESULTS / f"{name}.json").read_text())["machine"]
        isa = f" ({', '.join(m['isa']) or 'no AVX2'})" if "isa" in m else ""
        return f"; measured on {m['cpu']}{isa}, {m['cores']} cores, {m['date']}"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def cuda_section() -> list[str]:
    """The last results of ``cuda_units_bench.py`` (it needs a CUDA GPU, so it is not run here)."""
    path = RESULTS / "cuda_units.json"
    if not path.exists():
        return []
    from cuda_units_bench import table

    d = json.loads(path.read_text())
    m = d["machine"]
    return [
        "## cuda_units",
        "",
        "A CPU and a CUDA GPU as units (onnxruntime's CPU and CUDA providers): the measured "
        "host-device link, each unit alone and the plans of `auto`, `heft` and `static`; "
        "beside them, the whole model in a plain onnxruntime CUDA session (f32, and TF32, "
        "which onnxruntime's CUDA provider uses unless told not to) and on the gpu unit's "
        "runner without a partuner Session; then `partuner batch`'s split of a batch across "
        f"both units. The gpu unit runs at {d.get('gpu_precision', 'f32')}. Measured on a "
        f"machine with an {m.get('gpu', 'CUDA GPU')} ({m['cpu']}, {m['cores']} CPU cores; "
        f"{d['cpu_threads']} CPU threads for `cpu`), onnxruntime {d['onnxruntime']}, "
        f"{m['date']}. Not re-run by `run_all.py`: it needs a GPU.",
        "",
        "`benchmarks/cuda_units_bench.py` (results in `benchmarks/results/cuda_units.json`)",
        "",
        table(d),
        "",
    ]


def update_readme(runs: list[dict]) -> None:
    """Copy the worked example and the tune table into README.md, between its markers."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    by_name = {r["name"]: r for r in runs if r["ok"]}
    blocks = {
        "example": by_name.get("example", {}).get("table"),
        "results": by_name.get("tune", {}).get("table"),
    }
    for key, lines in blocks.items():
        begin = f"<!-- {key}:begin (written by benchmarks/run_all.py) -->\n"
        end = f"\n<!-- {key}:end -->"
        if not lines or begin not in text or end not in text:
            continue
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n".join(lines) + end + tail
    readme.write_text(text)


def _recorded(spec: str) -> tuple[str, tuple[str, float, str]]:
    """``NAME=FILE`` -> (NAME, (stdout, wall seconds, command line)) for ``--record``."""
    name, _, file = spec.partition("=")
    if name not in {n for n, _, _, _ in SUITE} or not file:
        sys.exit(f"--record wants NAME=FILE with NAME one of the suite's, got {spec!r}")
    text = Path(file).read_text()
    head, wall, body = text.split("\n", 2)
    if not head.startswith("# command: ") or not wall.startswith("# wall_s: "):
        sys.exit(f"{file}: the first lines must be '# command: ...' and '# wall_s: S'")
    return name, (body, float(wall.split(":", 1)[1]), head.split(":", 1)[1].strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="comma-separated benchmark names")
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds per benchmark (default {DEFAULT_TIMEOUT_S:.0f}; the stand-in and stream "
        "suites, which measure every model on real units, "
        f"{max(LONG_TIMEOUT_S.values()):.0f})",
    )
    ap.add_argument(
        "--record",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="take benchmark NAME's section from FILE, the stdout of a run made by hand with "
        "other options (FILE's first line: '# command: ...', second: '# wall_s: S'); implies "
        "--only NAME",
    )
    args = ap.parse_args()
    recorded = dict(_recorded(spec) for spec in args.record)
    if recorded:
        args.only = ",".join(filter(None, [args.only, *recorded]))
    only = set(args.only.split(",")) if args.only else None
    FIGURES.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runs = [
        run(n, s, extra, args.quick, args.timeout or timeout_of(n), recorded.get(n))
        for n, s, extra, _ in SUITE
        if only is None or n in only
    ]
    # --only re-runs some benchmarks: keep the other sections of the last run
    state = RESULTS / "run_all.json"
    if only is not None and state.exists():
        previous = {r["name"]: r for r in json.loads(state.read_text())}
        previous.update({r["name"]: r for r in runs})
        runs = [previous[n] for n, _, _, _ in SUITE if n in previous]
    state.write_text(json.dumps(runs, indent=1) + "\n")
    chart = latency_chart()
    if chart:
        (FIGURES / "latency.svg").write_text(chart)
    path = write_results_md(runs, args.quick)
    if not args.quick:
        update_readme(runs)
    print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if not all(r["ok"] for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
