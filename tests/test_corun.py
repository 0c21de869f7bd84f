"""Units slowing each other down: the co-run factor, measured and stored (profile/corun.py)."""

from __future__ import annotations

import json
import logging
import threading
import time

from partuner.pipeline import build_problem
from partuner.profile import ProfileStore, profile_model
from partuner.profile.corun import CORUN_SIG, corun_participants, measure_corun
from partuner.profile.signature import model_digest
from partuner.profile.store import FAILED, OK
from partuner.units import OnnxruntimeUnit, register_backend, units_from_mapping

_LOCK = threading.Lock()
_ACTIVE = [0]
_PREPARED = [0]


@register_backend("test-corun-contended")
class ContendedUnit(OnnxruntimeUnit):
    """onnxruntime whose runs take 2 ms more while another such run is under way (two units
    sharing one memory bus, exaggerated)."""

    def prepare(self, model):
        runner = super().prepare(model)
        run = runner.run

        def contended(feeds):
            with _LOCK:
                _ACTIVE[0] += 1
            try:
                time.sleep(0.002)
                with _LOCK:
                    others = _ACTIVE[0] > 1
                if others:
                    time.sleep(0.002)
                return run(feeds)
            finally:
                with _LOCK:
                    _ACTIVE[0] -= 1

        runner.run = contended
        return runner


@register_backend("test-corun-broken")
class BrokenUnit(OnnxruntimeUnit):
    """onnxruntime whose runs fail (a device that went away after compiling)."""

    def prepare(self, model):
        _PREPARED[0] += 1
        runner = super().prepare(model)

        def broken(feeds):
            raise RuntimeError("device lost")

        runner.run = broken
        return runner


@register_backend("test-corun-fades")
class FadingUnit(OnnxruntimeUnit):
    """onnxruntime whose runs fail once another unit runs beside it (after its runs alone)."""

    def prepare(self, model):
        runner = super().prepare(model)
        run = runner.run

        def fading(feeds):
            with _LOCK:
                if _ACTIVE[0]:
                    raise RuntimeError("lost the bus")
            return run(feeds)

        runner.run = fading
        return runner


def _units(**specs):
    return units_from_mapping({"units": specs})


def _measure(graph, units, store=None):
    pick = dict(units.units.items())
    fps = {n: u.fingerprint() for n, u in pick.items()}
    return measure_corun(graph, pick, fps, store, model_digest(graph), 0.05)


def test_units_that_slow_each_other_measure_it(squeeze) -> None:
    spec = {"backend": "test-corun-contended", "threads": 1}
    got = _measure(squeeze, _units(a=spec, b={**spec, "cores": [1]}))
    assert set(got) == {"a", "b"}
    # alone ~2 ms a run, together ~4 ms: a factor near 2 each
    assert all(1.4 < f < 2.6 for f in got.values()), got


def test_factors_are_stored_and_reused(squeeze, tmp_path) -> None:
    units = _units(
        a={"backend": "onnxruntime", "threads": 1, "cores": [0]},
        b={"backend": "onnxruntime", "threads": 1, "cores": [1], "ops": ["Conv", "Relu"]},
    )
    with ProfileStore(tmp_path / "p.db") as store:
        first = _measure(squeeze, units, store)
        assert all(f >= 1.0 for f in first.values())
        key = f"{CORUN_SIG}#{model_digest(squeeze)}#"
        fps = {u.fingerprint() for u in units}
        rows = [(fp, sig, m) for fp in fps for sig, m in store.rows(fp) if sig.startswith(key)]
        assert {fp for fp, _, _ in rows} == fps
        assert all(m.status == OK and "alone_us" in json.loads(m.detail) for _, _, m in rows)
        # timed once: the same factors from the store (a second timing would differ)
        assert _measure(squeeze, units, store) == first


