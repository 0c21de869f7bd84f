"""Units: onnxruntime, openvino and modeled backends, fingerprints, the registry."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partuner.units.base as base
from partuner.errors import UnitError, UnitUnavailableError
from partuner.graph import load_model
from partuner.units import (
    ModeledUnit,
    OnnxruntimeUnit,
    OpenvinoUnit,
    Runner,
    Unit,
    backend_names,
    get_backend,
    make_unit,
)

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def conv_relu_model(cin=16, cout=32, group=1, size=8) -> tuple[onnx.ModelProto, np.ndarray]:
    w = RNG.standard_normal((cout, cin // group, 3, 3)).astype(np.float32)
    model = _model(
        [
            helper.make_node(
                "Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], group=group
            ),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, size, size])],
        [numpy_helper.from_array(w, "w")],
    )
    return model, w


def add_matmul_model() -> tuple[onnx.ModelProto, np.ndarray]:
    """Two outputs: s = a + b and m = s @ W."""
    w = RNG.standard_normal((8, 4)).astype(np.float32)
    model = _model(
        [
            helper.make_node("Add", ["a", "b"], ["s"], name="add"),
            helper.make_node("MatMul", ["s", "w"], ["m"], name="matmul"),
        ],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 8]),
        ],
        [
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 8]),
        ],
        [numpy_helper.from_array(w, "w")],
    )
    return model, w


def conv_relu_numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, wd = x.shape
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i : i + h, j : j + wd]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return np.maximum(out, 0).astype(np.float32)


# -- registry -----------------------------------------------------------------------------------


def test_builtin_backends_registered():
    assert {"onnxruntime", "openvino", "modeled"} <= set(backend_names())
    assert get_backend("onnxruntime") is OnnxruntimeUnit
    assert get_backend("modeled") is ModeledUnit
    assert OnnxruntimeUnit.backend == "onnxruntime"


def test_unknown_backend_names_known():
    with pytest.raises(UnitError, match=r"unknown backend 'tpu'; known: \[.*'onnxruntime'"):
        get_backend("tpu")


def test_register_backend_rejects_non_unit_and_duplicates():
    with pytest.raises(TypeError):
        base.register_backend("x")(object)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="already registered"):

        @base.register_backend("onnxruntime")
        class Other(OnnxruntimeUnit):
            pass


class _FakeUnit(Unit):
    def _configure(self, options):
        return {}

    def backend_version(self):
        return "0"

    def availability(self):
        return True, "fake"

    def prepare(self, model):
        raise NotImplementedError


def test_entry_points_are_loaded_lazily_and_tolerantly(monkeypatch, caplog):
    import importlib.metadata

    def broken():
        raise ImportError("no module named fancy_npu")

    eps = [
        SimpleNamespace(name="fake", value="pkg:FakeUnit", load=lambda: _FakeUnit),
        SimpleNamespace(name="broken", value="pkg:Broken", load=broken),
        SimpleNamespace(name="junk", value="pkg:junk", load=lambda: 42),
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps)
    monkeypatch.setattr(base, "_ep_loaded", False)
    monkeypatch.setattr(base, "_BACKENDS", dict(base._BACKENDS))
    monkeypatch.setattr(base, "_EP_ERRORS", {})
    names = backend_names()
    assert "fake" in names and "broken" not in names and "junk" not in names
    assert make_unit("f0", "fake").backend == "fake"
    with pytest.raises(UnitError, match="backend 'broken' failed to load: ImportError"):
        get_backend("broken")
    assert "broken" in caplog.text


# -- common unit behaviour --------------------------------------------------------------------


def test_unknown_option_lists_valid_ones():
    with pytest.raises(UnitError, match=r"unknown option 'thread' .* valid options: \[") as e:
        OnnxruntimeUnit("cpu0", thread=2)
    assert "'ray'" in str(e.value)  # a units file's option too (popped before the unit is made)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"threads": 0}, "'threads' must be >= 1"),
        ({"threads": "2"}, "'threads' must be an integer"),
        ({"threads": True}, "'threads' must be an integer"),
        ({"spinning": "yes"}, "'spinning' must be true, false or run"),
        ({"optimization": "max"}, "'optimization' must be one of"),
        ({"provider": "tpu"}, "unknown execution provider 'tpu'"),
        ({"cores": [0, 0]}, "lists a core twice"),
        ({"cores": [-1]}, "core ids >= 0"),
        ({"ops": []}, "'ops' must be a non-empty list"),
        ({"session_options": [1]}, "'session_options' must be a mapping"),
        ({"precision": "tf32"}, r"'precision: tf32' needs provider cuda \(CPUExecution"),
        ({"precision": "bf16", "provider": "cuda"}, "'precision' must be one of"),
    ],
)
def test_onnxruntime_option_errors(kwargs, pattern):
    with pytest.raises(UnitError, match=pattern):
        OnnxruntimeUnit("cpu0", **kwargs)


def test_provider_short_names():
    assert OnnxruntimeUnit("a", provider="cpu").options["provider"] == "CPUExecutionProvider"
    cuda = OnnxruntimeUnit("g", provider="cuda")
    assert cuda.options["provider"] == "CUDAExecutionProvider"
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        ok, reason = cuda.availability()
        assert not ok
        assert reason.startswith("CUDAExecutionProvider not available; onnxruntime offers [")
        with pytest.raises(UnitUnavailableError, match="'g' cannot run here"):
            cuda.prepare(conv_relu_model()[0])


@pytest.mark.filterwarnings("ignore:Specified provider")
def test_a_provider_onnxruntime_falls_back_from_is_an_error_not_a_cpu_run():
    """onnxruntime runs a session on the CPU, with a warning only, when the provider asked for
    cannot be set up (not offered, or its CUDA libraries do not load): a "gpu" unit would then
    profile and run on the CPU and every figure would be the CPU's."""
    import onnxruntime

    from partuner.units.onnxruntime_unit import OnnxruntimeRunner

    missing = "CUDAExecutionProvider"
    if missing in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime offers CUDA, so it would not fall back")
    with pytest.raises(UnitError, match=r"'g': onnxruntime could not set up CUDAExecution"):
        OnnxruntimeRunner(conv_relu_model()[0], unit_name="g", provider=missing)
    ok = OnnxruntimeRunner(conv_relu_model()[0], unit_name="c", provider="CPUExecutionProvider")
    assert ok.input_names


