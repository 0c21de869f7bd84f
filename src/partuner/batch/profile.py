"""Latency of a whole model per unit and batch size, and the piecewise-linear curve through it.

What is timed is what a split will pay: for a measured unit, the full ``runner.run`` call from
numpy inputs to numpy outputs (for a device unit this includes the upload and the download), the
same way for every unit. A modeled unit's time is its roofline over the batched graph plus the
input upload and output download over the unit set's default link.

Sizes: 1, 2, 4, ... up to the largest batch asked for, plus that batch; then, where the cost per
item changes by more than :data:`JUMP` between two powers of two ``p`` and ``2p``, the neighbours
``p + 1`` and ``2p - 1`` as well (tile and padding effects show up there). A unit that fails at a
size is not tried at larger ones: its curve ends at its largest good size.

Each figure is stored in the profile store under the unit's fingerprint and the signature
``__batch__#<model digest>#b<B>``, so a second run (or another unit with the same fingerprint)
reuses it. A unit reached through a transport (a Ray node) keys it by its route as well
(``<fingerprint>@ray:<node ip>``): the same board behind another route pays another call.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from partuner.batch.model import BatchModel
from partuner.graph.model import MAX_INPUT_ELEMENTS
from partuner.profile.measure import random_feeds, time_call
from partuner.profile.store import Measurement, ProfileStore
from partuner.units import Unit, UnitSet

__all__ = [
    "JUMP",
    "BatchProfile",
    "LatencyCurve",
    "UnitFailure",
    "batch_signature",
    "measure_sizes",
    "power_sizes",
    "profile_batches",
]

log = logging.getLogger(__name__)

#: relative change of the cost per item between p and 2p that makes p+1 and 2p-1 worth timing
JUMP = 0.10

Progress = Callable[[int, int, str], None]


def batch_signature(model: BatchModel, batch: int) -> str:
    """The profile-store signature of ``model`` run whole at batch size ``batch``.

    Examples
    --------
    >>> from partuner.graph import zoo
    >>> batch_signature(BatchModel(zoo.build("branchy", image_size=8)), 4).startswith("__batch__#")
    True
    """
    return f"__batch__#{model.digest}#b{batch}"


def power_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, ... below ``max_batch``, and ``max_batch`` itself.

    Examples
    --------
    >>> power_sizes(100)
    [1, 2, 4, 8, 16, 32, 64, 100]
    >>> power_sizes(1)
    [1]
    """
    out, p = [], 1
    while p < max_batch:
        out.append(p)
        p *= 2
    return [*out, max_batch]


def jump_neighbours(points: dict[int, float], max_batch: int) -> list[int]:
    """Sizes ``p + 1`` and ``2p - 1`` for each measured pair of powers of two ``p < 2p`` whose
    cost per item differs by more than :data:`JUMP`, not yet measured.

    Examples
    --------
    >>> jump_neighbours({1: 10.0, 2: 20.0, 4: 24.0, 8: 48.0}, 8)
    [3]
    """
    out: set[int] = set()
    p = 1
    while 2 * p <= max_batch:
        q = 2 * p
        if p in points and q in points and points[p] > 0:
            per_p, per_q = points[p] / p, points[q] / q
            if abs(per_q - per_p) > JUMP * per_p:
                out.update(b for b in (p + 1, q - 1) if p < b < q)
        p = q
    return sorted(b for b in out if b not in points)


@dataclass(frozen=True)
class LatencyCurve:
    """Latency of one unit as a function of the batch size: linear between measured points.

    ``points`` are ``(batch, µs)`` with increasing batch; the curve is made non-decreasing (each
    point is raised to the largest before it) so that more items never look cheaper. It is 0 at
    batch 0 (the unit is not called) and ``inf`` beyond ``max_batch``.

    Examples
    --------
    >>> c = LatencyCurve("cpu0", ((1, 100.0), (4, 160.0)))
    >>> c(0), c(1), c(2), c(4), c(5)
    (0.0, 100.0, 120.0, 160.0, inf)
    >>> c.items_within(130.0)
    2
    """

    unit: str
    points: tuple[tuple[int, float], ...]
    modeled: bool = False
    _xs: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _ys: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pts = sorted(self.points)
        if not pts or pts[0][0] < 1:
            raise ValueError(f"curve of {self.unit!r} needs points at batch sizes >= 1, got {pts}")
        xs, ys, top = [], [], 0.0
        for b, us in pts:
            if xs and b == xs[-1]:
                raise ValueError(f"curve of {self.unit!r} has batch size {b} twice")
            top = max(top, float(us))
            xs.append(int(b))
            ys.append(top)
        object.__setattr__(self, "points", tuple(zip(xs, ys, strict=True)))
        object.__setattr__(self, "_xs", tuple(xs))
        object.__setattr__(self, "_ys", tuple(ys))

    @property
    def max_batch(self) -> int:
        return self._xs[-1]

    def __call__(self, batch: int) -> float:
        """Predicted µs for ``batch`` items (0 for none, inf beyond ``max_batch``)."""
        if batch <= 0:
            return 0.0
        xs, ys = self._xs, self._ys
        if batch > xs[-1]:
            return math.inf
        if batch <= xs[0]:  # below the first point: the first point's time (a unit has overhead)
            return ys[0]
        i = bisect.bisect_left(xs, batch)
        if xs[i] == batch:
            return ys[i]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (batch - x0) / (x1 - x0)

    def items_within(self, t_us: float) -> int:
        """The most items the unit finishes within ``t_us`` (0 if not even one)."""
        lo, hi = 0, self.max_batch
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self(mid) <= t_us:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def to_dict(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "modeled": self.modeled,
            "max_batch": self.max_batch,
            "points": [{"batch": b, "us": us} for b, us in self.points],
        }


