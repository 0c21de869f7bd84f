"""Planning: a :class:`Problem` (DAG + costs + links) in, a :class:`Plan` (partitions) out.

Built-in schedulers: ``auto`` (the default: the best of all, then a local search), ``exact``
(CP-SAT), the baselines ``single``, ``static``, ``nestc``, ``nestc-repaired``, ``branch``,
``heft`` and ``cpop``; others come from the ``partuner.schedulers`` entry-point group. This
package sees no ONNX and no backends.
"""

from partuner.plan.auto import Auto
from partuner.plan.branch import BranchParallel
from partuner.plan.common import (
    critical_path_bound,
    earliest_insertion,
    lower_bound,
    min_cost,
    total_work_bound,
    upward_rank,
)
from partuner.plan.cpop import CPOP
from partuner.plan.dag_branches import (
    Branch,
    ParallelGroup,
    Siblings,
    nest_branches,
    nest_siblings,
    parallel_groups,
)
from partuner.plan.exact import Exact
from partuner.plan.heft import HEFT  # importing a built-in scheduler registers it
from partuner.plan.nestc import NestC, NestCRepaired
from partuner.plan.oracle import brute_force
from partuner.plan.partitions import (
    Partition,
    Plan,
    Timing,
    make_partitions,
    plan_from_assignment,
    plan_from_schedule,
    simulate,
)
from partuner.plan.pexact import PartitionExact
from partuner.plan.problem import Edge, FusedGroup, Link, Problem
from partuner.plan.registry import Scheduler, get_scheduler, register, scheduler_names
from partuner.plan.schedule import Schedule, Slot
from partuner.plan.single import SingleUnit
from partuner.plan.static import StaticPriority

__all__ = [
    "Branch",
    "BranchParallel",
    "CPOP",
    "Auto",
    "Edge",
    "Exact",
    "FusedGroup",
    "HEFT",
    "Link",
    "NestC",
    "NestCRepaired",
    "ParallelGroup",
    "Partition",
    "PartitionExact",
    "Plan",
    "Problem",
    "Schedule",
    "Scheduler",
    "Siblings",
    "SingleUnit",
    "Slot",
    "StaticPriority",
    "Timing",
    "brute_force",
    "critical_path_bound",
    "earliest_insertion",
    "get_scheduler",
    "lower_bound",
    "make_partitions",
    "min_cost",
    "nest_branches",
    "nest_siblings",
    "parallel_groups",
    "plan_from_assignment",
    "plan_from_schedule",
    "register",
    "scheduler_names",
    "simulate",
    "total_work_bound",
    "upward_rank",
]
