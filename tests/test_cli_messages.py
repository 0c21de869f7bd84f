"""What a new user reads: each message found wrong by a new-user trial, as it now reads."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from click.testing import CliRunner

from partuner.cli import main
from partuner.errors import PlanFileError, ProfileError
from partuner.graph import zoo
from partuner.plan import get_scheduler, scheduler_names
from partuner.plan.clock import WorkClock
from partuner.profile import ProfileStore, parse_pattern
from partuner.profile.store import Measurement
from partuner.units import OnnxruntimeUnit, units_from_mapping
from partuner.units.untrusted import check_plan_units

MODELED = "units:\n  npu: {backend: modeled, gflops: 300, gbps: 8, overhead_us: 30}\n"


def _invoke(*args: object):
    args = [str(a) for a in args]
    return CliRunner().invoke(main, args, prog_name="partuner", catch_exceptions=False)


def _one_line(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("partuner: error: "), lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "branchy.onnx"
    zoo.save("branchy", path, image_size=16)
    return path


# -- A. `profile --show` names the unit, not a dict's repr ----------------------------------------


def test_profile_show_names_the_unit(tmp_path):
    db = tmp_path / "p.db"
    unit = OnnxruntimeUnit("cpu0", threads=1)
    with ProfileStore(db) as store:  # as the profiler stores it
        store.put(unit.fingerprint(), "Relu-1", Measurement(1, 1, 1, 1), str(unit.describe()))
        store.put("kit-fp", "Relu-1", Measurement(1, 1, 1, 1), "npu on rpi (partuner kit, 0.1)")
    r = _invoke("profile", "--show", "--db", db, "--json")
    assert r.exit_code == 0, r.output
    rows = {row["fingerprint"]: row for row in json.loads(r.output)["units"]}
    assert rows[unit.fingerprint()]["unit"] == "cpu0"
    assert rows[unit.fingerprint()]["backend"] == "onnxruntime"
    assert rows["kit-fp"]["unit"] == "npu on rpi (partuner kit, 0.1)"
    assert rows["kit-fp"]["backend"] is None
    r = _invoke("profile", "--show", "--db", db)
    assert r.exit_code == 0 and "cpu0" in r.output and "'name'" not in r.output, r.output


# -- B. a plan's units section: unknown backends and misspelt options -----------------------------


def test_plan_unit_with_unknown_backend_is_called_unknown():
    with pytest.raises(PlanFileError) as exc:
        check_plan_units({"npu": {"backend": "tensorrt"}}, "plan.yaml")
    msg = str(exc.value)
    assert "unknown backend 'tensorrt'" in msg and "'onnxruntime'" in msg and "'external'" in msg
    assert "run a program" not in msg and "--units" in msg
    with pytest.raises(PlanFileError, match="unknown backend 'onnxrutime' .did you mean 'onnx"):
        check_plan_units({"npu": {"backend": "onnxrutime"}}, "plan.yaml")
    with pytest.raises(PlanFileError, match="'external', which can run a program or load code"):
        check_plan_units({"npu": {"backend": "external", "compile": "true"}}, "plan.yaml")


def test_plan_unit_with_misspelt_option_gets_a_suggestion():
    with pytest.raises(PlanFileError) as exc:
        check_plan_units({"u": {"backend": "openvino", "thread": 2}}, "plan.yaml")
    msg = str(exc.value)
    assert "option 'thread' of an openvino unit" in msg and "did you mean 'threads'?" in msg
    with pytest.raises(PlanFileError, match="of a modeled unit is not one a plan may set;"):
        check_plan_units({"u": {"backend": "modeled", "zzz": 1}}, "plan.yaml")


# -- C. the wall-clock warning names what the user set --------------------------------------------


def test_wall_clock_warning_says_it_may_be_a_share_of_the_time_limit(caplog):
    clock = WorkClock(0.0)  # a stage given nothing: the cap is already past
    with caplog.at_level(logging.WARNING, logger="partuner.plan.clock"):
        assert clock.hit_cap() and clock.hit_cap()
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "wall-clock limit of 0 s (--time-limit, or the share of it" in msg
    assert "\n" not in msg


# -- D. a unit's `ops` are checked as --fuse checks op types --------------------------------------


def test_unit_ops_must_be_onnx_op_types(tmp_path):
    f = tmp_path / "u.yaml"
    f.write_text("units:\n  npu: {backend: modeled, gflops: 300, gbps: 8, ops: [Conv, Rleu]}\n")
    _one_line(_invoke("units", "--units", f), "unit 'npu'", "'Rleu'", "did you mean 'Relu'")
    spec = {"units": {"npu": {"backend": "onnxruntime", "ops": ["Conv", "Relu", "Concat"]}}}
    assert units_from_mapping(spec)["npu"].ops == {"Conv", "Relu", "Concat"}
    with pytest.raises(ProfileError, match="'Rleu' is not an ONNX op type .did you mean 'Relu'"):
        parse_pattern("Conv-Rleu")  # the same check, the same words


# -- E. a NEST-C profile none of whose keys match is an error ------------------------------------


@pytest.mark.parametrize("text", ['{"foo": 1}', "backendName: VTA\n"])
def test_import_nestc_of_no_known_key_fails(tmp_path, model_file, text):
    f = tmp_path / "npu.yaml"
    f.write_text(text)
    units = tmp_path / "u.yaml"
    units.write_text(MODELED)
    r = _invoke(
        "profile", model_file, "--units", units, "--db", tmp_path / "p.db",
        "--import-nestc", f, "--unit", "npu",
    )  # fmt: skip
    _one_line(r, str(f), "no key", "expected keys like ['Convolution-", "nothing was imported")


# -- F. click's usage errors read like partuner's own ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["plan", "M", "--time-limit", "-1"], ["'--time-limit'", "x>=0", "'partuner plan --help'"]),
        (["zoo", "--image-size", "8", "branchy"], ["'--image-size'", "x>=16"]),
        (["run", "M", "--plan", "p.yaml", "--stream", "0"], ["'--stream'", "1<=x<=1000000"]),
        (["plan", "M", "--objective", "fast"], ["'--objective'", "'latency'"]),
        (["plan", "M", "--bogus"], ["'--bogus'"]),
        (["bogus"], ["'bogus'", "'partuner --help'"]),
    ],
)
def test_usage_errors_are_one_line(args, needles):
    _one_line(_invoke(*args), *needles)


def test_help_is_still_clicks():
    r = _invoke("plan", "--help")
    assert r.exit_code == 0 and r.output.startswith("Usage: partuner plan [OPTIONS] [MODEL]")
    assert "--time-limit" in r.output and "partuner: error" not in r.output


# -- G. `partuner schedulers` shows whole sentences -----------------------------------------------


def test_schedulers_lists_whole_sentences():
    r = _invoke("schedulers")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == len(scheduler_names())
    for line in lines:
        assert line.endswith("."), line
    for name in scheduler_names():  # the summary line of each docstring is a sentence
        summary = (type(get_scheduler(name)).__doc__ or "").strip().splitlines()[0]
        assert summary.endswith("."), (name, summary)


def test_units_file_in_a_plan_round_trips_its_yaml(tmp_path):
    """The unit section a plan carries stays accepted (no false positive from the checks)."""
    units = yaml.safe_load(MODELED)["units"]
    check_plan_units(units, "plan.yaml")


def test_a_check_with_non_finite_figures_prints_them_as_json_does():
    """Found by a new-user trial: the text said "max abs inf" where --json says null."""
    from partuner.cli.cmd_run import _print_check
    from partuner.cli.common import console

    check = {"passed": False, "rule": "f32", "outputs": [
        {"name": "y", "max_abs": float("inf"), "max_rel": None, "cosine": float("nan"),
         "top1_agree": None}]}  # fmt: skip
    with console.capture() as cap:
        _print_check(check)
    line = cap.get().splitlines()[1]
    assert line == (
        "  y: max abs - (not finite), max rel - (not finite), cosine - (not finite), "
        "top-1 agreement -"
    ), line


# -- plans edited by hand: a partition left empty, a node listed twice in one ------------------


@pytest.mark.parametrize("command", ["run", "export"])
def test_an_empty_partition_is_refused_before_anything_runs(tmp_path, model_file, command):
    from partuner.export.planfile import PartitionSpec, PlanFile, write_plan
    from partuner.graph import load_model

    names = tuple(n.name for n in load_model(str(model_file)).compute_nodes)
    write_plan(
        PlanFile([PartitionSpec("p0", "cpu", names), PartitionSpec("p1", "cpu", ())]),
        tmp_path / "plan.yaml",
    )
    (tmp_path / "u.yaml").write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    extra = ["-o", tmp_path / "out"] if command == "export" else ["--db", tmp_path / "p.db"]
    r = _invoke(
        command, model_file, "--plan", tmp_path / "plan.yaml", "--units", tmp_path / "u.yaml",
        *extra,
    )  # fmt: skip
    _one_line(r, "partition 'p1' has no nodes")
    assert not (tmp_path / "out").exists()


def test_a_node_listed_twice_in_one_partition_says_so(model_file):
    from partuner.export.cut import cut
    from partuner.export.planfile import PartitionSpec
    from partuner.graph import load_model

    g = load_model(str(model_file))
    names = tuple(n.name for n in g.compute_nodes)
    with pytest.raises(PlanFileError, match=f"node '{names[0]}' is listed twice in partition 'p0'"):
        cut(g, [PartitionSpec("p0", "cpu", (names[0], *names))])


# -- --input files: an .npz archive, a batch of no items ---------------------------------------


def test_an_npz_given_as_input_is_named_as_an_archive(tmp_path):
    import numpy as np

    from partuner.cli.common import read_inputs
    from partuner.errors import PartunerError

    np.savez(tmp_path / "in.npz", x=np.zeros((1, 3), np.float32))
    with pytest.raises(PartunerError, match=r"\.npz archive \(x\), not one \.npy array"):
        read_inputs((f"x={tmp_path / 'in.npz'}",), ["x"])


def test_an_empty_cut_or_forged_npy_is_one_clear_line(tmp_path):
    """An empty file, one cut short, a header claiming 1e15 items (refused before numpy
    allocates them) and a header holding code: each named, nothing loaded or run."""
    import io

    import numpy as np

    from partuner.cli.common import read_inputs
    from partuner.errors import PartunerError

    def npy(header: dict | bytes) -> bytes:
        f = io.BytesIO()
        if isinstance(header, dict):
            np.lib.format.write_array_header_1_0(f, header)
        else:  # a header of our own text, padded as numpy pads its own
            text = header + b" " * (117 - len(header)) + b"\n"
            f.write(np.lib.format.MAGIC_PREFIX + b"\x01\x00" + len(text).to_bytes(2, "little"))
            f.write(text)
        return f.getvalue() + b"\0" * 24

    np.save(tmp_path / "good.npy", np.ones((2, 3), np.float32))
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "cut.npy").write_bytes((tmp_path / "good.npy").read_bytes()[:-4])
    huge = {"descr": "<f4", "fortran_order": False, "shape": (10**5, 10**5, 10**5)}
    (tmp_path / "huge.npy").write_bytes(npy(huge))
    f = io.BytesIO()  # the same claim in a version 2.0 header
    np.lib.format.write_array_header_2_0(f, huge)
    (tmp_path / "huge2.npy").write_bytes(f.getvalue() + b"\0" * 24)
    code = b"{'descr': __import__('os').getpid(), 'fortran_order': False, 'shape': (1,), }"
    (tmp_path / "forged.npy").write_bytes(npy(code))
    cases = {
        "empty": "the file is empty",
        "cut": r"claims \(2, 3\) float32, 24 bytes; it holds 20",
        "huge": r"claims \(100000, 100000, 100000\) float32, 4000000000000000 bytes; it holds 24",
        "huge2": r"claims \(100000, 100000, 100000\) float32, 4000000000000000 bytes; it holds 24",
        "forged": "header is malformed",
    }
    for name, why in cases.items():
        with pytest.raises(PartunerError, match=f"--input .*{name}.npy: .*{why}"):
            read_inputs((f"x={tmp_path / name}.npy",), ["x"])
    assert read_inputs((f"x={tmp_path / 'good.npy'}",), ["x"])["x"].shape == (2, 3)
    with pytest.raises(PartunerError, match=r"write NAME=FILE.npy, NAME of \['x'\]"):
        read_inputs((str(tmp_path / "good.npy"),), ["x"])  # the input's name left out


def test_a_batch_of_no_items_says_so(tmp_path, model_file):
    import numpy as np

    np.save(tmp_path / "e.npy", np.zeros((0, 3, 16, 16), np.float32))
    (tmp_path / "u.yaml").write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    r = _invoke(
        "batch", model_file, "--units", tmp_path / "u.yaml", "--db", tmp_path / "p.db",
        "--input", f"input={tmp_path / 'e.npy'}",
    )  # fmt: skip
    _one_line(r, "hold no items")


def test_a_plan_for_a_dynamic_model_runs_with_the_shapes_it_was_made_for(tmp_path):
    """Found by a new-user trial: a plan made with --input-shape could not be run, checked or
    exported without giving the shapes again, and the hint suggested other ones."""
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]  # fmt: skip
    g = helper.make_graph(nodes, "dyn", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    (tmp_path / "u.yaml").write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    common = ["--units", tmp_path / "u.yaml", "--db", tmp_path / "p.db"]
    r = _invoke("plan", tmp_path / "m.onnx", *common, "--input-shape", "x=6x4",
                "--time-limit", 1, "-o", tmp_path / "plan.yaml", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    r = _invoke("run", tmp_path / "m.onnx", "--plan", tmp_path / "plan.yaml", *common, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{") :])["check"]["passed"] is True
    r = _invoke("export", tmp_path / "m.onnx", "--plan", tmp_path / "plan.yaml", "-o",
                tmp_path / "out")  # fmt: skip
    assert r.exit_code == 0, r.output
    # a plan's shapes that do not fit the model are named as the plan's, not as an option's
    text = (tmp_path / "plan.yaml").read_text().replace("- 6\n", "- 6\n    - 5\n", 1)
    (tmp_path / "bad.yaml").write_text(text)
    r = _invoke("run", tmp_path / "m.onnx", "--plan", tmp_path / "bad.yaml", *common)
    _one_line(r, "the input shapes of the plan", "do not fit")
    # shapes given again override the plan's, and are checked against it as before
    r = _invoke("run", tmp_path / "m.onnx", "--plan", tmp_path / "plan.yaml", *common,
                "--input-shape", "x=2x4")  # fmt: skip
    _one_line(r, "was made for input 'x' of shape [6, 4]")


def test_profile_show_of_a_store_that_does_not_exist_creates_none(tmp_path):
    """Found by a new-user trial: `profile --show --db NEW.db` created the file."""
    r = _invoke("profile", "--show", "--db", tmp_path / "new.db")
    assert r.exit_code == 0 and "no profile store at" in r.output, r.output
    r = _invoke("profile", "--show", "--db", tmp_path / "new.db", "--json")
    assert json.loads(r.output)["units"] == []
    assert not (tmp_path / "new.db").exists()


def test_fallback_names_a_local_unit_when_the_plan_carries_its_own_units(tmp_path, model_file):
    """Found by a new-user trial: a plan for a board's unit (its own units section) could not
    be run here with --fallback cpu0: 'unknown unit', though the error before said to use it."""
    from partuner.export.planfile import PartitionSpec, PlanFile, write_plan
    from partuner.graph import load_model

    names = tuple(n.name for n in load_model(str(model_file)).compute_nodes)
    board = {"backend": "onnxruntime", "threads": 1, "remote": True}
    write_plan(
        PlanFile([PartitionSpec("p0", "board", names)], units={"board": board}),
        tmp_path / "plan.yaml",
    )
    r = _invoke("run", model_file, "--plan", tmp_path / "plan.yaml", "--db", tmp_path / "p.db",
                "--fallback", "cpu0", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{") :])["check"]["passed"] is True


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "{model}", "--time-limit", "1", "-o", "{blocker}/plan.yaml"],
        ["plan", "{model}", "--dump-problem", "{blocker}/p.json"],
        ["run", "{model}", "--plan", "{plan}", "--trace", "{blocker}/deeper/t.json"],
        ["export", "{model}", "--plan", "{plan}", "-o", "{blocker}/sub"],
        ["tune", "{model}", "-o", "{blocker}/sub"],
        ["batch", "{model}", "--batch", "2", "-o", "{blocker}/out.npz"],
        ["report", "{model}", "--plan", "{plan}", "-o", "{blocker}/r.html"],
        ["profile", "{model}", "--export-nestc", "{blocker}/nestc"],
        ["zoo", "squeezenet", "-o", "{blocker}/m.onnx"],
        ["plan", "{model}", "--db", "{blocker}/p.db"],
    ],
)
def test_an_output_path_through_a_file_is_refused_before_any_work(tmp_path, model_file, args):
    """A file where a folder of an output path should be: one line naming it when the command
    line is read (it used to surface as an OSError after profiling and planning)."""
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    plan = tmp_path / "plan.yaml"  # never read: the path is refused first
    given = [a.format(model=model_file, blocker=blocker, plan=plan) for a in args]
    r = _invoke(*given)
    line = _one_line(r, "is a file, not a folder", str(blocker))
    assert "Error" not in line and "Traceback" not in line
    assert blocker.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(
    "spec", ["{backend: onnxruntime, threads: -1}", "{backend: onnxrt, threads: 1}"]
)
def test_a_wrong_units_file_leaves_no_profile_store(tmp_path, model_file, spec):
    """Found by a new-user trial: `profile` with a wrong units file said so (exit 2) but left an
    empty store behind (plan, tune and batch wrote nothing)."""
    units = tmp_path / "u.yaml"
    units.write_text(f"units:\n  cpu: {spec}\n")
    r = _invoke("profile", model_file, "--units", units, "--db", tmp_path / "new.db")
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "new.db").exists()


def test_export_against_units_lacking_a_plans_unit_names_no_fallback(tmp_path, model_file):
    """Found by a new-user trial: with --units, export's error for a plan on a unit the file
    lacks named --fallback, an option export does not have. (Without --units a plan edited to
    another unit still exports: test_hardening_plans.)"""
    from partuner.export.planfile import PartitionSpec, PlanFile, write_plan
    from partuner.graph import load_model

    names = tuple(n.name for n in load_model(str(model_file)).compute_nodes)
    cpu = {"backend": "onnxruntime", "threads": 1}
    parts = [PartitionSpec("p0", "cpu", names[:2]), PartitionSpec("p1", "npu9", names[2:])]
    write_plan(PlanFile(parts, units={"cpu": cpu}), tmp_path / "plan.yaml")
    out = tmp_path / "out"
    units = tmp_path / "u.yaml"
    units.write_text("units:\n  cpu: {backend: onnxruntime, threads: 1}\n")
    r = _invoke("export", model_file, "--plan", tmp_path / "plan.yaml", "--units", units, "-o", out)
    line = _one_line(r, "'npu9'")
    assert "--fallback" not in line
    assert not out.exists()


def test_compare_calls_a_plan_optimal_only_when_it_meets_the_bound():
    """Found by a new-user trial: `plan --compare` listed exact 'optimal' at 8.797 ms beside a
    pexact plan at 8.275 ms and a bound of 8.272 ms (exact proves its node-level model, whose
    plan, simulated as partitions, is slower)."""
    from types import SimpleNamespace

    from partuner.cli.cmd_plan import MODEL_OPTIMAL, _own_status

    bound = 8272.0
    assert _own_status(SimpleNamespace(status="optimal", predicted_us=8797.0), bound) == (
        MODEL_OPTIMAL
    )
    assert _own_status(SimpleNamespace(status="optimal", predicted_us=8272.0), bound) == "optimal"
    assert _own_status(SimpleNamespace(status="feasible", predicted_us=8275.0), bound) == "feasible"


def test_an_op_no_backend_knows_is_named_with_its_domain(tmp_path):
    """A custom-domain op on onnxruntime units with no ops list: the fix offered was to add
    its op type to a unit's ops list (a new user's trial); now the op, its domain and why."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("FooBar", ["x"], ["y"], domain="com.example", name="foo")
    g = helper.make_graph([node], "g", [x], [y])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets), tmp_path / "custom.onnx")
    units = tmp_path / "u.yaml"
    units.write_text("units:\n  cpu0: {backend: onnxruntime, threads: 1}\n")
    r = _invoke("plan", tmp_path / "custom.onnx", "--units", units, "--db", tmp_path / "p.db")
    assert r.exit_code == 2, r.output
    last = r.output.strip().splitlines()[-1]
    assert "node 'foo' (com.example:FooBar) cannot run on any unit of ['cpu0']" in last, last
    assert "not a registered function/op" in last and "ops list" not in last


