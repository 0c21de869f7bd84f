"""The ``openvino`` backend (optional: ``pip install partuner[openvino]``).

OpenVINO is imported only when a unit is checked or prepared; without it the unit reports
itself unavailable with the install command.

Options
-------
device : ``CPU`` (default), ``GPU``, ``NPU`` or an indexed name such as ``GPU.1``.
threads : ``INFERENCE_NUM_THREADS`` (CPU only), integer >= 1, default 1.
precision : ``f32`` (default), ``bf16``, ``f16`` or ``auto``, always passed as
    ``INFERENCE_PRECISION_HINT``: on CPUs with AMX/AVX512-BF16 OpenVINO otherwise picks bf16
    silently. ``auto`` is ``bf16`` where the device's ``OPTIMIZATION_CAPABILITIES`` include
    ``BF16``, else ``f32``; it is resolved on first use (checking, preparing, fingerprinting)
    and kept, and :attr:`OpenvinoUnit.precision`, the compile hint and the fingerprint are the
    resolved one, while ``options["precision"]`` and ``spec()`` keep ``auto``.
pinning : ``ENABLE_CPU_PINNING`` (CPU only), default ``false``. OpenVINO pins by default, and
    two 1-thread units pinned that way land on the same core (the speedup of two units at once,
    pinned and not, is measured by ``benchmarks/unit_settings_bench.py``).
properties : extra compile properties, e.g. ``{NUM_STREAMS: 1}``.

``PERFORMANCE_HINT`` is always ``LATENCY``. The model is read from memory
(``Core.read_model(onnx_bytes, b"")``). Runs set each input as a shared-memory tensor and copy
outputs, which on a 1-op graph was cheaper per run than ``infer(dict, share_inputs=True)`` and
than plain ``infer(dict)``.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from partuner.errors import UnitError, UnitUnavailableError
from partuner.units.base import (
    MAX_THREADS,
    Runner,
    Unit,
    opt_bool,
    opt_choice,
    opt_int,
    opt_str,
    opt_str_map,
    register_backend,
)

if TYPE_CHECKING:
    import onnx

__all__ = ["OpenvinoUnit", "OpenvinoRunner", "PRECISIONS"]

log = logging.getLogger(__name__)

INSTALL_HINT = "openvino is not installed: pip install partuner[openvino]"
PRECISIONS = ("f32", "bf16", "f16")
#: the ``precision`` that picks bf16 or f32 from the device's capabilities
AUTO = "auto"
_CAPABILITY = {"bf16": "BF16", "f16": "FP16", "f32": "FP32"}

_core_lock = threading.Lock()
_core: Any = None


def _import_openvino() -> Any:
    """The openvino module, imported without ``openvino_telemetry`` (importing openvino sends
    Google Analytics an event and writes ~/intel unless the user opted out; its converter falls
    back to a stub when that package is absent); raises UnitUnavailableError saying how to
    install it."""
    blocked = "openvino_telemetry" not in sys.modules
    if blocked:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
    try:
        import openvino
    except ImportError:
        raise UnitUnavailableError(INSTALL_HINT) from None
    except Exception as exc:  # a broken install (missing shared library, ...)
        raise UnitUnavailableError(
            f"openvino cannot be imported ({type(exc).__name__}: {exc}); reinstall it"
        ) from None
    finally:
        if blocked and sys.modules.get("openvino_telemetry", 0) is None:
            del sys.modules["openvino_telemetry"]
    return openvino


def _get_core() -> Any:
    """One ``openvino.Core`` per process, created on first use."""
    global _core
    ov = _import_openvino()
    with _core_lock:
        if _core is None:
            _core = ov.Core()
        return _core


def _has_device(devices: list[str], device: str) -> bool:
    """Whether OpenVINO's ``devices`` hold ``device`` (``GPU`` matches ``GPU.0``)."""
    return device in devices or any(d.split(".")[0] == device for d in devices)


def _capabilities(core: Any, device: str) -> list[str]:
    """The device's ``OPTIMIZATION_CAPABILITIES`` (empty where the plugin does not say)."""
    try:
        return [str(c) for c in core.get_property(device, "OPTIMIZATION_CAPABILITIES")]
    except Exception:
        return []


#: a line of OpenVINO's error text that only names where in its C++ sources it was raised
_WHERE = re.compile(r"(Exception from|Check '.*' failed at) \S+:\d+:$")