def test_a_failed_timing_leaves_factor_one_and_is_timed_again(squeeze, tmp_path, caplog) -> None:
    units = _units(
        a={"backend": "onnxruntime", "threads": 1},
        b={"backend": "test-corun-broken", "threads": 1},
    )
    with ProfileStore(tmp_path / "p.db") as store, caplog.at_level(logging.WARNING):
        assert _measure(squeeze, units, store) == {}
        # one failure fails both: said once, naming both units
        assert "units a, b: timing them beside the other units failed (" in caplog.text
        assert caplog.text.count("device lost") == 1
        fps = {u.fingerprint() for u in units}
        rows = [m for fp in fps for sig, m in store.rows(fp) if sig.startswith(CORUN_SIG)]
        statuses = {m.status for m in rows}
        assert statuses == {FAILED}
        before = _PREPARED[0]
        _measure(squeeze, units, store)
        assert _PREPARED[0] == before + 1  # not taken from the failed row


def test_a_unit_failing_beside_the_others_fails_the_timing_not_the_caller(squeeze) -> None:
    """The error is raised in a worker thread, while the other unit loops: no hang, no factor."""
    units = _units(
        a={"backend": "test-corun-contended", "threads": 1},
        b={"backend": "test-corun-fades", "threads": 1},
    )
    assert _measure(squeeze, units) == {}


def test_one_unit_per_lane_takes_part() -> None:
    units = _units(
        a={"backend": "onnxruntime", "cores": [0]},
        both={"backend": "onnxruntime", "cores": [0, 1]},
        b={"backend": "onnxruntime", "cores": [1]},
        free={"backend": "onnxruntime"},
    )
    assert corun_participants(units.units) == ["a", "b", "free"]


def test_profile_measures_units_side_by_side_and_the_problem_carries_it(squeeze) -> None:
    two = _units(
        cpu={"backend": "onnxruntime", "threads": 1, "cores": [0]},
        npu={"backend": "onnxruntime", "threads": 1, "cores": [1], "ops": ["Conv", "Relu"]},
    )
    prof = profile_model(squeeze, two, budget_s=0.02, corun=True)
    factors = {n: up.corun for n, up in prof.units.items()}
    assert None not in factors.values(), factors
    assert build_problem(squeeze, two, prof).corun == factors
    # not asked for: not measured
    assert {up.corun for up in profile_model(squeeze, two, budget_s=0.02).units.values()} == {None}
    # units on one core never run at once: nothing measured
    one_core = _units(
        cpu={"backend": "onnxruntime", "threads": 1, "cores": [0]},
        npu={"backend": "onnxruntime", "threads": 1, "cores": [0], "ops": ["Conv", "Relu"]},
    )
    prof = profile_model(squeeze, one_core, budget_s=0.02, corun=True)
    assert {up.corun for up in prof.units.values()} == {None}
    assert build_problem(squeeze, one_core, prof).corun == {}


def test_a_burst_in_one_round_does_not_make_the_factor(monkeypatch) -> None:
    """Both units run 6x slower during one of the twelve rounds together (a burst of the
    host's): pooled, that round alone makes the factor ~1.2; the trimmed rounds do not."""
    from partuner.profile import corun

    phase, burst = [0], [False]
    real = corun._run_together

    def counted(runners, feeds, seconds):
        phase[0] += 1
        burst[0] = phase[0] == 5
        try:
            return real(runners, feeds, seconds)
        finally:
            burst[0] = False

    monkeypatch.setattr(corun, "_run_together", counted)

    class Sleepy:
        def run(self, feeds):
            # 3 ms, not 1: a VM's wake-up jitter (up to 0.4 ms here) stays small beside it
            time.sleep(0.018 if burst[0] else 0.003)
            return {}

    got = corun._time_together({"a": Sleepy(), "b": Sleepy()}, {"a": {}, "b": {}}, 0.02)
    assert phase[0] == corun.ROUNDS
    for m in got.values():
        info = json.loads(m.detail)
        assert len(info["rounds"]) == corun.ROUNDS and max(info["rounds"]) > 3
        assert m.median_us / info["alone_us"] > 1.15  # what pooling every run says
        assert corun._factor(m) < 1.08


