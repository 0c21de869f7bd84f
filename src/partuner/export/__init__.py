"""Plan -> partition sub-models (ONNX), the plan file (NEST-C keys + partuner's), the manifest."""

from partuner.export.cut import PartitionModel, cut, cut_nodes, dependency_order, partition_order
from partuner.export.planfile import (
    PartitionSpec,
    PlanFile,
    StreamSpec,
    atomic_write,
    plan_to_dict,
    read_plan,
    warn_keys_differ,
    write_plan,
)
from partuner.export.writer import export_plan, manifest

__all__ = [
    "PartitionModel",
    "PartitionSpec",
    "PlanFile",
    "StreamSpec",
    "atomic_write",
    "cut",
    "cut_nodes",
    "dependency_order",
    "export_plan",
    "manifest",
    "partition_order",
    "plan_to_dict",
    "read_plan",
    "warn_keys_differ",
    "write_plan",
]
