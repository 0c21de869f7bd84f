"""In-context costs for a unit that runs only part of a model: its maximal supported regions.

A unit with an ``ops`` list (an NPU that runs convolutions and pooling, everything else falling
back to a CPU) cannot run the whole model, so there is no whole-model run to map per-layer
times from. Its nodes timed alone, each as its own sub-model, cost several times what they cost
inside a larger compiled sub-model (layout conversions and a fresh output buffer per call). So
such a unit is profiled on its *regions*: the weakly connected components of the nodes it
supports (the unsupported nodes cut out), each run as one sub-model, in context:

- each region is timed as one call (``__region__`` rows), and the backend's own per-layer
  profile of it (``__layers__`` rows of the region) is mapped back to its ONNX nodes as for a
  whole model (``profile/layers.py``); a region whose profile maps too little, or a backend
  without one, keeps its nodes' isolated times on the region's scale;
- the node costs of a region are scaled so that, with the unit's per-partition cost, they add
  up to the region's measured time: a plan that runs the region as one partition is charged
  what it was measured to take;
- the per-partition and per-byte costs of cutting come from the largest region cut into chunks
  (``profile/context.py``), as the whole model's do on a unit that runs everything;
- a plan runs a region whole only where no path leaves it and comes back through the nodes the
  unit cannot run; elsewhere (DenseNet: every batch norm's ``Mul`` on the CPU, inside the
  dense block's region) it runs it in pieces, cut at those nodes. The unit's *pieces* (each
  region that a plan can run whole, the others cut into such pieces) are timed as a plan runs
  them (``profile/cycle.py``), and :meth:`RegionCosts.plan_fit` corrects the unit's
  per-partition cost and the weight of its per-byte costs to what they took;
- a region the backend cannot compile (or whose timing fails) is named with the backend's
  reason; its nodes keep their isolated costs (the fallback), and its row is stored as
  ``unsupported``/``failed``, never as measured.

The in-context additivity error of a region is (no-op call + the kernel times of its per-layer
profile - the region's time) / the region's time.
"""

from __future__ import annotations

import hashlib
import logging
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from partuner.export.cut import cut_nodes
from partuner.graph import ModelGraph, load_model
from partuner.profile.context import ChainFit, fit_chain_costs, measure_chains, measure_wake
from partuner.profile.cycle import CYCLE_MAX_PIECES, measure_cycle
from partuner.profile.layers import LAYERS_SIG, layer_row, map_layers, read_layers
from partuner.profile.measure import failure, random_feeds, time_model
from partuner.profile.outputs import measure_outputs
from partuner.profile.signature import model_digest
from partuner.profile.store import FAILED, OK, Measurement
from partuner.units import Unit

__all__ = [
    "PieceTime",
    "PlanFit",
    "RegionCosts",
    "RegionStat",
    "convex_pieces",
    "profile_regions",
    "supported_regions",
]

log = logging.getLogger(__name__)

Lookup = Callable[..., Measurement | None]

#: the least share of a region's per-layer profile that must map to its nodes (as for a model)
MIN_MAPPED = 0.8
#: with at least this many pieces timed as a plan runs them, the weight of the per-byte costs
#: is fitted too (fewer: the per-partition cost alone)
MIN_FIT_PIECES = 6
#: the weights of the per-byte costs tried by :meth:`RegionCosts.plan_fit`
IO_SCALES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class RegionStat:
    """What was measured of one region of a restricted unit."""

    nodes: tuple[str, ...]  # in the model's order
    whole_us: float | None  # the region as one call (None: it could not be timed)
    parts_us: float | None  # no-op call + its per-layer kernel times (None: no profile)
    source: str  # node costs from: "layers" (in context), "region" (isolated, on the
    # region's scale) or "isolated" (the region could not be timed: the fallback)
    reason: str = ""  # why the fallback, where there is one
    layer_wall_us: float | None = None  # the per-layer profile's own runs, their median time
    in_bytes: int = 0  # what it reads that other nodes of the model write
    out_bytes: int = 0  # what it writes that other nodes of the model read

    @property
    def error(self) -> float | None:
        """In-context additivity error: (parts - whole) / whole, against the wall time of the
        runs the per-layer profile came from where it was timed; None if not measured."""
        whole = self.layer_wall_us if self.layer_wall_us is not None else self.whole_us
        if whole is None or self.parts_us is None or whole <= 0:
            return None
        return (self.parts_us - whole) / whole

    @property
    def label(self) -> str:
        """``first..last (N nodes)``, for messages and tables."""
        if len(self.nodes) == 1:
            return f"{self.nodes[0]} (1 node)"
        return f"{self.nodes[0]}..{self.nodes[-1]} ({len(self.nodes)} nodes)"