def test_a_cuda_unit_is_f32_unless_it_asks_for_tf32():
    """onnxruntime's CUDA provider computes convolutions in TF32 unless told not to; a unit's
    precision says which, the session is told, and the output check uses its rule."""
    from partuner.runtime.check import tolerance_for
    from partuner.units.onnxruntime_unit import _with_options

    f32 = OnnxruntimeUnit("g", provider="cuda")
    tf32 = OnnxruntimeUnit("t", provider="cuda", precision="TF32")
    assert (f32.precision, tf32.precision) == ("f32", "tf32")
    assert "precision" not in f32.spec() and tf32.spec()["precision"] == "tf32"
    assert (
        OnnxruntimeUnit("t2", **{k: v for k, v in tf32.spec().items() if k != "backend"}).precision
        == "tf32"
    )
    assert f32.fingerprint() != tf32.fingerprint()
    assert _with_options("CUDAExecutionProvider", "f32") == (
        "CUDAExecutionProvider",
        {"use_tf32": "0"},
    )
    assert _with_options("CUDAExecutionProvider", "tf32")[1] == {"use_tf32": "1"}
    assert _with_options("CPUExecutionProvider", "f32") == "CPUExecutionProvider"
    assert tolerance_for(["f32", "tf32"])[0] == "tf32"
    assert tolerance_for(["tf32", "bf16"])[0] == "bf16"
    from partuner.units.untrusted import check_plan_units

    check_plan_units({"t": tf32.spec()}, "plan.yaml")  # a plan made with it runs with it


def test_the_cpu_gpu_example_file_puts_an_f32_cuda_unit_first():
    from pathlib import Path

    import onnxruntime

    from partuner.units import load_units

    path = Path(__file__).resolve().parents[1] / "examples" / "units" / "cpu-gpu.yaml"
    units = load_units(path)
    assert units.names == ["gpu", "cpu"]  # static placement's priority: the gpu first
    gpu = units["gpu"]
    assert (gpu.options["provider"], gpu.precision) == ("CUDAExecutionProvider", "f32")
    ok, reason = gpu.availability()
    assert ok == ("CUDAExecutionProvider" in onnxruntime.get_available_providers())
    assert ok or reason.startswith("CUDAExecutionProvider not available")


