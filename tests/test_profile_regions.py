"""In-context costs for units that run only part of a model: its maximal supported regions."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time

import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from partuner.cli import main
from partuner.errors import UnitError, UnitUnavailableError
from partuner.graph import load_model, zoo
from partuner.profile import ProfileStore, profile_model
from partuner.profile.context import wake_measurement
from partuner.profile.regions import (
    PieceTime,
    RegionCosts,
    RegionStat,
    _region_key,
    convex_pieces,
    supported_regions,
)
from partuner.profile.signature import model_digest
from partuner.profile.store import OK
from partuner.units import OnnxruntimeUnit, register_backend, units_from_mapping

NO_CONCAT = ["Conv", "Relu", "MaxPool", "GlobalAveragePool", "Flatten"]


@register_backend("test-regions-refuse")
class RefusingUnit(OnnxruntimeUnit):
    """onnxruntime that refuses any sub-model of more than one node (a picky compiler)."""

    def prepare(self, model):
        if len(model.graph.node) > 1:
            raise UnitError(f"unit {self.name!r}: the compiler refuses fused sub-graphs")
        return super().prepare(model)


@register_backend("test-regions-cold")
class ColdUnit(OnnxruntimeUnit):
    """onnxruntime whose sub-model pays 0.5 ms more when another one ran last (its caches gone
    cold, as an OpenVINO region's are in a plan among the other regions)."""

    last: list[object] = [None]

    def prepare(self, model):
        runner = super().prepare(model)
        run, last = runner.run, self.last

        def cold_run(feeds):
            if last[0] is not runner:
                time.sleep(0.0005)
            last[0] = runner
            return run(feeds)

        runner.run = cold_run
        return runner


def _units(npu: dict) -> object:
    return units_from_mapping(
        {"units": {"cpu": {"backend": "onnxruntime", "threads": 1}, "npu": npu}}
    )


def _toy():
    """a -> b (Softmax) -> c, and a -> d: with Softmax unsupported, {a, d} and {c}."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    outs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [1, 4]) for v in ("c", "d")]
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Softmax", ["a"], ["b"], name="b"),
        helper.make_node("Relu", ["b"], ["c"], name="c"),
        helper.make_node("Sigmoid", ["a"], ["d"], name="d"),
    ]
    g = helper.make_graph(nodes, "toy", [x], outs)
    return load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_regions_are_the_connected_components_of_supported_nodes():
    g = _toy()
    assert supported_regions(g, {"a", "c", "d"}) == [("a", "d"), ("c",)]
    assert supported_regions(g, {"a", "b", "c", "d"}) == [("a", "b", "c", "d")]
    assert supported_regions(g, set()) == []


def test_a_restricted_unit_is_costed_in_context_region_by_region(squeeze, tmp_path):
    units = _units({"backend": "onnxruntime", "threads": 1, "ops": NO_CONCAT})
    with ProfileStore(tmp_path / "p.db") as store:
        prof = profile_model(squeeze, units, store=store, budget_s=0.02)
        again = profile_model(squeeze, units, store=store, budget_s=0.02)
        rows = [store.get(prof.units["npu"].fingerprint, s) for s in _region_sigs(store)]
    up = prof.units["npu"]
    assert up.whole_us is None and up.costs_from == "regions"
    concat = {n.name for n in squeeze.compute_nodes if n.op_type == "Concat"}
    assert len(up.regions) == len(concat) + 1  # each Concat cuts the chain of fire modules
    assert {n for r in up.regions for n in r.nodes} == {
        n.name for n in squeeze.compute_nodes
    } - concat
    for r in up.regions:
        assert r.source in ("layers", "region") and r.whole_us > 0
        assert r.error is not None and math.isfinite(r.error)
        # a plan running the region as one partition is charged what the region took, and
        # what running it as a plan does (after a wait, among the other regions) adds
        assert _charged_as_measured(up, prof.costs, r)
    assert all(math.isinf(prof.costs[n]["npu"]) for n in concat)
    assert up.region_error == max((r.error for r in up.regions), key=abs)
    # each region's error compares its kernels with the runs they came from
    inside = [r for r in up.regions if r.source == "layers"]
    assert inside and all(r.layer_wall_us > 0 for r in inside)
    assert all(r.error == pytest.approx(r.parts_us / r.layer_wall_us - 1) for r in inside)
    # stored as measured, and read back on the next run instead of timed again
    assert rows and all(m is not None and m.status == OK for m in rows)
    assert again.measured == 0 and again.units["npu"].regions == up.regions


def _charged_as_measured(up, costs, r) -> bool:
    """A plan running region ``r`` as one partition is charged what it was measured to take
    (and what running it as a plan adds), its reads and writes included; or more, where the
    per-byte rates exceed what its kernels left over and the nodes keep their kernels' time;
    or, for a region quicker than a partition's cost, that cost."""
    nodes = sum(costs[n]["npu"] for n in r.nodes)
    io = r.in_bytes * up.boundary_us_per_byte + r.out_bytes * up.boundary_out_us_per_byte
    total = up.overhead_us + nodes + io
    charged = r.whole_us + up.plan_extra_us
    if total == pytest.approx(charged, rel=1e-6):
        return True
    if r.source == "layers" and total > charged:
        return up.overhead_us + nodes <= charged * (1 + 1e-6)
    return r.whole_us < up.overhead_us - up.plan_extra_us + io


def test_a_region_whose_nodes_timed_as_nothing_still_charges_its_time():
    # isolated times at or below the call cost leave every node at 0: the region's time
    # must still reach the plan, shared out evenly, not dropped
    stat = RegionStat(("a", "b"), 30.0, 0.0, "region", "")
    busy = RegionStat(("c", "d"), 30.0, 40.0, "region", "")
    reg = RegionCosts((stat, busy), {"a": 0.0, "b": 0.0, "c": 10.0, "d": 30.0}, None)
    costs = reg.costs(10.0)
    assert costs["a"] == costs["b"] == pytest.approx(10.0)
    assert costs["c"] == pytest.approx(5.0) and costs["d"] == pytest.approx(15.0)


def test_what_a_region_reads_and_writes_is_not_charged_twice():
    # the planner charges a partition per byte it reads from and writes for other partitions;
    # a region's time includes its own, so its nodes get what is left
    stat = RegionStat(("a", "b"), 100.0, 50.0, "region", "", None, 1000, 2000)
    reg = RegionCosts((stat,), {"a": 10.0, "b": 30.0}, None)
    costs = reg.costs(10.0, 0.01, 0.02)
    assert sum(costs.values()) == pytest.approx(100.0 - 10.0 - 10.0 - 40.0)
    assert costs["b"] == pytest.approx(3 * costs["a"])
    assert reg.costs(10.0) == {"a": pytest.approx(22.5), "b": pytest.approx(67.5)}
    # nodes profiled in context keep their kernels' time when the rates charge more than the
    # counters left over
    inside = RegionCosts((dataclasses.replace(stat, source="layers"),), reg.base, None)
    assert inside.costs(10.0, 0.01, 0.02) == {"a": pytest.approx(10.0), "b": pytest.approx(30.0)}
    assert sum(inside.costs(10.0, 0.001, 0.002).values()) == pytest.approx(100 - 10 - 5)


def _region_sigs(store: ProfileStore) -> list[str]:
    cur = store._db.execute(  # noqa: SLF001 - the test reads the store's rows directly
        "SELECT signature FROM measurements WHERE signature LIKE '\\_\\_region\\_\\_#%' ESCAPE '\\'"
    )
    return [r[0] for r in cur.fetchall()]


def test_what_a_region_pays_more_in_a_plan_is_measured_and_charged_per_partition(squeeze, tmp_path):
    # regions run one after another in a plan; alone, one is called again and again
    plain = _units({"backend": "onnxruntime", "threads": 1, "ops": NO_CONCAT})
    cold = _units({"backend": "test-regions-cold", "threads": 1, "ops": NO_CONCAT})
    with ProfileStore(tmp_path / "p.db") as store:
        warm = profile_model(squeeze, plain, store=store, budget_s=0.02).units["npu"]
        prof = profile_model(squeeze, cold, store=store, budget_s=0.02)
        cur = store._db.execute(  # noqa: SLF001 - the test reads the store's rows directly
            "SELECT detail FROM measurements WHERE fingerprint = ? AND signature LIKE "
            "'\\_\\_plancycle\\_\\_#%' ESCAPE '\\'",
            (prof.units["npu"].fingerprint,),
        )
        details = [json.loads(r[0]) for r in cur.fetchall()]
    up = prof.units["npu"]
    # every region of the fire modules is one a plan can run whole: each is one piece
    assert len(details) == 1 and details[0]["pieces"] == len(up.regions)
    assert len(details[0]["planned_us"]) == len(up.regions)
    # the 0.5 ms each region pays after another one, and not the plain unit's
    assert 0.4e3 < up.plan_extra_us < 2e3
    assert warm.plan_extra_us < 0.4e3
    assert up.overhead_us >= up.plan_extra_us


def test_a_disturbed_timing_of_the_largest_region_does_not_set_its_costs(squeeze, tmp_path):
    # the largest region is timed whole three times (its own row, and first and last among
    # its chain cuts): one slow window (a moment of load) must not scale every node cost
    units = _units({"backend": "onnxruntime", "threads": 1, "ops": NO_CONCAT})
    with ProfileStore(tmp_path / "p.db") as store:
        first = profile_model(squeeze, units, store=store, budget_s=0.02)
        up = first.units["npu"]
        big = max(up.regions, key=lambda r: len(r.nodes))
        fp = up.fingerprint
        sig = f"__region__#{_region_key(model_digest(squeeze), big.nodes)}"
        row = store.get(fp, sig)
        slow = 50 * row.median_us
        store.put(fp, sig, dataclasses.replace(row, median_us=slow, p90_us=slow))
        again = profile_model(squeeze, units, store=store, budget_s=0.02)
    assert again.measured == 0
    whole = max(again.units["npu"].regions, key=lambda r: len(r.nodes)).whole_us
    # the median of its three timings: not the slow one, and no less than the first
    # profile's (the median of the three before)
    assert big.whole_us <= whole < slow / 10
    up2 = again.units["npu"]
    big2 = max(up2.regions, key=lambda r: len(r.nodes))
    assert _charged_as_measured(up2, again.costs, big2)


def test_a_region_the_backend_refuses_keeps_isolated_costs_and_is_not_stored_as_measured(
    squeeze, tmp_path, caplog
):
    units = _units({"backend": "test-regions-refuse", "threads": 1, "ops": NO_CONCAT})
    with caplog.at_level(logging.WARNING), ProfileStore(tmp_path / "p.db") as store:
        prof = profile_model(squeeze, units, store=store, budget_s=0.02)
        rows = [store.get(prof.units["npu"].fingerprint, s) for s in _region_sigs(store)]
    up = prof.units["npu"]
    big = [r for r in up.regions if len(r.nodes) > 1]
    assert big and all(r.source == "isolated" and r.whole_us is None for r in big)
    assert all("refuses fused sub-graphs" in r.reason for r in big)
    assert any("could not be run as one sub-model" in m and "refuses" in m for m in caplog.messages)
    single = len(up.regions) - len(big)  # one-node regions compile: their rows are ok
    assert len(rows) == len(up.regions) and sum(m.status == OK for m in rows) == single
    assert all(
        math.isfinite(prof.costs[n]["npu"]) and prof.costs[n]["npu"] >= 0
        for r in big
        for n in r.nodes
    )


def test_a_unit_that_can_run_nothing_is_left_out_with_one_line(squeeze, caplog):
    units = _units({"backend": "onnxruntime", "threads": 1, "ops": ["Softmax"]})
    with caplog.at_level(logging.WARNING):
        prof = profile_model(squeeze, units, budget_s=0.02)
    assert "npu" not in prof.units and "npu" in prof.skipped_units
    assert [m for m in caplog.messages if "npu" in m and "none of the model's" in m]
    none = units_from_mapping({"units": {"npu": {"backend": "onnxruntime", "ops": ["Softmax"]}}})
    with pytest.raises(UnitUnavailableError, match="can run any node"):
        profile_model(squeeze, none, budget_s=0.02)


def test_cli_plans_without_an_idle_unit_and_profile_shows_regions(tmp_path):
    runner = CliRunner()
    model = tmp_path / "sq.onnx"
    model.write_bytes(zoo.build("squeezenet", image_size=32).SerializeToString())
    idle = tmp_path / "idle.yaml"
    idle.write_text(
        "units:\n  cpu: {backend: onnxruntime}\n  npu: {backend: onnxruntime, ops: [Softmax]}\n"
    )
    db = str(tmp_path / "p.db")
    r = runner.invoke(main, ["plan", str(model), "--units", str(idle), "--db", db,
                             "-o", str(tmp_path / "plan.yaml")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "npu" not in (tmp_path / "plan.yaml").read_text().split("partitions")[-1]
    restricted = tmp_path / "r.yaml"
    restricted.write_text(
        "units:\n  cpu: {backend: onnxruntime}\n"
        f"  npu: {{backend: onnxruntime, ops: [{', '.join(NO_CONCAT)}]}}\n"
    )
    r = runner.invoke(main, ["profile", str(model), "--units", str(restricted), "--db", db])
    assert r.exit_code == 0, r.output
    assert "runs only part of the model" in r.output and "regions" in r.output
    r = runner.invoke(
        main, ["profile", str(model), "--units", str(restricted), "--db", db, "--json"]
    )
    npu = next(u for u in json.loads(r.output)["units"] if u["unit"] == "npu")
    assert npu["costs_from"] == "regions" and len(npu["regions"]) == 9
    assert all(x["whole_ms"] > 0 and x["additivity_error"] is not None for x in npu["regions"])


def test_waking_up_after_idling_is_measured_and_charged_per_partition(tmp_path):
    g = load_model(zoo.build("resnet18", image_size=32))
    units = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}})
    with ProfileStore(tmp_path / "p.db") as store:
        prof = profile_model(g, units, store=store, budget_s=0.02)
        cur = store._db.execute(  # noqa: SLF001 - the test reads the store's rows directly
            "SELECT status, median_us, detail FROM measurements WHERE signature LIKE '\\_\\_wake%'"
            " ESCAPE '\\'"
        )
        rows = cur.fetchall()
    up = prof.units["cpu"]
    assert len(rows) == 1 and rows[0][0] == OK and json.loads(rows[0][2])["partitions"] == 16
    assert up.wake_us == max(rows[0][1], 0.0)
    # charged with every partition, within the cap of half the model
    assert up.overhead_us == pytest.approx(
        min(max(up.call_us, up.overhead_us - up.wake_us) + up.wake_us, up.whole_us / 2)
    )
    assert up.overhead_us >= min(up.call_us + up.wake_us, up.whole_us / 2) - 1e-9


