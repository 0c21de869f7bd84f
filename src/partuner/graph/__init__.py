"""ONNX -> partuner's graph: nodes, values, shapes, bytes, FLOPs; parallel branch groups."""

from partuner.graph.branches import BranchGroup, parallel_branch_groups
from partuner.graph.model import (
    ModelGraph,
    NodeInfo,
    ValueInfo,
    load_model,
    parse_input_shapes,
    read_model_proto,
)
from partuner.graph.ops import onnx_op_types, op_type_problem

__all__ = [
    "BranchGroup",
    "ModelGraph",
    "NodeInfo",
    "ValueInfo",
    "load_model",
    "onnx_op_types",
    "op_type_problem",
    "parallel_branch_groups",
    "parse_input_shapes",
    "read_model_proto",
]
