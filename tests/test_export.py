"""Cutting sub-models, the plan file (partuner's and NEST-C's form), writing an export folder."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from partuner.errors import PartitionCycleError, PlanFileError
from partuner.export import (
    PartitionSpec,
    PlanFile,
    cut,
    export_plan,
    read_plan,
    write_plan,
)
from partuner.profile import random_feeds


def _run_chain(graph, parts, feeds):
    env = dict(feeds)
    for p in parts:
        s = ort.InferenceSession(p.model.SerializeToString())
        outs = s.run(p.outputs, {k: env[k] for k in p.inputs})
        env.update(zip(p.outputs, outs, strict=True))
    return env


def _full(graph, feeds):
    s = ort.InferenceSession(graph.model.SerializeToString())
    return dict(zip(graph.outputs, s.run(None, feeds), strict=True))


def _alternating(graph, k=3):
    """Split the compute nodes into k consecutive chunks (a valid, acyclic cut)."""
    names = [n.name for n in graph.compute_nodes]
    step = -(-len(names) // k)
    return [
        PartitionSpec(f"p{i}", f"cpu{i % 2}", tuple(names[i * step : (i + 1) * step]))
        for i in range(k)
    ]


def test_chained_partitions_equal_the_whole_model(branchy):
    parts = cut(branchy, _alternating(branchy, 4))
    feeds = random_feeds(branchy, list(branchy.inputs))
    env = _run_chain(branchy, parts, feeds)
    ref = _full(branchy, feeds)
    for name, want in ref.items():
        np.testing.assert_allclose(env[name], want, rtol=1e-5, atol=1e-5)


def test_each_partition_is_standalone_and_minimal(branchy):
    parts = cut(branchy, _alternating(branchy, 3))
    all_inits = {t.name for t in branchy.model.graph.initializer}
    for p in parts:
        onnx.checker.check_model(p.model, full_check=True)
        assert p.model.opset_import == branchy.model.opset_import
        assert p.model.ir_version == branchy.model.ir_version
        used = {v for n in p.model.graph.node for v in n.input}
        inits = {t.name for t in p.model.graph.initializer}
        assert inits <= used & all_inits  # only the initializers it reads
        for vi in list(p.model.graph.input) + list(p.model.graph.output):
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            assert dims == list(branchy.values[vi.name].shape)


def test_cyclic_cut_names_both_partitions(branchy):
    names = [n.name for n in branchy.compute_nodes]
    # first and last node together, the middle apart: the middle reads from and feeds the first.
    a = PartitionSpec("pa", "cpu0", (names[0], names[-1]))
    b = PartitionSpec("pb", "cpu1", tuple(names[1:-1]))
    with pytest.raises(PartitionCycleError, match="'pa'.*'pb'|'pb'.*'pa'"):
        cut(branchy, [a, b])


def test_unknown_and_missing_nodes_are_named(branchy):
    names = [n.name for n in branchy.compute_nodes]
    with pytest.raises(PlanFileError, match="nosuchnode"):
        cut(branchy, [PartitionSpec("p0", "cpu0", (*names, "nosuchnode"))])
    with pytest.raises(PlanFileError, match="unplaced"):
        cut(branchy, [PartitionSpec("p0", "cpu0", tuple(names[:-1]))])
    with pytest.raises(PlanFileError, match="in partitions"):
        cut(
            branchy,
            [PartitionSpec("p0", "cpu0", tuple(names)), PartitionSpec("p1", "cpu1", (names[0],))],
        )


def test_plan_file_round_trip_and_nestc_keys(tmp_path, branchy):
    specs = _alternating(branchy, 3)
    pf = PlanFile(
        partitions=specs,
        model="branchy.onnx",
        input_shapes={"input": [1, 3, 32, 32]},
        scheduler="heft",
        status="heuristic",
        predicted_us=1234.5,
        lower_bound_us=1000.0,
        units={"cpu0": {"backend": "onnxruntime"}, "cpu1": {"backend": "onnxruntime"}},
        parallel=[["p1", "p2"]],
    )
    path = tmp_path / "plan.yaml"
    write_plan(pf, path)
    doc = __import__("yaml").safe_load(path.read_text())
    assert doc["numOfPartitions"] == 3
    assert doc["partitionNames"] == "p0:p1:p2"
    assert doc["backendNames"] == "cpu0:cpu1:cpu0"
    assert doc["logicalIDs"] == "0:1:0"
    assert doc["parallelPartitions"] == "(p1||p2)"
    back = read_plan(path)
    assert [p.nodes for p in back.partitions] == [p.nodes for p in specs]
    assert back.predicted_us == pytest.approx(1234.5)
    assert back.parallel == [["p1", "p2"]]


def test_node_names_with_colons_round_trip(tmp_path, branchy, caplog):
    """NEST-C's keys join node names with ':' and cannot hold a name with one: partuner's own
    section is read, and the keys are not compared with it (no error, no warning)."""
    specs = [
        PartitionSpec(
            p.name, p.unit, tuple(f"ns:{n}" if i == 0 else n for i, n in enumerate(p.nodes))
        )
        for p in _alternating(branchy, 2)
    ]
    pf = PlanFile(partitions=specs, model="m.onnx", units={"cpu0": {}, "cpu1": {}})
    path = tmp_path / "plan.yaml"
    write_plan(pf, path)
    with caplog.at_level("WARNING"):
        back = read_plan(path)
    assert [p.nodes for p in back.partitions] == [p.nodes for p in specs]
    assert "describe another plan" not in caplog.text


def test_nestc_only_plan_is_read(tmp_path, branchy):
    names = [n.name for n in branchy.compute_nodes]
    items = [f"{n}-{0 if i < 10 else 1}" for i, n in enumerate(names)]
    text = (
        "funcName: branchy\nnumOfPartitions: 2\nbackendNames: cpu0:cpu1\n"
        "partitionNames: p0:p1\nnodeToPartition: "
        + ":".join(items)
        + "\nlogicalIDs: 0:1\nparallelPartitions: \n"
    )
    path = tmp_path / "nestc.yaml"
    path.write_text(text)
    pf = read_plan(path)
    assert [p.unit for p in pf.partitions] == ["cpu0", "cpu1"]
    assert pf.partitions[0].nodes == tuple(names[:10])
    assert len(cut(branchy, pf.partitions)) == 2


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2", "YAML syntax error at line 1"),
        ("- a\n- b\n", "expected a YAML mapping"),
        ("funcName: x\n", "no `backendNames`"),
        ("backendNames: a:b\npartitionNames: p0\nnodeToPartition: n-0\n", "1 partitionNames but 2"),
        ("backendNames: a\npartitionNames: p0\nnodeToPartition: n-3\n", "only 1"),
    ],
)
def test_bad_plan_files(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PlanFileError, match=match):
        read_plan(path)
    with pytest.raises(PlanFileError, match="not found"):
        read_plan(tmp_path / "missing.yaml")


def test_export_folder(tmp_path, branchy):
    pf = PlanFile(
        partitions=_alternating(branchy, 3), model="branchy.onnx", parallel=[["p0", "p1"]]
    )
    out = tmp_path / "out"
    parts = export_plan(branchy, pf, out)
    assert sorted(p.name for p in (out / "partitions").iterdir()) == [
        "p0.onnx",
        "p1.onnx",
        "p2.onnx",
    ]
    man = json.loads((out / "manifest.json").read_text())
    assert [p["name"] for p in man["partitions"]] == ["p0", "p1", "p2"]
    assert man["partitions"][1]["after"] == ["p0"]
    assert man["parallel_groups"] == [["p0", "p1"]]
    assert read_plan(out / "plan.yaml").partitions[0].nodes == parts[0].nodes
    # a failing export leaves the existing folder as it was and no temporary folder behind
    bad = PlanFile(partitions=[PartitionSpec("p0", "cpu0", ("nosuch",))])
    with pytest.raises(PlanFileError):
        export_plan(branchy, bad, out)
    assert (out / "partitions" / "p2.onnx").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
