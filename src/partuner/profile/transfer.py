"""Measured transfer costs between units: ``latency + bytes / bandwidth`` per link.

The runtime runs every unit in one process, one worker thread per unit, and hands a partition's
outputs to the next partition as the same numpy arrays: the producer stores them and sets an
event, the consumer wakes up and reads them. So a link between two units that compute in host
memory costs a thread hand-off, whatever the size (reading the data inside the next call is the
per-byte boundary cost fitted in ``profile/context.py``, not the link's). A unit that computes
elsewhere (onnxruntime's CUDA provider, OpenVINO on a GPU) also uploads what it reads and
downloads what it writes.

Per pair of real units, for each size of :data:`LINK_SIZES`:

- the **hand-off** of an array of that size between two threads through a raw lock, as the
  runtime does, each thread computing for a while before it passes the array on, so that the
  receiving one has idled as a unit does while another runs a partition (:func:`handoff`), the
  sizes interleaved so that drift in the machine's load does not look like a size effect;
- for each end that is not in host memory, **the device copy**: half of (running a Relu on a
  tensor of that size on the unit, minus the unit's no-op call), i.e. one upload or download.

Two units that share cores (``cpuall`` and ``ovall`` beside ``cpu0``) never run at once, but
handing work from one to the other costs more than a hand-off: one backend's thread pool winds
down while the other's wakes. For such pairs the **switch** is measured too (:func:`switch_cost`:
calls alternating between the two units against each unit's calls back to back) and added to
every size's time.

The points are fitted by least squares to ``latency_us + bytes / (gbps * 1e3)``
(:func:`fit_link`); a slope within the measurements' spread means zero-copy (``gbps = inf``).
Rows are stored as ``(fingerprint A, "__link2__#<fp A>#<fp B>#<bytes>")`` with the two
fingerprints sorted, so every pair of units with the same fingerprints shares them.
"""

from __future__ import annotations

import _thread
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from partuner.profile.load import LoadMeter, is_busy, stale, time_again
from partuner.profile.measure import failure, time_model
from partuner.profile.store import FAILED, Measurement, ProfileStore
from partuner.units import Link, Unit, UnitSet

__all__ = [
    "LINK_SIZES",
    "LinkFit",
    "LinkProfile",
    "combine_link",
    "copy_model",
    "device_copy",
    "fit_link",
    "fit_rows",
    "handoff",
    "link_signature",
    "profile_links",
    "put_rows",
    "switch_cost",
    "switch_model",
]

log = logging.getLogger(__name__)

_Rows = dict[int, Measurement] | None

#: Tensor sizes (bytes) each link is measured at: 4 KiB .. 16 MiB.
LINK_SIZES: tuple[int, ...] = (4 << 10, 64 << 10, 1 << 20, 16 << 20)

#: the signature prefix of link rows; older ``__link__`` rows (hand-offs timed as a ping-pong
#: with nothing in between, less than plans pay) are left unread, and the links measured again
LINK_PREFIX = "__link2__"


@dataclass(frozen=True)
class LinkFit:
    """A fitted link and the points it was fitted to: ``(bytes, median, p10, p90)`` in µs."""

    latency_us: float
    gbps: float
    points: tuple[tuple[int, float, float, float], ...]

    @property
    def link(self) -> Link:
        return Link(self.latency_us, self.gbps)

    def describe(self) -> dict[str, object]:
        return {
            "latency_us": self.latency_us,
            "gbps": self.gbps if math.isfinite(self.gbps) else "inf",
            "points": [
                {"bytes": b, "median_us": m, "p10_us": lo, "p90_us": hi}
                for b, m, lo, hi in self.points
            ],
        }


def link_signature(fp_a: str, fp_b: str, nbytes: int) -> tuple[str, str]:
    """``(fingerprint column, signature)`` of a link row, the same for either order."""
    lo, hi = sorted((fp_a, fp_b))
    return lo, f"{LINK_PREFIX}#{lo}#{hi}#{nbytes}"


