"""The concurrent runtime: equal outputs, errors named, timeouts, no threads left behind."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest

from partuner.errors import PartunerError, RuntimeFailure
from partuner.export import PartitionSpec, cut
from partuner.profile import random_feeds
from partuner.runtime import Session, check_outputs
from partuner.units import Runner, load_units


def _split_by_branch(graph):
    """Alternate units node by node: many partitions, both units busy, many hand-overs."""
    names = [n.name for n in graph.compute_nodes]
    return [PartitionSpec(f"p{i}", f"cpu{i % 2}", (n,)) for i, n in enumerate(names)]


def _reference(graph, feeds):
    s = ort.InferenceSession(graph.model.SerializeToString())
    return dict(zip(graph.outputs, s.run(None, feeds), strict=True))


def _partuner_threads():
    return [t for t in threading.enumerate() if t.name.startswith("partuner-")]


def test_session_matches_the_whole_model(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _split_by_branch(branchy))
    feeds = random_feeds(branchy, list(branchy.inputs), seed=3)
    ref = _reference(branchy, feeds)
    with Session(branchy, parts, units) as sess:
        for _ in range(3):  # repeated runs reuse the workers
            (out,) = sess.run(None, feeds)
            np.testing.assert_allclose(out, ref[branchy.outputs[0]], rtol=1e-5, atol=1e-5)
        assert {t.unit for t in sess.last_trace} == {"cpu0", "cpu1"}
        assert len(sess.last_trace) == len(parts)
        # every partition started after the ones it reads from ended
        end = {t.partition: t.end_s for t in sess.last_trace}
        start = {t.partition: t.start_s for t in sess.last_trace}
        producer = {v: p.name for p in parts for v in p.outputs}
        for p in parts:
            for v in p.inputs:
                if v in producer:
                    assert start[p.name] >= end[producer[v]]
    assert not _partuner_threads()
    assert check_outputs(ref, {branchy.outputs[0]: out}).passed


def test_wrong_feeds_say_expected_and_given(branchy, units_file):
    units = load_units(units_file)
    parts = cut(
        branchy,
        _split_by_branch(branchy)[:0]
        or [PartitionSpec("p0", "cpu0", tuple(n.name for n in branchy.compute_nodes))],
    )
    with Session(branchy, parts, units) as sess:
        x = np.zeros((1, 3, 16, 16), np.float32)
        with pytest.raises(
            PartunerError,
            match=r"expects float32 \[1, 3, 32, 32\], got float32 "
            r"\[1, 3, 16, 16\]",
        ):
            sess.run(None, {"input": x})
        with pytest.raises(PartunerError, match="unknown input"):
            sess.run(None, {"nope": x})
        with pytest.raises(PartunerError, match="unknown output"):
            sess.run(["nope"], {"input": np.zeros((1, 3, 32, 32), np.float32)})


class _Boom(Runner):
    input_names: list[str] = []
    output_names: list[str] = []

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def run(self, feeds):
        if self.delay:
            threading.Event().wait(self.delay)
            return {}
        raise ValueError("kaboom")


def test_worker_error_names_the_partition(branchy, units_file, monkeypatch):
    units = load_units(units_file)
    parts = cut(branchy, _split_by_branch(branchy))
    feeds = random_feeds(branchy, list(branchy.inputs))
    sess = Session(branchy, parts, units)
    sess._runners[5] = _Boom()
    with pytest.raises(
        RuntimeFailure,
        match=r"partition 'p5' on unit 'cpu1' failed: "
        r"ValueError: kaboom",
    ):
        sess.run(None, feeds)
    sess.close()
    assert not _partuner_threads()


def test_timeout_stops_the_run(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _split_by_branch(branchy))
    feeds = random_feeds(branchy, list(branchy.inputs))
    sess = Session(branchy, parts, units)
    sess._runners[2] = _Boom(delay=2.0)
    with pytest.raises(RuntimeFailure, match="timed out after 0.2 s"):
        sess.run(None, feeds, timeout_s=0.2)
    with pytest.raises(RuntimeFailure, match="closed"):
        sess.run(None, feeds)
    for t in threading.enumerate():
        if t.name.startswith("partuner-"):
            t.join(3.0)
    assert not _partuner_threads()


def test_check_rules_by_precision():
    ref = {"y": np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)}
    noisy = {"y": ref["y"] + np.float32(3e-3)}
    assert not check_outputs(ref, noisy, ["f32"]).passed
    res = check_outputs(ref, noisy, ["f32", "bf16"])
    assert res.passed and res.precision == "bf16"
    assert res.outputs[0].top1_agree == 1.0


def test_transfers_are_traced_between_units(branchy, units_file):
    units = load_units(units_file)
    parts = cut(branchy, _split_by_branch(branchy))
    feeds = random_feeds(branchy, list(branchy.inputs))
    producer = {v: p for p in parts for v in p.outputs}
    expected = {
        (v, producer[v].name, p.name)
        for p in parts
        for v in p.inputs
        if v in producer and producer[v].unit != p.unit
    }
    with Session(branchy, parts, units) as sess:
        sess.run(None, feeds)
        got = sess.last_transfers
        start = {t.partition: t.start_s for t in sess.last_trace}
        end = {t.partition: t.end_s for t in sess.last_trace}
    assert expected and {(t.value, t.src_partition, t.dst_partition) for t in got} == expected
    for t in got:
        assert t.src_unit != t.dst_unit
        assert t.ready_s == end[t.src_partition] <= t.taken_s == start[t.dst_partition]
        assert t.nbytes == branchy.values[t.value].nbytes


def test_fallback_runs_partitions_of_a_unit_that_cannot_prepare(branchy, tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text(
        "units:\n  cpu0: {backend: onnxruntime, threads: 1}\n"
        "  npu: {backend: external, runner: 'no_such_vendor_rt:load'}\n"
    )
    units = load_units(path)
    names = [n.name for n in branchy.compute_nodes]
    specs = [PartitionSpec("p0", "cpu0", tuple(names[:6])), PartitionSpec("p1", "npu", names[6:])]
    parts = cut(branchy, specs)
    with pytest.raises(PartunerError, match="'npu' cannot run here.*no_such_vendor_rt"):
        Session(branchy, parts, units)
    with pytest.raises(PartunerError, match="unknown unit 'gpu'"):
        Session(branchy, parts, units, fallback="gpu")
    feeds = random_feeds(branchy, list(branchy.inputs))
    with Session(branchy, parts, units, fallback="cpu0") as sess:
        (out,) = sess.run(None, feeds)
        assert set(sess.fallbacks) == {"p1"} and sess.fallbacks["p1"][0] == "npu"
        assert [p.unit for p in sess.partitions] == ["cpu0", "cpu0"]
        assert {t.unit for t in sess.last_trace} == {"cpu0"} and not sess.last_transfers
    assert [p.unit for p in parts] == ["cpu0", "npu"]  # the caller's partitions are untouched
    np.testing.assert_allclose(out, _reference(branchy, feeds)[branchy.outputs[0]], rtol=1e-5)
    assert not _partuner_threads()


def _three_units(tmp_path):
    path = tmp_path / "units.yaml"
    path.write_text(
        "units:\n"
        "  cpu0: {backend: onnxruntime, cores: [0]}\n"
        "  cpu1: {backend: onnxruntime, cores: [1]}\n"
        "  both: {backend: onnxruntime, threads: 2, cores: [0, 1]}\n"
    )
    return load_units(path)


def _alternate(graph, units_cycle):
    names = [n.name for n in graph.compute_nodes]
    return [
        PartitionSpec(f"p{i}", units_cycle[i % len(units_cycle)], (n,)) for i, n in enumerate(names)
    ]


def test_units_that_share_cores_share_a_thread(branchy, tmp_path):
    units = _three_units(tmp_path)
    feeds = random_feeds(branchy, list(branchy.inputs), seed=4)
    ref = _reference(branchy, feeds)
    # cpu0 and both share core 0: one lane, the caller's thread, no worker at all
    parts = cut(branchy, _alternate(branchy, ["cpu0", "both"]))
    with Session(branchy, parts, units) as sess:
        assert not _partuner_threads()
        (out,) = sess.run(None, feeds)
        assert {t.unit for t in sess.last_trace} == {"cpu0", "both"}
    np.testing.assert_allclose(out, ref[branchy.outputs[0]], rtol=1e-5, atol=1e-5)
    # cpu0 and cpu1 may run at once: two lanes (both joins the first it shares cores with)
    parts = cut(branchy, _alternate(branchy, ["cpu0", "cpu1", "both"]))
    with Session(branchy, parts, units) as sess:
        assert len(_partuner_threads()) == 1
        for _ in range(2):
            (out,) = sess.run(None, feeds)
        np.testing.assert_allclose(out, ref[branchy.outputs[0]], rtol=1e-5, atol=1e-5)
        order = sorted(sess.last_trace, key=lambda t: t.start_s)
        # no two partitions whose units share a core overlapped in time
        for a in order:
            for b in order:
                if a is not b and {a.unit, b.unit} != {"cpu0", "cpu1"}:
                    assert a.end_s <= b.start_s or b.end_s <= a.start_s
    assert not _partuner_threads()


def test_a_unit_order_against_the_data_is_refused(branchy, tmp_path):
    units = _three_units(tmp_path)
    specs = _alternate(branchy, ["cpu0"])[:2] + _alternate(branchy, ["cpu0"])[2:]
    specs = [specs[1], specs[0], *specs[2:]]  # the consumer listed before its producer
    with pytest.raises(PartunerError, match="cycle"):
        Session(branchy, cut(branchy, specs), units)


class _Interrupted:
    """A runner whose call meets Ctrl-C (SIGINT raises KeyboardInterrupt in the thread)."""

    input_names: list[str] = []
    output_names: list[str] = []

    def run(self, feeds):
        raise KeyboardInterrupt

    def close(self):
        pass


@pytest.mark.parametrize("which", ["caller", "worker"])
def test_ctrl_c_in_a_partition_stays_an_interrupt(branchy, units_file, which):
    """Ctrl-C during a run reaches the CLI as KeyboardInterrupt (exit 130, "interrupted"), not
    as a partition that failed; the workers stop and the session closes."""
    units = load_units(units_file)
    parts = cut(branchy, _split_by_branch(branchy))
    feeds = random_feeds(branchy, list(branchy.inputs))
    sess = Session(branchy, parts, units)
    last = len(parts) - 1  # the caller's thread serves the unit of the last partition
    i = (
        last
        if which == "caller"
        else next(k for k, p in enumerate(parts) if p.unit != parts[last].unit)
    )
    sess._runners[i] = _Interrupted()
    with pytest.raises(KeyboardInterrupt):
        sess.run(None, feeds)
    sess.close()
    assert not _partuner_threads()
