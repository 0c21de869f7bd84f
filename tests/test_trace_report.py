"""Timelines and reports: Chrome-trace structure, the HTML page, calibration rows."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from click.testing import CliRunner

from partuner.cli import main
from partuner.export import PartitionSpec
from partuner.graph import load_model
from partuner.profile import ProfileStore
from partuner.report import Handoff, Slice, chrome_trace, predicted_slices, render_report
from partuner.runtime.calibrate import (
    calibration_signature,
    correction_factors,
    load_calibration,
)
from partuner.units import load_units, units_from_mapping


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture()
def planned(tmp_path, branchy_file, units_file, db):
    plan = tmp_path / "plan.yaml"
    r = _cli(
        "plan", branchy_file, "--units", units_file, "--db", db, "--scheduler", "heft", "-o", plan
    )
    assert r.exit_code == 0, r.output
    return plan, yaml.safe_load(plan.read_text())["partuner"]["partitions"]


def _tracks(doc, process):
    pid = next(
        e["pid"]
        for e in doc["traceEvents"]
        if e["name"] == "process_name" and e["args"]["name"] == process
    )
    names = {
        e["tid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["name"] == "thread_name" and e["pid"] == pid
    }
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]
    return names, slices


def test_run_trace_and_calibrate(tmp_path, planned, branchy_file, units_file, db):
    plan, parts = planned
    trace = tmp_path / "t.json"
    r = _cli(
        "run", branchy_file, "--plan", plan, "--units", units_file, "--repeat", 3,
        "--trace", trace, "--calibrate", "--db", db, "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    doc = json.loads(trace.read_text())
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["partitions"] == len(parts)
    for process in ("predicted", "measured"):
        names, slices = _tracks(doc, process)
        assert set(names.values()) == {p["unit"] for p in parts}
        got = sorted((s["name"], names[s["tid"]]) for s in slices)
        assert got == sorted((p["name"], p["unit"]) for p in parts)  # one slice per partition
        assert all(s["dur"] >= 0 and s["ts"] >= 0 for s in slices)
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    starts = {e["id"] for e in flows if e["ph"] == "s"}
    assert starts == {e["id"] for e in flows if e["ph"] == "f"}
    if len({p["unit"] for p in parts}) > 1:
        assert starts and any(e["ph"] == "i" and e["cat"] == "transfer" for e in doc["traceEvents"])

    cal = res["calibration"]
    assert cal["signature"].startswith("__calibration__#")
    graph = load_model(branchy_file)
    assert cal["signature"] == calibration_signature(graph)
    units = load_units(units_file)
    with ProfileStore(db) as store:
        for info in cal["units"].values():
            m = store.get(info["fingerprint"], cal["signature"])
            assert m is not None and m.median_us == pytest.approx(info["factor"])
            assert m.count == info["partitions"] and "measured/predicted" in m.detail
        factors = load_calibration(store, graph, units)
    used = {p["unit"] for p in parts}
    assert used <= set(factors) and all(f > 0 for f in factors.values())
    # the next plan of the model says that it scales the units' costs by them
    r = _cli("plan", branchy_file, "--units", units_file, "--db", db, "--time-limit", 1)
    assert r.exit_code == 0, r.output
    note = next(x for x in r.output.splitlines() if x.startswith("note: node costs scaled"))
    assert all(f"{u} x" in note for u in factors)


def test_report_html(tmp_path, planned, branchy_file, units_file):
    plan, parts = planned
    out = tmp_path / "r.html"
    r = _cli(
        "report", branchy_file, "--plan", plan, "--units", units_file, "-o", out, "--repeat", 2
    )
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1
    for side in ("predicted", "measured"):
        rects = re.findall(rf'<rect class="part" data-side="{side}" data-partition="([^"]+)"', page)
        assert sorted(rects) == sorted(p["name"] for p in parts)
    for p in parts:
        assert f"<td>{p['name']}</td>" in page
    assert "Output check" in page and "passed" in page
    assert not re.search(r"<script|<link|src=|href=|@import", page)  # self-contained
    out2 = tmp_path / "r2.html"
    r = _cli(
        "report", branchy_file, "--plan", plan, "--units", units_file, "-o", out2,
        "--repeat", 2, "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)  # what run --json prints, and the page
    assert res["report"] == str(out2) and out2.is_file() and res["check"]["passed"] is True
    assert res["partitions"] == len(parts) and res["measured_ms"] > 0
    assert "note" in res  # as run --json has it (a new user's trial)


def test_chrome_trace_shapes():
    pred = predicted_slices(
        [
            PartitionSpec("p0", "a", ("n0",), 0.0, 10.0),
            PartitionSpec("p1", "b", ("n1", "n2"), 12.0, 20.0),
            PartitionSpec("p2", "a", ("n3",)),  # no predicted times: not drawn
        ]
    )
    assert [s.partition for s in pred] == ["p0", "p1"]
    meas = [Slice("p0", "a", 0.0, 11.0), Slice("p1", "b", 15.0, 30.0), Slice("p2", "a", 31, 32)]
    h = Handoff("x", 64, "p0", "a", "p1", "b", 11.0, 15.0)
    doc = chrome_trace(pred, meas, [], [h], units=["b", "a"], metadata={"k": math.inf})
    names, slices = _tracks(doc, "measured")
    assert names == {1: "b", 2: "a"} and len(slices) == 3
    s, f = (e for e in doc["traceEvents"] if e["ph"] in "sf")
    assert (s["tid"], f["tid"], f["bp"], s["id"]) == (2, 1, "e", f["id"])
    assert 0.0 < s["ts"] < 11.0 and f["ts"] == 15.0  # inside the producer, at the consumer's start
    (mark,) = (e for e in doc["traceEvents"] if e["ph"] == "i")
    assert mark["args"] == {"value": "x", "bytes": 64, "wait_us": 4.0}
    # a modeled unit's measured track holds the host's times: its name says so
    doc = chrome_trace(pred, meas, [], [h], units=["b", "a"], emulated=["b"])
    names, _ = _tracks(doc, "measured")
    assert names == {1: "b (modeled: emulated on the host)", 2: "a"}
    assert _tracks(doc, "predicted")[0] == {1: "b", 2: "a"}


def test_render_report_draws_one_rect_per_partition_per_side():
    pred = [Slice("p0", "a", 0, 1000, 3), Slice("p1", "b", 0, 500, 1)]
    meas = [Slice("p0", "a", 0, 1200, 3), Slice("p1", "b", 100, 700, 1)]
    page = render_report(
        title="t <&>",
        summary={"model": "m"},
        predicted=pred,
        measured=meas,
        units=["a", "b"],
        partitions=[{"name": "p0", "unit": "a", "predicted_ms": 1.0, "measured_ms": 1.2}],
        check=None,
    )
    assert "t &lt;&amp;&gt;" in page
    assert len(re.findall(r'<rect class="part" data-side="predicted"', page)) == 2
    assert len(re.findall(r'<rect class="part" data-side="measured"', page)) == 2
    assert "<td>1.20</td>" in page  # measured / predicted


def test_correction_factors_skip_modeled_units_and_pool_fingerprints():
    units = units_from_mapping(
        {
            "units": {
                "cpu0": {"backend": "onnxruntime", "threads": 1},
                "cpu1": {"backend": "onnxruntime", "threads": 1},
                "npu": {"backend": "modeled", "gflops": 100, "gbps": 8},
            }
        }
    )
    rows = [("cpu0", 200.0, 100.0), ("cpu1", 300.0, 100.0), ("cpu1", 100.0, 100.0)]
    rows += [("npu", 50.0, 10.0), ("cpu0", 10.0, 0.0), ("cpu0", math.nan, 5.0)]
    (c,) = correction_factors(rows, units).values()
    assert c.units == ("cpu0", "cpu1") and c.partitions == 3 and c.factor == 2.0


def test_a_correction_factor_is_weighted_by_time_not_a_median_of_partitions():
    """Many small partitions that ran faster than predicted must not outvote the large ones
    that ran slower: the unit took 1.38x its prediction in all, so its factor is 1.38 (a median
    of the partition ratios said 0.8)."""
    units = units_from_mapping({"units": {"cpu0": {"backend": "onnxruntime", "threads": 1}}})
    rows = [("cpu0", 80.0, 100.0)] * 4 + [("cpu0", 2720.0, 1800.0)]
    (c,) = correction_factors(rows, units).values()
    assert c.factor == pytest.approx((4 * 80 + 2720) / (4 * 100 + 1800))
    assert c.factor > 1.3 and c.p10 < 1.0
