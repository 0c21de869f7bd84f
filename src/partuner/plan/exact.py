"""An exact scheduler: the node-level problem as a CP-SAT model, warm-started, honest about proof.

The model (OR-Tools CP-SAT, imported only when a schedule is asked for) is built on an
:class:`Instance`, the part of a :class:`~partuner.plan.problem.Problem` it needs:

* time is integer **ticks** of ``tick_us`` µs (default 0.1 µs); every cost and delay is rounded
  *down* to whole ticks, so the integer model is a relaxation of the real one and its bound,
  converted back to µs, is a valid lower bound;
* one boolean ``x[n, u]`` per node and unit that can run it (finite cost), exactly one true per
  node, and one optional interval of ``cost[n][u]`` ticks per such pair, sharing the node's
  start and end variables;
* one ``NoOverlap`` per hardware *resource* (``Problem.resources_of``) over the intervals of
  every unit occupying it, so units sharing cores never run at once (zero-length intervals
  count as instants, as :meth:`Schedule.validate` does);
* for each edge ``p -> n``: ``start[n] >= end[p]``, and ``start[n] >= end[p] + cut_us(p, n,
  u, v)`` when ``x[p, u]`` and ``x[n, v]`` with ``u != v``: the transfer *plus* the call
  overhead and boundary cost of the new partition ``n`` must open on ``v``
  (:meth:`Problem.cut_us`); one constraint per ``v`` when the delay into ``v`` does not depend
  on ``u``, else one per pair;
* a node without inputs starts on ``u`` no earlier than ``u``'s call overhead: the first
  partition on a unit pays it too, so one unit alone is not made to look free;
* per unit whose memory could overflow (``Problem.memory_limited``): the weights of the nodes
  on it plus an integer ``peak`` at least the output bytes of each of them stay within its
  capacity (:meth:`Problem.memory_use`, exactly, as linear constraints);
* minimise the makespan.

Returned schedules are re-timed in floating point in the solver's order with these same delays
(:func:`cut_retime`), so they satisfy :meth:`Schedule.validate`, which checks the smaller
``comm_us`` delays. Their ``makespan`` is the model's objective, not a plan's latency.

The bound also bounds plans: from any plan's simulated run (``simulate``) one can read off a
schedule obeying these delays and release times whose makespan is at most the plan's predicted
latency plus the savings of the fused groups it runs whole. So the model's bound less the total
possible group saving (:func:`group_slack`) bounds the predicted latency of every plan of the
problem; ``lower_bound`` is that, or :func:`~partuner.plan.common.lower_bound` if larger.

Not modelled: fused groups (``Problem.groups``): a slot must last exactly its node's cost, so
their savings cannot appear in a schedule; they show only in the partition simulation, which
``auto`` judges plans by. Neither are the partition effects the delays only approximate: a
partition's outputs leave when it ends, its call overhead and boundary cost occupy its unit,
and the boundary bytes of several inputs add up.

The solver is warm-started (``AddHint``) with the best of the registered heuristics' schedules
by this model's makespan (each re-timed under these delays). ``status`` is ``"optimal"`` only
when CP-SAT proves the rounded model optimal: the schedule is then optimal up to the rounding,
at most a tick per cost and delay along its critical path. Problems above ``max_nodes`` nodes
are split at their articulation nodes and solved region by region
(:mod:`partuner.plan.decompose`), which is exact when every region is solved to optimality;
not when memory is limited, since capacity couples the regions: such problems are solved
whole. When no hint fits the units' memory the model starts without one, its horizon the
length of a serial schedule.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from partuner.errors import InfeasiblePlanError, PartunerError
from partuner.plan.clock import WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, get_scheduler, register, scheduler_names
from partuner.plan.schedule import Schedule, Slot

__all__ = [
    "Exact",
    "Instance",
    "Solution",
    "TICK_US",
    "cut_retime",
    "group_slack",
    "heuristic_names",
    "heuristic_schedules",
    "schedule_order",
    "solve",
    "solver_available",
    "to_schedule",
]

log = logging.getLogger(__name__)

TICK_US = 0.1
DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MAX_NODES = 60
DEFAULT_REGION_NODES = 25

# Registered names that are not quick heuristics (to warm-start from) or that call us.
NOT_HEURISTICS = frozenset({"auto", "exact", "pexact", "brute", "brute_force", "oracle"})

# Rounding down to ticks tolerates this much float noise (in ticks) per rounded quantity.
_EPS_TICKS = 1e-6


def solver_available() -> bool:
    """True when OR-Tools (the ``solver`` extra) can be imported."""
    try:
        _cp_model()
    except PartunerError:
        return False
    return True


def _cp_model() -> Any:
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise PartunerError(
            "the exact scheduler needs OR-Tools: pip install partuner[solver]"
        ) from None
    return cp_model


@dataclass
class Instance:
    """The node-level problem the CP-SAT model is built from.

    ``dur[n]`` maps each unit allowed to run ``n`` to its duration (µs); ``preds[n]`` are the
    nodes ``n`` waits for; ``delay(p, n, u, v)`` is the wait between ``p`` ending on ``u`` and
    ``n`` starting on ``v`` (``u != v``); ``resources(u)`` the hardware ``u`` occupies;
    ``release[n][u]`` the earliest start of ``n`` on ``u`` (default 0); ``capacity[u]`` the
    bytes unit ``u`` holds (units not listed are unlimited), ``weight[n]`` and ``act[n]`` the
    weight and output bytes of ``n`` (:meth:`Problem.memory_use`).
    Decomposition builds instances for parts of a problem, with some nodes pinned to a unit.
    """

    nodes: list[str]
    dur: dict[str, dict[str, float]]
    preds: dict[str, list[str]]
    delay: Callable[[str, str, str, str], float]
    resources: Callable[[str], frozenset[str]]
    release: dict[str, dict[str, float]] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    weight: dict[str, int] = field(default_factory=dict)
    act: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, problem: Problem) -> Instance:
        """The whole of ``problem``: :meth:`Problem.cut_us` delays, a node without inputs
        released on ``u`` after ``u``'s call overhead (the first partition pays it too), and
        the units' memory when it is limited."""
        limited = problem.memory_limited
        return cls(
            nodes=list(problem.nodes),
            dur={
                n: {u: problem.cost[n][u] for u in problem.runnable_units(n)} for n in problem.nodes
            },
            preds={n: list(problem.preds(n)) for n in problem.nodes},
            delay=problem.cut_us,
            resources=problem.resources_of,
            release={
                n: {u: problem.call_overhead_us.get(u, 0.0) for u in problem.runnable_units(n)}
                for n in problem.nodes
                if not problem.preds(n)
            },
            capacity={
                u: math.floor(problem.capacity(u))
                for u in problem.units
                if limited and math.isfinite(problem.capacity(u))
            },
            weight={n: problem.weights(n) for n in problem.nodes} if limited else {},
            act={n: problem.activation_bytes(n) for n in problem.nodes} if limited else {},
        )

    def fits(self, assignment: Mapping[str, str]) -> bool:
        """Whether ``assignment`` keeps every unit within its ``capacity``."""
        if not self.capacity:
            return True
        weights: dict[str, int] = {}
        peak: dict[str, int] = {}
        for n, u in assignment.items():
            weights[u] = weights.get(u, 0) + self.weight.get(n, 0)
            peak[u] = max(peak.get(u, 0), self.act.get(n, 0))
        return all(weights.get(u, 0) + peak.get(u, 0) <= c for u, c in self.capacity.items())


