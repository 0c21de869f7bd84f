"""The stable Python API re-exported from ``partuner``, used the way the README shows."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import partuner
from partuner.graph import zoo


def test_readme_python_example(tmp_path):
    graph = partuner.load_model(zoo.build("branchy", image_size=32))
    units = partuner.default_units()
    with partuner.ProfileStore(tmp_path / "p.db") as store:
        profile = partuner.profile_model(graph, units, store=store, budget_s=0.02)
    problem = partuner.build_problem(graph, units, profile)
    plan, plans = partuner.make_plan(problem)
    assert plan.predicted_us <= min(p.predicted_us for p in plans.values())
    parts = partuner.cut(graph, plan.partitions)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with partuner.Session(graph, parts, units) as sess:
        (out,) = sess.run(None, {"input": x})
    want = ort.InferenceSession(graph.model.SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        partuner.nope  # noqa: B018
    assert "Session" in dir(partuner)


def test_wrong_inputs_through_the_library_are_partuners_errors(tmp_path):
    """Found by a new-user trial of the library: these gave KeyError, TypeError, IndexError,
    a silently empty problem, or were accepted (a negative time limit, a string read letter by
    letter)."""
    from partuner.errors import PartunerError, ProfileError
    from partuner.export import PartitionSpec, cut
    from partuner.runtime import Session, check_outputs
    from partuner.units import units_from_mapping

    g = partuner.load_model(zoo.build("branchy", image_size=16))
    other = partuner.load_model(zoo.build("squeezenet", image_size=32))
    units = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime"}}})
    elsewhere = units_from_mapping({"units": {"npu": {"backend": "onnxruntime"}}})
    db = tmp_path / "p.db"
    with partuner.ProfileStore(db) as store:
        prof = partuner.profile_model(g, units, store=store, budget_s=0.01)
    with pytest.raises(ProfileError, match="made for another model"):
        partuner.build_problem(other, units, prof)
    with pytest.raises(ProfileError, match="made with other units"):
        partuner.build_problem(g, elsewhere, prof)
    problem = partuner.build_problem(g, units, prof)
    for bad in (-1, float("nan"), "2"):
        with pytest.raises(PartunerError, match="time_limit must be"):
            partuner.make_plan(problem, "single", time_limit=bad)
    with pytest.raises(PartunerError, match="repeat must be an integer >= 1"):
        partuner.tune(g, units, prof, tmp_path / "out", repeat=0, time_limit=1)
    parts = cut(g, [PartitionSpec("p0", "cpu", tuple(n.name for n in g.compute_nodes))])
    with pytest.raises(PartunerError, match="timeout_s must be finite and > 0"):
        Session(g, parts, units, timeout_s=-1)
    feeds = {g.inputs[0]: np.zeros(g.values[g.inputs[0]].shape, np.float32)}
    with Session(g, parts, units) as sess:
        with pytest.raises(PartunerError, match=r"got the string 'output'; write \['output'\]"):
            sess.run("output", feeds)
        with pytest.raises(PartunerError, match="feeds must map input names to arrays"):
            sess.run(None, feeds[g.inputs[0]])
        with pytest.raises(PartunerError, match="timeout_s must be"):
            sess.run(None, feeds, timeout_s=-1)
        with pytest.raises(PartunerError, match="frames must be an iterable"):
            sess.stream(None)
        with pytest.raises(PartunerError, match="in_flight must be an integer"):
            sess.stream([feeds], in_flight="2")
        (out,) = sess.run(None, feeds)  # the session is still usable
    ref = {g.outputs[0]: out}
    with pytest.raises(PartunerError, match=r"write \['f16'\]"):
        check_outputs(ref, ref, "f16")
    with pytest.raises(PartunerError, match="are not among the outputs to check"):
        check_outputs(ref, {})


def test_wrong_arguments_to_load_profile_and_reference_are_named():
    """Found by a new-user trial of the library: TypeError, ValueError, AttributeError or
    onnxruntime's own multi-line error; a misspelt fuse pattern matched nothing, silently."""
    from partuner.errors import InputShapeError, InvalidModelError, PartunerError, ProfileError
    from partuner.pipeline import reference_outputs
    from partuner.units import units_from_mapping

    proto = zoo.build("branchy", image_size=16)
    with pytest.raises(InvalidModelError, match="got int"):
        partuner.load_model(42)
    for shapes in ({"input": "1x3x16x16"}, [(1, 3, 16, 16)]):
        with pytest.raises(InputShapeError, match="must map input names to dimension tuples"):
            partuner.load_model(proto, shapes)
    g = partuner.load_model(proto)
    units = units_from_mapping({"units": {"cpu": {"backend": "onnxruntime"}}})
    cases = [
        ((proto, units), {}, "graph must be a ModelGraph"),
        ((g, ["cpu"]), {}, "units must be a UnitSet"),
        ((g, units), {"store": "p.db"}, "store must be a ProfileStore"),
        ((g, units), {"budget_s": -1}, "budget_s must be finite and > 0"),
        ((g, units), {"fuse_auto": -1}, "fuse_auto must be an integer >= 0"),
        ((g, units), {"fuse": ["Conv", "Relu"]}, "each a list of op types"),
        ((g, units), {"fuse": [["Conv", "Rleu"]]}, "'Rleu' is not an ONNX op type"),
    ]
    for args, kw, needle in cases:
        with pytest.raises(ProfileError, match=needle):
            partuner.profile_model(*args, **kw)
    with pytest.raises(PartunerError, match=r"input 'input' expects float32 \[1, 3, 16, 16\]"):
        reference_outputs(g, {"input": np.zeros((1, 3, 8, 8), np.float32)})


def test_cut_and_a_problem_file_name_what_they_take():
    """Found by a new-user trial of the library: `cut(graph, plan)` was a TypeError, and a
    problem file holding a JSON list quoted "'list' object has no attribute 'get'"."""
    from partuner.errors import PartunerError, PlanFileError
    from partuner.plan import Problem

    g = partuner.load_model(zoo.build("branchy", image_size=16))
    with pytest.raises(PlanFileError, match=r"a plan's \.partitions\), got object"):
        partuner.cut(g, object())
    with pytest.raises(PlanFileError, match="a name, a unit and nodes, got int"):
        partuner.cut(g, [1])
    with pytest.raises(PartunerError, match="malformed problem JSON: it holds a list, not"):
        Problem.from_json("[]")
