"""The ``modeled`` backend: a unit that does not exist here, with computed times.

Its numerics run on the host (an onnxruntime CPU session, one thread), so a plan that uses it
still produces real outputs; its time comes from a per-node roofline::

    time_us = overhead_us + sum over nodes of
              max(flops / (gflops * 1e3), (io_bytes + weight_bytes) / (gbps * 1e3))

Options
-------
gflops : peak GFLOP/s (required, > 0).
gbps : memory bandwidth in GB/s (required, > 0).
overhead_us : cost of one call, default 0.
ops : op types the unit runs (default: all).
conv_channel_multiple : if set, Conv runs only with group == 1 and input and output channel
    counts that are multiples of it (EVTA-style accelerators take 16).
precision : a label only (``f32`` default, ``bf16``, ``f16``, ``int8``); numerics stay f32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from partuner.units.base import (
    REQUIRED,
    Unit,
    opt_choice,
    opt_int,
    opt_number,
    register_backend,
)
from partuner.units.onnxruntime_unit import OnnxruntimeRunner

if TYPE_CHECKING:
    import onnx

    from partuner.graph.model import ModelGraph, NodeInfo

__all__ = ["ModeledUnit", "MODELED_PRECISIONS", "ROOFLINE_VERSION"]

MODELED_PRECISIONS = ("f32", "bf16", "f16", "int8")
#: bump when the time formula changes, so stored modeled figures are not reused
ROOFLINE_VERSION = "roofline1"


@register_backend("modeled")
class ModeledUnit(Unit):
    """A computed-time unit (roofline per node); numerics run on the host CPU.

    Examples
    --------
    >>> npu = ModeledUnit("npu", gflops=100, gbps=10, overhead_us=5)
    >>> npu.modeled, npu.availability()
    (True, (True, 'modeled: times are computed, not measured'))
    """

    modeled = True
    host_dependent = False
    OPTIONS = {
        "gflops": "peak GFLOP/s, number > 0 (required)",
        "gbps": "memory bandwidth in GB/s, number > 0 (required)",
        "overhead_us": "cost of one call in µs, number >= 0 (default 0)",
        "conv_channel_multiple": "Conv only with group 1 and channels multiple of it (integer)",
        "precision": f"label only: one of {list(MODELED_PRECISIONS)} (default f32)",
    }

    def _configure(self, options: dict[str, Any]) -> dict[str, Any]:
        gflops = opt_number(
            options, "gflops", REQUIRED, positive=True, hint=" (peak GFLOP/s, e.g. gflops: 300)"
        )
        gbps = opt_number(
            options, "gbps", REQUIRED, positive=True, hint=" (memory GB/s, e.g. gbps: 8)"
        )
        overhead = opt_number(options, "overhead_us", 0.0, minimum=0.0)
        multiple = opt_int(options, "conv_channel_multiple", None, minimum=1)
        self.precision = opt_choice(options, "precision", "f32", MODELED_PRECISIONS)
        return {
            "gflops": gflops,
            "gbps": gbps,
            "overhead_us": overhead,
            "conv_channel_multiple": multiple,
            "precision": self.precision,
        }

    @property
    def overhead_us(self) -> float:
        """The modeled cost of one call (charged once per partition)."""
        return float(self.options["overhead_us"])

    def backend_version(self) -> str:
        return ROOFLINE_VERSION

    def availability(self) -> tuple[bool, str]:
        return True, "modeled: times are computed, not measured"

    def _speed_options(self) -> dict[str, Any]:
        o = self.options
        return {"gflops": o["gflops"], "gbps": o["gbps"], "overhead_us": o["overhead_us"]}

    def _fingerprint_tag(self) -> str:
        o = self.options
        return f"{o['gflops']:g}gflops-{o['gbps']:g}gbps-{self.precision}"

    def supports(self, node: NodeInfo, graph: ModelGraph | None = None) -> bool:
        """Op-list check, plus the channel rule for Conv when ``conv_channel_multiple`` is set.

        The rule reads the weight shape from ``graph``; without a graph it raises ValueError
        rather than guess.
        """
        if not super().supports(node, graph):
            return False
        multiple = self.options["conv_channel_multiple"]
        if multiple is None or node.op_type != "Conv":
            return True
        if graph is None:
            raise ValueError(
                f"unit {self.name!r} has conv_channel_multiple: pass graph= to supports() so "
                f"it can read the channels of {node.name!r}"
            )
        group = int(node.attributes.get("group", 1))  # type: ignore[call-overload]
        w_shape = graph.values[node.inputs[1]].shape
        out_ch, in_ch = w_shape[0], w_shape[1] * group
        return group == 1 and in_ch % multiple == 0 and out_ch % multiple == 0

    def modeled_time_us(
        self,
        nodes: Sequence[NodeInfo],
        graph: ModelGraph | None = None,
        *,
        include_overhead: bool = True,
    ) -> float:
        """Roofline time of running ``nodes`` in one call (µs); does not check ``supports``.

        Examples
        --------
        >>> from partuner.graph.model import NodeInfo
        >>> n = NodeInfo("c", 0, "Conv", "", {}, ("x", "w"), ("y",), flops=2_000_000,
        ...              weight_bytes=1_000, io_bytes=9_000)
        >>> ModeledUnit("npu", gflops=100, gbps=10, overhead_us=5).modeled_time_us([n])
        25.0
        """
        flop_rate = self.options["gflops"] * 1e3  # FLOP per µs
        byte_rate = self.options["gbps"] * 1e3  # bytes per µs
        total = self.overhead_us if include_overhead else 0.0
        for n in nodes:
            total += max(n.flops / flop_rate, (n.io_bytes + n.weight_bytes) / byte_rate)
        return total

    def prepare(self, model: onnx.ModelProto) -> OnnxruntimeRunner:
        """A host onnxruntime session (CPU, one thread) computing the same numbers."""
        return OnnxruntimeRunner(model, unit_name=self.name, threads=1)