@dataclass
class Solution:
    """Where and in which order the nodes of an instance run, and what is proven about it.

    ``order`` is a topological order consistent with every resource's sequence; ``status`` is
    ``"optimal"`` (CP-SAT proved the rounded model optimal) or ``"feasible"``; ``bound_us`` a
    lower bound on the instance's makespan; ``makespan_us`` that of :func:`cut_retime`.
    """

    assignment: dict[str, str]
    order: list[str]
    status: str
    bound_us: float
    makespan_us: float


def _ticks(us: float, tick: float) -> int:
    return max(0, math.floor(us / tick + _EPS_TICKS))


def cut_retime(
    inst: Instance,
    assignment: Mapping[str, str],
    order: Sequence[str],
    *,
    tick_us: float | None = None,
) -> dict[str, tuple[float, float]]:
    """Earliest ``(start, end)`` of each node given its unit and the order the nodes start in.

    Nodes are taken in ``order`` (topological); each starts once its unit's resources are free
    and its inputs have arrived (``inst.delay`` across units). With ``tick_us`` the times are
    integer ticks of the rounded-down costs and delays, as in the CP-SAT model.
    """

    def q(us: float) -> float:
        return us if tick_us is None else _ticks(us, tick_us)

    free: dict[str, float] = {}
    times: dict[str, tuple[float, float]] = {}
    for n in order:
        u = assignment[n]
        res = inst.resources(u)
        start = max((free.get(r, 0) for r in res), default=0)
        start = max(start, q(inst.release.get(n, {}).get(u, 0.0)))
        for p in inst.preds[n]:
            pu = assignment[p]
            arrive = times[p][1] + (0 if pu == u else q(inst.delay(p, n, pu, u)))
            start = max(start, arrive)
        end = start + q(inst.dur[n][u])
        times[n] = (start, end)
        for r in res:
            free[r] = end
    return times


