"""Plan files and export folders are untrusted: a plan cannot run a program, partition names are
never paths, a re-export removes only what partuner wrote, a bad plan is one line, and output
files get the user's umask."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

import onnx
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from partuner.cli import main
from partuner.errors import PartunerError, PlanFileError
from partuner.export import (
    PartitionSpec,
    PlanFile,
    export_plan,
    read_plan,
    warn_keys_differ,
    write_plan,
)
from partuner.export.legalize import LegalizeOptions, export_legalized
from partuner.graph import load_model

NODES = ("n0", "n1", "n2", "n3")


def _model() -> onnx.ModelProto:
    """x[1,64] -> Relu -> Add(w) -> Neg -> Abs: four nodes, one 256-byte weight."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 64], [0.5] * 64)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n0"),
        helper.make_node("Add", ["a", "w"], ["b"], name="n1"),
        helper.make_node("Neg", ["b"], ["c"], name="n2"),
        helper.make_node("Abs", ["c"], ["y"], name="n3"),
    ]
    g = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("m") / "tiny.onnx"
    onnx.save_model(_model(), p)
    return p


@pytest.fixture(scope="module")
def graph(model_file):
    return load_model(model_file)


CPU = {"backend": "onnxruntime", "threads": 1}


def _own_plan(path: Path, parts: list[tuple[str, str, list[str]]], units=None) -> Path:
    doc = {
        "funcName": "tiny.onnx",
        "partuner": {
            "version": 1,
            "model": "tiny.onnx",
            "units": units if units is not None else {"cpu": CPU},
            "partitions": [
                {"name": n, "unit": u, "start_ms": 0.0, "end_ms": 0.1, "nodes": ns}
                for n, u, ns in parts
            ],
        },
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _fails_cleanly(r, *needles: str) -> str:
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1, r.output
    assert lines[0].startswith("partuner: error: ") and "Traceback" not in r.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# -- 1. a plan file cannot run a program --------------------------------------------------------

ATTACK = {"backend": "external", "compile": "touch owned.txt {artifact}", "runner": "os:getcwd"}


@pytest.mark.parametrize("command", ["run", "check", "report"])
def test_plan_units_section_cannot_run_a_command(tmp_path, model_file, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    plan = _own_plan(tmp_path / "plan.yaml", [("p0", "npu", list(NODES))], {"npu": ATTACK})
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    r = _cli(command, model_file, "--plan", plan, *extra)
    assert not (tmp_path / "owned.txt").exists()
    _fails_cleanly(r, "'npu'", "external", "--units")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    ("unit", "needle"),
    [
        ({**CPU, "session_options": {"ep.context_file_path": "x.onnx"}}, "ep.context_file_path"),
        ({"backend": "openvino", "properties": {"CACHE_DIR": "cache"}}, "CACHE_DIR"),
        ({"backend": "external", "runner": "os:getcwd"}, "external"),
        ({"backend": "vendor_thirdparty"}, "vendor_thirdparty"),
        ({"spec": ATTACK}, "external"),
        ({**CPU, "provider": {"a": 1}}, "provider"),
        ("external", "mapping"),
        # found by a new-user trial: 10^5 intra-op threads hung `run` for minutes
        ({"backend": "openvino", "properties": {"INFERENCE_NUM_THREADS": 100000}}, "THREADS"),
    ],
)
def test_plan_units_that_run_or_load_code_are_refused(
    tmp_path, model_file, monkeypatch, unit, needle
):
    monkeypatch.chdir(tmp_path)
    plan = _own_plan(tmp_path / "plan.yaml", [("p0", "u", list(NODES))], {"u": unit})
    r = _cli("check", model_file, "--plan", plan)
    _fails_cleanly(r, needle, "--units")
    assert sorted(os.listdir(tmp_path)) == ["plan.yaml"]


def test_plan_with_safe_units_runs_without_units_file(tmp_path, model_file):
    units = {
        "cpu": {**CPU, "spinning": False, "optimization": "all", "session_options": {}},
        "npu": {"backend": "modeled", "gflops": 100, "gbps": 8, "ops": ["Neg", "Abs"]},
    }
    parts = [("p0", "cpu", ["n0", "n1"]), ("p1", "npu", ["n2", "n3"])]
    plan = _own_plan(tmp_path / "plan.yaml", parts, units)
    r = _cli("check", model_file, "--plan", plan, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["passed"] is True
    # --units FILE takes the place of the plan's section.
    (tmp_path / "u.yaml").write_text(yaml.safe_dump({"units": {"cpu": CPU, "npu": CPU}}))
    r = _cli("check", model_file, "--plan", plan, "--units", tmp_path / "u.yaml", "--json")
    assert r.exit_code == 0, r.output


# -- 2. partition names are never paths ---------------------------------------------------------

BAD_NAMES = ["../../x", "/abs/path/model", "a/b", "..", ".hidden", "-x", "a\\b", "", "p\n0"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_partition_names_are_refused_in_own_format(tmp_path, model_file, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "deep" / "er" / "out"
    plan = _own_plan(tmp_path / "plan.yaml", [(name, "cpu", list(NODES))])
    r = _cli("export", model_file, "--plan", plan, "-o", out)
    _fails_cleanly(r, "partition name", "plan.yaml")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["plan.yaml"]


@pytest.mark.parametrize("name", ["../../x", "/abs/model", "a/b", ".."])
def test_bad_partition_names_are_refused_in_nestc_format(tmp_path, model_file, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "backendNames": "cpu:cpu",
                "partitionNames": f"{name}:p1",
                "nodeToPartition": "n0-0:n1-0:n2-1:n3-1",
            }
        )
    )
    (tmp_path / "u.yaml").write_text(yaml.safe_dump({"units": {"cpu": CPU}}))
    out = tmp_path / "deep" / "er" / "o"
    r = _cli("export", model_file, "--plan", plan, "--units", tmp_path / "u.yaml", "-o", out)
    _fails_cleanly(r, "partition name")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["plan.yaml", "u.yaml"]


def test_absolute_partition_name_does_not_overwrite_a_users_model(tmp_path, model_file):
    victim = tmp_path / "mine.onnx"
    victim.write_bytes(b"precious")
    plan = _own_plan(tmp_path / "plan.yaml", [(str(tmp_path / "mine"), "cpu", list(NODES))])
    r = _cli("export", model_file, "--plan", plan, "-o", tmp_path / "out")
    _fails_cleanly(r, "partition name")
    assert victim.read_bytes() == b"precious"


def test_duplicate_partition_names_are_refused(tmp_path, model_file):
    plan = _own_plan(
        tmp_path / "plan.yaml", [("p", "cpu", ["n0", "n1"]), ("p", "cpu", ["n2", "n3"])]
    )
    _fails_cleanly(_cli("export", model_file, "--plan", plan, "-o", tmp_path / "o"), "'p'", "twice")
    plan.write_text(
        yaml.safe_dump(
            {"backendNames": "cpu:cpu", "partitionNames": "q:q", "nodeToPartition": "n0-0:n1-1"}
        )
    )
    with pytest.raises(PlanFileError, match="'q'.*twice"):
        read_plan(plan)
    with pytest.raises(PlanFileError, match="twice"):  # a library caller's PlanFile too
        export_plan(
            load_model(model_file),
            PlanFile([PartitionSpec("P", "c", NODES[:2]), PartitionSpec("p", "c", NODES[2:])]),
            tmp_path / "lib",
        )
    assert not (tmp_path / "o").exists() and not (tmp_path / "lib").exists()


# -- 3. a re-export removes only what partuner wrote --------------------------------------------


def _spec(names: list[str]) -> PlanFile:
    """Consecutive, non-empty chunks of the four nodes, one per name."""
    cuts = [round(i * len(NODES) / len(names)) for i in range(len(names) + 1)]
    return PlanFile(
        [PartitionSpec(n, "cpu", NODES[cuts[i] : cuts[i + 1]]) for i, n in enumerate(names)],
        model="tiny.onnx",
    )


def test_reexport_keeps_the_users_files_and_drops_stale_partitions(tmp_path, graph):
    out = tmp_path / "out"
    export_legalized(graph, _spec(["a", "b", "c"]), out, LegalizeOptions(external_data_threshold=1))
    assert (out / "partitions" / "b.onnx.data").is_file()
    (out / "partitions" / "notes.txt").write_text("mine")
    (out / "partitions" / "mine.onnx").write_text("mine too")
    (out / "README").write_text("top")
    export_plan(graph, _spec(["x", "y"]), out)
    left = sorted(os.listdir(out / "partitions"))
    assert left == ["mine.onnx", "notes.txt", "x.onnx", "y.onnx"]
    assert (out / "README").read_text() == "top"
    man = json.loads((out / "manifest.json").read_text())
    assert [p["file"] for p in man["partitions"]] == ["partitions/x.onnx", "partitions/y.onnx"]
    # Through the legalizer as well.
    opts = LegalizeOptions(external_data_threshold=1)
    export_legalized(graph, _spec(["q"]), out, opts)
    left = sorted(os.listdir(out / "partitions"))
    assert left == ["mine.onnx", "notes.txt", "q.onnx", "q.onnx.data"]


def test_reexport_trusts_no_path_of_a_tampered_manifest(tmp_path, graph):
    out = tmp_path / "sub" / "out"
    export_plan(graph, _spec(["a"]), out)
    victims = [tmp_path / "victim.onnx", tmp_path / "sub" / "v2.onnx", out / "plan2.yaml"]
    for v in victims:
        v.write_text("keep")
    (out / "partitions" / "user.txt").write_text("keep")
    man = json.loads((out / "manifest.json").read_text())
    entries = [
        ("../../victim", "partitions/../../victim.onnx"),
        ("v2", "../v2.onnx"),
        ("victim", str(tmp_path / "victim.onnx")),
        ("plan2", "plan2.yaml"),
        ("user", "partitions/user.txt"),
        ("z", "partitions/a.onnx"),
        (7, 7),
        (None, None),
        ("a", "partitions/a.onnx"),  # the one true entry: a.onnx goes
    ]
    man["partitions"] = [{"name": n, "file": f, "external_data": f} for n, f in entries]
    man["partitions"] += ["junk", None, {"file": {"a": 1}}]
    (out / "manifest.json").write_text(json.dumps(man))
    export_plan(graph, _spec(["b"]), out)
    assert all(v.read_text() == "keep" for v in victims)
    assert sorted(os.listdir(out / "partitions")) == ["b.onnx", "user.txt"]
    (out / "manifest.json").write_text("[not json")  # an unreadable manifest removes nothing
    export_plan(graph, _spec(["c"]), out)
    assert sorted(os.listdir(out / "partitions")) == ["b.onnx", "c.onnx", "user.txt"]


def test_export_cli_reexport_keeps_user_file(tmp_path, model_file):
    out = tmp_path / "out"
    plan = _own_plan(
        tmp_path / "plan.yaml", [("p0", "cpu", ["n0", "n1"]), ("p1", "cpu", ["n2", "n3"])]
    )
    assert _cli("export", model_file, "--plan", plan, "-o", out).exit_code == 0
    (out / "partitions" / "keep.me").write_text("x")
    plan = _own_plan(tmp_path / "plan.yaml", [("whole", "cpu", list(NODES))])
    r = _cli("export", model_file, "--plan", plan, "-o", out)
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(out / "partitions")) == ["keep.me", "whole.onnx"]


def test_output_that_is_a_file_or_a_linked_partitions_folder_is_refused(tmp_path, model_file):
    plan = _own_plan(tmp_path / "plan.yaml", [("p0", "cpu", list(NODES))])
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(PartunerError, match="afile is a file"):  # the CLI: click refuses it
        export_plan(load_model(model_file), _spec(["a"]), tmp_path / "afile")
    assert (tmp_path / "afile").read_text() == "mine"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p0.onnx").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "partitions").symlink_to(elsewhere)
    r = _cli("export", model_file, "--plan", plan, "-o", out)
    _fails_cleanly(r, "partitions", "link")
    assert os.listdir(elsewhere) == ["p0.onnx"] and (elsewhere / "p0.onnx").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["afile", "elsewhere", "out", "plan.yaml"]


# -- 4. bad plan files are one line -------------------------------------------------------------

GOOD_OWN = {"name": "p0", "unit": "cpu", "start_ms": 0.0, "end_ms": 1.0, "nodes": list(NODES)}


def _own_doc(**changes) -> dict:
    part = {**GOOD_OWN, **changes.pop("part", {})}
    own = {"version": 1, "model": "tiny.onnx", "units": {"cpu": CPU}, "partitions": [part]}
    own.update(changes)
    return {"funcName": "tiny.onnx", "partuner": own}


BAD_DOCS = [
    (_own_doc(part={"nodes": 5}), "nodes"),
    (_own_doc(part={"nodes": [1, 2]}), "nodes"),
    (_own_doc(part={"nodes": [["n0"]]}), "nodes"),
    (_own_doc(part={"name": ["p0"]}), "name"),
    (_own_doc(part={"unit": {"a": 1}}), "unit"),
    (_own_doc(part={"start_ms": -1.0}), "start_ms"),
    (_own_doc(part={"end_ms": float("nan")}), "end_ms"),
    (_own_doc(part={"end_ms": "soon"}), "end_ms"),
    (_own_doc(part={"start_ms": [1]}), "start_ms"),
    (_own_doc(part={"start_ms": 10**400}), "start_ms"),
    (_own_doc(part={"end_ms": float("inf")}), "end_ms"),
    (_own_doc(predicted_ms=-3), "predicted_ms"),
    (_own_doc(lower_bound_ms={"x": 1}), "lower_bound_ms"),
    (_own_doc(input_shapes=[1, 2]), "input_shapes"),
    (_own_doc(input_shapes={"x": 5}), "input_shapes"),
    (_own_doc(input_shapes={"x": [1, -4]}), "input_shapes"),
    (_own_doc(input_shapes={"x": ["a"]}), "input_shapes"),
    (_own_doc(units=[1, 2]), "units"),
    (_own_doc(units={"cpu": 3}), "units"),
    (_own_doc(model=["a"]), "model"),
    ({"backendNames": "cpu", "partitionNames": "p0", "nodeToPartition": "n0-" + "9" * 5000}, "9"),
    ({"backendNames": "cpu", "partitionNames": "p0", "nodeToPartition": "-0"}, "nodeToPartition"),
    ({"backendNames": "../c", "partitionNames": "p0", "nodeToPartition": "n0-0"}, "unit name"),
    ({"backendNames": "c", "partitionNames": "p0", "nodeToPartition": "n0-0", "funcName": [1]}, ""),
    ("[" * 5000 + "]" * 5000, ""),
]


@pytest.mark.parametrize(("doc", "needle"), BAD_DOCS)
def test_bad_plan_files_raise_one_line(tmp_path, doc, needle):
    p = tmp_path / "plan.yaml"
    if isinstance(doc, str):
        p.write_text(doc)
    else:
        p.write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanFileError) as exc:
        read_plan(p)
    msg = str(exc.value)
    assert "\n" not in msg and str(p) in msg and needle in msg and len(msg) < 400


