"""Profile a model on a set of units: per-node costs, fused groups, per-call overhead, links.

What is measured, per real unit (units with equal fingerprints are measured once):

- the **call overhead**: the median time of running a trivial one-node model;
- each distinct **node signature** alone, as its own one-node sub-model, minus the call overhead;
- each distinct **fused group** asked for (``fuse`` patterns, or every chain of 2..K nodes with
  ``fuse_auto``; see ``profile/groups.py``) as its own sub-model, minus the call overhead;
  automatic groups are kept only where they differ from their members' sum beyond the noise;
- the **model cut in context** (``profile/context.py``): whole, and cut into 4, 16 and 32 chunks
  run one after the other, fitted to a cost per extra partition and per byte crossing a cut.
  A partition's cost is not the sum of its operators' isolated costs (backends fuse operators
  and keep data in their own layouts inside one call), so the per-node (and group) costs are
  scaled so that, on each unit, per-partition cost + sum of nodes - fused-group savings =
  whole-model time. The raw additivity error (no-op call + isolated nodes vs whole), with and
  without the groups' savings, is reported;
- the **model's own per-layer profile** (``profile/layers.py``: onnxruntime profiling, OpenVINO
  ``PERF_COUNT``) of the whole model, mapped back to the ONNX nodes: where a backend gives one,
  the node costs are these in-context times (nodes no kernel covers keep their isolated time on
  the same scale), calibrated to the whole-model time like the isolated ones. Fusion is then
  already in the node costs, so that unit's fused groups give no further discount. Its
  additivity error (no-op call + kernel times vs whole) is reported too.

Modeled units are not timed: their costs come from their roofline model and are labelled modeled.
Units measured elsewhere (``remote``: a kit's results or a NEST-C profile imported into the store)
are profiled from the store only. Links that the units file declares are taken as declared; links
between real units are measured and fitted (``profile/transfer.py``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from partuner.errors import ProfileError
from partuner.export.cut import cut_nodes
from partuner.graph import ModelGraph
from partuner.profile.active import drop_idle_units, resolve_units
from partuner.profile.arguments import check_arguments
from partuner.profile.context import fit_chain_costs, measure_chains, measure_wake
from partuner.profile.corun import corun_participants, measure_corun
from partuner.profile.fleet import add_transport, fleet_links, profile_on_nodes, transport_costs
from partuner.profile.groups import (
    candidate_groups,
    differs_beyond_noise,
    fused_saving,
    group_signature,
)
from partuner.profile.layers import LAYERS_SIG, LayerMap, layer_row, map_layers, read_layers
from partuner.profile.load import LoadMeter, is_busy, stale, time_again, warn_busy
from partuner.profile.measure import overhead_model, random_feeds, time_model
from partuner.profile.outputs import measure_outputs
from partuner.profile.regions import PlanFit, RegionCosts, RegionStat, profile_regions
from partuner.profile.signature import model_digest, node_signature
from partuner.profile.store import (
    FAILED,
    NET,
    OK,
    REFUSED,
    UNSUPPORTED,
    Measurement,
    ProfileStore,
    net_us,
)
from partuner.profile.transfer import LINK_SIZES, LinkFit, profile_links
from partuner.units import Link, Unit, UnitSet
from partuner.units.ray_unit import RayUnit

__all__ = [
    "OVERHEAD_SIG",
    "Profile",
    "Progress",
    "UnitProfile",
    "profile_model",
]

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]  # (done, total, what)

OVERHEAD_SIG = "__call_overhead__"

#: the least share of a per-layer profile's time that must map to ONNX nodes for the node
#: costs to come from it (the rest is layout conversion at the model's edges and the like)
MIN_MAPPED = 0.8


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
    boundary_out_us_per_byte: float = 0.0  # per byte it writes out for another partition
    fused_parts_us: float | None = None  # parts_us less the fused groups' savings (unscaled)
    layer_parts_us: float | None = None  # no-op call + the backend's per-layer kernel times
    layer_mapped: float | None = None  # share of the kernel time mapped to ONNX nodes
    regions: tuple[RegionStat, ...] = ()  # a unit that cannot run the whole model: its regions
    wake_us: float = 0.0  # in overhead_us: a partition started after its unit was idle
    layer_wall_us: float | None = None  # the per-layer profile's own runs, their median time
    ray_call_us: float = 0.0  # in overhead_us: a call through Ray (a unit on a Ray node)
    #: in overhead_us: what a restricted unit's pieces took more in a plan than charged
    plan_extra_us: float = 0.0
    #: the weight of the per-byte costs (in the two rates) fitted on those pieces
    plan_io_scale: float = 1.0
    #: its work's time while units of other lanes work too, over alone (profile/corun.py;
    #: None: not measured, as for a modeled, remote or Ray unit, or a unit working alone)
    corun: float | None = None

    @property
    def additivity_error(self) -> float | None:
        """(sum of parts - whole) / whole, before scaling; None if not measured."""
        return _rel(self.parts_us, self.whole_us)

    @property
    def fused_additivity_error(self) -> float | None:
        """As :attr:`additivity_error`, with the fused groups' savings taken off the parts."""
        return _rel(self.fused_parts_us, self.whole_us)

    @property
    def layer_additivity_error(self) -> float | None:
        """As :attr:`additivity_error` for the in-context parts: the no-op call plus the
        backend's own per-layer times of a whole-model run, against the wall time of the same
        runs where the backend timed them (None: no per-layer profile)."""
        whole = self.layer_wall_us if self.layer_wall_us is not None else self.whole_us
        return _rel(self.layer_parts_us, whole)

    @property
    def costs_from(self) -> str:
        """Where the node costs come from: ``layers`` (the whole model's per-layer profile),
        ``regions`` (a restricted unit's regions, each timed in context), ``isolated`` or
        ``modeled``."""
        if self.modeled:
            return "modeled"
        if self.layer_parts_us is not None:
            return "layers"
        if any(r.source != "isolated" for r in self.regions):
            return "regions"
        return "isolated"

    @property
    def region_error(self) -> float | None:
        """The largest in-context additivity error (by magnitude) of the unit's regions."""
        errs = [r.error for r in self.regions if r.error is not None]
        return max(errs, key=abs) if errs else None


