"""Planning for throughput: the plan whose stream of frames runs fastest (issue 18).

:func:`plan_throughput` judges every candidate by the steady state of its stream
(:func:`~partuner.plan.stream.simulate_stream`, frames in flight chosen by
:func:`~partuner.plan.stream.tune_in_flight`), optionally under a bound on each frame's
latency, and returns the one with the most frames per second. The candidates:

* the **latency plans** the caller made (``make_plan``'s, ``auto``'s among them), run as
  streams, and the same with each unit's partitions merged wherever no cycle forms
  (:func:`merge_for_stream`: a stream pays every call's overhead on every frame);
* the **best single unit**: the whole model as one partition on each unit that runs it;
* **data-parallel copies**: the whole model on each of a set of units that share no hardware,
  each frame on one of them (the copies with the most frames per second together);
* **greedy pipelines** (:func:`greedy_pipelines`): a topological order cut into stages that
  fill each unit in turn up to a period, the least period found by bisection, no solver;
* **pipelines** from CP-SAT (:func:`~partuner.plan.stream_model.solve_pipeline`: the busiest
  resource's work per frame, partitions as runs of a topological order), then a local search
  that moves nodes and partitions off the busiest resource.

The bound on the period is :func:`~partuner.plan.stream_model.fractional_bound` (every stream,
copies included), or, where no two units could run copies, the larger of it and the CP-SAT
relaxation's bound. The budget is deterministic work (:class:`~partuner.plan.clock.WorkClock`),
so the same problem gives the same plan.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from partuner.errors import InfeasiblePlanError
from partuner.plan.clock import WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.memory import overflow
from partuner.plan.partitions import Partition, Plan
from partuner.plan.problem import Problem
from partuner.plan.simulate import partition_cost, simulate
from partuner.plan.stream import (
    SLACK_IN_FLIGHT,
    StreamTiming,
    simulate_stream,
    stream_loads,
    tune_in_flight,
)
from partuner.plan.stream_model import fractional_bound, solve_pipeline
from partuner.plan.stream_search import (
    balance,
    greedy_pipelines,
    interval_parts,
    merge_for_stream,
)

__all__ = [
    "StreamPlan",
    "ThroughputResult",
    "data_parallel_units",
    "greedy_pipelines",
    "merge_for_stream",
    "plan_throughput",
    "stream_plan_of",
]

log = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S = 10.0
_MODEL_SHARE = 0.3  # of the budget, for the CP-SAT relaxation's bound
_PLAN_SHARE = 0.5  # of what is left, for the CP-SAT plan model; the rest: the local search


@dataclass(frozen=True)
class StreamPlan:
    """A stream plan: the partitions each frame runs through (``plan``), and possibly more
    copies of them on other units (``copies``: unit renames), each frame going to one copy.

    ``timings[i]`` is copy ``i``'s predicted stream (copy 0: ``plan`` itself)."""

    name: str
    plan: Plan
    timings: tuple[StreamTiming, ...]
    copies: tuple[dict[str, str], ...] = ()

    @property
    def fps(self) -> float:
        """Predicted frames per second of all copies together."""
        return sum(t.fps for t in self.timings)

    @property
    def period_us(self) -> float:
        """Predicted time between frames leaving (µs)."""
        return 1e6 / self.fps if self.fps > 0 else math.inf

    @property
    def in_flight(self) -> int:
        """Frames in flight, over all copies."""
        return sum(t.in_flight for t in self.timings)

    def latency_us(self, q: float = 50.0) -> float:
        """The ``q``-th percentile of a frame's predicted latency (the slowest copy's)."""
        return max(t.latency_us(q) for t in self.timings)

    @property
    def units(self) -> list[str]:
        """Every unit the stream uses, copies included."""
        out = list(self.plan.units)
        for copy in self.copies:
            out += [copy.get(u, u) for u in self.plan.units]
        return list(dict.fromkeys(out))

    @property
    def utilisation(self) -> dict[str, float]:
        """Predicted share of time each unit is busy."""
        out: dict[str, float] = {}
        for t, rename in zip(self.timings, [{}, *self.copies], strict=True):
            for u, share in t.utilisation().items():
                out[rename.get(u, u)] = share
        return out


