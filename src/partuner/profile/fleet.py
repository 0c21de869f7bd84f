"""Profiling units on a Ray cluster: each on its own node, the nodes all at the same time.

:func:`profile_on_nodes` is what :func:`~partuner.profile.profile_model` does first for the
:class:`~partuner.units.ray_unit.RayUnit` units of a units file. On each node, the unit's actor
profiles the model as ``partuner profile`` would on that machine (``profile_model`` with the
same settings, the backend unit alone, a temporary store there seeded with the rows already
stored here for the unit, so that node signatures shared with models profiled before are not
timed again), and sends the new rows back; they are stored here under the unit's fingerprint
(the node's, marked ``-ray``), with a row ``__fleet__#<model digest>#<settings>`` saying the
model was profiled there and which rows the node timed for it, so the next run reads them
instead of profiling again, unless one of those rows was timed while other work took the
node's cores (profile/load.py): the node then profiles the model again, timing such rows again
and keeping each new timing where the node is quieter than it was (nodes then one after
another: raylets sharing a machine, as in a local test cluster, disturb each other). Units on one
node are profiled one after the other (they would disturb each other's timings); different
nodes at once, so the wall time is about the slowest node's, not the sum. The units then count
as *remote* for the rest of the profile: read from the store, never timed here through Ray.

What a call through Ray adds is measured from here (:func:`transport_costs`): the round trip of
an empty call (charged per partition, on top of the node's own per-partition cost), and the
cost per byte of sending inputs and of getting outputs back (charged on the bytes a partition
reads from and writes for other partitions, as every value a Ray unit's partition reads or
writes travels through Ray). A hand-off between two units' worker threads here is measured as
for local units (:func:`~partuner.profile.transfer.handoff`).
"""

from __future__ import annotations

import json
import logging
import math
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from partuner.graph import ModelGraph
from partuner.profile.load import is_busy
from partuner.profile.signature import model_digest
from partuner.profile.store import FAILED, OK, Measurement, ProfileStore
from partuner.profile.transfer import fit_link, handoff, put_rows, stored_rows
from partuner.units import Unit, UnitSet
from partuner.units.ray_unit import RayUnit

__all__ = [
    "FLEET_SIG",
    "TRANSPORT_SIG",
    "add_transport",
    "fleet_links",
    "profile_on_nodes",
    "transport_costs",
]

log = logging.getLogger(__name__)

FLEET_SIG = "__fleet__#{}#{}"
TRANSPORT_SIG = "__ray_transport__#{}#{}"
#: bytes sent and received when measuring what Ray's transport costs per byte
TRANSPORT_SIZES = (0, 1 << 16, 1 << 20)
TRANSPORT_ROUNDS = 12


def _profile_here(
    unit: Unit, model: bytes, settings: dict[str, Any], known: list[tuple]
) -> list[tuple]:
    """On the node: profile ``model`` on ``unit`` alone in a temporary store holding the rows
    already ``known`` here (node signatures shared with other models, the unit's call and
    write-out costs), so that only what is new is timed; returns the new rows and the known ones
    it timed again."""
    import onnx

    from partuner.graph import load_model
    from partuner.profile.profiler import profile_model

    graph = load_model(onnx.load_from_string(model))
    fp = unit.fingerprint()
    with tempfile.TemporaryDirectory(prefix="partuner-fleet-") as d:
        with ProfileStore(Path(d) / "rows.db") as st:
            for sig, fields in known:
                st.put(fp, sig, Measurement(*fields))
            had = dict(known)
            profile_model(graph, UnitSet([unit]), store=st, **settings)
            # new rows, and known ones timed again (stored busy, or before loads were noted)
            rows = [(sig, tuple(m.__dict__.values())) for sig, m in st.rows(fp)]
            return [(sig, f) for sig, f in rows if had.get(sig) != f]


def _known(store: ProfileStore, fp: str) -> list[tuple]:
    """The rows ``store`` holds for ``fp`` that a node's profile may reuse (timed ones)."""
    own = (FLEET_SIG.split("#")[0], TRANSPORT_SIG.split("#")[0])
    return [
        (sig, tuple(m.__dict__.values()))
        for sig, m in store.rows(fp)
        if m.status != FAILED and not sig.startswith(own)
    ]


