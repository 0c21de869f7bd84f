"""partuner: profile, plan, partition and run ONNX models across several processing units.

The stable API, importable from ``partuner`` directly (loaded on first use)::

    import partuner
    graph = partuner.load_model("model.onnx", {"input": (1, 3, 224, 224)})
    units = partuner.default_units()            # or partuner.load_units("units.yaml")
    with partuner.ProfileStore() as store:
        profile = partuner.profile_model(graph, units, store=store)
    problem = partuner.build_problem(graph, units, profile)
    plan, _ = partuner.make_plan(problem)       # the "auto" scheduler
    parts = partuner.cut(graph, plan.partitions)
    with partuner.Session(graph, parts, units) as sess:
        (out,) = sess.run(None, {"input": x})
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"

# onnxruntime's telemetry (1.32 on Linux: a device id and an event store under ~/.cache), off
# before anything here imports onnxruntime; a user who sets the variable keeps their choice
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

_API = {
    "load_model": "partuner.graph",
    "ModelGraph": "partuner.graph",
    "parallel_branch_groups": "partuner.graph",
    "load_units": "partuner.units",
    "default_units": "partuner.units",
    "UnitSet": "partuner.units",
    "profile_model": "partuner.profile",
    "ProfileStore": "partuner.profile",
    "Problem": "partuner.plan",
    "Plan": "partuner.plan",
    "get_scheduler": "partuner.plan",
    "scheduler_names": "partuner.plan",
    "build_problem": "partuner.pipeline",
    "make_plan": "partuner.pipeline",
    "tune": "partuner.pipeline",
    "plan_file": "partuner.pipeline",
    "cut": "partuner.export",
    "export_plan": "partuner.export",
    "read_plan": "partuner.export",
    "write_plan": "partuner.export",
    "Session": "partuner.runtime",
    "check_outputs": "partuner.runtime",
}

__all__ = ["__version__", *sorted(_API)]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'partuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