def _makespan(times: Mapping[str, tuple[float, float]]) -> float:
    return max((e for _, e in times.values()), default=0.0)


def solve(
    inst: Instance,
    *,
    time_limit: float,
    hints: Iterable[tuple[Mapping[str, str], Sequence[str]]] = (),
    tick_us: float = TICK_US,
    workers: int = 1,
    seed: int = 0,
    clock: WorkClock | None = None,
) -> Solution:
    """Minimise the makespan of ``inst`` with CP-SAT in ``time_limit`` s of work on ``clock``.

    ``hints`` are ``(assignment, order)`` pairs (e.g. heuristic schedules; every node on its
    cheapest unit, in ``inst.nodes`` order, is always one more). The one with the smallest
    makespan among those within the units' memory, re-timed in ticks, warm-starts the solver
    and bounds its horizon; the better of it and the solver's answer, re-timed in µs, is
    returned. Without such a hint the solver starts cold, within a serial schedule's length.

    Raises
    ------
    PartunerError
        OR-Tools is not installed.
    InfeasiblePlanError
        No hint fits the units' memory and the solver found no placement that does (proved
        none exists, or ran out of time).
    """
    cp_model = _cp_model()
    clock = WorkClock.of(clock, time_limit)
    index = {n: i for i, n in enumerate(inst.nodes)}
    if not inst.nodes:
        return Solution({}, [], "optimal", 0.0, 0.0)
    cands = [(dict(a), list(o)) for a, o in hints]
    cands.append(
        ({n: min(inst.dur[n], key=inst.dur[n].__getitem__) for n in inst.nodes}, inst.nodes)
    )
    cands = [c for c in cands if inst.fits(c[0])]
    if not cands:  # no warm start within memory: search from scratch
        if time_limit <= 0:
            raise InfeasiblePlanError("no hint fits the units' memory and no time is left")
        return _solve_model(inst, None, time_limit, tick_us, workers, seed, cp_model, index, clock)
    best_a, best_o = min(
        cands, key=lambda c: _makespan(cut_retime(inst, c[0], c[1], tick_us=tick_us))
    )
    if time_limit <= 0:  # no time to build a model: the warm start, unproven
        span = _makespan(cut_retime(inst, best_a, best_o))
        return Solution(best_a, list(best_o), "feasible", 0.0, span)
    return _solve_model(
        inst, (best_a, list(best_o)), time_limit, tick_us, workers, seed, cp_model, index, clock
    )


def _serial_horizon(inst: Instance, tick_us: float) -> int:
    """Ticks a serial schedule in ``inst.nodes`` order takes at most, whatever the units."""
    total = 0
    for n in inst.nodes:
        total += max(_ticks(c, tick_us) for c in inst.dur[n].values())
        total += max((_ticks(r, tick_us) for r in inst.release.get(n, {}).values()), default=0)
        for p in inst.preds[n]:
            total += max(
                (
                    _ticks(inst.delay(p, n, u, v), tick_us)
                    for u in inst.dur[p]
                    for v in inst.dur[n]
                    if u != v
                ),
                default=0,
            )
    return total