def profile_on_nodes(
    graph: ModelGraph,
    units: Mapping[str, RayUnit],
    store: ProfileStore,
    settings: dict[str, Any],
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, str], int]:
    """Profile each of ``units`` on its node (nodes in parallel; one unit per fingerprint)
    unless ``store`` holds the model's rows for it; returns unit name -> the fingerprint its
    rows are stored under, and how many rows the nodes timed.

    Raises whatever profiling raised on a node (a partuner error as itself), or
    :class:`~partuner.units.ray_unit.RayNodeLost` naming a node lost meanwhile; the rows of
    units whose profiling finished are stored all the same, those of the failed one not at all.
    """
    fps = {name: u.fingerprint() for name, u in units.items()}
    key = json.dumps(settings, sort_keys=True, default=str).replace("#", "_")
    mark = FLEET_SIG.format(model_digest(graph), key)
    first: dict[str, RayUnit] = {}  # one unit per fingerprint: identical boards share rows
    again = False  # a node profiles the model again: rows it timed for it were timed busy
    for name, u in units.items():
        done = store.get(fps[name], mark)
        if done is None or _timed_busy(store, fps[name], done):
            first.setdefault(fps[name], u)
            again = again or done is not None
    todo = list(first.values())
    if not todo:
        return fps, 0
    known = {u.name: _known(store, fps[u.name]) for u in todo}
    by_node: dict[str, list[RayUnit]] = {}
    for u in todo:
        by_node.setdefault(u.node(), []).append(u)
    model = graph.model.SerializeToString()

    def one_node(group: list[RayUnit]) -> list[tuple[RayUnit, list[tuple], float]]:
        out = []
        for u in group:
            t0 = time.perf_counter()
            rows = u.get(
                u.submit("apply", _profile_here, model, settings, known[u.name]), "profiling"
            )
            out.append((u, rows, time.perf_counter() - t0))
        return out

    failure: BaseException | None = None
    got = 0
    # nodes at once; but one after another when some profile again because of busy rows:
    # nodes sharing a machine (raylets of one host) would otherwise disturb each other again
    if again:
        log.info("profiling on the Ray nodes one at a time: rows timed there while busy")
    workers = 1 if again else len(by_node)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet") as pool:
        futs = [pool.submit(one_node, g) for g in by_node.values()]
        try:
            for fut in as_completed(futs):
                try:
                    done = fut.result()
                except Exception as exc:  # the others' rows are still stored
                    failure = failure or exc
                    continue
                for u, rows, wall in done:
                    fp, desc = fps[u.name], str(u.describe())
                    for sig, fields in rows:
                        store.put(fp, sig, Measurement(*fields), description=desc)
                    # the rows the node timed for the model (and those it timed before), so
                    # that the next run profiles there again while any of them is busy
                    timed = sorted({*(sig for sig, _ in rows), *_mark_rows(store.get(fp, mark))})
                    w = wall * 1e6
                    detail = json.dumps({"rows": timed})
                    store.put(fp, mark, Measurement(w, w, w, 1, OK, detail))
                    got += len(rows)
                    if progress is not None:
                        progress(f"{u.name}: profiled on Ray node {u.node()} in {wall:.1f} s")
        except BaseException:  # Ctrl-C, a store error: end the actors, so no thread waits on
            for u in todo:  # a node's profile before the pool lets go
                u.release()
            raise
    if failure is not None:
        raise failure
    return fps, got


def _mark_rows(mark: Measurement | None) -> list[str]:
    """The signatures a fleet mark row says the node timed for its model (none: older marks,
    or a detail that is not partuner's)."""
    if mark is None or not mark.detail:
        return []
    try:
        rows = json.loads(mark.detail)["rows"]
    except (ValueError, TypeError, KeyError):
        return []
    return [r for r in rows if isinstance(r, str)] if isinstance(rows, list) else []


def _timed_busy(store: ProfileStore, fp: str, mark: Measurement) -> bool:
    """Whether a row the node timed for the model was timed while other work took the node's
    cores (profile/load.py): the node profiles the model again, timing those rows again."""
    for sig in _mark_rows(mark):
        m = store.get(fp, sig)
        if m is not None and m.status == OK and is_busy(m.load):
            return True
    return False