@dataclass(frozen=True)
class PieceTime:
    """One piece of a restricted unit (a region a plan can run whole, or part of one), timed
    as a plan runs it (profile/cycle.py)."""

    nodes: tuple[str, ...]
    in_bytes: int  # what it reads that other nodes of the model write
    out_bytes: int  # what it writes that other nodes of the model read
    planned_us: float  # its time run as a plan runs it
    whole: bool = True  # the piece is a whole region (else a plan can only run it in pieces)


@dataclass(frozen=True)
class PlanFit:
    """What the pieces timed as a plan runs them say of the unit's charges."""

    extra_us: float = 0.0  # added to the per-partition cost (at least 0)
    io_scale: float = 1.0  # the per-byte costs' weight
    pieces: int = 0  # the pieces it was fitted on


@dataclass(frozen=True)
class RegionCosts:
    """A restricted unit's regions: stats, in-context node costs, the fitted cost of cuts."""

    stats: tuple[RegionStat, ...]
    base: dict[str, float]  # node -> in-context µs (unscaled), for nodes of timed regions
    fit: ChainFit | None  # the largest timed region cut into chunks
    wake_us: float = 0.0  # what a partition costs more after its unit idled (largest region)
    pieces: tuple[PieceTime, ...] = ()  # timed as a plan runs them (profile/cycle.py)

    def costs(
        self, overhead_us: float, in_us_per_byte: float = 0.0, out_us_per_byte: float = 0.0
    ) -> dict[str, float]:
        """Node costs scaled per region so that ``overhead_us`` + its nodes + the per-byte
        costs of what it reads from and writes for other nodes = its time: what the planner
        charges a partition that is the whole region (its reads and writes timed into the
        region's time are not charged twice). Nodes profiled in context keep at least their
        kernels' time: where the per-byte rates (measured on another model) charge more than
        the counters left over, the region is charged more than its time, not its nodes
        less than they took."""
        out: dict[str, float] = {}
        for r in self.stats:
            if r.whole_us is None or r.source == "isolated":
                continue
            io = r.in_bytes * in_us_per_byte + r.out_bytes * out_us_per_byte
            total = sum(self.base[n] for n in r.nodes)
            left = max(r.whole_us - overhead_us, 0.0)
            # never below the nodes' own kernels where they were profiled in context: the
            # reads and writes take only what the counters did not give to nodes
            floor = min(total, left) if r.source == "layers" else 0.0
            left = max(left - io, floor)
            if total > 0:
                out.update({n: self.base[n] * left / total for n in r.nodes})
            else:  # nodes too quick to time apart: the region's time shared out evenly
                out.update({n: left / len(r.nodes) for n in r.nodes})
        # a region a plan can only run in pieces: each piece timed as a plan runs it is
        # charged what it took (its share of the region's kernels says less: charged that
        # share, DenseNet's first pieces were predicted slower than they took in a plan, its
        # last ones faster; docs/profiling.md)
        for p in self.pieces:
            if p.whole or not all(n in out for n in p.nodes):
                continue
            io = p.in_bytes * in_us_per_byte + p.out_bytes * out_us_per_byte
            left = max(p.planned_us - overhead_us - io, 0.0)
            total = sum(self.base[n] for n in p.nodes)
            if total > 0:
                out.update({n: self.base[n] * left / total for n in p.nodes})
            else:
                out.update({n: left / len(p.nodes) for n in p.nodes})
        return out

    def charges(
        self, overhead_us: float, in_us_per_byte: float, out_us_per_byte: float
    ) -> tuple[PlanFit, dict[str, float], float, float]:
        """What the planner charges: the fit of the pieces timed as a plan runs them
        (:meth:`plan_fit`: its extra goes on the per-partition cost), the node costs
        (:meth:`costs`) and the two per-byte rates at the fitted weight."""
        fit = self.plan_fit(overhead_us, in_us_per_byte, out_us_per_byte)
        rin, rout = in_us_per_byte * fit.io_scale, out_us_per_byte * fit.io_scale
        return fit, self.costs(overhead_us, rin, rout), rin, rout

    def plan_fit(
        self, overhead_us: float, in_us_per_byte: float = 0.0, out_us_per_byte: float = 0.0
    ) -> PlanFit:
        """What to add to the per-partition cost, and the weight of the per-byte costs, so
        that the planner charges the pieces what they took run as a plan runs them.

        Each piece is charged as the planner charges a partition of those nodes
        (``overhead_us`` + its nodes' costs, :meth:`costs` at that weight + the per-byte costs
        of its reads and writes). The extra is the median of what the pieces that are whole
        regions took more than that, weighted by the inverse of their time (a call's cost shows
        best on short pieces), at least 0: a partition is never charged less than its call and
        wake-up were measured to cost; the pieces of a region a plan can only run in pieces
        are charged what they took whatever the weight, unless their reads and writes alone
        cost more at that weight. With :data:`MIN_FIT_PIECES` pieces or more, every weight of
        :data:`IO_SCALES` is tried and the one leaving the least absolute difference over all
        pieces is kept (the lightest of those within 1 % of the pieces' time of the least);
        with fewer, the weight stays 1."""
        timed = [p for p in self.pieces if p.planned_us > 0]
        if len(timed) < 2:
            return PlanFit()
        fits: list[tuple[float, PlanFit]] = []
        for s in IO_SCALES if len(timed) >= MIN_FIT_PIECES else (1.0,):
            costs = self.costs(overhead_us, in_us_per_byte * s, out_us_per_byte * s)
            diffs: list[tuple[float, float, bool]] = []
            for p in timed:
                if all(n in costs for n in p.nodes):
                    io = s * (p.in_bytes * in_us_per_byte + p.out_bytes * out_us_per_byte)
                    charged = overhead_us + sum(costs[n] for n in p.nodes) + io
                    diffs.append((p.planned_us - charged, 1.0 / p.planned_us, p.whole))
            if not diffs:
                return PlanFit()
            whole = [(d, w) for d, w, is_whole in diffs if is_whole]
            extra = 0.0
            if len(whole) >= 2:
                extra = max(0.0, _weighted_median([d for d, _ in whole], [w for _, w in whole]))
            score = sum(abs(d - extra) if is_whole else abs(d) for d, _, is_whole in diffs)
            fits.append((score, PlanFit(extra, s, len(diffs))))
        # within 1 % of the pieces' time of the least difference: as good (timings differ
        # that much from round to round); of those, the lightest. The pieces' times hold
        # their reads and writes, so a weight they cannot tell apart only moves cost from
        # their nodes to cuts inside them: on DenseNet (every piece part of a region a plan
        # runs in pieces) the full rates left the nodes so little that the plans cutting
        # inside pieces were predicted far faster than they ran (docs/profiling.md)
        near = min(f[0] for f in fits) + 0.01 * sum(p.planned_us for p in timed)
        return min((f for f in fits if f[0] <= near), key=lambda f: f[1].io_scale)[1]


