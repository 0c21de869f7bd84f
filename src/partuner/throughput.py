"""The throughput objective glued together: plan a stream, write it, run it and measure it.

``partuner plan/tune --objective throughput`` and ``partuner run --stream N`` call these;
the planning is :mod:`partuner.plan.stream_plan`, the runtime :mod:`partuner.runtime.stream`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from partuner.errors import PartunerError, PlanFileError
from partuner.export import PlanFile, StreamSpec, cut
from partuner.graph import ModelGraph
from partuner.plan import Plan, Problem
from partuner.plan.stream import MAX_IN_FLIGHT, SLACK_IN_FLIGHT
from partuner.plan.stream_plan import StreamPlan, ThroughputResult, plan_throughput
from partuner.runtime import CheckResult, Session, check_outputs
from partuner.runtime.stream import StreamStats, stream
from partuner.units import UnitSet

__all__ = [
    "LATENCY_SHARE",
    "check_stream_copies",
    "check_stream_spec",
    "StreamRun",
    "make_stream_plan",
    "measure_stream",
    "stream_frames",
    "stream_plan_file",
    "stream_sessions",
    "stream_stages",
    "tune_stream",
    "with_stream",
]

LATENCY_SHARE = 0.4  # of the budget: the latency plans (auto's), the throughput search the rest
DISTINCT_FRAMES = 16  # distinct random frames a measured stream cycles through


def make_stream_plan(
    problem: Problem,
    *,
    time_limit: float | None = None,
    max_latency_us: float | None = None,
    progress: Callable[[str, float, float], None] | None = None,
) -> tuple[ThroughputResult, Plan, dict[str, Plan]]:
    """Plan ``problem`` for throughput: first the latency plans (``make_plan`` with ``auto``,
    :data:`LATENCY_SHARE` of the budget), then :func:`~partuner.plan.stream_plan.
    plan_throughput` from them. Returns the result, the latency plan and every latency plan."""
    from partuner.pipeline import MEASURED_PLAN_MARGIN, make_plan

    budget = 10.0 if time_limit is None else max(0.0, time_limit)
    budget_latency = budget * LATENCY_SHARE  # every latency plan: each a stream candidate
    plan, plans = make_plan(problem, time_limit=budget_latency, progress=progress, every=True)
    distinct: dict[Any, tuple[str, Plan]] = {}
    for name, p in sorted(plans.items(), key=lambda kv: kv[0] != "auto"):  # auto's name first
        key = frozenset((q.unit, q.nodes) for q in p.partitions)
        distinct.setdefault(key, ("auto" if p is plan else name, p))
    result = plan_throughput(
        problem,
        time_limit=budget * (1 - LATENCY_SHARE),
        max_latency_us=max_latency_us,
        plans=dict(distinct.values()),
        progress=progress,
        simpler_within=0.0 if problem.modeled else MEASURED_PLAN_MARGIN,
    )
    return result, plan, plans


def stream_plan_file(
    sp: StreamPlan, result: ThroughputResult, graph: ModelGraph, units: UnitSet
) -> PlanFile:
    """The plan file of stream plan ``sp``: the partitions and their units' specs (the
    copies' units too), with the ``stream`` section."""
    from partuner.pipeline import plan_file

    pf = plan_file(sp.plan, graph, units)
    for u in sp.units:
        pf.units.setdefault(u, units[u].spec())
    return with_stream(pf, sp, result)


def with_stream(pf: PlanFile, sp: StreamPlan, result: ThroughputResult) -> PlanFile:
    """``pf`` (the file form of ``sp.plan``) named after ``sp``, with its ``stream``
    section."""
    pf.scheduler = sp.name
    pf.status = result.status if sp is result.best else "heuristic"
    pf.stream = StreamSpec(
        in_flight=tuple(t.in_flight for t in sp.timings),
        copies=tuple(dict(c) for c in sp.copies),
        predicted_fps=sp.fps,
        fps_bound=None if math.isinf(result.fps_bound) else result.fps_bound,
        latency_p50_us=sp.latency_us(50),
        latency_p99_us=sp.latency_us(99),
        max_latency_us=result.max_latency_us,
    )
    return pf