def _per_byte(samples: Mapping[int, list[float]]) -> float:
    """µs per byte of the transfer times per size: the slope of :func:`fit_link` (0 when it
    is within the noise)."""
    points = [(n, statistics.median(v), *np.percentile(v, [10, 90])) for n, v in samples.items()]
    fit = fit_link(points)
    return 0.0 if math.isinf(fit.gbps) else 1.0 / (fit.gbps * 1e3)


def _measure_transport(unit: RayUnit) -> Measurement:
    """Round trip of an empty call; µs per byte sent and per byte got back (in ``detail``)."""
    arrays = {n: np.ones(n, dtype=np.uint8) for n in TRANSPORT_SIZES}
    ping: list[float] = []
    took: dict[int, list[float]] = {n: [] for n in TRANSPORT_SIZES}
    gave: dict[int, list[float]] = {n: [] for n in TRANSPORT_SIZES}
    for r in range(TRANSPORT_ROUNDS + 2):
        t0 = time.perf_counter()
        unit.call("ping")
        t1 = time.perf_counter()
        if r >= 2:
            ping.append((t1 - t0) * 1e6)
        for n in TRANSPORT_SIZES:
            t0 = time.perf_counter()
            unit.call("take", arrays[n])
            t1 = time.perf_counter()
            got = unit.call("give", n)
            t2 = time.perf_counter()
            if got.nbytes != n:
                raise RuntimeError(f"Ray gave back {got.nbytes} bytes, not {n}")
            if r >= 2:
                took[n].append((t1 - t0) * 1e6)
                gave[n].append((t2 - t1) * 1e6)
    call = statistics.median(ping)
    rate_in, rate_out = _per_byte(took), _per_byte(gave)
    detail = {"in_us_per_byte": rate_in, "out_us_per_byte": rate_out, "sizes": TRANSPORT_SIZES}
    q = np.percentile(ping, [10, 90])
    return Measurement(call, float(q[0]), float(q[1]), len(ping), OK, json.dumps(detail))


def transport_costs(unit: RayUnit, store: ProfileStore | None) -> tuple[float, float, float]:
    """(µs per call, µs per byte in, µs per byte out) that Ray adds to a call of ``unit``
    from this machine: stored per unit fingerprint, placement and this host, else measured."""
    sig = TRANSPORT_SIG.format(unit.placement.describe().replace(" ", ""), socket.gethostname())
    fp = unit.fingerprint()
    m = store.get(fp, sig) if store is not None else None
    got = _transport_of(m) if m is not None and m.status == OK else None
    if got is None:  # not stored, or a damaged row (a store is input like any other)
        m = _measure_transport(unit)
        if store is not None:
            store.put(fp, sig, m, description=str(unit.describe()))
        got = _transport_of(m) or (m.median_us, 0.0, 0.0)
    return got


def _transport_of(m: Measurement) -> tuple[float, float, float] | None:
    """(µs per call, µs per byte in, µs per byte out) of a transport row; None if damaged."""
    try:
        info = json.loads(m.detail)
        return m.median_us, float(info["in_us_per_byte"]), float(info["out_us_per_byte"])
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def add_transport(prof: Any, costs: tuple[float, float, float]) -> Any:
    """A :class:`~partuner.profile.profiler.UnitProfile` with Ray's transport added."""
    call, rate_in, rate_out = costs
    return replace(
        prof,
        overhead_us=prof.overhead_us + call,
        boundary_us_per_byte=prof.boundary_us_per_byte + rate_in,
        boundary_out_us_per_byte=prof.boundary_out_us_per_byte + rate_out,
        ray_call_us=call,
    )


def fleet_links(
    names: Sequence[str],
    units: UnitSet,
    fingerprints: Mapping[str, str],
    store: ProfileStore | None,
    sizes: Sequence[int],
) -> None:
    """Store the link rows of every pair with a Ray unit that lacks them: a hand-off between
    two worker threads here (what Ray moves is charged per unit by :func:`add_transport`)."""
    if store is None:
        return
    hand: dict[int, Measurement] | None = None
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ua, ub = units[a], units[b]
            if not (isinstance(ua, RayUnit) or isinstance(ub, RayUnit)) or ua.modeled or ub.modeled:
                continue
            fa, fb = fingerprints[a], fingerprints[b]
            if stored_rows(store, fa, fb, sizes) is None:
                hand = hand or handoff(sizes)
                put_rows(store, fa, fb, hand)
