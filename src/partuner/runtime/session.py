"""Run a partitioned model: one worker thread per unit, partitions started when inputs are ready.

``Session`` looks like onnxruntime's ``InferenceSession``: ``run(output_names, feeds)``.

Each unit gets one long-lived worker thread (the caller's own thread serves the unit of the last
partition) that runs that unit's partitions in plan order; units that all share cores with each
other (and so never run at the same time) share one thread, saving the hand-offs between them. A
partition waits until every partition it reads from has finished, then runs. Tensors are handed
from partition to partition as the same numpy arrays (units in one process share host memory; no
copy is made). onnxruntime and OpenVINO release the GIL while they compute, so partitions on
different units run at the same time. An error in any partition stops the run promptly and is
raised in the caller with the partition and unit named; units that declare overlapping ``cores``
never run at the same time (a lock per shared core); ``timeout_s`` bounds each run; ``close()``
(or leaving a ``with`` block) stops every worker thread.

After each run, ``last_trace`` holds when every partition ran and ``last_transfers`` every value
handed from a partition on one unit to a partition on another (for the timeline). With
``fallback``, a partition whose unit cannot prepare it (unavailable, compiler error) runs on the
fallback unit instead; ``fallbacks`` says which and why.
"""

from __future__ import annotations

import _thread
import logging
import math
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from partuner.errors import PartunerError, RuntimeFailure
from partuner.export.cut import PartitionModel
from partuner.graph import ModelGraph
from partuner.units import Runner, UnitSet

