"""A model whose batch dimension partuner may set: one checked, shape-inferred graph per size.

Zoo models and most exports fix the batch to 1. :class:`BatchModel` rewrites dimension 0 of every
graph input to the requested size, clears the output shapes and re-infers them with
:func:`partuner.graph.load_model`. A model whose batch cannot change (a Reshape to a hard-coded
``[1, -1]``, a Flatten at axis 0, ...) is found on a probe size and reported with the first node
where the batch is lost, as a :class:`BatchDimensionError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping

import onnx

from partuner.errors import InputShapeError, InvalidModelError, PartunerError
from partuner.graph import ModelGraph, load_model

__all__ = ["BatchDimensionError", "BatchError", "BatchModel"]

log = logging.getLogger(__name__)

#: size tried when the model is opened, so that a fixed batch is reported before any timing
PROBE_BATCH = 2


class BatchError(PartunerError):
    """A batch request cannot be met (bad size, no unit can take the items, ...)."""


class BatchDimensionError(BatchError):
    """The model's batch dimension (dimension 0 of its inputs and outputs) cannot be changed."""


class BatchModel:
    """An ONNX model at any batch size.

    Parameters
    ----------
    model : the model; dimension 0 of every graph input is its batch dimension (fixed or not).
    name : how messages name the model (its path, ``zoo:NAME``...).
    input_shapes : full shapes for inputs with other dynamic dimensions; dimension 0 is replaced.

    Raises
    ------
    BatchDimensionError : the batch dimension cannot be changed (the message says why).

    Examples
    --------
    >>> from partuner.graph import zoo
    >>> bm = BatchModel(zoo.build("branchy", image_size=16), "zoo:branchy")
    >>> bm.at(5).values["output"].shape
    (5, 10)
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        name: str = "<memory>",
        input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.name = name
        self._proto = onnx.ModelProto()
        self._proto.CopyFrom(model)
        self._shapes = {k: tuple(v) for k, v in (input_shapes or {}).items()}
        self._cache: dict[int, ModelGraph] = {}
        self._lock = threading.Lock()
        key = {"shapes": {k: list(v[1:]) for k, v in sorted(self._shapes.items())}}
        blob = self._proto.SerializeToString() + json.dumps(key, sort_keys=True).encode()
        #: identifies the model (not its batch size) in the profile store
        self.digest = hashlib.sha256(blob).hexdigest()[:12]
        self.at(PROBE_BATCH)

    def at(self, batch: int) -> ModelGraph:
        """The model with batch size ``batch``: checked, named and shape-inferred (cached)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise BatchError(f"batch size must be an integer >= 1, got {batch!r}")
        with self._lock:
            graph = self._cache.get(batch)
            if graph is None:
                graph = self._cache[batch] = self._build(batch)
            return graph

    @property
    def inputs(self) -> list[str]:
        return list(self.at(PROBE_BATCH).inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self.at(PROBE_BATCH).outputs)

    def _fail(self, why: str) -> BatchDimensionError:
        return BatchDimensionError(f"the batch dimension of {self.name} cannot be changed: {why}")

    def _build(self, batch: int) -> ModelGraph:
        m = onnx.ModelProto()
        m.CopyFrom(self._proto)
        inits = {t.name for t in m.graph.initializer}
        inputs = [vi for vi in m.graph.input if vi.name not in inits]
        unknown = sorted(set(self._shapes) - {vi.name for vi in inputs})
        if unknown:
            raise InputShapeError(
                f"--input-shape names {unknown[0]!r}, but the model's inputs are "
                f"{[vi.name for vi in inputs]}"
            )
        for vi in inputs:
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or len(tt.shape.dim) == 0:
                raise self._fail(f"input {vi.name!r} is a scalar or has no shape")
            want = self._shapes.get(vi.name)
            if want is not None:
                if len(want) != len(tt.shape.dim):
                    raise InputShapeError(
                        f"--input-shape {vi.name} has {len(want)} dims but the model's input "
                        f"has rank {len(tt.shape.dim)}"
                    )
                for d, w in zip(tt.shape.dim[1:], want[1:], strict=True):
                    d.Clear()
                    d.dim_value = w
            elif any(not d.HasField("dim_value") or d.dim_value < 1 for d in tt.shape.dim[1:]):
                dims = ["N"] + [d.dim_param or "?" if not d.dim_value else str(d.dim_value)
                                for d in tt.shape.dim[1:]]  # fmt: skip
                raise InputShapeError(
                    f"input {vi.name!r} of {self.name} has dynamic dimensions besides the batch "
                    f"[{', '.join(dims)}]; fix them with --input-shape {vi.name}=1x... (all "
                    "dimensions; the first, the batch, is replaced)"
                )
            d0 = tt.shape.dim[0]
            d0.Clear()
            d0.dim_value = batch
        try:  # load_model re-infers every value and output shape from the new inputs
            graph = load_model(m)
        except InputShapeError:
            raise
        except InvalidModelError as exc:
            if batch == PROBE_BATCH or not self._cache:
                text = str(exc).split(": ", 1)[-1]
                raise self._fail(f"at batch {batch}, {text}") from None
            raise
        bad = [o for o in graph.outputs if not graph.values[o].shape[:1] == (batch,)]
        if bad:
            raise self._fail(_why_lost(graph, batch, bad[0]))
        log.debug("%s at batch %d: %d nodes", self.name, batch, len(graph.nodes))
        return graph


def _why_lost(graph: ModelGraph, batch: int, output: str) -> str:
    """Name the first node that reads a batch-``batch`` tensor and writes one that is not."""
    shape = list(graph.values[output].shape)
    for node in graph.nodes:
        ins = [graph.values[v] for v in node.inputs if v and not graph.values[v].is_initializer]
        if not any(v.shape[:1] == (batch,) for v in ins):
            continue
        for v in node.outputs:
            if v and graph.values[v].shape[:1] != (batch,):
                hint = (
                    "its target shape is hard-coded"
                    if node.op_type == "Reshape"
                    else "it folds the batch into other dimensions"
                    if node.op_type == "Flatten"
                    else "it does not keep dimension 0"
                )
                return (
                    f"at batch {batch}, node {node.name!r} ({node.op_type}) turns the batch into "
                    f"shape {list(graph.values[v].shape)} ({hint}); re-export the model with a "
                    "dynamic batch dimension"
                )
    return (
        f"at batch {batch}, output {output!r} has shape {shape}; dimension 0 of every output must "
        "be the batch"
    )