def test_bad_plan_files_fail_cleanly_in_the_cli(tmp_path, model_file):
    p = tmp_path / "plan.yaml"
    good = yaml.safe_dump(_own_doc())
    p.write_text(good[: len(good) // 2])
    for command in ("export", "check"):
        extra = ["-o", tmp_path / "o"] if command == "export" else []
        _fails_cleanly(_cli(command, model_file, "--plan", p, *extra), str(p))
    p.write_text(yaml.safe_dump(_own_doc(part={"nodes": 3})))
    _fails_cleanly(_cli("check", model_file, "--plan", p), "nodes")
    assert not (tmp_path / "o").exists()


# A valid plan in each format, as text, and random mutations of it.
VALID_OWN = yaml.safe_dump(
    {
        **_own_doc(input_shapes={"x": [1, 64]}, predicted_ms=1.5, lower_bound_ms=1.0),
        "backendNames": "cpu",
        "partitionNames": "p0",
        "nodeToPartition": "n0-0:n1-0:n2-0:n3-0",
        "parallelPartitions": "(p0||p0)",
    },
    sort_keys=False,
)
VALID_NESTC = yaml.safe_dump(
    {
        "funcName": "tiny.onnx",
        "backendNames": "cpu:cpu",
        "partitionNames": "p0:p1",
        "nodeToPartition": "n0-0:n1-0:n2-1-cpu:n3-1",
        "parallelPartitions": "(p0||p1)",
    }
)

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["../x", "/abs", "..", "n0-0:n1-x", "1e400", "-0"]),
)
_value = st.recursive(
    _leaf,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=6,
)


