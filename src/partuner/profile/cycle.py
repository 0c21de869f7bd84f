"""What a restricted unit's regions cost in a plan beyond their time alone, measured.

A unit that runs only part of a model (an NPU beside a CPU) runs its regions in a plan one
after another, each a compiled sub-model of its own, each after waiting for the CPU's part in
between, on the runtime's worker thread. A region timed alone, called again and again, is
faster than that: its weights and the backend's buffers stay in cache, its thread never waits.
The per-partition cost fitted on one region cut into chunks misses that: on the CPU + NPU
stand-in (benchmarks/standin_bench.py; OpenVINO bf16 on one core, ShuffleNet's 17 regions) the
plan cutting the model at every unsupported node measured 51.9 % slower than predicted in the
recorded run before this measurement, 13.7 % faster in the one after it.

So the regions are run as a plan runs them (:func:`measure_cycle`): all of them in the model's
order, on a thread other than the one that prepared them, with :data:`~partuner.profile.context.
IDLE_S` of sleep before each call (the other unit's turn), against each region called twice in a
row on the same thread (the second call: the region alone, warm), the two interleaved round by
round. Per region, the median difference is what a plan pays more for running it; the planner
charges the median over the regions (weighted by the inverse of their time:
``RegionCosts.plan_extra_us``) as a larger per-partition cost of the unit.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from partuner.profile.context import IDLE_S
from partuner.profile.measure import difference_measurement, failure
from partuner.profile.store import OK, Measurement
from partuner.units import Unit

__all__ = ["CYCLE_MAX_REGIONS", "measure_cycle"]

#: at most this many regions (the longest-running ones) are cycled; a model cut into hundreds
#: of regions would otherwise hold hundreds of compiled sub-models at once
CYCLE_MAX_REGIONS = 64

Lookup = Callable[[str, Callable[[], Measurement]], Measurement | None]


def measure_cycle(
    unit: Unit,
    regions: Sequence[tuple[onnx.ModelProto, dict[str, np.ndarray]]],
    lookup: Lookup,
    signature: str,
    budget_s: float,
) -> list[float] | None:
    """Per region (a model and its feeds, in plan order), what it costs more run as a plan
    runs it than alone, in µs; ``None`` if it could not be measured (two regions at least)."""
    if len(regions) < 2:
        return None

    def make() -> Measurement:
        try:
            diffs = _time_cycle(unit, regions, budget_s)
        except Exception as exc:  # a failed row (timed again next run), not a crash
            return failure(exc)
        per = [statistics.median(d) for d in diffs]
        detail = {
            "regions": len(regions),
            "idle_s": IDLE_S,
            "per_region": [round(x, 3) for x in per],
        }
        return difference_measurement(per, detail)

    m = lookup(signature, make)
    if m is None or m.status != OK or not m.detail:
        return None
    try:  # a stored row is input like any other (an imported profile): checked, never trusted
        per = [float(x) for x in json.loads(m.detail)["per_region"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if len(per) != len(regions) or not all(math.isfinite(x) for x in per):
        return None
    return per


def _time_cycle(
    unit: Unit,
    regions: Sequence[tuple[onnx.ModelProto, dict[str, np.ndarray]]],
    budget_s: float,
) -> list[list[float]]:
    runners = []
    try:
        for model, _ in regions:
            runners.append(unit.prepare(model))
        feeds = [f for _, f in regions]
        diffs: list[list[float]] = [[] for _ in regions]
        failed: list[BaseException] = []

        def rounds() -> None:
            try:
                t_end = time.perf_counter() + budget_s
                r = 0
                while r < 4 or (time.perf_counter() < t_end and r < 30):
                    planned = []
                    for run, f in zip(runners, feeds, strict=True):
                        time.sleep(IDLE_S)
                        t0 = time.perf_counter()
                        run.run(f)
                        planned.append(time.perf_counter() - t0)
                    for i, (run, f) in enumerate(zip(runners, feeds, strict=True)):
                        run.run(f)
                        t0 = time.perf_counter()
                        run.run(f)
                        alone = time.perf_counter() - t0
                        if r:  # the first round warms up
                            diffs[i].append((planned[i] - alone) * 1e6)
                    r += 1
            except BaseException as exc:
                failed.append(exc)

        t = threading.Thread(target=rounds, name="partuner-cycle", daemon=True)
        t.start()
        t.join()
        if failed:
            raise failed[0]
        return diffs
    finally:
        for r in runners:
            r.close()
