"""What a partition pays to write a value out for another partition, measured on its own.

A cut costs on both sides: the partition before it writes the values crossing it out of the
backend (converted back from its internal layout and precision, copied into a fresh array), the
partition after it reads them in. A unit's chain measurements (:mod:`partuner.profile.context`)
see both together, on one unit; a plan over two units pays them on two: an OpenVINO partition at
bf16 handing a tensor to onnxruntime pays its conversion out, onnxruntime its reading in. So the
writing side is measured apart, once per unit fingerprint (like the no-op call), on a fixed
model that stands for what plans cut: four 3x3 convolutions with ReLU on 64 x 56 x 56
activations, run as it is and with the three activations between them exported as extra outputs,
the two alternately. The median difference over the extra bytes is the unit's cost per byte
written out (``UnitProfile.boundary_out_us_per_byte``), and the chain fit then charges reading
what is left (:func:`~partuner.profile.context.fit_chain_costs` with ``out_rate``).

The model is fixed rather than the profiled model itself because what exporting a model's own
values costs depends on what the export breaks: exporting DenseNet's concatenated features
stops OpenVINO writing each layer into its concatenation in place, a cost a plan's cut pays only
where it falls there (measured that way, the rate came out nearly twice as high as on other
models and over-predicted plans that cut DenseNet often).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from partuner.profile.measure import difference_measurement, failure
from partuner.profile.store import OK, Measurement
from partuner.units import Unit

__all__ = ["OUTPUTS_SIGNATURE", "measure_outputs", "outputs_models"]

OUTPUTS_SIGNATURE = "__outputs__"
_SHAPE = (1, 64, 56, 56)
_LAYERS = 4


def outputs_models() -> tuple[onnx.ModelProto, onnx.ModelProto, int]:
    """The fixed model without and with its inner activations as extra outputs, and the
    bytes those extra outputs hold (seeded weights: the same bytes every time)."""
    rng = np.random.default_rng(0)
    c = _SHAPE[1]
    nodes, inits = [], []
    prev = "x"
    for i in range(_LAYERS):
        w = (rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"a{i}"]))
        prev = f"a{i}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(_SHAPE))

    def model(outputs: list[str]) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(_SHAPE)) for o in outputs]
        g = helper.make_graph(nodes, "outputs", [x], outs, initializer=inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    inner = [f"a{i}" for i in range(_LAYERS - 1)]
    nbytes = len(inner) * int(np.prod(_SHAPE)) * 4
    return model([prev]), model([*inner, prev]), nbytes


def measure_outputs(
    unit: Unit,
    lookup: Callable[[str, Callable[[], Measurement]], Measurement | None],
    budget_s: float,
) -> float:
    """µs per byte ``unit`` pays to write a value out for another partition (0 when the
    measurement failed or may not be made).

    ``lookup(signature, make)`` returns a stored measurement or makes (and stores) one; the row
    (:data:`OUTPUTS_SIGNATURE`) holds the median extra time of the runs with the extra outputs
    (µs) and, in its ``detail``, how many bytes they wrote.
    """

    def make() -> Measurement:
        try:
            plain, more, nbytes = outputs_models()
            diffs = _time_pairs(unit, plain, more, budget_s)
        except Exception as exc:  # a failed row (retried next run), not a crash
            return failure(exc)
        return difference_measurement(diffs, {"bytes": nbytes})

    m = lookup(OUTPUTS_SIGNATURE, make)
    if m is None or m.status != OK:
        return 0.0
    try:
        written = float(json.loads(m.detail)["bytes"])
    except (ValueError, KeyError, TypeError):  # a damaged row: as if not measured
        return 0.0
    return m.median_us / written if written > 0 and m.median_us >= 0 else 0.0


def _time_pairs(
    unit: Unit, plain: onnx.ModelProto, more: onnx.ModelProto, budget_s: float
) -> list[float]:
    """The difference (µs) of the model with its extra outputs over it without, run in pairs,
    which one goes first alternating, until the budget is spent (at least 7 pairs)."""
    a, b = unit.prepare(plain), unit.prepare(more)
    feeds = {"x": np.random.default_rng(1).standard_normal(_SHAPE).astype(np.float32)}
    try:
        for _ in range(2):
            a.run(feeds)
            b.run(feeds)
        diffs: list[float] = []
        t_end = time.perf_counter() + budget_s
        while len(diffs) < 7 or (time.perf_counter() < t_end and len(diffs) < 60):
            first, second = (a, b) if len(diffs) % 2 else (b, a)
            t0 = time.perf_counter()
            first.run(feeds)
            t1 = time.perf_counter()
            second.run(feeds)
            t2 = time.perf_counter()
            with_extra, without = (t1 - t0, t2 - t1) if first is b else (t2 - t1, t1 - t0)
            diffs.append((with_extra - without) * 1e6)
    finally:
        a.close()
        b.close()
    return diffs
