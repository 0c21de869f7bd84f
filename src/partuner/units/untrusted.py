"""Which units an untrusted file (a plan file's ``partuner.units`` section, a profiling kit's
results) may define.

Plan files travel between people (NEST-C plans are exchange files), so a plan is untrusted: it
may only define units that neither run a program nor load code. That is an allow-list of
backends and their options: ``onnxruntime`` (built-in execution providers, a few numeric session
config entries), ``openvino`` (built-in devices, a few scheduling properties) and ``modeled``.
``external`` units (a compile command, a runner module), entry-point backends (third-party code),
onnxruntime config entries that write files (``ep.context_file_path``...), OpenVINO properties
such as ``CACHE_DIR`` and thread counts above ``MAX_THREADS`` are refused: such units come from
a units file the user passes (``--units FILE``). See ``docs/plan-file.md``.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

from partuner.errors import PlanFileError
from partuner.units.base import MAX_THREADS, backend_names

__all__ = ["SAFE_BACKENDS", "check_plan_units"]

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 3


def short_repr(value: object) -> str:
    """A short ``repr`` for messages, however big or nested ``value`` is."""
    return _REPR.repr(value)


#: options every backend takes (``units/base.py`` ``COMMON_OPTIONS``)
_COMMON = frozenset({"cores", "ops", "memory_mb", "remote"})
#: backend -> its options a plan may set
SAFE_BACKENDS: dict[str, frozenset[str]] = {
    "onnxruntime": frozenset(
        {"provider", "threads", "spinning", "optimization", "session_options", "precision"}
    ),
    "openvino": frozenset({"device", "threads", "precision", "pinning", "properties"}),
    "modeled": frozenset({"gflops", "gbps", "overhead_us", "conv_channel_multiple", "precision"}),
}
#: keys of the mapping options a plan may set: numeric and threading settings only
_SAFE_KEYS: dict[str, frozenset[str]] = {
    "session_options": frozenset(
        {
            "session.set_denormal_as_zero",
            "session.intra_op.allow_spinning",
            "session.inter_op.allow_spinning",
            "session.force_spinning_stop",
            "session.disable_prepacking",
            "session.dynamic_block_base",
            "mlas.enable_gemm_fastmath_arm64_bfloat16",
        }
    ),
    "properties": frozenset(
        {
            "NUM_STREAMS",
            "PERFORMANCE_HINT",
            "PERFORMANCE_HINT_NUM_REQUESTS",
            "INFERENCE_NUM_THREADS",
            "INFERENCE_PRECISION_HINT",
            "ENABLE_CPU_PINNING",
            "ENABLE_HYPER_THREADING",
            "EXECUTION_MODE_HINT",
            "SCHEDULING_CORE_TYPE",
            "CPU_DENORMALS_OPTIMIZATION",
        }
    ),
}
_SCALAR = (str, int, float, bool, type(None))
_FIX = "pass --units FILE with the units you trust"


def _plain(value: object) -> bool:
    """A scalar, or a list of scalars (``cores``, ``ops``)."""
    return isinstance(value, _SCALAR) or (
        isinstance(value, list) and all(isinstance(v, _SCALAR) for v in value)
    )


def _too_many(value: object) -> bool:
    """A number of threads, streams or requests no unit needs (a hostile plan's 10^5 threads
    would hang the process)."""
    try:
        return not isinstance(value, bool) and float(value) > MAX_THREADS  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _remote_value(value: object) -> bool:
    """``remote: true/false`` or ``remote: {fingerprint: FP}`` (data only, see docs/units.md)."""
    if isinstance(value, bool):
        return True
    return (
        isinstance(value, Mapping)
        and set(value) == {"fingerprint"}
        and isinstance(value["fingerprint"], str)
    )


def _did_you_mean(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'threads'?)`` when a known name is close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=1) if isinstance(name, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def _article(word: str) -> str:
    """``a`` or ``an``, by the sound that starts ``word`` (``an openvino``, ``a modeled``)."""
    return "an" if word[:1].lower() in ("a", "e", "i", "o") else "a"


def check_plan_units(units: Mapping[str, Any], where: str, kind: str = "a plan file") -> None:
    """Raise PlanFileError unless every unit of a plan's units section is on the allow-list
    (:data:`SAFE_BACKENDS`, plain option values, the safe keys of mapping options, ``remote``
    as ``true``/``false`` or ``{fingerprint: FP}``). ``kind`` names the untrusted file in the
    message (a profiling kit's results are checked the same way).

    Examples
    --------
    >>> check_plan_units({"cpu0": {"backend": "onnxruntime", "threads": 1}}, "plan.yaml")
    >>> try:  # doctest: +ELLIPSIS
    ...     check_plan_units({"npu": {"backend": "external", "compile": "rm -rf ~"}}, "p.yaml")
    ... except PlanFileError as exc:
    ...     print(exc)
    p.yaml: unit 'npu' uses backend 'external', which can run a program or load code; ...
    """
    for name, entry in units.items():
        what = f"{where}: unit {short_repr(name)}"
        if isinstance(entry, Mapping) and isinstance(entry.get("spec"), Mapping):
            entry = entry["spec"]  # a Unit.describe() dict
        if not isinstance(entry, Mapping):
            raise PlanFileError(
                f"{what} must be a mapping with a backend, not {short_repr(entry)}; {_FIX}"
            )
        options = dict(entry)
        backend = options.pop("backend", None)
        if backend is None:
            raise PlanFileError(f"{what} has no backend; {_FIX}")
        if not isinstance(backend, str) or backend not in SAFE_BACKENDS:
            known = backend_names()  # loads entry-point backends: only for a refused one
            if backend in known:
                raise PlanFileError(
                    f"{what} uses backend {short_repr(backend)}, which can run a program or "
                    f"load code; {kind} may not define it: {_FIX}"
                )
            raise PlanFileError(
                f"{what} uses unknown backend {short_repr(backend)}"
                f"{_did_you_mean(backend, known)}; known: {known}, of which {kind} may define "
                f"{sorted(SAFE_BACKENDS)}: fix the name, or {_FIX}"
            )
        for key, value in options.items():
            if key not in SAFE_BACKENDS[backend] | _COMMON:
                raise PlanFileError(
                    f"{what}: option {short_repr(key)} of {_article(backend)} {backend} unit is "
                    f"not one a plan may set{_did_you_mean(key, SAFE_BACKENDS[backend] | _COMMON)}"
                    f"; {_FIX}"
                )
            if key == "remote" and _remote_value(value):
                continue
            if key in _SAFE_KEYS and isinstance(value, Mapping):
                bad = [k for k in value if k not in _SAFE_KEYS[key]]
                if bad:
                    raise PlanFileError(
                        f"{what}: {key} entry {short_repr(bad[0])} is not one a plan may set "
                        f"(allowed: {sorted(_SAFE_KEYS[key])}); {_FIX}"
                    )
                bad = [k for k in value if not _plain(value[k]) or _too_many(value[k])]
                if bad:
                    raise PlanFileError(
                        f"{what}: {key} entry {short_repr(bad[0])} = {short_repr(value[bad[0]])}"
                        f" is a value a plan may not set (a plain value, numbers up to "
                        f"{MAX_THREADS}); {_FIX}"
                    )
            elif not _plain(value):
                raise PlanFileError(
                    f"{what}: option {key} = {short_repr(value)} is not a plain value; {_FIX}"
                )