def test_fingerprint_ignores_name_and_cores_but_not_speed_options():
    a = OnnxruntimeUnit("cpu0", threads=1, cores=[0])
    b = OnnxruntimeUnit("cpu1", threads=1, cores=[1])
    c = OnnxruntimeUnit("cpu2", threads=2)
    d = OnnxruntimeUnit("cpu3", threads=2, spinning=True)
    e = OnnxruntimeUnit("cpu4", threads=1, optimization="basic")
    assert a.fingerprint() == b.fingerprint()
    assert len({a.fingerprint(), c.fingerprint(), d.fingerprint(), e.fingerprint()}) == 4
    assert a.fingerprint().startswith("onnxruntime-")
    assert "-cpu-t1-f32-" in a.fingerprint()
    # spinning means nothing with one thread, so it does not split measurements
    assert OnnxruntimeUnit("x", spinning=True).fingerprint() == a.fingerprint()
    # ops do not change speed either
    assert OnnxruntimeUnit("x", ops=["Conv"]).fingerprint() == a.fingerprint()


def test_fingerprint_depends_on_host_cpu(monkeypatch):
    a = OnnxruntimeUnit("cpu0")
    before = a.fingerprint()
    monkeypatch.setattr(base, "host_cpu_model", lambda: "Some Other CPU")
    assert a.fingerprint() != before


def test_describe_is_json_ready():
    import json

    d = OnnxruntimeUnit("cpu0", cores=[0]).describe()
    json.dumps(d)
    assert d["name"] == "cpu0" and d["backend"] == "onnxruntime" and d["cores"] == [0]
    assert d["available"] is True and d["precision"] == "f32" and d["modeled"] is False
    assert d["fingerprint"] == OnnxruntimeUnit("other").fingerprint()


def test_real_unit_has_no_modeled_time():
    with pytest.raises(NotImplementedError, match="measured, not modeled"):
        OnnxruntimeUnit("cpu0").modeled_time_us([])


def test_supports_with_ops_list():
    graph = load_model(conv_relu_model()[0])
    conv, relu = graph.nodes
    unit = OnnxruntimeUnit("cpu0", ops=["Relu"])
    assert not unit.supports(conv) and unit.supports(relu)
    assert OnnxruntimeUnit("all").supports(conv)


# -- onnxruntime --------------------------------------------------------------------------------


def test_onnxruntime_conv_relu_matches_numpy():
    model, w = conv_relu_model()
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    with OnnxruntimeUnit("cpu0").prepare(model) as runner:
        assert isinstance(runner, Runner)
        assert runner.input_names == ("x",) and runner.output_names == ("y",)
        out = runner.run({"x": x})
    assert set(out) == {"y"}
    np.testing.assert_allclose(out["y"], conv_relu_numpy(x, w), rtol=1e-4, atol=1e-4)


def test_onnxruntime_returns_all_outputs_by_name():
    model, w = add_matmul_model()
    a, b = (RNG.standard_normal((2, 8)).astype(np.float32) for _ in range(2))
    for opts in (
        {},
        {"threads": 2, "spinning": True, "optimization": "disable"},
        {"session_options": {"session.set_denormal_as_zero": True}},
    ):
        out = OnnxruntimeUnit("cpu0", **opts).prepare(model).run({"a": a, "b": b})
        assert set(out) == {"m", "s"}
        np.testing.assert_allclose(out["s"], a + b, rtol=1e-6)
        np.testing.assert_allclose(out["m"], (a + b) @ w, rtol=1e-5, atol=1e-5)


def test_onnxruntime_errors_name_the_unit():
    model, _ = add_matmul_model()
    runner = OnnxruntimeUnit("cpu7").prepare(model)
    with pytest.raises(UnitError, match="unit 'cpu7' .*failed to run"):
        runner.run({"a": np.zeros((2, 8), np.float32)})
    runner.close()
    with pytest.raises(UnitError, match="closed"):
        runner.run({})
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    bad.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(UnitError, match="unit 'cpu7': onnxruntime cannot load the model"):
        OnnxruntimeUnit("cpu7").prepare(bad)


