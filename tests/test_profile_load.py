"""Rows timed on a busy machine: the meter, what the store keeps, and what the profiler does."""

from __future__ import annotations

import logging
import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partuner.graph import load_model
from partuner.profile import Measurement, ProfileStore, profile_model
from partuner.profile import load as load_mod
from partuner.profile.load import LoadMeter, time_again
from partuner.units import load_units
from test_hardening_store import _tiny

pytestmark = pytest.mark.real_load  # the meter itself: conftest's quiet machine is off here


class _Clock:
    """Scripted readings: (seconds, machine busy CPU s, our CPU s)."""

    def __init__(self, monkeypatch, cores: int = 2) -> None:
        self.now, self.machine, self.ours = 100.0, 0.0, 0.0
        monkeypatch.setattr(load_mod.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(load_mod, "_machine", lambda: (self.machine, cores))
        monkeypatch.setattr(load_mod, "_ours", lambda: self.ours)

    def spend(self, seconds: float, ours: float, others: float) -> None:
        self.now += seconds
        self.ours += ours
        self.machine += ours + others


def test_share_is_other_work_over_all_cores(monkeypatch):
    c = _Clock(monkeypatch)
    meter = LoadMeter()
    start = meter.read()
    c.spend(1.0, ours=1.0, others=0.5)  # we use one core, others half of the other
    assert meter.share(start) == pytest.approx(0.25)
    start = meter.read()
    c.spend(0.5, ours=0.5, others=0.0)
    assert meter.share(start) == pytest.approx(0.0)


def test_a_short_window_is_judged_by_the_quarter_second_before_it(monkeypatch):
    c = _Clock(monkeypatch)
    meter = LoadMeter()
    meter.read()
    c.spend(0.3, ours=0.3, others=0.6)  # the other core fully busy
    start = meter.read()
    c.spend(0.005, ours=0.005, others=0.0)  # 5 ms: finer than /proc/stat's ticks
    assert meter.share(start) == pytest.approx(0.6 / (0.305 * 2))


def test_a_run_s_first_rows_wait_for_half_the_span_and_no_stat_is_unknown(monkeypatch):
    c = _Clock(monkeypatch)
    monkeypatch.setattr(load_mod.time, "sleep", lambda s: c.spend(s, ours=0.0, others=2 * s))
    meter = LoadMeter()
    start = meter.read()
    c.spend(0.01, ours=0.01, others=0.0)  # 10 ms: then 115 ms more, both cores busy elsewhere
    assert meter.share(start) == pytest.approx(0.23 / (0.125 * 2))
    monkeypatch.setattr(load_mod, "_machine", lambda: None)  # no /proc/stat
    meter = LoadMeter()
    start = meter.read()
    c.spend(1.0, ours=1.0, others=1.0)
    assert meter.share(start) is None and not meter.works


def test_only_the_cores_this_process_may_run_on_count(tmp_path, monkeypatch):
    # a process pinned to core 0 (a Ray unit's actor on its cores): core 1's work is not its
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  700 0 300 5000 0 0 0 0 0 0\n"
        "cpu0 100 0 100 4000 0 0 0 0 0 0\n"
        "cpu1 600 0 200 1000 50 0 0 0 0 0\n"
        "intr 1 2 3\n"
    )
    monkeypatch.setattr(load_mod, "_STAT", stat)
    tck = load_mod.os.sysconf("SC_CLK_TCK")
    monkeypatch.setattr(load_mod.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert load_mod._machine() == pytest.approx((1000 / tck, 2))  # iowait and idle not busy
    monkeypatch.setattr(load_mod.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert load_mod._machine() == pytest.approx((200 / tck, 1))
    monkeypatch.setattr(load_mod.os, "sched_getaffinity", lambda pid: {5}, raising=False)
    assert load_mod._machine() is None  # cores the file does not list: unknown, no guess


def test_the_real_meter_sees_other_processes_spin():
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat here")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)
        meter = LoadMeter()
        start = meter.read()
        t0 = time.monotonic()
        cpu0 = [_cpu_s(p.pid) for p in spinners]
        time.sleep(1.0)
        cpu1 = [_cpu_s(p.pid) for p in spinners]
        share = meter.share(start)
        wall = time.monotonic() - t0
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    cores = sum(
        1
        for ln in Path("/proc/stat").read_text().splitlines()
        if ln.startswith("cpu") and ln[3:4].isdigit()
    )
    spun = sum(b - a for a, b in zip(cpu0, cpu1, strict=True)) / (wall * cores)
    assert share is not None and spun > 0.05
    assert share == pytest.approx(spun, abs=0.12)  # clock ticks: 10 ms on each reading


def _cpu_s(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_store_keeps_the_load_and_forgets_it_when_a_row_is_replaced(tmp_path):
    db = tmp_path / "p.db"
    with ProfileStore(db) as s:
        s.put("fp", "a", Measurement(5.0, 4.0, 6.0, 10, load=0.6))
        assert s.get("fp", "a").load == pytest.approx(0.6)
        s.put("fp", "a", Measurement(3.0, 2.0, 4.0, 10))  # timed by a version without a meter
        assert s.get("fp", "a").load is None
    with sqlite3.connect(db) as c:  # a hand-edited load out of range reads as unknown
        c.execute("INSERT INTO conditions VALUES ('fp', 'a', 7.0)")
    with ProfileStore(db) as s:
        assert s.get("fp", "a").load is None and s.get("fp", "a").median_us == 3.0
        assert s.summary()[0]["busy"] == 0  # nor is it counted busy
        s.put("fp", "b", Measurement(5.0, 4.0, 6.0, 10, load=0.6))
        failed = Measurement(math.inf, math.inf, math.inf, 0, "failed", "RuntimeError", 0.9)
        s.put("fp", "c", failed)
        assert s.summary()[0]["busy"] == 1  # ok rows only


def test_time_again_replaces_a_busy_row_only_with_a_quieter_timing(monkeypatch):
    meter = LoadMeter()
    busy = Measurement(9.0, 8.0, 10.0, 5, load=0.7)
    share = iter([0.1, 0.9, 0.5])
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: next(share))
    quiet, new = time_again(busy, lambda: Measurement(5.0, 5.0, 5.0, 5), meter)
    assert new and quiet.median_us == 5.0 and quiet.load == 0.1
    kept, new = time_again(busy, lambda: Measurement(20.0, 20.0, 20.0, 5), meter)
    assert not new and kept is busy  # busier still: the stored row stays
    failed = Measurement(math.inf, math.inf, math.inf, 0, "failed", "RuntimeError: x")
    kept, new = time_again(busy, lambda: failed, meter)
    assert not new and kept is busy


@pytest.fixture()
def cpu_units(tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    return load_units(path)


def test_rows_timed_on_a_busy_machine_are_warned_of_and_timed_again(
    tmp_path, cpu_units, monkeypatch, caplog
):
    graph = load_model(_tiny())
    db = tmp_path / "p.db"
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.8)
    with ProfileStore(db) as store, caplog.at_level(logging.WARNING):
        first = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
    assert {u for u, _, _ in first.busy} == {"cpu"}
    assert {w for _, w, _ in first.busy} >= {"n0_relu", "n1_sigmoid", "the call overhead"}
    warned = [
        r.getMessage() for r in caplog.records if "other work took up to 80%" in r.getMessage()
    ]
    assert len(warned) == 1 and warned[0].startswith("unit cpu:"), warned
    with sqlite3.connect(db) as c:
        loads = [r[0] for r in c.execute("SELECT other_load FROM conditions")]
    assert loads and all(x == pytest.approx(0.8) for x in loads)
    with ProfileStore(db) as store:
        assert store.summary()[0]["busy"] == len(loads)

    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.9)  # busier still
    with ProfileStore(db) as store:
        second = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
    assert second.measured == first.measured and second.reused == 0  # timed again...
    with sqlite3.connect(db) as c:  # ...and the quieter rows kept
        assert {r[0] for r in c.execute("SELECT other_load FROM conditions")} == {0.8}

    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.02)  # quiet now
    with ProfileStore(db) as store:
        third = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
    assert third.measured == first.measured and not third.busy
    assert third.again == third.measured and second.again == second.measured
    with ProfileStore(db) as store:
        assert store.summary()[0]["busy"] == 0
    with ProfileStore(db) as store:
        fourth = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
    assert fourth.measured == 0 and fourth.reused == first.measured and not fourth.busy
    assert first.again == 0 and fourth.again == 0