def supported_regions(graph: ModelGraph, supported: set[str]) -> list[tuple[str, ...]]:
    """The weakly connected components of ``supported`` compute nodes (edges between two
    supported nodes only), each in the model's order, ordered by their first node.

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("resnet18", image_size=32))
    >>> on = {n.name for n in g.compute_nodes if n.op_type != "Add"}
    >>> regions = supported_regions(g, on)
    >>> len(regions) > 1 and sum(map(len, regions)) == len(on)
    True
    """
    order = [n.name for n in graph.compute_nodes if n.name in supported]
    parent = {n: n for n in order}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in order:
        for p in graph.predecessors(n):
            if p in parent:
                a, b = find(n), find(p)
                if a != b:
                    parent[max(a, b, key=order.index)] = min(a, b, key=order.index)
    groups: dict[str, list[str]] = {}
    for n in order:
        groups.setdefault(find(n), []).append(n)
    return [tuple(g) for g in groups.values()]


def _region_key(digest: str, nodes: tuple[str, ...]) -> str:
    return f"{digest}#{hashlib.sha1('|'.join(nodes).encode()).hexdigest()[:12]}"


def profile_regions(
    unit: Unit,
    graph: ModelGraph,
    look: Lookup,
    node_raw: Mapping[str, float],
    call_us: float,
    budget_s: float,
    layers: bool = True,
) -> RegionCosts | None:
    """Time ``unit``'s maximal supported regions of ``graph`` in context.

    ``look(signature, make, label)`` returns a stored row or makes (and stores) one, as in the
    profiler; ``node_raw`` holds the isolated (net) node times, ``inf`` where the unit cannot
    run a node. Returns ``None`` when the unit supports no node.
    """
    supported = {n for n, t in node_raw.items() if math.isfinite(t)}
    regions = supported_regions(graph, supported)
    if not regions:
        return None
    digest = model_digest(graph)
    stats: list[RegionStat] = []
    base: dict[str, float] = {}
    sub: dict[tuple[str, ...], ModelGraph] = {}
    cuts: dict[tuple[str, ...], tuple] = {}  # region -> (model, inputs, outputs), cut once
    for nodes in regions:
        key = _region_key(digest, nodes)
        label = f"the region {RegionStat(nodes, None, None, '').label}"
        try:
            model, ins, outs = cuts[nodes] = cut_nodes(graph, "region", nodes, check=False)
        except Exception as exc:  # a region that cannot even be cut: its isolated costs
            stats.append(RegionStat(nodes, None, None, "isolated", failure(exc).detail))
            continue

        def make(m=model, i=ins) -> Measurement:  # type: ignore[no-untyped-def]
            return time_model(unit, m, random_feeds(graph, i), budget_s)

        row = look(f"__region__#{key}", make, label)
        if row is None or row.status != OK:
            why = "not measured" if row is None else row.detail
            if row is not None:
                log.warning(
                    "unit %s: %s could not be run as one sub-model (%s); its nodes keep their "
                    "isolated costs%s",
                    unit.name,
                    label,
                    why,
                    " (timed again by the next profiling run)" if row.status == FAILED else "",
                )
            stats.append(RegionStat(nodes, None, None, "isolated", why))
            continue
        kernels, wall = None, None
        if layers:

            def make_layers(m=model, i=ins) -> Measurement:  # type: ignore[no-untyped-def]
                return layer_row(unit, m, random_feeds(graph, i))

            lm = look(f"{LAYERS_SIG}#{key}", make_layers, f"the per-layer profile of {label}")
            if lm is not None and lm.status == OK and lm.detail:
                kernels, wall = read_layers(lm.detail) or (None, None)
        source, parts = "region", None
        mine = {n: node_raw[n] for n in nodes}
        if kernels is not None:
            try:
                rgraph = sub.get(nodes) or load_model(model)
            except Exception:  # noqa: BLE001 - mapping is an improvement, never a need
                rgraph = None
            if rgraph is not None:
                sub[nodes] = rgraph
                lmap = map_layers(rgraph, kernels, mine)
                parts = call_us + lmap.total_us
                if lmap.share >= MIN_MAPPED and lmap.costs:
                    cov = sum(mine[n] for n in lmap.costs)
                    ratio = sum(lmap.costs.values()) / cov if cov > 0 else 1.0
                    mine = {n: lmap.costs.get(n, mine[n] * ratio) for n in nodes}
                    source = "layers"
        base.update(mine)
        nin, nout = _boundary_bytes(graph, nodes, ins, outs)
        stats.append(RegionStat(nodes, row.median_us, parts, source, "", wall, nin, nout))
    fit, wake = _fit_largest(unit, graph, stats, sub, look, budget_s)
    pieces: tuple[PieceTime, ...] = ()
    if fit is not None:
        pieces = _time_pieces(unit, graph, stats, base, cuts, look, digest, budget_s)
    big = _largest(graph, stats)
    if fit is not None and big is not None and big.whole_us is not None:
        # the fit timed the largest region whole three more times, apart from its own row: a
        # moment of load on the machine (or a lucky quiet one) would set the region's every
        # node cost, so the median of them all counts
        wholes = [float(p[2]) for p in fit.points if p[0] == 1]
        i = stats.index(big)
        stats[i] = replace(big, whole_us=statistics.median([big.whole_us, *wholes]))
    return RegionCosts(tuple(stats), base, fit, wake, pieces)


