"""Profiling: signatures, the SQLite store, reuse, overhead and calibration, modeled units."""

from __future__ import annotations

import math
import sqlite3
import threading

import pytest

from partuner.errors import ProfileError, UnitUnavailableError
from partuner.graph import load_model, zoo
from partuner.profile import (
    Measurement,
    ProfileStore,
    node_signature,
    profile_model,
    time_call,
)
from partuner.profile.context import CHAIN_KS, chain_cuts, fit_chain_costs, measure_chains
from partuner.units import load_units


def test_equal_signatures_for_equal_nodes_across_models():
    a = load_model(zoo.build("resnet18", image_size=32, seed=0))
    b = load_model(zoo.build("resnet18", image_size=32, seed=1))  # other weights, same shapes
    sig_a = [node_signature(a, n) for n in a.compute_nodes]
    sig_b = [node_signature(b, n) for n in b.compute_nodes]
    assert sig_a == sig_b
    assert len(set(sig_a)) < len(sig_a)  # repeated blocks share signatures
    c = load_model(zoo.build("resnet18", image_size=64))
    assert not set(sig_a) & {node_signature(c, n) for n in c.compute_nodes if n.op_type == "Conv"}


def test_store_round_trip_and_summary(tmp_path):
    with ProfileStore(tmp_path / "p.db") as s:
        s.put("fp1", "Relu-1", Measurement(10.0, 9.0, 12.0, 7), description="unit a")
        s.put(
            "fp1", "Conv-1", Measurement(math.inf, math.inf, math.inf, 0, "unsupported", "rejected")
        )
        assert s.get("fp1", "Relu-1") == Measurement(10.0, 9.0, 12.0, 7)
        got = s.get("fp1", "Conv-1")
        assert got.status == "unsupported" and math.isinf(got.median_us)
        assert s.get("fp2", "Relu-1") is None
        (row,) = s.summary()
        assert row["rows"] == 2 and row["unsupported"] == 1 and row["unit"] == "unit a"
    with sqlite3.connect(tmp_path / "p.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_two_writers_share_one_store(tmp_path):
    path = tmp_path / "p.db"
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            with ProfileStore(path) as s:
                for i in range(50):
                    s.put(f"fp{k}", f"sig{i}", Measurement(float(i), 0.0, 0.0, 1))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ts = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    with ProfileStore(path) as s:
        assert sorted(r["rows"] for r in s.summary()) == [50, 50]


def test_corrupt_store_is_named_and_kept(tmp_path):
    path = tmp_path / "p.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ProfileError, match=str(path)):
        ProfileStore(path)
    assert path.read_bytes().startswith(b"this is not sqlite")


def test_time_call_statistics():
    m = time_call(lambda: sum(range(1000)), budget_s=0.05, min_repeats=7)
    assert m.count >= 7
    assert 0 < m.p10_us <= m.median_us <= m.p90_us


def test_profile_reuses_the_store(branchy, units_file, db):
    units = load_units(units_file)
    with ProfileStore(db) as store:
        first = profile_model(branchy, units, store=store, budget_s=0.02)
        second = profile_model(branchy, units, store=store, budget_s=0.02)
    # two identical units are measured once: signatures + no-op call + the model cut k ways
    # + onnxruntime's per-layer profile of the whole model + waking up after idling + writing
    # values out
    n = len(branchy.compute_nodes)
    chains = sum(2 for k in CHAIN_KS if k <= n) + 1  # the whole model three times
    assert first.measured == first.signatures + 1 + chains + 1 + 1 + 1
    assert first.units["cpu0"].costs_from == "layers"
    assert first.reused == 0
    assert second.measured == 0 and second.reused == first.measured
    assert second.costs == first.costs
    for n in branchy.compute_nodes:
        assert first.costs[n.name]["cpu0"] == first.costs[n.name]["cpu1"] >= 0
    up = first.units["cpu0"]
    assert up.whole_us is not None and up.whole_us > 0
    total = up.overhead_us + sum(first.costs[n.name]["cpu0"] for n in branchy.compute_nodes)
    assert total == pytest.approx(up.whole_us, rel=1e-6)  # calibrated to the whole model
    assert up.overhead_us >= up.call_us > 0  # a cut costs at least a no-op call
    assert up.boundary_us_per_byte >= 0
    assert first.link_sources[("cpu0", "cpu1")] == "measured"
    assert math.isinf(first.link("cpu0", "cpu1").gbps)  # zero-copy hand-off


def test_modeled_unit_costs_and_unsupported_ops(branchy, npu_units_file):
    units = load_units(npu_units_file)
    prof = profile_model(branchy, units, store=None, budget_s=0.02)
    assert prof.units["npu"].modeled and not prof.units["cpu"].modeled
    npu = units["npu"]
    for n in branchy.compute_nodes:
        c = prof.costs[n.name]["npu"]
        if n.op_type in ("Conv", "Relu", "MaxPool", "Add", "Concat"):
            want = npu.modeled_time_us([n], branchy) - npu.modeled_time_us([], branchy)
            assert c == pytest.approx(want)
        else:
            assert math.isinf(c)
    assert prof.link_sources[("cpu", "npu")] == "default"
    assert prof.link("cpu", "npu").latency_us == 40


def test_unavailable_unit_is_refused_or_skipped(branchy, tmp_path):
    p = tmp_path / "u.yaml"
    p.write_text(
        "units:\n  cpu: {backend: onnxruntime}\n  gpu: {backend: onnxruntime, provider: cuda}\n"
    )
    units = load_units(p)
    if units["gpu"].availability()[0]:
        pytest.skip("this machine has CUDA")
    with pytest.raises(UnitUnavailableError, match="'gpu'.*--skip-unavailable"):
        profile_model(branchy, units, budget_s=0.02)
    prof = profile_model(branchy, units, budget_s=0.02, skip_unavailable=True)
    assert set(prof.units) == {"cpu"} and "gpu" in prof.skipped_units


def test_chain_fit_recovers_costs_and_never_goes_negative():
    pts = [(1, 0.0, 1000.0)]
    for k, b in [(4, 2e5), (4, 5e5), (16, 1e6), (16, 3e6), (32, 4e6)]:
        pts.append((k, b, 1000.0 + 30.0 * (k - 1) + 2e-4 * b))
    f = fit_chain_costs(pts)
    assert f.whole_us == 1000.0
    assert f.per_partition_us == pytest.approx(30.0)
    assert f.per_byte_us == pytest.approx(2e-4)
    # cutting that gets cheaper with bytes (noise) must not give a negative cost
    noisy = [(1, 0.0, 1000.0), (4, 1e6, 1090.0), (16, 1e5, 1450.0), (32, 2e5, 1930.0)]
    g = fit_chain_costs(noisy)
    assert g.per_partition_us > 0 and g.per_byte_us >= 0
    assert fit_chain_costs([]) is None


def test_whole_model_time_is_the_median_of_three_apart():
    # a quiet moment and a loaded one among the three whole-model timings set nothing
    pts = [(1, 0.0, 900.0), (4, 1e5, 1100.0), (1, 0.0, 1000.0), (16, 4e5, 1500.0), (1, 0.0, 1400.0)]
    assert fit_chain_costs(pts).whole_us == 1000.0
    assert fit_chain_costs(pts[:3]).whole_us == 950.0  # two (a kit of an earlier version)


def test_whole_model_is_timed_first_in_the_middle_and_last(branchy):
    sigs = [s for s, _ in chain_cuts(branchy, "d")]
    at = [i for i, s in enumerate(sigs) if "#k1#" in s]
    assert len(at) == 3 and at[0] == 0 and at[2] == len(sigs) - 1 and 2 <= at[1] <= len(sigs) - 3
    assert len(set(sigs)) == len(sigs)

    # a store of an earlier version has no third whole timing: the other points still count
    def lookup(sig, make):
        if sig.endswith("#k1#t2"):
            return None
        return Measurement(1000.0, 1000.0, 1000.0, 5, "ok", '{"partitions": 1, "bytes": 0.0}')

    assert len(measure_chains(None, branchy, lookup, "d", 0.01)) == len(sigs) - 1