__all__ = ["Session", "PartitionTrace", "TransferTrace", "validate_feeds"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionTrace:
    """When one partition ran in the last ``run`` (seconds since the run started)."""

    partition: str
    unit: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class TransferTrace:
    """A value handed from a partition on one unit to a partition on another in the last
    ``run``: the producer finished at ``ready_s``, the consumer started at ``taken_s``."""

    value: str
    nbytes: int
    src_partition: str
    src_unit: str
    dst_partition: str
    dst_unit: str
    ready_s: float
    taken_s: float


class _Done:
    """Which partitions of one run have finished: a raw lock per partition, held until the
    partition finishes. Cheaper to signal and to wait on than ``threading.Event`` (whose
    condition variable is Python code): each hand-off between units pays it."""

    __slots__ = ("_locks", "_open", "_guard")

    def __init__(self, n: int) -> None:
        self._locks = [_thread.allocate_lock() for _ in range(n)]
        for lock in self._locks:
            lock.acquire()
        self._open = [False] * n
        self._guard = _thread.allocate_lock()

    def set(self, i: int) -> None:
        with self._guard:
            if not self._open[i]:
                self._open[i] = True
                self._locks[i].release()

    def set_all(self) -> None:
        for i in range(len(self._locks)):
            self.set(i)

    def wait(self, i: int, timeout: float | None = None) -> bool:
        """Wait until partition ``i`` finished (or the run failed); False on timeout."""
        if self._open[i]:
            return True
        lock = self._locks[i]
        if not (lock.acquire() if timeout is None else lock.acquire(timeout=timeout)):
            return False
        lock.release()  # let the next waiter through
        return True


class _Run:
    """State of one inference: values, per-partition completion, the first error."""

    def __init__(self, feeds: Mapping[str, np.ndarray], n_parts: int) -> None:
        self.values: dict[str, np.ndarray] = dict(feeds)
        self.done = _Done(n_parts)
        self.error: BaseException | None = None
        self.failed_part: str | None = None
        self.aborted = False
        self.t0 = time.perf_counter()
        self.trace: list[tuple[int, float, float]] = []  # (partition, start, end): built on demand
        self.transfers: list[tuple[str, int, int, int, float]] = []  # built into TransferTrace
        self.ends = [0.0] * n_parts
        self.lock = threading.Lock()

    def fail(self, part: str, exc: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error, self.failed_part = exc, part
        self.aborted = True
        self.done.set_all()  # wake every waiter; they check `aborted`


def _check_timeout(timeout_s: object) -> float:
    """``timeout_s`` as seconds > 0, or PartunerError."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise PartunerError(f"timeout_s must be a number of seconds, got {timeout_s!r:.40}")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise PartunerError(f"timeout_s must be finite and > 0 seconds, got {timeout_s}")
    return float(timeout_s)


def validate_feeds(graph: ModelGraph, feeds: Mapping[str, np.ndarray]) -> None:
    """Check names, dtypes and shapes of ``feeds`` against the model's inputs."""
    expected = list(graph.inputs)
    unknown = [k for k in feeds if k not in expected]
    if unknown:
        raise PartunerError(f"unknown input(s) {unknown}; the model's inputs are {expected}")
    missing = [k for k in expected if k not in feeds]
    if missing:
        raise PartunerError(f"missing input(s) {missing}; the model's inputs are {expected}")
    for k in expected:
        v = graph.values[k]
        a = feeds[k]
        if not isinstance(a, np.ndarray):
            raise PartunerError(f"input {k!r} must be a numpy array, got {type(a).__name__}")
        if str(a.dtype) != v.dtype or tuple(a.shape) != v.shape:
            raise PartunerError(
                f"input {k!r} expects {v.dtype} {list(v.shape)}, got {a.dtype} {list(a.shape)}"
                + (
                    f"; convert it (numpy: a.astype(np.{v.dtype}))"
                    if tuple(a.shape) == v.shape
                    else "; give an array of that shape"
                )
            )


class Session:
    """Run partition sub-models on their units concurrently.

    Parameters
    ----------
    graph : the loaded model (for input checks and output names).
    partitions : the partitions, in a topological order (as ``export.cut`` returns them).
    units : the unit set naming every partition's unit.
    timeout_s : default bound on one ``run``.
    fallback : a unit of ``units`` that runs every partition its own unit cannot prepare.
    """

    def __init__(
        self,
        graph: ModelGraph,
        partitions: Sequence[PartitionModel],
        units: UnitSet,
        *,
        timeout_s: float = 60.0,
        fallback: str | None = None,
    ) -> None:
        self.graph = graph
        self.partitions = list(partitions)
        self.timeout_s = _check_timeout(timeout_s)
        self._last_trace: list[tuple[int, float, float]] = []
        self._last_handoffs: tuple[list[tuple[str, int, int, int, float]], list[float]] = ([], [])
        #: ``{partition: (planned unit, why it could not run there)}`` for fallen-back partitions
        self.fallbacks: dict[str, tuple[str, str]] = {}
        self._closed = False
        self.last_stream: Any = None  # StreamStats of the last ``stream``
        if fallback is not None:
            units[fallback]  # noqa: B018 - names the known units when unknown
        producer: dict[str, int] = {}
        for i, p in enumerate(self.partitions):
            for v in p.outputs:
                producer[v] = i
        self._deps: list[list[int]] = []
        for p in self.partitions:
            self._deps.append(sorted({producer[v] for v in p.inputs if v in producer}))
        missing = [o for o in graph.outputs if o not in producer]
        if missing:
            raise PartunerError(f"no partition produces the model output(s) {missing}")
        self._out_part = producer
        self._expected = [  # the feeds' names, dtypes and shapes, for a quick check per run
            (k, np.dtype(graph.values[k].dtype), tuple(graph.values[k].shape)) for k in graph.inputs
        ]
        self._runners: list[Runner] = []
        self._threads: list[threading.Thread] = []
        self._queues: dict[str, queue.SimpleQueue] = {}
        try:
            alone = len(self.partitions) == 1  # nothing runs beside it: see Unit.alone()
            for i, p in enumerate(self.partitions):
                try:
                    self._runners.append(self._prepare(units, p, alone))
                except PartunerError as exc:
                    if fallback is None or p.unit == fallback:
                        raise
                    self._runners.append(self._prepare(units, replace(p, unit=fallback)))
                    self.fallbacks[p.name] = (p.unit, str(exc))
                    self.partitions[i] = replace(p, unit=fallback)
                    log.info("partition %s runs on %s: %s", p.name, fallback, exc)  # in .fallbacks
            # Outputs that only runners able to read them in place (Ray units) read stay where
            # they were computed: one transfer node to node instead of two through here.
            readers: dict[int, set[int]] = {}
            for j, p in enumerate(self.partitions):
                for v in p.inputs:
                    if v in producer:
                        readers.setdefault(producer[v], set()).add(j)
            ends = set(graph.outputs)
            self._defer = [
                r.deferred
                and not ends & set(p.outputs)
                and bool(readers.get(i))
                and all(self._runners[j].deferred for j in readers[i])
                for i, (p, r) in enumerate(zip(self.partitions, self._runners, strict=True))
            ]
            # Inputs read from a partition on another unit: the hand-offs traced per run.
            self._handoffs: list[list[tuple[str, int]]] = [
                [
                    (v, producer[v])
                    for v in p.inputs
                    if v in producer and self.partitions[producer[v]].unit != p.unit
                ]
                for p in self.partitions
            ]
            # Units that share cores never run at once: a partition holds a lock per core of its
            # unit while it runs (taken in sorted order, so no deadlock).
            locks: dict[int, threading.Lock] = {}
            self._locks: dict[str, list[threading.Lock]] = {}
            for p in self.partitions:
                cores = sorted(units[p.unit].cores or ())
                self._locks[p.unit] = [locks.setdefault(c, threading.Lock()) for c in cores]
            if not any(
                self._shared(a, b, units) for a in self._locks for b in self._locks if a < b
            ):
                self._locks = {u: [] for u in self._locks}  # nothing shared: skip the locks
            # Lanes: units that share a core never run at the same time, so a set of units that
            # all share cores with each other needs only one thread, which saves the thread
            # hand-offs between them. Each lane runs its partitions in one global order that
            # respects the data dependencies and each core's turns in plan order (as the
            # prediction does), so no lane waits for a partition that waits for it.
            order = self._order(units)
            lane_of = self._lanes(units, [self.partitions[i].unit for i in order])
            by_lane: dict[int, list[int]] = {}
            for i in order:
                by_lane.setdefault(lane_of[self.partitions[i].unit], []).append(i)
            # The caller's thread runs the lane of the last partition (often the first one's
            # unit too): a one-unit plan needs no thread hand-off at all, and every plan saves
            # the wake-ups at its start or end.
            #: each lane's partitions in run order (a stream runs them with threads of its own)
            self.lanes: list[list[int]] = [list(idxs) for idxs in by_lane.values()]
            last = order[-1] if order else None
            caller = lane_of[self.partitions[last].unit] if last is not None else -1
            self._caller_unit = self.partitions[last].unit if last is not None else ""
            self._caller_idxs = by_lane.pop(caller, [])
            for idxs in by_lane.values():
                name = "+".join(dict.fromkeys(self.partitions[i].unit for i in idxs))
                q: queue.SimpleQueue = queue.SimpleQueue()
                self._queues[name] = q
                t = threading.Thread(
                    target=self._worker,
                    args=(name, idxs, q),
                    name=f"partuner-{name}",
                    daemon=True,
                )
                t.start()
                self._threads.append(t)
        except BaseException:
            self.close()
            raise

    def _call(self, i: int, feeds: dict[str, Any]) -> Mapping[str, Any]:
        """Run partition ``i`` (outputs left in place where only Ray units read them)."""
        runner = self._runners[i]
        return runner.run_deferred(feeds) if self._defer[i] else runner.run(feeds)

    @staticmethod
    def _prepare(units: UnitSet, p: PartitionModel, alone: bool = False) -> Runner:
        try:
            unit = units[p.unit]
            return (unit.alone() if alone else unit).prepare(p.model)
        except PartunerError:
            raise
        except Exception as exc:
            raise RuntimeFailure(
                f"unit {p.unit!r} could not prepare partition {p.name!r}: "
                f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            ) from None

    @staticmethod
    def _shared(a: str, b: str, units: UnitSet) -> bool:
        return bool(set(units[a].cores or ()) & set(units[b].cores or ()))

    def _order(self, units: UnitSet) -> list[int]:
        """Partitions in an order that respects their data dependencies and, per core, the
        plan's order (the earliest in plan order first among those ready)."""
        after: list[set[int]] = [set(d) for d in self._deps]
        last: dict[object, int] = {}
        for i, p in enumerate(self.partitions):
            for r in units[p.unit].cores or (f"unit:{p.unit}",):
                if r in last:
                    after[i].add(last[r])
                last[r] = i
        waiting = [len(a) for a in after]
        before: list[list[int]] = [[] for _ in self.partitions]
        for i, a in enumerate(after):
            for j in a:
                before[j].append(i)
        ready = sorted(i for i, w in enumerate(waiting) if w == 0)
        order: list[int] = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for k in before[i]:
                waiting[k] -= 1
                if waiting[k] == 0:
                    ready.append(k)
            ready.sort()
        if len(order) < len(self.partitions):
            i = next(i for i, w in enumerate(waiting) if w)
            j = next(j for j in sorted(after[i]) if waiting[j])
            a, b = self.partitions[i], self.partitions[j]
            raise PartunerError(
                f"the plan's partitions wait on each other in a cycle (counting the order each "
                f"unit runs its partitions in): {a.name!r} on {a.unit!r} waits on {b.name!r} on "
                f"{b.unit!r}; list each partition after those it reads from, or re-plan"
            )
        return order

    def _lanes(self, units: UnitSet, unit_order: list[str]) -> dict[str, int]:
        """A lane (thread) per group of units that pairwise share a core (first fit)."""
        lanes: list[list[str]] = []
        lane_of: dict[str, int] = {}
        for u in dict.fromkeys(unit_order):
            for k, members in enumerate(lanes):
                if all(self._shared(u, m, units) for m in members):
                    members.append(u)
                    lane_of[u] = k
                    break
            else:
                lane_of[u] = len(lanes)
                lanes.append([u])
        return lane_of

    # -- worker side -----------------------------------------------------------------------
    def _worker(self, unit: str, idxs: list[int], q: queue.SimpleQueue) -> None:
        while True:
            run = q.get()
            if run is None:
                return
            self._work(run, unit, idxs, None)

    def _work(self, run: _Run, unit: str, idxs: list[int], deadline: float | None) -> int | None:
        """Run ``idxs`` in order; returns the partition whose inputs missed ``deadline``."""
        for i in idxs:
            if run.aborted:
                return None
            part = self.partitions[i]
            for d in self._deps[i]:
                if deadline is None:
                    run.done.wait(d)
                elif not run.done.wait(d, max(deadline - time.perf_counter(), 0.0)):
                    return d
            if run.aborted:
                return None
            held = self._locks.get(part.unit, ())
            try:
                for lock in held:
                    lock.acquire()
                try:
                    t0 = time.perf_counter()
                    outs = self._call(i, {v: run.values[v] for v in part.inputs})
                    t1 = time.perf_counter()
                finally:
                    for lock in reversed(held):
                        lock.release()
                for v in part.outputs:
                    run.values[v] = outs[v]
                run.ends[i] = t1 - run.t0
                run.trace.append((i, t0 - run.t0, t1 - run.t0))
                for v, d in self._handoffs[i]:  # kept raw: built on demand, off the hot path
                    nbytes = getattr(run.values[v], "nbytes", 0)
                    run.transfers.append((v, nbytes, d, i, t0 - run.t0))
            except BaseException as exc:  # surfaces in the caller
                run.fail(part.name, exc)
                return None
            run.done.set(i)
        return None

    # -- caller side -----------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, np.ndarray],
        *,
        timeout_s: float | None = None,
    ) -> list[np.ndarray]:
        """Run the model; returns the requested outputs (all when ``None``) in order."""
        if self._closed:
            raise RuntimeFailure("this Session is closed; create a new one")
        if timeout_s is not None:
            _check_timeout(timeout_s)
        if isinstance(output_names, str):
            raise PartunerError(
                f"output_names must be a list of output names or None, got the string "
                f"{output_names!r}; write [{output_names!r}]"
            )
        if not isinstance(feeds, Mapping):
            raise PartunerError(
                f"feeds must map input names to arrays, e.g. {{{self.graph.inputs[0]!r}: x}}, "
                f"got {type(feeds).__name__}"
            )
        if [(k, a.dtype, a.shape) for k, a in feeds.items() if isinstance(a, np.ndarray)] != (
            self._expected
        ):
            validate_feeds(self.graph, feeds)  # says what is wrong (or accepts another order)
        names = list(output_names) if output_names is not None else list(self.graph.outputs)
        for n in names:
            if n not in self._out_part:
                raise PartunerError(
                    f"unknown output {n!r}; the model's outputs are {self.graph.outputs}"
                )
        run = _Run(feeds, len(self.partitions))
        for q in self._queues.values():
            q.put(run)
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.perf_counter() + limit
        late = self._work(run, self._caller_unit, self._caller_idxs, deadline)
        if late is None:
            for n in names:
                i = self._out_part[n]
                if not run.done.wait(i, max(deadline - time.perf_counter(), 0.0)):
                    late = i
                    break
                if run.error is not None:
                    break
        if late is not None and run.error is None:
            part = self.partitions[late]
            run.fail(part.name, TimeoutError())
            self.close()
            raise RuntimeFailure(
                f"run timed out after {limit:g} s waiting for partition {part.name!r} on "
                f"unit {part.unit!r}; the session was closed"
            )
        if run.error is not None:
            part = next(p for p in self.partitions if p.name == run.failed_part)
            err = run.error
            if not isinstance(err, Exception):  # Ctrl-C (or an exit) reached a partition's call
                raise err
            text = str(err).strip().splitlines()
            raise RuntimeFailure(
                f"partition {part.name!r} on unit {part.unit!r} failed: "
                f"{type(err).__name__}: {text[0][:300] if text else ''}"
            ) from err
        # Every worker has finished its share once all outputs exist only if all partitions
        # lead to an output; wait for the rest so the next run starts clean.
        for i in range(len(self.partitions)):
            run.done.wait(i, max(deadline - time.perf_counter(), 0.0))
        self._last_trace = run.trace
        self._last_handoffs = (run.transfers, run.ends)
        return [run.values[n] for n in names]

    def stream(
        self,
        frames: Iterable[Mapping[str, np.ndarray]],
        *,
        in_flight: int = 2,
        output_names: Sequence[str] | None = None,
        timeout_s: float | None = None,
    ) -> Iterator[list[np.ndarray]]:
        """Run ``frames`` (each a feeds mapping) with up to ``in_flight`` in flight, yielding
        each frame's outputs in frame order (:mod:`partuner.runtime.stream`); afterwards
        :attr:`last_stream` holds what was measured. A failure raises ``RuntimeFailure``
        naming the frame, partition and unit."""
        from partuner.runtime.stream import StreamStats, stream

        if isinstance(in_flight, bool) or not isinstance(in_flight, int):
            raise PartunerError(f"in_flight must be an integer of frames, got {in_flight!r:.40}")
        if frames is None or isinstance(frames, str | bytes):
            raise PartunerError(
                f"frames must be an iterable of feeds mappings (one per frame), got {frames!r:.40}"
            )
        if timeout_s is not None:
            _check_timeout(timeout_s)
        self.last_stream = StreamStats()
        return stream(
            [self],
            frames,
            in_flight=[in_flight],
            output_names=output_names,
            timeout_s=timeout_s,
            stats=self.last_stream,
        )

    def _closed_by_timeout(self) -> None:
        """Mark the session closed without waiting for its runners (one may be stuck)."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeFailure("this Session is closed; create a new one")

    @property
    def last_trace(self) -> list[PartitionTrace]:
        """When each partition ran in the last run, by start time."""
        out = [
            PartitionTrace(self.partitions[i].name, self.partitions[i].unit, start, end)
            for i, start, end in self._last_trace
        ]
        return sorted(out, key=lambda t: t.start_s)

    @property
    def last_transfers(self) -> list[TransferTrace]:
        """The values handed between units in the last run, by the time they were taken."""
        raw, ends = self._last_handoffs
        out = []
        for v, nbytes, d, i, taken in raw:
            src, dst = self.partitions[d], self.partitions[i]
            out.append(
                TransferTrace(
                    v, int(nbytes), src.name, src.unit, dst.name, dst.unit, ends[d], taken
                )
            )
        return sorted(out, key=lambda t: t.taken_s)

    def close(self) -> None:
        """Stop the workers and release the backends' sessions. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join(timeout=5.0)
        for r in self._runners:
            try:
                r.close()
            except Exception:  # closing must not mask the error that brought us here
                log.debug("runner close failed", exc_info=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