def _add_capacity(m: Any, inst: Instance, x: Mapping[tuple[str, str], Any]) -> None:
    """Per unit whose memory could overflow: weights on it + peak output <= capacity."""
    for u, cap in inst.capacity.items():
        on = [n for n in inst.nodes if u in inst.dur[n]]
        top = max((inst.act.get(n, 0) for n in on), default=0)
        if sum(inst.weight.get(n, 0) for n in on) + top <= cap:
            continue
        peak = m.new_int_var(0, top, f"peak[{u}]")
        for n in on:
            if inst.act.get(n, 0) > 0:
                ct = m.add(peak >= inst.act[n])
                if x[n, u] is not True:
                    ct.only_enforce_if(x[n, u])
        m.add(sum(inst.weight.get(n, 0) * x[n, u] for n in on) + peak <= cap)


def _solve_model(
    inst: Instance,
    hint: tuple[dict[str, str], list[str]] | None,
    time_limit: float,
    tick_us: float,
    workers: int,
    seed: int,
    cp_model: Any,
    index: Mapping[str, int],
    clock: WorkClock,
) -> Solution:
    """Build and solve the CP-SAT model of ``inst``, warm-started from ``hint`` if given."""
    best_a, best_o = hint if hint is not None else ({}, [])
    hint_ticks = cut_retime(inst, best_a, best_o, tick_us=tick_us)
    horizon = int(_makespan(hint_ticks)) if hint is not None else _serial_horizon(inst, tick_us)

    m = cp_model.CpModel()
    start = {n: m.new_int_var(0, horizon, f"s[{n}]") for n in inst.nodes}
    end = {n: m.new_int_var(0, horizon, f"e[{n}]") for n in inst.nodes}
    x: dict[tuple[str, str], Any] = {}  # a BoolVar, or True for a node's only unit
    on_resource: dict[str, list[Any]] = {}
    for n in inst.nodes:
        only = len(inst.dur[n]) == 1
        for u, c in inst.dur[n].items():
            d = _ticks(c, tick_us)
            if only:
                x[n, u] = True
                iv = m.new_fixed_size_interval_var(start[n], d, f"i[{n},{u}]")
                m.add(end[n] == start[n] + d)
            else:
                x[n, u] = m.new_bool_var(f"x[{n},{u}]")
                iv = m.new_optional_fixed_size_interval_var(start[n], d, x[n, u], f"i[{n},{u}]")
                m.add(end[n] == start[n] + d).only_enforce_if(x[n, u])
            for r in inst.resources(u):
                on_resource.setdefault(r, []).append(iv)
        if not only:
            m.add_exactly_one(x[n, u] for u in inst.dur[n])
        rel = {u: _ticks(r, tick_us) for u, r in inst.release.get(n, {}).items()}
        if rel and len(set(rel.values())) == 1 and set(rel) >= set(inst.dur[n]):
            m.add(start[n] >= next(iter(rel.values())))
        else:
            for u, r in rel.items():
                if r > 0 and (n, u) in x:
                    ct = m.add(start[n] >= r)
                    if x[n, u] is not True:
                        ct.only_enforce_if(x[n, u])
    for ivs in on_resource.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    for n in inst.nodes:
        for p in inst.preds[n]:
            m.add(start[n] >= end[p])
            _add_cross_unit_delays(m, inst, x, start, end, p, n, tick_us)
    has_succ = {p for n in inst.nodes for p in inst.preds[n]}
    span = m.new_int_var(0, horizon, "makespan")
    for n in inst.nodes:
        if n not in has_succ:
            m.add(span >= end[n])
    _add_capacity(m, inst, x)
    m.minimize(span)
    if hint is not None:
        for (n, u), b in x.items():
            if b is not True:
                m.add_hint(b, best_a[n] == u)
        for n in inst.nodes:
            m.add_hint(start[n], int(hint_ticks[n][0]))
            m.add_hint(end[n], int(hint_ticks[n][1]))
        m.add_hint(span, horizon)

    code = clock.solve(solver := clock.solver(cp_model, time_limit, workers, seed), m)
    slack = len(inst.nodes) * _EPS_TICKS * tick_us  # float noise the rounding tolerated
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment = {
            n: next(u for u in inst.dur[n] if x[n, u] is True or solver.boolean_value(x[n, u]))
            for n in inst.nodes
        }
        got = {n: (solver.value(start[n]), solver.value(end[n])) for n in inst.nodes}
        order = sorted(got, key=lambda n: (got[n][0], got[n][1], index[n]))
        bound = solver.objective_value if code == cp_model.OPTIMAL else solver.best_objective_bound
    elif hint is None and code in (cp_model.UNKNOWN, cp_model.INFEASIBLE):
        raise InfeasiblePlanError(
            "no placement of the nodes fits the units' memory (proved by CP-SAT)"
            if code == cp_model.INFEASIBLE
            else f"CP-SAT found no placement within the units' memory in {time_limit:.3g} s "
            "and no heuristic found one; give it more time or the units more memory"
        )
    elif code == cp_model.UNKNOWN:
        assignment, order = best_a, list(best_o)
        bound = solver.best_objective_bound
    else:  # the hint is a solution, so anything else is a bug in the model
        raise InfeasiblePlanError(
            f"CP-SAT answered {solver.status_name(code)} on a feasible instance: "
            f"{m.validate() or 'no model error reported'}"
        )
    status = "optimal" if code == cp_model.OPTIMAL else "feasible"
    bound_us = max(0.0, math.ceil(bound - 1e-6) * tick_us - slack) if math.isfinite(bound) else 0.0
    times = cut_retime(inst, assignment, order)
    if hint is not None:
        hint_times = cut_retime(inst, best_a, best_o)
        if _makespan(hint_times) < _makespan(times):  # rounding can favour the hint a tick or two
            assignment, order, times = best_a, list(best_o), hint_times
    log.debug(
        "CP-SAT %s in %.2fs: %d nodes, makespan %.3f us, bound %.3f us",
        solver.status_name(code),
        solver.wall_time,
        len(inst.nodes),
        _makespan(times),
        bound_us,
    )
    return Solution(assignment, order, status, min(bound_us, _makespan(times)), _makespan(times))