def _boundary_bytes(
    graph: ModelGraph, nodes: tuple[str, ...], ins: list[str], outs: list[str]
) -> tuple[int, int]:
    """The bytes a region reads from other nodes and writes for other nodes: what the planner
    charges per byte to a partition that is the region (model inputs and outputs cross no
    partition boundary)."""
    mine = set(nodes)
    nin = sum(graph.values[v].nbytes for v in ins if graph.values[v].producer is not None)
    nout = sum(
        graph.values[v].nbytes
        for v in outs
        if any(c not in mine for c in graph.values[v].consumers)
    )
    return nin, nout


def _largest(graph: ModelGraph, stats: list[RegionStat]) -> RegionStat | None:
    """The timed region with the most nodes (the earliest of equals), or None."""
    timed = [r for r in stats if r.whole_us is not None]
    if not timed:
        return None
    return max(timed, key=lambda r: (len(r.nodes), -graph.node(r.nodes[0]).index))


def _fit_largest(
    unit: Unit,
    graph: ModelGraph,
    stats: list[RegionStat],
    sub: dict[tuple[str, ...], ModelGraph],
    look: Lookup,
    budget_s: float,
) -> tuple[ChainFit | None, float]:
    """The cost of cutting, fitted on the largest timed region cut into chunks (less what
    writing out costs: :func:`~partuner.profile.outputs.measure_outputs`, stored once per
    unit), and what a chunk costs more after its unit idled
    (:func:`~partuner.profile.context.measure_wake`)."""
    big = _largest(graph, stats)
    if big is None or len(big.nodes) < 4:
        return None, 0.0
    rgraph = sub.get(big.nodes)
    if rgraph is None:
        try:
            rgraph = load_model(cut_nodes(graph, "region", big.nodes, check=False)[0])
        except Exception:  # noqa: BLE001 - without it, cuts cost the no-op call
            return None, 0.0
    digest, budget = model_digest(rgraph), max(budget_s, 0.5)
    out_rate = measure_outputs(unit, lambda s, m: look(s, m), budget)
    points = measure_chains(unit, rgraph, lambda s, m: look(s, m), digest, budget)
    fit = fit_chain_costs(points, out_rate)
    if fit is None:
        return None, 0.0
    return fit, measure_wake(unit, rgraph, lambda s, m: look(s, m), digest, budget)