def _cause(exc: BaseException) -> str:
    """The first line of ``exc``'s text that says what is wrong: OpenVINO's messages open with
    lines such as ``Exception from src/inference/src/cpp/core.cpp:117:``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if not _WHERE.match(line)] or lines
    return said[0][:300] if said else type(exc).__name__


def _probe_model(core: Any) -> Any:
    """A one-op model (Relu on 1 float), compiled to try a unit's properties."""
    from onnx import TensorProto, helper

    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "xy")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return core.read_model(model.SerializeToString(), b"")


class OpenvinoRunner(Runner):
    """A compiled OpenVINO model with one InferRequest."""

    def __init__(
        self, model: onnx.ModelProto, *, unit_name: str, device: str, config: Mapping[str, Any]
    ) -> None:
        ov = _import_openvino()
        core = _get_core()
        self.unit_name = unit_name
        self._ov = ov
        try:
            ov_model = core.read_model(model.SerializeToString(), b"")
            self._compiled = core.compile_model(ov_model, device, dict(config))
            self._request: Any = self._compiled.create_infer_request()
        except Exception as exc:
            raise UnitError(
                f"unit {unit_name!r}: OpenVINO cannot compile the model for {device}: {_cause(exc)}"
            ) from exc
        inits = {t.name for t in model.graph.initializer}
        onnx_inputs = [i.name for i in model.graph.input if i.name not in inits]
        onnx_outputs = [o.name for o in model.graph.output]
        self.input_names = tuple(onnx_inputs)
        self.output_names = tuple(onnx_outputs)
        self._in_index = self._match(self._compiled.inputs, onnx_inputs, "input")
        self._out_index = self._match(self._compiled.outputs, onnx_outputs, "output")

    def _match(self, ports: Any, names: list[str], kind: str) -> list[int]:
        """Compiled port index of each ONNX name (by tensor name, else by position)."""
        port_names = [set(p.get_names()) for p in ports]
        out = []
        for pos, name in enumerate(names):
            idx = next((i for i, ns in enumerate(port_names) if name in ns), None)
            if idx is None:
                if len(port_names) != len(names):
                    raise UnitError(
                        f"unit {self.unit_name!r}: OpenVINO lost model {kind} {name!r}; "
                        f"compiled {kind}s: {[sorted(ns) for ns in port_names]}"
                    )
                idx = pos
            out.append(idx)
        return out

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._request is None:
            raise UnitError(f"unit {self.unit_name!r}: the runner is closed")
        req = self._request
        try:
            for name, idx in zip(self.input_names, self._in_index, strict=True):
                arr = np.ascontiguousarray(feeds[name])
                if not arr.flags.writeable:
                    arr = arr.copy()
                req.set_input_tensor(idx, self._ov.Tensor(arr, shared_memory=True))
            req.infer()
            return {
                name: np.array(req.get_output_tensor(idx).data, copy=True)
                for name, idx in zip(self.output_names, self._out_index, strict=True)
            }
        except KeyError as exc:
            raise UnitError(
                f"unit {self.unit_name!r}: missing input {exc.args[0]!r}; the sub-model needs "
                f"{list(self.input_names)}"
            ) from None
        except Exception as exc:
            raise UnitError(
                f"unit {self.unit_name!r} (openvino) failed to run: {_cause(exc)}"
            ) from exc

    def layer_names(self) -> dict[str, tuple[str, ...]]:
        """Each runtime layer's name -> the original (ONNX) layer names it was made from."""
        out = {}
        for op in self._compiled.get_runtime_model().get_ops():
            info = op.get_rt_info()
            orig = info["originalLayersNames"].astype(str) if "originalLayersNames" in info else ""
            out[op.get_friendly_name()] = tuple(x for x in orig.split(",") if x)
        return out

    def profiling_info(self) -> list[tuple[str, float]]:
        """``(runtime layer, µs)`` of the last run (compiled with ``PERF_COUNT``)."""
        return [
            (p.node_name, p.real_time.total_seconds() * 1e6) for p in self._request.profiling_info
        ]

    def close(self) -> None:
        self._request = None
        self._compiled = None


