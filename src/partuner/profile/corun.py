"""Units slowing each other down: what a unit's work takes more while units of other lanes work.

Units on separate cores of one chip share its last-level cache and memory bandwidth (on a
virtual machine, whatever else the host shares between virtual cores). A latency plan mostly
keeps one unit working at a time, so timing each unit alone predicts it well; a stream keeps
every unit busy at once, and each unit's partitions then take longer than they were timed to
(``benchmarks/stream_bench.py`` on the stand-in CPU + NPU pair, the run of 2026-11-26 04:04,
before this: throughput plans, both units busy, 1.8-15.9 % below their prediction; the latency
plans' streams, one unit busy, -6.6 % to +0.9 %).

:func:`measure_corun` measures it per unit, on the model being profiled: each unit that works
here, beside the others (one per lane: units whose declared cores overlap never run at once),
runs its *workload* (the whole model where it runs every node, else its largest region of
nodes it runs) in a loop, alone and while every other one runs its own in its own thread,
alternately, :data:`ROUNDS` short rounds of each. A unit's *co-run factor* is the mean over
the rounds of its mean run time together over its mean alone in that round, without the
:data:`TRIM` highest and lowest rounds, at least 1. Means, not medians: in exploratory runs on
this project's VMs (not a benchmark), two busy virtual cores mostly cost each other a few per
cent, with bursts where both run far slower, which came only while both worked; a stream's
frames per second is its total time, bursts included. Many short rounds, alternating, spread
the drift over both sides; but a burst in a round or two of a few seconds' timing is not what
a stream of minutes meets (the stream benchmark of 2026-11-26 12:37, pooling every run:
1.00-1.15 on 11 of 12 models, 1.48 / 1.33 on one timed in a burst, whose plan then streamed
4.9 % faster than predicted), so the two rounds at either end are left out. A burst through
most rounds (docs/algorithms.md): a timing with a factor of :data:`BUSY_FACTOR` or more is timed
once more after :data:`RETIME_PAUSE_S`, the one whose highest factor is lower kept. The planner
scales a unit's partitions in a stream by it, in proportion to the time the other lanes are
busy (``plan/stream.py``), and in a latency plan each partition by the share of its run that
another lane works beside it (``plan/simulate.py``: branches run side by side).

Each factor is stored under its unit's fingerprint as ``__corun__#DIGEST#WITH#OWN`` (``WITH``:
a digest of every participant's fingerprint, op list and cores; ``OWN``: of the unit's own, and
which of the participants equal to it it is): ``median_us`` is the mean run time
together (µs; the percentiles are of those runs), ``detail`` JSON with ``alone_us`` (the mean
alone), ``factor`` and ``rounds`` (each round's ratio). A failed run stores a
``failed`` row (timed again next time) and leaves those units without a factor (planned as if
nothing slowed them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from partuner.export.cut import cut_nodes
from partuner.graph import ModelGraph
from partuner.profile.load import LoadMeter, is_busy, stale
from partuner.profile.measure import failure, random_feeds
from partuner.profile.regions import supported_regions
from partuner.profile.store import OK, Measurement, ProfileStore
from partuner.units import Runner, Unit

__all__ = ["CORUN_SIG", "ROUNDS", "corun_participants", "measure_corun", "unit_cores"]

log = logging.getLogger(__name__)

CORUN_SIG = "__corun__"
#: rounds of (each alone, all together)
ROUNDS = 12
#: rounds left out of a factor at each end (the fastest and the slowest ratios)
TRIM = 2
#: a factor is capped at this (a stored row says what it likes; ``plan.problem.MAX_CORUN``,
#: the same figure, is what a planning problem accepts)
MAX_FACTOR = 100.0
#: a factor this high is warned of (the stream benchmark's runs: 1.00-1.15 on a quiet VM)
BUSY_FACTOR = 1.3
#: seconds waited before a timing with a factor of BUSY_FACTOR or more is timed once more
RETIME_PAUSE_S = 1.0
#: runs of a workload a loop makes at least
MIN_RUNS = 5
#: seconds a unit may take to start its runs beside the others, or past its loop to end them
STALL_S = 60.0


def unit_cores(units: Mapping[str, Unit]) -> dict[str, frozenset[str]]:
    """The hardware each unit occupies, as the planner sees it: its declared cores, else a
    resource of its own."""
    out = {}
    for name, unit in units.items():
        cores = frozenset(f"core{c}" for c in unit.cores or ())
        out[name] = cores or frozenset({f"unit:{name}"})
    return out


def corun_participants(units: Mapping[str, Unit]) -> list[str]:
    """The units measured together: in ``units``' order, each whose hardware
    (:func:`unit_cores`) overlaps none taken before it (units of one lane never run at once;
    the later ones are not measured)."""
    cores = unit_cores(units)
    taken: list[str] = []
    for name in units:
        if all(not (cores[name] & cores[t]) for t in taken):
            taken.append(name)
    return taken


def measure_corun(
    graph: ModelGraph,
    units: Mapping[str, Unit],
    fingerprints: Mapping[str, str],
    store: ProfileStore | None,
    digest: str,
    budget_s: float,
    *,
    again: bool = False,
) -> dict[str, float]:
    """Each unit's co-run factor (module docstring); ``units`` are the participants (at least
    two, each working here). Factors stored for this model and these participants are reused,
    unless ``again`` or they were timed while other work took more than
    :data:`~partuner.profile.load.BUSY_SHARE` of the machine's cores (then timed again, and
    replaced unless the machine is no quieter now); a timing with a factor of
    :data:`BUSY_FACTOR` or more is timed once more and the lower kept (module docstring). A
    unit whose timing failed has none (a warning says so; the next run times it again).
    Factors of :data:`BUSY_FACTOR` or more (after the second timing) are warned of: more than
    units sharing caches cost each other, most likely other work on the machine while they
    were timed."""
    names = list(units)
    if len(names) < 2:
        return {}
    cores = unit_cores(units)
    role = {n: f"{fingerprints[n]}|{sorted(units[n].ops or ())}|{sorted(cores[n])}" for n in names}
    every = hashlib.sha256(json.dumps(sorted(role.values())).encode()).hexdigest()[:16]
    key: dict[str, str] = {}
    for n in names:  # a unit's own part: its role, and which of its equals it is
        own = hashlib.sha256(role[n].encode()).hexdigest()[:8]
        twin = sum(role[m] == role[n] for m in key)
        key[n] = f"{CORUN_SIG}#{digest}#{every}#{own}.{twin}"
    rows = {n: store.get(fingerprints[n], key[n]) if store is not None else None for n in names}
    stored = all(r is not None and r.status == OK for r in rows.values())
    was = max((r.load for r in rows.values() if r is not None and r.load is not None), default=0)
    meter = LoadMeter()
    meter.read()
    old = stored and any(stale(r, meter) for r in rows.values() if r is not None)
    if again or not stored or old:  # timed on a busy machine, or before loads were noted
        start = meter.read()
        new = _measure(graph, units, budget_s)
        if BUSY_FACTOR <= _highest(new) < math.inf:  # most likely a burst of the host's
            time.sleep(RETIME_PAUSE_S)
            second = _measure(graph, units, budget_s)
            if _highest(second) < _highest(new):
                new = second
        load = meter.share(start)
        worse = any(m.status != OK for m in new.values()) or (is_busy(load) and load >= was)
        if again or not stored or not worse:
            rows = {n: replace(m, load=load) for n, m in new.items()}
            if store is not None:
                for n, m in rows.items():
                    store.put(fingerprints[n], key[n], m, description=str(units[n].describe()))
    out: dict[str, float] = {}
    failed: dict[str, list[str]] = {}  # why -> the units it failed
    for n, m in rows.items():
        if m is not None and m.status == OK:
            out[n] = _factor(m)
        elif m is not None:  # one failure fails all: said once, for every unit it hit
            failed.setdefault(m.detail, []).append(n)
    for detail, names in failed.items():
        log.warning(
            "%s %s: timing %s beside the other units failed (%s); %s partitions are planned as "
            "if the others never slowed %s, and the next profiling run times %s again",
            *("unit", names[0], "it") if len(names) == 1 else ("units", ", ".join(names), "them"),
            detail,
            *("its", "it", "it") if len(names) == 1 else ("their", "them", "them"),
        )
    high = {n: f for n, f in out.items() if f >= BUSY_FACTOR}
    if high:
        loads = [r.load for r in rows.values() if r is not None and r.load is not None]
        load = max(loads, default=None)
        then = (
            f"other work took {load:.0%} of the machine's cores while it was timed: the next "
            "profiling run times it again"
            if is_busy(load)
            else "it is stored and reused; if the machine was busy then, time it again with "
            "`partuner profile MODEL --corun-again` (and the same --units)"
        )
        log.warning(
            "units slowed each other by %s when timed side by side: more than sharing caches "
            "and memory costs (a few per cent), as when other work runs on the machine; plans "
            "are charged with it where units run at once; %s",
            ", ".join(f"{n} x{f:.2f}" for n, f in sorted(high.items())),
            then,
        )
    return out


def _highest(rows: Mapping[str, Measurement]) -> float:
    """The highest factor of a timing's rows, infinite where one failed (never preferred)."""
    if any(m.status != OK for m in rows.values()):
        return math.inf
    return max((_factor(m) for m in rows.values()), default=1.0)