@dataclass
class ThroughputResult:
    """What :func:`plan_throughput` found: the best stream plan, every candidate, the
    baselines, and the bound (µs per frame) no stream on these units beats."""

    best: StreamPlan
    candidates: dict[str, StreamPlan]
    bound_us: float
    status: str
    baselines: dict[str, StreamPlan] = field(default_factory=dict)
    max_latency_us: float | None = None

    @property
    def fps_bound(self) -> float:
        """Frames per second no stream on these units exceeds."""
        return 1e6 / self.bound_us if self.bound_us > 0 else math.inf


def _as_plan(problem: Problem, parts: Sequence[Partition], name: str, status: str) -> Plan:
    """``parts`` as a :class:`Plan`, timed by the latency simulation."""
    timing = simulate(problem, parts)
    timed = [
        Partition(p.name, p.unit, p.nodes, timing.start_us[p.name], timing.end_us[p.name])
        for p in parts
    ]
    used = {p.unit for p in parts}
    return Plan(
        partitions=timed,
        units=[u for u in problem.units if u in used],
        scheduler=name,
        status=status,
        predicted_us=timing.makespan_us,
        lower_bound_us=lower_bound(problem, partitions=True),
        modeled=bool(used & problem.modeled),
    )


def stream_plan_of(
    problem: Problem,
    plan: Plan,
    name: str,
    *,
    copies: Sequence[Mapping[str, str]] = (),
    max_latency_us: float | None = None,
    slack: int = 0,
) -> StreamPlan | None:
    """``plan`` (and its ``copies``) as a stream, frames in flight tuned (``slack``: as for
    :func:`tune_in_flight`); None when no number of frames in flight keeps the p99 latency
    within ``max_latency_us``. Copies run side by side: where units slow each other
    (``problem.corun``), each copy is tuned again with the others' busiest share beside it."""
    renames = [{}, *copies]
    parts = [
        [Partition(p.name, r.get(p.unit, p.unit), p.nodes) for p in plan.partitions]
        for r in renames
    ]
    bound = max_latency_us
    timings = [tune_in_flight(problem, ps, max_latency_us=bound, slack=slack) for ps in parts]
    if any(t is None for t in timings):
        return None
    if copies and problem.corun:
        busy = [max(t.utilisation().values(), default=0.0) for t in timings]
        timings = [
            tune_in_flight(
                problem, ps, max_latency_us=bound, beside=max(busy[:i] + busy[i + 1 :]), slack=slack
            )
            for i, ps in enumerate(parts)
        ]
        if any(t is None for t in timings):
            return None
    return StreamPlan(name, plan, tuple(timings), tuple(dict(c) for c in copies))


def fewer_in_flight(problem: Problem, sp: StreamPlan) -> list[StreamPlan]:
    """``sp`` (one copy) with each smaller number of frames in flight, most first: less
    throughput, less waiting per frame (what a latency bound falls back to when the runs
    measured above it); none for copies or one frame in flight."""
    if sp.copies or sp.in_flight <= 1:
        return []
    out = []
    for k in range(sp.in_flight - 1, 0, -1):
        t = simulate_stream(problem, sp.plan.partitions, in_flight=k)
        out.append(StreamPlan(f"{sp.name}, {k} in flight", sp.plan, (t,)))
    return out


def data_parallel_units(problem: Problem) -> list[str]:
    """The units, sharing no hardware, that run the most frames per second as copies of the
    whole model, each one frame at a time (units that cannot run every node, or hold the
    model, left out); fewer than two means no data-parallel split applies."""
    need = problem.memory_use(problem.nodes)
    speed = {}
    for u in problem.units:
        cost = partition_cost(problem, u, problem.nodes)
        if math.isfinite(cost) and cost > 0 and need <= problem.capacity(u):
            speed[u] = 1e6 / cost
    able = list(speed)
    best: tuple[float, list[str]] = (0.0, [])
    if len(able) > 16:  # keep the search small: the 16 fastest
        able = sorted(able, key=lambda u: -speed[u])[:16]
        able = [u for u in problem.units if u in able]
    for k in range(len(able), 1, -1):
        for combo in itertools.combinations(able, k):
            if any(problem.conflicts(a) & {b} for a, b in itertools.combinations(combo, 2)):
                continue
            fps = sum(speed[u] for u in combo)
            if fps > best[0] + 1e-9:
                best = (fps, list(combo))
    return best[1]