@dataclass(frozen=True)
class UnitFailure:
    """A unit failed to run the model at ``batch``; it is kept to smaller sizes."""

    unit: str
    batch: int  # 0: the unit cannot run the model at any size (its ops list)
    reason: str

    def message(self, limit: int) -> str:
        if self.batch == 0:
            return f"unit {self.unit!r} cannot run the whole model ({self.reason}); it is left out"
        what = f"it takes at most {limit} items" if limit else "it is left out"
        return f"unit {self.unit!r} fails at batch {self.batch} ({self.reason}); {what}"


def ops_left_out(model: BatchModel, unit: Unit) -> list[str]:
    """The op types of ``model`` that ``unit``'s ops list leaves out (a data split runs the
    whole model on each unit it gives items to)."""
    graph = model.at(1)
    return sorted({n.op_type for n in graph.compute_nodes if not unit.supports(n, graph)})


@dataclass
class BatchProfile:
    """Per unit: the measured table (batch -> Measurement), the fitted curve, any failure."""

    model: str
    max_batch: int
    table: dict[str, dict[int, Measurement]]
    curves: dict[str, LatencyCurve]
    failures: dict[str, UnitFailure]
    measured: int = 0
    reused: int = 0

    def notes(self) -> list[str]:
        """One line per unit that failed at some size."""
        out = []
        for name, f in self.failures.items():
            c = self.curves.get(name)
            out.append(f.message(c.max_batch if c is not None else 0))
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "max_batch": self.max_batch,
            "units": {
                u: {
                    "table": {
                        str(b): {
                            "median_us": m.median_us,
                            "p10_us": m.p10_us,
                            "p90_us": m.p90_us,
                            "status": m.status,
                            "detail": m.detail,
                        }
                        for b, m in sorted(rows.items())
                    },
                    "curve": self.curves[u].to_dict() if u in self.curves else None,
                }
                for u, rows in self.table.items()
            },
            "failures": {
                u: {"batch": f.batch, "reason": f.reason} for u, f in self.failures.items()
            },
            "measured": self.measured,
            "reused": self.reused,
        }


_NO_FAILURE = UnitFailure("", 2**62, "")


def profile_batches(
    model: BatchModel,
    units: UnitSet,
    max_batch: int,
    *,
    store: ProfileStore | None = None,
    unit_names: Iterable[str] | None = None,
    budget_s: float = 0.5,
    min_repeats: int = 5,
    progress: Progress | None = None,
) -> BatchProfile:
    """Time ``model`` whole on each unit at the sampled batch sizes up to ``max_batch``.

    Parameters
    ----------
    model : the model (see :class:`BatchModel`).
    units : the unit set; ``unit_names`` restricts it (default: every unit).
    max_batch : the largest batch to time (the batch to split).
    store : looked up first, and every new figure saved at once.
    budget_s, min_repeats : per size, passed to :func:`partuner.profile.time_call`.
    progress : called as ``progress(done, total, what)``.

    Raises
    ------
    BatchError : ``max_batch`` < 1.
    UnitUnavailableError : a unit cannot run here.
    """
    from partuner.batch.model import BatchError
    from partuner.errors import UnitUnavailableError

    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise BatchError(f"batch size must be an integer >= 1, got {max_batch!r}")
    one = model.at(1)  # what one item holds, before sizes up to max_batch are made and timed
    for name in one.inputs:
        if (n := max_batch * math.prod(one.values[name].shape)) > MAX_INPUT_ELEMENTS:
            raise BatchError(
                f"a batch of {max_batch} makes input {name!r} {n:.3g} elements, more than "
                f"{MAX_INPUT_ELEMENTS}: split it into smaller batches"
            )
    names = list(unit_names) if unit_names is not None else list(units.units)
    for name in names:
        ok, why = units[name].availability()
        if not ok:
            raise UnitUnavailableError(
                f"unit {name!r} is not available here: {why}; remove it from the units file"
            )
    prof = BatchProfile(model.name, max_batch, {n: {} for n in names}, {}, {})
    base = power_sizes(max_batch)
    total, done = len(base) * len(names), 0
    for name in names:
        unit, rows = units[name], prof.table[name]
        missing = ops_left_out(model, unit)
        if missing:
            why = f"its ops list leaves out {', '.join(missing)}"
            prof.failures[name] = UnitFailure(name, 0, why)
            total -= len(base)
            continue
        pending, extra_done = list(base), False
        while pending:
            b = pending.pop(0)
            rows[b] = _measure(model, units, unit, b, store, prof, budget_s, min_repeats)
            done += 1
            if progress is not None:
                progress(done, total, f"{name} b={b}")
            if rows[b].status != "ok" and b < prof.failures.get(name, _NO_FAILURE).batch:
                prof.failures[name] = UnitFailure(name, b, rows[b].detail)
            limit = prof.failures[name].batch if name in prof.failures else max_batch + 1
            pending = [k for k in pending if k < limit]
            if not pending and not extra_done:  # powers done: now the neighbours of jumps
                extra_done = True
                ok = {k: m.median_us for k, m in rows.items() if m.status == "ok" and k < limit}
                pending = [k for k in jump_neighbours(ok, max_batch) if k < limit]
                total += len(pending)
        limit = prof.failures[name].batch if name in prof.failures else max_batch + 1
        good = sorted((b, m.median_us) for b, m in rows.items() if m.status == "ok" and b < limit)
        if good:
            prof.curves[name] = LatencyCurve(name, tuple(good), modeled=unit.modeled)
    for note in prof.notes():
        log.info("%s", note)
    return prof