def _paths(doc, prefix=()):
    """Every (path to a value) in a parsed YAML document."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _replaced(doc, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {k: (_replaced(v, rest, value) if k == head else v) for k, v in doc.items()}
    return [(_replaced(v, rest, value) if i == head else v) for i, v in enumerate(doc)]


def _check_loaded(pf: PlanFile) -> None:
    """What a loaded plan promises: safe unique names, node names as strings, sane times."""
    names = [p.name for p in pf.partitions]
    assert len({n.lower() for n in names}) == len(names)
    for p in pf.partitions:
        assert isinstance(p.name, str) and "/" not in p.name and not p.name.startswith(".")
        assert isinstance(p.unit, str) and "/" not in p.unit
        assert all(isinstance(n, str) and n for n in p.nodes)
        for t in (p.start_us, p.end_us):
            assert math.isnan(t) or 0 <= t < math.inf
    for t in (pf.predicted_us, pf.lower_bound_us):
        assert t is None or 0 <= t < math.inf
    for dims in pf.input_shapes.values():
        assert all(isinstance(d, int) and d >= 0 for d in dims)
    assert isinstance(pf.units, dict) and isinstance(pf.model, str)


def _load(tmp_path: Path, text: str) -> None:
    p = tmp_path / "fuzz.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        pf = read_plan(p)
    except PlanFileError as exc:
        assert "\n" not in str(exc)
        return
    _check_loaded(pf)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.sampled_from([VALID_OWN, VALID_NESTC]),
    data=st.data(),
)
def test_mutated_plan_files_load_or_raise_plan_file_error(tmp_path, text, data):
    kind = data.draw(st.sampled_from(["truncate", "splice", "replace"]))
    if kind == "truncate":
        text = text[: data.draw(st.integers(0, len(text)))]
    elif kind == "splice":
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 20))
        text = (
            text[:at]
            + data.draw(st.text(alphabet=":-[]{}|&*!'\"\n #0a.", max_size=8))
            + text[at + cut :]
        )
    else:
        doc = yaml.safe_load(text)
        path = data.draw(st.sampled_from(list(_paths(doc))))
        text = yaml.safe_dump(_replaced(doc, path, data.draw(_value)))
    _load(tmp_path, text)


# -- 5. output files get the user's umask -------------------------------------------------------


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_outputs_get_the_umask(tmp_path, graph, umask_022):
    write_plan(_spec(["a", "b"]), tmp_path / "plan.yaml")
    assert _mode(tmp_path / "plan.yaml") == 0o644
    out = tmp_path / "exp"
    export_plan(graph, _spec(["a", "b"]), out)
    assert _mode(out) == 0o755 and _mode(out / "partitions") == 0o755
    for f in ("manifest.json", "plan.yaml", "partitions/a.onnx"):
        assert _mode(out / f) == 0o644, f
    leg = tmp_path / "leg"
    export_legalized(graph, _spec(["a"]), leg, LegalizeOptions(external_data_threshold=1))
    assert _mode(leg) == 0o755
    for f in ("manifest.json", "partitions/a.onnx", "partitions/a.onnx.data"):
        assert _mode(leg / f) == 0o644, f
    # re-exporting into an existing folder: the new files get the umask too
    export_legalized(graph, _spec(["z"]), out, LegalizeOptions(external_data_threshold=1))
    assert _mode(out / "partitions" / "z.onnx.data") == 0o644


def test_atomic_write_keeps_an_existing_files_mode(tmp_path, umask_022):
    p = tmp_path / "plan.yaml"
    p.write_text("old")
    p.chmod(0o640)
    write_plan(_spec(["a"]), p)
    assert _mode(p) == 0o640 and read_plan(p).partitions[0].name == "a"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda own: own.__setitem__("version", 2), "newer than this partuner"),
        (lambda own: own.__setitem__("version", "x"), "whole number"),
    ],
    ids=["newer-format", "version-not-a-number"],
)
def test_plan_inconsistent_with_itself_is_one_line(tmp_path, edit, needle):
    """Found trying the CLI as a new user: a plan of a newer format was read silently."""
    from partuner.export import PartitionSpec, PlanFile, read_plan, write_plan

    pf = PlanFile(
        [PartitionSpec("p0", "cpu0", ("n0",))],
        units={"cpu0": {"backend": "onnxruntime", "threads": 1}},
    )
    path = tmp_path / "plan.yaml"
    write_plan(pf, path)
    doc = yaml.safe_load(path.read_text())
    edit(doc["partuner"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(PlanFileError, match=needle) as exc:
        read_plan(path)
    assert "\n" not in str(exc.value)


def test_export_of_a_plan_naming_a_unit_its_units_section_lacks(tmp_path, branchy_file):
    """Found trying the CLI as a new user: such a plan (a partition moved by hand to a unit of
    the user's units file) ended `export` in a KeyError traceback; it exports."""
    from click.testing import CliRunner

    from partuner.cli import main

    plan = tmp_path / "plan.yaml"
    r = CliRunner().invoke(
        main,
        ["plan", str(branchy_file), "--scheduler", "single", "-o", str(plan), "-q", "--db",
         str(tmp_path / "p.db")],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(plan.read_text())
    doc["partuner"]["partitions"][0]["unit"] = "gpu9"
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["export", str(branchy_file), "--plan", str(plan), "-o", str(out)])
    assert r.exit_code == 0, r.output
    written = yaml.safe_load((out / "plan.yaml").read_text())
    assert written["backendNames"].split(":")[0] == "gpu9"


def test_plan_unit_with_absurd_threads_is_one_line(tmp_path, model_file, monkeypatch):
    """Found by a new-user trial: `threads: 100000` in a plan's units section hung `run`."""
    monkeypatch.chdir(tmp_path)
    plan = _own_plan(
        tmp_path / "plan.yaml", [("p0", "u", list(NODES))], {"u": {**CPU, "threads": 100000}}
    )
    _fails_cleanly(_cli("check", model_file, "--plan", plan), "'threads' must be <= 1024")


def test_a_plan_putting_a_node_on_a_unit_that_cannot_run_it_is_refused(tmp_path, model_file):
    """Found by a new-user trial: a plan edited by hand to run a node on a unit whose ops list
    leaves out its op type ran (the backend could) and exported without a word."""
    units = tmp_path / "units.yaml"
    units.write_text(
        yaml.safe_dump(
            {
                "units": {
                    "cpu": {"backend": "onnxruntime", "threads": 1},
                    "npu": {"backend": "onnxruntime", "threads": 1, "ops": ["Relu", "Add"]},
                }
            }
        )
    )
    pf = PlanFile(
        [PartitionSpec("p0", "npu", ("n0", "n1", "n2")), PartitionSpec("p1", "cpu", ("n3",))]
    )
    plan = tmp_path / "plan.yaml"
    write_plan(pf, plan)
    for cmd in (["run", "--repeat", "1"], ["export", "-o", str(tmp_path / "out")]):
        r = CliRunner().invoke(
            main, [*cmd[:1], str(model_file), "--plan", str(plan), "--units", str(units), *cmd[1:]]
        )
        assert r.exit_code == 2, r.output
        assert r.output.strip().splitlines() == [
            f"partuner: error: plan {plan} puts node 'n2' (Neg) in partition 'p0' on unit 'npu', "
            "whose ops list leaves out Neg; move it to a unit that runs it, or plan again"
        ]
    assert not (tmp_path / "out").exists()


def test_a_nestc_only_plan_runs_with_no_prediction_shown_as_none(tmp_path, model_file):
    """Found by a new-user trial: a plan without partuner's section showed `nan` as each
    partition's prediction (and `NaN`, which is not JSON, in `--json`)."""
    plan = tmp_path / "plan.yaml"
    write_plan(PlanFile([PartitionSpec("p0", "cpu", ("n0", "n1")),
                         PartitionSpec("p1", "cpu", ("n2", "n3"))]), plan)  # fmt: skip
    doc = yaml.safe_load(plan.read_text())
    del doc["partuner"]
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    units = tmp_path / "units.yaml"
    units.write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    args = ["run", str(model_file), "--plan", str(plan), "--units", str(units), "--repeat", "1"]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert got["predicted_ms"] is None
    assert [p["predicted"] for p in got["partition_ms"].values()] == [None, None]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "nan" not in text.output.lower(), text.output


def test_a_plan_run_on_other_units_warns_and_a_bad_input_file_is_named(
    tmp_path, model_file, caplog
):
    """Found by a new-user trial: a plan run with a units file that sets its units otherwise
    showed the plan's prediction without a word; a text file as --input got numpy's advice to
    pass allow_pickle."""
    import logging

    plan = tmp_path / "plan.yaml"
    own = {"cpu": {"backend": "onnxruntime", "threads": 1}}
    write_plan(PlanFile([PartitionSpec("p0", "cpu", ("n0", "n1", "n2", "n3"))], units=own), plan)
    same, other = tmp_path / "same.yaml", tmp_path / "other.yaml"
    same.write_text(yaml.safe_dump({"units": own}))
    other.write_text(yaml.safe_dump({"units": {"cpu": {"backend": "onnxruntime", "threads": 2}}}))
    args = ["run", str(model_file), "--plan", str(plan), "--repeat", "1", "--units"]
    with caplog.at_level(logging.WARNING, logger="partuner"):
        assert CliRunner().invoke(main, [*args, str(same)]).exit_code == 0
        assert not [r for r in caplog.records if "otherwise" in r.getMessage()]
        assert CliRunner().invoke(main, [*args, str(other)]).exit_code == 0
    said = [r.getMessage() for r in caplog.records if "otherwise" in r.getMessage()]
    assert len(said) == 1 and "unit(s) 'cpu'" in said[0] and "plan again" in said[0]
    text = tmp_path / "x.npy"
    text.write_text("1 2 3\n")
    r = CliRunner().invoke(main, [*args, str(same), "--input", f"x={text}"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"partuner: error: cannot read --input {text}: it is not a NumPy .npy array (write one "
        "with numpy.save(FILE, array))"
    ], r.output
    import numpy as np

    np.save(text, np.array([{}], dtype=object), allow_pickle=True)
    r = CliRunner().invoke(main, [*args, str(same), "--input", f"x={text}"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"partuner: error: cannot read --input {text}: it holds Python objects, which partuner "
        "never loads; save a numeric array"
    ], r.output


def test_a_remote_unit_resolved_in_the_plan_is_not_set_otherwise(tmp_path, caplog):
    """Found by a new-user trial: the units file the plan was made from warned "sets unit(s)
    otherwise", the plan holding `remote: {fingerprint: FP}` where the file says `remote:
    true`; two different fingerprints still differ."""
    import logging

    from partuner.cli.cmd_run import _warn_other_units
    from partuner.units import units_from_mapping

    base = {"backend": "onnxruntime", "threads": 1}
    file_units = units_from_mapping({"units": {"b": {**base, "remote": True}}}, "u.yaml")
    fp = {"fingerprint": "onnxruntime-1-x-0123456789ab"}
    plan = PlanFile([PartitionSpec("p0", "b", ("n0",))], units={"b": {**base, "remote": fp}})
    with caplog.at_level(logging.WARNING, logger="partuner"):
        _warn_other_units(plan, file_units)
        assert not [r for r in caplog.records if "otherwise" in r.getMessage()]
        other = {"fingerprint": "onnxruntime-1-x-ba9876543210"}
        pinned = units_from_mapping({"units": {"b": {**base, "remote": other}}}, "u.yaml")
        _warn_other_units(plan, pinned)
    assert [r for r in caplog.records if "otherwise" in r.getMessage()]


# -- a new user's trial: keys misspelt, NEST-C keys out of line, refused YAML tags ----------------


def test_a_misspelt_key_of_the_partuner_section_is_refused_with_a_suggestion(tmp_path):
    doc = yaml.safe_load(_own_plan(tmp_path / "p.yaml", [("p0", "cpu", ["a"])]).read_text())
    doc["partuner"]["partitons"] = doc["partuner"].pop("partitions")  # the section has none now
    (tmp_path / "gone.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanFileError, match="no `partitions` list"):
        read_plan(tmp_path / "gone.yaml")
    doc["partuner"]["partitions"] = doc["partuner"]["partitons"]
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanFileError, match="unknown key 'partitons'.*did you mean 'partitions'"):
        read_plan(tmp_path / "both.yaml")
    del doc["partuner"]["partitons"]
    doc["partuner"]["partitions"][0]["nodez"] = ["b"]
    (tmp_path / "entry.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanFileError, match=r"partitions\[0\].*did you mean 'nodes'"):
        read_plan(tmp_path / "entry.yaml")


def test_nestc_keys_out_of_line_with_the_partuner_section_are_named(tmp_path, caplog):
    """partuner runs its own section (hand edits included); NEST-C reads the keys. When they
    describe different plans, partuner says so, naming the first node; a partition count
    that does not match the partition names is refused."""
    plan = PlanFile(
        partitions=[PartitionSpec("p0", "cpu", ("a",)), PartitionSpec("p1", "npu", ("b",))],
        model="tiny.onnx",
    )
    path = tmp_path / "plan.yaml"
    write_plan(plan, path)
    with caplog.at_level("WARNING", logger="partuner.export.planfile"):
        read_plan(path)
    assert not caplog.records  # as written: one plan
    doc = yaml.safe_load(path.read_text())
    doc["partuner"]["partitions"][1]["unit"] = "cpu"  # a hand edit of the section alone
    path.write_text(yaml.safe_dump(doc))
    with caplog.at_level("WARNING", logger="partuner.export.planfile"):
        got = read_plan(path)
        assert not caplog.records  # said once the plan is accepted (warn_keys_differ)
        warn_keys_differ(got)
        warn_keys_differ(got)
    assert got.partitions[1].unit == "cpu"
    assert "node 'b': p1/cpu in partuner.partitions, p1/npu in nodeToPartition" in caplog.text
    assert caplog.text.count("describe another plan") == 1
    doc["numOfPartitions"] = 5
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanFileError, match="numOfPartitions is 5 but partitionNames lists 2"):
        read_plan(path)


BOMB = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{k}: &{k} [{', '.join(['*' + prev] * 10)}]\n"
    for prev, k in zip("abcdef", "bcdefg", strict=True)
)


@pytest.mark.parametrize("kind", ["plan", "units"])
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, model_file, kind):
    """Ten million values from seven lines of aliases ("billion laughs"): one line, not a hang."""
    bad = tmp_path / "bomb.yaml"
    bad.write_text(f"units:\n  cpu0: {{backend: onnxruntime, threads: 1}}\n{BOMB}")
    args = ["--plan", bad] if kind == "plan" else ["--plan", _own_plan(tmp_path / "p.yaml", [])]
    args += ["--units", bad] if kind == "units" else []
    _fails_cleanly(_cli("check", model_file, *args), "YAML aliases")


@pytest.mark.parametrize("kind", ["plan", "units"])
def test_a_python_yaml_tag_is_called_refused_not_a_syntax_error(tmp_path, model_file, kind):
    bad = tmp_path / "tagged.yaml"
    bad.write_text("units: !!python/object/apply:os.system ['touch owned.txt']\n")
    args = ["--plan", bad] if kind == "plan" else ["--plan", _own_plan(tmp_path / "p.yaml", [])]
    args += ["--units", bad] if kind == "units" else []
    line = _fails_cleanly(_cli("check", model_file, *args), "python/object/apply:os.system")
    assert "refuses" in line and "syntax" not in line and "not valid YAML" not in line
    assert not (tmp_path / "owned.txt").exists() and not Path("owned.txt").exists()


# -- held-out trial: partitions listed before those they read from; a refused plan, one line -----


def _nestc_plan(path: Path, parts: list[tuple[str, str, list[str]]]) -> Path:
    """A NEST-C-only plan: the partitions in the order given."""
    doc = {
        "funcName": "tiny.onnx",
        "numOfPartitions": len(parts),
        "backendNames": ":".join(u for _, u, _ in parts),
        "partitionNames": ":".join(n for n, _, _ in parts),
        "nodeToPartition": ":".join(f"{n}-{i}" for i, (_, _, ns) in enumerate(parts) for n in ns),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_dependency_order_keeps_an_ordered_list_and_puts_readers_after(graph):
    from partuner.export import dependency_order

    ok = [PartitionSpec(f"p{i}", "cpu", (n,)) for i, n in enumerate(NODES)]
    assert dependency_order(graph, ok) == ok
    assert dependency_order(graph, ok[::-1]) == ok
    mixed = [ok[1], ok[0], ok[3], ok[2]]  # each reader just before what it reads
    assert [p.name for p in dependency_order(graph, mixed)] == ["p0", "p1", "p2", "p3"]


def test_a_plan_listing_a_reader_first_runs_and_exports_in_dependency_order(
    tmp_path, model_file, caplog
):
    """A unit runs its partitions in the order listed: a plan listing p0 (reads p1's output)
    first could never run ("a cycle"); it is run in dependency order with a warning, and export
    writes the NEST-C keys in that order, with the units of --units, so the written plan runs."""
    units = tmp_path / "u.yaml"
    units.write_text(yaml.safe_dump({"units": {"cpu": CPU}}))
    plan = _nestc_plan(
        tmp_path / "p.yaml", [("p0", "cpu", ["n2", "n3"]), ("p1", "cpu", ["n0", "n1"])]
    )
    r = _cli("check", model_file, "--plan", plan, "--units", units)
    assert r.exit_code == 0, r.output
    assert "lists partition 'p1' after partitions that read from it" in caplog.text
    out = tmp_path / "out"
    r = _cli("export", model_file, "--plan", plan, "--units", units, "-o", out)
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load((out / "plan.yaml").read_text())
    assert doc["partitionNames"] == "p1:p0" and doc["nodeToPartition"].startswith("n0-0:n1-0")
    assert doc["partuner"]["units"] == {"cpu": {**CPU, **doc["partuner"]["units"]["cpu"]}}
    caplog.clear()
    r = _cli("check", model_file, "--plan", out / "plan.yaml")  # its own units section
    assert r.exit_code == 0 and not caplog.records, r.output


def test_a_session_given_partitions_out_of_order_names_them(graph):
    from partuner.export import cut
    from partuner.runtime import Session
    from partuner.units import units_from_mapping

    units = units_from_mapping({"units": {"cpu": CPU}}, "test")
    parts = cut(
        graph, [PartitionSpec("late", "cpu", NODES[2:]), PartitionSpec("early", "cpu", NODES[:2])]
    )
    with pytest.raises(PartunerError, match="'late' on 'cpu' waits on 'early' on 'cpu'"):
        Session(graph, parts, units)


def test_a_refused_plan_whose_nestc_keys_differ_gets_its_error_alone(tmp_path, model_file, caplog):
    """The warning that the NEST-C keys describe another plan comes only for a plan that is
    accepted; a refused plan gets its error as one line."""
    from partuner.export import write_plan

    path = tmp_path / "p.yaml"
    write_plan(
        PlanFile([PartitionSpec("p0", "cpu", NODES)], model="tiny.onnx", units={"cpu": CPU}), path
    )
    doc = yaml.safe_load(path.read_text())
    doc["partuner"]["partitions"][0]["unit"] = "gpu7"  # the section edited, the keys not
    path.write_text(yaml.safe_dump(doc))
    _fails_cleanly(_cli("check", model_file, "--plan", path), "gpu7")
    assert not caplog.records
    doc["partuner"]["partitions"][0]["unit"] = "cpu"
    doc["nodeToPartition"] = doc["nodeToPartition"].replace("n3-0", "n3-0").replace("n0-0:", "")
    doc["partuner"]["partitions"][0]["nodes"] = list(NODES)
    doc["backendNames"] = "npu"
    path.write_text(yaml.safe_dump(doc))
    r = _cli("check", model_file, "--plan", path)
    assert r.exit_code == 0, r.output
    assert caplog.text.count("describe another plan") == 1


@pytest.mark.parametrize(
    "change, said",
    [
        ({"numOfPartitions": 2.0}, "numOfPartitions must be a whole number, got 2.0"),
        ({"numOfPartitions": True}, "numOfPartitions must be a whole number, got True"),
        ({"logicalIDs": "0:99:a"}, "`logicalIDs` must hold a whole number >= 0 per partition (2)"),
        ({"logicalIDs": "0"}, "`logicalIDs` must hold a whole number >= 0 per partition (2)"),
        ({"parallelPartitions": "(p0||p9)"}, "group '(p0||p9)' names no partition 'p9'"),
        ({"parallelPartitions": "(p0||p1):((("}, "group '(((' is not (pA||pB)"),
        ({"nodeToPartition": "n0-0-npu:n1-0:n2-1:n3-1"}, "names backend 'npu', but partition 0"),
        ({"logicalIDs": "1:1"}, "give p0 on 'cpu' and p1 on 'npu' one ID: one unit, one"),
        ({"logicalIDs": "0:²"}, "`logicalIDs` must hold a whole number >= 0 per partition"),
        ({"parallelPartitions": "(p0)"}, "group '(p0)' names one partition: a group holds two"),
        ({"parallelPartitions": "(p1||p1)"}, "group '(p1||p1)' names a partition twice"),
    ],
)
def test_nestc_fields_that_contradict_the_plan_are_refused(tmp_path, change, said):
    """Conflicting NEST-C fields were ignored without a word (held-out review D, B4)."""
    path = _nestc_plan(
        tmp_path / "p.yaml", [("p0", "cpu", ["n0", "n1"]), ("p1", "npu", ["n2", "n3"])]
    )
    doc = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**doc, **change}))
    with pytest.raises(PlanFileError, match=re.escape(said)):
        read_plan(path)
    doc.update(
        logicalIDs="0:1", parallelPartitions="(p0||p1)", nodeToPartition="n0-0-CPU:n1-0:n2-1:n3-1"
    )
    path.write_text(yaml.safe_dump(doc))
    assert read_plan(path).parallel == [["p0", "p1"]]  # as NEST-C writes them: read


