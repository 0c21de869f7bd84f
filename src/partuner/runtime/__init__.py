"""Running a plan: one worker per unit (Session), and checking outputs against the whole model."""

from partuner.runtime.check import CheckResult, OutputCheck, check_outputs, tolerance_for
from partuner.runtime.session import PartitionTrace, Session, TransferTrace, validate_feeds

__all__ = [
    "CheckResult",
    "OutputCheck",
    "PartitionTrace",
    "Session",
    "TransferTrace",
    "check_outputs",
    "tolerance_for",
    "validate_feeds",
]
