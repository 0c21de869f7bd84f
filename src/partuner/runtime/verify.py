"""Verify plans before trusting them: time each partition as the runtime will run it.

The profile's costs are per node, in context, plus an average cost per cut; a particular cut can
cost much more (a backend whose blocked layouts make some operators free inside a whole model
must compute them, and convert, in a sub-model). So before a plan with several partitions is
chosen, each of its partitions is cut out and timed alone on its unit (the call, its nodes and
the conversions of what it reads and writes), and the plan is predicted again with those times
(:func:`partuner.plan.simulate.simulate` with ``durations``). :func:`choose_verified` does this
for the best few plans and the best single-unit plan, and keeps the fastest by the verified
prediction. Modeled units keep their computed costs (they cannot be timed here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from partuner.export.cut import cut
from partuner.graph import ModelGraph
from partuner.plan.partitions import Plan
from partuner.plan.problem import Problem
from partuner.plan.simulate import simulate
from partuner.profile.measure import random_feeds, time_model
from partuner.units import UnitSet

__all__ = ["Verified", "choose_verified", "verify_plan"]

#: how many of the best-predicted plans with several partitions are verified
CANDIDATES = 3


@dataclass(frozen=True)
class Verified:
    """A plan's prediction redone with its partitions' measured times (µs)."""

    plan: Plan
    predicted_us: float
    verified_us: float
    partition_us: dict[str, float]  # measured, per partition (modeled ones left out)


def verify_plan(
    graph: ModelGraph, units: UnitSet, problem: Problem, plan: Plan, *, budget_s: float = 0.1
) -> Verified:
    """Time each partition of ``plan`` alone on its unit; predict the plan with those times."""
    measured: dict[str, float] = {}
    for part, model in zip(plan.partitions, cut(graph, plan.partitions, check=False), strict=True):
        unit = units[part.unit]
        if unit.modeled:
            continue
        if len(plan.partitions) == 1:
            unit = unit.alone()  # as the runtime runs a one-partition plan
        m = time_model(unit, model.model, random_feeds(graph, list(model.inputs)), budget_s)
        if m.status == "ok":
            measured[part.name] = m.median_us
    timing = simulate(problem, plan.partitions, measured)
    return Verified(plan, plan.predicted_us, timing.makespan_us, measured)


def choose_verified(
    graph: ModelGraph,
    units: UnitSet,
    problem: Problem,
    plans: Mapping[str, Plan],
    *,
    budget_s: float = 0.1,
) -> tuple[Plan, list[Verified]]:
    """The plan with the lowest verified prediction among the best :data:`CANDIDATES` plans
    with several partitions and the best one-partition plan (by predicted latency). Plans that
    use a modeled unit are not verified (part of them cannot be timed): when the best predicted
    plan is one, it is returned as it is (a what-if). Returns the plan and what was verified,
    best first."""
    ranked = sorted(
        {id(p): p for p in plans.values()}.values(), key=lambda p: (p.predicted_us, p.scheduler)
    )
    seen: set[tuple] = set()
    multi: list[Plan] = []
    single: Plan | None = None
    for p in ranked:
        key = tuple((x.unit, tuple(x.nodes)) for x in p.partitions)
        if key in seen:
            continue
        seen.add(key)
        if len(p.partitions) == 1:
            single = single or p
        elif len(multi) < CANDIDATES:
            multi.append(p)
    todo = [p for p in [*multi, single] if p is not None and not p.modeled]
    if not todo or ranked[0].modeled:
        return ranked[0], []
    done = sorted(
        (verify_plan(graph, units, problem, p, budget_s=budget_s) for p in todo),
        key=lambda v: v.verified_us,
    )
    return done[0].plan, done