def convex_pieces(graph: ModelGraph, region: tuple[str, ...]) -> list[tuple[str, ...]]:
    """``region`` whole if a plan can run it as one partition (no path leaves it and comes
    back); else its pieces: the runs of its nodes consecutive in the model's order, each cut
    into its weakly connected parts (a path between two nodes of such a part runs through
    nodes between them in the order, all of the run, so it never leaves the part).

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("resnet18", image_size=32))
    >>> first = [n.name for n in g.compute_nodes][:3]
    >>> convex_pieces(g, tuple(first)) == [tuple(first)]
    True
    """
    if len(region) == 1:
        return [region]
    mine = set(region)
    # a path that comes back ends at a node of the region, so never goes past its last one in
    # the model's (topological) order: only nodes before it are searched
    last = max(graph.node(n).index for n in region)
    seen: set[str] = set()
    todo = [s for n in region for s in graph.successors(n) if s not in mine]
    while todo:
        n = todo.pop()
        if n in seen or graph.node(n).index > last:
            continue
        seen.add(n)
        for s in graph.successors(n):
            if s in mine:  # a path leaves the region and comes back
                return _runs(graph, mine)
            todo.append(s)
    return [region]


def _runs(graph: ModelGraph, mine: set[str]) -> list[tuple[str, ...]]:
    runs: list[list[str]] = [[]]
    for n in graph.compute_nodes:
        if n.name in mine:
            runs[-1].append(n.name)
        elif runs[-1]:
            runs.append([])
    out: list[tuple[str, ...]] = []
    for run in runs:
        if run:
            out.extend(supported_regions(graph, set(run)))
    return out