def plan_throughput(
    problem: Problem,
    *,
    time_limit: float | None = None,
    max_latency_us: float | None = None,
    plans: Mapping[str, Plan] | None = None,
    clock: WorkClock | None = None,
    progress: Callable[[str, float, float], None] | None = None,
    simpler_within: float = 0.0,
    greedy: bool = True,
    slack: int = SLACK_IN_FLIGHT,
) -> ThroughputResult:
    """The stream plan with the most predicted frames per second (module docstring), each
    frame's p99 latency within ``max_latency_us`` when given; ``plans``: latency plans to
    consider (by name; ``"auto"`` is reported as the latency-plan baseline).
    ``progress(stage, best_period_us, bound_us)`` hears each stage start.

    ``simpler_within``: of the candidates predicted within this fraction of the most frames
    per second, the simplest is returned (:func:`_simplest`: the fewest partitions, then the
    fewest frames in flight, then the least p99 latency); 0 returns the fastest. The pipeline
    passes ``MEASURED_PLAN_MARGIN`` on measured units, as ``auto`` does for latency plans.
    ``greedy``: include the greedy pipelines (benchmarks/stream_plan_bench.py compares).
    ``slack``: frames in flight each stream keeps beyond what its simulation needs, without a
    latency bound (:func:`~partuner.plan.stream.tune_in_flight`).

    Raises
    ------
    InfeasiblePlanError
        No candidate meets ``max_latency_us`` (the message gives the best latency found).
    """
    problem.validate()
    if not problem.nodes:
        raise InfeasiblePlanError(f"{problem.name!r} has no nodes: no frame to stream")
    budget = DEFAULT_TIME_LIMIT_S if time_limit is None else max(0.0, time_limit)
    clock = WorkClock.of(clock, budget)
    deadline = clock.now() + budget
    found: dict[str, StreamPlan] = {}
    baselines: dict[str, StreamPlan] = {}
    fastest_single = math.inf  # the least p99 latency of a refused candidate, for the error

    def consider(
        key: str, plan: Plan, copies: Sequence[Mapping[str, str]] = (), prune: bool = True
    ) -> None:
        nonlocal fastest_single
        if prune and found and not copies:  # no period beats the busiest resource's load
            best = min(s.period_us for s in found.values())
            if max(stream_loads(problem, plan.partitions).values()) >= best * (1 + 1e-9):
                return
        got = stream_plan_of(
            problem, plan, key, copies=copies, max_latency_us=max_latency_us, slack=slack
        )
        if got is not None:
            found[key] = got
        elif max_latency_us is not None:  # the least latency it has: one frame at a time
            alone = simulate_stream(problem, plan.partitions, in_flight=1)
            fastest_single = min(fastest_single, alone.latency_us(99))

    def say(stage: str) -> None:
        if progress is not None:
            best = min((s.period_us for s in found.values()), default=math.inf)
            progress(stage, best, bound)

    bound = 0.0
    for name, plan in sorted((plans or {}).items(), key=lambda kv: kv[0] != "auto"):
        consider(f"latency plan ({name})", plan, prune=name != "auto")
        merged = merge_for_stream(problem, plan.partitions)
        if len(merged) < len(plan.partitions):
            consider(f"latency plan ({name}), merged", _as_plan(problem, merged, name, "heuristic"))
    if plans and "auto" in plans and "latency plan (auto)" in found:
        baselines["latency plan"] = found["latency plan (auto)"]
    singles = {}
    for u in problem.units:
        cost = partition_cost(problem, u, problem.nodes)
        if math.isfinite(cost) and problem.memory_use(problem.nodes) <= problem.capacity(u):
            singles[u] = _as_plan(
                problem, [Partition("p0", u, tuple(problem.nodes))], "single", "heuristic"
            )
            consider(f"single unit ({u})", singles[u], prune=False)
    single_keys = [k for k in found if k.startswith("single unit")]
    if single_keys:
        baselines["best single unit"] = max((found[k] for k in single_keys), key=lambda s: s.fps)
    copies_on = data_parallel_units(problem)
    if len(copies_on) >= 2:
        base = copies_on[0]
        consider(
            f"data-parallel ({', '.join(copies_on)})",
            singles[base],
            copies=[{base: u} for u in copies_on[1:]],
            prune=False,
        )
        key = f"data-parallel ({', '.join(copies_on)})"
        if key in found:
            baselines["data-parallel"] = found[key]
    bound = fractional_bound(problem)
    if greedy and not clock.expired(deadline):
        say("throughput pipelines")
        _consider_greedy(problem, clock, consider, found)
    from partuner.plan.exact import solver_available

    if solver_available() and not clock.expired(deadline):
        say("throughput bound")
        sol = solve_pipeline(
            problem,
            time_limit=max(0.0, deadline - clock.now()) * _MODEL_SHARE,
            max_latency_us=max_latency_us,
            clock=clock,
        )
        if len(copies_on) < 2:  # no copies possible: the relaxation bounds every stream
            bound = max(bound, sol.bound_us)
        say("throughput plan")
        # hinted with the best plan but the greedy pipelines (in the pool already): CP-SAT
        # then searches from elsewhere
        start = _best_single_pipeline({k: v for k, v in found.items() if k != "pipeline (greedy)"})
        sol = solve_pipeline(
            problem,
            time_limit=max(0.0, deadline - clock.now()) * _PLAN_SHARE,
            plan=True,
            max_latency_us=max_latency_us,
            hint=start.plan.node_unit if start is not None else None,
            clock=clock,
        )
        if sol.assignment is not None and overflow(problem, sol.assignment) is None:
            parts = merge_for_stream(problem, interval_parts(problem, sol.assignment))
            consider("pipeline (cp-sat)", _as_plan(problem, parts, "pipeline", "feasible"))
    # the local search from the best pipeline and the latency plan in turn (each with an
    # equal share of what is left): a few moves off the latency plan keep its few partitions
    starts = [_best_single_pipeline(found), found.get("latency plan (auto)")]
    starts = list({id(s): s for s in starts if s is not None and not s.copies}.values())
    if starts and not clock.expired(deadline):
        say("throughput local search")
    for i, start in enumerate(starts):
        if clock.expired(deadline):
            break
        share = clock.now() + (deadline - clock.now()) / (len(starts) - i)
        moved = balance(problem, start.plan.node_unit, clock, share)
        if moved is not None:
            parts = merge_for_stream(problem, interval_parts(problem, moved))
            key = f"{start.name} + local"
            consider(key, _as_plan(problem, parts, "pipeline", "heuristic"))
            if key in found and found[key].fps <= start.fps * (1 + 1e-9):
                del found[key]  # its load per frame fell, its stream did not speed up
    if not found:
        raise InfeasiblePlanError(
            f"no plan streams {problem.name!r} with each frame within "
            f"{max_latency_us / 1e3:.3f} ms: the fastest plan found takes "
            f"{math.ceil(fastest_single - 1e-9) / 1e3:.3f} ms a frame (rounded up), one frame at "
            "a time; raise --max-latency-ms to at least that"
            if max_latency_us is not None
            else f"no plan could stream {problem.name!r}"
        )
    best = _simplest(found, simpler_within)
    status = "optimal" if best.period_us <= bound * (1 + 1e-6) + 1e-6 else "feasible"
    return ThroughputResult(best, found, bound, status, baselines, max_latency_us)