def fit_link(points: Sequence[tuple[int, float, float, float]]) -> LinkFit:
    """Fit ``T(bytes) = latency_us + bytes / (gbps * 1e3)`` to ``(bytes, median, p10, p90)``.

    Least squares with ``latency >= 0``. When the slope is not positive, or the time it adds at
    the largest size is within the median 10th-90th percentile spread of the points, the link
    is zero-copy: ``gbps = inf`` and the latency is the mean of the medians.

    Examples
    --------
    >>> pts = [(b, 10 + b / 2e3, 9 + b / 2e3, 11 + b / 2e3) for b in (1000, 10**5, 10**6)]
    >>> f = fit_link(pts)
    >>> round(f.latency_us, 6), round(f.gbps, 6)
    (10.0, 2.0)
    >>> fit_link([(1000, 30.0, 20.0, 45.0), (10**6, 31.0, 21.0, 44.0)]).gbps
    inf
    """
    if not points:
        raise ValueError("fit_link needs at least one point")
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    noise = statistics.median(max(p[3] - p[2], 0.0) for p in points)
    slope = 0.0
    if len(points) >= 2 and np.ptp(x) > 0:
        slope, icpt = np.polyfit(x, y, 1)
        if icpt < 0:  # refit through the origin
            slope, icpt = float(x @ y / (x @ x)), 0.0
    if slope <= 0 or slope * x.max() <= noise:
        return LinkFit(float(y.mean()), math.inf, tuple(points))
    return LinkFit(float(icpt), 1.0 / (float(slope) * 1e3), tuple(points))


#: how long each side works between two hand-offs when they are timed (µs): the other thread
#: idles meanwhile, as a unit waiting for another unit's partition does
RELAY_WORK_US = 200.0


def _work(x: np.ndarray, until: float) -> None:
    """Compute (numpy, the GIL released) until ``perf_counter() >= until``."""
    while time.perf_counter() < until:
        np.multiply(x, 1.0, out=x)


