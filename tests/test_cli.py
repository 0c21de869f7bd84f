"""The command line: the main job end to end, and one clear line + exit 2 for each bad input."""

from __future__ import annotations

import json

import onnx
import pytest
import yaml
from click.testing import CliRunner
from onnx import TensorProto, helper

from partuner.cli import main


def _invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _fails_cleanly(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("partuner: error: ")
    assert "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture()
def dynamic_model(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    p = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    return p


def test_tune_then_run_and_export(tmp_path, branchy_file, units_file, db):
    out = tmp_path / "out"
    r = _invoke(
        "tune",
        branchy_file,
        "--units",
        units_file,
        "--db",
        db,
        "-o",
        out,
        "--repeat",
        "3",
        "--json",
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["check"]["passed"] is True
    assert res["measured_ms"] > 0 and res["predicted_ms"] > 0
    assert {"single", "heft"} <= set(res["schedulers"])
    assert res["predicted_ms"] <= min(s["predicted_ms"] for s in res["schedulers"].values())
    assert (out / "plan.yaml").exists() and (out / "manifest.json").exists()
    assert len(list((out / "partitions").glob("*.onnx"))) == res["partitions"]

    r = _invoke("run", branchy_file, "--plan", out / "plan.yaml", "--repeat", "3", "--json")
    assert r.exit_code == 0, r.output
    run = json.loads(r.output)
    assert run["partitions"] == res["partitions"]
    assert run["check"]["passed"] and run["measured_ms"] > 0
    assert run["predicted_ms"] == pytest.approx(res["predicted_ms"], rel=1e-3)
    from partuner.cli.cmd_run import _off_prediction

    assert run["note"] == _off_prediction(run)  # what the text says, when far off (or None)

    r = _invoke("export", branchy_file, "--plan", out / "plan.yaml", "-o", tmp_path / "exp")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "exp" / "manifest.json").exists()

    r = _invoke("check", branchy_file, "--plan", out / "plan.yaml")
    assert r.exit_code == 0 and "passed" in r.output


def test_plan_compare_and_modeled_labels(tmp_path, branchy_file, npu_units_file, db):
    r = _invoke(
        "plan",
        branchy_file,
        "--units",
        npu_units_file,
        "--db",
        db,
        "--compare",
        "--json",
        "-o",
        tmp_path / "p.yaml",
        "--dump-problem",
        tmp_path / "prob.json",
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["lower_bound_ms"] <= res["predicted_ms"]
    assert set(res["schedulers"]) >= {"single", "heft"}
    prob = json.loads((tmp_path / "prob.json").read_text())
    assert prob["modeled"] == ["npu"]
    assert res["corun"] == prob.get("corun", {}) == {}  # a modeled unit is never timed beside
    # static puts each op on the first unit that runs it: with the modeled NPU listed first,
    # the plan uses it, and every figure of such a plan is labelled modeled
    npu_first = tmp_path / "npu_first.yaml"
    npu_first.write_text(
        "units:\n"
        "  npu: {backend: modeled, gflops: 300, gbps: 8, overhead_us: 30, ops: [Conv, Relu]}\n"
        "  cpu: {backend: onnxruntime, threads: 1}\n"
    )
    r = _invoke("plan", branchy_file, "--units", npu_first, "--db", db, "--scheduler", "static")
    assert r.exit_code == 0, r.output
    assert "(modeled)" in r.output
    r = _invoke(
        "plan", branchy_file, "--units", npu_first, "--db", db, "--scheduler", "static", "--json"
    )
    assert json.loads(r.output)["modeled"] is True


def test_inspect_units_zoo(tmp_path, branchy_file, units_file):
    r = _invoke("inspect", branchy_file, "--json")
    info = json.loads(r.output)
    assert info["inputs"]["input"]["shape"] == [1, 3, 32, 32]
    assert len(info["branch_groups"]) >= 3
    r = _invoke("units", "--units", units_file, "--json")
    assert [u["name"] for u in json.loads(r.output)["units"]] == ["cpu0", "cpu1"]
    r = _invoke("zoo", "--list")
    assert "googlenet" in r.output
    r = _invoke("zoo", "squeezenet", "-o", tmp_path / "new" / "s.onnx", "--image-size", "64")
    assert r.exit_code == 0 and (tmp_path / "new" / "s.onnx").exists()


def test_bad_models(tmp_path, branchy_file, dynamic_model):
    _fails_cleanly(_invoke("inspect", tmp_path / "nope.onnx"), "not found")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01garbage" * 50)
    _fails_cleanly(_invoke("inspect", junk), str(junk))
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(branchy_file.read_bytes()[: branchy_file.stat().st_size // 2])
    _fails_cleanly(_invoke("inspect", trunc), str(trunc))
    bad = onnx.load(branchy_file)
    bad.graph.node[0].input[0] = "undefined_value"
    p = tmp_path / "bad.onnx"
    onnx.save(bad, p)
    _fails_cleanly(_invoke("inspect", p), "checker")
    _fails_cleanly(_invoke("inspect", dynamic_model), "--input-shape x=")
    _fails_cleanly(_invoke("inspect", dynamic_model, "--input-shape", "y=2x4"), "'y'", "['x']")
    _fails_cleanly(_invoke("inspect", dynamic_model, "--input-shape", "x=2by4"), "NAME=DIMS")
    r = _invoke("inspect", dynamic_model, "--input-shape", "x=2x4", "--json")
    assert json.loads(r.output)["inputs"]["x"]["shape"] == [2, 4]
    _fails_cleanly(_invoke("tune", "zoo:nosuch"), "nosuch", "googlenet")


def test_bad_units_and_plans(tmp_path, branchy_file, units_file, db):
    u = tmp_path / "u.yaml"
    u.write_text("units:\n  a: {backend: tensorrtx}\n")
    _fails_cleanly(_invoke("units", "--units", u), "tensorrtx", "onnxruntime")
    u.write_text("units:\n  a: {backend: onnxruntime, threadz: 2}\n")
    _fails_cleanly(_invoke("units", "--units", u), "threadz")
    u.write_text("units:\n  a: {backend: onnxruntime, provider: cuda}\n")
    import onnxruntime

    r = _invoke("profile", branchy_file, "--units", u, "--db", db)
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        assert r.exit_code == 0, r.output  # a machine with CUDA profiles the unit
    else:
        _fails_cleanly(r, "'a'", "not available")
    _fails_cleanly(
        _invoke("plan", branchy_file, "--units", units_file, "--db", db, "--scheduler", "hef"),
        "hef",
        "heft",
    )
    plan = tmp_path / "plan.yaml"
    r = _invoke("plan", branchy_file, "--units", units_file, "--db", db, "-o", plan)
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(plan.read_text())
    doc["partuner"]["partitions"][0]["nodes"][0] = "Xonv_9"
    (tmp_path / "bad_node.yaml").write_text(yaml.safe_dump(doc))
    _fails_cleanly(_invoke("run", branchy_file, "--plan", tmp_path / "bad_node.yaml"), "Xonv_9")
    doc = yaml.safe_load(plan.read_text())
    doc["partuner"]["partitions"][0]["unit"] = "tpu9"
    (tmp_path / "bad_unit.yaml").write_text(yaml.safe_dump(doc))
    _fails_cleanly(
        _invoke("run", branchy_file, "--plan", tmp_path / "bad_unit.yaml", "--units", units_file),
        "tpu9",
        "cpu0",
    )
    _fails_cleanly(_invoke("run", branchy_file, "--plan", tmp_path / "none.yaml"), "not found")
    other = tmp_path / "other.onnx"
    _invoke("zoo", "branchy", "-o", other, "--image-size", "48")
    _fails_cleanly(_invoke("run", other, "--plan", plan), "another model")
    # export checks the model too, with or without a units file, and writes nothing
    _fails_cleanly(_invoke("export", other, "--plan", plan, "-o", tmp_path / "x"), "another model")
    assert not (tmp_path / "x").exists()
    # a unit the units file does not define: --fallback runs its partitions elsewhere
    r = _invoke(
        "run", branchy_file, "--plan", tmp_path / "bad_unit.yaml", "--units", units_file,
        "--fallback", "cpu0", "--repeat", "1", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["check"]["passed"] is True
    first = doc["partuner"]["partitions"][0]["name"]
    assert res["fallback"][first]["planned"] == "tpu9"
    assert res["fallback"][first]["ran_on"] == "cpu0"


def test_plan_with_fused_groups(branchy_file, units_file, db):
    r = _invoke(
        "plan",
        branchy_file,
        "--units",
        units_file,
        "--db",
        db,
        "--fuse",
        "Conv-Relu",
        "--time-limit",
        "2",
        "--json",
        "--dump-problem",
        db.parent / "prob.json",
    )
    assert r.exit_code == 0, r.output
    prob = json.loads((db.parent / "prob.json").read_text())
    assert prob["groups"], "Conv-Relu chains of branchy become fused groups"
    for g in prob["groups"]:
        assert len(g["nodes"]) == 2 and set(g["cost"]) <= {"cpu0", "cpu1"}
    _fails_cleanly(
        _invoke("plan", branchy_file, "--units", units_file, "--db", db, "--fuse", "Conv--Relu"),
        "Conv--Relu",
    )


@pytest.mark.parametrize(
    ("split_ms", "kept", "note"),
    [  # slower; faster within the margin; clearly faster
        (10.0, 1, "slower than the whole model"),
        (0.995, 1, "no faster than the whole model"),
        (0.95, 2, None),
    ],
)
def test_tune_keeps_the_single_unit_unless_the_split_measures_faster(
    tmp_path, branchy_file, units_file, db, monkeypatch, split_ms, kept, note
):
    """When the planned partitions do not run clearly faster than the whole model on one unit
    (by MEASURED_MARGIN), tune says so and writes the single-unit plan (the measurement
    overrules the prediction)."""
    import partuner.pipeline as pipeline
    from partuner.plan import Partition, Plan

    real_make_plan = pipeline.make_plan

    def split_plan(problem, scheduler="auto", *, time_limit=None, progress=None):
        best, plans = real_make_plan(problem, "single")
        nodes = best.partitions[0].nodes
        half = len(nodes) // 2
        parts = [Partition("p0", "cpu0", nodes[:half]), Partition("p1", "cpu1", nodes[half:])]
        two = Plan(parts, ["cpu0", "cpu1"], "forced", "heuristic", best.predicted_us / 2)
        return two, {**plans, "forced": two}

    real_measure = pipeline.measure_session

    def measure(session, feeds, repeat, warmup=3):
        _, out = real_measure(session, feeds, repeat, warmup)
        ms = split_ms if len(session.partitions) > 1 else 1.0  # the single unit: 1 ms
        return pipeline.RunStats(ms, ms, ms, repeat), out

    monkeypatch.setattr(pipeline, "make_plan", split_plan)
    monkeypatch.setattr(pipeline, "measure_session", measure)
    out = tmp_path / "out"
    r = _invoke(
        "tune",
        branchy_file,
        "--units",
        units_file,
        "--db",
        db,
        "-o",
        out,
        "--repeat",
        "3",
        "--json",
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["partitions"] == kept
    if note is None:
        assert not res["note"]
    else:
        assert note in res["note"]
    assert res["check"]["passed"]
    assert len(list((out / "partitions").glob("*.onnx"))) == kept


def test_plan_takes_skip_unavailable_as_its_error_advises(tmp_path, branchy_file, db):
    """Found by a new-user trial: `plan` said "or pass --skip-unavailable" and had no such
    option."""
    units = tmp_path / "u.yaml"
    units.write_text(
        "units:\n  cpu: {backend: onnxruntime}\n  gpu: {backend: onnxruntime, provider: cuda}\n"
    )
    args = ("plan", str(branchy_file), "--units", str(units), "--db", str(db), "--json")
    r = _invoke(*args)
    if r.exit_code == 0:
        pytest.skip("this machine has CUDA")
    assert r.exit_code == 2 and "--skip-unavailable" in r.output
    r = _invoke(*args, "--skip-unavailable", "--time-limit", "1")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output[r.output.index("{") :])
    assert {p["unit"] for p in got["partitions"]} == {"cpu"}


def test_units_says_which_default_link_a_pair_uses(tmp_path):
    """Found by a new-user trial: a modeled unit's link was said to be measured at profile
    time "for units sharing host memory", and the modeled note was cut short."""
    p = tmp_path / "u.yaml"
    p.write_text(
        "units:\n  npu: {backend: modeled, gflops: 100, gbps: 8}\n  cpu: {backend: onnxruntime}\n"
        "  cpu2: {backend: onnxruntime}\nlinks:\n  default: {latency_us: 60, gbps: 1.5}\n"
    )
    r = _invoke("units", "--units", p, "--db", tmp_path / "none.db")  # no links measured
    assert r.exit_code == 0, r.output
    assert "modeled: times are computed, not measured" in r.output
    assert "link npu-cpu: 60.0 us + bytes / 1.5 GB/s (the default link, used as is)" in r.output
    assert "(the default link until profiling measures the hand-off" in r.output


def test_units_shows_the_links_profiling_measured(branchy_file, units_file, tmp_path):
    """Found by a new-user trial: after profiling, `units --db` still showed the default link
    between two local units, not the one profiling measured and stored (that plans use)."""
    db = tmp_path / "p.db"
    r = _invoke("units", "--units", units_file, "--db", db, "--json")
    assert r.exit_code == 0 and not db.exists(), r.output  # nothing created by looking
    before = json.loads(r.output)["links"][0]
    assert before["latency_us"] == 40.0 and not before["measured"]
    r = _invoke("profile", branchy_file, "--units", units_file, "--db", db, "--json")
    assert r.exit_code == 0, r.output
    measured = next(
        x for x in json.loads(r.output)["links"] if {x["a"], x["b"]} == {"cpu0", "cpu1"}
    )
    r = _invoke("units", "--units", units_file, "--db", db, "--json")
    after = json.loads(r.output)["links"][0]
    assert after["measured"] and after["latency_us"] == pytest.approx(measured["latency_us"])
    r = _invoke("units", "--units", units_file, "--db", db)
    assert "(measured by an earlier profiling run, as stored)" in r.output
    (tmp_path / "bad.db").write_bytes(b"not a database")  # unreadable: defaults, as before
    r = _invoke("units", "--units", units_file, "--db", tmp_path / "bad.db", "--json")
    assert r.exit_code == 0, r.output
    assert not json.loads(r.output[r.output.index("{") :])["links"][0]["measured"]
    assert (tmp_path / "bad.db").read_bytes() == b"not a database"


def test_plan_headline_says_how_a_heuristic_plan_is_known_optimal(branchy_file, units_file, db):
    """Found by a new-user trial: `plan --compare` headed "plan by branch (optimal)" above a
    table listing branch as heuristic; the proof is the lower bound the plan meets."""
    r = _invoke("plan", branchy_file, "--units", units_file, "--db", db, "--compare",
                "--time-limit", "2", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    status = json.loads(
        _invoke(
            "plan", branchy_file, "--units", units_file, "--db", db, "--json", "--time-limit", "2"
        ).output  # fmt: skip
    )["status"]
    if status == "optimal":
        assert "optimal: it meets the lower bound)" in head, head
    else:
        assert f"{status})" in head, head
    # auto chose the plan; the scheduler that found it is named beside it (a user asking for
    # auto read "plan by nestc" and wondered why)
    assert head.startswith("plan by auto ("), head


def test_python_dash_m_runs_the_command(tmp_path):
    import subprocess
    import sys

    from partuner import __version__

    got = subprocess.run(
        [sys.executable, "-m", "partuner", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stderr
    assert __version__ in got.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "partuner", "inspect", str(tmp_path / "none.onnx")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("plan_ms", "ort_ms", "says"),
    [  # (median, p10, p90) of the kept plan and of plain onnxruntime
        ((10.0, 9.0, 11.0), (10.05, 9.0, 11.0), "as fast (within 1 %) as"),
        ((20.4, 19.0, 24.0), (22.0, 20.0, 26.0), "about as fast as"),  # overlapping: noise
        ((20.4, 19.0, 24.0), (23.7, 20.0, 26.0), "not clearly faster or slower than"),  # 16 %
        ((20.4, 19.0, 21.0), (23.7, 22.0, 26.0), "1.16x faster than"),
        ((12.0, 11.5, 12.5), (10.0, 9.5, 10.5), "1.20x slower than"),
        # a new-user trial on a busy machine: 42 against 27.5 ms was called "about as fast"
        ((42.003, 38.0, 47.0), (27.485, 25.0, 77.0), "not clearly faster or slower than"),
    ],
)
def test_tune_verdict_calls_no_difference_within_the_runs_spread(plan_ms, ort_ms, says):
    from types import SimpleNamespace

    from partuner.cli.cmd_tune import _verdict
    from partuner.pipeline import RunStats

    r = SimpleNamespace(
        plan=SimpleNamespace(partitions=[1, 2]),
        note="",
        measured=RunStats(*plan_ms, runs=30),
        ort_all_cores=RunStats(*ort_ms, runs=30),
    )
    verdict = _verdict(r, 30)
    assert says in verdict, verdict
    if says in ("about as fast as", "not clearly faster or slower than"):  # no ratio claimed
        assert "x faster" not in verdict and "x slower" not in verdict
        assert f"{plan_ms[0]:.3f} against {ort_ms[0]:.3f} ms" in verdict


def test_run_says_what_to_do_when_measured_far_from_predicted():
    from partuner.cli.cmd_run import OFF_PREDICTION, _off_prediction

    def line(measured, predicted=10.0, modeled=False):
        r = {"measured_ms": measured, "predicted_ms": predicted, "modeled": modeled}
        return _off_prediction(r)

    near = 10.0 * (1 + OFF_PREDICTION) - 0.01
    assert line(near) is None and line(10.0 * (1 - OFF_PREDICTION) + 0.01) is None
    above = line(12.5)
    assert above.startswith("measured 25 % above the prediction") and "--calibrate" in above
    assert line(7.0).startswith("measured 30 % below the prediction")
    # nothing to compare: a NEST-C plan without times, modeled units
    assert line(12.5, predicted=None) is None and line(12.5, modeled=True) is None


def test_units_shows_each_units_cores_and_op_list(tmp_path):
    f = tmp_path / "u.yaml"
    f.write_text(
        "units:\n"
        "  cpu: {backend: onnxruntime, threads: 1, cores: [0]}\n"
        "  npu: {backend: modeled, gflops: 100, gbps: 8, ops: [Relu, Conv, MaxPool, Concat, Add]}\n"
    )
    rows = {
        u["name"]: u for u in json.loads(_invoke("units", "--units", f, "--json").output)["units"]
    }
    assert rows["cpu"]["cores"] == [0] and rows["cpu"]["ops"] is None
    assert rows["npu"]["cores"] is None
    assert rows["npu"]["ops"] == ["Add", "Concat", "Conv", "MaxPool", "Relu"]
    text = _invoke("units", "--units", f).output
    assert "every op" in text and "5 ops: Add, Concat, Conv, ..." in text
    npu_row = next(x for x in text.splitlines() if x.lstrip().startswith("npu"))
    assert npu_row.split("│")[3].strip() == "-"  # cores: a modeled unit has none here
