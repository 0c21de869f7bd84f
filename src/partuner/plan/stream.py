"""Streams: a plan run on frame after frame, several frames in flight (the throughput objective).

A stream runs the same partitions on a sequence of frames. While one unit works on frame ``t``,
another may already work on frame ``t + 1``, so what counts is the steady state: the time
between two frames leaving the plan (the *period*; frames per second = 1e6 / period) and how
long each frame takes from entering to leaving (its *latency*).

:func:`simulate_stream` predicts both with the cost model of :func:`~partuner.plan.simulate.
simulate` (each partition costs :func:`~partuner.plan.simulate.partition_cost`; a value moves
between units over their link, any number at once) and the policy the runtime follows
(``partuner.runtime.stream``):

* units that share hardware form one *lane* (one thread at run time; as ``Session`` groups
  them); a lane runs the partitions of one frame in plan order, and, of the frames in flight,
  takes the oldest whose next partition has its inputs (so a unit holding the first and the
  last stage runs frame ``t + 1``'s first stage while frame ``t`` waits for the middle one);
* at most ``in_flight`` frames are in flight: frame ``f`` enters when frame ``f - in_flight``
  and every frame before it have left (outputs leave in frame order).

No plan streams faster than its busiest resource allows: each frame needs
:func:`stream_loads` of every hardware resource, so the period is at least their maximum
(``StreamTiming.load_bound_us``); the simulation says how close the policy comes to it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from partuner.plan.problem import Problem
from partuner.plan.simulate import crossings, lanes_of, partition_cost, simulate, written

__all__ = [
    "SLACK_IN_FLIGHT",
    "StreamTiming",
    "default_frames",
    "handoff_us",
    "lanes_of",
    "simulate_stream",
    "stream_loads",
    "tune_in_flight",
]

MAX_IN_FLIGHT = 16  # frames in flight a stream plan may take at most
#: frames in flight a stream keeps beyond its simulation's need (no latency bound): else a unit
#: waits whenever the one before it, or the caller, is late (benchmarks/stream_slack_bench.py)
SLACK_IN_FLIGHT = 1


@dataclass(frozen=True)
class StreamTiming:
    """The predicted steady state of a stream (µs): see :func:`simulate_stream`."""

    period_us: float  # time between frames leaving, in the steady state
    latencies_us: tuple[float, ...]  # each steady-state frame, entering to leaving
    single_us: float  # one frame alone (the plan's latency, :func:`simulate`)
    loads_us: dict[str, float]  # per hardware resource: busy time per frame
    busy_us: dict[str, float]  # per unit: busy time per frame
    in_flight: int
    frames: int
    #: the busiest resource's work per frame at the costs simulated (above the loads where
    #: units slow each other): no period of this simulation is shorter
    floor_us: float = 0.0

    @property
    def fps(self) -> float:
        """Frames per second in the steady state."""
        return 1e6 / self.period_us if self.period_us > 0 else math.inf

    @property
    def load_bound_us(self) -> float:
        """The busiest resource's work per frame: no period of these partitions is shorter."""
        return max(self.loads_us.values(), default=0.0)

    def latency_us(self, q: float = 50.0) -> float:
        """The ``q``-th percentile of the steady-state frames' latency (nearest rank)."""
        xs = sorted(self.latencies_us)
        if not xs:
            return self.single_us
        k = min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))
        return xs[k]

    def utilisation(self) -> dict[str, float]:
        """Per unit: the share of the period it is busy."""
        if self.period_us <= 0:
            return dict.fromkeys(self.busy_us, 0.0)
        return {u: min(1.0, b / self.period_us) for u, b in self.busy_us.items()}


def stream_loads(problem: Problem, partitions: Sequence) -> dict[str, float]:
    """Per hardware resource, the work one frame puts on it (µs): the cost of every partition
    whose unit occupies it (call overhead, boundary bytes in and out, nodes, fused savings)."""
    crossing = crossings(problem, partitions)
    in_bytes = [0.0] * len(partitions)
    for (_, p), vals in crossing.items():
        in_bytes[p] += sum(vals.values())
    out_bytes = written(crossing, len(partitions))
    loads: dict[str, float] = {}
    for i, part in enumerate(partitions):
        cost = partition_cost(problem, part.unit, part.nodes, in_bytes[i], out_bytes[i])
        for r in problem.resources_of(part.unit):
            loads[r] = loads.get(r, 0.0) + cost
    return loads


