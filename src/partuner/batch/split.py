"""Splitting ``B`` items across units: sizes ``b_u >= 0`` with ``sum b_u = B`` and the slowest
unit's time ``max_u latency_u(b_u)`` (the makespan) as small as possible.

Three methods, all on the same non-decreasing :class:`~partuner.batch.profile.LatencyCurve` per
unit and all allowed to give a unit nothing:

``exact``
    The smallest makespan ``T`` is one of the curves' values ``latency_u(b)``. For a given ``T``
    unit ``u`` can take ``n_u(T) = max{b : latency_u(b) <= T}`` items (the curves are monotone), so
    ``T`` is feasible iff ``sum n_u(T) >= B``: a binary search over the sorted candidate values
    finds the optimum. Surplus items are then taken back one at a time from the unit with the
    largest time, which never raises the makespan. Optimal; checked against
    :func:`split_brute_force` in the tests.
``greedy``
    The seed's (KCC 2020) idea: starting from nothing, repeatedly give the next ``chunk`` items
    to the unit that would finish them earliest (``latency_u(b_u + chunk)`` smallest; ties to the
    earlier unit). The seed moves items one at a time from the fastest unit, looks ahead with
    trial chunks of 1-16 items and stops after five trials that do not help; its per-item table
    is interpolated per item (not per batch) and transfers are counted on some devices only. With
    ``chunk = 1`` and non-decreasing curves the greedy is optimal too (while items are left, some
    unit has fewer than in an optimal split, and its next item ends by the optimal makespan), so
    what it loses comes from the chunk: ``chunk = 1`` by default.
``even``
    ``B / n`` items per unit (remainders to the first units), respecting each unit's limit.

Units that share hardware (``conflicts``, e.g. ``cpuall`` and ``cpu0``) never run at once: each
method is applied to every maximal conflict-free set of units and the best result is kept.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from partuner.batch.model import BatchError
from partuner.batch.profile import LatencyCurve

__all__ = [
    "METHODS",
    "Split",
    "conflicts_from_cores",
    "conflict_free_sets",
    "split_batch",
    "split_brute_force",
    "split_even",
    "split_exact",
    "split_greedy",
]

Conflicts = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class Split:
    """Items per unit (every unit with a curve, in order; 0 = not called) and the predicted
    time of each unit and of the whole split (the slowest unit), in µs."""

    method: str
    sizes: dict[str, int]
    unit_us: dict[str, float]
    predicted_us: float

    @property
    def batch(self) -> int:
        return sum(self.sizes.values())

    @property
    def active(self) -> list[str]:
        """The units that get items, in order."""
        return [u for u, b in self.sizes.items() if b > 0]

    def slices(self) -> list[tuple[str, int, int]]:
        """``(unit, start, stop)`` per active unit: contiguous ranges of the batch, in order."""
        out, start = [], 0
        for u, b in self.sizes.items():
            if b > 0:
                out.append((u, start, start + b))
                start += b
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "split": dict(self.sizes),
            "unit_ms": {u: t / 1e3 for u, t in self.unit_us.items()},
            "predicted_ms": self.predicted_us / 1e3,
        }


def conflicts_from_cores(cores: Mapping[str, Sequence[int] | None]) -> dict[str, list[str]]:
    """Units whose declared cores overlap conflict (never run at the same time).

    Examples
    --------
    >>> conflicts_from_cores({"cpu0": [0], "cpu1": [1], "cpuall": [0, 1], "npu": None})
    {'cpu0': ['cpuall'], 'cpu1': ['cpuall'], 'cpuall': ['cpu0', 'cpu1'], 'npu': []}
    """
    out: dict[str, list[str]] = {u: [] for u in cores}
    for a, b in itertools.combinations(cores, 2):
        if set(cores[a] or ()) & set(cores[b] or ()):
            out[a].append(b)
            out[b].append(a)
    return out


def conflict_free_sets(names: Sequence[str], conflicts: Conflicts | None = None) -> list[list[str]]:
    """Every maximal set of units that may run at once, each in ``names`` order.

    Examples
    --------
    >>> conflict_free_sets(["cpu0", "cpu1", "cpuall"], {"cpuall": ["cpu0", "cpu1"]})
    [['cpu0', 'cpu1'], ['cpuall']]
    """
    clash = {u: set() for u in names}
    for u, others in (conflicts or {}).items():
        for v in others:
            if u in clash and v in clash:
                clash[u].add(v)
                clash[v].add(u)

    def grow(chosen: list[str], cand: list[str], excluded: list[str]) -> Iterator[list[str]]:
        if not cand and not excluded:
            yield chosen
        for v in list(cand):
            yield from grow(
                [*chosen, v],
                [c for c in cand if c not in clash[v] and c != v],
                [x for x in excluded if x not in clash[v]],
            )
            cand.remove(v)
            excluded.append(v)

    order = {u: i for i, u in enumerate(names)}
    sets = [sorted(s, key=order.__getitem__) for s in grow([], list(names), [])]
    return sorted(sets, key=lambda s: [order[u] for u in s])


def _finish(method: str, batch: int, curves: Mapping[str, LatencyCurve], sizes: dict) -> Split:
    full = {u: sizes.get(u, 0) for u in curves}
    assert sum(full.values()) == batch, (method, full, batch)
    unit_us = {u: curves[u](b) for u, b in full.items()}
    return Split(method, full, unit_us, max(unit_us.values(), default=0.0))


def _exact_on(batch: int, curves: Sequence[LatencyCurve]) -> list[int] | None:
    caps = [min(c.max_batch, batch) for c in curves]
    if sum(caps) < batch:
        return None
    cand = sorted({c(b) for c, cap in zip(curves, caps, strict=True) for b in range(1, cap + 1)})
    lo, hi = 0, len(cand) - 1
    while lo < hi:  # smallest candidate T whose item counts cover the batch
        mid = (lo + hi) // 2
        if sum(min(c.items_within(cand[mid]), batch) for c in curves) >= batch:
            hi = mid
        else:
            lo = mid + 1
    sizes = [min(c.items_within(cand[lo]), cap) for c, cap in zip(curves, caps, strict=True)]
    for _ in range(sum(sizes) - batch):
        i = max(  # the slowest unit; among equals (flat curves) the one with the most items
            (k for k in range(len(sizes)) if sizes[k] > 0),
            key=lambda k: (curves[k](sizes[k]), sizes[k]),
        )
        sizes[i] -= 1
    return sizes


def _greedy_on(batch: int, curves: Sequence[LatencyCurve], chunk: int) -> list[int] | None:
    sizes, left = [0] * len(curves), batch
    while left:
        best, best_t, best_k = -1, math.inf, 0
        for i, c in enumerate(curves):
            k = min(chunk, left, c.max_batch - sizes[i])
            if k <= 0:
                continue
            t = c(sizes[i] + k)
            if t < best_t:
                best, best_t, best_k = i, t, k
        if best < 0:
            return None
        sizes[best] += best_k
        left -= best_k
    return sizes


def _even_on(batch: int, curves: Sequence[LatencyCurve]) -> list[int] | None:
    sizes, left = [0] * len(curves), batch
    open_ = [i for i in range(len(curves))]
    while left and open_:
        share, extra = divmod(left, len(open_))
        for k, i in enumerate(open_):
            add = min(share + (1 if k < extra else 0), curves[i].max_batch - sizes[i])
            sizes[i] += add
            left -= add
        open_ = [i for i in open_ if sizes[i] < curves[i].max_batch]
    return None if left else sizes


def _best(
    method: str,
    batch: int,
    curves: Mapping[str, LatencyCurve],
    conflicts: Conflicts | None,
    solve: Callable[[Sequence[LatencyCurve]], list[int] | None],
) -> Split:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise BatchError(f"batch size must be an integer >= 1, got {batch!r}")
    if not curves:
        raise BatchError("no unit can run the model at batch 1; see the failures above")
    best: Split | None = None
    for members in conflict_free_sets(list(curves), conflicts):
        sizes = solve([curves[u] for u in members])
        if sizes is None:
            continue
        s = _finish(method, batch, curves, dict(zip(members, sizes, strict=True)))
        if best is None or s.predicted_us < best.predicted_us:
            best = s
    if best is None:
        limits = {u: c.max_batch for u, c in curves.items()}
        raise BatchError(
            f"the units that may run together cannot take {batch} items (each unit's limit: "
            f"{limits}); lower --batch or add units"
        )
    return best


def split_exact(
    batch: int, curves: Mapping[str, LatencyCurve], conflicts: Conflicts | None = None
) -> Split:
    """The split with the smallest predicted makespan (see the module docstring).

    Examples
    --------
    >>> fast = LatencyCurve("fast", ((1, 10.0), (8, 80.0)))
    >>> slow = LatencyCurve("slow", ((1, 200.0), (8, 300.0)))
    >>> split_exact(8, {"fast": fast, "slow": slow}).sizes
    {'fast': 8, 'slow': 0}
    """
    return _best("exact", batch, curves, conflicts, lambda cs: _exact_on(batch, cs))


def split_greedy(
    batch: int,
    curves: Mapping[str, LatencyCurve],
    conflicts: Conflicts | None = None,
    *,
    chunk: int = 1,
) -> Split:
    """The seed's greedy: the next ``chunk`` items go to the unit that would finish earliest."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise BatchError(f"greedy chunk must be an integer >= 1, got {chunk!r}")
    return _best("greedy", batch, curves, conflicts, lambda cs: _greedy_on(batch, cs, chunk))