def _time_pieces(
    unit: Unit,
    graph: ModelGraph,
    stats: list[RegionStat],
    base: Mapping[str, float],
    cuts: Mapping[tuple[str, ...], tuple],
    look: Lookup,
    digest: str,
    budget_s: float,
) -> tuple[PieceTime, ...]:
    """The unit's pieces of its timed regions (:func:`convex_pieces`; at most
    :data:`~partuner.profile.cycle.CYCLE_MAX_PIECES`, those of the largest node costs), timed
    as a plan runs them (profile/cycle.py); none if that failed."""
    pieces = [
        p
        for r in stats
        if r.whole_us is not None and r.source != "isolated"
        for p in convex_pieces(graph, r.nodes)
    ]
    pieces = sorted(pieces, key=lambda p: -sum(base[n] for n in p))[:CYCLE_MAX_PIECES]
    pieces.sort(key=lambda p: graph.node(p[0]).index)
    if len(pieces) < 2:
        return ()
    models = []
    for p in pieces:
        try:
            model, ins, outs = cuts[p] if p in cuts else cut_nodes(graph, "piece", p, check=False)
        except Exception:  # noqa: BLE001 - without the pieces, the charges stay as fitted
            return ()
        models.append((model, random_feeds(graph, ins), _boundary_bytes(graph, p, ins, outs)))
    key = _region_key(digest, tuple(n for p in pieces for n in p))
    planned = measure_cycle(
        unit,
        [(m, f) for m, f, _ in models],
        lambda s, m: look(s, m, "its pieces as a plan runs them"),
        f"__plancycle__#{key}",
        max(budget_s, 0.5),
    )
    if planned is None:
        return ()
    whole = {r.nodes for r in stats}
    return tuple(
        PieceTime(p, nin, nout, t, p in whole)
        for p, (_, _, (nin, nout)), t in zip(pieces, models, planned, strict=True)
    )


def _weighted_median(values: list[float], weights: list[float]) -> float:
    """The value at which half the weight lies on either side (the lower of two middles).

    >>> _weighted_median([1.0, 2.0, 10.0], [1.0, 1.0, 1.0])
    2.0
    >>> _weighted_median([100.0, 400.0, 500.0], [10.0, 1.0, 1.0])
    100.0
    """
    pairs = sorted(zip(values, weights, strict=True))
    half, acc = sum(weights) / 2, 0.0
    for v, w in pairs:
        acc += w
        if acc >= half:
            return v
    return pairs[-1][0]
