"""What a partition pays to write a value out for another partition, measured on its own.

A cut costs on both sides: the partition before it writes the values crossing it out of the
backend (converted back from its internal layout and precision, copied into a fresh array), the
partition after it reads them in. A unit's chain measurements (:mod:`partuner.profile.context`)
see both together, on one unit; a plan over two units pays them on two: an OpenVINO partition at
bf16 handing a tensor to onnxruntime pays its conversion out, onnxruntime its reading in. So the
writing side is measured apart: the model (or a restricted unit's largest region) runs as it is
and with the values that are already materialised inside it (those read by two nodes or more,
which no fusion keeps inside a kernel) exported as extra outputs, alternately; the median
difference over the extra bytes is the unit's cost per byte written out
(``UnitProfile.boundary_out_us_per_byte``), and the chain fit then charges reading what is
left (:func:`~partuner.profile.context.fit_chain_costs` with ``out_rate``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from partuner.export.cut import cut_nodes
from partuner.graph import ModelGraph
from partuner.profile.measure import failure, random_feeds
from partuner.profile.store import OK, Measurement
from partuner.units import Unit

__all__ = ["MIN_OUT_BYTES", "exported_values", "measure_outputs"]

MIN_OUT_BYTES = 1 << 18  # extra outputs below this measure nothing reliably: no row, rate 0


def exported_values(graph: ModelGraph) -> list[str]:
    """The values written out by the measurement: made by a compute node, read by two nodes or
    more, not already a model output."""
    out = []
    for n in graph.compute_nodes:
        for v in n.outputs:
            info = graph.values.get(v)
            if info is not None and not info.is_graph_output and len(info.consumers) >= 2:
                out.append(v)
    return out


def measure_outputs(
    unit: Unit,
    graph: ModelGraph,
    lookup: Callable[[str, Callable[[], Measurement]], Measurement | None],
    digest: str,
    budget_s: float,
) -> float:
    """µs per byte ``unit`` pays to write a value out for another partition (0 when the model
    has too few values to export, or the measurement failed or may not be made).

    ``lookup(signature, make)`` returns a stored measurement or makes (and stores) one; the row
    (``__outputs__#<digest>``) holds the median extra time of the runs with the extra outputs
    (µs) and, in its ``detail``, how many bytes they wrote.
    """
    extra = exported_values(graph)
    nbytes = float(sum(graph.values[v].nbytes for v in extra))
    if nbytes < MIN_OUT_BYTES:
        return 0.0

    def make() -> Measurement:
        try:
            nodes = [n.name for n in graph.compute_nodes]
            plain = cut_nodes(graph, "plain", nodes, check=False)[0]
            more = cut_nodes(graph, "outputs", nodes, extra_outputs=extra, check=False)[0]
            diffs = _time_pairs(unit, graph, plain, more, budget_s)
        except Exception as exc:  # a failed row (retried next run), not a crash
            return failure(exc)
        arr = np.asarray(diffs, dtype=float)
        return Measurement(
            max(0.0, float(np.median(arr))),
            max(0.0, float(np.percentile(arr, 10))),
            max(0.0, float(np.percentile(arr, 90))),
            len(diffs),
            OK,
            json.dumps({"bytes": nbytes, "values": len(extra)}),
        )

    m = lookup(f"__outputs__#{digest}", make)
    if m is None or m.status != OK:
        return 0.0
    try:
        written = float(json.loads(m.detail)["bytes"])
    except (ValueError, KeyError, TypeError):  # a damaged row: as if not measured
        return 0.0
    return m.median_us / written if written > 0 and m.median_us >= 0 else 0.0


def _time_pairs(
    unit: Unit, graph: ModelGraph, plain: object, more: object, budget_s: float
) -> list[float]:
    """The difference (µs) of the model with its extra outputs over it without, run in pairs,
    which one goes first alternating, until the budget is spent (at least 7 pairs)."""
    a, b = unit.prepare(plain), unit.prepare(more)
    feeds = random_feeds(graph, list(graph.inputs))
    try:
        for _ in range(2):
            a.run(feeds)
            b.run(feeds)
        diffs: list[float] = []
        t_end = time.perf_counter() + budget_s
        while len(diffs) < 7 or (time.perf_counter() < t_end and len(diffs) < 60):
            first, second = (a, b) if len(diffs) % 2 else (b, a)
            t0 = time.perf_counter()
            first.run(feeds)
            t1 = time.perf_counter()
            second.run(feeds)
            t2 = time.perf_counter()
            with_extra, without = (t1 - t0, t2 - t1) if first is b else (t2 - t1, t1 - t0)
            diffs.append((with_extra - without) * 1e6)
    finally:
        a.close()
        b.close()
    return diffs
