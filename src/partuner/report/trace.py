"""Timelines: what the plan predicted and what a run measured, as Chrome trace-event JSON.

The file opens in Perfetto (ui.perfetto.dev) or ``chrome://tracing``. Two processes, "predicted"
and "measured", each hold one thread (track) per unit; every partition is one complete ("X")
slice on its unit's track. A value handed from a partition on one unit to a partition on another
is a flow arrow from the producer's slice to the consumer's, plus an instant marker on the
consumer's track when it was taken. Times are µs from the start of the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partuner.export.cut import PartitionModel
from partuner.export.planfile import PartitionSpec, atomic_write
from partuner.runtime.session import PartitionTrace, TransferTrace

__all__ = [
    "Handoff",
    "Slice",
    "chrome_trace",
    "measured_handoffs",
    "measured_slices",
    "predicted_handoffs",
    "predicted_slices",
    "write_trace",
]

PREDICTED_PID = 1
MEASURED_PID = 2


@dataclass(frozen=True)
class Slice:
    """One partition on one unit from ``start_us`` to ``end_us``."""

    partition: str
    unit: str
    start_us: float
    end_us: float
    nodes: int = 0


@dataclass(frozen=True)
class Handoff:
    """A value leaving ``src_partition`` at ``ready_us``, taken by ``dst_partition`` at
    ``taken_us``."""

    value: str
    nbytes: int
    src_partition: str
    src_unit: str
    dst_partition: str
    dst_unit: str
    ready_us: float
    taken_us: float


def predicted_slices(partitions: Iterable[PartitionSpec]) -> list[Slice]:
    """The plan's partitions with their predicted start and end (those without are skipped)."""
    return [
        Slice(p.name, p.unit, p.start_us, p.end_us, len(p.nodes))
        for p in partitions
        if math.isfinite(p.start_us) and math.isfinite(p.end_us)
    ]


def measured_slices(
    trace: Iterable[PartitionTrace], nodes: Mapping[str, int] | None = None
) -> list[Slice]:
    """A run's ``Session.last_trace`` as slices (µs)."""
    n = nodes or {}
    return [
        Slice(t.partition, t.unit, t.start_s * 1e6, t.end_s * 1e6, n.get(t.partition, 0))
        for t in trace
    ]


def measured_handoffs(transfers: Iterable[TransferTrace]) -> list[Handoff]:
    """A run's ``Session.last_transfers`` as hand-offs (µs)."""
    return [
        Handoff(
            t.value,
            t.nbytes,
            t.src_partition,
            t.src_unit,
            t.dst_partition,
            t.dst_unit,
            t.ready_s * 1e6,
            t.taken_s * 1e6,
        )
        for t in transfers
    ]


def predicted_handoffs(
    parts: Sequence[PartitionModel], slices: Sequence[Slice], nbytes: Mapping[str, int]
) -> list[Handoff]:
    """The cross-unit values of the cut ``parts``, timed by the predicted ``slices``."""
    at = {s.partition: s for s in slices}
    producer = {v: p for p in parts for v in p.outputs}
    out = []
    for p in parts:
        for v in p.inputs:
            src = producer.get(v)
            if src is None or src.unit == p.unit or src.name not in at or p.name not in at:
                continue
            out.append(
                Handoff(
                    v,
                    int(nbytes.get(v, 0)),
                    src.name,
                    src.unit,
                    p.name,
                    p.unit,
                    at[src.name].end_us,
                    at[p.name].start_us,
                )
            )
    return out


def _meta(
    pid: int, name: str, units: Sequence[str], labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}},
        {
            "ph": "M",
            "pid": pid,
            "tid": 0,
            "name": "process_sort_index",
            "args": {"sort_index": pid},
        },
    ]
    for k, u in enumerate(units, start=1):
        label = (labels or {}).get(u, u)
        ev.append({"ph": "M", "pid": pid, "tid": k, "name": "thread_name", "args": {"name": label}})
        ev.append(
            {
                "ph": "M",
                "pid": pid,
                "tid": k,
                "name": "thread_sort_index",
                "args": {"sort_index": k},
            }
        )
    return ev


def _side(
    pid: int,
    slices: Sequence[Slice],
    handoffs: Sequence[Handoff],
    tid: Mapping[str, int],
    next_id: list[int],
) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = []
    at = {s.partition: s for s in slices}
    for s in slices:
        ev.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": tid[s.unit],
                "name": s.partition,
                "cat": "partition",
                "ts": s.start_us,
                "dur": max(s.end_us - s.start_us, 0.0),
                "args": {"unit": s.unit, "nodes": s.nodes},
            }
        )
    for h in handoffs:
        src, dst = at.get(h.src_partition), at.get(h.dst_partition)
        if src is None or dst is None:
            continue
        next_id[0] += 1
        name = f"{h.value} ({h.nbytes} B)"
        args = {"value": h.value, "bytes": h.nbytes, "wait_us": h.taken_us - h.ready_us}
        ev.append(  # flow start inside the producer's slice, end bound to the consumer's
            {
                "ph": "s",
                "pid": pid,
                "tid": tid[src.unit],
                "id": next_id[0],
                "name": name,
                "cat": "transfer",
                "ts": (src.start_us + src.end_us) / 2,
            }
        )
        ev.append(
            {
                "ph": "f",
                "bp": "e",
                "pid": pid,
                "tid": tid[dst.unit],
                "id": next_id[0],
                "name": name,
                "cat": "transfer",
                "ts": dst.start_us,
            }
        )
        ev.append(
            {
                "ph": "i",
                "s": "t",
                "pid": pid,
                "tid": tid[h.dst_unit] if h.dst_unit in tid else tid[dst.unit],
                "name": f"{h.value} from {h.src_unit}",
                "cat": "transfer",
                "ts": h.taken_us,
                "args": args,
            }
        )
    return ev


def chrome_trace(
    predicted: Sequence[Slice],
    measured: Sequence[Slice],
    predicted_transfers: Sequence[Handoff] = (),
    measured_transfers: Sequence[Handoff] = (),
    *,
    units: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    emulated: Collection[str] = (),
) -> dict[str, Any]:
    """The Chrome trace-event document (JSON object format) of a predicted and a measured run.

    ``units`` orders the tracks (default: first appearance); ``metadata`` goes to ``otherData``;
    the measured tracks of ``emulated`` units (modeled: their outputs computed on the host) say
    so in their names, as their times are the host's, not the unit's.
    """
    order = list(units or [])
    for s in (*predicted, *measured):
        if s.unit not in order:
            order.append(s.unit)
    tid = {u: k for k, u in enumerate(order, start=1)}
    next_id = [0]
    events = _meta(PREDICTED_PID, "predicted", order) + _meta(
        MEASURED_PID,
        "measured",
        order,
        {u: f"{u} (modeled: emulated on the host)" for u in emulated},
    )
    events += _side(PREDICTED_PID, predicted, predicted_transfers, tid, next_id)
    events += _side(MEASURED_PID, measured, measured_transfers, tid, next_id)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {str(k): v for k, v in (metadata or {}).items()},
    }


def write_trace(path: str | Path, trace: Mapping[str, Any]) -> None:
    """Write a trace document as JSON, atomically (non-finite numbers become null)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    atomic_write(path, json.dumps(clean(trace)))
