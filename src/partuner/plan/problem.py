"""The scheduling problem: a DAG of nodes, a cost table over units, and the links between units.

A :class:`Problem` is all the planner sees: no ONNX, no backends. ``--dump-problem`` writes it
as JSON (:mod:`partuner.plan.problem_json` holds the schema, reading and writing).

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

#: the most µs a cost, call overhead or link latency may be (11.6 days: more is no measurement,
#: and the exact schedulers' integer time grid overflows)
MAX_US = 1e12
#: the most bytes an edge may move (a petabyte)
MAX_BYTES = 10**15
#: the largest co-run factor a problem may carry (a unit 100x slower beside another is no
#: measurement of shared caches)
MAX_CORUN = 100.0

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
    default_link: Link = field(default_factory=lambda: Link(latency_us=0.0, gbps=math.inf))
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
    #: the units timed side by side (profile/corun.py) -> each one's factor (>= 1) on what its
    #: partitions take while another of them works too (plan/simulate.py, plan/stream.py)
    corun: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.modeled = frozenset(self.modeled)
        self.resources = {u: frozenset(r) for u, r in self.resources.items()}

    # -- shared hardware -------------------------------------------------------------------

    def resources_of(self, unit: str) -> frozenset[str]:
        """The hardware ``unit`` occupies while it runs (default: a resource of its own)."""
        got = self._resources_of.get(unit)
        return got if got is not None else frozenset({f"unit:{unit}"})

    def conflicts(self, unit: str) -> frozenset[str]:
        """The units (``unit`` included) that can never run at the same time as ``unit``."""
        return self._conflicts[unit]

    @property
    def shares_hardware(self) -> bool:
        """True when some two units occupy a common resource."""
        return any(len(c) > 1 for c in self._conflicts.values())

    @cached_property
    def default(self) -> str:
        """NEST-C's default unit: ``default_unit``, else the first unit that can run every node
        (NEST-C's default backend, the CPU, runs whatever no accelerator takes), else the
        first unit (found once: asked per node)."""
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
    def _resources_of(self) -> dict[str, frozenset[str]]:
        # the local searches ask this hundreds of times per plan they judge
        return {u: self.resources.get(u) or frozenset({f"unit:{u}"}) for u in self.units}

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
        if self.default_unit is not None and not isinstance(self.default_unit, str):
            raise PartunerError(f"default unit must be a unit's name, not {self.default_unit!r}")
        known, units = set(self.nodes), set(self.units)
        for n in self.nodes:
            row = self.cost.get(n)
            if row is None:
                raise ProfileError(f"node {n!r} has no costs; profile it on {self.units}")
            for u in self.units:
                c = row.get(u)
                if c is None:
                    raise ProfileError(f"node {n!r} has no cost on unit {u!r}; re-profile it")
                if math.isnan(c) or c < 0 or (MAX_US < c < math.inf):
                    raise ProfileError(
                        f"node {n!r} has invalid cost {c!r} on unit {u!r} (µs: 0 to "
                        f"{MAX_US:g}, or inf where it cannot run)"
                    )
        for e in self.edges:
            for end in (e.src, e.dst):
                if end not in known:
                    raise InfeasiblePlanError(
                        f"edge {e.src!r} -> {e.dst!r} names unknown node {end!r}"
                    )
            if not 0 <= e.nbytes <= MAX_BYTES:
                raise InfeasiblePlanError(
                    f"edge {e.src!r} -> {e.dst!r} moves {e.nbytes!r} bytes; give 0 to {MAX_BYTES:g}"
                )
        self._check_acyclic()
        for n in self.nodes:
            if not self.runnable_units(n):
                raise InfeasiblePlanError(
                    f"node {n!r} cannot run on any unit; tried {self.units}: add its op type to a "
                    "unit's ops list, or add a unit that runs every operator (onnxruntime)"
                )
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
            shown = [*cycle, cycle[0]] if len(cycle) <= 6 else [*cycle[:4], "...", *cycle[-1:]]
            raise InfeasiblePlanError(
                f"the graph has a cycle of {len(cycle)} node(s): {' -> '.join(shown)}"
                f"{f' -> {cycle[0]}' if len(cycle) > 6 else ''}; nodes must form a DAG"
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
            if not 0 <= t <= MAX_US:
                raise PartunerError(
                    f"call overhead of unit {u!r} must be from 0 to {MAX_US:g} µs, not {t!r}"
                )
        if not self.modeled <= units:
            raise PartunerError(f"modeled names unknown units {sorted(self.modeled - units)}")
        for key in ("boundary_us_per_byte", "boundary_out_us_per_byte"):
            for u, t in getattr(self, key).items():
                if u not in units:
                    raise PartunerError(f"{key} given for unknown unit {u!r}")
                if not 0 <= t <= MAX_US:
                    raise PartunerError(f"{key} of unit {u!r} must be >= 0 and finite, not {t!r}")
        for u in self.resources:
            if u not in units:
                raise PartunerError(f"resources given for unknown unit {u!r}")
        for u, f in self.corun.items():
            if u not in units:
                raise PartunerError(f"corun given for unknown unit {u!r}")
            if not (1.0 <= f <= MAX_CORUN):
                raise PartunerError(
                    f"corun of unit {u!r} must be a factor from 1 to {MAX_CORUN:g}, not {f!r}"
                )
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

    # -- JSON (partuner.plan.problem_json) ------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The problem as JSON-ready data (the schema: :mod:`partuner.plan.problem_json`)."""
        from partuner.plan.problem_json import problem_to_dict

        return problem_to_dict(self)

    def to_json(self, indent: int | None = 1) -> str:
        """The problem as JSON text (the ``--dump-problem`` format)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Problem:
        """Build a problem from :meth:`to_dict` data; raises ``PartunerError`` if malformed."""
        from partuner.plan.problem_json import problem_from_dict

        return problem_from_dict(data)

    @classmethod
    def from_json(cls, text: str) -> Problem:
        """Parse :meth:`to_json` output; raises ``PartunerError`` if malformed."""
        from partuner.plan.problem_json import problem_from_json

        return problem_from_json(text)


def _check_unique(kind: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InfeasiblePlanError(f"{kind} {name!r} is listed twice; {kind} names must differ")
        seen.add(name)


def _check_link(link: Link, what: str) -> None:
    if not (0 <= link.latency_us <= MAX_US and link.gbps > 0):
        raise PartunerError(
            f"{what} needs a finite latency_us >= 0 and gbps > 0, got "
            f"latency_us={link.latency_us!r}, gbps={link.gbps!r}"
        )