def test_two_onnxruntime_units_run_concurrently():
    model, w = conv_relu_model()
    units = [OnnxruntimeUnit(f"cpu{i}", threads=1, cores=[i]) for i in range(2)]
    runners = [u.prepare(model) for u in units]
    xs = [RNG.standard_normal((1, 16, 8, 8)).astype(np.float32) for _ in range(2)]
    results: dict[int, list[np.ndarray]] = {0: [], 1: []}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(i: int) -> None:
        try:
            start.wait()
            for _ in range(20):
                results[i].append(runners[i].run({"x": xs[i]})["y"])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(2):
        want = conv_relu_numpy(xs[i], w)
        assert len(results[i]) == 20
        for got in results[i]:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- modeled ------------------------------------------------------------------------------------


def test_modeled_requires_gflops_and_gbps():
    with pytest.raises(UnitError, match="'gflops' is required"):
        ModeledUnit("npu", gbps=8)
    with pytest.raises(UnitError, match="'gbps' is required"):
        ModeledUnit("npu", gflops=8)
    with pytest.raises(UnitError, match="'gflops' must be > 0"):
        ModeledUnit("npu", gflops=0, gbps=8)
    with pytest.raises(UnitError, match="'precision' must be one of"):
        ModeledUnit("npu", gflops=1, gbps=1, precision="f64")
    with pytest.raises(UnitError, match="'overhead_us' must be >= 0"):
        ModeledUnit("npu", gflops=1, gbps=1, overhead_us=-1)


def test_modeled_time_formula_by_hand():
    model, _ = conv_relu_model(cin=16, cout=32, size=8)
    graph = load_model(model)
    conv, relu = graph.nodes
    npu = ModeledUnit("npu", gflops=100, gbps=10, overhead_us=30)
    # Conv: 2 * (32*8*8) outputs * (16*3*3) MACs = 589824 FLOP -> 5.89824 µs at 100 GFLOP/s;
    # bytes: x 4096 + y 8192 + w 18432 = 30720 -> 3.072 µs at 10 GB/s. Compute-bound.
    assert conv.flops == 589_824
    assert conv.io_bytes + conv.weight_bytes == 30_720
    # Relu: 2048 FLOP -> 0.02048 µs; bytes 8192 + 8192 -> 1.6384 µs. Memory-bound.
    assert relu.flops == 2048 and relu.io_bytes == 16_384 and relu.weight_bytes == 0
    want = 30 + 5.89824 + 1.6384
    assert npu.modeled_time_us([conv, relu], graph) == pytest.approx(want)
    assert npu.modeled_time_us([conv, relu], include_overhead=False) == pytest.approx(want - 30)
    assert npu.modeled_time_us([]) == 30
    assert npu.overhead_us == 30


def test_modeled_supports_ops_and_channel_rule():
    npu = ModeledUnit("npu", gflops=1, gbps=1, ops=["Conv", "Relu"], conv_channel_multiple=16)
    ok = load_model(conv_relu_model(cin=16, cout=32)[0])
    assert npu.supports(ok.nodes[0], ok) and npu.supports(ok.nodes[1], ok)
    odd_in = load_model(conv_relu_model(cin=8, cout=32)[0])
    assert not npu.supports(odd_in.nodes[0], odd_in)
    odd_out = load_model(conv_relu_model(cin=16, cout=24)[0])
    assert not npu.supports(odd_out.nodes[0], odd_out)
    grouped = load_model(conv_relu_model(cin=32, cout=32, group=2)[0])
    assert not npu.supports(grouped.nodes[0], grouped)
    with pytest.raises(ValueError, match="pass graph="):
        npu.supports(ok.nodes[0])
    mm = load_model(add_matmul_model()[0])
    assert not any(npu.supports(n, mm) for n in mm.nodes)
    # without the rule, any Conv is fine and the graph is not needed
    assert ModeledUnit("n2", gflops=1, gbps=1).supports(odd_in.nodes[0])


