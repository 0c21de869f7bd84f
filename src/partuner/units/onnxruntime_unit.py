"""The ``onnxruntime`` backend: one InferenceSession per prepared sub-model.

Options
-------
provider : execution provider, full (``CUDAExecutionProvider``) or short (``cuda``) name;
    default ``CPUExecutionProvider``.
threads : intra-op threads, default 1. Inter-op threads are always 1, execution sequential.
spinning : whether idle intra-op threads spin: ``false`` (default), ``true``, or ``run``: spin
    while a run is in progress and stop when it ends (``session.force_spinning_stop``). With 1
    thread there is no pool and the value does nothing. ``true`` is the fastest for one session
    alone, but each partition is its own session with its own pool, and spinning pools of
    several sessions starve each other; ``run`` keeps most of the speed without that
    (measured by ``benchmarks/unit_settings_bench.py``; see docs/units.md).
optimization : graph optimization level, ``all`` (default), ``extended``, ``basic``, ``disable``.
session_options : extra ``SessionOptions`` config entries, e.g.
    ``{"session.set_denormal_as_zero": 1}``.
precision : ``f32`` (default) or, with the CUDA provider only, ``tf32``. onnxruntime's CUDA
    provider runs convolutions and matrix products in TensorFloat-32 (a 10-bit mantissa) unless
    told not to (``use_tf32``); ``f32`` tells it not to, so a CUDA unit computes what it says,
    and ``tf32`` lets it, checked by the ``tf32`` rule (as loose as f16's).

Runs go through ``session.run(None, feeds)``: on a 1-op graph it was cheaper per run than
IOBinding (bind input, bind output, run, copy out) and than ``run_with_ort_values`` (which wraps
every input in an OrtValue), so the plain call is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from partuner.errors import UnitError, UnitUnavailableError
from partuner.units.base import (
    MAX_THREADS,
    Runner,
    Unit,
    opt_choice,
    opt_int,
    opt_str,
    opt_str_map,
    register_backend,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["OnnxruntimeUnit", "OnnxruntimeRunner", "kernel_times", "resolve_provider"]

log = logging.getLogger(__name__)

_SUFFIX = "ExecutionProvider"
#: providers that compute in host memory (inputs and outputs are not copied to a device)
_HOST_PROVIDERS = frozenset(
    {"CPUExecutionProvider", "DnnlExecutionProvider", "XnnpackExecutionProvider"}
)
_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def _ort_version() -> str:
    try:
        import onnxruntime
    except Exception:
        return "not-installed"
    return str(onnxruntime.__version__)


def resolve_provider(name: str) -> str:
    """Full provider name for ``name``: ``"cuda"`` -> ``"CUDAExecutionProvider"``.

    Examples
    --------
    >>> resolve_provider("cpu")
    'CPUExecutionProvider'
    >>> resolve_provider("CUDAExecutionProvider")
    'CUDAExecutionProvider'
    """
    import onnxruntime

    known = list(onnxruntime.get_all_providers())
    for full in known:
        short = full[: -len(_SUFFIX)] if full.endswith(_SUFFIX) else full
        if name.lower() in (full.lower(), short.lower()):
            return full
    shorts = sorted(p[: -len(_SUFFIX)].lower() for p in known if p.endswith(_SUFFIX))
    raise UnitError(f"option 'provider': unknown execution provider {name!r}; known: {shorts}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class OnnxruntimeRunner(Runner):
    """An onnxruntime InferenceSession holding one sub-model."""

    def __init__(
        self,
        model: onnx.ModelProto,
        *,
        unit_name: str,
        provider: str = "CPUExecutionProvider",
        threads: int = 1,
        spinning: bool | str = False,
        optimization: str = "all",
        session_options: Mapping[str, str] | None = None,
        precision: str = "f32",
        profile_prefix: str | None = None,
    ) -> None:
        import onnxruntime as ort

        self.unit_name = unit_name
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[optimization])
        # onnxruntime's own warnings (an initializer listed as an input, ...) and errors (a
        # node timed alone that fails: partuner says so itself, with the node's name) print
        # coloured, past --quiet: shown only where partuner logs debug lines (-vv)
        debug = logging.getLogger("partuner").isEnabledFor(logging.DEBUG)
        so.log_severity_level = 1 if debug else 4
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        if spinning == "run":
            so.add_session_config_entry("session.force_spinning_stop", "1")
        for key, value in (session_options or {}).items():
            so.add_session_config_entry(key, value)
        if profile_prefix is not None:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        try:
            self._sess: Any = ort.InferenceSession(
                model.SerializeToString(), so, providers=[_with_options(provider, precision)]
            )
        except Exception as exc:
            raise UnitError(
                f"unit {unit_name!r}: onnxruntime cannot load the model: {_first_line(exc)}"
            ) from exc
        used = list(self._sess.get_providers())
        if provider not in used:  # onnxruntime falls back to the CPU with only a log line
            raise UnitError(
                f"unit {unit_name!r}: onnxruntime could not set up {provider} and would run on "
                f"{used} instead; check that the provider's libraries (CUDA, cuDNN, ...) load"
            )
        self.input_names = tuple(i.name for i in self._sess.get_inputs())
        self.output_names = tuple(o.name for o in self._sess.get_outputs())

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._sess is None:
            raise UnitError(f"unit {self.unit_name!r}: the runner is closed")
        try:
            outs = self._sess.run(None, dict(feeds))
        except Exception as exc:
            raise UnitError(
                f"unit {self.unit_name!r} (onnxruntime) failed to run: {_first_line(exc)}"
            ) from exc
        return dict(zip(self.output_names, outs, strict=True))

    def end_profiling(self) -> str:
        """Stop profiling (a runner made with ``profile_prefix``); the trace file's path."""
        return str(self._sess.end_profiling())

    def close(self) -> None:
        self._sess = None