def _add_cross_unit_delays(
    m: Any,
    inst: Instance,
    x: Mapping[tuple[str, str], Any],
    start: Mapping[str, Any],
    end: Mapping[str, Any],
    p: str,
    n: str,
    tick: float,
) -> None:
    """``start[n] >= end[p] + delay`` whenever ``p`` and ``n`` sit on different units.

    When the delay into ``v`` is the same from every other unit (the usual case: one default
    link), one constraint per ``v`` does: ``x[n, v] and not x[p, v]``; otherwise one per pair.
    """
    for v in inst.dur[n]:
        others = [u for u in inst.dur[p] if u != v]
        delays = {u: _ticks(inst.delay(p, n, u, v), tick) for u in others}
        if not delays or max(delays.values()) == 0:
            continue
        if len(set(delays.values())) == 1:
            # p on v means no delay into n on v; p anywhere else means the one delay.
            d = next(iter(delays.values()))
            p_on_v = x.get((p, v), False)
            if p_on_v is True:
                continue
            cond = [x[n, v]] if p_on_v is False else [x[n, v], p_on_v.Not()]
            m.add(start[n] >= end[p] + d).only_enforce_if([c for c in cond if c is not True])
            continue
        for u, d in delays.items():
            if d > 0:
                cond = [c for c in (x[p, u], x[n, v]) if c is not True]
                m.add(start[n] >= end[p] + d).only_enforce_if(cond)


def group_slack(problem: Problem) -> float:
    """The most fused groups can save a plan: each group's largest saving, summed (µs)."""
    return sum(
        max((g.saving(problem, u) for u in problem.units), default=0.0) for g in problem.groups
    )


def heuristic_names() -> list[str]:
    """The registered schedulers used to warm-start the exact ones (all but exact/auto/oracles)."""
    return [n for n in scheduler_names() if n not in NOT_HEURISTICS]


