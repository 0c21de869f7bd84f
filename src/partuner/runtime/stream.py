"""Streams: frame after frame through a plan, several frames in flight, outputs in order.

``Session.stream(frames, in_flight=K)`` (or :func:`stream` over several copies of a plan, each
frame going to one of them) runs each frame through the partitions of a
:class:`~partuner.runtime.session.Session` while later frames already run in the partitions
before them. The policy is the one :func:`partuner.plan.stream.simulate_stream` predicts:

* each lane of a session (units that share cores; one thread each, for the stream's length)
  runs the partitions of one frame in plan order and, of the frames in flight, takes the oldest
  whose next partition has its inputs;
* at most ``in_flight`` frames are in flight per copy: a frame enters once an earlier frame has
  left (outputs leave in frame order: frame ``f`` is yielded only after every frame before it),
  so a slow consumer holds the producer back (back-pressure);
* frames of a sequence are checked (names, dtypes, shapes) before any runs; frames of an
  iterator as each enters; the error names the frame;
* each lane sleeps until something it may run became ready (a frame entered its copy, a
  partition it reads finished); the caller, until a frame left;
* a partition that fails stops the stream: the error names the frame, the partition and the
  unit; nothing after it is yielded, nothing is yielded out of order, no thread is left
  waiting; ``timeout_s`` bounds the wait for each frame.

After a stream, :class:`StreamStats` (``Session.last_stream``) holds when each frame entered
and left, and when each partition of each frame ran, for the throughput, the latency
percentiles, each unit's utilisation and the timeline.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from partuner.errors import PartunerError, RuntimeFailure

if TYPE_CHECKING:
    from partuner.runtime.session import Session

__all__ = ["StreamStats", "TaskTrace", "stream"]


@dataclass(frozen=True)
class TaskTrace:
    """When one partition of one frame ran (seconds since the stream started)."""

    frame: int
    copy: int
    partition: str
    unit: str
    start_s: float
    end_s: float


@dataclass
class StreamStats:
    """What a stream measured (seconds since it started)."""

    enter_s: list[float] = field(default_factory=list)  # per frame
    leave_s: list[float] = field(default_factory=list)  # per frame (its outputs complete)
    copy_of: list[int] = field(default_factory=list)  # per frame: the copy it ran on
    tasks: list[TaskTrace] = field(default_factory=list)
    in_flight: tuple[int, ...] = ()

    @property
    def frames(self) -> int:
        return len(self.leave_s)

    def after(self, warmup: int) -> StreamStats:
        """These statistics without the first ``warmup`` frames (a warm-up: the stream's
        threads start cold), renumbered from 0, times from the first kept frame's entering."""
        if warmup <= 0:
            return self
        if warmup >= self.frames:
            return StreamStats(in_flight=self.in_flight)
        t0 = self.enter_s[warmup]
        tasks = [
            TaskTrace(t.frame - warmup, t.copy, t.partition, t.unit, t.start_s - t0, t.end_s - t0)
            for t in self.tasks
            if t.frame >= warmup
        ]
        return StreamStats(
            [t - t0 for t in self.enter_s[warmup:]],
            [t - t0 for t in self.leave_s[warmup:]],
            self.copy_of[warmup:],
            tasks,
            self.in_flight,
        )

    def _window(self) -> tuple[int, int]:
        """The steady state's frames: past the pipeline's filling (the frames in flight)."""
        n = self.frames
        warm = min(max(sum(self.in_flight), 1), n // 4) if n >= 4 else 0
        return warm, n - 1

    @property
    def throughput_fps(self) -> float:
        """Frames per second in the steady state (frames leaving after the first
        ``in_flight`` left); all frames over the whole time when there are few."""
        if not self.leave_s:
            return 0.0
        a, b = self._window()
        span = self.leave_s[b] - self.leave_s[a]
        if b > a and span > 0:
            return (b - a) / span
        total = max(self.leave_s) - min(self.enter_s)
        return len(self.leave_s) / total if total > 0 else math.inf

    def latencies_ms(self) -> list[float]:
        """Each frame's latency (entering to leaving), ms."""
        return [(b - a) * 1e3 for a, b in zip(self.enter_s, self.leave_s, strict=True)]

    def latency_ms(self, q: float) -> float:
        """The ``q``-th percentile of the frames' latency (nearest rank), ms."""
        xs = sorted(self.latencies_ms())
        if not xs:
            return math.nan
        return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]

    def latency_upper_ms(self, q: float, confidence: float = 0.95) -> float:
        """An upper confidence bound on the ``q``-th percentile of a frame's latency, ms: the
        smallest order statistic that is at least the true percentile with probability
        ``confidence`` (distribution-free: the frames below the percentile are binomial); the
        slowest frame where too few frames give that confidence (300 frames: the slowest for
        the 99th percentile at 95 %)."""
        xs = sorted(self.latencies_ms())
        if not xs:
            return math.nan
        return xs[min(order_rank(len(xs), q / 100, confidence), len(xs)) - 1]

    def utilisation(self) -> dict[str, float]:
        """Per unit, the share of the steady state's time it was busy."""
        if not self.leave_s:
            return {}
        a, b = self._window()
        t0, t1 = (self.leave_s[a], self.leave_s[b]) if b > a else (0.0, max(self.leave_s))
        busy: dict[str, float] = {}
        for t in self.tasks:
            busy.setdefault(t.unit, 0.0)
            busy[t.unit] += max(0.0, min(t.end_s, t1) - max(t.start_s, t0))
        span = t1 - t0
        return {u: (v / span if span > 0 else 0.0) for u, v in busy.items()}