def _with_options(provider: str, precision: str) -> str | tuple[str, dict[str, str]]:
    """The ``providers`` entry for ``provider`` at ``precision`` (CUDA: TF32 on or off)."""
    if provider == "CUDAExecutionProvider":
        return provider, {"use_tf32": "1" if precision == "tf32" else "0"}
    return provider


def kernel_times(events: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], float]]:
    """Per-kernel median times (µs) from an onnxruntime profiling trace, with the names each
    kernel may stand for: its node name and, for a kernel of the NCHWc layout transformer
    (named after the value it computes plus ``_nchwc``), that value's name.

    >>> ev = [{"cat": "Node", "name": "relu1_output_nchwc_kernel_time", "dur": d}
    ...       for d in (5, 7, 6)]
    >>> kernel_times(ev)
    [(('relu1_output_nchwc', 'relu1_output'), 6.0)]
    """
    import statistics

    per: dict[str, list[float]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            per.setdefault(name.removesuffix("_kernel_time"), []).append(float(e["dur"]))
    out = []
    for name, durs in per.items():
        keys = (name, name.removesuffix("_nchwc")) if name.endswith("_nchwc") else (name,)
        out.append((keys, float(statistics.median(durs))))
    return out


@register_backend("onnxruntime")
class OnnxruntimeUnit(Unit):
    """A unit running sub-models with onnxruntime (by default on the CPU, one thread)."""

    OPTIONS = {
        "provider": "execution provider: cpu (default), cuda, tensorrt, dml, ... or a full name",
        "threads": "intra-op threads, integer >= 1 (default 1)",
        "spinning": "true/false/run: idle intra-op threads spin (run: only during a run; "
        "default false)",
        "optimization": "graph optimization: all (default), extended, basic, disable",
        "session_options": "mapping of extra SessionOptions config entries",
        "precision": "f32 (default) or, with provider cuda, tf32 (TensorFloat-32 convolutions "
        "and matrix products)",
    }

    def _configure(self, options: dict[str, Any]) -> dict[str, Any]:
        provider = resolve_provider(opt_str(options, "provider", "CPUExecutionProvider"))
        threads = opt_int(options, "threads", 1, minimum=1, maximum=MAX_THREADS)
        spinning: bool | str = options.pop("spinning", False)
        if spinning != "run" and not isinstance(spinning, bool):
            raise UnitError(f"option 'spinning' must be true, false or run, got {spinning!r}")
        optimization = opt_choice(options, "optimization", "all", list(_LEVELS)[::-1])
        session_options = opt_str_map(options, "session_options")
        precision = opt_choice(options, "precision", "f32", ("f32", "tf32"))
        if precision == "tf32" and provider != "CUDAExecutionProvider":
            raise UnitError(
                f"option 'precision: tf32' needs provider cuda ({provider} has no TensorFloat-32 "
                "setting); leave precision out for f32"
            )
        self.precision = precision
        return {
            "provider": provider,
            "threads": threads,
            "spinning": spinning,
            "optimization": optimization,
            "session_options": session_options,
            # only where it is not the default: every other unit's spec stays as it was
            **({"precision": precision} if precision != "f32" else {}),
        }

    @property
    def host_memory(self) -> bool:
        return self.options["provider"] in _HOST_PROVIDERS

    def backend_version(self) -> str:
        return _ort_version()

    def availability(self) -> tuple[bool, str]:
        try:
            import onnxruntime
        except Exception as exc:
            return (
                False,
                f"onnxruntime cannot be imported ({_first_line(exc)}): pip install onnxruntime",
            )
        provider = self.options["provider"]
        offered = list(onnxruntime.get_available_providers())
        if provider not in offered:
            return False, f"{provider} not available; onnxruntime offers {offered}"
        return True, f"onnxruntime {onnxruntime.__version__}, {provider}"

    def _speed_options(self) -> dict[str, Any]:
        o = self.options
        speed = {
            "provider": o["provider"],
            "threads": o["threads"],
            "optimization": o["optimization"],
            "session_options": o["session_options"],
        }
        if o["threads"] > 1:  # with one thread there is no pool to spin
            speed["spinning"] = o["spinning"]
        return speed

    def _fingerprint_tag(self) -> str:
        o = self.options
        short = o["provider"].removesuffix("ExecutionProvider").lower()
        spin = ""
        if o["threads"] > 1 and o["spinning"]:
            spin = "-spinrun" if o["spinning"] == "run" else "-spin"
        return f"{short}-t{o['threads']}{spin}-{self.precision}"

    def alone(self) -> Unit:
        """With ``spinning: run``, a copy that keeps spinning between runs: stopping the pool
        after every run (what lets several sessions share cores) costs a wake-up per run, which
        a one-partition plan does not need (``benchmarks/unit_settings_bench.py`` measures both
        on a whole squeezenet)."""
        if self.options["threads"] < 2 or self.options["spinning"] != "run":
            return self
        spec = {k: v for k, v in self.spec().items() if k != "backend"}
        spec["spinning"] = True
        return type(self)(self.name, **spec)

    def layer_times(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> list[tuple[tuple[str, ...], float]] | None:
        """onnxruntime's own profiling (``enable_profiling``) of the model run whole."""
        return self.layer_profile(model, feeds, runs)[0]

    def layer_profile(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> tuple[list[tuple[tuple[str, ...], float]] | None, float | None]:
        """:meth:`layer_times` and the median wall time of the same runs (µs)."""
        import json
        import statistics
        import tempfile
        import time
        from pathlib import Path

        ok, reason = self.availability()
        if not ok:
            raise UnitUnavailableError(f"unit {self.name!r} cannot run here: {reason}")
        with tempfile.TemporaryDirectory(prefix="partuner-ortprof-") as tmp:
            runner = OnnxruntimeRunner(
                model, unit_name=self.name, profile_prefix=str(Path(tmp) / "p"), **self.options
            )
            walls: list[float] = []
            try:
                for _ in range(runs):
                    t0 = time.perf_counter()
                    runner.run(feeds)
                    walls.append((time.perf_counter() - t0) * 1e6)
                events = json.loads(Path(runner.end_profiling()).read_text(encoding="utf-8"))
            finally:
                runner.close()
        return kernel_times(events), float(statistics.median(walls)) if walls else None

    def prepare(self, model: onnx.ModelProto) -> OnnxruntimeRunner:
        ok, reason = self.availability()
        if not ok:
            raise UnitUnavailableError(f"unit {self.name!r} cannot run here: {reason}")
        return OnnxruntimeRunner(model, unit_name=self.name, **self.options)
