"""NEST-C profile files: key strings, export, import (matched and unmatched keys), round trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from partuner.cli import main
from partuner.errors import ProfileError
from partuner.graph import load_model
from partuner.profile import ProfileStore, find_chains, node_signature, profile_model
from partuner.profile.groups import group_signature
from partuner.profile.nestc import export_nestc, import_nestc, nestc_key
from partuner.units import load_units, units_from_mapping

ONE_CPU = {"units": {"cpu0": {"backend": "onnxruntime"}}}


@pytest.fixture(scope="module")
def convnet():
    w = numpy_helper.from_array(np.ones((64, 32, 3, 3), np.float32), "w")
    fc = numpy_helper.from_array(np.ones((10, 64), np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="gemm", transB=1),
        helper.make_node("ArgMax", ["y"], ["k"], name="argmax", axis=1),
        helper.make_node("Cast", ["k"], ["z"], name="cast", to=TensorProto.INT32),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 56, 56])
    z = helper.make_tensor_value_info("z", TensorProto.INT32, [1, 1])
    g = helper.make_graph(nodes, "convnet", [x], [z], initializer=[w, fc])
    return load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_keys_follow_nestc_style(convnet):
    keys = {n.name: nestc_key(convnet, convnet.node(n.name)) for n in convnet.compute_nodes}
    assert keys == {
        "conv": "Convolution-1-56-56-32-float-64-3-2",  # NHWC input, out channels, kernel, stride
        "relu": "Relu-1-28-28-64-float",
        "gap": "AvgPool-1-28-28-64-float",
        "flat": "Reshape-1-1-1-64-float",
        "gemm": "FullyConnected-1-64-float",
        "argmax": "ArgMax-1-10-float",
        "cast": "Cast-1-1-int64",
    }


def _read(path):
    return yaml.safe_load(path.read_text())


def test_export_writes_mean_costs_infinity_and_fused_keys(branchy, npu_units_file, tmp_path):
    units = load_units(npu_units_file)
    prof = profile_model(branchy, units, budget_s=0.02, fuse=[["Conv", "Relu"]])
    files = export_nestc(prof, branchy, tmp_path, backend_names={"npu": "VTA"})
    assert sorted(f.name for f in files) == [
        "fusedProfilecpu.yaml",
        "initialProfilecpu.yaml",
        "initialProfilenpu.yaml",
    ]
    assert (tmp_path / "initialProfilecpu.yaml").read_text().startswith("---\nbackendName: CPU")
    for unit in ("cpu", "npu"):
        doc = _read(tmp_path / f"initialProfile{unit}.yaml")
        assert doc.pop("backendName") == {"cpu": "CPU", "npu": "VTA"}[unit]
        assert doc.pop("commCost") == pytest.approx(prof.link("cpu", "npu").latency_us, abs=1e-3)
        want: dict[str, list[float]] = {}
        for n in branchy.compute_nodes:
            want.setdefault(nestc_key(branchy, n), []).append(prof.costs[n.name][unit])
        assert set(doc) == set(want)
        for key, vals in want.items():
            if any(math.isinf(v) for v in vals):
                assert doc[key] == "INFINITY"
            else:
                assert doc[key] == round(sum(vals) / len(vals))
    fused = _read(tmp_path / "fusedProfilecpu.yaml")
    want_fused: dict[str, list[float]] = {}
    for members, cost in prof.groups:
        key = "+".join(nestc_key(branchy, branchy.node(m)) for m in members)
        want_fused.setdefault(key, []).append(cost["cpu"])
    fused.pop("backendName"), fused.pop("commCost")
    assert fused == {k: round(sum(v) / len(v)) for k, v in want_fused.items()}
    flat = next(n for n in branchy.compute_nodes if n.op_type == "Flatten")  # not an npu op
    assert nestc_key(branchy, flat).startswith("Reshape-")
    assert _read(tmp_path / "initialProfilenpu.yaml")[nestc_key(branchy, flat)] == "INFINITY"


def test_round_trip_through_nestc_files(branchy, tmp_path):
    units = units_from_mapping(ONE_CPU)
    fuse = [["Conv", "Relu"]]
    prof = profile_model(branchy, units, budget_s=0.02, fuse=fuse)
    initial, fused = export_nestc(prof, branchy, tmp_path)
    with ProfileStore(tmp_path / "p.db") as store:
        a = import_nestc(store, initial, branchy, "nestc-board")
        b = import_nestc(store, fused, branchy, "nestc-board")
        assert a.backend == "CPU" and not a.unmatched and not b.unmatched
        assert a.rows == len({node_signature(branchy, n) for n in branchy.compute_nodes})
        back = profile_model(branchy, units, store=store, remote={"cpu0": "nestc-board"}, fuse=fuse)
    assert back.measured == 0 and back.remote == {"cpu0": "nestc-board"}
    up = back.units["cpu0"]
    assert up.call_us == 0.0 and up.whole_us is None and up.scale == 1.0  # operator times only
    exported = _read(initial)
    for n in branchy.compute_nodes:
        assert back.costs[n.name]["cpu0"] == exported[nestc_key(branchy, n)]
    assert [m for m, _ in back.groups] == find_chains(branchy, ["Conv", "Relu"])
    fused_doc = _read(fused)
    for members, cost in back.groups:
        key = "+".join(nestc_key(branchy, branchy.node(m)) for m in members)
        assert cost["cpu0"] == fused_doc[key]


def test_import_reports_unmatched_keys_and_stores_infinity(branchy, tmp_path):
    n = next(x for x in branchy.compute_nodes if x.op_type == "MaxPool")
    key = nestc_key(branchy, n)
    chain = find_chains(branchy, ["Conv", "Relu"])[0]
    gkey = "+".join(nestc_key(branchy, branchy.node(m)) for m in chain)
    p = tmp_path / "initialProfileVTA.yaml"
    p.write_text(
        f"---\nbackendName: VTA\ncommCost: 3.0\n{key}: INFINITY\n"
        f"Convolution-9-9-9-9-float-1-1-1: 812\n{gkey} : 8\n...\n"
    )
    with ProfileStore(tmp_path / "p.db") as store:
        imp = import_nestc(store, p, branchy, "fp")
        assert imp.backend == "VTA"
        assert imp.matched == [key, gkey]
        assert imp.unmatched == ["Convolution-9-9-9-9-float-1-1-1"]
        m = store.get("fp", node_signature(branchy, n))
        assert m.status == "unsupported" and math.isinf(m.median_us)
        gsig = group_signature(node_signature(branchy, branchy.node(x)) for x in chain)
        assert store.get("fp", gsig).median_us == 8.0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("Type: CommTime\nRelu-1-8-float: 3\n", "CommTime"),
        ("Relu-1-8-float: fast\n", "bad time"),
        ("- a list\n", "flat map"),
        ("a: [unclosed\n", "YAML"),
    ],
)
def test_bad_nestc_files_are_refused(branchy, tmp_path, text, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with ProfileStore(tmp_path / "p.db") as store, pytest.raises(ProfileError, match=needle):
        import_nestc(store, p, branchy, "fp")


def test_a_bad_value_after_good_keys_stores_none_of_them(branchy, tmp_path):
    """The import is all or nothing: the keys before a bad time are not left in the store."""
    keys = [nestc_key(branchy, n) for n in branchy.compute_nodes][:3]
    p = tmp_path / "late.yaml"
    p.write_text(f"{keys[0]}: 5\n{keys[1]}: 7\n{keys[2]}: -1\n")
    with ProfileStore(tmp_path / "p.db") as store:
        with pytest.raises(ProfileError, match="bad time"):
            import_nestc(store, p, branchy, "fp")
        assert list(store.rows("fp")) == []


def test_cli_export_and_import(branchy_file, units_file, db, tmp_path):
    out = tmp_path / "nestc"
    r = CliRunner().invoke(
        main,
        ["profile", str(branchy_file), "--units", str(units_file), "--db", str(db)]
        + ["--budget", "0.02", "--export-nestc", str(out), "--json"],
    )
    assert r.exit_code == 0, r.output
    files = json.loads(r.output)["nestc_files"]
    assert sorted(f.rsplit("/", 1)[1] for f in files) == [
        "initialProfilecpu0.yaml",
        "initialProfilecpu1.yaml",
    ]
    base = ["profile", str(branchy_file), "--units", str(units_file), "--db", str(tmp_path / "n")]
    r = CliRunner().invoke(main, [*base, "--import-nestc", files[0], "--unit", "cpu1", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["unit"] == "cpu1" and res["unmatched"] == [] and res["rows"] > 0
    # two units of one backend and settings share their rows: the import says so
    assert res["shared_with"] == ["cpu0"]
    r = CliRunner().invoke(main, [*base, "--import-nestc", files[0], "--unit", "cpu1"])
    assert "cpu1 shares its measurements with cpu0" in r.output
    for args, needle in [
        (["--import-nestc", files[0], "--unit", "cpu9"], "cpu9"),
        (["--import-nestc", files[0]], "--unit"),
        (["--fuse", "Conv-Xelu"], "Xelu"),
    ]:
        r = CliRunner().invoke(main, [*base, *args])
        assert r.exit_code == 2, r.output
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("partuner: error:") and needle in lines[0]
