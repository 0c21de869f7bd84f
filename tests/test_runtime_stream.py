"""Streams at run time: outputs in order and equal to single runs, frames in flight bounded,
bad frames refused before anything runs, failures named, no thread left behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from partuner.errors import PartunerError, RuntimeFailure
from partuner.export import PartitionSpec, cut
from partuner.profile import random_feeds
from partuner.runtime import Session
from partuner.runtime.stream import stream
from partuner.units import Runner, load_units


def _alternating(graph):
    names = [n.name for n in graph.compute_nodes]
    return [PartitionSpec(f"p{i}", f"cpu{i % 2}", (n,)) for i, n in enumerate(names)]


def _two_stages(graph):
    names = [n.name for n in graph.compute_nodes]
    half = len(names) // 2
    return [
        PartitionSpec("p0", "cpu0", tuple(names[:half])),
        PartitionSpec("p1", "cpu1", tuple(names[half:])),
    ]


def _frames(graph, n):
    return [random_feeds(graph, list(graph.inputs), seed=i) for i in range(n)]


def _threads():
    return [t for t in threading.enumerate() if t.name.startswith("partuner-stream")]


@pytest.mark.parametrize("split", [_alternating, _two_stages])
@pytest.mark.parametrize("in_flight", [1, 3])
def test_stream_outputs_are_each_frames_own_in_order(branchy, units_file, split, in_flight):
    units = load_units(units_file)
    parts = cut(branchy, split(branchy))
    frames = _frames(branchy, 12)
    with Session(branchy, parts, units) as sess:
        alone = [sess.run(None, f) for f in frames]
        got = list(sess.stream(frames, in_flight=in_flight))
        st = sess.last_stream
    assert len(got) == len(frames)
    for a, b in zip(alone, got, strict=True):
        np.testing.assert_array_equal(a[0], b[0])  # frame i's outputs, not a neighbour's
    # never more than `in_flight` frames between entering and leaving
    events = sorted([(t, 1) for t in st.enter_s] + [(t, -1) for t in st.leave_s])
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    assert peak <= in_flight
    assert st.leave_s == sorted(st.leave_s) or in_flight > 1
    assert len(st.tasks) == len(frames) * len(parts)
    assert st.throughput_fps > 0 and st.latency_ms(99) >= st.latency_ms(50) > 0
    assert set(st.utilisation()) == {"cpu0", "cpu1"}
    assert not _threads()


def test_frames_overlap_on_a_pipeline(branchy, units_file):
    """With two frames in flight, one unit works on frame t+1 while the other finishes t."""
    units = load_units(units_file)
    parts = cut(branchy, _two_stages(branchy))
    with Session(branchy, parts, units) as sess:
        list(sess.stream(_frames(branchy, 20), in_flight=2))
        tasks = sess.last_stream.tasks
    overlap = any(
        a.frame != b.frame and a.unit != b.unit and a.start_s < b.end_s and b.start_s < a.end_s
        for a in tasks
        for b in tasks
    )
    assert overlap


def test_a_bad_frame_is_refused_before_anything_runs(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _two_stages(branchy))
    frames = _frames(branchy, 5)
    frames[3] = {"input": np.zeros((1, 3, 16, 16), np.float32)}
    with Session(branchy, parts, units) as sess:
        with pytest.raises(PartunerError, match=r"frame 3: input 'input' expects float32"):
            sess.stream(frames, in_flight=2)
        assert sess.last_stream.tasks == []  # nothing ran
        frames[3] = {"input": np.zeros((1, 3, 32, 32), np.float64)}
        with pytest.raises(PartunerError, match=r"frame 3: .*got float64"):
            sess.stream(frames)
        # an iterator is checked frame by frame as each enters
        gen = iter([frames[0], {"nope": frames[0]["input"]}])
        with pytest.raises(PartunerError, match=r"frame 1: unknown input"):
            list(sess.stream(gen))
    assert not _threads()


class _FailOnFourth(Runner):
    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.input_names, self.output_names = inner.input_names, inner.output_names
        self.calls = 0

    def run(self, feeds):
        self.calls += 1
        if self.calls == 4:
            raise ValueError("kaboom")
        return self.inner.run(feeds)


def test_a_failing_partition_stops_the_stream_naming_frame_and_unit(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _two_stages(branchy))
    with Session(branchy, parts, units) as sess:
        sess._runners[1] = _FailOnFourth(sess._runners[1])
        got = []
        with pytest.raises(
            RuntimeFailure, match=r"frame 3: partition 'p1' on unit 'cpu1' failed: ValueError"
        ):
            for out in sess.stream(_frames(branchy, 10), in_flight=3):
                got.append(out)
        assert len(got) <= 3  # what had left of frames 0, 1, 2, in order; nothing after
        for k, out in enumerate(got):
            np.testing.assert_array_equal(out[0], sess.run(None, _frames(branchy, 10)[k])[0])
    assert not _threads()


class _Stuck(Runner):
    input_names: list[str] = []
    output_names: list[str] = []

    def run(self, feeds):
        threading.Event().wait(3.0)
        return {}


def test_a_stuck_partition_times_out(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _two_stages(branchy))
    sess = Session(branchy, parts, units)
    sess._runners[0] = _Stuck()
    with pytest.raises(RuntimeFailure, match=r"waiting for frame 0 \(partition 'p0'"):
        list(sess.stream(_frames(branchy, 3), timeout_s=0.3))
    with pytest.raises(RuntimeFailure, match="closed"):
        sess.run(None, _frames(branchy, 1)[0])
    sess.close()


def test_leaving_a_stream_early_stops_its_threads(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _alternating(branchy))
    with Session(branchy, parts, units) as sess:
        it = sess.stream(_frames(branchy, 50), in_flight=4)
        next(it)
        it.close()
        assert not _threads()
        (out,) = sess.run(None, _frames(branchy, 1)[0])  # the session still runs
    assert out.shape == (1, 10)


def test_copies_share_the_frames_and_keep_their_order(branchy, units_file):
    """Data-parallel copies: the whole model on cpu0 and on cpu1, each frame on one."""
    units = load_units(units_file)
    nodes = tuple(n.name for n in branchy.compute_nodes)
    on0 = cut(branchy, [PartitionSpec("p0", "cpu0", nodes)])
    on1 = cut(branchy, [PartitionSpec("p0", "cpu1", nodes)])
    frames = _frames(branchy, 16)
    with Session(branchy, on0, units) as a, Session(branchy, on1, units) as b:
        alone = [a.run(None, f) for f in frames]
        from partuner.runtime.stream import StreamStats

        st = StreamStats()
        got = list(stream([a, b], frames, in_flight=[1, 1], stats=st))
    for x, y in zip(alone, got, strict=True):
        np.testing.assert_array_equal(x[0], y[0])
    assert set(st.copy_of) == {0, 1}
    assert {t.unit for t in st.tasks} == {"cpu0", "cpu1"}
    with pytest.raises(PartunerError, match="in_flight must give each of the 2 copies"):
        stream([a, b], frames, in_flight=[1])


def test_stats_after_a_warm_up_are_renumbered_from_the_first_kept_frame() -> None:
    from partuner.runtime.stream import StreamStats, TaskTrace

    st = StreamStats(
        enter_s=[0.0, 1.0, 2.0, 3.0],
        leave_s=[1.5, 2.5, 3.5, 4.5],
        copy_of=[0, 0, 0, 0],
        tasks=[TaskTrace(f, 0, "p0", "u", f + 0.1, f + 1.5) for f in range(4)],
        in_flight=(2,),
    )
    kept = st.after(2)
    assert kept.frames == 2 and kept.in_flight == (2,)
    assert kept.enter_s == [0.0, 1.0] and kept.leave_s == [1.5, 2.5]
    assert [t.frame for t in kept.tasks] == [0, 1]
    assert [t.start_s for t in kept.tasks] == pytest.approx([0.1, 1.1])
    assert kept.latencies_ms() == pytest.approx([1500.0, 1500.0])
    assert st.after(0) is st and st.after(9).frames == 0


def test_the_p99_upper_bound_is_an_order_statistic_with_95_percent_confidence() -> None:
    from partuner.runtime.stream import StreamStats, order_rank

    # 1 - 0.99**300 = 0.951: the slowest of 300 frames is above the p99 with 95 % confidence
    assert order_rank(300, 0.99, 0.95) == 300
    assert order_rank(200, 0.99, 0.95) == 201  # too few frames: no rank is sure enough
    assert order_rank(1000, 0.99, 0.95) == 996
    n = 300
    st = StreamStats([0.0] * n, [i / 1e3 for i in range(1, n + 1)], [0] * n, [], (1,))
    assert st.latency_ms(99) == pytest.approx(297.0)
    assert st.latency_upper_ms(99) == pytest.approx(300.0)
