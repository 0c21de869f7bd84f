"""Planning: a :class:`Problem` (DAG + costs + links) in, a :class:`Plan` (partitions) out.

Built-in schedulers: ``single`` (the one-unit baseline) and ``heft``; others come from the
``partuner.schedulers`` entry-point group. This package sees no ONNX and no backends.
"""

from partuner.plan.common import (
    critical_path_bound,
    earliest_insertion,
    lower_bound,
    min_cost,
    total_work_bound,
    upward_rank,
)
from partuner.plan.heft import HEFT  # importing a built-in scheduler registers it
from partuner.plan.partitions import (
    Partition,
    Plan,
    Timing,
    make_partitions,
    plan_from_assignment,
    plan_from_schedule,
    simulate,
)
from partuner.plan.problem import Edge, FusedGroup, Link, Problem
from partuner.plan.registry import Scheduler, get_scheduler, register, scheduler_names
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.single import SingleUnit

__all__ = [
    "Edge",
    "FusedGroup",
    "HEFT",
    "Link",
    "Partition",
    "Plan",
    "Problem",
    "Schedule",
    "Scheduler",
    "SingleUnit",
    "Slot",
    "Timing",
    "critical_path_bound",
    "earliest_insertion",
    "get_scheduler",
    "lower_bound",
    "make_partitions",
    "min_cost",
    "plan_from_assignment",
    "plan_from_schedule",
    "register",
    "scheduler_names",
    "simulate",
    "total_work_bound",
    "upward_rank",
]
