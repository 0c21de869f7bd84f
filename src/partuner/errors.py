"""partuner's exception hierarchy.

Every error a user can cause derives from :class:`PartunerError`. The CLI prints its message as
one line and exits with code 2; messages say what is wrong and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "PartunerError",
    "InvalidModelError",
    "InputShapeError",
    "UnitError",
    "UnitsFileError",
    "UnitUnavailableError",
    "ProfileError",
    "InfeasiblePlanError",
    "InvalidScheduleError",
    "PlanFileError",
    "PartitionCycleError",
    "RuntimeFailure",
    "yaml_expanded",
    "yaml_refusal",
]


class PartunerError(Exception):
    """Base class of every error partuner reports to a user."""


class InvalidModelError(PartunerError):
    """The ONNX file is missing, corrupt, or fails the checker."""


class InputShapeError(PartunerError):
    """An ``--input-shape`` is malformed, names an unknown input, or a dimension is unresolved."""


class UnitError(PartunerError):
    """A processing unit is misconfigured or failed."""


class UnitsFileError(UnitError):
    """The units file is malformed (unknown backend or option, bad link)."""


class UnitUnavailableError(UnitError):
    """A unit cannot run on this machine (missing package, device absent)."""


class ProfileError(PartunerError):
    """A profile is missing, corrupt, or does not match the model or units."""


class InfeasiblePlanError(PartunerError):
    """No plan exists (a node no unit can run) or a plan breaks a dependency."""


class InvalidScheduleError(InfeasiblePlanError):
    """A schedule violates the problem (precedence, overlap, forbidden unit, missing node)."""


class PlanFileError(PartunerError):
    """A plan file is malformed or does not match the model or units."""


class PartitionCycleError(PartunerError):
    """Cutting a model along a plan produced partitions that depend on each other cyclically."""


class RuntimeFailure(PartunerError):
    """A partition failed or timed out while a plan was running."""


def yaml_refusal(exc: Exception) -> str | None:
    """For an error of PyYAML's safe loaders meeting a tag they will not build (``!!python/...``:
    the way a YAML file runs code in an unsafe loader), words saying that this tag was refused,
    not that the YAML is malformed; None for any other error.

    >>> class E(Exception):
    ...     problem = "could not determine a constructor for the tag 'tag:yaml.org,2002:python/x'"
    ...     problem_mark = None
    >>> yaml_refusal(E())
    "uses the YAML tag 'tag:yaml.org,2002:python/x', which partuner refuses (a tag can make a YAML loader build objects or run code); write plain YAML data"
    """  # noqa: E501
    problem = str(getattr(exc, "problem", "") or "")
    head = "could not determine a constructor for the tag "
    if not problem.startswith(head):
        return None
    mark = getattr(exc, "problem_mark", None)
    line = f" at line {mark.line + 1}" if mark is not None else ""
    return (
        f"uses the YAML tag {problem[len(head) :]}{line}, which partuner refuses (a tag can make "
        "a YAML loader build objects or run code); write plain YAML data"
    )


#: the most values a YAML file partuner reads may hold once its aliases are expanded
YAML_MAX_VALUES = 1_000_000


def yaml_expanded(doc: object) -> str | None:
    """Words saying that ``doc`` (parsed YAML) holds more than :data:`YAML_MAX_VALUES` values
    once its aliases are expanded (a "billion laughs" file: small, endless to walk); else None.

    >>> a = [1] * 10
    >>> yaml_expanded({"k": [a] * 10}), yaml_expanded([[[a] * 100] * 100] * 10)[:30]
    (None, 'holds more than 1000000 values')
    """
    todo, n = [doc], 0
    while todo and n <= YAML_MAX_VALUES:
        v, n = todo.pop(), n + 1
        todo += [*v, *v.values()] if isinstance(v, dict) else v if isinstance(v, list) else []
    if n <= YAML_MAX_VALUES:
        return None
    return (
        f"holds more than {YAML_MAX_VALUES} values once its YAML aliases (*name) are expanded; "
        "write the data out plainly"
    )