def _simplest(found: Mapping[str, StreamPlan], within: float) -> StreamPlan:
    """The fastest candidate; with ``within`` > 0, the simplest of those predicted within
    that fraction of its frames per second: the fewest partitions, then the fewest frames in
    flight, then the least p99 latency. Each cut and each frame in flight is where a stream on
    real units departs from its prediction (a hand-off, two frames' work interleaved), so a
    small predicted gain bought with more of them is not one (the stream benchmark of
    2026-11-26 12:37 on shared:resnet18: a 5-partition pipeline predicted 0.6 % faster than a
    3-partition plan measured 14.8 % below its prediction, the like 3-partition plan of the
    zoo's ResNet-18 4.3 %)."""
    fastest = max(
        found.values(),
        key=lambda s: (round(s.fps, 9), -s.latency_us(99), -len(s.plan.partitions), s.name),
    )
    if within <= 0:
        return fastest
    near = [s for s in found.values() if s.fps >= fastest.fps * (1 - within) - 1e-9]
    pick = min(
        near,
        key=lambda s: (
            len(s.plan.partitions),
            s.in_flight,
            round(s.latency_us(99), 6),
            -s.fps,
            s.name,
        ),
    )
    if pick is not fastest:
        log.info(
            "keeping %s (%d partitions, %.1f frames/s predicted): %s (%d partitions, %.1f) is "
            "not %.0f %% faster, within what the model misses on measured units",
            pick.name,
            len(pick.plan.partitions),
            pick.fps,
            fastest.name,
            len(fastest.plan.partitions),
            fastest.fps,
            100 * within,
        )
    return pick