def default_frames(n_partitions: int, in_flight: int) -> int:
    """Frames to simulate: enough for the steady state, fewer on large plans."""
    return max(8 * in_flight + 16, min(64, 3000 // max(1, n_partitions)))


def handoff_us(problem: Problem) -> float:
    """What handing a frame between the stream's caller and a lane costs (µs): the fastest
    link of the problem (between units of one host, the measured hand-off from one thread to
    another; the default link where none is declared or measured)."""
    lat = [link.latency_us for link in problem.links.values()]
    return min(lat) if lat else problem.default_link.latency_us


def simulate_stream(
    problem: Problem,
    partitions: Sequence,
    *,
    in_flight: int,
    frames: int | None = None,
    handoff: float | None = None,
    beside: float = 0.0,
) -> StreamTiming:
    """Predict the steady state of ``partitions`` (in plan order) run on a stream of frames
    with at most ``in_flight`` frames in flight (module docstring: the policy).

    A frame enters :func:`handoff_us` (or ``handoff``) after a frame has left (the caller
    wakes up to take the outputs and let the next frame in), and its first partitions can
    start a hand-off after it entered (a lane wakes up to it): with one frame in flight each
    frame pays both; with more, lanes find the next frame waiting.

    ``frames`` frames are simulated (default :func:`default_frames`); the first quarter (at
    least ``in_flight``) fill the pipeline and the last quarter drain it: the period is the
    mean time between the others leaving, their latencies the steady state's.

    >>> from partuner.plan.partitions import Partition
    >>> p = Problem(["a", "b"], ["x", "y"], {"a": {"x": 3, "y": 9}, "b": {"x": 9, "y": 2}},
    ...             edges=[])
    >>> two = [Partition("p0", "x", ("a",)), Partition("p1", "y", ("b",))]
    >>> s = simulate_stream(p, two, in_flight=2)
    >>> s.single_us, s.period_us, s.load_bound_us
    (3.0, 3.0, 3.0)

    Units that slow each other down (``problem.corun``: the units timed side by side by
    ``profile/corun.py``, and their factors): a partition of such a unit takes
    ``cost * (1 + (factor - 1) * busy)``, ``busy`` the largest share of the period a lane of
    another such unit works (from a first simulation at the plain costs), or ``beside`` (the
    share of time units outside this stream work: other copies of it), whichever is larger.
    The factor was measured with every such unit busy, so with three or more lanes it is
    charged in full where only the busiest other one works. The loads, and so the bounds,
    stay the plain costs.

    >>> slow = Problem(p.nodes, p.units, p.cost, corun={"x": 1.5, "y": 1.5})
    >>> round(simulate_stream(slow, two, in_flight=2).period_us, 3)
    4.0
    """
    first = _simulate(problem, list(partitions), in_flight, frames, handoff, {})
    lane_of = lanes_of(problem, [pt.unit for pt in partitions])
    factor = {u: problem.corun[u] for u in lane_of if problem.corun.get(u, 1.0) > 1.0}
    if not factor or first.period_us <= 0:
        return first
    share: dict[int, float] = {}  # lanes of units timed side by side: their busy share
    for u, t in first.busy_us.items():
        if u in problem.corun:
            k = lane_of[u]
            share[k] = min(1.0, share.get(k, 0.0) + t / first.period_us)
    others = {
        u: max([b for k, b in share.items() if k != lane_of[u]] + [min(1.0, max(beside, 0.0))])
        for u in factor
    }
    if max(others.values()) <= 0.0:
        return first
    scale = {u: 1.0 + (f - 1.0) * others[u] for u, f in factor.items()}
    return _simulate(problem, list(partitions), in_flight, frames, handoff, scale)


def _simulate(
    problem: Problem,
    parts: list,
    in_flight: int,
    frames: int | None,
    handoff: float | None,
    scale: dict[str, float],
) -> StreamTiming:
    """:func:`simulate_stream` with each unit's partitions taking ``scale`` (default 1) times
    their cost."""
    in_flight = max(1, int(in_flight))
    n_frames = frames if frames is not None else default_frames(len(parts), in_flight)
    n_frames = max(n_frames, in_flight + 2)
    crossing = crossings(problem, parts)
    deps: list[list[int]] = [[] for _ in parts]
    succs: list[list[int]] = [[] for _ in parts]
    in_bytes = [0.0] * len(parts)
    delay: dict[tuple[int, int], float] = {}
    for (q, p), vals in sorted(crossing.items()):
        nbytes = sum(vals.values())
        deps[p].append(q)
        succs[q].append(p)
        in_bytes[p] += nbytes
        delay[q, p] = problem.transfer_us(parts[q].unit, parts[p].unit, nbytes)
    out_bytes = written(crossing, len(parts))
    cost = [
        partition_cost(problem, pt.unit, pt.nodes, in_bytes[i], out_bytes[i])
        * scale.get(pt.unit, 1.0)
        for i, pt in enumerate(parts)
    ]
    lane_of = lanes_of(problem, [pt.unit for pt in parts])
    lane_parts: dict[int, list[int]] = {}
    for i, pt in enumerate(parts):
        lane_parts.setdefault(lane_of[pt.unit], []).append(i)
    res = [problem.resources_of(pt.unit) for pt in parts]

    n_parts = len(parts)
    waiting = [[len(d) for d in deps] for _ in range(n_frames)]
    ready_at = [[0.0] * n_parts for _ in range(n_frames)]
    pos = {lane: [0] * n_frames for lane in lane_parts}  # next partition of the lane per frame
    admit = [math.inf] * n_frames
    left = [0] * n_frames
    leave = [math.inf] * n_frames
    lane_free = dict.fromkeys(lane_parts, 0.0)
    res_free: dict[str, float] = {}
    events: list[tuple[float, int, int]] = []  # (end, frame, partition)
    now = 0.0
    out_next = 0  # the first frame not yet left (frames leave in order)
    wake = handoff_us(problem) if handoff is None else max(0.0, handoff)
    for f in range(min(in_flight, n_frames)):
        admit[f] = 0.0
    remaining = n_frames * n_parts

    def next_task(lane: int) -> tuple[float, int, int] | None:
        """What the lane runs next: of the frames in flight whose next partition on the lane
        has its inputs, the oldest ready by ``now``, else the one ready soonest;
        ``(ready time, frame, partition)``."""
        soonest = None
        order = lane_parts[lane]
        for f in range(out_next, min(n_frames, out_next + in_flight)):
            k = pos[lane][f]
            if k >= len(order) or admit[f] == math.inf:
                continue
            p = order[k]
            if waiting[f][p]:
                continue
            t = max(ready_at[f][p], admit[f] + (wake if not deps[p] else 0.0))
            if t <= now + 1e-12:
                return (t, f, p)
            if soonest is None or t < soonest[0]:
                soonest = (t, f, p)
        return soonest

    while remaining:
        started = False
        for lane in sorted(lane_parts):
            if lane_free[lane] > now + 1e-12:
                continue
            task = next_task(lane)
            if task is None:
                continue
            t, f, p = task
            start = max(t, now, *(res_free.get(r, 0.0) for r in res[p]))
            if start > now + 1e-12:
                continue  # not yet: decided again at `start` (an event or a ready time)
            end = start + cost[p]
            lane_free[lane] = end
            for r in res[p]:
                res_free[r] = end
            pos[lane][f] += 1
            heapq.heappush(events, (end, f, p))
            started = True
        if started:
            continue
        # advance to the next moment something can change: an end, or a task becoming ready
        times = [e[0] for e in events[:1]]
        for lane in lane_parts:
            task = next_task(lane)
            if task is not None:
                busy = (res_free.get(r, 0.0) for r in res[task[2]])
                times.append(max(task[0], lane_free[lane], *busy))
        later = [t for t in times if t > now + 1e-12]
        if not later:
            if not events:
                raise RuntimeError("stream simulation stalled")  # pragma: no cover
            later = [events[0][0]]
        now = min(later)
        while events and events[0][0] <= now + 1e-12:
            end, f, p = heapq.heappop(events)
            remaining -= 1
            for s in succs[p]:
                waiting[f][s] -= 1
                ready_at[f][s] = max(ready_at[f][s], end + delay[p, s])
            left[f] += 1
            if left[f] == n_parts:
                leave[f] = end
            while out_next < n_frames and leave[out_next] < math.inf:
                out_next += 1
                k = out_next + in_flight - 1
                if k < n_frames and admit[k] == math.inf:
                    admit[k] = leave[out_next - 1] + wake
    # the steady state: after the pipeline fills, before it drains (no frame entering behind)
    warm = min(n_frames - 2, max(in_flight, n_frames // 4))
    last = max(warm + 1, n_frames - 1 - max(in_flight, n_frames // 4))
    loads = stream_loads(problem, parts)
    worked: dict[str, float] = {}  # the loads at the costs simulated
    for i, r in enumerate(res):
        for x in r:
            worked[x] = worked.get(x, 0.0) + cost[i]
    floor = max([*loads.values(), *worked.values()], default=0.0)
    # a finite window may catch a resource working ahead; no steady state beats its load
    period = max((leave[last] - leave[warm]) / (last - warm), floor)
    busy: dict[str, float] = {}
    for i, pt in enumerate(parts):
        busy[pt.unit] = busy.get(pt.unit, 0.0) + cost[i]
    return StreamTiming(
        period_us=period,
        latencies_us=tuple(leave[f] - admit[f] for f in range(warm + 1, last + 1)),
        single_us=simulate(problem, parts).makespan_us,
        loads_us=loads,
        busy_us=busy,
        in_flight=in_flight,
        frames=n_frames,
        floor_us=floor,
    )


def tune_in_flight(
    problem: Problem,
    partitions: Sequence,
    *,
    max_latency_us: float | None = None,
    up_to: int = MAX_IN_FLIGHT,
    beside: float = 0.0,
    slack: int = 0,
) -> StreamTiming | None:
    """The stream of ``partitions`` with the fewest frames in flight that comes within 1 % of
    the shortest period any number up to ``up_to`` gives, among those whose p99 latency is
    within ``max_latency_us`` (None when none is); ``beside``: as for :func:`simulate_stream`.

    ``slack``: without a bound, that many frames more (up to ``up_to``), simulated again (where
    units slow each other, a little slower): measured costs vary, simulated ones do not."""
    runs = []
    lanes = len(set(lanes_of(problem, [p.unit for p in partitions]).values()))
    load = max(stream_loads(problem, partitions).values(), default=0.0)
    single = simulate(problem, partitions).makespan_us
    # enough frames to cover a frame's latency (its hand-offs in and out too) at the busiest
    # resource's pace (Little's law)
    frame = single + 2 * handoff_us(problem)
    need = math.ceil(frame / load) + lanes if load > 0 else 2
    for k in range(1, max(2, min(up_to, need)) + 1):
        run = simulate_stream(problem, partitions, in_flight=k, beside=beside)
        if max_latency_us is None or run.latency_us(99) <= max_latency_us * (1 + 1e-9):
            runs.append(run)
            if run.period_us <= max(run.load_bound_us, run.floor_us) * (1 + 1e-9):
                break  # no more frames in flight can do better
    if not runs:
        return None
    best = min(r.period_us for r in runs)
    pick = next(r for r in runs if r.period_us <= best * 1.01 + 1e-9)
    k = min(up_to, pick.in_flight + max(0, slack))
    if max_latency_us is not None or k == pick.in_flight:
        return pick
    return simulate_stream(problem, partitions, in_flight=k, beside=beside)
