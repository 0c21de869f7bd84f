"""Helpers the benchmark scripts share: machine facts, model sources, result files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SHARED_MODELS = ROOT.parent / "shared" / "models"


ISA = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import numpy
    import onnx
    import onnxruntime

    cpu, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
            if cpu and flags:
                break
    except OSError:
        pass
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        # the vector units OpenVINO picks its precision and kernels by (one CPU model name
        # here came with and without AVX-512 on different days)
        "isa": [f for f in ISA if f in flags],
        "python": platform.python_version(),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": numpy.__version__,
    }
    try:
        import openvino

        info["openvino"] = openvino.__version__
    except ImportError:
        pass
    return info


def cpu_seconds() -> tuple[float, float]:
    """``(machine, ours)``: CPU seconds spent so far by the whole machine (busy and stolen by
    the hypervisor, from /proc/stat) and by this process with its waited-for children. The
    difference of two readings, less ours, is what other work took meanwhile; (0, ours)
    where /proc/stat cannot be read."""
    mine = os.times()
    ours = mine.user + mine.system + mine.children_user + mine.children_system
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return 0.0, ours
    ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK"), ours


def shared_model(name: str, workdir: Path) -> Path | None:
    """A ../shared/models graph with its weights grown back, or None if the folder is absent."""
    src = SHARED_MODELS / f"{name}.onnx.gz"
    if not src.exists():
        return None
    out = workdir / f"{name}.onnx"
    if not out.exists():
        tool = SHARED_MODELS.parent / "tools" / "onnx_weights.py"
        subprocess.run([sys.executable, str(tool), "rehydrate", str(src), str(out)], check=True)
    return out


#: the zoo models the runtime benchmarks (runtime_bench.py, process_ab_bench.py) measure
RUNTIME_MODELS = (
    "branchy",
    "squeezenet",
    "googlenet",
    "resnet18",
    "shufflenet_v2",
    "densenet121",
    "synthetic_large",
)


def run_plan_json(model: Path, plan: Path, units: Path, db: Path, repeat: int) -> dict[str, Any]:
    """``partuner run MODEL --plan PLAN --json`` in a fresh process: its JSON answer. Raises
    RuntimeError with the command's last line when it fails."""
    cli = Path(sys.executable).with_name("partuner")
    out = subprocess.run(
        [str(cli), "run", str(model), "--plan", str(plan), "--units", str(units)]
        + ["--db", str(db), "--repeat", str(repeat), "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {out.returncode}")
    return json.loads(out.stdout)


def median_us(fn, runs: int, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` over ``runs`` calls after ``warmup`` unrecorded ones, in us."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    mid = len(ts) // 2
    return (ts[mid] if len(ts) % 2 else (ts[mid - 1] + ts[mid]) / 2) * 1e6


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    return path


def temp_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
