"""Writing values out for other partitions: measured apart, charged on the writing side."""

from __future__ import annotations

import json
import math

import pytest

from partuner.errors import PartunerError
from partuner.plan import Edge, Partition, Problem, simulate
from partuner.plan.simulate import crossings, partition_cost, written
from partuner.profile import ProfileStore
from partuner.profile.context import fit_chain_costs
from partuner.profile.outputs import OUTPUTS_SIGNATURE, measure_outputs, outputs_models
from partuner.units import load_units


def test_the_chain_fit_charges_reading_what_writing_leaves() -> None:
    # T = 100 + 20 (k - 1) + 5e-5 * read + 1e-4 * written
    pts = [(1, 0.0, 100.0, 0.0)]
    for k, read, out in [(4, 1e5, 8e4), (16, 4e5, 3e5), (32, 9e5, 6e5), (8, 3e5, 2.9e5)]:
        pts.append((k, read, 100 + 20 * (k - 1) + 5e-5 * read + 1e-4 * out, out))
    f = fit_chain_costs(pts, out_rate=1e-4)
    assert f.per_partition_us == pytest.approx(20.0)
    assert f.per_byte_us == pytest.approx(5e-5)
    both = fit_chain_costs(pts)  # without it, reading is charged for both sides
    assert both.per_byte_us > f.per_byte_us


def test_a_partition_pays_for_what_it_writes_out_once() -> None:
    p = Problem(
        ["a", "b", "c"],
        ["u", "v"],
        {n: {"u": 10.0, "v": 10.0} for n in "abc"},
        edges=[Edge("a", "b", 1000, ("a_out",)), Edge("a", "c", 1000, ("a_out",))],
        boundary_out_us_per_byte={"u": 0.01},
        boundary_us_per_byte={"v": 0.002},
    )
    parts = [Partition("p0", "u", ("a",)), Partition("p1", "v", ("b", "c"))]
    assert written(crossings(p, parts), 2) == [1000.0, 0.0]  # one value, read twice
    t = simulate(p, parts)
    assert t.end_us["p0"] == pytest.approx(10 + 1000 * 0.01)
    assert t.makespan_us == pytest.approx(20 + 20 + 1000 * 0.002)
    assert partition_cost(p, "u", ["a"], 0.0, 1000.0) == pytest.approx(20.0)
    assert p.cut_us("a", "b", "u", "v") == pytest.approx(10 + 2)  # writer's and reader's side
    again = Problem.from_json(p.to_json())
    assert again.boundary_out_us_per_byte == {"u": 0.01}
    bad = Problem(["a"], ["u"], {"a": {"u": 1.0}}, boundary_out_us_per_byte={"u": -1.0})
    with pytest.raises(PartunerError, match="boundary_out_us_per_byte of unit 'u' must be >= 0"):
        bad.validate()


def test_writing_out_is_measured_once_per_unit_and_stored(tmp_path) -> None:
    plain, more, nbytes = outputs_models()
    assert [o.name for o in plain.graph.output] == ["a3"]
    assert [o.name for o in more.graph.output] == ["a0", "a1", "a2", "a3"]
    assert nbytes == 3 * 64 * 56 * 56 * 4
    unit = load_units(None)["cpu0"]
    made = []
    with ProfileStore(tmp_path / "p.db") as store:
        fp = unit.fingerprint()

        def look(sig, make):
            got = store.get(fp, sig)
            if got is None:
                made.append(sig)
                got = make()
                store.put(fp, sig, got)
            return got

        rate = measure_outputs(unit, look, 0.2)
        again = measure_outputs(unit, look, 0.2)
        row = store.get(fp, OUTPUTS_SIGNATURE)
    assert made == [OUTPUTS_SIGNATURE]  # measured once, read back the second time
    assert rate == again >= 0 and math.isfinite(rate)
    assert json.loads(row.detail)["bytes"] == nbytes
    assert rate == row.median_us / nbytes
    assert measure_outputs(unit, lambda sig, make: None, 0.2) == 0.0  # may not measure: none
