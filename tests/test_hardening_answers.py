"""Answers a user can read: a NaN reference, tune's verdict and plan row, one lower bound,
batch's "the split loses", --explain's reasons, modeled labels, progress lines on stderr."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from click.testing import CliRunner
from onnx import TensorProto, helper

from conftest import TWO_CPUS
from partuner.cli import main
from partuner.graph import zoo
from partuner.runtime import check_outputs

PARTUNER = str(Path(sys.executable).with_name("partuner"))

NPU_CPU = """
units:
  npu: {backend: modeled, gflops: 300, gbps: 8, overhead_us: 30,
        ops: [Conv, Relu, MaxPool, Add, Concat]}
  cpu: {backend: onnxruntime, threads: 1}
links:
  default: {latency_us: 40, gbps: 2}
"""


def _invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _nan_model() -> onnx.ModelProto:
    """y = log(x) + relu(x) on [1, 4, 8]: NaN wherever the (N(0, 1)) input is negative."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])
    nodes = [
        helper.make_node("Log", ["x"], ["a"], name="log"),
        helper.make_node("Relu", ["x"], ["b"], name="relu"),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
    ]
    g = helper.make_graph(nodes, "nan", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "two.yaml").write_text(TWO_CPUS)
    (tmp_path / "npu.yaml").write_text(NPU_CPU)  # static puts what it can on the npu
    zoo.save("branchy", tmp_path / "branchy.onnx", image_size=32)
    onnx.save(_nan_model(), tmp_path / "nan.onnx")
    return tmp_path


MODELED_PAIR = """
units:
  npu: {backend: modeled, gflops: 100, gbps: 6, overhead_us: 40,
        ops: [Conv, Relu, MaxPool, Add, Concat]}
  cpu: {backend: modeled, gflops: 30, gbps: 10, overhead_us: 5}
links:
  default: {latency_us: 60, gbps: 1.5}
"""


def _tune(files: Path, model: str, units: str, *extra: object):
    return _invoke(
        "tune", files / model, "--units", files / units, "--db", files / "p.db",
        "-o", files / "out", "--repeat", 2, "--time-limit", 0.5, *extra,
    )  # fmt: skip


def _printed_bound(text: str) -> float:
    """The one ``lower bound X ms`` figure ``text`` prints. Compared with the file's figure to
    the printed precision: the file holds it to the nanosecond, so a bound such as 0.16249996 ms
    prints as 0.162 but is written as 0.1625 (which would print as 0.163)."""
    found = re.findall(r"lower bound ([0-9.]+) ms", text)
    assert len(found) == 1, text
    return float(found[0])


# -- 1. a reference that is not finite ---------------------------------------------------------


def test_nan_reference_compares_positions():
    ref = np.array([[np.nan, 1.0, np.inf], [2.0, -np.inf, 3.0]], dtype=np.float32)
    ok = check_outputs({"y": ref}, {"y": ref + np.float32(1e-7)})
    assert ok.passed and ok.outputs[0].nonfinite_ref == 3
    assert ok.rule.startswith("reference not finite (NaN/Inf values: y: 3)")
    assert ok.outputs[0].top1_agree is None  # no row without a NaN: argmax means nothing
    moved = ref.copy()
    moved[0, 0], moved[0, 1] = 1.0, np.nan  # NaN somewhere else
    assert not check_outputs({"y": ref}, {"y": moved}).passed
    flipped = ref.copy()
    flipped[0, 2] = -np.inf  # the other infinity
    assert not check_outputs({"y": ref}, {"y": flipped}).passed
    off = ref.copy()
    off[1, 2] = 4.0  # finite values still under the rule
    assert not check_outputs({"y": ref}, {"y": off}).passed
    # a finite reference and a NaN output fail with an infinite difference, no NaN figure
    fin = np.ones((2, 3), dtype=np.float32)
    bad = check_outputs({"y": fin}, {"y": np.where(fin > 0, np.nan, 0).astype(np.float32)})
    assert not bad.passed and bad.outputs[0].max_abs == float("inf")
    assert not bad.rule.startswith("reference not finite")


