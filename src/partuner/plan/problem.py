"""The scheduling problem: a DAG of nodes, a cost table over units, and the links between units.

A :class:`Problem` is all the planner sees: no ONNX, no backends. It is written to disk by
``--dump-problem`` as JSON with this schema (``"inf"`` stands for infinity wherever a number may
be infinite; ``"-inf"`` and NaN are never written and are rejected on reading)::

    {
      "format": "partuner.problem",       # required, exactly this string
      "version": 1,                        # required
      "name": "resnet18",                  # optional, default "problem"
      "nodes": ["conv0", "relu0", ...],    # required, topological order, unique
      "units": ["cpu0", "cpu1", ...],      # required, ordered, unique
      "cost": {"conv0": {"cpu0": 12.5, "cpu1": "inf"}, ...},   # required, µs per node per unit
      "edges": [{"src": "conv0", "dst": "relu0", "nbytes": 802816,
                 "values": ["conv0_out"]}, ...],               # optional, default []
      "links": [{"a": "cpu0", "b": "gpu0", "latency_us": 20.0, "gbps": 12.0}, ...],
                                           # optional, unordered pairs, default []
      "default_link": {"latency_us": 0.0, "gbps": "inf"},      # optional, this default
      "call_overhead_us": {"gpu0": 30.0},  # optional, µs charged once per partition
      "boundary_us_per_byte": {"cpu0": 2e-4},
                                           # optional, µs per byte a partition reads from
                                           # other partitions (layout conversion, copies)
      "boundary_out_us_per_byte": {"npu0": 4e-4},
                                           # optional, µs per byte a partition writes out
                                           # for other partitions (conversion, copies)
      "modeled": ["npu0"],                 # optional, units whose costs are computed
      "resources": {"cpu0": ["core0"], "cpu01": ["core0", "core1"]},
                                           # optional: hardware each unit occupies; units
                                           # sharing a resource never run at the same time
                                           # (default: each unit its own resource)
      "groups": [{"nodes": ["conv0", "relu0"], "cost": {"cpu0": 10.5}}],
                                           # optional fused chains and their cost when run
                                           # together, consecutively, on one unit
      "default_unit": "cpu0",              # optional, NEST-C's default unit (else the first
                                           # unit that runs every node, else units[0])
      "weight_bytes": {"conv0": 36864},    # optional, bytes of weights per node (default 0)
      "memory_bytes": {"npu0": 8e6}        # optional, bytes each unit holds for weights and
                                           # activations (default and "inf": unlimited)
    }

Examples
--------
>>> p = Problem(nodes=["a", "b"], units=["u"], cost={"a": {"u": 1.0}, "b": {"u": 2.0}},
...             edges=[Edge("a", "b", 1000, ("a_out",))])
>>> p.validate()
>>> p.succs("a"), p.preds("b")
(['b'], ['a'])
>>> Problem.from_json(p.to_json()) == p
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from partuner.errors import InfeasiblePlanError, PartunerError, ProfileError
from partuner.plan.memory import MemoryModel

__all__ = ["Edge", "FusedGroup", "Link", "Problem", "FORMAT", "VERSION"]

FORMAT = "partuner.problem"
VERSION = 1


@dataclass(frozen=True)
class Edge:
    """A data dependency: ``dst`` reads ``nbytes`` bytes that ``src`` produces.

    ``values`` names the tensors carried (``nbytes`` is their total). Two edges from the same
    ``src`` carrying the same value describe one tensor, moved once per destination partition.
    """

    src: str
    dst: str
    nbytes: int
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    """The cost of moving data between two units: a fixed latency plus bytes over bandwidth.

    ``gbps`` is in GB/s (1e9 bytes per second, i.e. 1e3 bytes per µs); ``math.inf`` means the
    bytes cost nothing beyond the latency.

    >>> Link(latency_us=5.0, gbps=2.0).transfer_us(4000)
    7.0
    """

    latency_us: float
    gbps: float

    def transfer_us(self, nbytes: float) -> float:
        """Microseconds to move ``nbytes`` bytes over this link."""
        return self.latency_us + nbytes / (self.gbps * 1e3)


@dataclass(frozen=True)
class FusedGroup:
    """A chain of nodes a backend runs faster together than apart (e.g. Conv+Relu fused).

    ``cost[unit]`` is the measured time of the whole chain on that unit (µs); units without an
    entry give no discount. The discount applies only when every member runs on that unit,
    consecutively, in one partition.
    """

    nodes: tuple[str, ...]
    cost: dict[str, float]

    def saving(self, problem: Problem, unit: str) -> float:
        """How much cheaper the group is than its members apart on ``unit`` (>= 0)."""
        c = self.cost.get(unit)
        if c is None or math.isinf(c):
            return 0.0
        return max(0.0, sum(problem.cost[n][unit] for n in self.nodes) - c)


def _zero_link() -> Link:
    return Link(latency_us=0.0, gbps=math.inf)


@dataclass
class Problem(MemoryModel):
    """A DAG of nodes to place on units, with per-unit costs (µs) and inter-unit links.

    Treat a problem as immutable once built: adjacency and payloads are cached on first use.
    ``cost[node][unit]`` is ``math.inf`` where the unit cannot run the node. ``links`` maps an
    unordered pair of units to its :class:`Link` (either order may be given); pairs not listed
    use ``default_link``. ``weight_bytes[node]`` (default 0) is what a node keeps resident on
    its unit; ``memory_bytes[unit]`` (default: unlimited) what the unit holds; the memory
    queries (:meth:`memory_use`, ...) come from :class:`~partuner.plan.memory.MemoryModel`.
    """

    nodes: list[str]
    units: list[str]
    cost: dict[str, dict[str, float]]
    edges: list[Edge] = field(default_factory=list)
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    default_link: Link = field(default_factory=_zero_link)
    call_overhead_us: dict[str, float] = field(default_factory=dict)
    modeled: frozenset[str] = frozenset()
    name: str = "problem"
    resources: dict[str, frozenset[str]] = field(default_factory=dict)
    groups: list[FusedGroup] = field(default_factory=list)
    default_unit: str | None = None
    boundary_us_per_byte: dict[str, float] = field(default_factory=dict)
    weight_bytes: dict[str, int] = field(default_factory=dict)
    memory_bytes: dict[str, float] = field(default_factory=dict)
    boundary_out_us_per_byte: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.modeled = frozenset(self.modeled)
        self.resources = {u: frozenset(r) for u, r in self.resources.items()}

    # -- shared hardware -------------------------------------------------------------------

    def resources_of(self, unit: str) -> frozenset[str]:
        """The hardware ``unit`` occupies while it runs (default: a resource of its own)."""
        return self.resources.get(unit) or frozenset({f"unit:{unit}"})

    def conflicts(self, unit: str) -> frozenset[str]:
        """The units (``unit`` included) that can never run at the same time as ``unit``."""
        return self._conflicts[unit]

    @property
    def shares_hardware(self) -> bool:
        """True when some two units occupy a common resource."""
        return any(len(c) > 1 for c in self._conflicts.values())

    @property
    def default(self) -> str:
        """NEST-C's default unit: ``default_unit``, else the first unit that can run every node
        (NEST-C's default backend, the CPU, runs whatever no accelerator takes), else the
        first unit."""
        if self.default_unit is not None:
            return self.default_unit
        for u in self.units:
            if all(math.isfinite(self.cost[n][u]) for n in self.nodes):
                return u
        return self.units[0]

    def groups_of(self, node: str) -> list[FusedGroup]:
        """The fused groups ``node`` belongs to."""
        return self._groups_by_node.get(node, [])

    # -- lookups ---------------------------------------------------------------------------

    def link(self, u: str, v: str) -> Link:
        """The link between units ``u`` and ``v`` (either order), else ``default_link``."""
        found = self.links.get((u, v)) or self.links.get((v, u))
        return found if found is not None else self.default_link

    def transfer_us(self, u: str, v: str, nbytes: float) -> float:
        """Microseconds to move ``nbytes`` from unit ``u`` to unit ``v``; 0 when ``u == v``."""
        if u == v:
            return 0.0
        return self.link(u, v).transfer_us(nbytes)

    def comm_us(self, src: str, dst: str, u: str, v: str) -> float:
        """Delay between ``src`` ending on unit ``u`` and its data reaching ``dst`` on ``v``."""
        if u == v:
            return 0.0
        return self.link(u, v).transfer_us(self.pair_nbytes(src, dst))

    def cut_us(self, src: str, dst: str, u: str, v: str) -> float:
        """What a cross-unit edge really costs once the plan runs as partitions: the transfer,
        plus the new partition ``dst`` must start on ``v`` (its call overhead and the boundary
        cost of the bytes it reads), and ``src``'s partition writes the bytes out on ``u``. 0
        when ``u == v``. Schedulers that use this instead of :meth:`comm_us` avoid plans that
        cut a model into many small, slow partitions;
        schedules they make still satisfy :meth:`Schedule.validate`, which checks ``comm_us``.
        """
        if u == v:
            return 0.0
        nbytes = self.pair_nbytes(src, dst)
        return (
            self.link(u, v).transfer_us(nbytes)
            + self.call_overhead_us.get(v, 0.0)
            + nbytes * self.boundary_us_per_byte.get(v, 0.0)
            + nbytes * self.boundary_out_us_per_byte.get(u, 0.0)
        )

    def preds(self, n: str) -> list[str]:
        """The distinct nodes ``n`` reads from, in topological order."""
        return self._adjacency[0].get(n, [])

    def succs(self, n: str) -> list[str]:
        """The distinct nodes that read from ``n``, in topological order."""
        return self._adjacency[1].get(n, [])

    def index(self, n: str) -> int:
        """Position of node ``n`` in the topological order ``nodes``."""
        return self._index[n]

    def pair_nbytes(self, src: str, dst: str) -> float:
        """Bytes ``dst`` reads from ``src`` (each distinct value counted once)."""
        return self._pair_nbytes.get((src, dst), 0.0)

    def payload(self, i: int) -> dict[Hashable, float]:
        """What edge ``edges[i]`` moves: ``{value key: bytes}``.

        A key is ``(src, value)``, so the same tensor read by several consumers has one key; an
        edge without value names gets a key of its own. A value's size is the ``nbytes`` of a
        single-value edge carrying it when there is one, else its share of a multi-value edge.
        """
        return self._payloads[i]

    def runnable_units(self, n: str) -> list[str]:
        """The units (in problem order) that can run node ``n``."""
        return [u for u in self.units if math.isfinite(self.cost[n][u])]

    # -- caches ----------------------------------------------------------------------------

    @cached_property
    def _conflicts(self) -> dict[str, frozenset[str]]:
        return {
            u: frozenset(v for v in self.units if self.resources_of(u) & self.resources_of(v))
            for u in self.units
        }

    @cached_property
    def _groups_by_node(self) -> dict[str, list[FusedGroup]]:
        out: dict[str, list[FusedGroup]] = {}
        for g in self.groups:
            for n in g.nodes:
                out.setdefault(n, []).append(g)
        return out

    @cached_property
    def _index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.nodes)}

    @cached_property
    def _adjacency(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        preds: dict[str, dict[str, None]] = {}
        succs: dict[str, dict[str, None]] = {}
        for e in self.edges:
            preds.setdefault(e.dst, {})[e.src] = None
            succs.setdefault(e.src, {})[e.dst] = None
        pos = self._index

        def ordered(d: dict[str, dict[str, None]]) -> dict[str, list[str]]:
            return {k: sorted(v, key=lambda m: pos.get(m, -1)) for k, v in d.items()}

        return ordered(preds), ordered(succs)

    @cached_property
    def _payloads(self) -> list[dict[Hashable, float]]:
        size: dict[tuple[str, str], float] = {}
        for e in self.edges:
            if len(set(e.values)) == 1:
                key = (e.src, e.values[0])
                size[key] = max(size.get(key, 0.0), float(e.nbytes))
        shares: dict[tuple[str, str], float] = {}
        for e in self.edges:
            unknown = [v for v in dict.fromkeys(e.values) if (e.src, v) not in size]
            if unknown:
                known = sum(size[(e.src, v)] for v in set(e.values) if (e.src, v) in size)
                share = max(0.0, e.nbytes - known) / len(unknown)
                for v in unknown:
                    shares[(e.src, v)] = max(shares.get((e.src, v), 0.0), share)
        size.update(shares)
        payloads: list[dict[Hashable, float]] = []
        for i, e in enumerate(self.edges):
            if e.values:
                payloads.append({(e.src, v): size[(e.src, v)] for v in e.values})
            else:
                payloads.append({("#edge", i): float(e.nbytes)})
        return payloads

    @cached_property
    def _pair_nbytes(self) -> dict[tuple[str, str], float]:
        keys: dict[tuple[str, str], dict[Hashable, float]] = {}
        for i, e in enumerate(self.edges):
            keys.setdefault((e.src, e.dst), {}).update(self.payload(i))
        return {pair: sum(d.values()) for pair, d in keys.items()}

    # -- validation ------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the problem is well formed and every node can run somewhere.

        Raises
        ------
        InfeasiblePlanError
            Duplicate or unknown names, a cycle, nodes out of topological order, a node no
            unit can run, a node whose memory (:meth:`memory_use`) no unit that can run it
            holds, or weights that add up to more than the units hold together.
        ProfileError
            A missing, negative or NaN cost.
        PartunerError
            A bad link, call overhead, ``modeled``, weight or memory entry.
        """
        _check_unique("node", self.nodes)
        _check_unique("unit", self.units)
        known, units = set(self.nodes), set(self.units)
        for n in self.nodes:
            row = self.cost.get(n)
            if row is None:
                raise ProfileError(f"node {n!r} has no costs; profile it on {self.units}")
            for u in self.units:
                c = row.get(u)
                if c is None:
                    raise ProfileError(f"node {n!r} has no cost on unit {u!r}; re-profile it")
                if math.isnan(c) or c < 0:
                    raise ProfileError(f"node {n!r} has invalid cost {c!r} on unit {u!r}")
        for e in self.edges:
            for end in (e.src, e.dst):
                if end not in known:
                    raise InfeasiblePlanError(
                        f"edge {e.src!r} -> {e.dst!r} names unknown node {end!r}"
                    )
            if e.nbytes < 0:
                raise InfeasiblePlanError(f"edge {e.src!r} -> {e.dst!r} has negative nbytes")
        self._check_acyclic()
        for n in self.nodes:
            if not self.runnable_units(n):
                raise InfeasiblePlanError(f"node {n!r} cannot run on any unit; tried {self.units}")
        self._check_units(units)
        self._check_memory()

    def _check_acyclic(self) -> None:
        indegree = {n: len(self.preds(n)) for n in self.nodes}
        stack = [n for n in self.nodes if indegree[n] == 0]
        done: set[str] = set()
        while stack:
            n = stack.pop()
            done.add(n)
            for s in self.succs(n):
                indegree[s] -= 1
                if indegree[s] == 0:
                    stack.append(s)
        if len(done) < len(self.nodes):
            # Each node Kahn's algorithm leaves over has a left-over predecessor, so walking
            # predecessors from one revisits a node, and that node lies on a cycle.
            walk = [next(n for n in self.nodes if n not in done)]
            at = {walk[0]: 0}
            while True:
                p = next(p for p in self.preds(walk[-1]) if p not in done)
                if p in at:
                    cycle = walk[at[p] :][::-1]
                    break
                at[p] = len(walk)
                walk.append(p)
            raise InfeasiblePlanError(
                f"the graph has a cycle: {' -> '.join([*cycle, cycle[0]])}; nodes must form a DAG"
            )
        for e in self.edges:
            if self.index(e.src) > self.index(e.dst):
                raise InfeasiblePlanError(
                    f"nodes are not in topological order: {e.dst!r} comes before its input "
                    f"{e.src!r}; list producers first"
                )

    def _check_units(self, units: set[str]) -> None:
        for (a, b), link in self.links.items():
            for u in (a, b):
                if u not in units:
                    raise PartunerError(f"link {a!r}-{b!r} names unknown unit {u!r}")
            _check_link(link, f"link {a!r}-{b!r}")
        _check_link(self.default_link, "default link")
        for u, t in self.call_overhead_us.items():
            if u not in units:
                raise PartunerError(f"call overhead given for unknown unit {u!r}")
            if not t >= 0:
                raise PartunerError(f"call overhead of unit {u!r} must be >= 0, not {t!r}")
        if not self.modeled <= units:
            raise PartunerError(f"modeled names unknown units {sorted(self.modeled - units)}")
        for key in ("boundary_us_per_byte", "boundary_out_us_per_byte"):
            for u, t in getattr(self, key).items():
                if u not in units:
                    raise PartunerError(f"{key} given for unknown unit {u!r}")
                if not (t >= 0 and math.isfinite(t)):
                    raise PartunerError(f"{key} of unit {u!r} must be >= 0, not {t!r}")
        for u in self.resources:
            if u not in units:
                raise PartunerError(f"resources given for unknown unit {u!r}")
        if self.default_unit is not None and self.default_unit not in units:
            raise PartunerError(f"default unit {self.default_unit!r} is not a unit of {self.units}")
        known = set(self.nodes)
        for g in self.groups:
            if len(g.nodes) < 2 or not set(g.nodes) <= known:
                raise PartunerError(f"fused group {list(g.nodes)} needs >= 2 known nodes")
            for a, b in zip(g.nodes, g.nodes[1:], strict=False):
                if a not in self.preds(b):
                    raise PartunerError(
                        f"fused group {list(g.nodes)} is not a chain: {b!r} does not read {a!r}"
                    )
            for u, c in g.cost.items():
                if u not in units or not c >= 0:
                    raise PartunerError(
                        f"fused group {list(g.nodes)} has a bad cost {c!r} on {u!r}"
                    )

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The problem as JSON-ready data (see the module docstring for the schema)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "nodes": list(self.nodes),
            "units": list(self.units),
            "cost": {n: {u: _num(c) for u, c in row.items()} for n, row in self.cost.items()},
            "edges": [
                {"src": e.src, "dst": e.dst, "nbytes": e.nbytes, "values": list(e.values)}
                for e in self.edges
            ],
            "links": [
                {"a": a, "b": b, "latency_us": _num(k.latency_us), "gbps": _num(k.gbps)}
                for (a, b), k in self.links.items()
            ],
            "default_link": {
                "latency_us": _num(self.default_link.latency_us),
                "gbps": _num(self.default_link.gbps),
            },
            "call_overhead_us": {u: _num(t) for u, t in self.call_overhead_us.items()},
            "modeled": sorted(self.modeled),
            "resources": {u: sorted(r) for u, r in self.resources.items()},
            "groups": [
                {"nodes": list(g.nodes), "cost": {u: _num(c) for u, c in g.cost.items()}}
                for g in self.groups
            ],
            "default_unit": self.default_unit,
            "boundary_us_per_byte": dict(self.boundary_us_per_byte),
            "boundary_out_us_per_byte": dict(self.boundary_out_us_per_byte),
            "weight_bytes": dict(self.weight_bytes),
            "memory_bytes": {u: _num(b) for u, b in self.memory_bytes.items()},
        }

    def to_json(self, indent: int | None = 1) -> str:
        """The problem as JSON text (the ``--dump-problem`` format)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Problem:
        """Build a problem from :meth:`to_dict` data; raises ``PartunerError`` if malformed."""
        try:
            if data.get("format") != FORMAT or data.get("version") != VERSION:
                raise PartunerError(
                    f"not a {FORMAT} version {VERSION} file "
                    f"(format {data.get('format')!r}, version {data.get('version')!r})"
                )
            dl = data.get("default_link", {"latency_us": 0.0, "gbps": "inf"})
            return cls(
                nodes=[str(n) for n in data["nodes"]],
                units=[str(u) for u in data["units"]],
                cost={
                    str(n): {str(u): _float(c) for u, c in row.items()}
                    for n, row in data["cost"].items()
                },
                edges=[
                    Edge(
                        str(e["src"]),
                        str(e["dst"]),
                        int(e["nbytes"]),
                        tuple(str(v) for v in e.get("values", ())),
                    )
                    for e in data.get("edges", [])
                ],
                links={
                    (str(k["a"]), str(k["b"])): Link(_float(k["latency_us"]), _float(k["gbps"]))
                    for k in data.get("links", [])
                },
                default_link=Link(_float(dl["latency_us"]), _float(dl["gbps"])),
                call_overhead_us={
                    str(u): _float(t) for u, t in data.get("call_overhead_us", {}).items()
                },
                modeled=frozenset(str(u) for u in data.get("modeled", [])),
                name=str(data.get("name", "problem")),
                resources={
                    str(u): frozenset(str(r) for r in rs)
                    for u, rs in data.get("resources", {}).items()
                },
                groups=[
                    FusedGroup(
                        tuple(str(n) for n in g["nodes"]),
                        {str(u): _float(c) for u, c in g["cost"].items()},
                    )
                    for g in data.get("groups", [])
                ],
                default_unit=data.get("default_unit"),
                boundary_us_per_byte={
                    str(u): _float(t) for u, t in data.get("boundary_us_per_byte", {}).items()
                },
                boundary_out_us_per_byte={
                    str(u): _float(t) for u, t in data.get("boundary_out_us_per_byte", {}).items()
                },
                weight_bytes={str(n): _int(w) for n, w in data.get("weight_bytes", {}).items()},
                memory_bytes={str(u): _float(b) for u, b in data.get("memory_bytes", {}).items()},
            )
        except PartunerError:
            raise
        except KeyError as exc:
            raise PartunerError(f"problem JSON lacks required key {exc.args[0]!r}") from None
        except (AttributeError, TypeError, ValueError) as exc:
            raise PartunerError(f"malformed problem JSON: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> Problem:
        """Parse :meth:`to_json` output; raises ``PartunerError`` if malformed."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PartunerError(f"problem file is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise PartunerError(
                f"malformed problem JSON: it holds a {type(data).__name__}, not the object "
                '--dump-problem writes ({"nodes": [...], "units": [...], ...})'
            )
        return cls.from_dict(data)


def _check_unique(kind: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InfeasiblePlanError(f"{kind} {name!r} is listed twice; {kind} names must differ")
        seen.add(name)


def _check_link(link: Link, what: str) -> None:
    if not (link.latency_us >= 0 and link.gbps > 0) or math.isinf(link.latency_us):
        raise PartunerError(
            f"{what} needs a finite latency_us >= 0 and gbps > 0, got "
            f"latency_us={link.latency_us!r}, gbps={link.gbps!r}"
        )


def _num(x: float) -> float | str:
    if math.isnan(x) or x == -math.inf:
        raise PartunerError(f"cannot write {x!r} to a problem file")
    return "inf" if x == math.inf else x


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int | float) or not float(x).is_integer():
        raise ValueError(f"expected a whole number of bytes, got {x!r}")
    return int(x)


def _float(x: Any) -> float:
    if isinstance(x, str):
        if x.strip().lower() not in ("inf", "infinity", "+inf"):
            raise ValueError(f"expected a number or 'inf', got {x!r}")
        return math.inf
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"expected a number or 'inf', got {x!r}")
    value = float(x)
    if math.isnan(value):
        raise ValueError("NaN is not allowed")
    return value
