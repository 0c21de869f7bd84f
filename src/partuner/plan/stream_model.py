"""Models of the throughput objective: a CP-SAT model of pipelines and a fractional bound.

A stream's period is at least its busiest hardware resource's work per frame
(:func:`~partuner.plan.stream.stream_loads`). Both models below minimise that load.

* :func:`solve_pipeline` (CP-SAT, OR-Tools): each node on one unit. With ``plan=False`` a
  relaxation, whose optimum bounds the period of every plan that runs each frame through the
  same partitions: a used unit pays its per-partition cost once, a value read on a unit that
  did not make it pays that unit's boundary cost once (and its maker's unit the cost of writing
  it out once), node costs are rounded down and fused
  groups saved at their most; with ``max_latency_us``, every path of node costs must fit in
  it. With ``plan=True`` a model whose solutions are plans: partitions are the runs of a unit
  in the problem's topological order (intervals of one topological order never depend on each
  other in a cycle), each paying the per-partition cost.
* :func:`fractional_bound` (an LP, GLOP): each node's work may be shared out between units
  (frames going different ways, as data-parallel copies of a plan do); a unit running any
  share of the frames pays its per-partition cost for that share. It bounds the period of
  every way of running a stream on these units, copies included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from partuner.plan.clock import WorkClock
from partuner.plan.problem import Problem

__all__ = ["PipelineSolution", "fractional_bound", "solve_pipeline"]

_EPS = 1e-6


@dataclass(frozen=True)
class PipelineSolution:
    """What :func:`solve_pipeline` found: a node -> unit assignment (None when it found none)
    and the model's proven bound and value (µs of the busiest resource per frame)."""

    assignment: dict[str, str] | None
    bound_us: float
    value_us: float
    status: str  # "optimal", "feasible", "infeasible" or "unknown"


def _saved_cost(problem: Problem, n: str, u: str) -> float:
    """``n``'s cost on ``u`` less the largest saving of a fused group it is in (bounds stay
    valid when groups run fused)."""
    save = max((g.saving(problem, u) for g in problem.groups_of(n)), default=0.0)
    return max(0.0, problem.cost[n][u] - save)


def _values(problem: Problem) -> dict[Any, tuple[str, float, list[str]]]:
    """Every value crossing an edge: key -> (producer, bytes, consumers)."""
    out: dict[Any, tuple[str, float, list[str]]] = {}
    for i, e in enumerate(problem.edges):
        for key, nbytes in problem.payload(i).items():
            src, size, users = out.get(key, (e.src, nbytes, []))
            if e.dst not in users:
                users.append(e.dst)
            out[key] = (src, max(size, nbytes), users)
    return out


