"""Batch partitioning: exact split vs brute force, greedy and even baselines, merge order,
profiling into the store, the CLI's JSON and its one-line errors. No timing thresholds."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from partuner.batch import (
    BatchDimensionError,
    BatchError,
    BatchModel,
    LatencyCurve,
    Split,
    batch_feeds,
    batch_signature,
    conflict_free_sets,
    evaluate_batch,
    profile_batches,
    reference,
    run_split,
    split_brute_force,
    split_even,
    split_exact,
    split_greedy,
)
from partuner.batch.profile import jump_neighbours
from partuner.cli import main
from partuner.errors import InputShapeError, UnitError
from partuner.graph import zoo
from partuner.profile import ProfileStore
from partuner.units import OnnxruntimeUnit, register_backend, units_from_mapping
from partuner.units.base import opt_int

TWO_ORT = {
    "units": {
        "cpu0": {"backend": "onnxruntime", "threads": 1},
        "cpu1": {"backend": "onnxruntime", "threads": 1},
    }
}


@register_backend("test-batch-limit")
class LimitedUnit(OnnxruntimeUnit):
    """onnxruntime that refuses batches above ``limit`` (like a device running out of memory)."""

    OPTIONS = {**OnnxruntimeUnit.OPTIONS, "limit": "largest batch it runs"}

    def _configure(self, options):
        limit = opt_int(options, "limit", 2, minimum=1)
        out = super()._configure(options)
        out["limit"] = limit
        return out

    def _speed_options(self):
        return {**super()._speed_options(), "limit": self.options["limit"]}

    def prepare(self, model):
        b = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
        if b > self.options["limit"]:
            raise UnitError(f"unit {self.name!r}: out of device memory at batch {b}")
        opts = {k: v for k, v in self.options.items() if k != "limit"}
        return OnnxruntimeUnit(self.name, **opts).prepare(model)


# -- models ------------------------------------------------------------------------------------


def _free_batch_model() -> onnx.ModelProto:
    """y = relu(x @ W) with a free batch dim ``N``: every output row depends on its own row."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"),
        helper.make_node("Relu", ["xw"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "free", [x], [y], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _fixed_batch_model() -> onnx.ModelProto:
    """A Reshape with the batch of 1 written into its target shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    shape = numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        "fixed",
        [x],
        [y],
        initializer=[shape],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def free_model() -> BatchModel:
    return BatchModel(_free_batch_model(), "free")


@pytest.fixture(scope="module")
def branchy_batch() -> BatchModel:
    return BatchModel(zoo.build("branchy", image_size=16), "zoo:branchy@16")


@pytest.fixture()
def free_file(tmp_path):
    p = tmp_path / "free.onnx"
    onnx.save(_free_batch_model(), p)
    return p


# -- curves and splits -------------------------------------------------------------------------


def _random_curve(rng: random.Random, name: str, max_batch: int) -> LatencyCurve:
    """Overhead + a random slope per segment, at a few random sizes (monotone by construction)."""
    sizes = sorted({1, max_batch, *rng.sample(range(1, max_batch + 1), k=min(3, max_batch))})
    t, points, last = rng.uniform(0, 100), [], 0
    for b in sizes:
        t += (b - last) * rng.uniform(0, 40) + rng.choice([0, 0, rng.uniform(0, 60)])
        points.append((b, t))
        last = b
    return LatencyCurve(name, tuple(points))


def test_curve_is_monotone_zero_at_zero_and_infinite_past_its_limit():
    c = LatencyCurve("u", ((1, 50.0), (2, 40.0), (4, 100.0)))
    assert c.points == ((1, 50.0), (2, 50.0), (4, 100.0))
    assert [c(b) for b in range(5)] == [0.0, 50.0, 50.0, 75.0, 100.0]
    assert c(5) == float("inf")
    assert c.items_within(49) == 0 and c.items_within(75) == 3 and c.items_within(1e9) == 4


@pytest.mark.parametrize("seed", range(40))
def test_exact_split_equals_brute_force(seed):
    rng = random.Random(seed)
    n_units = rng.choice([2, 3])
    batch = rng.randint(1, 9)
    curves = {
        f"u{i}": _random_curve(rng, f"u{i}", rng.randint(max(1, batch // 2), batch + 2))
        for i in range(n_units)
    }
    conflicts = {"u0": ["u2"]} if n_units == 3 and seed % 2 else None
    try:
        brute = split_brute_force(batch, curves, conflicts)
    except BatchError:
        with pytest.raises(BatchError):
            split_exact(batch, curves, conflicts)
        return
    exact = split_exact(batch, curves, conflicts)
    assert exact.batch == batch and all(b >= 0 for b in exact.sizes.values())
    assert exact.predicted_us == pytest.approx(brute.predicted_us, rel=1e-12)
    assert exact.predicted_us == max(curves[u](b) for u, b in exact.sizes.items())
    for u, b in exact.sizes.items():
        assert b <= curves[u].max_batch
    if conflicts:
        assert not (exact.sizes["u0"] and exact.sizes["u2"])
    # With one item per step and monotone curves the greedy is optimal as well.
    greedy = split_greedy(batch, curves, conflicts)
    assert greedy.predicted_us == pytest.approx(brute.predicted_us, rel=1e-12)
    assert split_even(batch, curves, conflicts).predicted_us >= exact.predicted_us


def test_a_slow_unit_gets_nothing():
    fast = LatencyCurve("fast", ((1, 10.0), (16, 160.0)))
    slow = LatencyCurve("slow", ((1, 500.0), (16, 800.0)))
    curves = {"fast": fast, "slow": slow}
    exact = split_exact(16, curves)
    assert exact.sizes == {"fast": 16, "slow": 0}
    assert exact.predicted_us == 160.0
    assert exact.predicted_us == split_brute_force(16, curves).predicted_us
    assert exact.slices() == [("fast", 0, 16)]
    assert split_even(16, curves).sizes == {"fast": 8, "slow": 8}
    assert split_even(16, curves).predicted_us == slow(8)


def test_greedy_with_chunks_is_worse_than_exact_on_a_hand_case():
    # Two equal units at 10 µs per item, 5 items, chunks of 4: the greedy hands 4 items to the
    # first unit (40 µs) and 1 to the second; the exact split is 3 + 2 (30 µs).
    a = LatencyCurve("a", ((1, 10.0), (8, 80.0)))
    b = LatencyCurve("b", ((1, 10.0), (8, 80.0)))
    greedy = split_greedy(5, {"a": a, "b": b}, chunk=4)
    exact = split_exact(5, {"a": a, "b": b})
    assert greedy.sizes == {"a": 4, "b": 1} and greedy.predicted_us == 40.0
    assert sorted(exact.sizes.values()) == [2, 3] and exact.predicted_us == 30.0
    assert exact.predicted_us < greedy.predicted_us


def test_limits_and_conflicts():
    small = LatencyCurve("small", ((1, 1.0), (2, 2.0)))
    big = LatencyCurve("big", ((1, 10.0), (10, 100.0)))
    both = LatencyCurve("both", ((1, 3.0), (10, 30.0)))
    curves = {"small": small, "big": big, "both": both}
    assert conflict_free_sets(list(curves), {"both": ["small", "big"]}) == [
        ["small", "big"],
        ["both"],
    ]
    s = split_exact(10, curves, {"both": ["small", "big"]})
    assert s.sizes == {"small": 0, "big": 0, "both": 10}
    s = split_exact(10, {"small": small, "big": big})
    assert s.sizes["small"] <= 2 and s.batch == 10
    even = split_even(10, {"small": small, "big": big})
    assert even.sizes == {"small": 2, "big": 8}
    with pytest.raises(BatchError, match="cannot take 13 items"):
        split_exact(13, {"small": small, "big": big})
    with pytest.raises(BatchError, match=">= 1"):
        split_exact(0, curves)


def test_jump_neighbours_only_where_the_cost_per_item_changes():
    flat = {1: 10.0, 2: 20.0, 4: 40.0, 8: 80.0, 16: 160.0}
    assert jump_neighbours(flat, 16) == []
    cliff = {**flat, 16: 240.0}  # 8 -> 16: per item 10 -> 15
    assert jump_neighbours(cliff, 16) == [9, 15]


# -- model rewriting ---------------------------------------------------------------------------


def test_batch_model_sets_the_batch_of_zoo_and_free_models(free_model, branchy_batch):
    assert branchy_batch.at(7).values["output"].shape == (7, 10)
    assert branchy_batch.at(1).values["input"].shape == (1, 3, 16, 16)
    assert free_model.at(5).values["y"].shape == (5, 3)
    with pytest.raises(BatchError, match=">= 1"):
        free_model.at(0)
    free = _free_batch_model()
    free.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    with pytest.raises(InputShapeError, match="--input-shape x="):
        BatchModel(free, "dyn.onnx")
    assert BatchModel(free, "dyn.onnx", {"x": (1, 4)}).at(3).values["y"].shape == (3, 3)


def test_batch_model_names_the_node_that_fixes_the_batch():
    with pytest.raises(BatchDimensionError, match="cannot be changed") as err:
        BatchModel(_fixed_batch_model(), "fixed.onnx")
    msg = str(err.value)
    assert "fixed.onnx" in msg and "'reshape' (Reshape)" in msg and "\n" not in msg


# -- running and merging -----------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [{"cpu0": 3, "cpu1": 4}, {"cpu0": 0, "cpu1": 7}])
def test_merged_outputs_follow_input_order(free_model, sizes):
    units = units_from_mapping(TWO_ORT)
    feeds = batch_feeds(free_model, 7, seed=3)
    split = Split("test", sizes, {u: 0.0 for u in sizes}, 0.0)
    run, merged = run_split(free_model, units, split, feeds, repeat=1, warmup=0)
    whole = units["cpu0"].prepare(free_model.at(7).model).run(feeds)
    np.testing.assert_array_equal(merged["y"], whole["y"])
    assert run.check.passed and run.stats.runs == 1


def test_merged_branchy_equals_the_whole_batch(branchy_batch):
    units = units_from_mapping(TWO_ORT)
    feeds = batch_feeds(branchy_batch, 5)
    split = Split("test", {"cpu0": 2, "cpu1": 3}, {"cpu0": 0.0, "cpu1": 0.0}, 0.0)
    run, merged = run_split(branchy_batch, units, split, feeds, repeat=1, warmup=0)
    ref = reference(branchy_batch, feeds)
    assert merged["output"].shape == (5, 10)
    np.testing.assert_allclose(merged["output"], ref["output"], rtol=1e-4, atol=1e-5)
    assert run.check.passed
    # Rows really come from their own items: a permuted batch gives permuted outputs.
    perm = {k: v[::-1].copy() for k, v in feeds.items()}
    _, flipped = run_split(branchy_batch, units, split, perm, repeat=1, warmup=0)
    np.testing.assert_allclose(flipped["output"][::-1], merged["output"], rtol=1e-4, atol=1e-5)


def test_profile_stores_each_size_and_reuses_it(free_model, tmp_path):
    units = units_from_mapping(TWO_ORT)
    with ProfileStore(tmp_path / "p.db") as store:
        prof = profile_batches(free_model, units, 6, store=store, budget_s=0.01, min_repeats=2)
        assert set(prof.curves) == {"cpu0", "cpu1"} and not prof.failures
        assert prof.curves["cpu0"].max_batch == 6
        assert {1, 2, 4, 6} <= set(prof.table["cpu0"])
        fp = units["cpu0"].fingerprint()
        m = store.get(fp, batch_signature(free_model, 4))
        assert m is not None and m.status == "ok" and m.median_us > 0
        assert prof.reused >= 1  # cpu1 has cpu0's fingerprint: it reuses its figures
        again = profile_batches(free_model, units, 6, store=store)
        assert again.measured == 0 and again.curves == prof.curves


def test_a_unit_failing_at_a_size_is_kept_below_it(free_model, tmp_path):
    units = units_from_mapping(
        {
            "units": {
                "cpu": {"backend": "onnxruntime", "threads": 1},
                "small": {"backend": "test-batch-limit", "limit": 3},
            }
        }
    )
    prof = profile_batches(free_model, units, 8, budget_s=0.01, min_repeats=2)
    assert prof.failures["small"].batch == 4
    assert prof.curves["small"].max_batch <= 3 and prof.curves["cpu"].max_batch == 8
    assert "fails at batch 4" in prof.notes()[0] and "at most" in prof.notes()[0]
    assert split_exact(8, prof.curves).sizes["small"] <= 3


def test_a_unit_whose_ops_leave_out_part_of_the_model_takes_no_items(free_model, tmp_path):
    """A data split runs the whole model on each unit it gives items to: a unit limited to
    some op types is left out, with a note, and never timed."""
    units = units_from_mapping(
        {
            "units": {
                "cpu": {"backend": "onnxruntime", "threads": 1},
                "npu": {"backend": "onnxruntime", "threads": 1, "ops": ["MatMul"]},
            }
        }
    )
    prof = profile_batches(free_model, units, 4, budget_s=0.01, min_repeats=2)
    assert set(prof.curves) == {"cpu"} and not prof.table["npu"]
    assert prof.notes() == [
        "unit 'npu' cannot run the whole model (its ops list leaves out Relu); it is left out"
    ]
    with ProfileStore(tmp_path / "b.db") as store:
        r = evaluate_batch(free_model, units, 4, store=store, repeat=1)
    assert r.run.split.sizes == {"cpu": 4} and set(r.alone) == {"cpu"}
    assert r.best_single()[0] == "cpu" and r.notes == prof.notes()
    only = units_from_mapping({"units": {"npu": {"backend": "onnxruntime", "ops": ["MatMul"]}}})
    with pytest.raises(BatchError, match="npu: its ops list leaves out Relu"):
        evaluate_batch(free_model, only, 4, repeat=1)


def test_one_item_keeps_one_unit_busy_in_the_physical_limit(free_model, tmp_path):
    """At batch 1 the limit was the sum of two units' items/s, which no split of one item can
    reach (a new user's trial): a split of B items keeps at most B units busy."""
    units = units_from_mapping(
        {"units": {u: {"backend": "onnxruntime", "threads": 1} for u in ("a", "b")}}
    )
    with ProfileStore(tmp_path / "b.db") as store:
        one = evaluate_batch(free_model, units, 1, store=store, repeat=1)
        two = evaluate_batch(free_model, units, 2, store=store, repeat=1)
    assert len(one.limit_units) == 1 and set(two.limit_units) == {"a", "b"}


# -- the command line --------------------------------------------------------------------------


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _fails_cleanly(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("partuner: error: ")
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture()
def two_units(tmp_path):
    p = tmp_path / "units.yaml"
    p.write_text(json.dumps(TWO_ORT))
    return p


def test_cli_json(free_file, two_units, tmp_path):
    db = tmp_path / "p.db"
    r = _invoke("batch", free_file, "--batch", 9, "--units", two_units, "--db", db, "--repeat", 2,
                "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert sum(res["split"].values()) == 9 and set(res["split"]) == {"cpu0", "cpu1"}
    assert res["predicted_ms"] > 0 and res["measured_ms"] > 0 and res["throughput"] > 0
    assert set(res["unit_throughput"]) == {"cpu0", "cpu1"}
    assert res["check"]["passed"] is True
    assert {"best_single", "even", "greedy"} <= set(res["baselines"])
    assert res["physical_limit"] > 0 and db.exists()
    t = _invoke("batch", "--table", free_file, "--units", two_units, "--db", db, "--batch", 9,
                "--json")  # fmt: skip
    assert t.exit_code == 0, t.output
    table = json.loads(t.output)
    assert table["measured"] == 0  # everything came from the store
    assert "9" in table["units"]["cpu0"]["table"]
    text = _invoke("batch", "--table", free_file, "--units", two_units, "--db", db, "--batch", 4)
    assert text.exit_code == 0 and "cpu0" in text.output and "ms per item" in text.output


def test_cli_hybrid(tmp_path, two_units):
    path = tmp_path / "branchy.onnx"
    zoo.save("branchy", path, image_size=16)
    r = _invoke("batch", path, "--batch", 4, "--units", two_units, "--db", tmp_path / "p.db",
                "--repeat", 1, "--hybrid", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["hybrid"]["check"]["passed"] is True and res["best"] in ("split", "hybrid")


def test_cli_bad_batch(free_file, two_units, tmp_path):
    db = tmp_path / "p.db"
    _fails_cleanly(_invoke("batch", free_file, "--batch", 0, "--units", two_units, "--db", db),
                   "--batch must be >= 1")  # fmt: skip
    _fails_cleanly(_invoke("batch", free_file, "--units", two_units, "--db", db), "--batch")
    _fails_cleanly(_invoke("batch", tmp_path / "no.onnx", "--batch", 4), "not found")


def test_cli_fixed_batch_model(tmp_path, two_units):
    p = tmp_path / "fixed.onnx"
    onnx.save(_fixed_batch_model(), p)
    r = _invoke("batch", p, "--batch", 4, "--units", two_units, "--db", tmp_path / "p.db")
    _fails_cleanly(r, "the batch dimension of", "cannot be changed", "Reshape")


def test_cli_unit_failing_at_a_size(free_file, tmp_path):
    units = tmp_path / "units.yaml"
    units.write_text(
        json.dumps(
            {
                "units": {
                    "cpu": {"backend": "onnxruntime", "threads": 1},
                    "small": {"backend": "test-batch-limit", "limit": 2},
                }
            }
        )
    )
    db = tmp_path / "p.db"
    r = _invoke("batch", free_file, "--batch", 6, "--units", units, "--db", db, "--repeat", 1)
    assert r.exit_code == 0, r.output
    # powers of two find it failing at 4; timing the sizes a split chose (2 -> 3) may find 3
    assert re.search(r"unit 'small' fails at batch [34] ", r.output), r.output
    assert "at most 2 items" in r.output
    alone = tmp_path / "alone.yaml"
    alone.write_text(json.dumps({"units": {"small": {"backend": "test-batch-limit", "limit": 2}}}))
    r = _invoke("batch", free_file, "--batch", 6, "--units", alone, "--db", db)
    _fails_cleanly(r, "unit 'small' fails at batch 4", "cannot take 6 items")


def test_cli_splits_the_users_batch_and_writes_the_merged_outputs(free_file, two_units, tmp_path):
    """`batch --input NAME=FILE.npy -o OUT.npz`: the user's items, split, run, merged in input
    order and written; the batch is the arrays' own."""
    x = np.random.default_rng(3).standard_normal((7, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npz"
    db = tmp_path / "p.db"
    r = _invoke("batch", free_file, "--units", two_units, "--db", db, "--repeat", 1,
                "--input", f"x={tmp_path / 'x.npy'}", "-o", out, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["batch"] == 7 and res["outputs_file"] == str(out)
    assert sum(res["split"].values()) == 7 and res["check"]["passed"] is True
    y = np.load(out)["y"]
    want = np.maximum(x @ numpy_helper.to_array(_free_batch_model().graph.initializer[0]), 0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    base = ("batch", free_file, "--units", two_units, "--db", db)
    _fails_cleanly(
        _invoke(*base, "--batch", 6, "--input", f"x={tmp_path / 'x.npy'}"),
        "--batch 6 but the --input arrays hold 7 item(s)",
    )
    np.save(tmp_path / "i.npy", x.astype(np.int32))
    _fails_cleanly(
        _invoke(
            *base, "--repeat", 1, "--input", f"x={tmp_path / 'i.npy'}", "-o", tmp_path / "z.npz"
        ),
        "input 'x' expects float32 [7, 4], got int32 [7, 4]; convert it "
        "(numpy: a.astype(np.float32))",
    )
    assert not (tmp_path / "z.npz").exists()
    _fails_cleanly(_invoke(*base, "--batch", 2, "-o", tmp_path / "y.txt"), "name a .npz file")
    _fails_cleanly(
        _invoke("batch", free_file, "--table", "--input", f"x={tmp_path / 'x.npy'}"),
        "--table only profiles",
    )


def test_cli_writes_outputs_whatever_their_names(tmp_path, two_units):
    """Outputs named ``file`` or ``allow_pickle`` are keys of the .npz like any other
    (``numpy.savez(file, **outputs)`` fails on the one and takes the other as its flag)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3])
            for n in ("file", "allow_pickle")]  # fmt: skip
    nodes = [helper.make_node("Relu", ["x"], ["file"], name="r"),
             helper.make_node("Neg", ["x"], ["allow_pickle"], name="n")]  # fmt: skip
    m = helper.make_model(helper.make_graph(nodes, "names", [x], outs),
                          opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    onnx.save(m, tmp_path / "names.onnx")
    xs = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    out = tmp_path / "o.npz"
    feed = f"x={tmp_path / 'x.npy'}"
    r = _invoke("batch", tmp_path / "names.onnx", "--units", two_units, "--db",
                tmp_path / "p.db", "--repeat", 1, "--input", feed, "-o", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    got = np.load(out)
    assert sorted(got) == ["allow_pickle", "file"]
    np.testing.assert_array_equal(got["file"], np.maximum(xs, 0))
    np.testing.assert_array_equal(got["allow_pickle"], -xs)


def test_cli_refuses_a_batch_whose_inputs_are_given_in_part(two_units, tmp_path):
    """Found by a new-user trial: with two inputs and `--input` for one, the other was filled
    with random data, split, run and written to `-o` without a word."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "c"], ["y"], name="add")], "t", [a, c], [y]
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx"
    )
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    r = _invoke("batch", tmp_path / "m.onnx", "--units", two_units, "--db", tmp_path / "p.db",
                "--input", f"a={tmp_path / 'a.npy'}", "-o", tmp_path / "y.npz")  # fmt: skip
    _fails_cleanly(r, "--input gives ['a'] but not ['c']")
    assert not (tmp_path / "y.npz").exists()


def test_cli_says_why_one_configuration_has_two_figures(free_file, tmp_path):
    """The exact split on one unit alone and that unit alone: two rows of one configuration,
    measured two ways, with two figures and no word of why (a new user's trial)."""
    units = tmp_path / "u.yaml"
    units.write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    r = _invoke("batch", free_file, "--batch", 4, "--units", units, "--db", tmp_path / "b.db",
                "--repeat", 2)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "the exact split is cpu alone: " in r.output and "calling cpu directly" in r.output
