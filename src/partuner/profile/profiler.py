"""Profile a model on a set of units: per-node costs, per-call overhead, links.

What is measured, per real unit (units with equal fingerprints are measured once):

- the **call overhead**: the median time of running a trivial one-node model;
- each distinct **node signature** alone, as its own one-node sub-model, minus the call overhead;
- the **model cut in context** (``profile/context.py``): whole, and cut into 4, 16 and 32 chunks
  run one after the other, fitted to a cost per extra partition and per byte crossing a cut.
  A partition's cost is not the sum of its operators' isolated costs (backends fuse operators
  and keep data in their own layouts inside one call), so the per-node costs are scaled so
  that, on each unit, per-partition cost + sum of nodes = whole-model time. The scale and the
  raw additivity error (no-op call + isolated nodes vs whole) are reported.

Modeled units are not timed: their costs come from their roofline model and are labelled modeled.
Links that the units file declares are taken as declared; two real units that share host memory
hand tensors over without a copy, and that hand-off (a thread wake-up) is measured here.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from partuner.errors import UnitUnavailableError
from partuner.export.cut import cut_nodes
from partuner.graph import ModelGraph
from partuner.profile.context import fit_chain_costs, measure_chains
from partuner.profile.measure import handoff_latency_us, random_feeds, time_call
from partuner.profile.signature import node_signature
from partuner.profile.store import Measurement, ProfileStore
from partuner.units import Link, Unit, UnitSet

__all__ = ["Profile", "UnitProfile", "profile_model", "Progress"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]  # (done, total, what)

_OVERHEAD_SIG = "__call_overhead__"


@dataclass
class UnitProfile:
    """What was learnt about one unit."""

    unit: str
    fingerprint: str
    modeled: bool
    overhead_us: float  # charged per partition: the fitted in-context cost of one more cut
    whole_us: float | None = None  # the whole model as one call (None: the unit cannot run all)
    parts_us: float | None = None  # no-op call + sum of isolated node times, before scaling
    scale: float = 1.0  # factor applied to node costs so that overhead + nodes == whole
    call_us: float = 0.0  # a no-op call
    boundary_us_per_byte: float = 0.0  # per byte a partition reads from another partition

    @property
    def additivity_error(self) -> float | None:
        """(sum of parts - whole) / whole, before scaling; None if not measured."""
        if self.whole_us is None or self.parts_us is None or self.whole_us <= 0:
            return None
        return (self.parts_us - self.whole_us) / self.whole_us


@dataclass
class Profile:
    """Costs of every compute node on every unit, in µs (``math.inf``: cannot run there)."""

    model: str
    costs: dict[str, dict[str, float]]
    units: dict[str, UnitProfile]
    links: dict[tuple[str, str], Link]
    link_sources: dict[tuple[str, str], str]  # "declared" | "measured" | "default"
    signatures: int = 0
    measured: int = 0
    reused: int = 0
    unsupported: list[tuple[str, str, str]] = field(default_factory=list)
    skipped_units: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0

    def link(self, a: str, b: str) -> Link:
        return self.links.get((a, b)) or self.links[(b, a)]


def _overhead_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="id")], "overhead", [x], [y]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _model_digest(graph: ModelGraph) -> str:
    h = hashlib.sha1()
    for n in graph.nodes:
        h.update(f"{n.op_type}|{n.inputs}|{n.outputs}|{sorted(n.attributes.items())}".encode())
    for v in sorted(graph.values.values(), key=lambda v: v.name):
        h.update(f"{v.name}|{v.shape}|{v.dtype}".encode())
    return h.hexdigest()[:16]


def _host_memory(unit: Unit) -> bool:
    return bool(getattr(unit, "host_memory", False)) and not unit.modeled


def _time_model(
    unit: Unit, graph: ModelGraph | None, model: onnx.ModelProto, inputs: list[str], budget_s: float
) -> Measurement:
    try:
        runner = unit.prepare(model)
    except Exception as exc:  # a backend rejecting a sub-model is data, not a crash
        return Measurement(math.inf, math.inf, math.inf, 0, "unsupported", _short(exc))
    try:
        feeds = (
            random_feeds(graph, inputs)
            if graph is not None
            else {"x": np.zeros(1, dtype=np.float32)}
        )
        return time_call(lambda: runner.run(feeds), budget_s=budget_s)
    except Exception as exc:
        return Measurement(math.inf, math.inf, math.inf, 0, "unsupported", _short(exc))
    finally:
        runner.close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def profile_model(
    graph: ModelGraph,
    units: UnitSet,
    *,
    store: ProfileStore | None = None,
    progress: Progress | None = None,
    budget_s: float = 0.25,
    skip_unavailable: bool = False,
    calibrate: bool = True,
) -> Profile:
    """Measure (or look up) every compute node of ``graph`` on every unit of ``units``.

    Parameters
    ----------
    graph : the loaded model.
    units : the unit set; each unit must be available unless ``skip_unavailable``.
    store : where measurements are looked up and saved; ``None`` measures everything afresh.
    progress : called as ``progress(done, total, what)`` after each item.
    budget_s : time budget per timed item (adaptive repeats stop earlier when stable).
    skip_unavailable : leave unavailable units out (recorded in ``skipped_units``).
    calibrate : scale node costs per unit so that they add up to the whole-model time.

    Raises
    ------
    UnitUnavailableError : a unit cannot run here (and ``skip_unavailable`` is off).
    """
    t_start = time.perf_counter()
    active: dict[str, Unit] = {}
    skipped: dict[str, str] = {}
    for name, unit in units.units.items():
        ok, why = unit.availability()
        if ok:
            active[name] = unit
        elif skip_unavailable:
            skipped[name] = why
            log.warning("skipping unit %s: %s", name, why)
        else:
            raise UnitUnavailableError(
                f"unit {name!r} is not available here: {why}; remove it from the units file "
                "or pass --skip-unavailable"
            )
    if not active:
        raise UnitUnavailableError("no unit of the units file is available here")

    nodes = graph.compute_nodes
    sig_of = {n.name: node_signature(graph, n) for n in nodes}
    rep: dict[str, str] = {}  # signature -> first node with it
    for n in nodes:
        rep.setdefault(sig_of[n.name], n.name)

    # One measuring representative per fingerprint among real units.
    groups: dict[str, list[str]] = {}
    for name, unit in active.items():
        if not unit.modeled:
            groups.setdefault(unit.fingerprint(), []).append(name)
    total = len(groups) * (len(rep) + 2)
    done = 0
    measured = reused = 0

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, what)

    def lookup_or_time(
        unit: Unit, fp: str, sig: str, make: Callable[[], Measurement]
    ) -> Measurement:
        nonlocal measured, reused
        m = store.get(fp, sig) if store is not None else None
        if m is not None:
            reused += 1
            return m
        m = make()
        measured += 1
        if store is not None:
            store.put(fp, sig, m, description=str(unit.describe()))
        return m

    costs: dict[str, dict[str, float]] = {n.name: {} for n in nodes}
    uprof: dict[str, UnitProfile] = {}
    unsupported: list[tuple[str, str, str]] = []
    digest = _model_digest(graph)
    for fp, names in groups.items():
        unit = active[names[0]]
        ov = lookup_or_time(
            unit,
            fp,
            _OVERHEAD_SIG,
            lambda u=unit: _time_model(u, None, _overhead_model(), [], budget_s),
        )
        if ov.status != "ok":
            ov = Measurement(0.0, 0.0, 0.0, 0)
        tick(f"{names[0]}: call overhead")
        overhead = ov.median_us
        raw: dict[str, float] = {}
        for sig, node_name in rep.items():
            node = graph.node(node_name)
            if not unit.supports(node, graph):
                raw[sig] = math.inf
                tick(f"{names[0]}: {sig.split('#')[0]} (unsupported)")
                continue

            def make(u: Unit = unit, n: str = node_name, s: str = sig) -> Measurement:
                model, ins, _ = cut_nodes(graph, s.split("#")[0], [n])
                return _time_model(u, graph, model, ins, budget_s)

            m = lookup_or_time(unit, fp, sig, make)
            if m.status != "ok":
                raw[sig] = math.inf
                unsupported.append((node_name, names[0], m.detail))
            else:
                raw[sig] = max(m.median_us - overhead, 0.0)
            tick(f"{names[0]}: {sig.split('#')[0]}")
        call_us = overhead
        parts = overhead + sum(raw[sig_of[n.name]] for n in nodes)
        whole: float | None = None
        per_byte = 0.0
        if math.isfinite(parts) and calibrate:
            points = measure_chains(
                unit,
                graph,
                lambda sig, make, u=unit, f=fp: lookup_or_time(u, f, sig, make),
                digest,
                max(budget_s, 0.5),
            )
            fit = fit_chain_costs(points)
            if fit is not None:
                whole = fit.whole_us
                overhead = min(max(overhead, fit.per_partition_us), whole)
                per_byte = fit.per_byte_us
        tick(f"{names[0]}: the model cut in context")
        scale = 1.0
        if calibrate and whole is not None and parts > call_us:
            scale = max(whole - overhead, 0.0) / (parts - call_us)
        for name in names:
            uprof[name] = UnitProfile(
                name,
                fp,
                False,
                overhead,
                whole,
                parts if math.isfinite(parts) else None,
                scale,
                call_us=call_us,
                boundary_us_per_byte=per_byte,
            )
            for n in nodes:
                costs[n.name][name] = raw[sig_of[n.name]] * scale

    for name, unit in active.items():
        if not unit.modeled:
            continue
        overhead = unit.modeled_time_us([], graph)
        for n in nodes:
            costs[n.name][name] = (
                unit.modeled_time_us([n], graph) - overhead if unit.supports(n, graph) else math.inf
            )
        whole_m = overhead + sum(costs[n.name][name] for n in nodes)
        uprof[name] = UnitProfile(
            name,
            unit.fingerprint(),
            True,
            overhead,
            whole_m if math.isfinite(whole_m) else None,
            whole_m,
            1.0,
        )

    links: dict[tuple[str, str], Link] = {}
    sources: dict[tuple[str, str], str] = {}
    handoff: float | None = None
    names = list(active)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if frozenset((a, b)) in units.declared_links:
                links[(a, b)], sources[(a, b)] = units.link(a, b), "declared"
            elif _host_memory(active[a]) and _host_memory(active[b]):
                if handoff is None:
                    handoff = handoff_latency_us().median_us
                links[(a, b)], sources[(a, b)] = Link(handoff, math.inf), "measured"
            else:
                links[(a, b)], sources[(a, b)] = units.link(a, b), "default"
    return Profile(
        model=graph.source,
        costs=costs,
        units=uprof,
        links=links,
        link_sources=sources,
        signatures=len(rep),
        measured=measured,
        reused=reused,
        unsupported=unsupported,
        skipped_units=skipped,
        wall_s=time.perf_counter() - t_start,
    )
