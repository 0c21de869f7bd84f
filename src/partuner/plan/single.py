"""The baseline: the whole model on one unit."""

from __future__ import annotations

import math

from partuner.errors import InfeasiblePlanError
from partuner.plan.common import lower_bound
from partuner.plan.memory import format_bytes
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.simulate import partition_cost

__all__ = ["SingleUnit"]


@register
class SingleUnit(Scheduler):
    """Every node on the one unit where the whole model as one partition is cheapest.

    Cheapest: call overhead + node costs - fused-group savings; the nodes run back to back in
    topological order. The baseline every other scheduler is compared against (no transfers,
    one partition). Units that cannot run some node, or cannot hold the whole model in memory
    (:meth:`Problem.memory_use`), are skipped; ties go to the unit listed first.
    """

    name = "single"

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        # rank by what the one partition costs: call overhead + nodes - fused-group savings
        totals = {u: partition_cost(problem, u, problem.nodes) for u in problem.units}
        able = [u for u in problem.units if math.isfinite(totals[u])]
        if not able:
            raise InfeasiblePlanError(
                f"no single unit can run every node of {problem.name!r} "
                f"(tried {problem.units}); use a scheduler that splits, such as 'heft'"
            )
        need = problem.memory_use(problem.nodes)
        roomy = [u for u in able if need <= problem.capacity(u)]
        if not roomy:
            held = ", ".join(f"{u} {format_bytes(problem.capacity(u))}" for u in able)
            raise InfeasiblePlanError(
                f"no single unit that can run every node of {problem.name!r} holds it in "
                f"memory: it needs {format_bytes(need)}, they hold {held}; use a scheduler "
                "that splits, such as 'heft'"
            )
        unit = min(roomy, key=lambda u: totals[u])
        slots: dict[str, Slot] = {}
        t = 0.0
        for n in problem.nodes:
            end = t + problem.cost[n][unit]
            slots[n] = Slot(n, unit, t, end)
            t = end
        return Schedule(slots, self.name, "heuristic", lower_bound(problem))
