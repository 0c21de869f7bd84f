"""Planning stops cleanly on Ctrl-C, and the same problem gets the same plan (issue 15)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partuner.plan.problem import Edge, Problem

pytest.importorskip("ortools")

CLI = str(Path(sys.executable).with_name("partuner"))
UNITS = """\
units:
  cpu: {backend: modeled, gflops: 20, gbps: 10, overhead_us: 5}
  npu: {backend: modeled, gflops: 100, gbps: 20, overhead_us: 20, ops: [Conv]}
links:
  default: {latency_us: 100, gbps: 1}
"""


@pytest.fixture(scope="module")
def googlenet_problem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GoogLeNet on a modeled CPU and NPU, as a problem file (no profiling in the tests)."""
    d = tmp_path_factory.mktemp("problem")
    (d / "units.yaml").write_text(UNITS)
    problem = d / "googlenet.json"
    subprocess.run(
        [CLI, "plan", "zoo:googlenet", "--units", str(d / "units.yaml"), "--db", str(d / "p.db"),
         "--scheduler", "heft", "--dump-problem", str(problem), "-q"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return problem


def _default_sigint() -> None:
    """Ctrl-C reaches the child even where the tests run as a background job (a shell without
    job control starts those with SIGINT ignored, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_after(args: list[str], cwd: Path, delay_s: float) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [CLI, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip
    time.sleep(delay_s)
    assert proc.poll() is None, "the command ended before the interrupt"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.parametrize("delay_s", [2.5, 4.0])
def test_ctrl_c_during_planning_exits_130_and_leaves_nothing(
    googlenet_problem: Path, tmp_path: Path, delay_s: float
) -> None:
    """SIGINT while CP-SAT searches (2.5 s in: pexact's first regions; 4 s in: later ones)
    stops ``plan`` with exit 130 and one line, and writes no plan (no temporary either)."""
    got = _interrupt_after(
        ["plan", "--load-problem", str(googlenet_problem), "--scheduler", "pexact",
         "--time-limit", "60", "-o", "X.yaml", "-q"],
        tmp_path, delay_s,
    )  # fmt: skip
    assert got.returncode == 130, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partuner: error: interrupted"), got.stderr
    assert "Traceback" not in got.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_solvers_leave_sigint_to_python() -> None:
    """Every CP-SAT solver the planner makes leaves SIGINT to Python (no handler of its own,
    none left behind)."""
    from ortools.sat.python import cp_model

    from partuner.plan.decompose import Region
    from partuner.plan.exact import Instance, solve
    from partuner.plan.region_model import solve_region

    seen = []
    real = cp_model.CpSolver.solve

    def spy(self, model, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(self.parameters.catch_sigint_signal)
        return real(self, model, *args, **kwargs)

    cost = {"a": {"u": 1.0, "v": 2.0}, "b": {"u": 2.0, "v": 1.0}}
    p = Problem(["a", "b"], ["u", "v"], cost, [Edge("a", "b", 8, ("a:out",))])
    before = signal.getsignal(signal.SIGINT)
    try:
        cp_model.CpSolver.solve = spy  # type: ignore[method-assign]
        solve(Instance.of(p), time_limit=1.0)
        solve_region(p, Region(None, ("a", "b"), None), time_limit=1.0)
    finally:
        cp_model.CpSolver.solve = real  # type: ignore[method-assign]
    assert seen and not any(seen)
    assert signal.getsignal(signal.SIGINT) is before


def _burn() -> subprocess.Popen:
    """A CPU-heavy process beside the planner, so that wall-clock budgets would differ."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@pytest.mark.parametrize("scheduler", ["pexact", "auto"])
def test_same_problem_same_plan(googlenet_problem: Path, scheduler: str) -> None:
    """Two runs of one problem, in separate processes and with another process loading the
    CPU during the second, give the same partitions, units, order and predicted latency, on a
    problem the solver does not prove within the budget."""
    args = [CLI, "plan", "--load-problem", str(googlenet_problem), "--scheduler", scheduler,
            "--time-limit", "4", "--json", "-q"]  # fmt: skip
    runs = []
    for load in (False, True):
        burner = _burn() if load else None
        try:
            got = subprocess.run(args, capture_output=True, text=True, timeout=120)
        finally:
            if burner is not None:
                burner.kill()
                burner.wait()
        assert got.returncode == 0, got.stderr
        assert "wall-clock limit" not in got.stderr, got.stderr  # the work budget decided
        runs.append(json.loads(got.stdout))
    first, second = runs
    assert first["status"] != "optimal"  # unproven: the budget, not a proof, ended the search
    for key in ("scheduler", "status", "predicted_ms", "lower_bound_ms", "partitions"):
        assert first[key] == second[key], key