def stream_sessions(
    graph: ModelGraph, pf: PlanFile, units: UnitSet, *, timeout_s: float = 60.0
) -> list[Session]:
    """A :class:`Session` for the plan and one for each copy of its ``stream`` section (the
    partitions' units renamed); closed again if one cannot be made."""
    parts = cut(graph, pf.partitions)
    copies = list(pf.stream.copies) if pf.stream is not None else []
    check_stream_copies(pf, graph, units)
    sessions: list[Session] = []
    try:
        for rename in [{}, *copies]:
            mine = [replace(p, unit=rename.get(p.unit, p.unit)) for p in parts]
            sessions.append(Session(graph, mine, units, timeout_s=timeout_s))
    except BaseException:
        for s in sessions:
            s.close()
        raise
    return sessions


def check_stream_copies(pf: PlanFile, graph: ModelGraph, units: UnitSet) -> None:
    """Raise PlanFileError unless each copy of ``pf``'s ``stream`` section runs every
    partition on a unit that runs its nodes, and the plan and its copies share no unit and no
    declared core (copies run side by side, each frame on one of them)."""
    copies = list(pf.stream.copies) if pf.stream is not None else []
    if not copies:
        return
    from partuner.pipeline import unsupported_nodes

    source = pf.source or "(in memory)"
    on = sorted({p.unit for p in pf.partitions})
    used: list[set[str]] = [set(on)]  # the plan's own partitions: plan_from_file checks them
    for k, rename in enumerate(copies, start=1):
        for part in pf.partitions:
            name = rename.get(part.unit, part.unit)
            if name not in units:
                raise PlanFileError(
                    f"plan {source}: copy {k} of its stream runs partition {part.name!r} on "
                    f"unit {name!r}, not a unit of {units.source or 'the units given'} (its "
                    f"units: {list(units.units)}); add it there, or pass --units FILE"
                )
            bad = unsupported_nodes(graph, units[name], part.nodes)
            if bad:
                op = graph.node(bad[0]).op_type
                raise PlanFileError(
                    f"plan {source}: copy {k} of its stream runs partition {part.name!r} on unit "
                    f"{name!r}, whose ops list leaves out {op} (node {bad[0]!r}); rename "
                    f"{part.unit!r} to a unit that runs it in `partuner.stream.copies`, or plan "
                    "again"
                )
        used.append({rename.get(u, u) for u in on})

    def who(i: int) -> str:
        return "the plan" if i == 0 else f"its copy {i}"

    for i, j in itertools.combinations(range(len(used)), 2):
        for a in sorted(used[i]):
            for b in sorted(used[j]):
                shared = set(units[a].cores or ()) & set(units[b].cores or ())
                if a == b or shared:
                    what = f"unit {a!r}" if a == b else f"core {min(shared)} ({a!r}, {b!r})"
                    raise PlanFileError(
                        f"plan {source}: {who(i)} and {who(j)} both run on {what}; the copies "
                        "of a stream must run on units that share no hardware (rename to other "
                        "units in `partuner.stream.copies`, or plan again)"
                    )


def stream_frames(
    graph: ModelGraph, n: int, *, seed: int = 0, feeds: Mapping[str, np.ndarray] | None = None
) -> list[dict[str, np.ndarray]]:
    """``n`` frames: ``feeds`` every time when given, else :data:`DISTINCT_FRAMES` seeded
    random frames in turn."""
    from partuner.profile.measure import random_feeds

    if feeds is not None:
        return [dict(feeds)] * n
    pool = [random_feeds(graph, list(graph.inputs), seed=seed + i) for i in range(DISTINCT_FRAMES)]
    return [pool[i % len(pool)] for i in range(n)]


@dataclass
class StreamRun:
    """A measured stream: its statistics, and, when checked, each frame against the whole
    model (``check``: the worst frame's result; ``failed``: the frames that failed)."""

    stats: StreamStats
    frames: int
    check: CheckResult | None = None
    failed: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        st = self.stats
        return {
            "frames": self.frames,
            "throughput_fps": st.throughput_fps,
            "latency_ms": {"p50": st.latency_ms(50), "p99": st.latency_ms(99)},
            "utilisation": st.utilisation(),
            "in_flight": list(st.in_flight),
            "check": None
            if self.check is None
            else {**self.check.to_dict(), "frames_failed": self.failed},
        }