def test_modeled_outputs_equal_onnxruntime():
    model, _ = conv_relu_model()
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    npu = ModeledUnit("npu", gflops=300, gbps=8, precision="int8")
    assert npu.modeled and npu.precision == "int8"
    assert npu.availability() == (True, "modeled: times are computed, not measured")
    got = npu.prepare(model).run({"x": x})["y"]
    want = OnnxruntimeUnit("cpu0").prepare(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def test_modeled_fingerprint_follows_figures_not_name():
    a = ModeledUnit("npu", gflops=300, gbps=8, ops=["Conv"])
    b = ModeledUnit("npu2", gflops=300, gbps=8, cores=[3])
    c = ModeledUnit("npu", gflops=300, gbps=9)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert a.fingerprint().startswith("modeled-roofline1-300gflops-8gbps-f32-")


# -- openvino -----------------------------------------------------------------------------------


def test_openvino_missing_package_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # makes `import openvino` fail
    unit = OpenvinoUnit("ov")
    ok, reason = unit.availability()
    assert not ok
    assert reason == "openvino is not installed: pip install partuner[openvino]"
    assert unit.backend_version() == "not-installed"
    with pytest.raises(UnitUnavailableError, match="pip install partuner\\[openvino\\]"):
        unit.prepare(conv_relu_model()[0])
    assert unit.describe()["available"] is False


def test_openvino_options():
    unit = OpenvinoUnit("ov", device="cpu", threads=2, precision="BF16")
    assert unit.options["device"] == "CPU" and unit.precision == "bf16"
    cfg = unit.compile_config()
    assert cfg["INFERENCE_PRECISION_HINT"] == "bf16" and cfg["PERFORMANCE_HINT"] == "LATENCY"
    assert cfg["INFERENCE_NUM_THREADS"] == 2 and cfg["ENABLE_CPU_PINNING"] is False
    gpu = OpenvinoUnit("g", device="GPU")
    assert "INFERENCE_NUM_THREADS" not in gpu.compile_config()
    with pytest.raises(UnitError, match="'precision' must be one of"):
        OpenvinoUnit("ov", precision="int8")


def test_openvino_absent_device_is_reported():
    pytest.importorskip("openvino")
    unit = OpenvinoUnit("npu", device="NPU7")
    ok, reason = unit.availability()
    assert not ok
    assert reason.startswith("device NPU7 not found; OpenVINO sees [")


@pytest.mark.parametrize("precision, rtol", [("f32", 1e-4), ("bf16", 5e-2)])
def test_openvino_matches_onnxruntime(precision, rtol):
    pytest.importorskip("openvino")
    unit = OpenvinoUnit("ov", precision=precision)
    if not unit.availability()[0]:
        pytest.skip(unit.availability()[1])
    model, _ = conv_relu_model()
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    want = OnnxruntimeUnit("cpu0").prepare(model).run({"x": x})["y"]
    with unit.prepare(model) as runner:
        assert runner.input_names == ("x",) and runner.output_names == ("y",)
        got = runner.run({"x": x})["y"]
        again = runner.run({"x": x})["y"]  # outputs are copies, not views of reused buffers
    np.testing.assert_array_equal(got, again)
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= rtol * scale
    assert unit.describe()["precision"] == precision


def test_openvino_multiple_outputs_by_name():
    pytest.importorskip("openvino")
    model, w = add_matmul_model()
    a, b = (RNG.standard_normal((2, 8)).astype(np.float32) for _ in range(2))
    runner = OpenvinoUnit("ov").prepare(model)
    assert runner.input_names == ("a", "b") and runner.output_names == ("m", "s")
    out = runner.run({"a": a, "b": b})
    np.testing.assert_allclose(out["s"], a + b, rtol=1e-6)
    np.testing.assert_allclose(out["m"], (a + b) @ w, rtol=1e-4, atol=1e-5)
    with pytest.raises(UnitError, match="missing input 'b'"):
        runner.run({"a": a})
    # read-only inputs (e.g. from np.broadcast_to) are accepted
    ro = np.broadcast_to(np.float32(1.0), (2, 8))
    np.testing.assert_allclose(runner.run({"a": ro, "b": ro})["s"], 2.0)


def test_openvino_fingerprint():
    a = OpenvinoUnit("ov0", precision="f32", cores=[0])
    b = OpenvinoUnit("ov1", precision="f32")
    c = OpenvinoUnit("ov2", precision="bf16")
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert a.fingerprint() != OnnxruntimeUnit("cpu0").fingerprint()
