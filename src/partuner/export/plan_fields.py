"""Readers of a plan file's fields: names, numbers, flags and colon-joined lists.

A plan file is untrusted (plans travel between people): each reader checks its field's type and
range and raises :class:`~partuner.errors.PlanFileError`, one line naming the key and what is
wrong; names that become file names (partitions, units) must be safe ones (:func:`is_safe_name`).
"""

from __future__ import annotations

import difflib
import math
import re
import reprlib
from collections.abc import Sequence
from typing import Any

from partuner.errors import PlanFileError

__all__ = ["check_partition_names", "colon_list", "flag_field", "is_safe_name", "known_keys"]
__all__ += ["short_repr", "text_field", "unit_name", "us_field"]

#: the unit-name rule of ``units/config.py``: partition names become file names, unit names too
#: (``NAME.onnx``), so no ``/``, no leading ``.`` or ``-``
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
NAME_MAX = 100
_RULE = f"use letters, digits, '_', '.' and '-', not starting with '.' or '-', at most {NAME_MAX}"
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 3


def short_repr(value: object) -> str:
    """A short ``repr`` for messages, bounded however big or nested ``value`` is."""
    return _REPR.repr(value)


def is_safe_name(name: object) -> bool:
    """Whether ``name`` may name a partition or unit (and so a file in an export folder).

    Examples
    --------
    >>> [is_safe_name(n) for n in ("p0", "conv.1-a", "../x", "/abs", ".hidden", "a\\n", "")]
    [True, True, False, False, False, False, False]
    """
    return isinstance(name, str) and len(name) <= NAME_MAX and bool(_NAME_RE.fullmatch(name))


def check_partition_names(names: Sequence[object], where: str) -> None:
    """Raise PlanFileError naming the first partition name that is not a safe file name
    (:func:`is_safe_name`) or that repeats another, letter case ignored."""
    seen: dict[str, str] = {}
    for name in names:
        if not is_safe_name(name):
            raise PlanFileError(
                f"{where}: bad partition name {short_repr(name)}: {_RULE} characters"
            )
        assert isinstance(name, str)
        first = seen.get(name.lower())
        if first is not None:
            also = "" if first == name else f" (as {first!r})"
            raise PlanFileError(
                f"{where}: partition name {name!r} appears twice{also}; partition names must "
                "differ, letter case included: rename one"
            )
        seen[name.lower()] = name


def unit_name(value: object, key: str, where: str) -> str:
    if not is_safe_name(value):
        raise PlanFileError(
            f"{where}: `{key}`: bad unit name {short_repr(value)}: {_RULE} characters"
        )
    assert isinstance(value, str)
    return value


def text_field(value: object, key: str, where: str, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise PlanFileError(f"{where}: `{key}` must be a string, got {short_repr(value)}")
    return value


def flag_field(value: object, key: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise PlanFileError(f"{where}: `{key}` must be true or false, got {short_repr(value)}")
    return value


def us_field(value: object, key: str, where: str) -> float | None:
    """Milliseconds from the file -> µs; None stays None; anything but a finite number >= 0
    raises."""
    if value is None:
        return None
    us = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            us = float(value) * 1000.0
        except OverflowError:
            us = math.inf
    if not 0 <= us < math.inf:
        raise PlanFileError(
            f"{where}: `{key}` must be a finite number of milliseconds >= 0, "
            f"got {short_repr(value)}"
        )
    return us


def colon_list(value: Any, key: str, where: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PlanFileError(
            f"{where}: `{key}` must be a colon-joined string, got {short_repr(value)}"
        )
    return [s.strip() for s in str(value).split(":") if s.strip()]


def known_keys(entry: dict[str, Any], known: Sequence[str], key: str, where: str) -> None:
    """A misspelt key would be ignored, its value lost without a word: refuse it."""
    for name in entry:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PlanFileError(
                f"{where}: unknown key {short_repr(name)} in `{key}`{hint}; known: "
                f"{', '.join(known)}"
            )