def measure_stream(
    sessions: Sequence[Session],
    in_flight: Sequence[int],
    frames: Sequence[Mapping[str, np.ndarray]],
    *,
    check: bool = False,
    precisions: Sequence[str] = ("f32",),
    warmup: int | None = None,
) -> StreamRun:
    """Stream ``frames`` through ``sessions`` after ``warmup`` frames (by default four times
    the frames in flight, at least 8) in the same stream, so its threads are warm: the
    statistics are the steady state's, without them; with ``check``, every frame's outputs are
    compared with the whole model's (onnxruntime, f32) after the stream, so the comparison
    takes no time from it."""
    from partuner.pipeline import reference_outputs

    graph = sessions[0].graph
    warm = max(8, 4 * sum(in_flight)) if warmup is None else max(0, warmup)
    warm_frames = [frames[i % len(frames)] for i in range(warm)] if frames else []
    full = StreamStats()
    outs = list(stream(sessions, [*warm_frames, *frames], in_flight=in_flight, stats=full))
    outs = outs[warm:]
    stats = full.after(warm)
    run = StreamRun(stats, len(frames))
    if check:
        refs: dict[int, dict[str, np.ndarray]] = {}
        worst: CheckResult | None = None
        for i, (feeds, got) in enumerate(zip(frames, outs, strict=True)):
            key = id(feeds)
            if key not in refs:
                refs[key] = reference_outputs(graph, dict(feeds))
            res = check_outputs(refs[key], dict(zip(graph.outputs, got, strict=True)), precisions)
            if not res.passed:
                run.failed.append(i)
            if worst is None or (not res.passed and worst.passed):
                worst = res
        run.check = worst
    return run


def check_stream_spec(
    pf: PlanFile, in_flight: int | None, lanes: Sequence[int] | None = None
) -> list[int]:
    """Frames in flight per copy for running ``pf`` as a stream: ``in_flight`` for each copy
    when given, else the plan's ``stream`` section, else one per lane of the copy's session
    (``lanes``: ``len(Session.lanes)`` per copy) and :data:`SLACK_IN_FLIGHT` more, so that a
    lane does not wait for a frame another lane or the caller is a little late with."""
    copies = 1 + (len(pf.stream.copies) if pf.stream is not None else 0)
    if in_flight is not None:
        if in_flight < 1:
            raise PartunerError(f"--in-flight must be 1 or more, got {in_flight}")
        return [in_flight] * copies
    if pf.stream is not None:
        return list(pf.stream.in_flight)
    ks = lanes if lanes is not None else [2] * copies
    return [min(MAX_IN_FLIGHT, k + SLACK_IN_FLIGHT) for k in ks]


def stream_stages(say: Callable[[str], None]) -> Callable[[str, float, float], None]:
    """A ``progress`` for :func:`make_stream_plan` that says each stage as one line: the
    latency stages as ``make_plan``'s, the throughput ones in frames per second."""
    from partuner.pipeline import planning_stages

    latency = planning_stages(say)

    def said(step: str, best_us: float, bound_us: float) -> None:
        if not step.startswith("throughput"):
            latency(step, best_us, bound_us)
            return
        fps = 1e6 / best_us if 0 < best_us < math.inf else 0.0
        top = f"{1e6 / bound_us:.1f}" if bound_us > 0 else "-"
        say(f"planning: {step} (best so far {fps:.1f} frames/s, bound {top} frames/s)")

    return said


@dataclass
class StreamTuneResult:
    """What ``partuner tune --objective throughput`` planned, measured and wrote: the kept
    stream plan, every configuration measured (``rows``: name, the stream plan, its measured
    run or None where a unit is modeled), the planning result and the output folder."""

    kept: StreamPlan
    result: ThroughputResult
    latency_plan: Plan
    rows: list[tuple[str, StreamPlan, StreamRun | None]]
    check: CheckResult | None
    outdir: Any
    files: list[str]
    note: str = ""
    # with a latency bound: whether the kept stream measured its p99 (95 % upper bound)
    # within it (None: no bound, or nothing measured)
    bound_met: bool | None = None