def test_units_sharing_rows_are_named_together(tmp_path, monkeypatch, caplog):
    path = tmp_path / "u.yaml"
    path.write_text(
        "units:\n  cpu0: {backend: onnxruntime, threads: 1}\n"
        "  cpu1: {backend: onnxruntime, threads: 1}\n"
    )
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.5)
    with caplog.at_level(logging.WARNING):
        prof = profile_model(load_model(_tiny()), load_units(path), budget_s=0.01, layers=False)
    assert {u for u, w, _ in prof.busy if "link" not in w} == {"cpu0/cpu1"}
    assert ("cpu0", "the link to cpu1", 0.5) in prof.busy
    assert any(r.getMessage().startswith("units cpu0, cpu1: ") for r in caplog.records)


def test_tune_says_when_its_measurements_ran_on_a_busy_machine(tmp_path, monkeypatch, caplog):
    import partuner
    from partuner.graph import zoo
    from partuner.units import units_from_mapping

    g = partuner.load_model(zoo.build("branchy", image_size=16))
    units = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}})
    prof = partuner.profile_model(g, units, budget_s=0.01)
    quiet = partuner.tune(g, units, prof, tmp_path / "a", repeat=3, time_limit=1)
    assert quiet.other_load is None or 0.0 <= quiet.other_load <= 1.0
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.6)
    caplog.clear()  # the first run may have met real work on the machine
    with caplog.at_level(logging.WARNING):
        busy = partuner.tune(g, units, prof, tmp_path / "b", repeat=3, time_limit=1)
    warned = [r for r in caplog.records if "while the plan and its baselines ran" in r.message]
    assert busy.other_load == 0.6 and len(warned) == 1
    assert "60%" in warned[0].getMessage()


