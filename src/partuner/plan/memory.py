"""Per-unit memory: what a placement keeps on each unit, and finding a placement that fits.

The memory model (:meth:`MemoryModel.memory_use`): a unit running nodes ``N`` holds the weights
of every node of ``N`` (``Problem.weight_bytes``) plus the largest output one of them passes on
(:meth:`MemoryModel.activation_bytes`), and must not exceed its capacity
(``Problem.memory_bytes``; a unit not listed is unlimited). Which nodes go where is all that
matters, not when they run.

:class:`MemoryModel` holds the problem's memory queries and checks (``Problem`` inherits them);
:class:`Ledger` tracks the use while a scheduler places nodes one at a time; :func:`overflow`
finds a unit over its capacity; :func:`pack` finds a placement within the capacities, keeping
the units a scheduler preferred where they fit (the fallback of schedulers whose own method
runs out of memory).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from partuner.errors import InfeasiblePlanError, PartunerError

if TYPE_CHECKING:
    from partuner.plan.problem import Edge, Problem

__all__ = [
    "Ledger",
    "MemoryModel",
    "Overflow",
    "overflow",
    "pack",
    "no_fit_error",
    "format_bytes",
    "MAX_SEARCH_STEPS",
]

#: Placements :func:`pack`'s backtracking search tries before it gives up.
MAX_SEARCH_STEPS = 100_000


class MemoryModel:
    """The memory queries and checks of a :class:`~partuner.plan.problem.Problem`, which
    inherits them; they read its ``weight_bytes``, ``memory_bytes`` and edges."""

    # provided by Problem
    nodes: list[str]
    units: list[str]
    cost: dict[str, dict[str, float]]
    edges: list[Edge]
    name: str
    weight_bytes: dict[str, int]
    memory_bytes: dict[str, float]

    if TYPE_CHECKING:

        def payload(self, i: int) -> dict[Hashable, float]: ...
        def runnable_units(self, n: str) -> list[str]: ...

    def capacity(self, unit: str) -> float:
        """The bytes of memory ``unit`` holds (``math.inf`` when unlimited)."""
        return self.memory_bytes.get(unit, math.inf)

    def weights(self, node: str) -> int:
        """The bytes of weights ``node`` keeps resident on its unit."""
        return self.weight_bytes.get(node, 0)

    def activation_bytes(self, node: str) -> int:
        """The bytes of output ``node`` passes to other nodes (each distinct value once,
        ``Problem.payload``): its live activations while it runs. A value no node reads (a model
        output) is not counted."""
        return self._activations.get(node, 0)

    def memory_use(self, nodes: Iterable[str]) -> int:
        """Bytes a unit needs to run ``nodes``: their weights, all resident at once, plus the
        largest :meth:`activation_bytes` among them (one node's output live at a time).

        >>> from partuner.plan.problem import Edge, Problem
        >>> p = Problem(["a", "b"], ["u"], {"a": {"u": 1}, "b": {"u": 1}},
        ...             [Edge("a", "b", 300)], weight_bytes={"a": 1000, "b": 50})
        >>> p.memory_use(["a", "b"]), p.memory_use(["b"])
        (1350, 50)
        """
        nodes = list(nodes)
        return sum(self.weights(n) for n in nodes) + max(
            (self.activation_bytes(n) for n in nodes), default=0
        )

    @cached_property
    def memory_limited(self) -> bool:
        """True when some unit's memory could not hold every node it can run, so where nodes
        go is constrained by memory (schedulers skip their memory checks otherwise)."""
        for u in self.units:
            if math.isfinite(self.capacity(u)):
                able = [n for n in self.nodes if math.isfinite(self.cost[n][u])]
                if self.memory_use(able) > self.capacity(u):
                    return True
        return False

    @cached_property
    def _activations(self) -> dict[str, int]:
        out: dict[str, dict[Hashable, float]] = {}
        for i, e in enumerate(self.edges):
            out.setdefault(e.src, {}).update(self.payload(i))
        return {n: math.ceil(sum(d.values())) for n, d in out.items()}

    def _check_memory(self) -> None:
        """Raise on bad weights or capacities, a node no unit that can run it has the memory
        for, or weights beyond what the units hold together (called by ``Problem.validate``)."""
        known, units = set(self.nodes), set(self.units)
        for n, w in self.weight_bytes.items():
            if n not in known:
                raise PartunerError(f"weight_bytes given for unknown node {n!r}")
            if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                raise PartunerError(
                    f"weight_bytes of node {n!r} must be an integer >= 0, not {w!r}"
                )
        for u, cap in self.memory_bytes.items():
            if u not in units:
                raise PartunerError(f"memory_bytes given for unknown unit {u!r}")
            if not cap > 0:
                raise PartunerError(f"memory_bytes of unit {u!r} must be > 0, not {cap!r}")
        if not self.memory_bytes:
            return
        for n in self.nodes:
            need = self.memory_use([n])
            able = self.runnable_units(n)
            if all(self.capacity(u) < need for u in able):
                held = ", ".join(f"{u} {format_bytes(self.capacity(u))}" for u in able)
                raise InfeasiblePlanError(
                    f"node {n!r} of {self.name!r} needs {format_bytes(need)} of memory "
                    f"({format_bytes(self.weights(n))} of weights + "
                    f"{format_bytes(self.activation_bytes(n))} of output) but no unit that can "
                    f"run it holds that much ({held}); give one of them more memory (memory_mb)"
                )
        total = sum(self.weights(n) for n in self.nodes)
        room = sum(self.capacity(u) for u in self.units)
        if total > room:
            held = ", ".join(f"{u} {format_bytes(self.capacity(u))}" for u in self.units)
            raise InfeasiblePlanError(
                f"the weights of {self.name!r} total {format_bytes(total)} but the units hold "
                f"{format_bytes(room)} together ({held}): {format_bytes(total - room)} too "
                "much; add units or give them more memory (memory_mb)"
            )


def format_bytes(nbytes: float) -> str:
    """A size for messages: bytes below a megabyte, else MB (10^6 bytes).

    >>> format_bytes(512), format_bytes(2_500_000), format_bytes(math.inf)
    ('512 bytes', '2.5 MB', 'unlimited')
    """
    if math.isinf(nbytes):
        return "unlimited"
    if abs(nbytes) < 1e6:
        return f"{nbytes:.0f} bytes"
    return f"{nbytes / 1e6:.4g} MB"


class Ledger:
    """The memory each unit uses as nodes are placed, one at a time.

    >>> from partuner.plan.problem import Problem
    >>> p = Problem(["a", "b"], ["u"], {"a": {"u": 1}, "b": {"u": 1}},
    ...             weight_bytes={"a": 60, "b": 60}, memory_bytes={"u": 100})
    >>> ledger = Ledger(p)
    >>> ledger.fits("a", "u")
    True
    >>> ledger.take("a", "u")
    >>> ledger.fits("b", "u")
    False
    """

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.weights = dict.fromkeys(problem.units, 0)
        self.peak = dict.fromkeys(problem.units, 0)

    def use(self, unit: str) -> int:
        """Bytes ``unit`` holds now."""
        return self.weights[unit] + self.peak[unit]

    def use_with(self, node: str, unit: str) -> int:
        """Bytes ``unit`` would hold with ``node`` placed on it too."""
        p = self.problem
        return self.weights[unit] + p.weights(node) + max(self.peak[unit], p.activation_bytes(node))

    def room_after(self, node: str, unit: str) -> float:
        """Bytes left on ``unit`` once ``node`` is placed on it (``inf`` when unlimited)."""
        return self.problem.capacity(unit) - self.use_with(node, unit)

    def fits(self, node: str, unit: str) -> bool:
        """Whether ``unit`` has room for ``node``."""
        return self.room_after(node, unit) >= 0

    def take(self, node: str, unit: str) -> None:
        """Place ``node`` on ``unit`` (whether it fits or not)."""
        self.weights[unit] += self.problem.weights(node)
        self.peak[unit] = max(self.peak[unit], self.problem.activation_bytes(node))


@dataclass(frozen=True)
class Overflow:
    """Unit ``unit`` holds ``weights`` + ``activations`` bytes, more than its ``capacity``."""

    unit: str
    weights: int
    activations: int
    capacity: float

    @property
    def use(self) -> int:
        return self.weights + self.activations

    def __str__(self) -> str:
        return (
            f"unit {self.unit!r} holds {format_bytes(self.use)} ({format_bytes(self.weights)} "
            f"of weights + {format_bytes(self.activations)} of activations) but its memory is "
            f"{format_bytes(self.capacity)}"
        )


def overflow(problem: Problem, assignment: Mapping[str, str]) -> Overflow | None:
    """The first unit (in problem order) that ``assignment`` fills past its capacity, if any.

    >>> from partuner.plan.problem import Problem
    >>> p = Problem(["a", "b"], ["u", "v"], {n: {"u": 1, "v": 1} for n in "ab"},
    ...             weight_bytes={"a": 60, "b": 60}, memory_bytes={"u": 100})
    >>> full = overflow(p, {"a": "u", "b": "u"})
    >>> full.unit, full.use, full.capacity
    ('u', 120, 100)
    >>> overflow(p, {"a": "u", "b": "v"}) is None
    True
    """
    if not problem.memory_bytes:
        return None
    ledger = Ledger(problem)
    for n, u in assignment.items():
        if u in ledger.weights:
            ledger.take(n, u)
    for u in problem.units:
        if ledger.use(u) > problem.capacity(u):
            return Overflow(u, ledger.weights[u], ledger.peak[u], problem.capacity(u))
    return None


def no_fit_error(problem: Problem) -> InfeasiblePlanError:
    """The error for a problem whose nodes :func:`pack` could not fit into the units."""
    held = ", ".join(
        f"{u} {format_bytes(problem.capacity(u))}"
        for u in problem.units
        if math.isfinite(problem.capacity(u))
    )
    total = sum(problem.weights(n) for n in problem.nodes)
    return InfeasiblePlanError(
        f"found no placement of {problem.name!r} ({format_bytes(total)} of weights) that fits "
        f"the units' memory ({held}); give the units more memory (memory_mb) or add units"
    )


def pack(
    problem: Problem,
    prefer: Mapping[str, str] | None = None,
    *,
    max_steps: int = MAX_SEARCH_STEPS,
) -> dict[str, str] | None:
    """A unit for every node such that no unit exceeds its memory, or ``None`` if none found.

    Nodes are taken by decreasing memory (weights + output; ties in topological order). Three
    greedy passes are tried in turn: each node on its ``prefer`` unit when that unit can run it
    and has room, else on the cheapest unit with room (ties: the most room left); best fit
    (the capable unit left with the least room); worst fit (the most room). If all three fail,
    a backtracking search in the same node order (``prefer`` unit first, then by cost) tries
    up to ``max_steps`` placements, so a small problem with any placement gets one.

    Parameters
    ----------
    problem : Problem
        A validated problem.
    prefer : mapping, optional
        ``{node: unit}`` to keep where it fits (e.g. a scheduler's choice); nodes missing from
        it prefer their cheapest unit.
    max_steps : int
        Bound on the backtracking search.

    Returns
    -------
    dict or None
        ``{node: unit}`` within every unit's capacity, or ``None``.

    Examples
    --------
    >>> from partuner.plan.problem import Problem
    >>> p = Problem(["a", "b"], ["u", "v"], {"a": {"u": 1, "v": 5}, "b": {"u": 1, "v": 5}},
    ...             weight_bytes={"a": 60, "b": 60}, memory_bytes={"u": 100})
    >>> pack(p, {"a": "u", "b": "u"})
    {'a': 'u', 'b': 'v'}
    """
    prefer = dict(prefer or {})
    for n in problem.nodes:
        if n not in prefer or math.isinf(problem.cost[n].get(prefer[n], math.inf)):
            prefer[n] = min(problem.runnable_units(n), key=lambda u: problem.cost[n][u])
    order = sorted(
        problem.nodes,
        key=lambda n: (-(problem.weights(n) + problem.activation_bytes(n)), problem.index(n)),
    )

    def preferred(ledger: Ledger, n: str, able: list[str]) -> str:
        if prefer[n] in able:
            return prefer[n]
        return min(able, key=lambda u: (problem.cost[n][u], -ledger.room_after(n, u)))

    def tightest(ledger: Ledger, n: str, able: list[str]) -> str:
        return min(able, key=lambda u: (ledger.room_after(n, u), problem.cost[n][u]))

    def loosest(ledger: Ledger, n: str, able: list[str]) -> str:
        return min(able, key=lambda u: (-ledger.room_after(n, u), problem.cost[n][u]))

    for choose in (preferred, tightest, loosest):
        ledger = Ledger(problem)
        out: dict[str, str] = {}
        for n in order:
            able = [u for u in problem.runnable_units(n) if ledger.fits(n, u)]
            if not able:
                break
            out[n] = choose(ledger, n, able)
            ledger.take(n, out[n])
        else:
            return {n: out[n] for n in problem.nodes}
    return _search(problem, order, prefer, max_steps)


def _search(
    problem: Problem, order: list[str], prefer: Mapping[str, str], max_steps: int
) -> dict[str, str] | None:
    """Depth-first search for a placement within capacity (at most ``max_steps`` tries)."""
    choices = [
        sorted(problem.runnable_units(n), key=lambda u, n=n: (u != prefer[n], problem.cost[n][u]))
        for n in order
    ]
    ledger = Ledger(problem)
    out: dict[str, str] = {}
    pos = [0] * len(order)  # the next choice to try at each depth
    saved: list[tuple[int, int] | None] = [None] * len(order)  # the unit's use before it
    steps = 0
    k = 0
    while 0 <= k < len(order):
        n = order[k]
        if saved[k] is not None:  # back from a dead end: undo this depth's choice
            u = out.pop(n)
            ledger.weights[u], ledger.peak[u] = saved[k]  # type: ignore[misc]
            saved[k] = None
        while pos[k] < len(choices[k]) and saved[k] is None:
            if steps >= max_steps:
                return None
            u = choices[k][pos[k]]
            pos[k] += 1
            steps += 1
            if ledger.fits(n, u):
                saved[k] = (ledger.weights[u], ledger.peak[u])
                ledger.take(n, u)
                out[n] = u
        if saved[k] is not None:
            k += 1
        else:
            pos[k] = 0
            k -= 1
    return {n: out[n] for n in problem.nodes} if k == len(order) else None
