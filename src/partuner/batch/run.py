"""Running a split: one thread per unit, each with a runner prepared for its sub-batch size,
outputs concatenated in input order and checked against the whole batch on one reference.

Timing covers what a caller of the split pays: handing each unit its slice of the inputs (numpy
views, no copy), every unit's ``runner.run`` (numpy in, numpy out), waiting for the slowest and
concatenating the outputs. The reference is onnxruntime's CPU provider in f32 on the whole batch
(:func:`partuner.pipeline.reference_outputs`), compared with
:func:`partuner.runtime.check_outputs` under the rule of the least exact unit that got items.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from partuner.batch.model import BatchError, BatchModel
from partuner.batch.split import Split, conflicts_from_cores
from partuner.errors import UnitUnavailableError
from partuner.profile.measure import random_feeds
from partuner.runtime import CheckResult, check_outputs
from partuner.units import Runner, UnitSet

__all__ = [
    "RunStats",
    "RunnerCache",
    "SplitRun",
    "batch_feeds",
    "reference",
    "run_split",
    "time_fixed",
    "unit_throughput",
]

log = logging.getLogger(__name__)


@dataclass
class RunStats:
    """Wall time over ``runs`` timed runs, in µs; ``unit_us``: each unit's median inside them."""

    median_us: float
    p10_us: float
    p90_us: float
    runs: int
    unit_us: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, samples_s: Sequence[float], unit_s: Mapping[str, list[float]] | None = None):
        arr = np.asarray(samples_s) * 1e6
        return cls(
            float(np.median(arr)),
            float(np.percentile(arr, 10)),
            float(np.percentile(arr, 90)),
            len(arr),
            {u: statistics.median(v) * 1e6 for u, v in (unit_s or {}).items()},
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "median_ms": self.median_us / 1e3,
            "p10_ms": self.p10_us / 1e3,
            "p90_ms": self.p90_us / 1e3,
            "runs": self.runs,
            "unit_ms": {u: t / 1e3 for u, t in self.unit_us.items()},
        }


def time_fixed(fn: Callable[[], object], repeat: int, warmup: int = 1) -> RunStats:
    """Run ``fn`` ``warmup`` times, then time ``repeat`` runs."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return RunStats.of(samples)


class RunnerCache:
    """Runners prepared per ``(unit, batch size)``, closed together by :meth:`close`."""

    def __init__(self, model: BatchModel, units: UnitSet) -> None:
        self.model, self.units = model, units
        self._runners: dict[tuple[str, int], Runner] = {}

    def get(self, unit: str, batch: int) -> Runner:
        key = (unit, batch)
        if key not in self._runners:
            self._runners[key] = self.units[unit].prepare(self.model.at(batch).model)
        return self._runners[key]

    def close(self) -> None:
        for r in self._runners.values():
            try:
                r.close()
            except Exception:  # closing must not hide the error that brought us here
                log.debug("runner close failed", exc_info=True)
        self._runners.clear()

    def __enter__(self) -> RunnerCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def batch_feeds(model: BatchModel, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the whole batch (floats ~ N(0, 1), integers zero)."""
    g = model.at(batch)
    return random_feeds(g, list(g.inputs), seed=seed)