def test_a_wake_row_of_noisy_differences_reads_back(tmp_path):
    # waking up is a difference of two timings: its low percentile can come out below zero,
    # and a row stored so was refused when read back (the next `plan` after `profile` failed)
    m = wake_measurement([-40.0, -5.0, 3.0, 30.0, 35.0], 16)
    assert m.median_us == 3.0 and m.p10_us == 0.0 and m.p90_us > 30.0
    with ProfileStore(tmp_path / "p.db") as store:
        store.put("fp", "__wake__#d#k16", m)
        assert store.get("fp", "__wake__#d#k16") == m
    assert wake_measurement([-9.0, -1.0], 16).median_us == 0.0


def test_a_wake_row_stored_by_the_last_version_still_reads(tmp_path):
    from partuner.profile.store import Measurement

    old = Measurement(33.5, -12.0, 80.0, 50, OK, "{}")  # as the previous version stored it
    with ProfileStore(tmp_path / "p.db") as store:
        store.put("fp", "__wake__#d#k16", old)
        assert store.get("fp", "__wake__#d#k16").median_us == 33.5


def test_a_stored_cycle_row_that_does_not_parse_is_ignored_not_a_crash():
    from partuner.profile.cycle import measure_cycle
    from partuner.profile.store import Measurement

    units = _units({"backend": "onnxruntime", "threads": 1, "ops": NO_CONCAT})
    bad = [
        '{"planned_us": ["x", 1]}',
        '{"planned_us": 3}',
        "[]",
        '{"planned_us": [1e999, 2]}',
        '{"planned_us": [-4, 2]}',
        '{"planned_us": [4]}',
    ]
    for detail in bad:
        row = Measurement(5.0, 1.0, 9.0, 2, OK, detail)
        pair = [(None, {}), (None, {})]
        got = measure_cycle(units["npu"], pair, lambda s, m, r=row: r, "sig", 0.1)
        assert got is None
    good = Measurement(5.0, 1.0, 9.0, 2, OK, '{"planned_us": [4, 6.5]}')
    assert measure_cycle(units["npu"], [(None, {})] * 2, lambda s, m: good, "s", 0.1) == [4, 6.5]


