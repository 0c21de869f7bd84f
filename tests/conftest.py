"""Shared fixtures: small demo models built by partuner's zoo and unit sets written to files."""

from __future__ import annotations

from pathlib import Path

import pytest

from partuner.graph import load_model, zoo

TWO_CPUS = """
units:
  cpu0: {backend: onnxruntime, threads: 1}
  cpu1: {backend: onnxruntime, threads: 1}
"""

CPU_NPU = """
units:
  cpu: {backend: onnxruntime, threads: 1}
  npu: {backend: modeled, gflops: 300, gbps: 8, overhead_us: 30,
        ops: [Conv, Relu, MaxPool, Add, Concat]}
links:
  default: {latency_us: 40, gbps: 2}
"""


@pytest.fixture(scope="session", autouse=True)
def _tests_own_default_store(tmp_path_factory):
    """The default profile store of every command and call the tests make without --db: one of
    their own, never the user's ($PARTUNER_DB or ~/.cache/partuner/profiles.db)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PARTUNER_DB", str(tmp_path_factory.mktemp("default-store") / "profiles.db"))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _quiet_machine(request, monkeypatch):
    """Rows timed here note no other work on the machine: whether a test's profile times a
    stored row again must not hang on what else runs meanwhile (another job, the hypervisor's
    neighbours). Tests of the load meter itself are marked ``real_load`` and read the real one;
    Ray nodes' own processes always do."""
    if request.node.get_closest_marker("real_load"):
        return
    from partuner.profile.load import LoadMeter

    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.0 if self.works else None)


@pytest.fixture(scope="session")
def branchy():
    """The zoo's small synthetic branchy model at 32x32 (a few ms to run)."""
    return load_model(zoo.build("branchy", image_size=32))


@pytest.fixture(scope="module")
def squeeze():
    """The zoo's SqueezeNet 1.0 at 32x32 (fire modules: branches side by side)."""
    return load_model(zoo.build("squeezenet", image_size=32))


@pytest.fixture(scope="session")
def branchy_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "branchy.onnx"
    zoo.save("branchy", path, image_size=32)
    return path


@pytest.fixture()
def units_file(tmp_path) -> Path:
    p = tmp_path / "units.yaml"
    p.write_text(TWO_CPUS)
    return p


@pytest.fixture()
def npu_units_file(tmp_path) -> Path:
    p = tmp_path / "npu.yaml"
    p.write_text(CPU_NPU)
    return p


@pytest.fixture()
def db(tmp_path) -> Path:
    return tmp_path / "profiles.db"
