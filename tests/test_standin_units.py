"""The shipped CPU + NPU example units files and OpenVINO's ``precision: auto``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
import yaml
from click.testing import CliRunner
from onnx import TensorProto, helper

from partuner.cli import main
from partuner.errors import PlanFileError, UnitError, UnitsFileError
from partuner.graph import load_model
from partuner.units import OpenvinoUnit, load_units, units_from_mapping
from partuner.units import openvino_unit as ovu
from partuner.units.untrusted import check_plan_units

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "units"
STANDIN = EXAMPLES / "cpu-npu-standin.yaml"
MODELED = EXAMPLES / "cpu-npu-modeled.yaml"


def _conv_head() -> onnx.ModelProto:
    """x[1,16,8,8] -> Conv -> Relu -> Flatten -> Gemm -> Softmax."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 16, 3, 3], [0.01] * (16 * 16 * 9))
    fc = helper.make_tensor("fc", TensorProto.FLOAT, [1024, 10], [0.001] * 10240)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc"], ["g"], name="gemm"),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, fc],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- the two example files ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [STANDIN, MODELED], ids=["standin", "modeled"])
def test_example_files_load_with_the_same_npu_op_list(path):
    units = load_units(path)
    assert list(units.units) == ["npu", "cpu"]  # the npu first: `static` tries it first
    cpu, npu = units["cpu"], units["npu"]
    assert cpu.backend == "onnxruntime" and cpu.options["threads"] == 1 and cpu.cores == (0,)
    assert npu.ops == load_units(STANDIN)["npu"].ops
    assert {"Conv", "Relu", "Add", "Concat"} <= npu.ops
    assert not {"Gemm", "Flatten", "Softmax", "MatMul"} & npu.ops


def test_standin_is_measured_and_modeled_is_predicted():
    standin, modeled = load_units(STANDIN), load_units(MODELED)
    assert not any(u.modeled for u in standin)
    npu = standin["npu"]
    assert npu.backend == "openvino" and npu.cores == (1,) and npu.spec()["precision"] == "auto"
    assert modeled["npu"].modeled and not modeled["cpu"].modeled
    o = modeled["npu"].options
    assert (o["gflops"], o["gbps"], o["overhead_us"]) == (200, 6, 40)
    link = modeled.default_link
    assert (link.latency_us, link.gbps) == (60, 1.5)


@pytest.mark.parametrize("path", [STANDIN, MODELED], ids=["standin", "modeled"])
def test_example_npu_refuses_the_classifier_head(path):
    graph = load_model(_conv_head())
    npu, cpu = load_units(path)["npu"], load_units(path)["cpu"]
    takes = {node.name: npu.supports(node, graph) for node in graph.nodes}
    assert takes == {
        "conv": True,
        "relu": True,
        "flatten": False,
        "gemm": False,
        "softmax": False,
    }
    assert all(cpu.supports(node, graph) for node in graph.nodes)


def test_modeled_file_adds_npus_by_copying_the_entry():
    doc = yaml.safe_load(MODELED.read_text())
    npu, cpu = doc["units"]["npu"], doc["units"]["cpu"]
    doc["units"] = {"npu": npu, **{f"npu{i}": dict(npu) for i in range(1, 4)}, "cpu": cpu}
    units = units_from_mapping(doc, source=str(MODELED))
    assert [u.name for u in units] == ["npu", "npu1", "npu2", "npu3", "cpu"]
    assert [u.name for u in units if u.modeled] == ["npu", "npu1", "npu2", "npu3"]
    assert len({u.fingerprint() for u in units if u.modeled}) == 1  # they share measurements


# -- precision: auto ----------------------------------------------------------------------------


class _FakeCore:
    """Stands for ``openvino.Core``: one CPU device with the given capabilities."""

    def __init__(self, caps: list[str]) -> None:
        self.caps = caps
        self.available_devices = ["CPU"]

    def get_property(self, device: str, name: str):
        assert device == "CPU"
        return {"OPTIMIZATION_CAPABILITIES": self.caps, "FULL_DEVICE_NAME": "Fake CPU"}[name]


@pytest.mark.parametrize(
    "caps, want", [(["FP32", "BF16", "INT8"], "bf16"), (["FP32", "INT8"], "f32")]
)
def test_auto_picks_bf16_only_where_the_device_has_it(monkeypatch, caps, want):
    core = _FakeCore(caps)
    monkeypatch.setattr(ovu, "_get_core", lambda: core)
    unit = OpenvinoUnit("npu", precision="auto")
    ok, reason = unit.availability()
    assert ok and reason.endswith(f"precision auto -> {want}")
    assert unit.precision == want and unit.describe()["precision"] == want
    assert unit.compile_config()["INFERENCE_PRECISION_HINT"] == want
    assert f"-t1-{want}-" in unit.fingerprint()
    explicit = OpenvinoUnit("ov", precision=want)
    assert unit.fingerprint() == explicit.fingerprint()  # the same measurements
    # what the user wrote survives: a plan file's units section rebuilds an auto unit
    assert unit.options["precision"] == "auto" and unit.spec()["precision"] == "auto"
    again = units_from_mapping({"units": {"npu": unit.spec()}})["npu"]
    assert again.options["precision"] == "auto" and again.precision == want


