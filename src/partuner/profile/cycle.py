"""What a restricted unit's pieces take when run as a plan runs them, measured.

A unit that runs only part of a model (an NPU beside a CPU) runs its pieces in a plan one
after another, each a compiled sub-model of its own, each after waiting for the CPU's part in
between, on the runtime's worker thread. A piece timed alone, called again and again, is
faster than that: its weights and the backend's buffers stay in cache, its thread never waits.
The per-partition cost fitted on one region cut into chunks misses that, and the per-byte
rates measured on other cuts (a fixed model, the largest region cut at random places) say
little of what the cuts a plan makes at the unit's unsupported nodes cost: on the CPU + NPU
stand-in (benchmarks/standin_bench.py; OpenVINO bf16 on one core) the rates charged some of
DenseNet's 63 pieces more for their reads and writes than the pieces took in a plan in all.

So the pieces are run as a plan runs them (:func:`measure_cycle`): all of them in the model's
order, on a thread other than the one that prepared them, with :data:`~partuner.profile.context.
IDLE_S` of sleep before each call (the other unit's turn); per piece, the median of its timed
rounds is what a plan takes to run it. ``RegionCosts.plan_fit`` compares those times with what
the planner charges the pieces and corrects the unit's per-partition cost (and, given enough
pieces, the weight of its per-byte costs) to match.
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

__all__ = ["CYCLE_MAX_PIECES", "measure_cycle"]

#: at most this many pieces (the longest-running ones) are cycled; a model cut into hundreds
#: of pieces would otherwise hold hundreds of compiled sub-models at once
CYCLE_MAX_PIECES = 64

Lookup = Callable[[str, Callable[[], Measurement]], Measurement | None]


def measure_cycle(
    unit: Unit,
    pieces: Sequence[tuple[onnx.ModelProto, dict[str, np.ndarray]]],
    lookup: Lookup,
    signature: str,
    budget_s: float,
) -> list[float] | None:
    """Per piece (a model and its feeds, in plan order), what it takes run as a plan runs
    it, in µs; ``None`` if it could not be measured (two pieces at least)."""
    if len(pieces) < 2:
        return None

    def make() -> Measurement:
        try:
            times = _time_cycle(unit, pieces, budget_s)
        except Exception as exc:  # a failed row (timed again next run), not a crash
            return failure(exc)
        per = [statistics.median(t) for t in times]
        detail = {
            "pieces": len(pieces),
            "idle_s": IDLE_S,
            "planned_us": [round(x, 3) for x in per],
        }
        return difference_measurement(per, detail)

    m = lookup(signature, make)
    if m is None or m.status != OK or not m.detail:
        return None
    try:  # a stored row is input like any other (an imported profile): checked, never trusted
        per = [float(x) for x in json.loads(m.detail)["planned_us"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if len(per) != len(pieces) or not all(math.isfinite(x) and x >= 0 for x in per):
        return None
    return per


def _time_cycle(
    unit: Unit,
    pieces: Sequence[tuple[onnx.ModelProto, dict[str, np.ndarray]]],
    budget_s: float,
) -> list[list[float]]:
    runners = []
    try:
        for model, _ in pieces:
            runners.append(unit.prepare(model))
        feeds = [f for _, f in pieces]
        times: list[list[float]] = [[] for _ in pieces]
        failed: list[BaseException] = []

        def rounds() -> None:
            try:
                t_end = time.perf_counter() + budget_s
                r = 0
                while r < 4 or (time.perf_counter() < t_end and r < 30):
                    for i, (run, f) in enumerate(zip(runners, feeds, strict=True)):
                        time.sleep(IDLE_S)
                        t0 = time.perf_counter()
                        run.run(f)
                        if r:  # the first round warms up
                            times[i].append((time.perf_counter() - t0) * 1e6)
                    r += 1
            except BaseException as exc:
                failed.append(exc)

        t = threading.Thread(target=rounds, name="partuner-cycle", daemon=True)
        t.start()
        t.join()
        if failed:
            raise failed[0]
        return times
    finally:
        for r in runners:
            r.close()