def _factor(m: Measurement) -> float:
    """An ``ok`` row's factor, at least 1 (1 for a row that says less): its ``factor``
    (the rounds' trimmed mean), or, in rows stored before there was one, the mean run time
    together over the mean alone."""
    try:
        info = json.loads(m.detail)
        if "factor" in info:
            f = float(info["factor"])
        else:
            alone = float(info["alone_us"])
            f = m.median_us / alone if alone > 0 else math.nan
    except (ValueError, KeyError, TypeError, ZeroDivisionError, RecursionError):
        return 1.0
    return min(MAX_FACTOR, max(1.0, f)) if math.isfinite(f) else 1.0


def _workload(graph: ModelGraph, unit: Unit) -> tuple[object, dict[str, np.ndarray]]:
    """The model (or its largest region ``unit`` runs) and random inputs for it."""
    runs = {n.name for n in graph.compute_nodes if unit.supports(n, graph)}
    if len(runs) == len(graph.compute_nodes):
        return graph.model, random_feeds(graph, list(graph.inputs))
    region = max(supported_regions(graph, runs), key=len)
    model, ins, _ = cut_nodes(graph, "corun", list(region))
    return model, random_feeds(graph, ins)


def _measure(
    graph: ModelGraph, units: Mapping[str, Unit], budget_s: float
) -> dict[str, Measurement]:
    runners: dict[str, Runner] = {}
    try:
        feeds = {}
        for n, u in units.items():
            model, feeds[n] = _workload(graph, u)
            runners[n] = u.prepare(model)
        return _time_together(runners, feeds, budget_s)
    except Exception as exc:  # a failed row for each (timed again next run), not a crash
        return dict.fromkeys(units, failure(exc))
    finally:
        for r in runners.values():
            r.close()