def split_even(
    batch: int, curves: Mapping[str, LatencyCurve], conflicts: Conflicts | None = None
) -> Split:
    """As even a split as the units' limits allow."""
    return _best("even", batch, curves, conflicts, lambda cs: _even_on(batch, cs))


#: the methods by name, for the CLI and the benchmark
METHODS: dict[str, Callable[..., Split]] = {
    "exact": split_exact,
    "greedy": split_greedy,
    "even": split_even,
}


def split_batch(
    batch: int,
    curves: Mapping[str, LatencyCurve],
    conflicts: Conflicts | None = None,
    method: str = "exact",
) -> Split:
    """Split with ``method`` (one of :data:`METHODS`)."""
    if method not in METHODS:
        raise BatchError(f"unknown split method {method!r}; known: {sorted(METHODS)}")
    return METHODS[method](batch, curves, conflicts)


def split_brute_force(
    batch: int, curves: Mapping[str, LatencyCurve], conflicts: Conflicts | None = None
) -> Split:
    """Try every split (for tests: a few units, small batches)."""
    names = list(curves)
    clash = {u: set((conflicts or {}).get(u, ())) for u in names}
    best: Split | None = None

    def compositions(n: int, k: int) -> Iterator[tuple[int, ...]]:
        if k == 1:
            yield (n,)
            return
        for first in range(n + 1):
            for rest in compositions(n - first, k - 1):
                yield (first, *rest)

    for sizes in compositions(batch, len(names)):
        on = [u for u, b in zip(names, sizes, strict=True) if b > 0]
        if any(v in clash[u] or u in clash[v] for u, v in itertools.combinations(on, 2)):
            continue
        s = _finish("brute", batch, curves, dict(zip(names, sizes, strict=True)))
        if best is None or s.predicted_us < best.predicted_us:
            best = s
    if best is None or math.isinf(best.predicted_us):
        raise BatchError(f"no split of {batch} items fits the units' limits")
    return best