def _rel(parts: float | None, whole: float | None) -> float | None:
    if whole is None or parts is None or whole <= 0 or not math.isfinite(parts):
        return None
    return (parts - whole) / whole


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
    unsupported: list[tuple[str, str, str]] = field(default_factory=list)  # (node, unit, why)
    # (node, unit, why): timing failed; unable in this profile only, timed again next run
    failed: list[tuple[str, str, str]] = field(default_factory=list)
    skipped_units: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    # fused groups: (member nodes, unit -> µs on the scale of ``costs``)
    groups: list[tuple[tuple[str, ...], dict[str, float]]] = field(default_factory=list)
    group_signatures: int = 0  # distinct group signatures considered
    groups_kept: int = 0  # places (chains of the model) whose group is kept on some unit
    link_fits: dict[tuple[str, str], LinkFit] = field(default_factory=dict)
    links_measured: int = 0  # link rows timed now
    remote: dict[str, str] = field(default_factory=dict)  # unit -> fingerprint, store only
    # (unit, what, share): rows in use that were timed while other work took more than
    # BUSY_SHARE of the machine's cores (timed again by the next profiling run)
    busy: list[tuple[str, str, float]] = field(default_factory=list)
    again: int = 0  # of ``measured``: rows stored busy or before loads were noted, timed again

    def link(self, a: str, b: str) -> Link:
        return self.links.get((a, b)) or self.links[(b, a)]


def _net(m: Measurement, call_us: float) -> Measurement:
    if m.detail.startswith(NET):
        return m
    return Measurement(
        net_us(m, call_us), max(m.p10_us - call_us, 0.0), max(m.p90_us - call_us, 0.0), m.count
    )


def _reusable(m: Measurement, can_time: bool) -> bool:
    """Whether a stored row answers for good: ``ok``, or ``unsupported`` as refused by the
    backend or imported; a ``failed`` row (or an ``unsupported`` one written by partuner before
    failures were told apart) is timed again where the unit is here to time it."""
    if m.status == OK or not can_time:
        return True
    return m.status == UNSUPPORTED and m.detail.startswith((REFUSED, NET))


