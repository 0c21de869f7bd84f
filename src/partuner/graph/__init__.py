"""ONNX -> partuner's graph: nodes, values, shapes, bytes, FLOPs; parallel branch groups."""

from partuner.graph.model import (
    ModelGraph,
    NodeInfo,
    ValueInfo,
    load_model,
    parse_input_shapes,
    read_model_proto,
)

__all__ = [
    "ModelGraph",
    "NodeInfo",
    "ValueInfo",
    "load_model",
    "parse_input_shapes",
    "read_model_proto",
]
