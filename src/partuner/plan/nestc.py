"""NEST-C's PartitionTuner: per-branch Viterbi unit choice, parallel siblings by rule.

Two variants: ``nestc`` reproduces the method with its quirks, ``nestc-repaired`` fixes them.
:func:`nestc_stages` gives the method's decisions; the schedulers turn them into a schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby, pairwise
from typing import ClassVar

from partuner.plan.dag_branches import Branch, nest_branches, nest_siblings
from partuner.plan.memory import no_fit_error, overflow, pack
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, register
from partuner.plan.schedule import Schedule
from partuner.plan.static import Timeline

__all__ = ["NestC", "NestCRepaired", "Stage", "nestc_stages", "SWITCH_PENALTY_US"]

SWITCH_PENALTY_US = 2000.0  # NEST-C's fixed cost of changing unit inside a branch
MAX_INSTANCES = 4  # accelerator instances NEST-C spreads parallel partitions over


@dataclass(frozen=True)
class Stage:
    """A step of NEST-C's execution order: partitions ``(unit, nodes)`` that run one after
    another, or, when ``parallel``, side by side (started together, joined before the next)."""

    parallel: bool
    partitions: tuple[tuple[str, tuple[str, ...]], ...]


def nestc_stages(problem: Problem, *, repaired: bool = False) -> list[Stage]:
    """NEST-C's decisions for ``problem``: the unit of every node and what runs in parallel.

    Follows NEST-C's PartitionTuner (lib/Partitioner/NestPartitioner.cpp):

    1. Cut the DAG into branches (:func:`~partuner.plan.dag_branches.nest_branches`).
    2. Choose units per branch by a shortest-path (Viterbi) DP over the branch's nodes in
       order, with p the previous node of the branch and comm the transfer cost of x's input:
       ``cost[x, U] = exe[x, U]`` for the first node, else the minimum over units A of
       ``cost[p, A] + exe[x, U] - comm`` when ``A == U`` (or, when ``p, x`` form a profiled
       fused pair cheaper on U than apart, ``cost[p, A] - time(p on A) + time(p+x on U) -
       comm``), and ``cost[p, A] + exe[x, U] + 2 comm + 2000 µs`` when ``A != U``. The last
       node takes its cheapest unit and the others follow the argmins back; ties go to the
       unit listed later.
    3. Mark siblings parallel by rule. With two or more accelerators, siblings of a join each
       wholly on an accelerator, two or more of them, are parallel. With one accelerator,
       siblings each wholly on one unit are parallel when at most one is on the accelerator
       and at most one on the default unit.
    4. Level by level, deepest first: a level's parallel branches (when two or more) form one
       parallel stage, each given an accelerator instance (up to 4, largest first to the
       least-loaded); the other branches of the level are concatenated and cut where the unit
       changes, each piece one sequential stage.

    An accelerator is any unit but the default unit (``Problem.default``). Accelerators with
    the same costs on every node and fused group are instances of one kind: the DP chooses
    kinds, step 4 instances (non-parallel partitions go to a kind's first instance).

    ``repaired=False`` keeps NEST-C's quirks: (a) the default unit's cost is not its profile
    but infinite when an accelerator can run the node and 0 otherwise; (b) a missing profile
    entry reads as 0 (a problem has no missing entries: where NEST-C reads the profile without
    checking support, the time of p in the fused-pair formula, an infinite cost reads as 0,
    which changes no decision because that path is already infinite); (c) staying on a unit
    subtracts comm. ``repaired=True`` uses the default unit's real cost, reads a missing or
    infinite entry as infinite, and subtracts nothing.

    What a problem does not hold is taken as follows. comm: the transfer time of the bytes x
    reads, averaged over the links from the default unit to each accelerator (0 for a node
    without inputs or without accelerators). Fused pairs: ``Problem.groups`` of exactly two
    nodes (longer groups are ignored, as in NEST-C). Instance weights: the partition's cost
    (NEST-C weighs by weight bytes, which a problem does not hold).

    Returns
    -------
    list of Stage
        In execution order; every node once.
    """
    default = problem.default
    kinds = _kinds(problem)
    accelerators = [u for u in problem.units if u != default]
    pairs = {g.nodes: g for g in problem.groups if len(g.nodes) == 2}
    branches = nest_branches(problem)
    chosen: dict[str, str] = {}  # node -> kind
    for b in branches:
        chosen.update(zip(b.nodes, _viterbi(problem, b, kinds, pairs, repaired), strict=True))

    single = {b: chosen[b.nodes[0]] for b in branches if len({chosen[n] for n in b.nodes}) == 1}
    parallel: set[Branch] = set()
    for sib in nest_siblings(problem, branches):
        wholly = [b for b in sib.branches if b in single]
        if len(accelerators) >= 2:
            on_acc = [b for b in wholly if single[b] != default]
            if len(on_acc) >= 2:
                parallel.update(on_acc)
        elif len(accelerators) == 1:
            on_acc = sum(single[b] != default for b in wholly)
            if len(wholly) >= 2 and on_acc <= 1 and len(wholly) - on_acc <= 1:
                parallel.update(wholly)

    stages: list[Stage] = []
    for _, level in groupby(branches, key=lambda b: b.level):
        same = list(level)
        par = [b for b in same if b in parallel]
        if len(par) >= 2:
            stages.append(Stage(True, _instances(problem, par, single, kinds)))
            same = [b for b in same if b not in parallel]
        nodes = [n for b in same for n in b.nodes]
        for kind, run in groupby(nodes, key=lambda n: chosen[n]):
            stages.append(Stage(False, ((kind, tuple(run)),)))  # a kind's first instance
    return stages


def _kinds(problem: Problem) -> dict[str, list[str]]:
    """``{kind: instances}``: the default unit alone, accelerators grouped by identical costs;
    a kind is named after its first instance, and kinds are in unit order."""
    kinds: dict[str, list[str]] = {}
    seen: dict[tuple, str] = {}
    for u in problem.units:
        if u == problem.default:
            kinds[u] = [u]
            continue
        signature = (
            tuple(problem.cost[n][u] for n in problem.nodes),
            tuple(g.cost.get(u) for g in problem.groups),
        )
        if signature in seen:
            kinds[seen[signature]].append(u)
        else:
            seen[signature] = u
            kinds[u] = [u]
    return kinds


def _viterbi(
    problem: Problem, branch: Branch, kinds: dict[str, list[str]], pairs: dict, repaired: bool
) -> list[str]:
    """The kind of each node of ``branch`` by NEST-C's DP (see :func:`nestc_stages`)."""
    inf = math.inf
    default = problem.default
    accelerators = [k for k in kinds if k != default]

    def exe(x: str, u: str) -> float:
        c = problem.cost[x][u]
        if math.isinf(c) or repaired or u != default:
            return c
        # quirk (a): the default unit only takes what no accelerator can run, for free
        return inf if any(math.isfinite(problem.cost[x][a]) for a in accelerators) else 0.0

    def profiled(x: str, u: str) -> float:
        c = problem.cost[x][u]
        return 0.0 if math.isinf(c) and not repaired else c  # quirk (b)

    nodes = branch.nodes
    cost = [{u: exe(nodes[0], u) for u in kinds}]
    back: list[dict[str, str]] = [{}]
    for p, x in pairwise(nodes):
        comm = _comm(problem, x)
        stay = 0.0 if repaired else comm  # quirk (c)
        fused = pairs.get((p, x))
        row: dict[str, float] = {}
        arg: dict[str, str] = {}
        for u in kinds:
            e = exe(x, u)
            best, best_a = inf, next(iter(kinds))
            for a in kinds:
                prev = cost[-1][a]
                if math.isinf(prev) or math.isinf(problem.cost[x][u]):
                    total = inf
                elif a != u:
                    total = prev + e + 2 * comm + SWITCH_PENALTY_US
                else:
                    together = fused.cost.get(u, inf) if fused is not None else inf
                    if together < profiled(p, a) + e:
                        total = prev - profiled(p, a) + together - stay
                    else:
                        total = prev + e - stay
                if total <= best:
                    best, best_a = total, a
            row[u], arg[u] = best, best_a
        cost.append(row)
        back.append(arg)
    last = cost[-1]
    unit = min(reversed(list(kinds)), key=lambda u: last[u])  # ties: the later unit
    assert math.isfinite(last[unit]), f"no unit for branch {nodes}"
    out = [unit]
    for i in range(len(nodes) - 1, 0, -1):
        unit = back[i][unit]
        out.append(unit)
    return out[::-1]


def _comm(problem: Problem, x: str) -> float:
    """The transfer cost of ``x``'s input as NEST-C's profile holds it (see nestc_stages)."""
    preds = problem.preds(x)
    others = [u for u in problem.units if u != problem.default]
    if not preds or not others:
        return 0.0
    nbytes = sum(problem.pair_nbytes(p, x) for p in preds)
    return sum(problem.transfer_us(problem.default, u, nbytes) for u in others) / len(others)


def _instances(
    problem: Problem, par: list[Branch], single: dict[Branch, str], kinds: dict[str, list[str]]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Parallel branches to instances of their kind: heaviest first to the least loaded."""
    load: dict[str, float] = {}
    unit_of: dict[Branch, str] = {}

    def weight(b: Branch) -> float:
        return sum(problem.cost[n][single[b]] for n in b.nodes)

    for b in sorted(par, key=weight, reverse=True):
        instances = kinds[single[b]][:MAX_INSTANCES]
        unit = min(instances, key=lambda u: load.get(u, 0.0))
        load[unit] = load.get(unit, 0.0) + weight(b)
        unit_of[b] = unit
    return tuple((unit_of[b], b.nodes) for b in par)


def _run(problem: Problem, stages: list[Stage], name: str) -> Schedule:
    """List-schedule the nodes in NEST-C's order: stage by stage, partition by partition, each
    node at its earliest start after the nodes placed before it on its unit's hardware.

    NEST-C's choice ignores memory: when it overfills a unit, the nodes are moved by
    :func:`~partuner.plan.memory.pack` (each kept on NEST-C's unit where it fits), in the same
    order."""
    unit_of = {n: u for stage in stages for u, nodes in stage.partitions for n in nodes}
    if overflow(problem, unit_of) is not None:
        fitted = pack(problem, unit_of)
        if fitted is None:
            raise no_fit_error(problem)
        unit_of = fitted
    timeline = Timeline(problem, insertion=False)
    for stage in stages:
        for _, nodes in stage.partitions:
            for n in nodes:
                timeline.place(n, unit_of[n])
    return timeline.schedule(name)


@register
class NestC(Scheduler):
    """NEST-C's PartitionTuner, faithful, quirks included.

    J. Park, M. Yu, J. Kwon, J. Park, J. Lee and Y. Kwon, "NEST-C: A deep learning compiler
    framework for heterogeneous computing systems with artificial intelligence accelerators",
    ETRI Journal 46(5):851-864, 2024; the method as implemented in ETRI's nest-compiler,
    lib/Partitioner/NestPartitioner.cpp (see :func:`nestc_stages` for the steps, the quirks
    and how a problem maps onto them).

    The decisions become a schedule by list scheduling in NEST-C's execution order: stage by
    stage, partition by partition, each node on its unit at its earliest start after its
    inputs arrive (real transfers, not the DP's comm and 2000 µs penalty, which only steer the
    choice of units) and after the nodes placed before it on its unit and on units sharing its
    hardware. So each unit runs its nodes in NEST-C's order, and what the parallel rule
    decides shows as the accelerator instance each parallel branch gets. Partitions on
    different units overlap whenever their inputs allow, as partuner's runtime runs them;
    NEST-C's own runtime would also hold a partition outside a parallel group until the one
    before it ends, an idle time a schedule does not model. NEST-C knows no memory capacity:
    a choice that overfills a unit is repaired by moving nodes to units with room
    (:func:`~partuner.plan.memory.pack`, each node kept on NEST-C's unit where it fits).
    """

    name = "nestc"
    repaired: ClassVar[bool] = False

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        return _run(problem, nestc_stages(problem, repaired=self.repaired), self.name)


@register
class NestCRepaired(NestC):
    """NEST-C's PartitionTuner with its quirks fixed: real costs, no comm to stay on a unit.

    Fixed (see :func:`nestc_stages`): the default unit's real cost, missing costs infinite, no
    comm subtracted when staying on a unit. Same reference and schedule construction as
    :class:`NestC`.
    """

    name = "nestc-repaired"
    repaired = True