def _loop(runner: Runner, feeds: Mapping[str, np.ndarray], seconds: float) -> list[float]:
    """Run times (µs) of ``runner`` called back to back for ``seconds`` (at least MIN_RUNS)."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < MIN_RUNS or time.perf_counter() < end:
        t0 = time.perf_counter()
        runner.run(feeds)
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def _time_together(
    runners: Mapping[str, Runner], feeds: Mapping[str, Mapping[str, np.ndarray]], budget_s: float
) -> dict[str, Measurement]:
    names = list(runners)
    once = {}
    for n in names:  # warm-up, and how long one run takes
        runners[n].run(feeds[n])
        once[n] = statistics.median(_loop(runners[n], feeds[n], 0.0)[:3])
    seconds = max(budget_s / 2, MIN_RUNS * max(once.values()) / 1e6)
    alone: dict[str, list[float]] = {n: [] for n in names}
    together: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}  # per round: together / alone
    for _ in range(ROUNDS):
        mine = {n: _loop(runners[n], feeds[n], seconds) for n in names}
        got = _run_together(runners, feeds, seconds)
        for n in names:
            alone[n] += mine[n]
            together[n] += got[n]
            ratios[n].append(statistics.fmean(got[n]) / statistics.fmean(mine[n]))
    out = {}
    for n in names:
        a, t = statistics.fmean(alone[n]), statistics.fmean(together[n])
        detail = {
            "alone_us": a,
            "factor": trimmed_mean(ratios[n], TRIM),
            "rounds": [round(r, 4) for r in ratios[n]],
            "with": sorted(set(names) - {n}),
        }
        out[n] = Measurement(
            median_us=t,
            p10_us=float(np.percentile(together[n], 10)),
            p90_us=float(np.percentile(together[n], 90)),
            count=len(together[n]),
            detail=json.dumps(detail),
        )
    return out


def trimmed_mean(xs: Sequence[float], trim: int) -> float:
    """The mean of ``xs`` without its ``trim`` smallest and ``trim`` largest values (all of
    them when fewer than ``2 * trim + 1``).

    >>> trimmed_mean([1.0, 1.1, 1.05, 3.0, 1.02], 1)
    1.0566666666666666
    """
    ys = sorted(xs)
    if len(ys) > 2 * trim:
        ys = ys[trim : len(ys) - trim]
    return statistics.fmean(ys)


def _run_together(
    runners: Mapping[str, Runner], feeds: Mapping[str, Mapping[str, np.ndarray]], seconds: float
) -> dict[str, list[float]]:
    """Every runner in its own thread, started at once, each looping for ``seconds``."""
    names: Sequence[str] = list(runners)
    start = threading.Barrier(len(names))
    got: dict[str, list[float]] = {}
    errors: list[BaseException] = []

    def work(n: str) -> None:
        try:
            start.wait(timeout=STALL_S)
            got[n] = _loop(runners[n], feeds[n], seconds)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in names]
    try:
        for t in threads:
            t.start()
    except BaseException:  # one that could not start leaves the others at the barrier
        start.abort()
        raise
    end = time.perf_counter() + seconds + STALL_S
    for t in threads:
        t.join(timeout=max(0.0, end - time.perf_counter()))
    if errors:
        raise errors[0]
    stuck = [n for n, t in zip(names, threads, strict=True) if t.is_alive()]
    if stuck:
        raise RuntimeError(f"{stuck[0]} did not finish its runs within {seconds + STALL_S:.0f} s")
    return got
