"""Closing the loop: per-unit correction factors (measured / predicted) kept in the profile store.

After a plan ran, each measured unit's partitions took some time; the plan predicted another.
The ratio of the two, summed over a unit's partitions (``sum measured / sum predicted``), is its
correction factor for this model: weighted by time, so that the partitions where node costs
weigh most decide it (a median of per-partition ratios let many small partitions, run faster
than predicted, outvote the large ones that ran slower: factor 0.86 where the unit took 1.32x
its prediction). It is stored as a profile-store row (the schema is unchanged):

* fingerprint: the unit's fingerprint (identical units share the row, as they share costs; the
  factor then pools their partitions);
* signature: ``__calibration__#<model digest>`` (the digest the profiler uses for the model);
* ``median_us``: the factor (a ratio, not µs), ``p10_us``/``p90_us``: the spread of the
  per-partition ratios, ``count``: partitions pooled, ``detail``: what was compared.

Modeled units are skipped (their host run says nothing about the device they stand for), as are
partitions predicted to take no time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from partuner.graph import ModelGraph
from partuner.profile.store import Measurement, ProfileStore
from partuner.units import UnitSet

__all__ = [
    "CALIBRATION_PREFIX",
    "UnitCalibration",
    "calibrate_plan",
    "calibration_signature",
    "correction_factors",
    "load_calibration",
    "model_digest",
    "store_calibration",
]

CALIBRATION_PREFIX = "__calibration__#"


def model_digest(graph: ModelGraph) -> str:
    """The model digest the profiler keys model-level rows with (``__chain__#<digest>...``)."""
    try:
        from partuner.profile.signature import model_digest as digest
    except ImportError:  # older profile package: the profiler's private copy
        from partuner.profile.profiler import _model_digest as digest
    return digest(graph)


def calibration_signature(graph: ModelGraph) -> str:
    """The store signature of ``graph``'s correction factors: ``__calibration__#<digest>``."""
    return CALIBRATION_PREFIX + model_digest(graph)


@dataclass(frozen=True)
class UnitCalibration:
    """One fingerprint's correction factor: its partitions' measured time over predicted."""

    fingerprint: str
    units: tuple[str, ...]
    factor: float
    p10: float
    p90: float
    partitions: int
    measured_ms: float  # sums over the pooled partitions
    predicted_ms: float


def correction_factors(
    rows: Iterable[tuple[str, float, float]], units: UnitSet
) -> dict[str, UnitCalibration]:
    """Correction factors by unit fingerprint from ``(unit, measured_us, predicted_us)`` rows,
    one per partition. Modeled units and rows with a non-positive or unknown time are skipped.

    Examples
    --------
    >>> from partuner.units import units_from_mapping
    >>> us = units_from_mapping({"units": {"a": {"backend": "onnxruntime"}}})
    >>> f = correction_factors([("a", 120.0, 100.0), ("a", 300.0, 200.0), ("a", 80, 100)], us)
    >>> round(next(iter(f.values())).factor, 3)
    1.25
    """
    pooled: dict[str, list[tuple[str, float, float]]] = {}
    for unit, measured, predicted in rows:
        u = units[unit]
        ok = all(x is not None and math.isfinite(x) and x > 0 for x in (measured, predicted))
        if u.modeled or not ok:
            continue
        pooled.setdefault(u.fingerprint(), []).append((unit, measured, predicted))
    out = {}
    for fp, items in pooled.items():
        ratios = [m / p for _, m, p in items]
        out[fp] = UnitCalibration(
            fingerprint=fp,
            units=tuple(dict.fromkeys(u for u, _, _ in items)),
            factor=sum(m for _, m, _ in items) / sum(p for _, _, p in items),
            p10=float(np.percentile(ratios, 10)),
            p90=float(np.percentile(ratios, 90)),
            partitions=len(items),
            measured_ms=sum(m for _, m, _ in items) / 1e3,
            predicted_ms=sum(p for _, _, p in items) / 1e3,
        )
    return out


def store_calibration(
    store: ProfileStore,
    graph: ModelGraph,
    factors: Mapping[str, UnitCalibration],
    *,
    plan: str = "",
) -> str:
    """Write one row per fingerprint of ``factors``; returns the signature used."""
    sig = calibration_signature(graph)
    for fp, c in factors.items():
        detail = (
            f"correction factor measured/predicted (summed over {c.partitions} partitions on "
            f"{', '.join(c.units)}: {c.measured_ms:.3f} ms measured vs {c.predicted_ms:.3f} ms "
            f"predicted; plan {plan or '-'})"
        )
        store.put(fp, sig, Measurement(c.factor, c.p10, c.p90, c.partitions, "ok", detail))
    return sig


def calibrate_plan(
    store: ProfileStore,
    graph: ModelGraph,
    units: UnitSet,
    partitions: Iterable[Any],
    measured_ms: Mapping[str, float],
    ran_units: Mapping[str, str] | None = None,
    *,
    plan: str = "",
) -> tuple[str | None, dict[str, UnitCalibration]]:
    """Compare a run with its plan and store the factors; ``(signature or None, factors)``.

    ``partitions`` have ``name, unit, start_us, end_us`` (a plan file's); ``measured_ms`` is the
    median time of each partition (``RunStats.partition_ms``); ``ran_units`` the unit each ran
    on: a partition that fell back to another unit is skipped (it was predicted for its own).
    """
    rows = []
    for p in partitions:
        unit = (ran_units or {}).get(p.name, p.unit)
        measured, predicted = measured_ms.get(p.name), p.end_us - p.start_us
        if unit == p.unit and measured is not None and math.isfinite(predicted):
            rows.append((unit, measured * 1e3, predicted))
    factors = correction_factors(rows, units)
    if not factors:
        return None, {}
    return store_calibration(store, graph, factors, plan=plan), factors


def load_calibration(store: ProfileStore, graph: ModelGraph, units: UnitSet) -> dict[str, float]:
    """``{unit name: factor}`` for the units of ``units`` with a stored factor for ``graph``."""
    sig = calibration_signature(graph)
    out = {}
    for u in units:
        m = store.get(u.fingerprint(), sig)
        if m is not None and m.status == "ok" and math.isfinite(m.median_us):
            out[u.name] = m.median_us
    return out
