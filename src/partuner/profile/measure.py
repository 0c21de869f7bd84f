"""Timing one prepared sub-model: warm-up, adaptive repeats, robust statistics."""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from partuner.graph import ModelGraph
from partuner.profile.store import FAILED, OK, REFUSED, UNSUPPORTED, Measurement
from partuner.units import Unit

__all__ = [
    "difference_measurement",
    "failure",
    "overhead_model",
    "random_feeds",
    "refusal",
    "short_error",
    "time_call",
    "time_model",
]

#: how backends say, for good, that they cannot run an operator (most telling first):
#: onnxruntime's NOT_IMPLEMENTED status, OpenVINO's front-end conversion failure
_REFUSALS = ("No conversion rule found", "OpConversionFailure", "NOT_IMPLEMENTED")


def time_call(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 200,
    budget_s: float = 0.25,
    rel_precision: float = 0.03,
) -> Measurement:
    """Time ``fn`` until its median is known to about ``rel_precision``, within ``budget_s``.

    After ``min_repeats`` timed calls it stops as soon as the half-width of an approximate 95%
    confidence interval of the median (1.57 * IQR / sqrt(n)) is below ``rel_precision`` of the
    median, or the budget or ``max_repeats`` is reached.

    Examples
    --------
    >>> m = time_call(lambda: sum(range(100)), budget_s=0.01)
    >>> m.count >= 5 and m.p10_us <= m.median_us <= m.p90_us
    True
    """
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    t_end = time.perf_counter() + budget_s
    while True:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        n = len(samples)
        if n >= max_repeats:
            break
        if n >= min_repeats:
            if time.perf_counter() > t_end:
                break
            q = statistics.quantiles(samples, n=4)
            med = statistics.median(samples)
            if med > 0 and 1.57 * (q[2] - q[0]) / n**0.5 <= rel_precision * med:
                break
    arr = np.asarray(samples)
    return Measurement(
        median_us=float(np.median(arr)),
        p10_us=float(np.percentile(arr, 10)),
        p90_us=float(np.percentile(arr, 90)),
        count=len(samples),
    )


def random_feeds(graph: ModelGraph, names: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the values ``names``: floats ~ N(0, 1), integers and bools zero."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in names:
        v = graph.values[name]
        dt = np.dtype(v.dtype)
        if np.issubdtype(dt, np.floating):
            out[name] = rng.standard_normal(v.shape).astype(dt)
        else:
            out[name] = np.zeros(v.shape, dtype=dt)
    return out


def overhead_model() -> onnx.ModelProto:
    """A trivial one-node model (Identity of one float): what a call costs with no work."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="id")], "overhead", [x], [y]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


_ORT_STATUS = re.compile(
    r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Non-zero status code returned while running )?"
)
_ORT_NODE = re.compile(r"(\w+) node\. Name:('[^']*') Status Message: (/\S+:\d+ \S+\([^)]*\) )?")


def short_error(exc: BaseException) -> str:
    """``Type: first line`` of an exception, at most ~200 characters, without onnxruntime's
    boilerplate (its status prefix, the source file and function it failed in).

    >>> short_error(RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code "
    ...     "returned while running Reshape node. Name:'r' Status Message: /ort/x.h:47 "
    ...     "f::g(const T&) size == 4 was false. cannot reshape {2,4} to {1,4}"))
    "RuntimeError: Reshape node 'r': size == 4 was false. cannot reshape {2,4} to {1,4}"
    """
    text = (str(exc).strip().splitlines() or [""])[0]
    text = _ORT_NODE.sub(r"\1 node \2: ", _ORT_STATUS.sub("", text))
    return f"{type(exc).__name__}: {text[:200]}"


def refusal(exc: BaseException) -> str | None:
    """``Type: line`` if ``exc`` (or an exception it was raised from) is a backend's refusal.

    A refusal is a :class:`NotImplementedError` (what a vendor runner raises for an operator it
    lacks), onnxruntime's ``NotImplemented`` or a message with one of onnxruntime's or OpenVINO's
    refusal markers. Anything else (a compiler crash, a timeout, a runtime error) is a failure.

    Examples
    --------
    >>> refusal(NotImplementedError("no Sigmoid kernel"))
    'NotImplementedError: no Sigmoid kernel'
    >>> refusal(TimeoutError("compile command timed out")) is None
    True
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        found = isinstance(e, NotImplementedError) or type(e).__name__ == "NotImplemented"
        for marker in _REFUSALS:
            if marker in text:
                line = next(ln for ln in text.splitlines() if marker in ln)
                return f"{type(e).__name__}: {line.strip()[:200]}"
        if found:
            return short_error(e)
        e = e.__cause__ if e.__cause__ is not None or e.__suppress_context__ else e.__context__
    return None


def failure(exc: BaseException) -> Measurement:
    """The row for an item that could not be timed: ``unsupported`` (detail ``refused: ...``)
    if the backend refused it, else ``failed`` with the reason (timed again next run)."""
    why = refusal(exc)
    if why is not None:
        return Measurement(math.inf, math.inf, math.inf, 0, UNSUPPORTED, f"{REFUSED} {why}")
    return Measurement(math.inf, math.inf, math.inf, 0, FAILED, short_error(exc))


def difference_measurement(diffs: list[float], detail: dict[str, object]) -> Measurement:
    """The stored row of a time measured as differences of two timings (a wake-up, the cost
    of writing out): their median, 10th and 90th percentiles, each at least 0 (a difference of
    two noisy times can come out below 0, and the store refuses a negative time read back),
    ``detail`` as JSON."""
    arr = np.asarray(diffs, dtype=float)
    return Measurement(
        max(0.0, float(np.median(arr))),
        max(0.0, float(np.percentile(arr, 10))),
        max(0.0, float(np.percentile(arr, 90))),
        len(diffs),
        OK,
        json.dumps(detail),
    )


def time_model(
    unit: Unit,
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    budget_s: float,
) -> Measurement:
    """Prepare ``model`` on ``unit`` and time running it on ``feeds``; an error gives a row
    (:func:`failure`: ``unsupported`` if the backend refused it, else ``failed``), not a crash."""
    try:
        runner = unit.prepare(model)
    except Exception as exc:
        return failure(exc)
    try:
        return time_call(lambda: runner.run(feeds), budget_s=budget_s)
    except Exception as exc:
        return failure(exc)
    finally:
        runner.close()
