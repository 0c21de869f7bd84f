"""Checks of a plan read from a file against the model and units it is to run on.

The file is untrusted (plans travel between people): its nodes must be the model's, its units
defined, each partition's nodes ones its unit runs; a partition listed before one it reads from
is put after it (a unit runs its partitions in the order listed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from partuner.errors import PlanFileError
from partuner.export import PlanFile, cut, dependency_order, partition_order, warn_keys_differ
from partuner.graph import ModelGraph
from partuner.plan import Problem, plan_from_assignment
from partuner.units import Unit, UnitSet

__all__ = ["check_plan_model", "plan_from_file", "unsupported_nodes"]

log = logging.getLogger(__name__)


def _units_named(units: UnitSet) -> str:
    """Where ``units`` came from, for messages: a file, a plan's section or the defaults."""
    if units.source in ("", "default"):
        return "this machine's default units"
    return str(units.source)


def plan_from_file(
    pf: PlanFile,
    graph: ModelGraph,
    units: UnitSet,
    problem: Problem | None = None,
    *,
    fallback: str | None = None,
    runs: bool = True,
) -> PlanFile:
    """Check an imported plan against the model and units; re-predict it if a problem is given.

    With ``fallback`` (a unit of ``units``), partitions on units the units file does not define
    are allowed: the runtime runs them on the fallback unit. ``runs``: the command runs the
    plan (its error then names ``--fallback``, which only such commands have)."""
    unknown = sorted({p.unit for p in pf.partitions} - set(units.units))
    if unknown and fallback is None:
        raise PlanFileError(
            f"plan {pf.source} uses unit(s) {unknown} not defined in {_units_named(units)} "
            f"(known: {list(units.units)}); pass the units file the plan was made with "
            "(--units)"
            + (", or --fallback UNIT to run their partitions on another unit" if runs else "")
        )
    check_plan_model(pf, graph, accepted=False)
    for part in pf.partitions:
        if part.unit not in units.units:
            continue  # on the fallback unit (checked above)
        bad = unsupported_nodes(graph, units[part.unit], part.nodes)
        if bad:
            op = graph.node(bad[0]).op_type
            raise PlanFileError(
                f"plan {pf.source} puts node {bad[0]!r} ({op}) in partition {part.name!r} on "
                f"unit {part.unit!r}, whose ops list leaves out {op}"
                + (f" ({len(bad)} such nodes)" if len(bad) > 1 else "")
                + "; move it to a unit that runs it, or plan again"
            )
    # a prediction wherever a partition runs on a modeled unit, whatever the file said
    pf.modeled = pf.modeled or any(units[p.unit].modeled for p in pf.partitions if p.unit in units)
    warn_keys_differ(pf)  # the plan is accepted: now a warning is worth a line
    if problem is not None:
        plan = plan_from_assignment(problem, pf.node_unit)
        pf.predicted_us = plan.predicted_us
    return pf


def unsupported_nodes(graph: ModelGraph, unit: Unit, nodes: Sequence[str]) -> list[str]:
    """The nodes of ``nodes`` that ``unit`` cannot run (its ``ops`` list leaves them out)."""
    return [n for n in nodes if not unit.supports(graph.node(n), graph)]


def check_plan_model(pf: PlanFile, graph: ModelGraph, *, accepted: bool = True) -> None:
    """Raise PlanFileError if ``pf`` was made for another model: other input shapes, or nodes
    the model does not have (or its nodes left out). Partitions listed before one they read
    from are put after it (a unit runs them in the order listed). ``accepted``: no other check
    follows, so say whether its NEST-C keys describe another plan."""
    for name, dims in pf.input_shapes.items():
        if name not in graph.inputs:
            raise PlanFileError(
                f"plan {pf.source or '(in memory)'} was made for an input {name!r} the model "
                f"does not have (its inputs: {list(graph.inputs)}); is the plan for another model?"
            )
        if name in graph.values and list(graph.values[name].shape) != list(dims):
            raise PlanFileError(
                f"plan {pf.source or '(in memory)'} was made for input {name!r} of shape {dims}, "
                f"the model has {list(graph.values[name].shape)}; is the plan for another model?"
            )
    cut(graph, pf.partitions, check=False)  # names every unknown/missing node
    ordered = dependency_order(graph, pf.partitions)
    if ordered != pf.partitions:
        late = next(a for a, b in zip(ordered, pf.partitions, strict=True) if a != b)
        log.warning(
            "plan %s lists partition %r after partitions that read from it; it is run (and "
            "exported) in an order where each partition comes after those it reads from",
            pf.source or "(in memory)",
            late.name,
        )
        pf.partitions = ordered
    _check_groups(pf, graph)
    if accepted:
        warn_keys_differ(pf)


def _check_groups(pf: PlanFile, graph: ModelGraph) -> None:
    """Raise PlanFileError if a ``parallelPartitions`` group holds a partition that reads,
    directly or not, from another of its group: they cannot run at the same time."""
    if not pf.parallel:
        return
    deps = partition_order(graph, [(p.name, p.nodes) for p in pf.partitions])
    members = dict.fromkeys(q for group in pf.parallel for q in group)
    bit = {q: 1 << k for k, q in enumerate(members)}  # a bit per partition a group names
    before: dict[str, int] = {}  # the members each reads from, directly or not
    for p in pf.partitions:  # in dependency order (check_plan_model put them so)
        before[p.name] = 0
        for q in deps[p.name]:
            before[p.name] |= before[q] | bit.get(q, 0)
    for group in pf.parallel:
        mask = sum(bit.get(p, 0) for p in set(group))
        for p in group:
            hit = before.get(p, 0) & mask
            if hit:
                first = next(q for q in group if bit.get(q, 0) & hit)
                shown = "||".join(group[:4]) + ("||..." if len(group) > 4 else "")
                raise PlanFileError(
                    f"plan {pf.source or '(in memory)'}: `parallelPartitions` group "
                    f"({shown}) cannot run at once: {p} reads from {first}; take "
                    "one of them out of the group, or plan again"
                )
