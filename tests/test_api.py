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
