"""What cutting a model costs on a unit, measured in context.

Running a model as several partitions costs more than running it whole, and far more than the
trivial per-call overhead suggests: every partition boundary converts tensors out of and back into
the backend's internal layouts (onnxruntime's NCHWc blocks, OpenVINO's bf16 blocked formats),
copies outputs, and runs with colder caches. The fitted costs per unit are what
``partuner profile`` shows as "per partition" and "per MB crossing" (compare the no-op call).

So each real unit runs the model cut into ``k`` consecutive chunks at random places
(``k = 4, 16, 32``, two cuts per ``k``; and the whole model, ``k = 1``, three times: first, in
the middle and last), one after the other on that unit, and the medians are fitted by least
squares (non-negative) to

    T = T_whole + per_partition_us * (k - 1) + per_byte_us * (bytes crossing the cuts)

``T_whole`` is the median of the three whole-model timings, which anchors every node cost of
the unit: a moment of load on the machine would otherwise set them all, and so would a quiet
moment (the smaller of two, as taken until 2026-11-28, predicted the runs after it too fast
on a VM whose speed drifts; docs/algorithms.md, the chain fit). The planner charges
``per_partition_us`` for every partition and ``per_byte_us`` for every byte a partition reads
from another one. The whole model (``k = 1``) runs as the runtime runs a one-partition plan
(:meth:`Unit.alone`: an onnxruntime pool keeps spinning between runs), so what a plan loses by
cutting shows in the per-partition cost.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from partuner.export.cut import PartitionModel, cut
from partuner.export.planfile import PartitionSpec
from partuner.graph import ModelGraph
from partuner.profile.measure import difference_measurement, failure, random_feeds, time_call
from partuner.profile.store import OK, Measurement
from partuner.units import Unit

__all__ = [
    "ChainFit",
    "IDLE_S",
    "chain_cuts",
    "chain_detail",
    "fit_chain_costs",
    "measure_chains",
    "measure_wake",
    "wake_measurement",
]

log = logging.getLogger(__name__)

CHAIN_KS = (1, 4, 16, 32)

#: the idle time before each chunk when measuring what waking up costs (a partition in a
#: multi-unit plan mostly starts after its unit waited for an input from another unit)
IDLE_S = 0.001
WAKE_K = 16


@dataclass(frozen=True)
class ChainFit:
    """The fitted cost of cutting a model on one unit."""

    whole_us: float  # the model as one call
    per_partition_us: float  # each extra partition
    per_byte_us: float  # each byte read across a cut
    points: tuple[tuple, ...]  # (partitions, bytes read, median µs[, bytes written])


def _chunks(graph: ModelGraph, k: int, rng: np.random.Generator) -> list[PartitionSpec]:
    names = [n.name for n in graph.compute_nodes]
    cuts = sorted(rng.choice(np.arange(1, len(names)), k - 1, replace=False)) if k > 1 else []
    bounds = [0, *[int(c) for c in cuts], len(names)]
    return [
        PartitionSpec(f"c{i}", "", tuple(names[a:b]))
        for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))
    ]


def _cut_bytes(graph: ModelGraph, parts: list[PartitionModel]) -> float:
    return float(
        sum(
            graph.values[v].nbytes
            for p in parts
            for v in p.inputs
            if not graph.values[v].is_graph_input
        )
    )


def _time_chain(
    unit: Unit, graph: ModelGraph, parts: list[PartitionModel], budget_s: float
) -> Measurement:
    if len(parts) == 1:  # the whole model runs as the runtime runs a one-partition plan
        unit = unit.alone()
    runners = [unit.prepare(p.model) for p in parts]
    feeds = random_feeds(graph, list(graph.inputs))

    def chain() -> None:
        env = dict(feeds)
        for p, r in zip(parts, runners, strict=True):
            env.update(r.run({v: env[v] for v in p.inputs}))

    try:
        return time_call(chain, budget_s=budget_s, min_repeats=5)
    finally:
        for r in runners:
            r.close()


def chain_cuts(graph: ModelGraph, digest: str) -> list[tuple[str, list[PartitionSpec]]]:
    """The cuts timed per unit: ``(signature, chunks)`` for each ``k`` of :data:`CHAIN_KS`
    (seeded, so a kit written elsewhere cuts the same way)."""
    n = len(graph.compute_nodes)
    rng = np.random.default_rng(0)
    out = []
    for k in CHAIN_KS:
        if k > n:
            break
        for trial in range(2):  # k = 1 too: the whole-model time anchors every cost
            out.append((f"__chain__#{digest}#k{k}#t{trial}", _chunks(graph, k, rng)))
    # the whole model's other two timings come in the middle and last, apart from the first:
    # a moment of load on the machine (or a quiet one) then sets at most one of the three
    whole = out.pop(1)
    out.insert(len(out) // 2 + 1, (f"__chain__#{digest}#k1#t2", whole[1]))
    out.append(whole)
    return out


def chain_detail(graph: ModelGraph, parts: list[PartitionModel]) -> str:
    """What a chain measurement's ``detail`` records: partitions, the bytes chunks read across
    cuts and the bytes they write out across them (each value once)."""
    made = {v for p in parts for v in p.outputs}
    read = {v for p in parts for v in p.inputs if v in made}
    written = float(sum(graph.values[v].nbytes for v in read))
    return json.dumps(
        {"partitions": len(parts), "bytes": _cut_bytes(graph, parts), "out_bytes": written}
    )


def measure_chains(
    unit: Unit,
    graph: ModelGraph,
    lookup: Callable[[str, Callable[[], Measurement]], Measurement | None],
    digest: str,
    budget_s: float,
) -> list[tuple[int, float, float]]:
    """Time the model cut into ``k`` chunks for each ``k`` of :data:`CHAIN_KS`.

    ``lookup(signature, make)`` returns a stored measurement or makes (and stores) one, or
    ``None`` when it may not measure; each point's cut bytes travel in the measurement's
    ``detail``. Returns no points if any cut could not be timed (its row says why).
    """
    points = []
    for sig, specs in chain_cuts(graph, digest):

        def make(specs: list[PartitionSpec] = specs) -> Measurement:
            try:
                parts = cut(graph, specs, check=False)
                m = _time_chain(unit, graph, parts, budget_s)
            except Exception as exc:  # a failed row (retried next run), not a crash
                return failure(exc)
            detail = chain_detail(graph, parts)
            return Measurement(m.median_us, m.p10_us, m.p90_us, m.count, m.status, detail)

        m = lookup(sig, make)
        if m is None and sig.endswith("#k1#t2"):
            continue  # a profile imported from a kit of an earlier version: two whole timings
        if m is None or m.status != OK:
            return []
        try:  # a stored row is input like any other (a store passed on): checked
            info = json.loads(m.detail)
            read = float(info["bytes"])  # rows of earlier versions: as many written as read
            point = (int(info["partitions"]), read, m.median_us, float(info.get("out_bytes", read)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            log.warning("store row %s of %s is damaged: cuts not fitted", sig, unit.name)
            return []
        points.append(point)
    return points


def fit_chain_costs(points: list[tuple], out_rate: float = 0.0) -> ChainFit | None:
    """Fit ``T = T_whole + c (k - 1) + beta * bytes`` with ``c, beta >= 0``, where ``bytes``
    are what chunks read across the cuts, after taking off ``out_rate`` (µs per byte: what
    writing a value out for another partition costs, measured apart by
    :func:`~partuner.profile.outputs.measure_outputs`) times what they write out across them
    (each point ``(k, bytes read, µs)``, or ``(k, bytes read, µs, bytes written)``).

    Examples
    --------
    >>> pts = [(1, 0.0, 100.0), (4, 1e5, 100 + 3 * 20 + 5.0), (16, 4e5, 100 + 15 * 20 + 20.0)]
    >>> f = fit_chain_costs(pts)
    >>> round(f.per_partition_us, 6), round(f.per_byte_us * 1e5, 6)
    (20.0, 5.0)
    """
    if not points:
        return None
    k = np.array([p[0] - 1 for p in points], dtype=float)
    b = np.array([p[1] for p in points], dtype=float)
    out = np.array([p[3] if len(p) > 3 else p[1] for p in points], dtype=float)
    y = np.array([p[2] for p in points], dtype=float) - max(0.0, out_rate) * out
    whole = [p[2] for p in points if p[0] == 1]
    anchor = float(np.median(whole)) if whole else None
    if len(points) < 3:
        return ChainFit(float(y.min()) if anchor is None else anchor, 0.0, 0.0, tuple(points))
    best = None
    for cols in ((True, True), (True, False), (False, True), (False, False)):
        x = [np.ones_like(y)] + [c for c, use in zip((k, b), cols, strict=True) if use]
        coef, *_ = np.linalg.lstsq(np.stack(x, axis=1), y, rcond=None)
        if any(c < 0 for c in coef[1:]):
            continue
        full = iter(coef[1:])
        c_k = next(full) if cols[0] else 0.0
        c_b = next(full) if cols[1] else 0.0
        resid = float(np.sum((y - coef[0] - c_k * k - c_b * b) ** 2))
        if best is None or resid < best[0] - 1e-12:
            best = (resid, float(coef[0]), float(c_k), float(c_b))
    assert best is not None  # the constant-only model always qualifies
    _, base, c_k, c_b = best
    return ChainFit(base if anchor is None else anchor, c_k, c_b, tuple(points))


def measure_wake(
    unit: Unit,
    graph: ModelGraph,
    lookup: Callable[[str, Callable[[], Measurement]], Measurement | None],
    digest: str,
    budget_s: float,
) -> float:
    """What a partition costs more when its unit was idle before it, in µs (0 if unknown).

    The chunks of the 16-chunk cut of :func:`chain_cuts` (of a model of fewer than 16 nodes,
    such as a restricted unit's region: its largest cut) run one after the other, once back
    to back and once with :data:`IDLE_S` of sleep before each chunk (only the chunks' own run
    times summed), alternately; the median per-round difference over the chunks is the cost.
    A chain measurement runs back to back, so it misses what a plan's partitions pay after
    waiting for another unit: the calling thread and the backend's own worker threads woken
    up, caches gone cold (1 ms of sleep costs a small OpenVINO sub-model some 100-300 µs on
    this project's VMs, an onnxruntime one less).
    """
    n = len(graph.compute_nodes)
    if n < 4:
        return 0.0
    # the 16-chunk cut; a model (a restricted unit's region) of fewer nodes: its largest cut
    k = max(c for c in CHAIN_KS if c <= min(n, WAKE_K))
    specs = next(sp for sig, sp in chain_cuts(graph, digest) if sig.endswith(f"#k{k}#t0"))

    def make() -> Measurement:
        try:
            parts = cut(graph, specs, check=False)
            return _time_wake(unit, graph, parts, budget_s)
        except Exception as exc:  # a failed row (retried next run), not a crash
            return failure(exc)

    m = lookup(f"__wake__#{digest}#k{k}", make)
    if m is None or m.status != OK or not math.isfinite(m.median_us):
        return 0.0
    return max(m.median_us, 0.0)


def _time_wake(
    unit: Unit, graph: ModelGraph, parts: list[PartitionModel], budget_s: float
) -> Measurement:
    runners = [unit.prepare(p.model) for p in parts]
    feeds = random_feeds(graph, list(graph.inputs))

    def chain(idle: float) -> float:
        env, busy = dict(feeds), 0.0
        for p, r in zip(parts, runners, strict=True):
            if idle:
                time.sleep(idle)
            t0 = time.perf_counter()
            env.update(r.run({v: env[v] for v in p.inputs}))
            busy += time.perf_counter() - t0
        return busy

    try:
        chain(0.0)
        chain(IDLE_S)
        diffs: list[float] = []
        t_end = time.perf_counter() + budget_s
        while len(diffs) < 5 or (time.perf_counter() < t_end and len(diffs) < 50):
            a = chain(0.0) if len(diffs) % 2 else 0.0
            b = chain(IDLE_S)
            a = a or chain(0.0)  # which goes first alternates
            diffs.append((b - a) * 1e6 / len(parts))
    finally:
        for r in runners:
            r.close()
    return wake_measurement(diffs, len(parts))


def wake_measurement(diffs: list[float], partitions: int) -> Measurement:
    """The stored row of a wake-up measurement (:func:`difference_measurement`)."""
    return difference_measurement(diffs, {"partitions": partitions, "idle_s": IDLE_S})