def test_plan_fields_that_cannot_be_so_are_refused(tmp_path, model_file):
    """An input the model lacks, `modeled: "yes"`, a partition ending before it starts: each
    was taken without a word (held-out review D, B4)."""
    path = _own_plan(tmp_path / "p.yaml", [("p0", "cpu", list(NODES))])
    doc = yaml.safe_load(path.read_text())
    for change, said in [
        ({"input_shapes": {"bogus": [1, 64]}}, "an input 'bogus' the model does not have"),
        ({"modeled": "yes"}, "`partuner.modeled` must be true or false, got 'yes'"),
    ]:
        path.write_text(yaml.safe_dump({**doc, "partuner": {**doc["partuner"], **change}}))
        _fails_cleanly(_cli("check", model_file, "--plan", path), said)
    late = {**doc["partuner"]["partitions"][0], "start_ms": 99.0, "end_ms": 1.7}
    path.write_text(yaml.safe_dump({**doc, "partuner": {**doc["partuner"], "partitions": [late]}}))
    _fails_cleanly(_cli("check", model_file, "--plan", path), "starts at 99 ms, after its end")


def test_unquoted_logical_ids_that_yaml_reads_as_a_number_are_not_refused(tmp_path):
    """YAML 1.1 reads an unquoted ``logicalIDs: 1:0`` as the number 60 (base 60): a NEST-C
    plan so written is read, not refused for a count it does not hold."""
    path = _nestc_plan(
        tmp_path / "p.yaml", [("p0", "npu", ["n0", "n1"]), ("p1", "cpu", ["n2", "n3"])]
    )
    path.write_text(path.read_text() + "logicalIDs: 1:0\n")
    assert [p.unit for p in read_plan(path).partitions] == ["npu", "cpu"]