def measure_sizes(
    model: BatchModel,
    units: UnitSet,
    prof: BatchProfile,
    sizes: Mapping[str, Iterable[int]],
    *,
    store: ProfileStore | None = None,
    budget_s: float = 0.5,
    min_repeats: int = 5,
) -> int:
    """Time more batch sizes (``{unit: sizes}``) into ``prof`` and rebuild those units' curves;
    sizes already in the table or at/above a unit's failing size are skipped. Returns how many
    sizes were added."""
    added = 0
    for name, wanted in sizes.items():
        rows = prof.table[name]
        limit = prof.failures[name].batch if name in prof.failures else prof.max_batch + 1
        for b in sorted(set(wanted)):
            if b < 1 or b >= limit or b in rows:
                continue
            rows[b] = _measure(model, units, units[name], b, store, prof, budget_s, min_repeats)
            added += 1
            if rows[b].status != "ok":
                prof.failures[name] = UnitFailure(name, b, rows[b].detail)
                limit = b
        good = sorted((b, m.median_us) for b, m in rows.items() if m.status == "ok" and b < limit)
        if good:
            prof.curves[name] = LatencyCurve(name, tuple(good), modeled=units[name].modeled)
        else:
            prof.curves.pop(name, None)
    return added


def _measure(
    model: BatchModel,
    units: UnitSet,
    unit: Unit,
    batch: int,
    store: ProfileStore | None,
    prof: BatchProfile,
    budget_s: float,
    min_repeats: int,
) -> Measurement:
    graph = model.at(batch)
    if unit.modeled:
        us = unit.modeled_time_us(graph.compute_nodes, graph)
        nin = sum(graph.values[v].nbytes for v in graph.inputs)
        nout = sum(graph.values[v].nbytes for v in graph.outputs)
        us += units.default_link.transfer_us(nin) + units.default_link.transfer_us(nout)
        return Measurement(us, us, us, 1, detail="modeled")
    route = unit.call_route()  # the whole call is timed: where it travels is part of it
    fp, sig = unit.fingerprint() + (f"@{route}" if route else ""), batch_signature(model, batch)
    if store is not None:
        hit = store.get(fp, sig)
        if hit is not None:
            prof.reused += 1
            return hit
    from partuner.errors import UnitUnavailableError

    feeds = random_feeds(graph, list(graph.inputs), seed=batch)
    try:
        runner = unit.prepare(graph.model)
        try:
            m = time_call(
                lambda: runner.run(feeds),
                warmup=1 if batch > 1 else 2,
                min_repeats=min_repeats,
                budget_s=budget_s,
            )
        finally:
            runner.close()
    except UnitUnavailableError:
        raise
    except Exception as exc:  # a backend that cannot take this size (memory, limits, ...)
        text = str(exc).strip().splitlines()
        detail = (text[0] if text else type(exc).__name__)[:200]
        if detail.startswith(f"unit {unit.name!r}") and ": " in detail:
            detail = detail.split(": ", 1)[1]  # the failure note names the unit already
        m = Measurement(math.inf, math.inf, math.inf, 0, status="unsupported", detail=detail)
    prof.measured += 1
    if store is not None:
        store.put(fp, sig, m, description=str(unit.describe()))
    return m
