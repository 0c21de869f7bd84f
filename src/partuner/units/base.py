"""The unit contract: what a processing unit is, how it runs a sub-model, and the backend registry.

A :class:`Unit` is one place a sub-model can run (an onnxruntime session on one core, an OpenVINO
device, a modeled accelerator). It says whether it is available here and why not, which ops it
takes, how it is fingerprinted for the profile store, and turns an ONNX model into a
:class:`Runner`. Backends register with :func:`register_backend`; third-party backends are found
through the ``partuner.units`` entry-point group the first time the registry is asked for names.
"""

from __future__ import annotations

import abc
import functools
import hashlib
import json
import logging
import math
import platform
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from partuner.errors import UnitError
from partuner.units.common_options import parse_cores, parse_memory, parse_ops, parse_remote

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from partuner.graph.model import ModelGraph, NodeInfo

__all__ = [
    "ENTRY_POINT_GROUP",
    "Deferred",
    "Runner",
    "Unit",
    "backend_names",
    "get_backend",
    "host_cpu_model",
    "make_unit",
    "materialize",
    "register_backend",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "partuner.units"

#: Options every backend accepts, on top of its own.
COMMON_OPTIONS: dict[str, str] = {
    "cores": "list of CPU core ids the unit occupies (declared, e.g. [0])",
    "ops": "list of ONNX op types the unit runs (default: all)",
    "memory_mb": "memory for weights and activations in MB, number > 0 (default: unlimited)",
    "remote": "true: a target elsewhere, measured by a profiling kit whose results were "
    "imported (never run here); or {fingerprint: FP} to name the imported measurements",
}

REQUIRED = object()

#: Why a remote unit is not available here.
REMOTE_REASON = (
    "remote target: it runs on the board, not here; its measurements come from a profiling "
    "kit's results (partuner profile MODEL --import RESULTS)"
)


class Runner(abc.ABC):
    """A prepared sub-model on one unit. Not thread-safe: one thread runs a runner at a time;
    runners of different units may run from different threads at once.

    A runner whose outputs can stay where they were computed (a unit on a Ray node) sets
    ``deferred = True`` and has :meth:`run_deferred`; the runtime calls it for partitions whose
    outputs only such runners read, and hands those runners the :class:`Deferred` values as
    inputs. Every other caller gets arrays from :meth:`run`."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    deferred: ClassVar[bool] = False

    def run_deferred(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """As :meth:`run`, once the run finished, with outputs left where they were computed
        (:class:`Deferred`); ``feeds`` may hold arrays and :class:`Deferred` values."""
        return self.run(feeds)

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; ``feeds`` maps every input name to an array. Returns every output by name."""

    def close(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Release the session; the runner cannot run afterwards."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Deferred:
    """An output left where it was computed; :func:`materialize` fetches it."""

    nbytes: int = 0

    @classmethod
    def fetch_all(cls, values: list[Deferred]) -> list[Any]:
        """The arrays of ``values`` (all of this class), fetched together."""
        raise NotImplementedError


def materialize(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with every :class:`Deferred` one fetched (a copy; no fetch, no cost)."""
    out = dict(values)
    late = [k for k, v in out.items() if isinstance(v, Deferred)]
    if late:
        kinds: dict[type, list[str]] = {}
        for k in late:
            kinds.setdefault(type(out[k]), []).append(k)
        for kind, keys in kinds.items():
            for k, arr in zip(keys, kind.fetch_all([out[k] for k in keys]), strict=True):
                out[k] = arr
    return out


class Unit(abc.ABC):
    """One processing unit: a backend plus its options.

    Subclasses set ``OPTIONS`` (option name -> what it accepts, shown in error messages) and
    implement :meth:`_configure` (validate and normalize the options), :meth:`backend_version`,
    :meth:`availability`, :meth:`prepare` and, for speed-relevant options,
    :meth:`_speed_options`.
    """

    backend: ClassVar[str] = ""
    OPTIONS: ClassVar[Mapping[str, str]] = {}
    modeled: ClassVar[bool] = False
    #: whether measurements depend on the host CPU (part of the fingerprint)
    host_dependent: ClassVar[bool] = True

    def __init__(self, name: str, **options: Any) -> None:
        if not isinstance(name, str) or not name:
            raise UnitError(f"a unit name must be a non-empty string, got {name!r}")
        self.name = name
        valid = self.option_names()
        unknown = [k for k in options if k not in valid]
        if unknown:
            raise UnitError(
                f"unknown option {unknown[0]!r} for backend {self.backend!r}; "
                f"valid options: {sorted({*valid, 'ray'})}"
            )
        opts = dict(options)
        self.cores: tuple[int, ...] | None = parse_cores(opts.pop("cores", None))
        self.ops: frozenset[str] | None = parse_ops(opts.pop("ops", None))
        self.memory_mb: float | None = parse_memory(opts.pop("memory_mb", None))
        #: ``None`` (runs here), or ``{}`` / ``{"fingerprint": FP}`` for a remote target
        self.remote: dict[str, str] | None = parse_remote(opts.pop("remote", None))
        if self.remote is not None and self.modeled:
            raise UnitError("option 'remote' does not apply to a modeled unit (nothing to measure)")
        self.precision: str = "f32"
        self.options: dict[str, Any] = self._configure(opts)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A remote unit is never available here, whatever its backend says; a model given to
        a unit to compile is first written in the op types it lists (:meth:`for_ops`)."""
        super().__init_subclass__(**kwargs)
        for method in ("prepare", "layer_times", "layer_profile"):
            _legalize_model_arg(cls, method)
        own = cls.__dict__.get("availability")
        if own is None or getattr(own, "_remote_aware", False):
            return

        @functools.wraps(own)
        def availability(self: Unit) -> tuple[bool, str]:
            if self.remote is not None:
                return False, REMOTE_REASON
            return own(self)

        availability._remote_aware = True  # type: ignore[attr-defined]
        cls.availability = availability  # type: ignore[method-assign]

    # -- subclass hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def _configure(self, options: dict[str, Any]) -> dict[str, Any]:
        """Validate the backend's own options (pop them from ``options``), set ``precision``,
        and return the normalized options with defaults filled in."""

    @abc.abstractmethod
    def backend_version(self) -> str:
        """The backend library's version ("not-installed" when it cannot be imported)."""

    @abc.abstractmethod
    def availability(self) -> tuple[bool, str]:
        """``(True, what it runs on)`` or ``(False, why not and how to fix it)``."""

    @abc.abstractmethod
    def prepare(self, model: onnx.ModelProto) -> Runner:
        """Build a runner for ``model``; raises UnitUnavailableError or UnitError."""

    def layer_times(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> list[tuple[tuple[str, ...], float]] | None:
        """The backend's own per-layer profile of running ``model`` whole ``runs`` times: for
        each kernel it ran, the names it gives for it (ONNX node or value names, as the backend
        reports them; see ``partuner.profile.layers``) and its median time per run in µs.
        ``None`` where the backend has no per-layer profiling (the default)."""
        return None

    def layer_profile(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> tuple[list[tuple[tuple[str, ...], float]] | None, float | None]:
        """:meth:`layer_times` and the median wall time (µs) of the same profiled runs, or
        ``None`` for it where the backend does not time them (the default): the kernels'
        sum is compared with the runs that gave it, not with a timing taken at another moment
        (on a busy or drifting machine, the two can differ by a fifth)."""
        return self.layer_times(model, feeds, runs), None

    def alone(self) -> Unit:
        """This unit as it runs best when a plan's only partition is on it (nothing else runs
        beside it). The default: itself."""
        return self

    @property
    def host_memory(self) -> bool:
        """Whether the unit computes in host memory, so tensors reach it without a copy (an
        in-process CPU backend). Modeled units say False: they stand for another device."""
        return False

    def _speed_options(self) -> dict[str, Any]:
        """The options that change speed (they enter the fingerprint)."""
        return {}

    def _fingerprint_tag(self) -> str:
        """A short readable summary of the speed options for the fingerprint's prefix."""
        return self.precision

    # -- shared behaviour -------------------------------------------------------------------

    @classmethod
    def option_names(cls) -> list[str]:
        """Every option this backend accepts, sorted."""
        return sorted({*cls.OPTIONS, *COMMON_OPTIONS})

    def supports(self, node: NodeInfo, graph: ModelGraph | None = None) -> bool:
        """Whether this unit can run ``node``: by op type (``ops=None`` means every op), or,
        given the graph, written as an op type it lists (a ``Mul`` or ``Add`` by a per-channel
        constant as a ``BatchNormalization``: ``partuner.graph.equivalents``)."""
        if self.ops is None or node.op_type in self.ops:
            return True
        if graph is None:
            return False
        from partuner.graph.equivalents import runs_as

        return runs_as(graph, node) in self.ops

    def for_ops(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """``model`` with the nodes this unit runs only as another op type written as that
        op (``partuner.graph.equivalents``): what it is given to compile, and what ``partuner
        export`` writes for it. ``model`` itself where there is nothing to write."""
        import onnx

        if self.ops is None or not isinstance(model, onnx.ModelProto):
            return model
        from partuner.graph.equivalents import rewrite_for_ops

        return rewrite_for_ops(model, self.ops)

    def modeled_time_us(
        self,
        nodes: Sequence[NodeInfo],
        graph: ModelGraph | None = None,
        *,
        include_overhead: bool = True,
    ) -> float:
        """Computed run time of ``nodes``; only modeled units have one."""
        raise NotImplementedError(
            f"unit {self.name!r} ({self.backend}) is measured, not modeled: profile it instead"
        )

    def fingerprint(self) -> str:
        """Identify what this unit's measurements depend on: backend, its version, the options
        that change speed, precision and host CPU model. Not the name, cores, ops or memory, so
        identical units share measurements. Form: ``<backend>-<version>-<tag>-<12 hex digits>``.
        A remote unit whose target is known (``remote: {fingerprint: FP}``, or resolved from
        the imported kit results) gives the target's fingerprint, computed there the same way."""
        if self.remote and self.remote.get("fingerprint"):
            return self.remote["fingerprint"]
        fields: dict[str, Any] = {
            "backend": self.backend,
            "version": self.backend_version(),
            "precision": self.precision,
            "speed": self._speed_options(),
        }
        if self.host_dependent:
            fields["host"] = host_cpu_model()
        blob = json.dumps(fields, sort_keys=True, default=str).encode()
        digest = hashlib.sha256(blob).hexdigest()[:12]
        version = self.backend_version().split("-")[0].split("+")[0]
        prefix = f"{self.backend}-{version}-{self._fingerprint_tag()}"
        return re.sub(r"[^A-Za-z0-9._-]+", "_", prefix) + "-" + digest

    def call_route(self) -> str:
        """Where a call from this process travels to reach the unit, for figures that time the
        whole call (batch curves: inputs sent, outputs fetched): ``""`` for a unit in this
        process. Units with one fingerprint on different routes do not share such figures."""
        return ""

    def spec(self) -> dict[str, Any]:
        """This unit as a units-file entry (``backend`` + options); ``make_unit(name, **spec)``
        rebuilds an equal unit."""
        out: dict[str, Any] = {"backend": self.backend}
        out.update({k: _jsonable(v) for k, v in self.options.items() if v is not None})
        if self.cores is not None:
            out["cores"] = list(self.cores)
        if self.ops is not None:
            out["ops"] = sorted(self.ops)
        if self.memory_mb is not None:
            out["memory_mb"] = self.memory_mb
        if self.remote is not None:
            out["remote"] = dict(self.remote) if self.remote else True
        return out

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (for ``partuner units --json``); ``spec`` rebuilds the unit."""
        ok, reason = self.availability()
        return {
            "name": self.name,
            "backend": self.backend,
            "backend_version": self.backend_version(),
            "precision": self.precision,
            "modeled": self.modeled,
            "cores": list(self.cores) if self.cores is not None else None,
            "ops": sorted(self.ops) if self.ops is not None else None,
            "memory_mb": self.memory_mb,
            "options": {k: _jsonable(v) for k, v in self.options.items()},
            "available": ok,
            "reason": reason,
            "host_memory": self.host_memory,
            "remote": self.remote is not None,
            "fingerprint": self.fingerprint(),
            "spec": self.spec(),
        }

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({self.name!r}, {opts})"


# -- option parsing helpers (used by the backends) --------------------------------------------


def _legalize_model_arg(cls: type, method: str) -> None:
    """Wrap ``cls``'s own ``method(model, ...)`` so that it gets ``self.for_ops(model)``."""
    own = cls.__dict__.get(method)
    if own is None or getattr(own, "_for_ops", False):
        return

    @functools.wraps(own)
    def wrapped(self: Unit, model: Any, *args: Any, **kwargs: Any) -> Any:
        return own(self, self.for_ops(model), *args, **kwargs)

    wrapped._for_ops = True  # type: ignore[attr-defined]
    setattr(cls, method, wrapped)


#: the most threads one unit may ask for: more is a mistake (or a hostile file), not a setting,
#: and thread pools of 10^5 threads hang the process for minutes
MAX_THREADS = 1024


def opt_int(
    opts: dict[str, Any],
    key: str,
    default: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> Any:
    """Pop an integer option (``None`` stays ``None`` when it is the default)."""
    value = opts.pop(key, default)
    if value is REQUIRED:
        raise UnitError(f"option {key!r} is required")
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnitError(
            f"option {key!r} must be an integer, got {value!r} ({type(value).__name__})"
        )
    if minimum is not None and value < minimum:
        raise UnitError(f"option {key!r} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise UnitError(f"option {key!r} must be <= {maximum}, got {value}")
    return value


def opt_number(
    opts: dict[str, Any],
    key: str,
    default: Any,
    *,
    positive: bool = False,
    minimum: float | None = None,
    hint: str = "",
) -> float:
    """Pop a finite real option; ``positive`` requires > 0, ``minimum`` requires >= it."""
    value = opts.pop(key, default)
    if value is REQUIRED:
        raise UnitError(f"option {key!r} is required{hint}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        hint = ""
        if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+|\d*\.\d+)[eE][-+]?\d+", value):
            mant, exp = value.lower().split("e")
            mant, exp = mant if "." in mant else mant + ".0", exp if exp[0] in "+-" else "+" + exp
            hint = f" (YAML reads it as text: write {mant}e{exp}, with a dot and a signed exponent)"
        raise UnitError(f"option {key!r} must be a finite number, got {value!r}{hint}")
    if positive and value <= 0:
        raise UnitError(f"option {key!r} must be > 0, got {value}")
    if minimum is not None and value < minimum:
        raise UnitError(f"option {key!r} must be >= {minimum}, got {value}")
    return float(value)


def opt_bool(opts: dict[str, Any], key: str, default: bool) -> bool:
    value = opts.pop(key, default)
    if not isinstance(value, bool):
        raise UnitError(f"option {key!r} must be true or false, got {value!r}")
    return value


def opt_choice(opts: dict[str, Any], key: str, default: str, choices: Iterable[str]) -> str:
    """Pop a string option that must be one of ``choices`` (compared case-insensitively)."""
    value = opts.pop(key, default)
    allowed = list(choices)
    if isinstance(value, str):
        for c in allowed:
            if value.lower() == c.lower():
                return c
    raise UnitError(f"option {key!r} must be one of {allowed}, got {value!r}")


def opt_str(opts: dict[str, Any], key: str, default: str) -> str:
    value = opts.pop(key, default)
    if not isinstance(value, str) or not value:
        raise UnitError(f"option {key!r} must be a non-empty string, got {value!r}")
    return value


def opt_str_map(opts: dict[str, Any], key: str, *, as_str: bool = True) -> dict[str, Any]:
    """Pop a mapping of names to scalars; with ``as_str`` values become strings (bools "1"/"0")."""
    value = opts.pop(key, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UnitError(f"option {key!r} must be a mapping of names to values, got {value!r}")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str | int | float | bool):
            raise UnitError(f"option {key!r}: entry {k!r}: {v!r} must map a name to a scalar")
        if as_str:
            v = ("1" if v else "0") if isinstance(v, bool) else str(v)
        out[k] = v
    return out


def _jsonable(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, frozenset | set | tuple):
        return sorted(value) if isinstance(value, frozenset | set) else list(value)
    return value


@functools.cache
def host_cpu_model() -> str:
    """The host CPU's model name (from /proc/cpuinfo, else ``platform``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and val.strip():
                    return val.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


# -- registry ---------------------------------------------------------------------------------

_BACKENDS: dict[str, type[Unit]] = {}
_EP_ERRORS: dict[str, str] = {}
_EP_LOCK = threading.Lock()
_ep_loaded = False

U = TypeVar("U", bound=type[Unit])


def register_backend(name: str) -> Callable[[U], U]:
    """Class decorator registering a :class:`Unit` subclass under ``name``."""

    def deco(cls: U) -> U:
        if not (isinstance(cls, type) and issubclass(cls, Unit)):
            raise TypeError(f"@register_backend({name!r}) needs a Unit subclass, got {cls!r}")
        old = _BACKENDS.get(name)
        if old is not None and old is not cls:
            raise ValueError(f"backend {name!r} is already registered by {old.__qualname__}")
        cls.backend = name
        _BACKENDS[name] = cls
        return cls

    return deco


def _load_entry_points() -> None:
    """Import third-party backends from the ``partuner.units`` entry points, once; a broken
    one is logged and remembered, never fatal."""
    global _ep_loaded
    import importlib.metadata

    with _EP_LOCK:
        if _ep_loaded:
            return
        _ep_loaded = True
        try:
            eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        except Exception as exc:  # broken metadata must not break partuner
            log.warning("cannot list %s entry points: %s", ENTRY_POINT_GROUP, exc)
            return
        for ep in eps:
            if ep.name in _BACKENDS:
                continue
            try:
                obj = ep.load()
            except Exception as exc:
                _EP_ERRORS[ep.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                log.warning("unit backend %r (%s) failed to load: %s", ep.name, ep.value, exc)
                continue
            if isinstance(obj, type) and issubclass(obj, Unit):
                if obj.backend and obj.backend in _BACKENDS:
                    continue
                register_backend(ep.name)(obj)
            elif ep.name not in _BACKENDS:
                _EP_ERRORS[ep.name] = f"entry point {ep.value} is not a Unit subclass"
                log.warning("unit backend %r: %s is not a Unit subclass", ep.name, ep.value)


def backend_names() -> list[str]:
    """Names of every registered backend (built-ins and entry points), sorted."""
    _load_entry_points()
    return sorted(_BACKENDS)


def get_backend(name: str) -> type[Unit]:
    """The Unit class registered as ``name``; raises UnitError naming the known backends."""
    if name not in _BACKENDS:
        _load_entry_points()
    try:
        return _BACKENDS[name]
    except (KeyError, TypeError):
        if isinstance(name, str) and name in _EP_ERRORS:
            raise UnitError(f"backend {name!r} failed to load: {_EP_ERRORS[name]}") from None
        raise UnitError(f"unknown backend {name!r}; known: {sorted(_BACKENDS)}") from None


def make_unit(name: str, backend: str, **options: Any) -> Unit:
    """Build a unit: ``make_unit("cpu0", "onnxruntime", threads=1)``; raises UnitError."""
    return get_backend(backend)(name, **options)
