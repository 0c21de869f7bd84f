"""Bad input named in partuner's words (hostile-input review D): what is wrong, and where."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from partuner.cli.cmd_batch import _batch_of
from partuner.cli.common import read_inputs
from partuner.errors import PartunerError, PlanFileError, UnitError
from partuner.plan.problem_json import problem_from_json
from partuner.units import make_unit
from partuner.units.untrusted import check_plan_units

PROBLEM = '{"format": "partuner.problem", "version": 1, "nodes": ["a"], "units": ["u"], %s}'


@pytest.mark.parametrize(
    "body, why",
    [
        ('"cost": {"a": {"u": 1.0}}, "cost": {"a": {"x": 1.0}}', "key 'cost' appears twice"),
        ('"cost": {"a": {"u": 1.0, "u": 2.0}}', "key 'u' appears twice"),
        ('"cost": {"a": {"u": 1%s}}' % ("0" * 5000), "a number in it has too many digits"),
        ('"cost": {"a": {"u": 1.0, "cpy": 0.5}}', "`cost` of node 'a' names unit 'cpy', not in"),
        ('"cost": {"a": {"u": 1.0}, "b": {"u": 1.0}}', "`cost` names node 'b', not in `nodes`"),
    ],
    ids=["top-level", "nested", "5000-digit-int", "unknown-unit", "unknown-node"],
)
def test_a_problem_file_with_a_key_twice_or_a_huge_int_is_refused(body, why):
    """A key given twice, a 5000-digit number, a cost for a unit or node the file does not
    list (the planner dropped it without a word): one line each."""
    with pytest.raises(PartunerError, match=why) as exc:
        problem_from_json(PROBLEM % body)
    assert "sys." not in str(exc.value)


def _npy(shape: tuple[int, ...]) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        f, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    return f.getvalue() + b"\0" * 4 * 12288


def test_a_cut_or_negative_npy_header_is_said_in_partuners_words(tmp_path):
    (tmp_path / "neg.npy").write_bytes(_npy((1, 3, -64, 64)))
    (tmp_path / "magic.npy").write_bytes(np.lib.format.MAGIC_PREFIX)  # 6 bytes of 8
    cases = {"neg": r"claims shape \(1, 3, -64, 64\), a negative dimension", "magic": "ends inside"}
    for name, why in cases.items():
        with pytest.raises(PartunerError, match=f"--input .*{name}.npy: .*{why}") as exc:
            read_inputs((f"x={tmp_path / name}.npy",), ["x"])
        assert "Failed to read" not in str(exc.value) and "EOF" not in str(exc.value)


def test_a_fifo_or_folder_as_input_is_refused_before_it_is_opened(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    # a writer holds the pipe open (nothing blocks, with or without the check)
    fd = os.open(tmp_path / "fifo", os.O_RDWR | os.O_NONBLOCK)
    os.symlink(tmp_path / "fifo", tmp_path / "link.npy")
    try:
        os.write(fd, _npy((1,))[:200])
        for name in ("fifo", "link.npy", "."):
            with pytest.raises(PartunerError, match="is not a regular file"):
                read_inputs((f"x={tmp_path / name}",), ["x"])
    finally:
        os.close(fd)


def test_an_input_given_twice_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(2, np.float32))
    with pytest.raises(PartunerError, match="--input x is given twice"):
        read_inputs((f"x={tmp_path / 'a.npy'}", f"x={tmp_path / 'a.npy'}"), ["x", "y"])


def test_a_0d_batch_input_is_said_to_have_no_batch_dimension():
    with pytest.raises(PartunerError, match="--input input is a 0-d array .* no batch dimension"):
        _batch_of({"input": np.array(1.0, np.float32)}, None)


def test_the_store_bounds_times_as_the_planner_bounds_costs():
    from partuner.plan.problem import MAX_US
    from partuner.profile import store

    assert store.MAX_US == MAX_US


def test_ops_as_a_string_is_refused():
    with pytest.raises(
        UnitError, match=r"option 'ops' must be a list of op types, e\.g\. \[Conv\]"
    ):
        make_unit("cpu", "onnxruntime", ops="Conv")


def test_a_plans_allowed_session_option_with_a_wrong_value_names_the_value():
    units = {"cpu": {"backend": "onnxruntime", "session_options": {
        "session.set_denormal_as_zero": 1e30}}}  # fmt: skip
    with pytest.raises(PlanFileError) as exc:
        check_plan_units(units, "p.yaml")
    assert "entry 'session.set_denormal_as_zero' = 1e+30 is a value a plan may not" in str(
        exc.value
    )
    assert "allowed:" not in str(exc.value)


def test_openvino_errors_show_their_cause_and_bad_properties_make_the_unit_unavailable():
    from partuner.units.openvino_unit import _cause

    text = (
        "Exception from src/inference/src/cpp/core.cpp:117:\n"
        "Check 'val_i >= 0' failed at src/inference/src/dev/threading/istreams_executor.cpp:58:\n"
        "Wrong value for property key NUM_STREAMS. Got: -5\n\n\n"
    )
    assert _cause(RuntimeError(text)) == "Wrong value for property key NUM_STREAMS. Got: -5"
    pytest.importorskip("openvino")
    unit = make_unit("ov", "openvino", threads=1, properties={"NUM_STREAMS": -5})
    ok, why = unit.availability()
    assert not ok and "NUM_STREAMS" in why and "Got: -5" in why, why
    ok, why = make_unit("ov", "openvino", threads=1, properties={"NUM_STREAMS": 1}).availability()
    assert ok, why


def test_a_check_that_compares_no_finite_value_does_not_pass():
    """An all-NaN --input makes NaN everywhere, in the reference and the plan's outputs alike:
    the check compared nothing, so it does not say "passed" (held-out review D)."""
    from partuner.runtime import check_outputs

    nan = {"y": np.full((1, 4), np.nan, np.float32), "z": np.full((2,), np.inf, np.float32)}
    got = check_outputs(nan, {k: v.copy() for k, v in nan.items()})
    assert not got.passed and "no finite value" in got.rule
    assert not any(c.passed for c in got.outputs)  # no output says it passed either
    some = {**nan, "k": np.array([3], np.int64)}  # an integer output is still compared
    assert check_outputs(some, {k: v.copy() for k, v in some.items()}).passed
    empty = {"y": np.zeros((0, 4), np.float32)}
    assert check_outputs(empty, {"y": empty["y"].copy()}).passed


def test_a_units_file_of_thousands_of_units_is_refused_at_once():
    """Every pair of units has a link (listed by `partuner units`, planned): 2000 units took
    minutes to list; a units file holds at most MAX_UNITS."""
    from partuner.errors import UnitsFileError
    from partuner.units import units_from_mapping
    from partuner.units.config import MAX_UNITS

    many = {f"m{i}": {"backend": "modeled", "gflops": 1.0, "gbps": 1.0} for i in range(2000)}
    with pytest.raises(
        UnitsFileError, match=f"2000 units; a units file defines at most {MAX_UNITS}"
    ):
        units_from_mapping({"units": many}, "u.yaml")
    assert (
        len(units_from_mapping({"units": dict(list(many.items())[:MAX_UNITS])}, "u").units)
        == MAX_UNITS
    )