def order_rank(n: int, p: float, confidence: float) -> int:
    """The smallest rank ``r`` (1-based) whose order statistic of ``n`` samples is at least
    the ``p``-quantile with probability ``confidence``: P(Binomial(n, p) <= r - 1) >=
    ``confidence``; ``n + 1`` when no rank is.

    >>> order_rank(300, 0.99, 0.95), order_rank(1000, 0.99, 0.95), order_rank(100, 0.5, 0.95)
    (300, 996, 59)
    """
    if not 0 < p < 1:
        return n if p >= 1 else 1
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for k in range(n + 1):  # P(X = k), summed up: the cdf at k
        total += math.exp(
            math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq
        )
        if total >= confidence:
            return k + 1
    return n + 1


class _Frame:
    __slots__ = ("index", "copy", "values", "done", "left", "enter")

    def __init__(self, index: int, copy: int, feeds: Mapping[str, np.ndarray], n: int) -> None:
        self.index = index
        self.copy = copy
        self.values: dict[str, np.ndarray] = dict(feeds)
        self.done = [False] * n
        self.left = n
        self.enter = 0.0


def stream(
    sessions: Sequence[Session],
    frames: Iterable[Mapping[str, np.ndarray]],
    *,
    in_flight: Sequence[int],
    output_names: Sequence[str] | None = None,
    timeout_s: float | None = None,
    stats: StreamStats | None = None,
) -> Iterator[list[np.ndarray]]:
    """Run ``frames`` through ``sessions`` (copies of one plan on units that share no
    hardware; each frame runs on one, the first with room among its ``in_flight[i]``) and
    yield each frame's outputs (``output_names``, all by default) in frame order (module
    docstring). ``stats``, when given, is filled as the stream goes."""
    if not sessions:
        raise PartunerError("a stream needs at least one session")
    if len(in_flight) != len(sessions) or any(int(k) < 1 for k in in_flight):
        raise PartunerError(f"in_flight must give each of the {len(sessions)} copies 1 or more")
    first = sessions[0]
    names = list(output_names) if output_names is not None else list(first.graph.outputs)
    for n in names:
        if n not in first.graph.outputs:
            raise PartunerError(
                f"unknown output {n!r}; the model's outputs are {first.graph.outputs}"
            )
    for s in sessions:
        s._check_open()
    if isinstance(frames, Sequence):
        for i, feeds in enumerate(frames):
            _check_frame(first, i, feeds)
    return _Stream(sessions, list(in_flight), names, timeout_s, stats or StreamStats()).run(frames)


