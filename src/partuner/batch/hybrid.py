"""The hybrid candidate: every unit together running the operator-level plan on the whole batch.

When units are very unequal, a data split leaves the slow unit with a few items (or none), so it
adds little; the operator-level plan (``partuner tune``) can instead give the slow unit the
operators it is relatively good at. This module profiles the model at the batch size op by op,
plans it with every built-in scheduler (keeping the fastest predicted), cuts it, runs it with a
:class:`~partuner.runtime.Session` and checks it like a split. The plan occupies all units, so it
is compared with the split rather than combined with it (see ``docs/batch.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from partuner.batch.model import BatchModel
from partuner.profile.store import ProfileStore
from partuner.runtime import CheckResult, check_outputs
from partuner.units import UnitSet

__all__ = ["HybridRun", "run_hybrid"]


@dataclass
class HybridRun:
    """The operator-level plan on the whole batch: predicted and measured µs, check."""

    batch: int
    scheduler: str
    partitions: int
    units: list[str]
    predicted_us: float
    measured_us: float
    check: CheckResult
    modeled: bool

    @property
    def throughput(self) -> float:
        return self.batch / (self.measured_us / 1e6)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scheduler": self.scheduler,
            "partitions": self.partitions,
            "units": self.units,
            "predicted_ms": self.predicted_us / 1e3,
            "measured_ms": self.measured_us / 1e3,
            "throughput": self.throughput,
            "check": self.check.to_dict(),
            "modeled": self.modeled,
            "timing": "emulated on the host" if self.modeled else "measured",
        }


def run_hybrid(
    model: BatchModel,
    units: UnitSet,
    batch: int,
    feeds: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    *,
    store: ProfileStore | None = None,
    repeat: int = 10,
    budget_s: float = 0.25,
) -> HybridRun:
    """Profile, plan, cut and run ``model`` at ``batch`` across all ``units`` (see the module)."""
    from partuner.export import cut
    from partuner.pipeline import build_problem, make_plan, measure_session
    from partuner.profile import profile_model
    from partuner.runtime import Session

    graph = model.at(batch)
    prof = profile_model(graph, units, store=store, budget_s=budget_s)
    problem = build_problem(graph, units, prof)
    plan, _ = make_plan(problem)
    parts = cut(graph, plan.partitions)
    with Session(graph, parts, units) as sess:
        stats, got = measure_session(sess, dict(feeds), repeat)
    used = list(dict.fromkeys(p.unit for p in plan.partitions))
    check = check_outputs(dict(ref), got, [units[u].precision for u in used])
    return HybridRun(
        batch=batch,
        scheduler=plan.scheduler,
        partitions=len(plan.partitions),
        units=used,
        predicted_us=plan.predicted_us,
        measured_us=stats.median_ms * 1e3,
        check=check,
        modeled=bool(plan.modeled),
    )