# -- held-out trial D, left open: logicalIDs and parallel groups that cannot be so -------------


def test_logical_ids_and_groups_that_contradict_the_units_are_refused(tmp_path, model_file):
    """One unit with two logical IDs, a group of two partitions on one unit, a group whose
    partitions read from each other: NEST-C would be told to run them so; one line each (a
    new user's trial: these were accepted, and export wrote them again)."""
    parts = [("p0", "cpu", ["n0", "n1"]), ("p1", "cpu", ["n2"]), ("p2", "npu", ["n3"])]
    path = _nestc_plan(tmp_path / "p.yaml", parts)
    doc = yaml.safe_load(path.read_text())
    for change, said in [
        ({"logicalIDs": "0:1:2"}, "give p0 on 'cpu' and p1 on 'cpu' two IDs"),
        ({"logicalIDs": "00:0:1"}, None),  # the same number, written otherwise: accepted
        ({"parallelPartitions": "(p0||p1)"}, "puts two partitions on unit 'cpu', which runs"),
    ]:
        path.write_text(yaml.safe_dump({**doc, **change}))
        if said is None:
            assert len(read_plan(path).partitions) == 3
            continue
        with pytest.raises(PlanFileError, match=re.escape(said)):
            read_plan(path)
    # p2 reads from p1 (n2 -> n3), which reads from p0: (p0||p2) cannot run at once
    path.write_text(yaml.safe_dump({**doc, "parallelPartitions": "(p0||p2)"}))
    units = tmp_path / "units.yaml"
    units.write_text(yaml.safe_dump({"units": {"cpu": CPU, "npu": CPU}}))
    _fails_cleanly(
        _cli("export", model_file, "--plan", path, "--units", units, "-o", tmp_path / "out"),
        "group (p0||p2) cannot run at once: p2 reads from p0",
    )
    assert not (tmp_path / "out").exists()


