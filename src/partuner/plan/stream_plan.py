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

import heapq
import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from partuner.errors import InfeasiblePlanError
from partuner.plan.clock import MOVE_S_PER_NODE, WorkClock
from partuner.plan.common import lower_bound
from partuner.plan.memory import overflow
from partuner.plan.partitions import Partition, Plan
from partuner.plan.problem import Problem
from partuner.plan.simulate import partition_cost, simulate
from partuner.plan.stream import StreamTiming, simulate_stream, stream_loads, tune_in_flight
from partuner.plan.stream_model import fractional_bound, solve_pipeline

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
#: partitions up to which merge_for_stream searches every pair (cubic); above, only neighbours
#: in a topological order are merged (a 2000-node chain's plan took minutes)
MERGE_SEARCH_MAX = 256


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


def merge_for_stream(problem: Problem, parts: Sequence[Partition]) -> list[Partition]:
    """``parts`` with partitions of one unit merged wherever the merge forms no cycle between
    partitions (each frame pays every call's overhead and boundary bytes, so fewer calls
    stream faster), in a topological order, named ``p0, p1, ...``.

    >>> p = Problem(["a", "b", "c"], ["u", "v"], {n: {"u": 1.0, "v": 1.0} for n in "abc"},
    ...             edges=[])
    >>> got = merge_for_stream(p, [Partition("p0", "u", ("a",)), Partition("p1", "v", ("b",)),
    ...                            Partition("p2", "u", ("c",))])
    >>> [(q.unit, q.nodes) for q in got]
    [('u', ('a', 'c')), ('v', ('b',))]
    """
    groups = [(p.unit, sorted(p.nodes, key=problem.index)) for p in parts]
    if len(groups) > MERGE_SEARCH_MAX:  # the pairwise search is cubic: neighbours only
        groups = _topological(problem, groups)
        runs: list[tuple[str, list[str]]] = []
        for u, ns in groups:  # neighbours in a topological order: no path between them
            if runs and runs[-1][0] == u:
                runs[-1] = (u, sorted(runs[-1][1] + ns, key=problem.index))
            else:
                runs.append((u, ns))
        groups = runs
    while len(groups) <= MERGE_SEARCH_MAX:
        groups = _topological(problem, groups)
        where = {n: i for i, (_, ns) in enumerate(groups) for n in ns}
        succ: list[set[int]] = [set() for _ in groups]
        for e in problem.edges:
            a, b = where[e.src], where[e.dst]
            if a != b:
                succ[a].add(b)
        reach = [0] * len(groups)  # bitset of the groups each reaches
        for i in range(len(groups) - 1, -1, -1):
            for s in succ[i]:
                reach[i] |= reach[s] | (1 << s)
        pair = None
        for i, (u, _) in enumerate(groups):
            via = 0  # what i reaches through each successor, less the direct edges
            for s in succ[i]:
                via |= reach[s]
            for j in range(i + 1, len(groups)):
                if groups[j][0] == u and not (via >> j) & 1:
                    pair = (i, j)
                    break
            if pair:
                break
        if pair is None:
            break
        i, j = pair
        merged = sorted(groups[i][1] + groups[j][1], key=problem.index)
        groups[i] = (groups[i][0], merged)
        del groups[j]
    return [Partition(f"p{k}", u, tuple(ns)) for k, (u, ns) in enumerate(groups)]


