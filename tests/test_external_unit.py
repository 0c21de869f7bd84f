"""Bring-your-own-compiler units: a fake vendor compiler + runtime, end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from click.testing import CliRunner

import fake_vendor
from partuner.cli import main
from partuner.errors import UnitError
from partuner.export import PartitionSpec, PlanFile, cut, write_plan
from partuner.profile import random_feeds
from partuner.runtime import Session
from partuner.units import backend_names, load_units, make_unit

VENDOR = Path(fake_vendor.__file__).resolve()
COMPILE = f"{{python}} '{VENDOR}' {{onnx}} {{artifact}}"
CPU_OPS = ["Relu", "Concat", "MaxPool", "Add", "AveragePool", "Flatten", "Gemm"]


def _units_yaml(path: Path, compile_cmd: str = COMPILE, **npu: object) -> Path:
    doc = {
        "units": {
            # the CPU cannot run Conv, so every plan puts work on the vendor's unit
            "cpu": {"backend": "onnxruntime", "threads": 1, "ops": CPU_OPS + ["GlobalAveragePool"]},
            "npu": {
                "backend": "external",
                "compile": compile_cmd,
                "runner": "fake_vendor:load",
                "ops": ["Conv", "Relu"],
                **npu,
            },
        }
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _full(graph, feeds):
    s = ort.InferenceSession(graph.model.SerializeToString())
    return dict(zip(graph.outputs, s.run(None, feeds), strict=True))


def _whole(graph, unit="npu"):
    return cut(graph, [PartitionSpec("p0", unit, tuple(n.name for n in graph.compute_nodes))])[0]


def test_registered_and_options_validated():
    assert "external" in backend_names()
    u = make_unit("npu", "external", compile=COMPILE, runner="fake_vendor:load", precision="f16")
    assert u.precision == "f16" and not u.host_memory
    assert make_unit("npu", **u.spec()).fingerprint() == u.fingerprint()
    with pytest.raises(UnitError, match="'runner' must be 'module:function'"):
        make_unit("npu", "external", compile=COMPILE)
    with pytest.raises(UnitError, match=r"must be a command with \{onnx\} and \{artifact\}"):
        make_unit("npu", "external", compile="vendorc {onnx}", runner="m:f")
    with pytest.raises(UnitError, match="unknown option 'compiler'"):
        make_unit("npu", "external", compiler=COMPILE, runner="m:f")
    ok, why = make_unit("npu", "external", runner="no_such_vendor_rt:load").availability()
    assert not ok and "no_such_vendor_rt" in why
    ok, why = make_unit(
        "npu", "external", compile="vendorc-missing {onnx} {artifact}", runner="fake_vendor:load"
    ).availability()
    assert not ok and "'vendorc-missing' not found" in why


@pytest.mark.parametrize("runner", ["fake_vendor:load", "fake_vendor:load_callable"])
def test_prepare_compiles_and_runs(branchy, runner):
    unit = make_unit("npu", "external", compile=COMPILE, runner=runner)
    part = _whole(branchy)
    feeds = random_feeds(branchy, list(branchy.inputs), seed=2)
    r = unit.prepare(part.model)
    workdir = r._workdir
    assert (workdir / "artifact").read_bytes().startswith(b"FAKEVENDOR\n")
    out = r.run(feeds)
    np.testing.assert_allclose(out["output"], _full(branchy, feeds)["output"], rtol=1e-5)
    r.close()
    assert not workdir.exists()
    if runner.endswith(":load"):
        assert fake_vendor.LOADED[-1] == str(workdir / "artifact")


def test_without_compile_the_onnx_is_the_artifact(branchy):
    unit = make_unit("npu", "external", runner="fake_vendor:load")
    with pytest.raises(UnitError, match="failed to load model.onnx: ValueError: .*not built"):
        unit.prepare(_whole(branchy).model)


def test_failing_and_slow_compilers_raise_clear_errors(branchy):
    model = _whole(branchy).model
    bad = make_unit("npu", "external", compile=COMPILE + " --fail", runner="fake_vendor:load")
    with pytest.raises(UnitError) as exc:
        bad.prepare(model)
    msg = str(exc.value)
    assert "compile command failed (exit 3)" in msg
    assert "op 'Gemm' is not supported on this NPU" in msg and "\n" not in msg
    slow = make_unit(
        "npu",
        "external",
        compile=COMPILE + " --sleep 20",
        runner="fake_vendor:load",
        compile_timeout_s=0.5,
    )
    with pytest.raises(UnitError, match=r"timed out after 0.5 s \(compile_timeout_s\)"):
        slow.prepare(model)


def test_session_with_an_external_unit_equals_the_full_model(branchy, tmp_path):
    units = load_units(_units_yaml(tmp_path / "u.yaml"))
    specs, cur = [], None
    for n in branchy.compute_nodes:  # consecutive runs of Conv on the npu, the rest on the cpu
        unit = "npu" if n.op_type == "Conv" else "cpu"
        if cur is None or cur[0] != unit:
            cur = (unit, [])
            specs.append(cur)
        cur[1].append(n.name)
    parts = cut(branchy, [PartitionSpec(f"p{i}", u, tuple(ns)) for i, (u, ns) in enumerate(specs)])
    feeds = random_feeds(branchy, list(branchy.inputs), seed=4)
    with Session(branchy, parts, units) as sess:
        (out,) = sess.run(None, feeds)
        assert {t.unit for t in sess.last_trace} == {"cpu", "npu"}
        assert sess.last_transfers and all(t.src_unit != t.dst_unit for t in sess.last_transfers)
    np.testing.assert_allclose(out, _full(branchy, feeds)["output"], rtol=1e-5, atol=1e-6)


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_plan_export_run_end_to_end(tmp_path, branchy_file, db):
    units = _units_yaml(tmp_path / "u.yaml")
    plan = tmp_path / "plan.yaml"
    r = _cli("plan", branchy_file, "--units", units, "--db", db, "--scheduler", "heft", "-o", plan)
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(plan.read_text())
    assert {p["unit"] for p in doc["partuner"]["partitions"]} == {"cpu", "npu"}
    r = _cli("export", branchy_file, "--plan", plan, "--units", units, "-o", tmp_path / "exp")
    assert r.exit_code == 0, r.output
    r = _cli("run", branchy_file, "--plan", plan, "--units", units, "--repeat", "2", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["check"]["passed"] and res["check"]["outputs"][0]["max_abs"] < 1e-5
    assert "npu" in res["units"] and not res["fallback"]


def test_failing_compiler_in_run_and_fallback(tmp_path, branchy, branchy_file):
    every = sorted({n.op_type for n in branchy.compute_nodes})  # the whole plan on the npu
    units = _units_yaml(tmp_path / "u.yaml", COMPILE + " --fail", ops=every)
    names = [n.name for n in branchy.compute_nodes]
    plan = tmp_path / "plan.yaml"
    # The cpu's ops exclude Conv (for planning); a fallback unit runs what it is given.
    specs = [PartitionSpec("p0", "npu", tuple(names[:3])), PartitionSpec("p1", "npu", names[3:])]
    write_plan(PlanFile(specs, model="branchy.onnx"), plan)
    r = _cli("run", branchy_file, "--plan", plan, "--units", units, "--repeat", "1")
    assert r.exit_code == 2
    line = r.output.strip()
    assert line.startswith("partuner: error: ") and "\n" not in line
    assert "compile command failed (exit 3)" in line and "not supported on this NPU" in line
    r = _cli("run", branchy_file, "--plan", plan, "--units", units, "--fallback", "cpu", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert set(res["fallback"]) == {"p0", "p1"} and res["units"] == ["cpu"]
    assert res["fallback"]["p0"]["planned"] == "npu" and "exit 3" in res["fallback"]["p0"]["reason"]
    r = _cli("check", branchy_file, "--plan", plan, "--units", units, "--fallback", "cpu")
    assert r.exit_code == 0 and "ran on 'cpu' instead" in r.output and "passed" in r.output
    r = _cli("run", branchy_file, "--plan", plan, "--units", units, "--fallback", "gpu9")
    assert r.exit_code == 2 and "gpu9" in r.output and "cpu" in r.output


def test_unavailable_unit_falls_back(tmp_path, branchy, branchy_file):
    units = tmp_path / "u.yaml"
    units.write_text(
        yaml.safe_dump(
            {
                "units": {
                    "cpu": {"backend": "onnxruntime", "threads": 1},
                    "npu": {"backend": "external", "runner": "no_such_vendor_rt:load"},
                }
            }
        )
    )
    names = [n.name for n in branchy.compute_nodes]
    plan = tmp_path / "plan.yaml"
    specs = [PartitionSpec("p0", "cpu", tuple(names[:5])), PartitionSpec("p1", "npu", names[5:])]
    write_plan(PlanFile(specs, model="branchy.onnx"), plan)
    r = _cli("run", branchy_file, "--plan", plan, "--units", units)
    assert r.exit_code == 2 and "not available here" in r.output and "--fallback" in r.output
    r = _cli(
        "run", branchy_file, "--plan", plan, "--units", units, "--fallback", "cpu", "--repeat", 1
    )
    assert r.exit_code == 0, r.output
    assert "partition p1: unit 'npu' cannot run it here; ran on 'cpu' instead" in r.output
    assert "npu->cpu" in r.output
    assert sys.modules.get("no_such_vendor_rt") is None