def test_load_problem_refuses_what_it_would_ignore(tmp_path):
    """`plan MODEL --load-problem P` wrote MODEL's name on another model's plan, and took
    --db, --fuse, --fuse-max, --skip-unavailable without a word (a new user's trial); and
    --fuse-max without --fuse auto did nothing."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx"
    )
    prob = tmp_path / "p.json"
    head = '{"format": "partuner.problem", "version": 1, "units": ["cpu0"], '
    prob.write_text(head + '"nodes": ["a"], "cost": {"a": {"cpu0": 1.0}}}')
    m = tmp_path / "m.onnx"
    cases = [
        (["plan", m, "--load-problem", prob], "is a problem of another model than"),
        (["plan", "--load-problem", prob, "--db", tmp_path / "x.db"], "leave out --db, --fuse"),
        (["plan", "--load-problem", prob, "--skip-unavailable"], "leave out --db, --fuse"),
        (["plan", m, "--fuse-max", 4], "--fuse-max sets the longest chain --fuse auto tries"),
    ]
    for args, said in cases:
        _one_line(_invoke(*args), said)
    assert not (tmp_path / "x.db").exists()
    prob.write_text(head + '"nodes": ["r"], "cost": {"r": {"cpu0": 1.0}}}')  # the model's own
    other = tmp_path / "u.yaml"
    other.write_text("units:\n  cpu9: {backend: onnxruntime, threads: 1}\n")
    _one_line(
        _invoke("plan", m, "--load-problem", prob, "--units", other),
        "plans on unit(s) ['cpu0'], not in",
    )
    r = _invoke("plan", m, "--load-problem", prob, "-q", "--time-limit", 1)
    assert r.exit_code == 0, r.output  # the model's own problem, on the default units


def test_a_fallback_run_is_not_blamed_on_a_busy_machine():
    """After --fallback ran a partition elsewhere, `run` blamed a busy machine and offered
    --calibrate for the gap (a new user's trial): the gap is the fallback's."""
    from partuner.cli.cmd_run import _off_prediction

    r = {"predicted_ms": 1.0, "measured_ms": 2.1, "modeled": False, "fallback": {}}
    assert "the machine may be busier" in _off_prediction(r)
    r["fallback"] = {"p1": {"planned": "npu", "ran_on": "cpu0"}}
    said = _off_prediction(r)
    assert "ran on the fallback unit" in said and "['p1']" in said and "busier" not in said
    assert _off_prediction({**r, "measured_ms": 1.01}) is None  # within the margin: nothing