def reference(model: BatchModel, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole batch on onnxruntime's CPU provider in f32 (the check's reference)."""
    from partuner.pipeline import reference_outputs

    batch = next(iter(feeds.values())).shape[0]
    return reference_outputs(model.at(batch), dict(feeds))


@dataclass
class SplitRun:
    """A split, run: measured time, the output check, and whether a modeled unit took part
    (its measured time is then the host's emulation, not the unit's)."""

    split: Split
    stats: RunStats
    check: CheckResult
    modeled: bool
    retried: dict[str, str] = field(default_factory=dict)  # lost unit -> unit that ran its share

    @property
    def throughput(self) -> float:
        """Items per second, measured."""
        return self.split.batch / (self.stats.median_us / 1e6)

    def to_dict(self) -> dict[str, object]:
        return {
            **self.split.to_dict(),
            "measured_ms": self.stats.median_us / 1e3,
            "measured": self.stats.to_dict(),
            "throughput": self.throughput,
            "check": self.check.to_dict(),
            "modeled": self.modeled,
            "timing": "emulated on the host" if self.modeled else "measured",
            "retried": dict(self.retried),
        }


def run_split(
    model: BatchModel,
    units: UnitSet,
    split: Split,
    feeds: Mapping[str, np.ndarray],
    *,
    repeat: int = 10,
    warmup: int = 2,
    runners: RunnerCache | None = None,
    ref: Mapping[str, np.ndarray] | None = None,
    lost: set[str] | None = None,
) -> tuple[SplitRun, dict[str, np.ndarray]]:
    """Run ``split`` on ``feeds`` (the whole batch) ``warmup + repeat`` times, concurrently.

    Returns the run (measured time, check against ``ref`` or :func:`reference`) and the merged
    outputs of the last run.

    A unit that fails as unavailable (a Ray node lost mid-batch) fails the call, naming it;
    with ``lost`` (a set, shared between calls) it is added there and its share re-runs on
    the unit left that was fastest per item in that run, outputs still in input order
    (``SplitRun.retried``: lost unit -> the unit that took its share).

    Raises
    ------
    BatchError : the feeds do not hold ``split.batch`` items, or two units that share cores
        both got items.
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise BatchError(f"repeat must be an integer >= 1, got {repeat!r}")
    batch = split.batch
    for k, v in feeds.items():
        if v.shape[:1] != (batch,):
            raise BatchError(
                f"input {k!r} holds {v.shape[0] if v.ndim else 0} items, the split {batch}"
            )
    active = split.active
    clash = conflicts_from_cores({u: units[u].cores for u in active})
    both = [(u, v) for u in active for v in clash[u] if u < v]
    if both:
        raise BatchError(f"units {both[0][0]!r} and {both[0][1]!r} share cores; split again")
    own = runners or RunnerCache(model, units)
    jobs = []
    for unit, start, stop in split.slices():
        part = {k: v[start:stop] for k, v in feeds.items()}
        jobs.append((unit, start, stop, part))
    outputs = model.outputs
    unit_s: dict[str, list[float]] = {u: [] for u in active}
    samples: list[float] = []
    merged: dict[str, np.ndarray] = {}
    retried: dict[str, str] = {}

    def work(unit: str, part: dict[str, np.ndarray]) -> tuple[dict, float]:
        t0 = time.perf_counter()
        out = own.get(unit, len(next(iter(part.values())))).run(part)
        return out, time.perf_counter() - t0

    try:
        with ThreadPoolExecutor(max_workers=max(len(jobs) - 1, 1)) as pool:
            for i in range(warmup + repeat):
                t0 = time.perf_counter()
                live = [j for j in jobs if lost is None or j[0] not in lost]
                futs = [pool.submit(work, u, p) for u, _, _, p in live[1:]]
                got: dict[str, tuple[dict, float] | BaseException] = {}
                for (u, _, _, p), f in zip(live, [None, *futs], strict=True):
                    try:
                        got[u] = work(u, p) if f is None else f.result()
                    except UnitUnavailableError as exc:  # a lost node (RayNodeLost) or unit
                        if lost is None:
                            raise BatchError(
                                f"unit {u!r} failed during the batch: {exc}; pass --retry to "
                                "re-run its share on the other units"
                            ) from None
                        lost.add(u)
                        got[u] = exc
                        log.warning("%s; its share runs on the fastest unit left (--retry)", exc)
                for u, _, _, p in jobs:  # shares of lost units, on the fastest left
                    if isinstance(got.get(u), tuple):
                        continue
                    ok = {v: r for v, r in got.items() if isinstance(r, tuple)}
                    if not ok:
                        raise BatchError(
                            f"every unit of the split was lost ({', '.join(sorted(lost or ()))});"
                            " nothing left to run the batch on"
                        )
                    other = min(ok, key=lambda v: ok[v][1] / max(_items(ok[v][0]), 1))
                    retried[u] = other
                    got[u] = work(other, p)
                results = [got[u] for u, _, _, _ in jobs]
                if len(results) == 1:
                    merged = dict(results[0][0])
                else:
                    merged = {
                        o: np.concatenate([r[0][o] for r in results], axis=0) for o in outputs
                    }
                wall = time.perf_counter() - t0
                if i >= warmup:
                    samples.append(wall)
                    for (unit, _, _, _), (_, t) in zip(jobs, results, strict=True):
                        unit_s[unit].append(t)
    finally:
        if runners is None:
            own.close()
    if ref is None:
        ref = reference(model, feeds)
    check = check_outputs(ref, merged, [units[u].precision for u in active])
    modeled = any(units[u].modeled for u in active)
    return SplitRun(split, RunStats.of(samples, unit_s), check, modeled, retried), merged


def _items(outputs: Mapping[str, np.ndarray]) -> int:
    first = next(iter(outputs.values()), None)
    return 0 if first is None or first.ndim == 0 else int(first.shape[0])


def unit_throughput(
    model: BatchModel,
    units: UnitSet,
    curves: Mapping[str, object],
    feeds: Mapping[str, np.ndarray],
    *,
    repeat: int = 10,
    runners: RunnerCache | None = None,
    lost: set[str] | None = None,
) -> dict[str, dict[str, object]]:
    """Each unit alone on the whole batch (or on as many items as it takes), measured now;
    with ``lost``, units in it are left out and a unit found lost is added to it.

    Returns per unit ``{"batch", "median_ms", "throughput" (items/s), "modeled"}``; a modeled
    unit's figure comes from its curve. Units without a curve (they failed at batch 1) are left
    out.
    """
    batch = next(iter(feeds.values())).shape[0]
    own = runners or RunnerCache(model, units)
    out: dict[str, dict[str, object]] = {}
    try:
        for name, curve in curves.items():
            b = min(batch, curve.max_batch)  # type: ignore[attr-defined]
            if lost is not None and name in lost:
                continue
            if units[name].modeled:
                us = curve(b)  # type: ignore[operator]
            else:
                part = {k: v[:b] for k, v in feeds.items()}
                try:
                    runner = own.get(name, b)
                    us = time_fixed(lambda r=runner, p=part: r.run(p), repeat).median_us
                except UnitUnavailableError:
                    if lost is None:
                        raise
                    lost.add(name)
                    continue
            out[name] = {
                "batch": b,
                "median_ms": us / 1e3,
                "throughput": b / (us / 1e6),
                "modeled": units[name].modeled,
                "timing": "modeled" if units[name].modeled else "measured",
            }
    finally:
        if runners is None:
            own.close()
    return out
