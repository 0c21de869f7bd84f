"""Which measured stream ``tune --objective throughput`` keeps, with and without a p99 bound."""

from __future__ import annotations

import pytest

from partuner.plan import Partition, Plan, Problem
from partuner.plan.stream import simulate_stream
from partuner.plan.stream_plan import StreamPlan, ThroughputResult
from partuner.runtime.check import CheckResult
from partuner.runtime.stream import StreamStats
from partuner.throughput import StreamRun, _fastest_measured, _kept_within


def _sp(name: str) -> StreamPlan:
    parts = [Partition("p0", "u", ("a",))]
    plan = Plan(parts, ["u"], name, "feasible", 1000.0)
    timing = simulate_stream(Problem(["a"], ["u"], {"a": {"u": 1000.0}}, []), parts, in_flight=1)
    return StreamPlan(name, plan, (timing,))


def _run(period_ms: float, latency_ms: float, passed: bool = True, slow: int = 0) -> StreamRun:
    """300 frames, one leaving every ``period_ms``, each ``latency_ms`` long (the last
    ``slow`` ones twice that)."""
    n = 300
    leave = [(i + 1) * period_ms / 1e3 for i in range(n)]
    lat = [latency_ms / 1e3 * (2 if i >= n - slow else 1) for i in range(n)]
    st = StreamStats([t - x for t, x in zip(leave, lat, strict=True)], leave, [0] * n, [], (2,))
    return StreamRun(st, n, CheckResult(passed, "f32", "rule"))


def _result(best: StreamPlan, **baselines: StreamPlan) -> ThroughputResult:
    return ThroughputResult(best, {best.name: best}, 1.0, "feasible", dict(baselines))


def test_a_baseline_measured_faster_is_kept_without_a_bound() -> None:
    best, base = _sp("pipeline"), _sp("latency")
    rows = [("partuner plan", best, _run(2.0, 4.0)), ("latency plan", base, _run(1.0, 1.0))]
    kept, run, note = _fastest_measured(_result(best, latency=base), rows)
    assert kept is base and run is rows[1][2] and "latency plan" in note
    rows[1] = ("latency plan", base, _run(1.0, 1.0, passed=False))  # a failed check never wins
    assert _fastest_measured(_result(best, latency=base), rows)[0] is best


def test_under_a_bound_the_fastest_stream_measured_within_it_is_kept() -> None:
    best, fast, slow = _sp("pipeline"), _sp("fast"), _sp("slow")
    rows = [
        ("partuner plan", best, _run(1.0, 9.0)),  # fastest, but p99 9 ms
        ("fast", fast, _run(1.5, 4.0)),
        ("slow", slow, _run(3.0, 2.0)),
    ]
    kept, run, note = _kept_within(_result(best), rows, 5000.0)
    assert kept is fast and run is rows[1][2]
    assert "measured p99 9.000 ms (95 % upper bound 9.000) above the bound 5.000 ms" in note
    assert "the output holds fast" in note
    # the planned stream within the bound, another faster within it too: said as such
    within = [("partuner plan", best, _run(2.0, 4.0)), ("fast", fast, _run(1.5, 4.0))]
    kept, _, note = _kept_within(_result(best), within, 5000.0)
    assert kept is fast and "within the bound 5.000 ms at 500.0 frames/s" in note
    assert "fast ran more frames/s within it too" in note and "above" not in note
    # a p99 within the bound whose upper confidence bound is not (3 of 300 frames twice as
    # slow: the p99 is 4 ms, the slowest 8 ms) does not count as within it
    rows[1] = ("fast", fast, _run(1.5, 4.0, slow=3))
    assert rows[1][2].stats.latency_ms(99) == pytest.approx(4.0)
    assert _kept_within(_result(best), rows, 5000.0)[0] is slow
    # within the bound, the planned stream stays, without a note
    assert _kept_within(_result(best), rows, 10000.0) == (best, rows[0][2], "")
    # none within: the lowest measured p99, said so
    kept, _, note = _kept_within(_result(best), rows, 1000.0)
    assert kept is slow and "no stream measured within it" in note
    # none within, and the planned stream measured the lowest p99: kept, but never silently
    rows[0] = ("partuner plan", best, _run(1.0, 1.5))
    kept, run, note = _kept_within(_result(best), rows, 1000.0)
    assert kept is best and run is rows[0][2]
    assert note.startswith("no stream measured within the bound 1.000 ms")
    assert "the planned stream (pipeline), the lowest measured, p99 1.500 ms" in note