def test_rows_from_before_loads_were_noted_are_timed_again_once(tmp_path, cpu_units, monkeypatch):
    import dataclasses

    from partuner.profile.signature import node_signature

    graph = load_model(_tiny())
    db = tmp_path / "p.db"
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.05)
    with ProfileStore(db) as store:
        first = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
        fp = first.units["cpu"].fingerprint
        sig = node_signature(graph, graph.compute_nodes[0])
        row = store.get(fp, sig)
        store.put(fp, sig, dataclasses.replace(row, load=None))  # as an older partuner wrote it
        blind = load_mod._machine
        monkeypatch.setattr(load_mod, "_machine", lambda: None)  # where loads cannot be read
        kept = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
        monkeypatch.setattr(load_mod, "_machine", blind)
        second = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
        assert store.get(fp, sig).load == pytest.approx(0.05)
        third = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
    assert kept.measured == 0
    assert second.measured == 1 and second.again == 1
    assert third.measured == 0


def test_a_ray_node_returns_the_known_rows_it_timed_again(tmp_path, cpu_units, monkeypatch):
    """A node profiles with the rows the driver knows; a known row it times again (stored
    before loads were noted) comes back with the new ones, the others do not."""
    import dataclasses

    from partuner.profile.fleet import _known, _profile_here
    from partuner.profile.signature import node_signature

    model = _tiny()
    graph = load_model(model)
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.05)
    settings = {"budget_s": 0.01, "calibrate": False, "layers": False}
    with ProfileStore(tmp_path / "p.db") as store:
        profile_model(graph, cpu_units, store=store, **settings)
        fp = cpu_units["cpu"].fingerprint()
        sig = node_signature(graph, graph.compute_nodes[0])
        store.put(fp, sig, dataclasses.replace(store.get(fp, sig), load=None))
        known = _known(store, fp)
    back = _profile_here(cpu_units["cpu"], model.SerializeToString(), settings, known)
    assert [s for s, _ in back] == [sig]
    assert back[0][1][-1] == pytest.approx(0.05)  # its load, noted now


def test_busy_rows_of_a_remote_unit_are_not_promised_a_new_timing(tmp_path, cpu_units, monkeypatch):
    """Rows measured elsewhere (a kit, a Ray node) are read, never timed here: however busy
    their machine was, no warning says the next run times them again."""
    graph = load_model(_tiny())
    monkeypatch.setattr(LoadMeter, "share", lambda self, since: 0.8)
    with ProfileStore(tmp_path / "p.db") as store:
        here = profile_model(graph, cpu_units, store=store, budget_s=0.01, layers=False)
        fp = cpu_units["cpu"].fingerprint()
        for sig, m in store.rows(fp):
            store.put("board-fp", sig, m)
        there = profile_model(
            graph, cpu_units, store=store, budget_s=0.01, layers=False, remote={"cpu": "board-fp"}
        )
    assert here.busy and not there.busy and there.measured == 0