def tune_stream(
    graph: ModelGraph,
    units: UnitSet,
    problem: Problem,
    outdir: Any,
    *,
    frames: int = 200,
    time_limit: float | None = None,
    max_latency_us: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> StreamTuneResult:
    """Plan ``problem`` for throughput, export the plan, then stream ``frames`` frames through
    it and through each baseline (the latency plan, the best single unit, data-parallel
    copies), each checked frame by frame; keep the baseline instead when it measured faster
    by more than 1 % (the measurement overrules the prediction).

    With ``max_latency_us``, the kept stream is the fastest whose *measured* p99 latency is
    within it, taken as its 95 % upper confidence bound (the slowest of 300 frames): a
    prediction has no jitter (a frame's partitions run a little late now and then,
    and a lane then takes the next frame first), so where the planned stream measured above
    the bound, the other candidates and the planned one with fewer frames in flight are
    measured too, fastest predicted first (:func:`_measure_within`)."""
    from pathlib import Path

    from partuner.export import export_plan

    say = progress or (lambda _msg: None)
    say("planning")
    result, latency_plan, _ = make_stream_plan(
        problem, time_limit=time_limit, max_latency_us=max_latency_us, progress=stream_stages(say)
    )
    chosen = [("partuner plan", result.best)]
    chosen += [(k, v) for k, v in result.baselines.items() if v is not result.best]
    seen: set[int] = set()
    rows: list[tuple[str, StreamPlan, StreamRun | None]] = []
    pool = stream_frames(graph, frames)

    def measure(name: str, sp: StreamPlan) -> None:
        seen.add(id(sp))
        run = None
        if not any(units[u].modeled for u in sp.units):
            say(f"streaming {frames} frames: {name}")
            pf = stream_plan_file(sp, result, graph, units)
            sessions = stream_sessions(graph, pf, units)
            try:
                precisions = [units[u].precision for u in sp.units]
                in_flight = [t.in_flight for t in sp.timings]
                run = measure_stream(sessions, in_flight, pool, check=True, precisions=precisions)
            finally:
                for s in sessions:
                    s.close()
        rows.append((name, sp, run))

    for name, sp in chosen:
        if id(sp) not in seen:
            measure(name, sp)
    if max_latency_us is None:
        kept, kept_run, note = _fastest_measured(result, rows)
    else:
        _measure_within(problem, result, rows, seen, max_latency_us, measure)
        kept, kept_run, note = _kept_within(result, rows, max_latency_us)
    say("exporting")
    outdir = Path(outdir)
    export_plan(graph, stream_plan_file(kept, result, graph, units), outdir)
    files = sorted(str(p.relative_to(outdir)) for p in outdir.rglob("*") if p.is_file())
    check = kept_run.check if kept_run is not None else None
    met = None
    if max_latency_us is not None and _ok(kept_run):
        met = _p99_sure_us(kept_run) <= max_latency_us  # type: ignore[arg-type]
    return StreamTuneResult(kept, result, latency_plan, rows, check, outdir, files, note, met)


MAX_EXTRA_MEASURED = 6  # streams measured beyond the plan and baselines to meet a latency bound


def _ok(run: StreamRun | None) -> bool:
    return run is not None and run.check is not None and run.check.passed


def _p99_us(run: StreamRun) -> float:
    return run.stats.latency_ms(99) * 1e3


def _p99_sure_us(run: StreamRun) -> float:
    """The measured p99's 95 % upper confidence bound (a p99 of a few hundred frames moves
    from run to run; the stream's true p99 is below its upper bound with 95 % confidence)."""
    return run.stats.latency_upper_ms(99) * 1e3


def _fastest_measured(
    result: ThroughputResult, rows: list[tuple[str, StreamPlan, StreamRun | None]]
) -> tuple[StreamPlan, StreamRun | None, str]:
    """The planned stream, or a baseline that measured more than 1 % faster."""
    from partuner.pipeline import MEASURED_MARGIN

    kept, kept_run, note = result.best, rows[0][2], ""
    measured = [(n, sp, r) for n, sp, r in rows if _ok(r)]
    if kept_run is not None and measured:
        name, sp, run = max(measured, key=lambda x: x[2].stats.throughput_fps)
        if sp is not kept and run.stats.throughput_fps > kept_run.stats.throughput_fps * (
            1 + MEASURED_MARGIN
        ):
            note = (
                f"the planned stream ({result.best.name}) ran {kept_run.stats.throughput_fps:.1f} "
                f"frames/s, the {name} {run.stats.throughput_fps:.1f} (predicted "
                f"{result.best.fps:.1f} vs {sp.fps:.1f}); the output holds the {name} instead"
            )
            kept, kept_run = sp, run
    return kept, kept_run, note


def _measure_within(
    problem: Problem,
    result: ThroughputResult,
    rows: list[tuple[str, StreamPlan, StreamRun | None]],
    seen: set[int],
    bound_us: float,
    measure: Callable[[str, StreamPlan], None],
) -> None:
    """Where the planned stream measured its p99 latency above ``bound_us``: measure the
    other candidates and the planned stream with fewer frames in flight, fastest predicted
    first, until one measured within the bound and no one left is predicted faster than it
    (at most :data:`MAX_EXTRA_MEASURED`)."""
    from partuner.plan.stream_plan import fewer_in_flight

    first = rows[0][2]
    if first is None or (_ok(first) and _p99_sure_us(first) <= bound_us):
        return
    more = [c for c in result.candidates.values() if id(c) not in seen]
    more += fewer_in_flight(problem, result.best)
    more.sort(key=lambda c: (-round(c.fps, 9), c.latency_us(99), c.name))
    for sp in more[:MAX_EXTRA_MEASURED]:
        fits = [p.fps for _, p, r in rows if _ok(r) and _p99_sure_us(r) <= bound_us]
        if fits and max(fits) >= sp.fps:
            break
        measure(sp.name, sp)


def _kept_within(
    result: ThroughputResult,
    rows: list[tuple[str, StreamPlan, StreamRun | None]],
    bound_us: float,
) -> tuple[StreamPlan, StreamRun | None, str]:
    """The fastest measured stream whose p99 latency measured within ``bound_us`` (else the
    lowest measured p99), with a note where that is not the planned one."""
    planned = rows[0][2]
    if planned is None:  # modeled units: nothing measured
        return result.best, None, ""
    ok = [(n, sp, r) for n, sp, r in rows if _ok(r)]
    if not ok:
        return result.best, planned, ""
    fits = [x for x in ok if _p99_sure_us(x[2]) <= bound_us]
    if fits:
        name, sp, run = max(fits, key=lambda x: x[2].stats.throughput_fps)
    else:
        name, sp, run = min(ok, key=lambda x: _p99_sure_us(x[2]))
    ms = bound_us / 1e3
    if sp is result.best and fits:
        return sp, run, ""
    if sp is result.best:  # none within: the planned one measured the lowest p99, said so
        return (
            sp,
            run,
            f"no stream measured within the bound {ms:.3f} ms (p99 taken as its 95 % upper "
            f"bound): the output holds the planned stream ({sp.name}), the lowest measured, "
            f"p99 {_p99_us(run) / 1e3:.3f} ms (95 % upper bound {_p99_sure_us(run) / 1e3:.3f})",
        )
    within = _ok(planned) and _p99_sure_us(planned) <= bound_us
    head = (
        f"the planned stream ({result.best.name}) measured p99 {_p99_us(planned) / 1e3:.3f} ms"
        f" (95 % upper bound {_p99_sure_us(planned) / 1e3:.3f}) "
        + (
            f"within the bound {ms:.3f} ms at {planned.stats.throughput_fps:.1f} frames/s, and "
            f"{name} ran more frames/s within it too; "
            if within
            else f"above the bound {ms:.3f} ms; "
        )
    )
    if not fits:
        return (
            sp,
            run,
            head
            + (
                f"no stream measured within it: the output holds the lowest measured p99, {name} "
                f"({_p99_us(run) / 1e3:.3f} ms, {run.stats.throughput_fps:.1f} frames/s)"
            ),
        )
    return (
        sp,
        run,
        head
        + (
            f"the output holds {name} ({run.stats.throughput_fps:.1f} frames/s measured, p99 "
            f"{_p99_us(run) / 1e3:.3f} ms)"
        ),
    )
