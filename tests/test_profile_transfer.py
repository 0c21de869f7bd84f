"""Measured links: the least-squares fit, the hand-off measurement, stored link rows, declared
links winning, and device copies for units that are not in host memory."""

from __future__ import annotations

import math

import pytest

from partuner.profile import ProfileStore, fit_link, profile_model
from partuner.profile import transfer as tr
from partuner.profile.store import Measurement
from partuner.units import OnnxruntimeUnit, UnitSet, load_units


def test_fit_recovers_latency_and_bandwidth():
    # 12 µs + bytes / (4 GB/s): 4 GB/s is 4e3 bytes per µs
    pts = [(n, 12 + n / 4e3, 11 + n / 4e3, 13 + n / 4e3) for n in tr.LINK_SIZES]
    f = fit_link(pts)
    assert f.latency_us == pytest.approx(12.0)
    assert f.gbps == pytest.approx(4.0)
    assert f.link.transfer_us(1 << 20) == pytest.approx(12 + (1 << 20) / 4e3)
    assert f.points == tuple(pts)


def test_fit_says_zero_copy_when_the_slope_is_within_the_spread():
    flat = [(4096, 5.0, 3.0, 9.0), (1 << 20, 6.0, 3.0, 9.0), (16 << 20, 5.5, 3.0, 9.0)]
    f = fit_link(flat)
    assert math.isinf(f.gbps) and f.latency_us == pytest.approx(5.5)  # mean of the medians
    # decreasing with size (noise): never a negative bandwidth
    assert math.isinf(fit_link([(4096, 9.0, 8.0, 10.0), (1 << 24, 7.0, 6.0, 8.0)]).gbps)
    # a negative intercept is refitted through the origin
    g = fit_link([(1000, 0.0, 0.0, 0.0), (3000, 2.0, 2.0, 2.0)])
    assert g.latency_us == 0.0 and g.gbps == pytest.approx(
        1 / (6000 / 10_000_000 * 1e3)
    )  # slope = sum xy / sum xx
    assert fit_link([(4096, 7.0, 6.0, 8.0)]).latency_us == 7.0
    with pytest.raises(ValueError):
        fit_link([])


def test_link_rows_are_keyed_by_sorted_fingerprints():
    assert tr.link_signature("b", "a", 4096) == tr.link_signature("a", "b", 4096)
    assert tr.link_signature("b", "a", 4096) == ("a", "__link2__#a#b#4096")


def test_combine_adds_the_hand_off_and_each_device_copy():
    hand = {4096: Measurement(5.0, 4.0, 7.0, 60)}
    copy = {4096: Measurement(10.0, 9.0, 12.0, 20)}
    assert tr.combine_link(hand, None, None) == hand
    assert tr.combine_link(hand, copy, None)[4096] == Measurement(15.0, 13.0, 19.0, 20)
    assert tr.combine_link(hand, copy, copy)[4096] == Measurement(25.0, 22.0, 31.0, 20)


def test_handoff_measures_each_size():
    got = tr.handoff((4096, 1 << 20), rounds=20)
    assert set(got) == {4096, 1 << 20}
    for m in got.values():
        assert m.count == 20 and 0 < m.p10_us <= m.median_us <= m.p90_us


def test_profile_stores_links_and_reuses_them(branchy, units_file, db):
    units = load_units(units_file)
    sizes = (4096, 1 << 20)
    with ProfileStore(db) as store:
        first = profile_model(branchy, units, store=store, budget_s=0.02, link_sizes=sizes)
        fp = first.units["cpu0"].fingerprint
        for n in sizes:
            assert store.get(*tr.link_signature(fp, fp, n)) is not None
        second = profile_model(branchy, units, store=store, budget_s=0.02, link_sizes=sizes)
    assert first.links_measured == len(sizes) and second.links_measured == 0
    assert first.link_sources == {("cpu0", "cpu1"): "measured"}
    fit = first.link_fits[("cpu0", "cpu1")]
    assert [p[0] for p in fit.points] == list(sizes)
    assert second.link("cpu0", "cpu1") == first.link("cpu0", "cpu1") == fit.link
    assert math.isinf(fit.gbps)  # host-memory units hand arrays over without a copy


def test_declared_links_win_and_modeled_units_keep_the_default(branchy, tmp_path):
    p = tmp_path / "u.yaml"
    p.write_text(
        "units:\n  a: {backend: onnxruntime}\n  b: {backend: onnxruntime}\n"
        "  npu: {backend: modeled, gflops: 100, gbps: 4, overhead_us: 10}\n"
        "links:\n  default: {latency_us: 33, gbps: 3}\n  a-b: {latency_us: 7, gbps: 9}\n"
    )
    prof = profile_model(branchy, load_units(p), budget_s=0.02)
    assert prof.link_sources == {
        ("a", "b"): "declared",
        ("a", "npu"): "default",
        ("b", "npu"): "default",
    }
    assert prof.link("a", "b").latency_us == 7 and prof.link("a", "b").gbps == 9
    assert prof.link("npu", "a").latency_us == 33
    assert prof.links_measured == 0 and not prof.link_fits