def test_rows_stored_before_the_trimmed_factor_still_read() -> None:
    from partuner.profile.corun import _factor
    from partuner.profile.store import Measurement

    old = Measurement(120.0, 100.0, 140.0, 50, detail=json.dumps({"alone_us": 100.0}))
    assert _factor(old) == 1.2
    new = Measurement(
        120.0, 100.0, 140.0, 50, detail=json.dumps({"alone_us": 100.0, "factor": 1.05})
    )
    assert _factor(new) == 1.05
    huge = Measurement(120.0, 100.0, 140.0, 50, detail=json.dumps({"factor": 1e300}))
    assert _factor(huge) == 100.0
    for bad in ('{"alone_us": 100.0, "factor": "NaN"}', '{"factor": 0.5}', "[1]", "x"):
        assert _factor(Measurement(120.0, 100.0, 140.0, 50, detail=bad)) == 1.0


def test_again_times_it_anew_and_a_high_factor_is_warned_of(
    squeeze, tmp_path, caplog, monkeypatch
) -> None:
    from partuner.profile import corun

    spec = {"backend": "test-corun-contended", "threads": 1}
    units = _units(a=spec, b={**spec, "cores": [1]})
    pick = dict(units.units.items())
    fps = {n: u.fingerprint() for n, u in pick.items()}
    timed = [0]
    real = corun._measure

    def counted(*a, **k):
        timed[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(corun, "_measure", counted)
    with ProfileStore(tmp_path / "p.db") as store, caplog.at_level(logging.WARNING):
        first = measure_corun(squeeze, pick, fps, store, model_digest(squeeze), 0.05)
        assert min(first.values()) >= corun.BUSY_FACTOR  # ~2: 2 ms more beside the other
        assert "--corun-again" in caplog.text and "slowed each other by" in caplog.text
        assert timed[0] == 2  # so high: timed once more, and as high again
        measure_corun(squeeze, pick, fps, store, model_digest(squeeze), 0.05)
        assert timed[0] == 2  # reused
        measure_corun(squeeze, pick, fps, store, model_digest(squeeze), 0.05, again=True)
        assert timed[0] == 4


def test_a_burst_through_a_whole_timing_is_timed_once_more(squeeze, tmp_path, monkeypatch) -> None:
    """The first timing comes out high in every round (a burst of the host's all along), the
    second not: the second is kept and stored; a quiet first timing is not repeated."""
    from partuner.profile import corun
    from partuner.profile.store import Measurement

    units = _units(
        a={"backend": "onnxruntime", "threads": 1},
        b={"backend": "onnxruntime", "threads": 1, "cores": [1]},
    )
    pick = dict(units.units.items())
    fps = {n: u.fingerprint() for n, u in pick.items()}
    factors = [[1.8, 1.7], [1.04, 1.06]]
    calls = [0]

    def fake(graph, us, budget_s):
        got = factors[min(calls[0], len(factors) - 1)]
        calls[0] += 1
        return {
            n: Measurement(100.0 * f, 90.0, 110.0, 10, detail=json.dumps({"factor": f}))
            for n, f in zip(us, got, strict=True)
        }

    monkeypatch.setattr(corun, "_measure", fake)
    monkeypatch.setattr(corun, "RETIME_PAUSE_S", 0.0)
    with ProfileStore(tmp_path / "p.db") as store:
        got = measure_corun(squeeze, pick, fps, store, model_digest(squeeze), 0.05)
        assert calls[0] == 2 and got == {"a": 1.04, "b": 1.06}
        assert measure_corun(squeeze, pick, fps, store, model_digest(squeeze), 0.05) == got
        assert calls[0] == 2  # the second timing was stored
    factors[:] = [[1.1, 1.2], [1.0, 1.0]]
    calls[0] = 0
    assert measure_corun(squeeze, pick, fps, None, model_digest(squeeze), 0.05) == {
        "a": 1.1,
        "b": 1.2,
    }
    assert calls[0] == 1  # below BUSY_FACTOR: timed once
    factors[:] = [[1.5, 1.1], [1.9, 1.0]]
    calls[0] = 0
    assert measure_corun(squeeze, pick, fps, None, model_digest(squeeze), 0.05) == {
        "a": 1.5,
        "b": 1.1,
    }
    assert calls[0] == 2  # the second no better: the first kept
