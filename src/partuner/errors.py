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