class _DeviceUnit(OnnxruntimeUnit):
    """An onnxruntime CPU unit that claims to compute in device memory (a stand-in for CUDA)."""

    @property
    def host_memory(self) -> bool:
        return False


def test_device_units_add_an_upload_per_end(monkeypatch, branchy, db):
    # deterministic stand-ins: a 5 µs hand-off; an upload at 10 GB/s (1e4 bytes per µs)
    monkeypatch.setattr(
        tr, "handoff", lambda sizes, rounds=60: {n: Measurement(5.0, 4.5, 5.5, 9) for n in sizes}
    )

    def copy(unit, call_us, sizes, budget_s):
        return {n: Measurement(n / 1e4, n / 1e4, n / 1e4, 9) for n in sizes}

    monkeypatch.setattr(tr, "device_copy", copy)
    # distinct fingerprints (threads), as a real device provider would have
    units = UnitSet(
        [OnnxruntimeUnit("cpu"), _DeviceUnit("dev", threads=2), _DeviceUnit("dev2", threads=3)]
    )
    with ProfileStore(db) as store:
        prof = profile_model(branchy, units, store=store, budget_s=0.02, calibrate=False)
    host_dev = prof.link("cpu", "dev")
    assert host_dev.latency_us == pytest.approx(5.0) and host_dev.gbps == pytest.approx(10.0)
    dev_dev = prof.link("dev", "dev2")  # a download and an upload
    assert dev_dev.latency_us == pytest.approx(5.0) and dev_dev.gbps == pytest.approx(5.0)
    assert set(prof.link_sources.values()) == {"measured"}


def test_device_copy_times_a_call_per_size():
    got = tr.device_copy(OnnxruntimeUnit("cpu"), 0.0, (4096, 65536), budget_s=0.01)
    assert got is not None and set(got) == {4096, 65536}
    assert all(m.median_us >= 0 and m.count >= 5 for m in got.values())


def test_units_sharing_cores_pay_a_measured_switch(monkeypatch, db):
    calls = []

    def fake_switch(a, b, rounds=10, calls_=10):
        calls.append((a.name, b.name))
        return Measurement(25.0, 20.0, 30.0, 10)

    monkeypatch.setattr(tr, "switch_cost", fake_switch)
    # the hand-off fixed too: timed, its noise moved the two fits apart by more than the switch
    fixed = {
        n: Measurement(30.0 + n / 1e4, 29.0 + n / 1e4, 31.0 + n / 1e4, 60) for n in (4096, 65536)
    }
    monkeypatch.setattr(tr, "handoff", lambda sizes, rounds=60: {n: fixed[n] for n in sizes})
    a = OnnxruntimeUnit("a", cores=[0])
    b = OnnxruntimeUnit("b", cores=[0], optimization="basic")  # another fingerprint
    c = OnnxruntimeUnit("c", cores=[1])
    units = UnitSet([a, b, c])
    names = ["a", "b", "c"]
    fps = {u.name: u.fingerprint() for u in units}
    sizes = (4096, 65536)
    with ProfileStore(db) as store:
        out = tr.profile_links(units, names, fps, set(names), {}, store, sizes=sizes)
        again = tr.profile_links(units, names, fps, set(names), {}, store, sizes=sizes)
    assert calls == [("a", "b")]  # only the pair that shares a core; stored after that
    ab, ac = out.fits[("a", "b")], out.fits[("a", "c")]
    assert ab.latency_us == pytest.approx(ac.latency_us + 25.0, abs=5.0)
    assert again.links[("a", "b")] == out.links[("a", "b")]


def test_switch_cost_is_per_switch_and_never_negative():
    a, b = OnnxruntimeUnit("a", cores=[0]), OnnxruntimeUnit("b", cores=[0])
    m = tr.switch_cost(a, b, rounds=2, calls=2)
    assert m.count == 2 and m.median_us >= 0 and m.p10_us >= 0


def test_a_switch_is_measured_once_per_fingerprint_pair_without_a_store(monkeypatch):
    calls = []

    def fake_switch(a, b, rounds=10, calls_=10):
        calls.append((a.name, b.name))
        return Measurement(10.0, 8.0, 12.0, 10)

    monkeypatch.setattr(tr, "switch_cost", fake_switch)
    both = OnnxruntimeUnit("both", threads=2, cores=[0, 1])
    units = UnitSet([OnnxruntimeUnit("c0", cores=[0]), OnnxruntimeUnit("c1", cores=[1]), both])
    names = ["c0", "c1", "both"]
    fps = {u.name: u.fingerprint() for u in units}
    out = tr.profile_links(units, names, fps, set(names), {}, None, sizes=(4096,))
    assert calls == [("c0", "both")]  # c1 has c0's fingerprint: the same switch
    assert out.links[("c0", "both")] == out.links[("c1", "both")]