#: greedy pipelines streamed (the least busiest-resource load first, distinct up to units alike)
_GREEDY_KEEP = 3
#: budget seconds per partition of a greedy pipeline streamed (exploratory timings, AMD EPYC,
#: 2026-11-29, the zoo's models with 2-5 units: 8-21 ms per partition to tune its frames in flight)
_STREAM_S_PER_PART = 0.03


def _consider_greedy(
    problem: Problem,
    clock: WorkClock,
    consider: Callable[..., None],
    found: dict[str, StreamPlan],
) -> None:
    """Stream the :data:`_GREEDY_KEEP` greedy pipelines with the least busiest-resource work
    per frame, keeping the fastest as ``pipeline (greedy)``; each charges
    :data:`_STREAM_S_PER_PART` per partition (its frames in flight are tuned by simulating
    its stream several times)."""
    key = "pipeline (greedy)"
    seen: set[tuple] = set()
    merged = [
        merge_for_stream(problem, interval_parts(problem, a))
        for a in greedy_pipelines(problem, clock)
    ]
    for parts in sorted(merged, key=lambda ps: _loads_key(problem, ps)):  # merged once each
        alike = tuple((p.nodes, _unit_kind(problem, p.unit)) for p in parts)
        if alike in seen:  # the same pipeline on interchangeable units
            continue
        seen.add(alike)
        if len(seen) > _GREEDY_KEEP:
            break
        clock.spend(_STREAM_S_PER_PART * len(parts))
        kept = found.get(key)
        consider(key, _as_plan(problem, parts, "pipeline", "heuristic"))
        now = found.get(key)
        if kept is not None and (now is None or now.fps <= kept.fps):
            found[key] = kept


def _loads_key(problem: Problem, parts: Sequence[Partition]) -> tuple[float, float]:
    """(the busiest resource's work per frame, all work per frame) of merged partitions."""
    loads = stream_loads(problem, parts)
    return max(loads.values(), default=0.0), sum(loads.values())


def _unit_kind(problem: Problem, unit: str) -> tuple:
    """What a unit costs, whatever its name: units of one kind run a plan alike."""
    return (
        tuple(problem.cost[n][unit] for n in problem.nodes),
        problem.call_overhead_us.get(unit, 0.0),
        problem.boundary_us_per_byte.get(unit, 0.0),
        problem.boundary_out_us_per_byte.get(unit, 0.0),
        len(problem.resources_of(unit)),
    )


def _best_single_pipeline(found: Mapping[str, StreamPlan]) -> StreamPlan | None:
    """The candidate without copies that streams fastest."""
    pipes = [s for s in found.values() if not s.copies]
    return max(pipes, key=lambda s: (round(s.fps, 9), s.name), default=None)