def test_logical_ids_out_of_line_with_the_section_are_named(tmp_path, caplog):
    """The partuner section runs; NEST-C reads logicalIDs: when they are not those the
    section's units give, reading warns (once accepted), and export writes them again."""
    plan = PlanFile(
        partitions=[PartitionSpec("p0", "cpu", ("a",)), PartitionSpec("p1", "npu", ("b",))],
        model="tiny.onnx",
        units={"cpu": CPU, "npu": CPU},
    )
    path = tmp_path / "plan.yaml"
    write_plan(plan, path)
    doc = yaml.safe_load(path.read_text())
    assert doc["logicalIDs"] == "0:1"
    path.write_text(yaml.safe_dump({**doc, "logicalIDs": "1:0"}))
    with caplog.at_level("WARNING", logger="partuner.export.planfile"):
        warn_keys_differ(read_plan(path))
    assert "(logicalIDs '1:0', its units give '0:1')" in caplog.text


def test_a_plan_on_a_modeled_unit_is_exported_as_modeled(tmp_path, model_file):
    """`modeled: false` beside a partition on a modeled unit was written again as it was: the
    exported plan says it is a prediction."""
    npu = {"backend": "modeled", "gflops": 100, "gbps": 10, "overhead_us": 10}
    path = _own_plan(
        tmp_path / "p.yaml",
        [("p0", "cpu", ["n0", "n1"]), ("p1", "npu", ["n2", "n3"])],
        units={"cpu": CPU, "npu": npu},
    )
    assert yaml.safe_load(path.read_text())["partuner"].get("modeled") is None  # false
    r = _cli("export", model_file, "--plan", path, "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((tmp_path / "out" / "plan.yaml").read_text())["partuner"]["modeled"]
    units = tmp_path / "units.yaml"  # the units of a units file say so too
    units.write_text(yaml.safe_dump({"units": {"cpu": CPU, "npu": npu}}))
    doc = yaml.safe_load(path.read_text())
    doc["partuner"]["units"]["npu"] = CPU
    path.write_text(yaml.safe_dump(doc))
    r = _cli("export", model_file, "--plan", path, "--units", units, "-o", tmp_path / "o2")
    assert r.exit_code == 0, r.output
    out = yaml.safe_load((tmp_path / "o2" / "plan.yaml").read_text())["partuner"]
    assert out["modeled"] and out["units"]["npu"]["backend"] == "modeled"  # --units' own


def test_a_misspelt_stream_key_is_refused(tmp_path):
    """`in_fligth: [7]` in a stream plan ran with 2 frames in flight, unsaid (a new user's
    trial): unknown keys there are refused, as elsewhere in the section."""
    path = _own_plan(tmp_path / "p.yaml", [("p0", "cpu", list(NODES))])
    doc = yaml.safe_load(path.read_text())
    doc["partuner"]["stream"] = {"objective": "throughput", "in_fligth": [7]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanFileError, match=r"unknown key 'in_fligth' in `partuner.stream` \(did"):
        read_plan(path)