def _label(sig: str) -> str:
    """What a store signature times, in words, for warnings."""
    head, _, rest = sig.partition("#")
    if head == OVERHEAD_SIG:
        return "the call overhead"
    if head == "__chain__":
        k = rest.split("#")[1].lstrip("k")
        return "the whole model" if k == "1" else f"the model cut in {k} chunks"
    if head == "__layers__":
        return "the per-layer profile"
    if head == "__wake__":
        return "the cost of waking up after idling"
    if head == "__region__":
        return "a region of the model"
    if head == "__plancycle__":
        return "a region's pieces run as a plan runs them"
    if head == "__outputs__":
        return "the cost of writing outputs"
    if "+" in sig:
        return "the fused group " + "+".join(part.split("#")[0] for part in sig.split("+"))
    return head


def profile_model(
    graph: ModelGraph,
    units: UnitSet,
    *,
    store: ProfileStore | None = None,
    progress: Progress | None = None,
    budget_s: float = 0.25,
    skip_unavailable: bool = False,
    calibrate: bool = True,
    fuse: Sequence[Sequence[str]] | None = None,
    fuse_auto: int = 0,
    remote: Mapping[str, str] | None = None,
    link_sizes: Sequence[int] = LINK_SIZES,
    layers: bool = True,
    corun: bool = False,
    corun_again: bool = False,
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
    fuse : op-type patterns (``[["Conv", "Relu"], ...]``) whose chains become fused groups.
    fuse_auto : if >= 2, also time every chain of 2..``fuse_auto`` nodes and keep those whose
        time differs from their members' sum beyond the noise.
    remote : unit name -> fingerprint for units measured elsewhere (kit results, NEST-C
        profiles): read from ``store`` only, never timed here.
    link_sizes : tensor sizes (bytes) the links are measured at.
    layers : take node costs from the backend's own per-layer profile of the whole model where
        it has one (``calibrate`` must be on); otherwise from the isolated times.
    corun : also measure how much the units slow each other when all work at once
        (``profile/corun.py``; what plans charge where units run at once; about
        6 x (units + 1) x ``budget_s`` seconds, at least 12 x (units + 1) x 5 runs of the
        slowest workload; reused from the store).
    corun_again : with ``corun``, time it again even where the store has it (replacing it).

    Raises
    ------
    UnitUnavailableError : a unit cannot run here (and ``skip_unavailable`` is off).
    ProfileError : a ``remote`` unit lacks stored measurements for some node of the model.
    """
    check_arguments(graph, units, store, budget_s, fuse, fuse_auto)
    t_start = time.perf_counter()
    remote = dict(remote or {})
    for u in units:  # Ray units' actors start at once (a worker process each)
        if isinstance(u, RayUnit) and u.name not in remote:
            u.start()
    active, skipped = resolve_units(units, remote, skip_unavailable)
    nodes = graph.compute_nodes
    drop_idle_units(graph, active, skipped)
    fleet = {n: u for n, u in active.items() if isinstance(u, RayUnit) and n not in remote}
    timed_there = 0  # rows Ray nodes timed now (then read back from the store)
    if fleet and store is None:  # the nodes' rows need a store: one in memory
        store = ProfileStore(":memory:")
    if fleet:  # profiled on their nodes first, then read from the store like remote units
        settings = {"budget_s": budget_s, "calibrate": calibrate, "layers": layers}
        settings.update(fuse=[list(f) for f in fuse or ()], fuse_auto=fuse_auto)
        if progress is not None:  # the stage starts now, not after the nodes' work
            progress(0, 1, f"{', '.join(fleet)}: on Ray nodes")
        on_nodes, timed_there = profile_on_nodes(graph, fleet, store, settings, log.info)
        remote.update(on_nodes)
    order = [n.name for n in nodes]
    sig_of = {n.name: node_signature(graph, n) for n in nodes}
    rep: dict[str, str] = {}  # signature -> first node with it
    for n in nodes:
        rep.setdefault(sig_of[n.name], n.name)
    cands = candidate_groups(graph, fuse, fuse_auto)
    gsig_of = {c: group_signature(sig_of[m] for m in c) for c, _ in cands}
    grep: dict[str, tuple[str, ...]] = {}
    for c, _ in cands:
        grep.setdefault(gsig_of[c], c)
    explicit = {gsig_of[c] for c, e in cands if e}

    fps = {n: remote.get(n) or u.fingerprint() for n, u in active.items() if not u.modeled}
    # units measured together: equal fingerprints and equal op lists (a unit restricted to some
    # ops is costed on its own regions; node rows are still shared through the store)
    by_fp: dict[tuple[str, frozenset[str] | None], list[str]] = {}
    for name, fp in fps.items():
        by_fp.setdefault((fp, active[name].ops), []).append(name)
    total = len(by_fp) * (len(rep) + len(grep) + 2) + 1
    done = reused = 0
    measured = timed_there
    missing: list[tuple[str, str]] = []
    meter = LoadMeter()
    meter.read()
    busy: list[tuple[str, str, float]] = []
    again = 0  # rows stored while the machine was busy, timed again
    shown: dict[str, str] = {}  # unit measured -> the units sharing its rows, for warnings

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, what)

    def lookup(
        unit: Unit, fp: str, sig: str, make: Callable[[], Measurement], can_time: bool, label: str
    ) -> Measurement | None:
        nonlocal measured, reused, again
        m = store.get(fp, sig) if store is not None else None
        if m is not None and _reusable(m, can_time) and not (can_time and stale(m, meter)):
            reused += 1
        elif not can_time:
            missing.append((unit.name, sig))
            return None
        else:
            again += m is not None and m.status == OK  # stored busy, or before loads were noted
            m, new = time_again(m, make, meter)
            measured += 1
            if store is not None and new:
                store.put(fp, sig, m, description=str(unit.describe()))
        # rows of remote units are not timed again here; those of Ray nodes are, there
        if (can_time or unit.name in fleet) and m.status == OK and is_busy(m.load):
            busy.append((shown.get(unit.name, unit.name), label or _label(sig), m.load or 0.0))
        if m.status == FAILED and not sig.startswith("__region__"):  # regions.py says why
            log.warning(
                "unit %s: timing %s failed (%s); it counts as unable to run it in this profile "
                "only, and %s",
                unit.name,
                label or _label(sig),
                m.detail,
                "the next profiling run times it again" if can_time else "a new kit run may not",
            )
        return m

    costs: dict[str, dict[str, float]] = {n.name: {} for n in nodes}
    group_costs: dict[tuple[str, ...], dict[str, float]] = {}
    uprof: dict[str, UnitProfile] = {}
    unsupported: list[tuple[str, str, str]] = []
    failed: list[tuple[str, str, str]] = []
    digest = model_digest(graph)
    kept_any: set[tuple[str, ...]] = set()
    for (fp, _), names in by_fp.items():
        local = [n for n in names if n not in remote]
        can_time = bool(local)
        unit = active[(local or names)[0]]
        shown[unit.name] = "/".join(names)

        def look(
            sig: str,
            make: Callable[[], Measurement],
            label: str = "",
            u: Unit = unit,
            f: str = fp,
            t: bool = can_time,
        ) -> Measurement | None:
            return lookup(u, f, sig, make, t, label)

        def make_overhead(u: Unit = unit) -> Measurement:
            return time_model(u, overhead_model(), {"x": np.zeros(1, np.float32)}, budget_s)

        ov = look(OVERHEAD_SIG, make_overhead)
        if ov is None or ov.status != OK:  # imported profiles may come without one
            ov = Measurement(0.0, 0.0, 0.0, 0)
        tick(f"{names[0]}: call overhead")
        call_us = ov.median_us
        raw: dict[str, Measurement] = {}  # net of the call overhead; inf: cannot
        for sig, node_name in rep.items():
            node = graph.node(node_name)
            m: Measurement | None = None
            if unit.supports(node, graph):

                def make(u: Unit = unit, n: str = node_name, s: str = sig) -> Measurement:
                    model, ins, _ = cut_nodes(graph, s.split("#")[0], [n])
                    return time_model(u, model, random_feeds(graph, ins), budget_s)

                m = look(sig, make, node_name)
                if m is not None and m.status != OK:
                    (failed if m.status == FAILED else unsupported).append(
                        (node_name, names[0], m.detail)
                    )
            ok = m is not None and m.status == OK
            raw[sig] = _net(m, call_us) if ok else Measurement(math.inf, math.inf, math.inf, 0)
            tick(f"{names[0]}: {sig.split('#')[0]}")
        kept: dict[str, float] = {}
        for gsig, members in grep.items():
            mem = [raw[sig_of[n]] for n in members]
            if all(math.isfinite(x.median_us) for x in mem):

                def make_group(u: Unit = unit, ms: tuple[str, ...] = members) -> Measurement:
                    model, ins, _ = cut_nodes(graph, "group", ms)
                    return time_model(u, model, random_feeds(graph, ins), budget_s)

                g = look(gsig, make_group)
                if g is not None and g.status == OK:
                    net = _net(g, call_us)
                    if gsig in explicit or differs_beyond_noise(net, mem):
                        kept[gsig] = net.median_us
            tick(f"{names[0]}: group {gsig.count('+') + 1} nodes")
        node_raw = {n: raw[sig_of[n]].median_us for n in order}
        mine = [(c, kept[gsig_of[c]]) for c, _ in cands if gsig_of[c] in kept]
        kept_any.update(c for c, _ in mine)
        parts = call_us + sum(node_raw.values())
        fused = parts - fused_saving(order, mine, node_raw) if math.isfinite(parts) else parts
        whole: float | None = None
        overhead, per_byte, wake = call_us, 0.0, 0.0
        # a property of the unit (measured once per fingerprint on a fixed model), whatever
        # share of this model it runs
        per_out = measure_outputs(unit, look, max(budget_s, 0.5)) if calibrate else 0.0
        if math.isfinite(parts) and calibrate:
            points = measure_chains(unit, graph, look, digest, max(budget_s, 0.5))
            fit = fit_chain_costs(points, per_out)
            if fit is not None:
                whole = fit.whole_us
                wake = measure_wake(unit, graph, look, digest, max(budget_s, 0.5))
                # at most half the model: node costs keep their share even when cutting
                # is ruinous (the planner still sees that every cut costs a lot)
                overhead = min(max(overhead, fit.per_partition_us) + wake, whole / 2)
                per_byte = fit.per_byte_us
        reg: RegionCosts | None = None
        pfit = PlanFit()
        if not math.isfinite(parts) and calibrate:
            reg = profile_regions(unit, graph, look, node_raw, call_us, budget_s, layers)
            if reg is not None and reg.fit is not None:
                wake = reg.wake_us
                per_part = max(overhead, reg.fit.per_partition_us) + wake
                overhead = min(per_part, reg.fit.whole_us / 2)
                per_byte = reg.fit.per_byte_us
        tick(f"{names[0]}: the model cut in context")
        lmap: LayerMap | None = None
        layer_wall: float | None = None
        if layers and whole is not None:

            def make_layers(u: Unit = unit) -> Measurement:
                return layer_row(u, graph.model, random_feeds(graph, list(graph.inputs)))

            lm = look(f"{LAYERS_SIG}#{digest}", make_layers)
            read = read_layers(lm.detail) if lm is not None and lm.status == OK else None
            if read is not None:
                kernels, layer_wall = read
                lmap = map_layers(graph, kernels, node_raw)
                if lmap.share < MIN_MAPPED:
                    log.info(
                        "unit %s: only %.0f%% of its per-layer profile maps to the model's "
                        "nodes; its node costs come from isolated times",
                        names[0],
                        100 * lmap.share,
                    )
                    lmap = None
        scale = 1.0
        base = dict(node_raw)
        if lmap is not None:
            raw_cov = sum(node_raw[n] for n in lmap.costs)
            ratio = sum(lmap.costs.values()) / raw_cov if raw_cov > 0 else 1.0
            base = {n: lmap.costs.get(n, node_raw[n] * ratio) for n in order}
            total_base = sum(base.values())
            if whole is not None and total_base > 0:
                scale = max(whole - overhead, 0.0) / total_base
            # fusion is in the in-context costs already: a group costs what its members do
            mine = [(c, sum(base[m] for m in c)) for c, _ in mine]
        elif calibrate and whole is not None and fused > call_us:
            scale = max(whole - overhead, 0.0) / (fused - call_us)
        elif reg is not None:  # in context, region by region; fusion is in the costs
            pfit, got, per_byte, per_out = reg.charges(overhead, per_byte, per_out)
            base.update(got)
            mine = [(c, sum(base[m] for m in c)) for c, _ in mine]
            overhead += pfit.extra_us
        finite = math.isfinite(parts)
        for name in names:
            uprof[name] = UnitProfile(
                *(name, fp, False, overhead, whole, parts if finite else None, scale),
                call_us=call_us,
                boundary_us_per_byte=per_byte,
                boundary_out_us_per_byte=per_out,
                fused_parts_us=fused if finite and cands else None,
                layer_parts_us=None if lmap is None else call_us + lmap.total_us,
                layer_mapped=None if lmap is None else lmap.share,
                regions=() if reg is None else reg.stats,
                wake_us=wake,
                layer_wall_us=None if lmap is None else layer_wall,
                plan_extra_us=pfit.extra_us,
                plan_io_scale=pfit.io_scale,
            )
            for n in order:
                costs[n][name] = base[n] * scale
            for c, t in mine:
                group_costs.setdefault(c, {})[name] = t * scale
    _check_missing(missing, remote)

    for name, unit in active.items():
        if unit.modeled:
            uprof[name] = _modeled(graph, unit, costs)
    fps.update({n: u.fingerprint() for n, u in active.items() if u.modeled})
    for name, unit in active.items():
        if isinstance(unit, RayUnit):
            uprof[name] = add_transport(uprof[name], transport_costs(unit, store))
    fleet_links(list(active), units, fps, store, link_sizes)
    local_names = {n for n in active if n not in remote}
    call = {n: uprof[n].call_us for n in active}
    lp = profile_links(
        units, list(active), fps, local_names, call, store, sizes=link_sizes, budget_s=budget_s
    )
    tick("links")
    busy.extend((a, f"the link to {b}", share) for a, b, share in lp.busy)
    here = {n: u for n, u in active.items() if n in local_names and not u.modeled}
    here = {n: u for n, u in here.items() if not isinstance(u, RayUnit)}
    if corun and len(here) > 1:
        pick = {n: here[n] for n in corun_participants(here)}
        got = measure_corun(graph, pick, fps, store, digest, budget_s, again=corun_again)
        for name, factor in got.items():
            uprof[name].corun = factor
    return Profile(
        model=graph.source,
        costs=costs,
        units=uprof,
        links=lp.links,
        link_sources=lp.sources,
        signatures=len(rep),
        measured=measured,
        reused=max(reused - timed_there, 0),
        unsupported=unsupported,
        failed=failed,
        skipped_units=skipped,
        wall_s=time.perf_counter() - t_start,
        groups=[(c, group_costs[c]) for c, _ in cands if c in group_costs],
        group_signatures=len(grep),
        groups_kept=len(kept_any),
        link_fits=lp.fits,
        links_measured=lp.measured,
        remote=remote,
        busy=warn_busy(busy, log),
        again=again,
    )


def _check_missing(missing: list[tuple[str, str]], remote: Mapping[str, str]) -> None:
    nodes = [(u, s) for u, s in missing if not s.startswith("__") and "+" not in s]
    if nodes:
        unit, sig = nodes[0]
        raise ProfileError(
            f"unit {unit!r} (fingerprint {remote.get(unit, '?')}) is measured elsewhere and the "
            f"store lacks {len(nodes)} of its measurements for this model (e.g. "
            f"{sig.split('#')[0]}); run the profiling kit for this model on the target and "
            "--import its results"
        )
    for unit, sig in missing:
        log.info("unit %s: no stored %s; left out", unit, sig.split("#")[0])


def _modeled(graph: ModelGraph, unit: Unit, costs: dict[str, dict[str, float]]) -> UnitProfile:
    overhead = unit.modeled_time_us([], graph)
    for n in graph.compute_nodes:
        costs[n.name][unit.name] = (
            unit.modeled_time_us([n], graph) - overhead if unit.supports(n, graph) else math.inf
        )
    whole = overhead + sum(costs[n.name][unit.name] for n in graph.compute_nodes)
    return UnitProfile(
        unit.name,
        unit.fingerprint(),
        True,
        overhead,
        whole if math.isfinite(whole) else None,
        whole,
        1.0,
    )