def test_a_region_a_plan_cannot_run_whole_is_timed_in_the_pieces_a_plan_runs():
    # a -> b (Softmax, unsupported) -> c and a -> c: {a, c} is connected, but the path
    # through b leaves it and comes back, so a plan runs a and c as two partitions
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Softmax", ["a"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="c"),
    ]
    g = helper.make_graph(nodes, "t", [x], [y])
    graph = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert supported_regions(graph, {"a", "c"}) == [("a", "c")]
    assert convex_pieces(graph, ("a", "c")) == [("a",), ("c",)]
    assert convex_pieces(graph, ("a", "b", "c")) == [("a", "b", "c")]


def test_pieces_timed_as_a_plan_runs_them_set_what_the_planner_charges():
    # one region a plan can only run in pieces (p, q) and two it can run whole (r, s)
    big = RegionStat(("a", "b", "c"), 300.0, None, "region", "", None, 0, 0)
    r = RegionStat(("r",), 100.0, None, "region", "", None, 0, 0)
    s = RegionStat(("s",), 200.0, None, "region", "", None, 0, 0)
    base = {"a": 1.0, "b": 1.0, "c": 2.0, "r": 1.0, "s": 1.0}
    pieces = (
        PieceTime(("a",), 1000, 1000, 150.0, whole=False),
        PieceTime(("b", "c"), 1000, 1000, 250.0, whole=False),
        PieceTime(("r",), 0, 0, 130.0),
        PieceTime(("s",), 0, 0, 230.0),
    )
    reg = RegionCosts((big, r, s), base, None, 0.0, pieces)
    costs = reg.costs(10.0, 0.01, 0.02)
    # each piece of the region run in pieces: what it took, less the call and its bytes
    assert costs["a"] == pytest.approx(150.0 - 10.0 - 30.0)
    assert costs["b"] + costs["c"] == pytest.approx(250.0 - 10.0 - 30.0)
    assert costs["c"] == pytest.approx(2 * costs["b"])
    # whole regions: their time alone; the 30 us each took more in a plan is the extra
    assert costs["r"] == pytest.approx(90.0) and costs["s"] == pytest.approx(190.0)
    fit = reg.plan_fit(10.0, 0.01, 0.02)
    assert fit.extra_us == pytest.approx(30.0) and fit.io_scale == 1.0 and fit.pieces == 4
    # never below 0: a partition is charged at least its call and wake-up
    quick = dataclasses.replace(
        reg,
        pieces=tuple(
            dataclasses.replace(p, planned_us=p.planned_us - 60.0) if p.whole else p for p in pieces
        ),
    )
    assert quick.plan_fit(10.0, 0.01, 0.02).extra_us == 0.0


def test_with_enough_pieces_the_lightest_weight_of_the_bytes_that_fits_is_kept():
    # six pieces of a region run in pieces: any weight whose reads and writes fit in each
    # piece's time charges each what it took, so the lightest is kept; a piece whose bytes
    # at the full rates cost more than it took rules those rates out
    stat = RegionStat(tuple("abcdef"), 600.0, None, "region", "", None, 0, 0)
    base = dict.fromkeys("abcdef", 1.0)
    pieces = tuple(PieceTime((n,), 0, 10_000, 100.0, whole=False) for n in "abcdef")
    reg = RegionCosts((stat,), base, None, 0.0, pieces)
    fit = reg.plan_fit(10.0, 0.0, 0.02)  # 200 us of writes at the full rate: too much
    assert fit.io_scale == 0.0 and fit.extra_us == 0.0 and fit.pieces == 6
    costs = reg.costs(10.0, 0.0, 0.02 * fit.io_scale)
    assert all(costs[n] == pytest.approx(90.0) for n in "abcdef")
    # fewer pieces: the weight is not fitted
    few = dataclasses.replace(reg, pieces=pieces[:3])
    assert few.plan_fit(10.0, 0.0, 0.02).io_scale == 1.0