def heuristic_schedules(problem: Problem, time_limit: float | None = None) -> dict[str, Schedule]:
    """Every heuristic's valid schedule of ``problem``, by name (failures are skipped)."""
    out: dict[str, Schedule] = {}
    for name in heuristic_names():
        try:
            s = get_scheduler(name).schedule(problem, time_limit=time_limit)
            s.validate(problem)
        except PartunerError as exc:  # e.g. 'single' when no unit runs every node
            log.info("warm start: scheduler %r gave no schedule: %s", name, exc)
            continue
        out[name] = s
    return out


def schedule_order(problem: Problem, schedule: Schedule) -> list[str]:
    """The nodes of a valid schedule by start (then end, then topological index)."""
    sl = schedule.slots
    return sorted(problem.nodes, key=lambda n: (sl[n].start, sl[n].end, problem.index(n)))


def to_schedule(
    problem: Problem, sol: Solution, name: str, status: str, bound_us: float
) -> Schedule:
    """The :class:`Schedule` of ``sol`` (float times, ``cut_us`` delays) for ``problem``."""
    times = cut_retime(Instance.of(problem), sol.assignment, sol.order)
    slots = {n: Slot(n, sol.assignment[n], s, e) for n, (s, e) in times.items()}
    return Schedule(slots, name, status, bound_us)


@register
class Exact(Scheduler):
    """Optimal node-level schedules by constraint programming (CP-SAT), with a proof or a bound.

    The model (see the module docstring) is the classic disjunctive formulation of scheduling
    a task graph on heterogeneous processors with communication delays, solved by L. Perron and
    F. Didier's CP-SAT (OR-Tools, https://developers.google.com/optimization); warm-starting
    from heuristics and reporting status and bound follow SAGA's SMT scheduler (J. Coleman and
    B. Krishnamachari, "Scheduling Algorithms Gauntlet", 2023).

    ``time_limit`` (seconds, default 10) covers the warm-start heuristics and the solve.
    Problems of more than ``max_nodes`` nodes (default 60) are decomposed at their articulation
    nodes into regions of about ``region_nodes`` nodes (default 25), which CP-SAT proves far
    faster than the whole model (solve times: benchmarks/plan_bench.py). ``tick_us`` is the
    time unit;
    ``workers`` CP-SAT's threads (default: the CPU count, at most 8).
    """

    name = "exact"

    def __init__(
        self,
        *,
        tick_us: float = TICK_US,
        max_nodes: int = DEFAULT_MAX_NODES,
        region_nodes: int = DEFAULT_REGION_NODES,
        workers: int | None = None,
        seed: int = 0,
    ) -> None:
        self.tick_us = tick_us
        self.max_nodes = max_nodes
        self.region_nodes = region_nodes
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.seed = seed

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        return self.solve(problem, time_limit=time_limit)

    def solve(
        self,
        problem: Problem,
        *,
        time_limit: float | None = None,
        hints: Iterable[Schedule] | None = None,
        clock: WorkClock | None = None,
    ) -> Schedule:
        """Like :meth:`schedule`, warm-starting from ``hints`` (valid schedules) if given,
        else from every registered heuristic; ``clock`` is the caller's, if any."""
        problem.validate()
        _cp_model()  # fail early, naming the extra to install
        budget = DEFAULT_TIME_LIMIT_S if time_limit is None else max(0.0, time_limit)
        deadline = (clock := WorkClock.of(clock, budget)).now() + budget
        if hints is None:
            hints = heuristic_schedules(problem, budget * 0.1).values()
        pairs = [(s.assignment, schedule_order(problem, s)) for s in hints]
        left = max(0.0, deadline - clock.now())
        # capacity couples the regions, so a memory-limited problem is solved whole
        if len(problem.nodes) > self.max_nodes and not problem.memory_limited:
            from partuner.plan.decompose import solve_decomposed

            sol = solve_decomposed(
                problem,
                time_limit=left,
                hints=pairs,
                tick_us=self.tick_us,
                workers=self.workers,
                max_region=self.region_nodes,
                seed=self.seed,
                clock=clock,
            )
        else:
            sol = solve(
                Instance.of(problem),
                time_limit=left,
                hints=pairs,
                tick_us=self.tick_us,
                workers=self.workers,
                seed=self.seed,
                clock=clock,
            )
        bound = max(lower_bound(problem), sol.bound_us - group_slack(problem))
        return to_schedule(problem, sol, self.name, sol.status, bound)