def _reader_lanes(session: Session) -> list[list[int]]:
    """Per partition of ``session``, the lanes holding a partition that reads its outputs."""
    lane_of = {i: k for k, idxs in enumerate(session.lanes) for i in idxs}
    out: list[set[int]] = [set() for _ in session.partitions]
    for j, deps in enumerate(session._deps):
        for i in deps:
            out[i].add(lane_of[j])
    return [sorted(x) for x in out]


def _check_frame(session: Session, index: int, feeds: object) -> None:
    from partuner.runtime.session import validate_feeds

    if not isinstance(feeds, Mapping):
        raise PartunerError(f"frame {index}: expected a mapping of input name to array")
    try:
        validate_feeds(session.graph, feeds)
    except PartunerError as exc:
        raise PartunerError(f"frame {index}: {exc}") from None


class _Stream:
    """The shared state of one stream and its lane threads."""

    def __init__(
        self,
        sessions: Sequence[Session],
        in_flight: list[int],
        names: list[str],
        timeout_s: float | None,
        stats: StreamStats,
    ) -> None:
        self.sessions = list(sessions)
        self.cap = in_flight
        self.names = names
        self.timeout_s = timeout_s if timeout_s is not None else sessions[0].timeout_s
        self.stats = stats
        stats.in_flight = tuple(in_flight)
        # One lock; the caller waits on ``cond``, each lane on its own condition, woken only
        # when something it may run became ready (a frame entered its copy, a partition it
        # depends on finished): waking every thread at every partition's end took a core's
        # time from the units' work on every hand-off.
        lock = threading.Lock()
        self.cond = threading.Condition(lock)
        self.lane_cv = [[threading.Condition(lock) for _ in sess.lanes] for sess in sessions]
        #: per copy, per partition: the conditions of the lanes running partitions that read it
        self.wakes = [
            [[self.lane_cv[c][k] for k in ks] for ks in _reader_lanes(sess)]
            for c, sess in enumerate(sessions)
        ]
        self.frames: dict[int, _Frame] = {}  # in flight, or left and not yet yielded
        self.busy = [0] * len(sessions)  # frames in flight per copy
        self.pos: dict[tuple[int, int, int], int] = {}  # (copy, lane, frame) -> next
        self.error: tuple[int, str, str, BaseException] | None = None
        self.stop = False
        self.t0 = time.perf_counter()

    # -- lanes -----------------------------------------------------------------------------
    def _pick(self, copy: int, lane: int, parts: list[int]) -> tuple[_Frame, int] | None:
        deps = self.sessions[copy]._deps
        for index in sorted(self.frames):
            fr = self.frames[index]
            if fr.copy != copy:
                continue
            k = self.pos.get((copy, lane, index), 0)
            if k >= len(parts):
                continue
            i = parts[k]
            if all(fr.done[d] for d in deps[i]):
                self.pos[copy, lane, index] = k + 1
                return fr, i
        return None

    def _lane(self, copy: int, lane: int, parts: list[int]) -> None:
        sess = self.sessions[copy]
        while True:
            with self.cond:
                while True:
                    if self.stop:
                        return
                    got = self._pick(copy, lane, parts)
                    if got is not None:
                        break
                    self.lane_cv[copy][lane].wait()
                fr, i = got
                part = sess.partitions[i]
                feeds = {v: fr.values[v] for v in part.inputs}
            held = sess._locks.get(part.unit, ())
            try:
                for lock in held:
                    lock.acquire()
                try:
                    t0 = time.perf_counter()
                    outs = sess._call(i, feeds)
                    t1 = time.perf_counter()
                finally:
                    for lock in reversed(held):
                        lock.release()
            except BaseException as exc:  # surfaces in the caller, naming frame and partition
                with self.cond:
                    if self.error is None:
                        self.error = (fr.index, part.name, part.unit, exc)
                    self._halt()
                return
            with self.cond:
                if self.stop:  # the stream ended (an error, a timeout) while this ran
                    return
                missing = [v for v in part.outputs if v not in outs]
                if missing:
                    why = f"its runner returned no {missing[0]!r}"
                    self.error = (fr.index, part.name, part.unit, RuntimeError(why))
                    self._halt()
                    return
                for v in part.outputs:
                    fr.values[v] = outs[v]
                fr.done[i] = True
                fr.left -= 1
                self.stats.tasks.append(
                    TaskTrace(fr.index, copy, part.name, part.unit, t0 - self.t0, t1 - self.t0)
                )
                for cv in self.wakes[copy][i]:
                    cv.notify()
                if fr.left == 0:
                    self.busy[copy] -= 1
                    self.stats.leave_s[fr.index] = t1 - self.t0
                    self.cond.notify_all()  # the caller: a frame left

    def _halt(self) -> None:
        """Stop the stream and wake every thread (the lock held)."""
        self.stop = True
        self.cond.notify_all()
        for cvs in self.lane_cv:
            for cv in cvs:
                cv.notify_all()

    # -- caller ----------------------------------------------------------------------------
    def run(self, frames: Iterable[Mapping[str, np.ndarray]]) -> Iterator[list[np.ndarray]]:
        threads = [
            threading.Thread(
                target=self._lane, args=(c, k, parts), name=f"partuner-stream-{c}-{k}", daemon=True
            )
            for c, sess in enumerate(self.sessions)
            for k, parts in enumerate(sess.lanes)
        ]
        for t in threads:
            t.start()
        source = iter(frames)
        entered = 0
        out_next = 0
        exhausted = False
        try:
            while True:
                # let frames in while a copy has room (frames leave in order: the window
                # counts every frame not yet yielded)
                while not exhausted:
                    with self.cond:
                        copy = next(
                            (c for c in range(len(self.sessions)) if self.busy[c] < self.cap[c]),
                            None,
                        )
                        room = len(self.frames) < sum(self.cap)
                    if copy is None or not room:
                        break
                    try:
                        feeds = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    _check_frame(self.sessions[0], entered, feeds)
                    n = len(self.sessions[copy].partitions)
                    fr = _Frame(entered, copy, feeds, n)
                    with self.cond:
                        fr.enter = time.perf_counter() - self.t0
                        self.stats.enter_s.append(fr.enter)
                        self.stats.leave_s.append(math.nan)
                        self.stats.copy_of.append(copy)
                        self.frames[entered] = fr
                        self.busy[copy] += 1
                        for cv in self.lane_cv[copy]:  # its first partitions may run now
                            cv.notify()
                    entered += 1
                if out_next >= entered and exhausted:
                    return
                yield self._wait(out_next)
                out_next += 1
        finally:
            with self.cond:
                self._halt()
            for t in threads:
                t.join(timeout=5.0)

    def _wait(self, index: int) -> list[np.ndarray]:
        """Frame ``index``'s outputs, once it has left (or raise the stream's error)."""
        deadline = time.perf_counter() + self.timeout_s
        with self.cond:
            fr = self.frames[index]
            while fr.left > 0 and self.error is None:
                left = deadline - time.perf_counter()
                if left <= 0:
                    self._halt()
                    sess = self.sessions[fr.copy]
                    for s in self.sessions:  # a partition may still hold a runner: as `run`
                        s._closed_by_timeout()
                    late = next(i for i, d in enumerate(fr.done) if not d)
                    part = sess.partitions[late]
                    raise RuntimeFailure(
                        f"stream timed out after {self.timeout_s:g} s waiting for frame {index} "
                        f"(partition {part.name!r} on unit {part.unit!r})"
                    )
                self.cond.wait(left)
            if self.error is not None and (fr.left > 0 or index >= self.error[0]):
                f, name, unit, err = self.error
                if not isinstance(err, Exception):  # Ctrl-C reached a partition's call
                    raise err
                text = str(err).strip().splitlines()
                raise RuntimeFailure(
                    f"frame {f}: partition {name!r} on unit {unit!r} failed: "
                    f"{type(err).__name__}: {text[0][:300] if text else ''}"
                ) from err
            del self.frames[index]
            return [fr.values[n] for n in self.names]