def handoff(sizes: Sequence[int] = LINK_SIZES, rounds: int = 60) -> dict[int, Measurement]:
    """Time handing an array of each size from one worker thread to another (no copy), as the
    runtime does: after the receiving thread idled while the other computed.

    Two threads relay a token through raw locks (the runtime's hand-off); each computes for
    :data:`RELAY_WORK_US` before passing it on, so the other has been waiting that long, and
    each hand-off is timed from the release to the moment the waiting thread runs again (one
    clock for both). A ping-pong with nothing in between measured less than plans pay: a
    thread that has only just blocked wakes faster than one that idled for a partition's time.
    Sizes are interleaved round by round; the first 5 rounds are warm-up.
    """
    arrays = {n: np.zeros(max(n // 4, 1), dtype=np.float32) for n in sizes}
    order = [n for _ in range(rounds + 5) for n in sizes]
    steps = len(order)
    gates = [_thread.allocate_lock() for _ in range(steps)]
    for g in gates:
        g.acquire()
    sent = [0.0] * steps
    woke = [0.0] * steps
    box: dict[int, np.ndarray] = {}
    scratch = [np.ones(4096, dtype=np.float32) for _ in range(2)]

    def lane(side: int) -> None:
        for j in range(side, steps, 2):
            if j:
                gates[j - 1].acquire()
                woke[j] = time.perf_counter()
            _work(scratch[side], time.perf_counter() + RELAY_WORK_US * 1e-6)
            box[j] = arrays[order[j]]
            sent[j] = time.perf_counter()
            gates[j].release()

    t = threading.Thread(target=lane, args=(1,), daemon=True, name="partuner-handoff")
    t.start()
    lane(0)
    t.join(timeout=10.0)
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    for j in range(5 * len(sizes), steps):
        samples[order[j - 1]].append((woke[j] - sent[j - 1]) * 1e6)
    return {n: _stats(s) for n, s in samples.items()}


def _stats(samples: Sequence[float]) -> Measurement:
    arr = np.asarray(samples)
    return Measurement(
        float(np.median(arr)),
        float(np.percentile(arr, 10)),
        float(np.percentile(arr, 90)),
        len(arr),
    )


def copy_model(nbytes: int) -> onnx.ModelProto:
    """A Relu over ``nbytes`` of float32: a call that uploads and downloads that many bytes."""
    shape = [max(nbytes // 4, 1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="copy")], "copy", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def switch_model() -> onnx.ModelProto:
    """A Conv (32 -> 32 channels, 3x3, 56x56: a few hundred µs on two cores) whose call keeps a
    unit's threads as busy as a partition's would."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor(
        "w", TensorProto.FLOAT, [32, 32, 3, 3], rng.standard_normal(32 * 32 * 9).tolist()
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 56, 56])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 56, 56])
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="switch")
    g = helper.make_graph([node], "switch", [x], [y], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def switch_signature(fp_a: str, fp_b: str) -> tuple[str, str]:
    lo, hi = sorted((fp_a, fp_b))
    return lo, f"__switch__#{lo}#{hi}"


def switch_cost(a: Unit, b: Unit, rounds: int = 10, calls: int = 10) -> Measurement:
    """The extra time of a call on ``b`` right after one on ``a`` (or back), per switch.

    Each round times ``calls`` pairs alternating ``a, b`` (``2 * calls`` switches) and
    ``calls`` calls on each unit alone, back to back; the extra per switch is
    ``(alternating - a alone - b alone) / (2 * calls)``, at least 0. Rounds interleave the three
    so a change in the machine's load hits them alike; the first round is warm-up.
    """
    model = switch_model()
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 32, 56, 56)).astype(np.float32)}
    ra, rb = a.prepare(model), b.prepare(model)
    try:

        def timed(*runners: object) -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                for r in runners:
                    r.run(feeds)  # type: ignore[attr-defined]
            return (time.perf_counter() - t0) * 1e6

        extra = []
        for r in range(rounds + 1):
            alt, alone_a, alone_b = timed(ra, rb), timed(ra), timed(rb)
            if r:
                extra.append(max(alt - alone_a - alone_b, 0.0) / (2 * calls))
    finally:
        ra.close()
        rb.close()
    return _stats(extra)


def device_copy(
    unit: Unit, call_us: float, sizes: Sequence[int] = LINK_SIZES, budget_s: float = 0.25
) -> dict[int, Measurement] | None:
    """One upload (or download) of each size to ``unit``: half of (a Relu call of that size
    minus the no-op call ``call_us``). ``None`` if the unit cannot run the Relu."""
    out: dict[int, Measurement] = {}
    for n in sizes:
        feeds = {"x": np.zeros(max(n // 4, 1), dtype=np.float32)}
        m = time_model(unit, copy_model(n), feeds, budget_s)
        if m.status != "ok":
            return None
        out[n] = Measurement(
            max(m.median_us - call_us, 0.0) / 2,
            max(m.p10_us - call_us, 0.0) / 2,
            max(m.p90_us - call_us, 0.0) / 2,
            m.count,
        )
    return out


def combine_link(
    hand: dict[int, Measurement], *copies: dict[int, Measurement] | None
) -> dict[int, Measurement]:
    """A link's time per size: the hand-off plus the device copy of each end that has one
    (timed while the machine was as busy as the busiest part was)."""
    out = {}
    for n, h in hand.items():
        parts = [h, *(c[n] for c in copies if c is not None)]
        loads = [p.load for p in parts if p.load is not None]
        out[n] = Measurement(
            sum(p.median_us for p in parts),
            sum(p.p10_us for p in parts),
            sum(p.p90_us for p in parts),
            min(p.count for p in parts),
            load=max(loads) if loads else None,
        )
    return out


def _noting_load(meter: LoadMeter, measure: Callable[[], _Rows]) -> _Rows:
    """``measure()``'s rows, each noting how busy the machine was while they were timed."""
    start = meter.read()
    rows = measure()
    if rows is None:
        return None
    load = meter.share(start)
    return {n: replace(m, load=load) for n, m in rows.items()}


def _switch(a: Unit, b: Unit) -> Measurement:
    """:func:`switch_cost`, or the row of its failure (warned of)."""
    try:
        return switch_cost(a, b)
    except Exception as exc:
        sw = failure(exc)
        log.warning("units %s, %s: timing the pool switch failed (%s)", a.name, b.name, sw.detail)
        return sw


def _busiest(rows: dict[int, Measurement]) -> float | None:
    loads = [m.load for m in rows.values() if m.load is not None]
    return max(loads) if loads else None


def fit_rows(rows: dict[int, Measurement]) -> LinkFit:
    return fit_link([(n, m.median_us, m.p10_us, m.p90_us) for n, m in sorted(rows.items())])


def stored_rows(
    store: ProfileStore | None, fp_a: str, fp_b: str, sizes: Sequence[int]
) -> dict[int, Measurement] | None:
    """The stored link rows of a fingerprint pair, or ``None`` unless every size is there."""
    if store is None:
        return None
    rows = {}
    for n in sizes:
        m = store.get(*link_signature(fp_a, fp_b, n))
        if m is None or m.status != "ok":
            return None
        rows[n] = m
    return rows


def stored_sizes(store: ProfileStore, fp_a: str, fp_b: str) -> tuple[int, ...]:
    """The sizes the store holds ``ok`` link rows of a fingerprint pair at (a profile or a kit
    may have used other sizes than :data:`LINK_SIZES`), smallest first."""
    col, sig = link_signature(fp_a, fp_b, 0)
    head = sig[: -len("0")]
    sizes = []
    for s, m in store.rows(col):
        if s.startswith(head) and m.status == "ok" and s[len(head) :].isdigit():
            sizes.append(int(s[len(head) :]))
    return tuple(sorted(sizes))


def put_rows(
    store: ProfileStore | None, fp_a: str, fp_b: str, rows: dict[int, Measurement]
) -> None:
    if store is not None:
        for n, m in rows.items():
            store.put(*link_signature(fp_a, fp_b, n), m)


@dataclass
class LinkProfile:
    """The links of a unit set: per pair, the link, where it came from, the fit if measured."""

    links: dict[tuple[str, str], Link]
    sources: dict[tuple[str, str], str]  # "declared" | "measured" | "default"
    fits: dict[tuple[str, str], LinkFit]
    measured: int = 0  # link rows timed now (the others came from the store)
    # (unit, unit, share): links in use timed while other work took more than BUSY_SHARE of
    # the machine's cores (timed again by the next profiling run)
    busy: list[tuple[str, str, float]] = field(default_factory=list)


def profile_links(
    units: UnitSet,
    names: Sequence[str],
    fingerprints: Mapping[str, str],
    local: set[str],
    call_us: Mapping[str, float],
    store: ProfileStore | None,
    *,
    sizes: Sequence[int] = LINK_SIZES,
    budget_s: float = 0.25,
) -> LinkProfile:
    """Links between every two of ``names``: declared ones as declared; between two real
    units, fitted from stored rows or (for two ``local`` units) measured now; else the units
    file's default link."""
    out = LinkProfile({}, {}, {})
    hand: dict[int, Measurement] | None = None
    copies: dict[str, dict[int, Measurement] | None] = {}
    switches: dict[tuple[str, str], Measurement] = {}
    meter = LoadMeter()
    meter.read()
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pair = (a, b)
            if frozenset(pair) in units.declared_links:
                out.links[pair], out.sources[pair] = units.link(a, b), "declared"
                continue
            ua, ub = units[a], units[b]
            fa, fb = fingerprints[a], fingerprints[b]
            rows = None if ua.modeled or ub.modeled else stored_rows(store, fa, fb, sizes)
            here = not (ua.modeled or ub.modeled) and {a, b} <= local
            stale_rows = rows is not None and here and meter.works
            stale_rows = stale_rows and (is_busy(_busiest(rows)) or _busiest(rows) is None)
            old = rows if stale_rows else None  # timed busy, or before loads were noted
            if (rows is None or old is not None) and here:
                if hand is None:
                    hand = _noting_load(meter, lambda: handoff(sizes))
                for u in (ua, ub):
                    if u.name not in copies:
                        copies[u.name] = (
                            None
                            if u.host_memory
                            else _noting_load(
                                meter,
                                lambda u=u: device_copy(
                                    u, call_us.get(u.name, 0.0), sizes, budget_s
                                ),
                            )
                        )
                rows = combine_link(hand, copies[a], copies[b])
                lost = [u.name for u in (ua, ub) if copies[u.name] is None and not u.host_memory]
                now, before = _busiest(rows), _busiest(old or {})
                if old is not None and (lost or (is_busy(now) and (now or 0) >= (before or 0))):
                    rows = old  # timed again on a machine no quieter: the stored rows stay
                elif lost:  # used for this run, never stored without its device copies
                    log.warning(
                        "unit %s: timing its device copy failed; link %s-%s leaves it out in "
                        "this profile only, and the next profiling run times it again",
                        lost[0],
                        a,
                        b,
                    )
                else:
                    put_rows(store, fa, fb, rows)
                out.measured += len(rows)
            if rows is None:
                out.links[pair], out.sources[pair] = units.link(a, b), "default"
                continue
            if set(ua.cores or ()) & set(ub.cores or ()):  # never at once: a pool switch
                key = switch_signature(fa, fb)
                sw = switches.get(key) or (store.get(*key) if store is not None else None)
                busy_sw = sw if sw is not None and stale(sw, meter) else None
                if sw is not None and sw.status == FAILED and key not in switches:
                    sw = None  # a failed timing is timed again
                if (sw is None or busy_sw is not None) and key not in switches and here:
                    sw, new = time_again(busy_sw, lambda x=ua, y=ub: _switch(x, y), meter)
                    out.measured += 1
                    if store is not None and new:
                        store.put(*key, sw)
                if sw is not None:
                    switches[key] = sw  # equal fingerprints share it, with or without a store
                if sw is not None and sw.status == "ok":
                    rows = combine_link(rows, {n: sw for n in rows})  # with its load
            fit = fit_rows(rows)
            out.links[pair], out.sources[pair], out.fits[pair] = fit.link, "measured", fit
            if is_busy(_busiest(rows)):
                out.busy.append((a, b, _busiest(rows) or 0.0))
    return out
