"""Using partuner leaves nothing under the user's home: onnxruntime's telemetry (a device id and
an event store under ~/.cache) and OpenVINO's (a Google Analytics event sent on import, a client
id and counters under ~/intel) are off."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = """
import numpy as np, onnx
from onnx import TensorProto, helper
from partuner.units.base import make_unit
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
with make_unit("u", "{backend}", threads=1).prepare(m) as r:
    assert (r.run({{"x": np.ones((1, 4), np.float32)}})["y"] == 1).all()
"""


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_unit_writes_nothing_under_home(tmp_path: Path, backend: str) -> None:
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "PARTUNER_DB")}
    env.pop("ORT_DISABLE_TELEMETRY", None)
    env["HOME"] = str(home)
    got = subprocess.run(
        [sys.executable, "-c", RUN.format(backend=backend)], env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
