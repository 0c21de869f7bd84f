"""Units on a Ray cluster (issue 19), against a real local multi-node cluster.

The cluster is Ray's own ``ray.cluster_utils.Cluster``: a head node offering the custom
resource ``node-a`` and a second raylet offering ``node-b`` (one CPU each), started once for
the module. Nothing of Ray is mocked. Without Ray installed (``pip install partuner[ray]``) the
cluster tests are skipped; the units-file checks run everywhere.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from partuner.batch import BatchModel
from partuner.batch.model import BatchError
from partuner.batch.run import reference, run_split
from partuner.batch.split import Split
from partuner.cli import main
from partuner.errors import PlanFileError, UnitsFileError
from partuner.export import PartitionSpec, cut
from partuner.graph import load_model, zoo
from partuner.pipeline import build_problem, plan_file, reference_outputs
from partuner.plan import plan_from_assignment
from partuner.profile import ProfileStore, profile_model
from partuner.profile.measure import random_feeds
from partuner.runtime import Session, check_outputs
from partuner.units import units_from_mapping
from partuner.units.base import materialize
from partuner.units.ray_unit import RayNodeLost, RayUnit, RayValue
from partuner.units.untrusted import check_plan_units


def _units(address: str, **units: dict) -> object:
    return units_from_mapping({"ray": {"address": address}, "units": units})


ORT = {"backend": "onnxruntime", "threads": 1}
ON_A = {**ORT, "ray": {"resources": {"node-a": 1}}}
ON_B = {**ORT, "ray": {"resources": {"node-b": 1}}}


# -- the units file (no cluster needed) ------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "top", "says"),
    [
        ({**ORT, "ray": 5}, None, "option 'ray' must be a mapping"),
        ({**ORT, "ray": {}}, None, "needs 'resources'"),
        ({**ORT, "ray": {"resources": {"x": 0}}}, None, "needs an amount > 0"),
        ({**ORT, "ray": {"resources": {"x": True}}}, None, "needs an amount > 0"),
        ({**ORT, "ray": {"node": "x"}}, None, "unknown key 'node'"),
        (ON_A, {"address": "nohost"}, "must be auto, HOST:PORT"),
        (ON_A, {"address": "h:99999"}, "must be auto, HOST:PORT"),
        (ON_A, {"adress": "auto"}, "unknown key 'adress'"),
        (ON_A, "auto", "'ray' must be a mapping"),
        (
            {"backend": "modeled", "gflops": 1, "gbps": 1, "ray": {"resources": {"x": 1}}},
            None,
            "modeled",
        ),
        ({**ORT, "remote": True, "ray": {"resources": {"x": 1}}}, None, "exclude each other"),
    ],
)
def test_bad_ray_settings_are_one_line_naming_the_file(entry, top, says):
    data = {"units": {"npu": entry}}
    if top is not None:
        data["ray"] = top
    with pytest.raises(UnitsFileError) as e:
        units_from_mapping(data, source="fleet.yaml")
    msg = str(e.value)
    assert says in msg and msg.startswith("fleet.yaml: ") and "\n" not in msg


def test_a_ray_unit_keeps_its_settings_and_spec():
    us = _units("10.0.0.5:6379", npu={**ORT, "ops": ["Conv"], "ray": {"resources": {"b": 2}}})
    unit = us["npu"]
    assert isinstance(unit, RayUnit)
    assert unit.ops == frozenset({"Conv"}) and unit.cores is None
    assert unit.spec()["ray"] == {"resources": {"b": 2.0}}
    assert us.ray.address == "10.0.0.5:6379"
    again = units_from_mapping({"ray": {"address": "10.0.0.5:6379"}, "units": {"npu": unit.spec()}})
    assert again["npu"].spec() == unit.spec()


def test_a_plan_file_may_not_place_units_on_a_cluster():
    with pytest.raises(PlanFileError, match="ray"):
        check_plan_units({"npu": {**ORT, "ray": {"resources": {"a": 1}}}}, "plan.yaml")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_unreachable_cluster_is_one_line_and_quick(branchy_file, tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install partuner[ray])")
    addr = f"127.0.0.1:{_closed_port()}"
    us = _units(addr, npu=ON_A)
    ok, why = us["npu"].availability()
    assert not ok and "unreachable" in why and addr in why
    f = tmp_path / "fleet.yaml"
    unit = "npu: {backend: onnxruntime, cores: [1], ray: {resources: {a: 1}}}"
    f.write_text(f"ray: {{address: '{addr}'}}\nunits:\n  {unit}\n")
    r = CliRunner().invoke(
        main, ["profile", str(branchy_file), "--units", str(f), "--db", str(tmp_path / "p.db")]
    )
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "unreachable" in lines[0], r.output
    r = CliRunner().invoke(main, ["units", "--units", str(f), "--json"])
    assert r.exit_code == 0
    import json

    got = json.loads(r.output)
    assert got["ray"]["reachable"] is False and got["units"][0]["available"] is False
    assert got["units"][0]["cores"] == [1]  # of its node, where its actor would run


# -- on a real local cluster -----------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install partuner[ray])")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node-a": 1}})
    c.add_node(num_cpus=1, resources={"node-b": 1})
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def small():
    return load_model(zoo.build("branchy", image_size=16))


def test_units_on_two_nodes_run_what_a_local_unit_runs(cluster, small):
    us = _units(cluster.address, a=ON_A, b=ON_B, cpu=ORT)
    assert us["a"].availability()[0] and us["b"].availability()[0]
    assert us["a"].node() != us["b"].node()  # placed by their resources, on two raylets
    assert us["a"].fingerprint().endswith("-ray")
    assert us["a"].fingerprint() != us["cpu"].fingerprint()
    feeds = random_feeds(small, list(small.inputs))
    want = us["cpu"].prepare(small.model).run(feeds)
    for name in ("a", "b"):
        with us[name].prepare(small.model) as r:
            got = r.run(feeds)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_a_ray_unit_runs_on_its_declared_cores_of_the_node_only(cluster, caplog):
    us = _units(cluster.address, a={**ON_A, "cores": [0]}, b=ON_B, c={**ON_A, "cores": [0, 4096]})

    def where(_unit):
        return {os.sched_getaffinity(int(t)) == {0} for t in os.listdir("/proc/self/task")}

    assert us["a"].call("apply", where) == {True}  # every thread of its actor, on core 0
    if len(os.sched_getaffinity(0)) > 1:
        assert us["b"].call("apply", where) == {False}  # no cores declared: not pinned
    us["a"].release()  # node-a's one resource, for c
    with caplog.at_level(logging.WARNING):
        assert us["c"].call("apply", where) == {True}  # on the cores its node has
    assert "unit 'c' declares cores [4096] that its Ray node lacks" in caplog.text
    us["b"].release()
    us["c"].release()


def test_a_resource_no_node_offers_is_named_with_what_the_cluster_has(cluster):
    us = _units(cluster.address, z={**ORT, "ray": {"resources": {"board-z": 1}}})
    ok, why = us["z"].availability()
    assert not ok
    assert "board-z" in why and "node-a: 1" in why and "node-b: 1" in why


def test_a_backend_that_cannot_run_on_its_node_says_so(cluster):
    us = _units(cluster.address, g={**ORT, "provider": "cuda", "ray": {"resources": {"node-a": 1}}})
    ok, why = us["g"].availability()
    assert not ok and "on Ray node" in why and "CUDA" in why


def test_profiling_runs_on_the_nodes_and_is_stored_here(cluster, small, tmp_path):
    us = _units(cluster.address, a=ON_A, b={**ON_B, "optimization": "extended"})
    db = tmp_path / "p.db"
    with ProfileStore(db) as store:
        said = []
        prof = profile_model(small, us, store=store, progress=lambda *a: said.append(a))
        assert said[0] == (0, 1, "a, b: on Ray nodes")  # a progress line starts at once
        assert us["a"].fingerprint() != us["b"].fingerprint()
        assert prof.measured > 0  # the rows the nodes timed
        for name in ("a", "b"):
            fp = us[name].fingerprint()
            rows = dict(store.rows(fp))
            assert any(s.startswith("__fleet__#") for s in rows)
            assert sum(not s.startswith("__") for s in rows) >= 5  # node rows
            up = prof.units[name]
            assert up.ray_call_us > 0 and up.overhead_us >= up.ray_call_us
            assert all(0 <= c[name] < float("inf") for c in prof.costs.values())
        assert prof.link_sources[("a", "b")] == "measured"
        # the two raylets share this machine: rows timed while the other node worked are
        # busy, and timed again with the nodes one after another
        fps = [us[n].fingerprint() for n in ("a", "b")]
        busy = _busy_rows(store, fps)
        again = profile_model(small, us, store=store)
        assert (again.measured > 0) == (busy > 0)
        left = _busy_rows(store, fps)  # a new timing replaces a busy one only if quieter
        assert left <= busy
        third = profile_model(small, us, store=store)
    assert (third.measured > 0) == (left > 0)
    if not left:
        assert third.costs == again.costs  # read back, the same


def _busy_rows(store: ProfileStore, fps: list[str]) -> int:
    from partuner.profile.load import is_busy

    return sum(is_busy(m.load) for fp in fps for s, m in store.rows(fp) if m.status == "ok")


def test_a_plan_across_two_nodes_and_a_local_unit_runs_and_checks(cluster, small):
    us = _units(cluster.address, a=ON_A, b=ON_B, cpu=ORT)
    prof = profile_model(small, us)
    problem = build_problem(small, us, prof)
    names = [n.name for n in small.compute_nodes]
    units = ["a", "b", "cpu"]
    plan = plan_from_assignment(
        problem, {n: units[i * 3 // len(names)] for i, n in enumerate(names)}
    )
    assert {p.unit for p in plan.partitions} == {"a", "b", "cpu"}
    pf = plan_file(plan, small, us)
    feeds = random_feeds(small, list(small.inputs))
    with Session(small, cut(small, pf.partitions), us) as s:
        outs = s.run(None, feeds)
    ref = reference_outputs(small, feeds)
    got = dict(zip(small.outputs, outs, strict=True))
    assert check_outputs(ref, got, ["f32"]).passed


def _batch_model():
    return BatchModel(zoo.build("branchy", image_size=16), "zoo:branchy@16")


def test_a_batch_splits_across_nodes_in_order_and_a_lost_unit_is_named_or_retried(cluster):
    bm = _batch_model()
    us = _units(cluster.address, a=ON_A, b=ON_B)
    split = Split("test", {"a": 3, "b": 5}, 0.0, {})
    g = bm.at(8)
    feeds = random_feeds(g, list(g.inputs))
    ref = reference(bm, feeds)
    run, merged = run_split(bm, us, split, feeds, repeat=1, warmup=0, ref=ref)
    assert run.check.passed and not run.retried
    import ray

    ray.kill(us["b"]._remote.actor)  # the unit's actor gone, as when its node dies
    with pytest.raises(BatchError, match=r"unit 'b' failed during the batch.*--retry"):
        run_split(bm, us, split, feeds, repeat=1, warmup=0, ref=ref)
    lost: set[str] = set()
    run, merged2 = run_split(bm, us, split, feeds, repeat=2, warmup=0, ref=ref, lost=lost)
    assert lost == {"b"} and run.retried == {"b": "a"} and run.check.passed
    for k in merged:  # b's items re-run on a, in their place
        np.testing.assert_allclose(merged2[k], merged[k], rtol=1e-5, atol=1e-6)


def test_a_node_lost_mid_run_fails_with_the_node_named(cluster, small):
    node = cluster.add_node(num_cpus=1, resources={"node-c": 1})
    cluster.wait_for_nodes()
    us = _units(cluster.address, c={**ORT, "ray": {"resources": {"node-c": 1}}})
    runner = us["c"].prepare(small.model)
    feeds = random_feeds(small, list(small.inputs))
    runner.run(feeds)
    where = us["c"].node()
    cluster.remove_node(node)
    with pytest.raises(RayNodeLost) as e:
        runner.run(feeds)
    assert where in str(e.value) and "'c'" in str(e.value) and "\n" not in str(e.value)


def test_rows_a_node_timed_while_busy_are_timed_again_there(cluster, small, tmp_path):
    us = _units(cluster.address, a=ON_A)
    with ProfileStore(tmp_path / "p.db") as store:
        profile_model(small, us, store=store)
        fp = us["a"].fingerprint()
        rows = dict(store.rows(fp))
        mark = next(m for s, m in rows.items() if s.startswith("__fleet__#"))
        timed = json.loads(mark.detail)["rows"]
        sig = next(s for s in timed if not s.startswith("__") and rows[s].load is not None)
        if not _busy_rows(store, [fp]):  # quiet: read back
            assert profile_model(small, us, store=store).measured == 0
        store.put(fp, sig, replace(rows[sig], load=0.9))  # as if others took 90 % meanwhile
        again = profile_model(small, us, store=store)
        now = store.get(fp, sig)
    assert again.measured > 0  # profiled on the node again
    assert now.load is not None and now.load < 0.9 and now != rows[sig]


def test_a_second_model_reuses_what_the_node_timed_for_the_first(cluster, small, tmp_path):
    us = _units(cluster.address, a=ON_A)
    other = load_model(zoo.build("branchy", image_size=24))  # same ops, other shapes
    with ProfileStore(tmp_path / "p.db") as store:
        profile_model(small, us, store=store)
        fp = us["a"].fingerprint()
        before = dict(store.rows(fp))
        profile_model(other, us, store=store)
        after = dict(store.rows(fp))
    assert before.keys() < after.keys()  # the second model's rows added
    assert "__call_overhead__" in before
    from partuner.profile.load import is_busy

    quiet = {s: m for s, m in before.items() if not s.startswith("__fleet__")}
    quiet = {s: m for s, m in quiet.items() if not is_busy(m.load)}  # busy ones: timed again
    assert quiet  # some rows compared
    for sig, m in quiet.items():  # nothing timed again on the node (a new timing differs)
        assert after[sig] == m, sig


def test_values_between_two_ray_units_stay_on_the_nodes(cluster, small):
    us = _units(cluster.address, a=ON_A, b=ON_B, cpu=ORT)
    names = [n.name for n in small.compute_nodes]
    half = len(names) // 2
    specs = [
        PartitionSpec("p0", "a", tuple(names[:1])),  # the stem: read only by p1
        PartitionSpec("p1", "b", tuple(names[1:half])),
        PartitionSpec("p2", "cpu", tuple(names[half:])),
    ]
    parts = cut(small, specs)
    feeds = random_feeds(small, list(small.inputs))
    with Session(small, parts, us) as s:
        # p0's outputs stay on node a for b; p1's come here for the local cpu
        assert s._defer == [True, False, False]
        outs = s.run(None, feeds)
        moved = {t.src_partition: t.nbytes for t in s.last_transfers}
    assert all(isinstance(o, np.ndarray) for o in outs)
    assert moved["p0"] > 0  # sizes known without fetching
    got = dict(zip(small.outputs, outs, strict=True))
    assert check_outputs(reference_outputs(small, feeds), got, ["f32"]).passed
    with us["a"].prepare(parts[0].model) as r0, us["b"].prepare(parts[1].model) as r1:
        left = r0.run_deferred({k: feeds[k] for k in parts[0].inputs})
        assert all(isinstance(v, RayValue) for v in left.values())
        ins = {k: left[k] if k in left else feeds[k] for k in parts[1].inputs}
        assert any(isinstance(v, RayValue) for v in ins.values())
        direct = r1.run(ins)  # read on node b from node a
        via_here = r1.run(materialize(ins))
    for k in direct:
        np.testing.assert_array_equal(direct[k], via_here[k])


def test_identical_units_on_two_nodes_are_profiled_once(cluster, small, tmp_path, caplog):
    us = _units(cluster.address, a=ON_A, b=ON_B)
    assert us["a"].fingerprint() == us["b"].fingerprint()  # one kind of board
    with caplog.at_level(logging.INFO, logger="partuner.profile"):
        with ProfileStore(tmp_path / "p.db") as store:
            prof = profile_model(small, us, store=store)
    done = [r.getMessage() for r in caplog.records if "profiled on Ray node" in r.getMessage()]
    assert len(done) == 1, done
    assert all(c["a"] == c["b"] for c in prof.costs.values())


def test_identical_units_on_two_routes_time_their_batches_each(cluster, tmp_path):
    """A batch curve times the whole call from here: the node holding this process's object
    store and the other one are reached differently, so one does not reuse the other's."""
    from partuner.batch import profile_batches

    us = _units(cluster.address, a=ON_A, b=ON_B, cpu=ORT)
    here = {u: us[u].call_route() for u in ("a", "b", "cpu")}
    assert here["a"] == "ray:here" and here["b"].startswith("ray:") and here["b"] != "ray:here"
    assert here["cpu"] == ""
    with ProfileStore(tmp_path / "b.db") as store:
        kw = {"store": store, "budget_s": 0.05, "min_repeats": 2}
        prof = profile_batches(_batch_model(), us, 2, **kw)
        assert prof.reused == 0 and prof.measured >= 3 * 2  # 1 and 2 items, each unit
        again = profile_batches(_batch_model(), us, 2, **kw)
        assert again.measured == 0 and again.reused == prof.measured


def test_the_transport_rate_is_the_slope_per_byte_and_zero_within_the_noise():
    from partuner.profile.fleet import _per_byte

    steep = {n: [100.0 + n * 0.002 + d for d in (-1.0, 0.0, 1.0)] for n in (0, 1 << 16, 1 << 20)}
    assert _per_byte(steep) == pytest.approx(0.002, rel=1e-6)
    flat = {n: [100.0 + d for d in (-5.0, 0.0, 5.0)] for n in (0, 1 << 16, 1 << 20)}
    assert _per_byte(flat) == 0.0