def test_auto_is_resolved_once_per_unit(monkeypatch):
    core = _FakeCore(["FP32", "BF16"])
    monkeypatch.setattr(ovu, "_get_core", lambda: core)
    unit = OpenvinoUnit("npu", precision="auto")
    fp = unit.fingerprint()
    core.caps = ["FP32"]  # the device changed its mind: the unit keeps what it measured at
    assert unit.precision == "bf16" and unit.fingerprint() == fp
    assert OpenvinoUnit("other", precision="auto").precision == "f32"


def test_auto_without_openvino_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # makes `import openvino` fail
    unit = OpenvinoUnit("npu", precision="auto")
    ok, reason = unit.availability()
    assert not ok and reason == "openvino is not installed: pip install partuner[openvino]"
    assert unit.describe()["available"] is False
    assert unit.spec()["precision"] == "auto"


def test_auto_is_refused_on_a_remote_unit():
    with pytest.raises(UnitError, match="cannot be auto on a remote unit.*precision: f32 or bf16"):
        OpenvinoUnit("npu", precision="auto", remote=True)


def test_auto_matches_this_devices_capabilities():
    ov = pytest.importorskip("openvino")
    caps = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    unit = load_units(STANDIN)["npu"]
    ok, reason = unit.availability()
    assert ok, reason
    want = "bf16" if "BF16" in caps else "f32"
    assert unit.precision == want and reason.endswith(f"precision auto -> {want}")
    assert unit.compile_config()["INFERENCE_PRECISION_HINT"] == want
    bf16 = OpenvinoUnit("ov", precision="bf16", threads=1)
    f32 = OpenvinoUnit("ov", precision="f32", threads=1)
    assert unit.fingerprint() == {"bf16": bf16, "f32": f32}[want].fingerprint()
    if want == "f32":
        assert unit.fingerprint() != bf16.fingerprint()


# -- plan files (untrusted) ---------------------------------------------------------------------


def test_plan_units_section_takes_auto_and_refuses_unknown_precisions():
    auto = {"npu": {"backend": "openvino", "threads": 1, "precision": "auto", "cores": [1]}}
    check_plan_units(auto, "plan.yaml")
    assert units_from_mapping({"units": auto})["npu"].options["precision"] == "auto"
    bad = {"npu": {**auto["npu"], "precision": "f8"}}
    check_plan_units(bad, "plan.yaml")  # a plain value: the unit itself refuses it
    with pytest.raises(UnitsFileError) as err:
        units_from_mapping({"units": bad}, source="plan.yaml (units section)")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == (
        "plan.yaml (units section): unit 'npu': option 'precision' must be one of "
        "['f32', 'bf16', 'f16', 'auto'], got 'f8'"
    )
    with pytest.raises(PlanFileError, match="not a plain value"):
        check_plan_units({"npu": {**auto["npu"], "precision": {"auto": 1}}}, "plan.yaml")


def _plan_file(tmp_path: Path, precision: str) -> tuple[Path, Path]:
    model = tmp_path / "m.onnx"
    onnx.save_model(_conv_head(), model)
    npu = {"backend": "openvino", "threads": 1, "precision": precision}
    doc = {
        "funcName": "m.onnx",
        "partuner": {
            "version": 1,
            "model": "m.onnx",
            "units": {"npu": npu},
            "partitions": [
                {
                    "name": "p0",
                    "unit": "npu",
                    "start_ms": 0.0,
                    "end_ms": 0.1,
                    "nodes": ["conv", "relu", "flatten", "gemm", "softmax"],
                }
            ],
        },
    }
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    return model, plan


def test_check_refuses_a_plan_with_an_unknown_precision_in_one_line(tmp_path):
    model, plan = _plan_file(tmp_path, "f8")
    r = CliRunner().invoke(main, ["check", str(model), "--plan", str(plan)])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert "unit 'npu': option 'precision' must be one of" in lines[0]
    assert "'auto'], got 'f8'" in lines[0]


def test_check_runs_a_plan_with_auto_precision(tmp_path):
    """The output check takes the resolved precision's tolerance, not an unknown 'auto'."""
    pytest.importorskip("openvino")
    model, plan = _plan_file(tmp_path, "auto")
    want = OpenvinoUnit("npu", precision="auto").precision
    r = CliRunner().invoke(main, ["check", str(model), "--plan", str(plan), "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    assert result["passed"] and result["precision"] == want
