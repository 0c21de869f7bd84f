"""In-context node costs: the backend's own per-layer profile of the whole model, mapped back
to the ONNX nodes.

A node timed alone, as its own sub-model, pays what it never pays inside a large model: its
inputs and outputs converted to and from the backend's internal layout, a fresh output buffer,
cold caches. So isolated times do not add up to the whole model (squeezenet on onnxruntime: the
parts sum to over a third more than the whole). The backends profile each kernel of a whole-model
run themselves (onnxruntime ``enable_profiling``, OpenVINO ``PERF_COUNT``); this module maps
those kernels back to ONNX nodes (:meth:`Unit.layer_times` gives each kernel with the names it
may stand for):

- a name that is a compute node's name, or a value's name (that value's producer), maps the
  kernel to that node, also with ``/Part`` segments after it (OpenVINO's
  ``<node>/WithoutBiases``); a kernel may map to several nodes (OpenVINO lists every original
  layer a fused kernel was made from);
- a node no kernel names was fused into a neighbour (onnxruntime names a Conv+Relu kernel after
  the Relu's output): it joins the kernel of the next node of its chain (or, failing that, of
  the previous one);
- each kernel's time is shared among its nodes in proportion to their isolated times (a node
  timed at 0 µs, no more than a call costs, gets none of a fused Conv+Relu kernel's time; a
  node without an isolated time counts as the mean of the others);
- a layout or precision conversion OpenVINO inserts between two layers is named
  ``<from>_<layout or precision>..._<to>`` (``relu_abcd_acdb_conv``, ``conv_bf16_f32_concat``);
  it maps to the node it feeds (``<to>``), the node that needs the conversion; one that
  writes a model output (``<to>`` is ``<value>/sink_port_0``) stays unmapped: writing out
  is charged per byte by the planner (``profile/outputs.py``) where the value crosses a cut;
- kernels that map to no node (copies with other names) are reported as unmapped; the profiler
  spreads them over all nodes with its calibration to the whole-model time.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from partuner.graph import ModelGraph
from partuner.profile.groups import next_in_chain
from partuner.profile.measure import failure
from partuner.profile.store import OK, REFUSED, UNSUPPORTED, Measurement

if TYPE_CHECKING:
    import onnx

    from partuner.units import Unit

__all__ = ["LAYERS_SIG", "LayerMap", "layer_row", "map_layers", "read_layers"]

#: the store signature of per-layer profiles, ``LAYERS_SIG#<model digest>`` (a region's:
#: ``#<nodes digest>`` after it). Version 2: OpenVINO's CPU counters are read as averages
#: since compiling, the warm-up runs left out; rows of version 1 overstated its kernels.
LAYERS_SIG = "__layers__#2"

Kernel = tuple[Sequence[str], float]


@dataclass(frozen=True)
class LayerMap:
    """Kernels mapped to nodes: in-context µs of each node some kernel covers."""

    costs: dict[str, float]
    mapped_us: float  # kernel time attributed to nodes
    unmapped_us: float  # kernel time that names no node of the model
    kernels: int
    writes_us: float = 0.0  # of unmapped_us: conversions writing a model output out

    @property
    def share(self) -> float:
        """The share of the kernel time mapped to nodes, of what is not writing out."""
        return self.mapped_us / max(self.total_us - self.writes_us, 1e-9)

    @property
    def total_us(self) -> float:
        return self.mapped_us + self.unmapped_us


def map_layers(
    graph: ModelGraph, kernels: Sequence[Kernel], weight: Mapping[str, float]
) -> LayerMap:
    """Map per-kernel times to the compute nodes of ``graph``.

    ``weight[node]`` (the isolated time) shares a kernel among the nodes it covers, in
    proportion: a node weighing 0 (its isolated time no more than a call's) gets none of it,
    one with no finite weight counts as the mean of the kernel's others; nodes share equally
    only where none weighs more than 0. (Sharing equally wherever one node weighed 0 gave the
    Relu of an onnxruntime Conv+Relu kernel half the convolution's time, so that plans moving
    the Relu to another unit were predicted faster than they ran.)

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("squeezenet", image_size=32))
    >>> ks = [(("features.1_output_nchwc", "features.1_output"), 90.0), (("Reorder",), 4.0)]
    >>> ks += [((n.name,), 1.0) for n in g.compute_nodes[2:]]
    >>> m = map_layers(g, ks, {"features.0": 80.0, "features.1": 10.0})
    >>> m.costs["features.0"], m.costs["features.1"], m.unmapped_us
    (80.0, 10.0, 4.0)
    >>> m = map_layers(g, ks, {"features.0": 80.0, "features.1": 0.0})
    >>> m.costs["features.0"], m.costs["features.1"]
    (90.0, 0.0)
    """
    compute = {n.name for n in graph.compute_nodes}
    members: list[list[str]] = []
    unmapped = writes = 0.0
    for names, us in kernels:
        found: list[str] = []
        for k in names:
            node = _resolve(graph, compute, k)
            if node is not None and node not in found:
                found.append(node)
        if not found and len(names) == 1:
            node = _conversion_target(graph, compute, names[0])
            if node is not None:
                found.append(node)
        members.append(found)
        if not found:
            unmapped += float(us)
            if len(names) == 1 and _SINK in names[0]:
                writes += float(us)
    covered = {n for ms in members for n in ms}
    home: dict[str, int] = {}
    for i, ms in enumerate(members):
        for n in ms:
            home.setdefault(n, i)
    prev_of = {}
    for n in compute:
        nxt = next_in_chain(graph, n)
        if nxt is not None:
            prev_of[nxt] = n
    for n in (x.name for x in graph.compute_nodes):
        if n in covered:
            continue
        target = _walk(n, lambda x: next_in_chain(graph, x), home) or _walk(n, prev_of.get, home)
        if target is not None:
            members[home[target]].append(n)
            home[n] = home[target]
    costs: dict[str, float] = {}
    mapped = 0.0
    for (_, us), ms in zip(kernels, members, strict=True):
        if not ms:
            continue
        mapped += float(us)
        w = _shares([weight.get(n) for n in ms])
        total = sum(w)
        for n, x in zip(ms, w, strict=True):
            costs[n] = costs.get(n, 0.0) + float(us) * x / total
    return LayerMap(costs, mapped, unmapped, len(kernels), writes)


def _shares(weights: Sequence[float | None]) -> list[float]:
    """Weights to share a kernel by: the known ones (finite, >= 0) as they are, an unknown one
    as their mean; all 1 where none is above 0.

    >>> _shares([80.0, 0.0, None]), _shares([0.0, None]), _shares([math.inf, 2.0])
    ([80.0, 0.0, 40.0], [1.0, 1.0], [2.0, 2.0])
    """
    known = [float(x) for x in weights if x is not None and 0.0 <= x < math.inf]
    if not known or sum(known) <= 0.0:
        return [1.0] * len(weights)
    fill = sum(known) / len(known)
    return [float(x) if x is not None and 0.0 <= x < math.inf else fill for x in weights]


def _resolve(graph: ModelGraph, compute: set[str], name: str) -> str | None:
    """The compute node ``name`` stands for: a node's name, a value's name (its producer), or
    either followed by ``/Part`` segments a backend added (OpenVINO splits a Conv with a bias
    into ``<node>/WithoutBiases`` and an Add)."""
    for _ in range(3):
        if name in compute:
            return name
        if name in graph.values:
            producer = graph.values[name].producer
            return producer if producer in compute else None
        head, sep, _ = name.rpartition("/")
        if not sep or not head:
            return None
        name = head
    return None


#: a layout (``abcd``, ``aBcd16b``) or precision (``bf16``, ``f32``) in a conversion's name
_FORMAT = re.compile(r"[A-Za-z][A-Za-z0-9]{0,15}")
#: OpenVINO's name for a model output: ``<value>/sink_port_0``
_SINK = "/sink_port_"
#: longer kernel names are not taken apart (a stored profile is input: its names are bounded
#: work, whatever they hold)
_MAX_NAME = 1024


def _conversion_target(graph: ModelGraph, compute: set[str], name: str) -> str | None:
    """The node a conversion kernel named ``<from>_<format>..._<to>`` feeds, where both ends
    name nodes or values and 1..4 formats lie between; None if ``name`` is not one, or if it
    writes a model output (``<to>`` a ``/sink_port_`` of OpenVINO's).

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("squeezenet", image_size=32))
    >>> c = {n.name for n in g.compute_nodes}
    >>> _conversion_target(g, c, "features.0_abcd_acdb_features.1")
    'features.1'
    >>> _conversion_target(g, c, "Reorder_1") is None
    True
    >>> _conversion_target(g, c, "features.1_abcd_acdb_features.1_output/sink_port_0") is None
    True
    """
    if len(name) > _MAX_NAME:
        return None
    cuts = [i for i, ch in enumerate(name) if ch == "_"]
    for a, i in enumerate(cuts):
        if _resolve(graph, compute, name[:i]) is None:
            continue
        for b in range(a + 1, min(a + 6, len(cuts))):
            middle = name[i + 1 : cuts[b]].split("_")
            if not all(_FORMAT.fullmatch(t) for t in middle):
                break
            to = name[cuts[b] + 1 :]
            node = None if _SINK in to else _resolve(graph, compute, to)
            if node is not None:
                return node
    return None


def _walk(start: str, step: object, home: Mapping[str, int], limit: int = 3) -> str | None:
    """Follow ``step`` from ``start`` to the first node that has a kernel (at most ``limit``)."""
    x: str | None = start
    for _ in range(limit):
        x = step(x)  # type: ignore[operator]
        if x is None:
            return None
        if x in home:
            return x
    return None


def layer_row(unit: Unit, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Measurement:
    """``unit``'s per-layer profile of ``model`` run on ``feeds``, as a store row: the kernel
    time in total; in ``detail`` the kernels (names, µs) and, where the backend timed them,
    the median wall time of the profiled runs (:func:`read_layers`); ``unsupported`` if the
    backend has no per-layer profiling, ``failed``/``unsupported`` (:func:`failure`) if it
    raised."""
    try:
        found, wall = unit.layer_profile(model, dict(feeds))
    except Exception as exc:
        return failure(exc)
    if not found:
        return Measurement(0.0, 0.0, 0.0, 0, UNSUPPORTED, f"{REFUSED} no per-layer profiling")
    total = sum(t for _, t in found)
    detail = json.dumps({"kernels": [[list(k), t] for k, t in found], "wall_us": wall})
    return Measurement(total, total, total, len(found), OK, detail)


def read_layers(detail: str) -> tuple[list[Kernel], float | None] | None:
    """The kernels and the profiled runs' median wall time (µs; None where not timed) of a
    :func:`layer_row` detail (rows stored by earlier versions hold the kernels alone); None if
    the detail is not one (a store is an input like any other).

    Examples
    --------
    >>> read_layers('{"kernels": [[["conv"], 12.5]], "wall_us": 20.0}')
    ([(('conv',), 12.5)], 20.0)
    >>> read_layers('[[["conv"], 12.5]]')
    ([(('conv',), 12.5)], None)
    >>> read_layers('{"kernels": 3}') is None
    True
    """
    try:
        data = json.loads(detail)
        if not isinstance(data, dict):
            data = {"kernels": data}
        kernels = [(tuple(str(n) for n in k), float(t)) for k, t in data["kernels"]]
        wall = data.get("wall_us")
        wall = None if wall is None else float(wall)
    except (ValueError, TypeError, KeyError):
        return None
    if not all(math.isfinite(t) and t >= 0 for _, t in kernels):
        return None
    return kernels, wall if wall is not None and math.isfinite(wall) and wall > 0 else None