def test_nan_model_through_tune_and_check(files):
    r = _tune(files, "nan.onnx", "two.yaml", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["check"]["passed"] is True
    assert res["check"]["rule"].startswith("reference not finite")
    r = _invoke("check", files / "nan.onnx", "--plan", files / "out" / "plan.yaml")
    assert r.exit_code == 0, r.output
    assert "passed" in r.output and "reference not finite" in r.output
    assert "top-1 agreement 100%" not in r.output


# -- 2. answers a user can read ----------------------------------------------------------------


def test_tune_verdict_plan_row_and_one_lower_bound(files):
    r = _tune(files, "branchy.onnx", "two.yaml", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    doc = yaml.safe_load((files / "out" / "plan.yaml").read_text())
    written = doc["partuner"]
    assert written["lower_bound_ms"] == pytest.approx(res["lower_bound_ms"], rel=1e-3)
    parts = res["partitions"]
    row = res["baselines"][0]["what"]
    assert "unit(s)" not in row and "1 partitions" not in row
    used = dict.fromkeys(doc["backendNames"].split(":"))
    assert row.endswith(f": {parts} partition{'' if parts == 1 else 's'} on {'+'.join(used)})")
    verdict = res["verdict"]
    assert "plain onnxruntime on" in verdict and "threads" in verdict
    assert "median of 2" in verdict and any(
        w in verdict
        for w in (
            "faster than",
            "slower than",
            "as fast (within 1 %) as",
            "about as fast as",
            "not clearly faster or slower than",
        )
    )
    if parts == 1:
        assert verdict.startswith("no plan beat the whole model on cpu")
    text = _tune(files, "branchy.onnx", "two.yaml").output
    assert f" from the store at {files / 'p.db'}) in " in text  # where the timings are kept
    # the second run measures again (its verdict may differ under load): the text ends with one
    assert "plain onnxruntime on" in text.splitlines()[-1]
    again = yaml.safe_load((files / "out" / "plan.yaml").read_text())["partuner"]
    assert _printed_bound(text) == pytest.approx(again["lower_bound_ms"], abs=5.01e-4)


def test_tune_prints_the_lower_bound_it_writes(files, monkeypatch):
    """A scheduler that proves a bound above the problem's own (as exact does when it has the
    time): tune prints, returns and writes that one figure."""
    import partuner.pipeline as pipeline

    real = pipeline.make_plan

    def proving(problem, scheduler="auto", *, time_limit=None, progress=None):
        plan, plans = real(problem, scheduler, time_limit=time_limit)
        best = min(p.predicted_us for p in plans.values())
        plan.lower_bound_us = best * 0.99  # a stronger bound than lower_bound(problem)
        return plan, plans

    monkeypatch.setattr(pipeline, "make_plan", proving)
    r = _tune(files, "branchy.onnx", "two.yaml")
    assert r.exit_code == 0, r.output
    written = yaml.safe_load((files / "out" / "plan.yaml").read_text())["partuner"]
    assert _printed_bound(r.output) == pytest.approx(written["lower_bound_ms"], abs=5.01e-4)


def test_plan_prints_and_writes_one_lower_bound(files):
    """The bound printed is the best any scheduler proved; the file holds that one, not the
    chosen (heft) plan's own."""
    r = _invoke(
        "plan", files / "branchy.onnx", "--units", files / "two.yaml", "--db", files / "p.db",
        "--time-limit", 0.5, "--json", "-o", files / "p.yaml", "--compare", "--scheduler", "heft",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    written = yaml.safe_load((files / "p.yaml").read_text())["partuner"]
    assert written["lower_bound_ms"] == pytest.approx(res["lower_bound_ms"], rel=1e-3)


def test_explain_never_names_the_partition_itself(tmp_path):
    """One node on cpu0 (static: the first unit), twice as fast on cpuall, which shares cpu0's
    core: cpuall is 'busy' only with the partition itself, which is no reason."""
    from partuner.plan import Problem

    prob = Problem(
        nodes=["a"],
        units=["cpu0", "cpuall"],
        cost={"a": {"cpu0": 10.0, "cpuall": 5.0}},
        edges=[],
        resources={"cpu0": frozenset({"core0"}), "cpuall": frozenset({"core0", "core1"})},
    )
    (tmp_path / "prob.json").write_text(prob.to_json())
    r = _invoke(
        "plan", "--load-problem", tmp_path / "prob.json", "--scheduler", "static", "--explain",
        "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    (why,) = json.loads(r.output)["explain"]
    assert why["unit"] == "cpu0"
    assert "busy" not in why["reason"] and why["partition"] not in why["reason"]


def test_tune_with_a_modeled_unit_says_emulated_never_measured(files):
    r = _tune(files, "branchy.onnx", "npu.yaml", "--scheduler", "static", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["modeled"] is True and res["measured_ms"] is None
    assert "not measured" in res["verdict"] and "faster" not in res["verdict"]
    assert "measured (median" not in res["verdict"]
    text = _tune(files, "branchy.onnx", "npu.yaml", "--scheduler", "static").output
    assert "on modeled units (not measured)" in text.splitlines()[-1]


def test_run_labels_a_modeled_partitions_host_time_never_measured(files):
    """`partuner run` of a plan with partitions on a modeled unit: their time is the host's."""
    r = _tune(files, "branchy.onnx", "npu.yaml", "--scheduler", "static", "--json")
    assert r.exit_code == 0, r.output
    args = ("run", files / "branchy.onnx", "--units", files / "npu.yaml",
            "--plan", files / "out" / "plan.yaml", "--repeat", 2)  # fmt: skip
    res = json.loads(_invoke(*args, "--json").output)
    on_npu = [p for p in res["partition_ms"].values() if p["unit"] == "npu"]
    assert on_npu and all(p["measured"] is None and p["host"] > 0 for p in on_npu)
    assert all(p["timing"] == "emulated on the host" for p in on_npu)
    on_cpu = [p for p in res["partition_ms"].values() if p["unit"] == "cpu"]
    assert all(p["timing"] == "measured" and p["measured"] > 0 for p in on_cpu)
    text = _invoke(*args).output
    assert text.count("emulated on the host") == len(on_npu)


def _batch_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "b", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_batch_says_when_the_split_loses_to_one_unit(files, monkeypatch):
    """Each unit alone made 100x faster than measured: the split (measured) loses to it."""
    import partuner.batch.evaluate as ev

    real = ev._merge_alone

    def fast_alone(rounds):
        out = real(rounds)
        return {u: {**a, "median_ms": a["median_ms"] / 100} for u, a in out.items()}

    monkeypatch.setattr(ev, "_merge_alone", fast_alone)
    onnx.save(_batch_model(), files / "b.onnx")
    args = ("batch", files / "b.onnx", "--batch", 6, "--units", files / "two.yaml",
            "--db", files / "p.db", "--repeat", 3)  # fmt: skip
    res = json.loads(_invoke(*args, "--json").output)
    line = res["loses_to_single"]
    assert line and line.startswith("the split loses to one unit") and "slower than cpu" in line
    assert res["timing"] == "measured"
    text = _invoke(*args).output
    assert "the split loses to one unit" in text and "% slower than cpu" in text


def test_batch_labels_modeled_times_as_emulated(files):
    onnx.save(_batch_model(), files / "b.onnx")
    (files / "rnpu.yaml").write_text(
        "units:\n  cpu: {backend: onnxruntime, threads: 1}\n"
        "  npu: {backend: modeled, gflops: 300, gbps: 8, ops: [Relu]}\n"
    )
    args = ("batch", files / "b.onnx", "--batch", 6, "--units", files / "rnpu.yaml",
            "--db", files / "p.db", "--repeat", 3)  # fmt: skip
    res = json.loads(_invoke(*args, "--json").output)
    even = res["baselines"]["even"]  # half the items on the npu: its time is the host's
    assert even["modeled"] and even["timing"] == "emulated on the host"
    assert res["unit_alone"]["npu"]["timing"] == "modeled"
    assert "(emulated on the host)" in _invoke(*args).output


def _run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PARTUNER, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_progress_lines_on_a_piped_stderr(files):
    common = ("--units", files / "two.yaml", "--db", files / "p.db", "--time-limit", 0.3)
    r = _run("tune", files / "branchy.onnx", *common, "-o", files / "o", "--repeat", 2)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    for stage in ("profiling", "planning", "exporting", "running"):
        assert any(x.startswith(stage) and " ... " in x and x.endswith(" s") for x in lines)
    assert "..." not in r.stdout  # progress is not mixed into the answer
    # modeled units whose best plan misses every bound in 0.3 s (on units where a bound is met
    # at once, auto stops there, with no stage to show)
    (files / "m.yaml").write_text(MODELED_PAIR)
    common = ("--units", files / "m.yaml", "--db", files / "p.db", "--time-limit", 0.3)
    r = _run("plan", files / "branchy.onnx", *common)
    assert r.returncode == 0, r.stderr
    # a warning met while planning ends the line; the stage's line then comes whole at its end
    warned = "partuner: warning: "
    stages = [x.split(" ...")[0] for x in r.stderr.splitlines() if not x.startswith(warned)]
    seen = list(dict.fromkeys(stages))
    assert seen[:1] == ["planning"], r.stderr  # modeled units: nothing to profile
    # then auto's stages, each with the best plan and bound so far
    assert seen[1:] and all(x.startswith("planning: ") and "best so far" in x for x in seen[1:])
    assert r.stderr.splitlines()[-1].startswith("planning: ")
    for quiet in ("--quiet", "--json"):  # no progress; warnings (a 0.3 s cap is hit) still show
        r = _run("plan", files / "branchy.onnx", *common, quiet)
        assert r.returncode == 0, r.stderr
        assert all(x.startswith("partuner: warning: ") for x in r.stderr.splitlines()), r.stderr
        r = _run("tune", files / "branchy.onnx", *common, "-o", files / "o", "--repeat", 1, quiet)
        assert r.returncode == 0, r.stderr
        assert all(x.startswith("partuner: warning: ") for x in r.stderr.splitlines()), r.stderr


def test_ctrl_c_while_the_command_line_starts_is_one_line():
    """Found by a new-user trial: Ctrl-C in the first ~0.7 s (imports) printed a traceback."""
    import signal
    import time

    p = subprocess.Popen(
        [PARTUNER, "inspect", "zoo:branchy"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a background job
    )  # fmt: skip
    time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    text = err.decode()
    assert p.returncode == 130, text
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1].startswith("partuner: error: interrupted")


def test_the_best_single_unit_row_has_its_prediction_whichever_scheduler(files):
    """Found by a new-user trial: the best-single-unit row showed predicted "-" where the
    chosen scheduler's run had not made a single-unit plan of its own."""
    r = _tune(files, "branchy.onnx", "two.yaml", "--scheduler", "heft", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{") :])
    single = next(b for b in res["baselines"] if b["what"].startswith("best single unit"))
    assert single["predicted_ms"] is not None and single["predicted_ms"] > 0
    assert res["schedulers"]["single"]["predicted_ms"] == single["predicted_ms"]


def test_a_single_unit_plan_is_measured_once_for_both_rows(files):
    """Found by a new-user trial: the kept plan and the best single unit, one configuration,
    were measured apart (20.4 and 23.7 ms on a noisy machine), as if they differed."""
    r = _tune(files, "branchy.onnx", "two.yaml", "--scheduler", "single", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{") :])
    plan, single = res["baselines"][0], res["baselines"][1]
    assert res["partitions"] == 1 and single["what"].startswith("best single unit")
    assert plan["what"].endswith(f"on {single['what'].split('(')[1].rstrip(')')})")
    assert plan["measured_ms"] == single["measured_ms"] and plan["p90_ms"] == single["p90_ms"]