def solve_pipeline(
    problem: Problem,
    *,
    time_limit: float,
    plan: bool = False,
    max_latency_us: float | None = None,
    hint: Mapping[str, str] | None = None,
    clock: WorkClock | None = None,
    seed: int = 0,
) -> PipelineSolution:
    """Minimise the busiest resource's work per frame over node -> unit assignments (module
    docstring: ``plan`` chooses the relaxation or the plan model), in ``time_limit`` budget
    seconds of ``clock``; warm-started from ``hint``."""
    from partuner.plan.exact import _cp_model

    cp_model = _cp_model()
    clock = WorkClock.of(clock, time_limit)
    total = sum(max(problem.cost[n][u] for u in problem.runnable_units(n)) for n in problem.nodes)
    tick = max(0.01, total / 2e6)  # µs per model unit: sums stay well inside 2^31
    rnd = math.floor if not plan else round

    def ticks(us: float) -> int:
        return int(rnd(us / tick + (_EPS if not plan else 0.0)))

    m = cp_model.CpModel()
    x: dict[tuple[str, str], Any] = {}
    for n in problem.nodes:
        units = problem.runnable_units(n)
        for u in units:
            x[n, u] = m.NewBoolVar("")
        m.AddExactlyOne(x[n, u] for u in units)
    load: dict[str, list[tuple[Any, int]]] = {u: [] for u in problem.units}
    for (n, u), var in x.items():
        c = problem.cost[n][u] if plan else _saved_cost(problem, n, u)
        load[u].append((var, ticks(c)))
    for u in problem.units:
        ovh = ticks(problem.call_overhead_us.get(u, 0.0))
        mine = [n for n in problem.nodes if (n, u) in x]
        if ovh <= 0 or not mine:
            continue
        if plan:  # a partition per run of the unit in topological order
            prev = None
            for n in problem.nodes:
                here = x.get((n, u))
                if here is not None:
                    start = m.NewBoolVar("")
                    if prev is None:
                        m.Add(start >= here)
                    else:
                        m.Add(start >= here - prev)
                    load[u].append((start, ovh))
                prev = here
        else:
            used = m.NewBoolVar("")
            for n in mine:
                m.AddImplication(x[n, u], used)
            load[u].append((used, ovh))
    for _key, (src, nbytes, users) in _values(problem).items():
        for u in problem.units:
            rate = problem.boundary_us_per_byte.get(u, 0.0)
            cost = ticks(rate * nbytes)
            readers = [c for c in users if (c, u) in x]
            if cost <= 0 or not readers:
                continue
            y = m.NewBoolVar("")
            for c in readers:  # read on u, made elsewhere: u reads it from another partition
                if (src, u) in x:
                    m.Add(y >= x[c, u] - x[src, u])
                else:
                    m.Add(y >= x[c, u])
            load[u].append((y, cost))
        # made on u and read elsewhere: u writes it out for another partition
        for u in problem.runnable_units(src):
            out = ticks(problem.boundary_out_us_per_byte.get(u, 0.0) * nbytes)
            if out <= 0:
                continue
            z = m.NewBoolVar("")
            for c in users:
                m.Add(z >= x[src, u] - (x[c, u] if (c, u) in x else 0))
            load[u].append((z, out))
    top = sum(sum(c for _, c in terms) for terms in load.values()) + 1
    period = m.NewIntVar(0, top, "period")
    resources: dict[str, list[str]] = {}
    for u in problem.units:
        for r in problem.resources_of(u):
            resources.setdefault(r, []).append(u)
    for members in resources.values():
        m.Add(period >= sum(v * c for u in members for v, c in load[u]))
    for u, cap in problem.memory_bytes.items():
        mine = [(x[n, u], problem.weight_bytes.get(n, 0)) for n in problem.nodes if (n, u) in x]
        if mine:
            m.Add(sum(v * w for v, w in mine) <= int(cap))
    if max_latency_us is not None:
        dur = {
            n: sum(x[n, u] * ticks(_saved_cost(problem, n, u)) for u in problem.runnable_units(n))
            for n in problem.nodes
        }
        limit = (
            math.floor(max_latency_us / tick + _EPS) if not plan else round(max_latency_us / tick)
        )
        start = {n: m.NewIntVar(0, limit, "") for n in problem.nodes}
        for n in problem.nodes:
            for p in problem.preds(n):
                m.Add(start[n] >= start[p] + dur[p])
            m.Add(start[n] + dur[n] <= limit)
    if hint:
        for (n, u), var in x.items():
            m.AddHint(var, 1 if hint.get(n) == u else 0)
    m.Minimize(period)
    solver = clock.solver(cp_model, time_limit, 1, seed)
    code = clock.solve(solver, m)
    status = {
        cp_model.OPTIMAL: "optimal",
        cp_model.FEASIBLE: "feasible",
        cp_model.INFEASIBLE: "infeasible",
    }.get(code, "unknown")
    if status == "infeasible":
        return PipelineSolution(None, math.inf, math.inf, status)
    bound = max(0.0, solver.best_objective_bound) * tick if not plan else 0.0
    if status == "unknown":
        return PipelineSolution(None, bound, math.inf, status)
    assignment = {n: u for (n, u), var in x.items() if solver.Value(var)}
    return PipelineSolution(assignment, bound, solver.objective_value * tick, status)


def fractional_bound(problem: Problem) -> float:
    """The least busiest-resource work per frame (µs) when each node's work may be shared out
    between the units that can run it: a bound on the period of every stream on these units
    (module docstring). Solved as a linear programme with GLOP; 0 when OR-Tools is missing.

    >>> p = Problem(["a"], ["u", "v"], {"a": {"u": 10.0, "v": 10.0}})
    >>> round(fractional_bound(p), 3)  # two copies, each running every other frame
    5.0
    """
    try:
        from ortools.linear_solver import pywraplp
    except ImportError:
        return 0.0
    lp = pywraplp.Solver.CreateSolver("GLOP")
    if lp is None:  # pragma: no cover - GLOP ships with OR-Tools
        return 0.0
    f: dict[tuple[str, str], Any] = {}
    share: dict[str, Any] = {}
    for n in problem.nodes:
        units = problem.runnable_units(n)
        for u in units:
            f[n, u] = lp.NumVar(0.0, 1.0, "")
        lp.Add(sum(f[n, u] for u in units) == 1)
    for u in problem.units:
        share[u] = lp.NumVar(0.0, 1.0, "")  # the share of frames that call u at least once
        for n in problem.nodes:
            if (n, u) in f:
                lp.Add(share[u] >= f[n, u])
    period = lp.NumVar(0.0, lp.infinity(), "period")
    resources: dict[str, list[str]] = {}
    for u in problem.units:
        for r in problem.resources_of(u):
            resources.setdefault(r, []).append(u)
    for members in resources.values():
        work = []
        for u in members:
            work += [f[n, u] * _saved_cost(problem, n, u) for n in problem.nodes if (n, u) in f]
            work.append(share[u] * problem.call_overhead_us.get(u, 0.0))
        lp.Add(period >= sum(work))
    lp.Minimize(period)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:  # pragma: no cover - the LP is always feasible
        return 0.0
    # GLOP's optimum is exact up to its tolerances: take a hair off so the bound stays one
    return max(0.0, period.solution_value() * (1 - 1e-7) - 1e-6)