@register_backend("openvino")
class OpenvinoUnit(Unit):
    """A unit running sub-models with OpenVINO on one device, at an explicit precision."""

    OPTIONS = {
        "device": "OpenVINO device: CPU (default), GPU, NPU, GPU.1, ...",
        "threads": "INFERENCE_NUM_THREADS on CPU, integer >= 1 (default 1)",
        "precision": "INFERENCE_PRECISION_HINT: f32 (default), bf16, f16, or auto (bf16 where "
        "the device has BF16, else f32)",
        "pinning": "true/false: ENABLE_CPU_PINNING on CPU (default false)",
        "properties": "mapping of extra compile properties",
    }

    def _configure(self, options: dict[str, Any]) -> dict[str, Any]:
        device = opt_str(options, "device", "CPU").upper()
        threads = opt_int(options, "threads", 1, minimum=1, maximum=MAX_THREADS)
        self.precision = opt_choice(options, "precision", "f32", (*PRECISIONS, AUTO))
        if self._asked == AUTO and self.remote is not None:
            raise UnitError(
                "option 'precision' cannot be auto on a remote unit: auto is resolved on the "
                "machine that runs the unit, not here; write precision: f32 or bf16"
            )
        pinning = opt_bool(options, "pinning", False)
        properties = opt_str_map(options, "properties", as_str=False)
        self._refused: str | None = None  # why OpenVINO refuses the properties ("": it takes them)
        return {
            "device": device,
            "threads": threads,
            "precision": self._asked,
            "pinning": pinning,
            "properties": properties,
        }

    @property
    def precision(self) -> str:
        """The precision the unit runs at: the option, with ``auto`` resolved on first use from
        the device's capabilities (``f32`` while OpenVINO or the device cannot be asked)."""
        if self._resolved is None:
            self._resolved = self._resolve_auto()
        return self._resolved or "f32"

    @precision.setter
    def precision(self, value: str) -> None:
        self._asked = value
        self._resolved: str | None = None if value == AUTO else value

    def _resolve_auto(self) -> str | None:
        """``bf16`` where the device lists ``BF16`` among its ``OPTIMIZATION_CAPABILITIES``,
        else ``f32``; ``None`` (not kept: asked again next time) while OpenVINO is not
        installed or does not see the device."""
        try:
            core = _get_core()
            devices = list(core.available_devices)
        except Exception:
            return None
        device = self.options["device"]
        if not _has_device(devices, device):
            return None
        caps = _capabilities(core, device)
        chosen = "bf16" if "BF16" in caps else "f32"
        log.debug("unit %r: precision auto -> %s (capabilities %s)", self.name, chosen, caps)
        return chosen

    @property
    def _on_cpu(self) -> bool:
        return self.options["device"].split(".")[0] == "CPU"

    @property
    def host_memory(self) -> bool:
        return self._on_cpu

    def compile_config(self) -> dict[str, Any]:
        """The properties passed to ``compile_model``."""
        cfg: dict[str, Any] = {
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": self.precision,
        }
        if self._on_cpu:
            cfg["INFERENCE_NUM_THREADS"] = self.options["threads"]
            cfg["ENABLE_CPU_PINNING"] = self.options["pinning"]
        cfg.update(self.options["properties"])
        return cfg

    def backend_version(self) -> str:
        try:
            ov = _import_openvino()
        except UnitUnavailableError:
            return "not-installed"
        return str(ov.get_version())

    def availability(self) -> tuple[bool, str]:
        try:
            core = _get_core()
        except UnitUnavailableError as exc:
            return False, str(exc)
        device = self.options["device"]
        try:
            devices = list(core.available_devices)
        except Exception as exc:
            return False, f"OpenVINO cannot list its devices: {_cause(exc)}"
        if not _has_device(devices, device):
            return False, f"device {device} not found; OpenVINO sees {devices}"
        caps = _capabilities(core, device)
        precision = self.precision  # resolves auto
        need = _CAPABILITY[precision]
        if caps and need not in caps:
            have = [p for p in PRECISIONS if _CAPABILITY[p] in caps]
            return False, (
                f"device {device} cannot run {precision} (capabilities {caps}); "
                f"use precision: {' or '.join(have) or 'f32'}"
            )
        try:
            full = str(core.get_property(device, "FULL_DEVICE_NAME"))
        except Exception:
            full = device
        if self.options["properties"] and self._refused is None:  # tried once per unit
            try:
                core.compile_model(_probe_model(core), device, self.compile_config())
                self._refused = ""
            except Exception as exc:
                why = f"OpenVINO refuses its properties {self.options['properties']}: {_cause(exc)}"
                self._refused = f"{why.rstrip('.')}; fix them"
        if self._refused:
            return False, self._refused
        version = self.backend_version().split("-")[0]
        shown = f"auto -> {precision}" if self._asked == AUTO else precision
        return True, f"openvino {version} on {device} ({full}), precision {shown}"

    def _speed_options(self) -> dict[str, Any]:
        o = self.options
        speed: dict[str, Any] = {"device": o["device"], "properties": o["properties"]}
        if self._on_cpu:
            speed["threads"] = o["threads"]
            speed["pinning"] = o["pinning"]
        else:  # the host CPU does not say which accelerator ran the measurements
            try:
                speed["device_name"] = str(
                    _get_core().get_property(o["device"], "FULL_DEVICE_NAME")
                )
            except Exception:
                speed["device_name"] = "unknown"
        return speed

    def _fingerprint_tag(self) -> str:
        o = self.options
        threads = f"-t{o['threads']}" if self._on_cpu else ""
        return f"{o['device'].lower()}{threads}-{self.precision}"

    def layer_times(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> list[tuple[tuple[str, ...], float]] | None:
        """OpenVINO's own per-layer counters (``PERF_COUNT``) of the model run whole, each
        runtime layer named by the original layers it was made from."""
        return self.layer_profile(model, feeds, runs)[0]

    def layer_profile(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> tuple[list[tuple[tuple[str, ...], float]] | None, float | None]:
        """:meth:`layer_times` and the median wall time (µs) of the same runs, both over the
        runs after the first quarter (at least one: the first run of a compiled model pays
        its lazy set-up, five times a warm run on a ShuffleNet region).

        OpenVINO's CPU plugin reports each layer's *average since compiling* (``PerfCount::
        avg()``: total / count, whole µs), not its time in the last run: the median of what it
        reports after each run was most of the way the average over the first runs, the cold
        one included (on ShuffleNet's regions the kernels then added up to 10-25 % more than
        the runs took). So on CPU each layer's time is its total after the last run less its
        total after the warm-up, over the runs between; other devices report per run (their
        median is taken)."""
        import statistics
        import time

        ok, reason = self.availability()
        if not ok:
            raise UnitUnavailableError(f"unit {self.name!r} cannot run here: {reason}")
        config = {**self.compile_config(), "PERF_COUNT": True}
        runner = OpenvinoRunner(
            model, unit_name=self.name, device=self.options["device"], config=config
        )
        runs = max(2, runs)
        warm = max(1, runs // 4)
        try:
            names = runner.layer_names()
            per_run: dict[str, list[float]] = {}
            walls: list[float] = []
            before: dict[str, float] = {}
            for k in range(runs):
                t0 = time.perf_counter()
                runner.run(feeds)
                walls.append((time.perf_counter() - t0) * 1e6)
                if k + 1 == warm:
                    before = dict(runner.profiling_info())
                elif k >= warm:
                    for layer, us in runner.profiling_info():
                        per_run.setdefault(layer, []).append(us)
        finally:
            runner.close()
        if self._on_cpu:
            after = {layer: us[-1] for layer, us in per_run.items()}
            times = {
                layer: since_warm(after[layer], before.get(layer, 0.0), runs, warm)
                for layer in after
            }
        else:
            times = {layer: float(statistics.median(us)) for layer, us in per_run.items()}
        kernels = [(names.get(layer) or (layer,), t) for layer, t in times.items()]
        return kernels, float(statistics.median(walls[warm:]))

    def prepare(self, model: onnx.ModelProto) -> OpenvinoRunner:
        ok, reason = self.availability()
        if not ok:
            raise UnitUnavailableError(f"unit {self.name!r} cannot run here: {reason}")
        return OpenvinoRunner(
            model,
            unit_name=self.name,
            device=self.options["device"],
            config=self.compile_config(),
        )


def since_warm(avg_after: float, avg_before: float, runs: int, warm: int) -> float:
    """A layer's mean time (µs) over runs ``warm + 1 .. runs`` from the CPU plugin's
    averages since compiling after ``runs`` and after ``warm`` runs (whole µs, rounded down:
    each total is taken at the middle of what it can be; a layer averaging under 1 µs, as
    every layer fused into another and never run does, is 0).

    Examples
    --------
    >>> since_warm(20.0, 50.0, 5, 1)  # a cold first run of 50 µs, then four of 13 or so
    13.0
    >>> since_warm(3.0, 3.0, 20, 5)  # 3.0-3.9 µs every run
    3.5
    >>> since_warm(0.0, 0.0, 20, 5)
    0.0
    """
    if runs <= warm or avg_after <= 0:
        return max(0.0, avg_after)
    total_after = runs * avg_after + (runs - 1) / 2
    total_before = warm * avg_before + (warm - 1) / 2
    return max(0.0, (total_after - total_before) / (runs - warm))
