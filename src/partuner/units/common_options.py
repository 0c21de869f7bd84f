"""The options every unit takes, whatever its backend: ``cores``, ``ops``, ``memory_mb`` and
``remote``, each checked into its normalized form (a ``UnitError`` naming the option else)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from partuner.errors import UnitError

__all__ = ["parse_cores", "parse_memory", "parse_ops", "parse_remote"]


def parse_cores(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise UnitError(f"option 'cores' must be a non-empty list of core ids, got {value!r}")
    for c in value:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise UnitError(f"option 'cores' must list core ids >= 0, got {c!r}")
    if len(set(value)) != len(value):
        raise UnitError(f"option 'cores' lists a core twice: {list(value)}")
    return tuple(value)


def parse_ops(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):  # YAML's `ops: Conv`, meant as [Conv] or not
        raise UnitError(f"option 'ops' must be a list of op types, e.g. [{value}]")
    if not isinstance(value, list | tuple | set | frozenset) or not value:
        raise UnitError(f"option 'ops' must be a non-empty list of op types, got {value!r}")
    from partuner.graph.ops import op_type_problem  # onnx only for a unit that lists ops

    for op in value:
        if not isinstance(op, str) or not op:
            raise UnitError(f"option 'ops' must list op type names like Conv, got {op!r}")
        why = op_type_problem(op)
        if why is not None:
            raise UnitError(f"option 'ops': {why}; list ONNX op types like Conv, Relu")
    return frozenset(value)


def parse_memory(value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise UnitError(f"option 'memory_mb' must be a number of megabytes > 0, got {value!r}")
    return float(value)


def parse_remote(value: object) -> dict[str, str] | None:
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, Mapping):
        extra = [k for k in value if k != "fingerprint"]
        fp = value.get("fingerprint")
        if not extra and isinstance(fp, str) and re.fullmatch(r"[A-Za-z0-9._-]+", fp):
            return {"fingerprint": fp}
    raise UnitError(
        f"option 'remote' must be true, false or {{fingerprint: FP}} (FP as `partuner profile "
        f"--import` prints it), got {value!r}"
    )