def _topological(problem: Problem, groups: list[tuple[str, list[str]]]) -> list:
    """``groups`` in a topological order of their data, the earliest first node first."""
    where = {n: i for i, (_, ns) in enumerate(groups) for n in ns}
    after: list[set[int]] = [set() for _ in groups]
    for e in problem.edges:
        a, b = where[e.src], where[e.dst]
        if a != b:
            after[b].add(a)
    first = [min(problem.index(n) for n in ns) for _, ns in groups]
    before = [len(a) for a in after]
    then: list[list[int]] = [[] for _ in groups]
    for b, a_s in enumerate(after):
        for a in a_s:
            then[a].append(b)
    ready = [(first[i], i) for i in range(len(groups)) if before[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(groups[k])
        for b in then[k]:
            before[b] -= 1
            if before[b] == 0:
                heapq.heappush(ready, (first[b], b))
    if len(out) < len(groups):  # not from a plan's partitions, which never form a cycle
        raise InfeasiblePlanError("the partitions depend on each other in a cycle")
    return out


def _interval_parts(problem: Problem, assignment: Mapping[str, str]) -> list[Partition]:
    """The runs of one unit in the problem's topological order, as partitions."""
    parts: list[tuple[str, list[str]]] = []
    for n in problem.nodes:
        u = assignment[n]
        if parts and parts[-1][0] == u:
            parts[-1][1].append(n)
        else:
            parts.append((u, [n]))
    return [Partition(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(parts)]


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
) -> StreamPlan | None:
    """``plan`` (and its ``copies``) as a stream, frames in flight tuned; None when no
    number of frames in flight keeps the p99 latency within ``max_latency_us``. Copies run
    side by side: where units slow each other (``problem.corun``), each copy is tuned again
    with the others' busiest share beside it."""
    renames = [{}, *copies]
    parts = [
        [Partition(p.name, r.get(p.unit, p.unit), p.nodes) for p in plan.partitions]
        for r in renames
    ]
    timings = [tune_in_flight(problem, ps, max_latency_us=max_latency_us) for ps in parts]
    if any(t is None for t in timings):
        return None
    if copies and problem.corun:
        busy = [max(t.utilisation().values(), default=0.0) for t in timings]
        timings = [
            tune_in_flight(
                problem,
                ps,
                max_latency_us=max_latency_us,
                beside=max(b for j, b in enumerate(busy) if j != i),
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
        got = stream_plan_of(problem, plan, key, copies=copies, max_latency_us=max_latency_us)
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
            parts = merge_for_stream(problem, _interval_parts(problem, sol.assignment))
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
        moved = _balance(problem, start.plan.node_unit, clock, share)
        if moved is not None:
            parts = merge_for_stream(problem, _interval_parts(problem, moved))
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


#: periods tried above the least one each unit order fills (its boundary costs are left out)
_GREEDY_SLACK = (1.0, 1.05, 1.1)
#: greedy pipelines streamed (the least busiest-resource load first, distinct up to units alike)
_GREEDY_KEEP = 3
#: budget seconds per partition of a greedy pipeline streamed, and per node and unit of one
#: greedy fill (exploratory timings, AMD EPYC, 2026-11-29, on the zoo's models with 2-5 units:
#: 8-21 ms per partition to tune a pipeline's frames in flight, 0.65 us per node and unit)
_STREAM_S_PER_PART = 0.03
_FILL_S_PER_NODE_UNIT = 2e-6


def greedy_pipelines(problem: Problem, clock: WorkClock | None = None) -> list[dict[str, str]]:
    """Pipelines cut greedily along the problem's topological order, without a solver: for a
    period ``P``, each node stays on the unit of the stage being filled while that unit's
    hardware has work below ``P`` per frame (its call overhead counted at each new run), else
    the stage passes to the next unit in turn with room; a node the stage's unit cannot run
    goes to the unit with the most room that can, and the stage goes on after it. The least
    ``P`` that places every node (bisection) is found for three unit orders (as listed, fastest
    first, slowest first), and the assignments at it and at 5 % and 10 % more are returned
    (boundary bytes, left out here, count when the caller times them), distinct, memory
    permitting. Each fill charges :data:`_FILL_S_PER_NODE_UNIT` per node and unit on
    ``clock``.

    >>> from partuner.plan.problem import Edge, Problem
    >>> chain = Problem(list("abcd"), ["u", "v"], {n: {"u": 10.0, "v": 10.0} for n in "abcd"},
    ...                 [Edge(s, t, 0) for s, t in ("ab", "bc", "cd")])
    >>> [sorted(a.items()) for a in greedy_pipelines(chain)][0]  # two stages of 20 us
    [('a', 'u'), ('b', 'u'), ('c', 'v'), ('d', 'v')]
    """
    units, nodes = problem.units, problem.nodes
    if len(units) < 2 or not nodes:
        return []
    step = _FILL_S_PER_NODE_UNIT * len(nodes) * len(units)
    total = {
        u: math.fsum(problem.cost[n][u] for n in nodes if math.isfinite(problem.cost[n][u]))
        for u in units
    }
    able = {u: sum(math.isfinite(problem.cost[n][u]) for n in nodes) for u in units}
    fast = sorted(units, key=lambda u: (-able[u], total[u] / max(able[u], 1), units.index(u)))
    orders = list(dict.fromkeys(tuple(o) for o in (units, fast, fast[::-1])))
    hi = min((partition_cost(problem, u, nodes) for u in units), default=math.inf)
    least = math.fsum(min(problem.cost[n].values()) for n in nodes)
    hardware = len({r for u in units for r in problem.resources_of(u)})
    lo = max(least / max(hardware, 1), max(min(problem.cost[n].values()) for n in nodes))
    if not math.isfinite(hi):
        hi = math.fsum(max(c for c in problem.cost[n].values() if math.isfinite(c)) for n in nodes)
    out: list[dict[str, str]] = []
    for order in orders:
        if clock is not None:
            clock.spend(step * 24)  # the bisection's fills, and the slack's
        a, b = lo, hi
        best = _fill(problem, list(order), b)
        if best is None:
            continue
        for _ in range(20):  # the least period the greedy fill meets, to 1e-6 of hi
            mid = (a + b) / 2
            got = _fill(problem, list(order), mid)
            if got is None:
                a = mid
            else:
                b, best = mid, got
            if b - a <= 1e-6 * hi:
                break
        for slack in _GREEDY_SLACK:
            got = best if slack == 1.0 else _fill(problem, list(order), b * slack)
            if got is not None and got not in out and overflow(problem, got) is None:
                out.append(got)
    return out


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
    ranked = sorted(greedy_pipelines(problem, clock), key=lambda a: _score(problem, a))
    for assignment in ranked:
        parts = merge_for_stream(problem, _interval_parts(problem, assignment))
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


def _unit_kind(problem: Problem, unit: str) -> tuple:
    """What a unit costs, whatever its name: units of one kind run a plan alike."""
    return (
        tuple(problem.cost[n][unit] for n in problem.nodes),
        problem.call_overhead_us.get(unit, 0.0),
        problem.boundary_us_per_byte.get(unit, 0.0),
        problem.boundary_out_us_per_byte.get(unit, 0.0),
        len(problem.resources_of(unit)),
    )


def _fill(problem: Problem, order: list[str], period: float) -> dict[str, str] | None:
    """:func:`greedy_pipelines`' fill for one period; None when some node finds no room."""
    load: dict[str, float] = {}
    assign: dict[str, str] = {}
    prev: str | None = None  # the unit of the node before, in the topological order
    stage = 0

    def cost_of(u: str, n: str) -> float:  # a new run pays the unit's call overhead
        over = problem.call_overhead_us.get(u, 0.0) if u != prev else 0.0
        return problem.cost[n][u] + over

    def room(u: str, n: str) -> float:
        used = max((load.get(r, 0.0) for r in problem.resources_of(u)), default=0.0)
        return period - used - cost_of(u, n)

    for n in problem.nodes:
        u = order[stage]
        if not math.isfinite(problem.cost[n][u]):  # the stage's unit cannot: the most room
            pick = max(order, key=lambda w: (room(w, n), -order.index(w)))
            if room(pick, n) < 0:
                return None
        elif room(u, n) >= 0:
            pick = u
        else:  # the stage is full: the next unit in turn with room
            ahead = [order[(stage + k) % len(order)] for k in range(1, len(order))]
            found = next((w for w in ahead if room(w, n) >= 0), None)
            if found is None:
                return None
            pick, stage = found, order.index(found)
        extra = cost_of(pick, n)
        for r in problem.resources_of(pick):
            load[r] = load.get(r, 0.0) + extra
        assign[n] = prev = pick
    return assign


def _best_single_pipeline(found: Mapping[str, StreamPlan]) -> StreamPlan | None:
    """The candidate without copies that streams fastest."""
    pipes = [s for s in found.values() if not s.copies]
    return max(pipes, key=lambda s: (round(s.fps, 9), s.name), default=None)


def _score(problem: Problem, assignment: Mapping[str, str]) -> tuple[float, float]:
    """(the busiest resource's work per frame, all work per frame) of ``assignment`` as
    merged runs of the topological order."""
    parts = merge_for_stream(problem, _interval_parts(problem, assignment))
    loads = stream_loads(problem, parts)
    return max(loads.values(), default=0.0), sum(loads.values())


def _balance(
    problem: Problem, start: Mapping[str, str], clock: WorkClock, deadline: float
) -> dict[str, str] | None:
    """A hill climb on the assignment: move a node of the busiest resource's units, or a
    whole run of them, to another unit while the busiest resource's work per frame falls
    (ties: all the work); None when nothing improved. Deterministic: moves in node order."""
    cur = dict(start)
    score = _score(problem, cur)
    first = score
    step = MOVE_S_PER_NODE * len(problem.nodes) * 4  # each move: partitions, merges, loads
    improved = True
    while improved and not clock.expired(deadline):
        improved = False
        loads = stream_loads(problem, merge_for_stream(problem, _interval_parts(problem, cur)))
        top = max(loads, key=loads.__getitem__)
        hot = [u for u in problem.units if top in problem.resources_of(u)]
        runs: list[list[str]] = []
        for n in problem.nodes:
            if cur[n] in hot:
                if (
                    runs
                    and cur[runs[-1][-1]] == cur[n]
                    and problem.index(runs[-1][-1]) == problem.index(n) - 1
                ):
                    runs[-1].append(n)
                else:
                    runs.append([n])
        # the first and last 1, 2, 4, ... nodes of each run (halving steps towards a balanced
        # cut), then each node next to another unit's, then whole runs
        ends = []
        for run in runs:
            size = 1
            while size < len(run):
                ends += [run[:size], run[-size:]]
                size *= 2
        edge = [
            [n]
            for n in problem.nodes
            if cur[n] in hot
            and any(cur[m] != cur[n] for m in (*problem.preds(n), *problem.succs(n)))
        ]
        moves = ends + edge + runs
        moves = list({tuple(m): m for m in moves}.values())
        for nodes in moves:
            for v in problem.units:
                if v in hot or any(not math.isfinite(problem.cost[n][v]) for n in nodes):
                    continue
                cand = dict(cur)
                cand.update(dict.fromkeys(nodes, v))
                clock.spend(step)
                if overflow(problem, cand) is not None:
                    continue
                got = _score(problem, cand)
                if got[0] < score[0] * (1 - 1e-9) or (
                    got[0] <= score[0] * (1 + 1e-12) and got[1] < score[1] * (1 - 1e-9)
                ):
                    cur, score, improved = cand, got, True
                    break
                if clock.expired(deadline):
                    break
            if improved or clock.expired(deadline):
                break
    return cur if score < first else None
