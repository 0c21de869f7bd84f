"""Plan -> partition sub-models (ONNX), the plan file (NEST-C keys + partuner's), the manifest."""

from partuner.export.cut import PartitionModel, cut, cut_nodes, partition_order
from partuner.export.planfile import (
    PartitionSpec,
    PlanFile,
    StreamSpec,
    atomic_write,
    plan_to_dict,
    read_plan,
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
    "export_plan",
    "manifest",
    "partition_order",
    "plan_to_dict",
    "read_plan",
    "write_plan",
]
