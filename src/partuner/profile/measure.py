"""Timing one prepared sub-model: warm-up, adaptive repeats, robust statistics."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import numpy as np

from partuner.graph import ModelGraph
from partuner.profile.store import Measurement

__all__ = ["time_call", "random_feeds", "handoff_latency_us"]


def time_call(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 200,
    budget_s: float = 0.25,
    rel_precision: float = 0.03,
) -> Measurement:
    """Time ``fn`` until its median is known to about ``rel_precision``, within ``budget_s``.

    After ``min_repeats`` timed calls it stops as soon as the half-width of an approximate 95%
    confidence interval of the median (1.57 * IQR / sqrt(n)) is below ``rel_precision`` of the
    median, or the budget or ``max_repeats`` is reached.

    Examples
    --------
    >>> m = time_call(lambda: sum(range(100)), budget_s=0.01)
    >>> m.count >= 5 and m.p10_us <= m.median_us <= m.p90_us
    True
    """
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    t_end = time.perf_counter() + budget_s
    while True:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        n = len(samples)
        if n >= max_repeats:
            break
        if n >= min_repeats:
            if time.perf_counter() > t_end:
                break
            q = statistics.quantiles(samples, n=4)
            med = statistics.median(samples)
            if med > 0 and 1.57 * (q[2] - q[0]) / n**0.5 <= rel_precision * med:
                break
    arr = np.asarray(samples)
    return Measurement(
        median_us=float(np.median(arr)),
        p10_us=float(np.percentile(arr, 10)),
        p90_us=float(np.percentile(arr, 90)),
        count=len(samples),
    )


def random_feeds(graph: ModelGraph, names: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the values ``names``: floats ~ N(0, 1), integers and bools zero."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in names:
        v = graph.values[name]
        dt = np.dtype(v.dtype)
        if np.issubdtype(dt, np.floating):
            out[name] = rng.standard_normal(v.shape).astype(dt)
        else:
            out[name] = np.zeros(v.shape, dtype=dt)
    return out


def handoff_latency_us(rounds: int = 200) -> Measurement:
    """Measure handing a tensor from one worker thread to another in this process.

    This is the cost of a cross-unit edge between two units that share host memory: no copy is
    made (the array object is passed), only a thread wake-up. Measured as half a ping-pong.
    """
    ping, pong = threading.Event(), threading.Event()
    box: list[object] = [None]
    stop = False

    def echo() -> None:
        while True:
            ping.wait()
            ping.clear()
            if stop:
                return
            pong.set()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    samples = []
    payload = np.zeros(16, dtype=np.float32)
    for _ in range(rounds):
        t0 = time.perf_counter()
        box[0] = payload
        ping.set()
        pong.wait()
        pong.clear()
        samples.append((time.perf_counter() - t0) * 1e6 / 2)
    stop = True
    ping.set()
    t.join(timeout=1.0)
    arr = np.asarray(samples[10:])
    return Measurement(
        float(np.median(arr)),
        float(np.percentile(arr, 10)),
        float(np.percentile(arr, 90)),
        len(arr),
    )
