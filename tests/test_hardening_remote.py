"""Board profiles that plan: a units file marks a unit ``remote: true`` and plan, export and
``partuner units`` work from the kit results imported into the store, never timing it here.
Also: a unit declaring cores this machine lacks gets a warning naming them."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner

from partuner.cli import main
from partuner.graph import zoo
from partuner.profile import ProfileStore
from partuner.profile.kit import target_fingerprint
from partuner.units import load_units, units_from_mapping

BOARD = "test-board ARM Cortex-A76"
UNITS = {
    "b0": {"backend": "onnxruntime", "threads": 1},
    "b1": {"backend": "onnxruntime", "threads": 1, "optimization": "basic"},
}


def _units_file(path, remote=True, **extra):
    units = {
        n: {**s, **({"remote": remote} if remote is not None else {}), **extra}
        for n, s in UNITS.items()
    }
    path.write_text(yaml.safe_dump({"units": units}))
    return path


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_error(r, *needles):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("partuner: error:"), r.output
    assert "Traceback" not in r.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """Model, board units file, and kit results run locally as the 'board' (whose host is
    then renamed, with its fingerprints recomputed, so that it is another target)."""
    d = tmp_path_factory.mktemp("remote")
    model = d / "m.onnx"
    zoo.save("branchy", model, image_size=32)
    units = _units_file(d / "board.yaml")
    kit = d / "kit"
    r = _cli("profile", model, "--units", units, "--kit", kit, "--json")
    assert r.exit_code == 0, r.output
    run = [sys.executable, str(kit / "run_profile.py"), "--quiet", "--budget", "0.01"]
    p = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((kit / "results.json").read_text())
    data["host"] = BOARD
    for e in data["units"]:
        e["fingerprint"] = target_fingerprint(e["fields"], e["backend_version"], BOARD)
    return d, model, units, data


def _results(d, data, name, faster=None, factor=10.0):
    out = json.loads(json.dumps(data))
    for e in out["units"]:
        if e["name"] == faster:
            for row in e["measurements"].values():
                if row[0] is not None:
                    row[:3] = [x / factor for x in row[:3]]
    path = d / name
    path.write_text(json.dumps(out))
    return path


def _plan(model, units, db, d, tag):
    problem, plan = d / f"problem-{tag}.json", d / f"plan-{tag}.yaml"
    r = _cli(
        "plan",
        model,
        "--units",
        units,
        "--db",
        db,
        "--dump-problem",
        problem,
        "-o",
        plan,
        "--json",
        "--time-limit",
        "2",
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output), json.loads(problem.read_text()), plan


def test_plan_uses_the_imported_board_profile(board, tmp_path):
    d, model, units, data = board
    db = tmp_path / "p.db"
    fps = {e["name"]: e["fingerprint"] for e in data["units"]}
    r = _cli(
        "profile", model, "--units", units, "--import", _results(d, data, "r1.json"), "--db", db
    )
    assert r.exit_code == 0, r.output
    assert "b1: {backend: onnxruntime" in r.output and "remote: true}" in r.output
    out1, prob1, _ = _plan(model, units, db, tmp_path, "1")
    # 10x faster b1 on the board: re-import, re-plan
    r = _cli(
        "profile",
        model,
        "--units",
        units,
        "--db",
        db,
        "--import",
        _results(d, data, "r10.json", faster="b1"),
    )
    assert r.exit_code == 0, r.output
    out2, prob2, plan2 = _plan(model, units, db, tmp_path, "2")
    for node, row in prob1["cost"].items():
        assert prob2["cost"][node]["b0"] == pytest.approx(row["b0"], rel=1e-9)
        assert prob2["cost"][node]["b1"] == pytest.approx(row["b1"] / 10, rel=1e-6, abs=1e-9)
    assert out2["predicted_ms"] < 0.5 * out1["predicted_ms"]
    assert {p["unit"] for p in out2["partitions"]} == {"b1"}
    # the plan file records the board target each unit was planned from
    spec = yaml.safe_load(plan2.read_text())
    assert json.dumps(spec).count(fps["b1"]) >= 1
    # nothing was timed here: the store holds only the board's fingerprints
    local = units_from_mapping({"units": UNITS})
    with ProfileStore(db) as store:
        held = {row["fingerprint"] for row in store.summary()}
    assert held == set(fps.values())
    assert not held & {u.fingerprint() for u in local}
    # export needs no board either
    r = _cli("export", model, "--plan", plan2, "--units", units, "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_import_without_units_prints_the_units_file(board, tmp_path):
    d, model, _, data = board
    db = tmp_path / "p.db"
    r = _cli("profile", model, "--import", _results(d, data, "r.json"), "--db", db, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["measured"] == 0
    written = tmp_path / "from-import.yaml"
    written.write_text(yaml.safe_dump(out["units_file"]))
    assert out["units_file"]["units"]["b1"]["remote"] is True
    plan, _, _ = _plan(model, written, db, tmp_path, "w")
    assert {p["unit"] for p in plan["partitions"]} <= {"b0", "b1"}


def test_units_shows_remote_units_and_their_source(board, tmp_path):
    d, model, units, data = board
    db = tmp_path / "p.db"
    r = _cli("units", "--units", units, "--db", db, "--json")
    assert r.exit_code == 0, r.output
    rows = {x["name"]: x for x in json.loads(r.output)["units"]}
    assert rows["b0"]["remote"] and not rows["b0"]["available"]
    assert "no kit results imported" in rows["b0"]["reason"]
    _cli("profile", model, "--units", units, "--db", db, "--import", _results(d, data, "r.json"))
    r = _cli("units", "--units", units, "--db", db, "--json")
    rows = {x["name"]: x for x in json.loads(r.output)["units"]}
    assert BOARD in rows["b1"]["reason"] and "r.json" in rows["b1"]["reason"]


def test_remote_unit_without_rows_for_the_model_is_one_line(board, tmp_path):
    d, model, units, data = board
    db = tmp_path / "p.db"
    r = _cli("plan", model, "--units", units, "--db", db)
    _one_line_error(r, "remote unit 'b0'", "--kit", "--import")
    _cli("profile", model, "--units", units, "--db", db, "--import", _results(d, data, "r.json"))
    other = tmp_path / "other.onnx"
    zoo.save("branchy", other, image_size=48)
    r = _cli("plan", other, "--units", units, "--db", db)
    _one_line_error(r, "remote unit 'b0'", "other.onnx", "run_profile.py")


def test_remote_unit_is_not_available_here(tmp_path):
    us = load_units(_units_file(tmp_path / "u.yaml"))
    ok, why = us["b0"].availability()
    assert not ok and "remote target" in why
    r = _cli("units", "--units", _units_file(tmp_path / "bad.yaml", remote=3))
    _one_line_error(r, "unit 'b0'", "'remote' must be true, false or {fingerprint: FP}")


def test_pinned_fingerprint_is_the_units_fingerprint():
    us = units_from_mapping(
        {
            "units": {
                "b": {"backend": "onnxruntime", "remote": {"fingerprint": "onnxruntime-1-x-abc"}}
            }
        }
    )
    assert us["b"].fingerprint() == "onnxruntime-1-x-abc"
    assert us["b"].spec()["remote"] == {"fingerprint": "onnxruntime-1-x-abc"}


def test_cores_the_machine_lacks_are_warned_about(tmp_path, caplog):
    import os

    p = tmp_path / "u.yaml"
    p.write_text(
        "units:\n  far: {backend: onnxruntime, cores: [0, 4095]}\n"
        "  board: {backend: onnxruntime, cores: [4095], remote: true}\n"
    )
    with caplog.at_level(logging.WARNING, logger="partuner.units.config"):
        us = load_units(p)
    assert us["far"].cores == (0, 4095)  # a warning, not an error
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    usable = sorted(os.sched_getaffinity(0))
    assert "'far'" in warned[0] and "[4095]" in warned[0] and str(usable) in warned[0]


def test_two_boards_are_ambiguous_until_one_is_pinned(board, tmp_path):
    d, model, units, data = board
    db = tmp_path / "p.db"
    other = json.loads(json.dumps(data))
    other["host"] = "second board"
    for e in other["units"]:
        e["fingerprint"] = target_fingerprint(e["fields"], e["backend_version"], "second board")
    for name, res in (("a.json", data), ("b.json", other)):
        r = _cli("profile", model, "--units", units, "--db", db, "--import", _results(d, res, name))
        assert r.exit_code == 0, r.output
    line = _one_line_error(_cli("plan", model, "--units", units, "--db", db), "2 targets")
    pin = other["units"][0]["fingerprint"]
    assert "second board" in line and BOARD in line
    spec = yaml.safe_load(units.read_text())
    spec["units"]["b0"]["remote"] = {"fingerprint": pin}
    spec["units"]["b1"]["remote"] = {"fingerprint": other["units"][1]["fingerprint"]}
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump(spec))
    out, _, plan = _plan(model, pinned, db, tmp_path, "p")
    # the plan carries the pinned fingerprint of each unit it uses (which board unit it uses
    # depends on the kit's timings, measured on this machine)
    pins = {"b0": pin, "b1": other["units"][1]["fingerprint"]}
    used = yaml.safe_load(plan.read_text())["partuner"]["units"]
    assert used and all(used[u]["remote"] == {"fingerprint": pins[u]} for u in used)


def test_kit_results_cannot_define_a_unit_that_runs_a_program(board, tmp_path, monkeypatch):
    """A results file comes from a board: imported without --units, its units are checked like a
    plan file's (no `external` unit, no compile command), and nothing is stored."""
    d, model, _, data = board
    evil = json.loads(json.dumps(data))
    for e in evil["units"]:
        e["spec"] = {
            "backend": "external",
            "compile": "touch owned.txt {artifact}",
            "runner": "os:system",
        }
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(evil))
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "p.db"
    r = _cli("profile", model, "--import", path, "--db", db)
    _one_line_error(r, "external", "--units FILE")
    assert not (tmp_path / "owned.txt").exists()
    with ProfileStore(db) as store:
        assert store.summary() == []


@pytest.mark.parametrize(
    "spoil",
    [
        lambda data: data["units"][0].pop("fields"),
        lambda data: data["units"][0].update(measurements=[1, 2]),
        lambda data: next(iter(data["units"][1]["measurements"].values())).__setitem__(0, -5.0),
        lambda data: data.update(handoff={"x": [1, 2, 3, 4]}),
    ],
    ids=["no-fields", "rows-not-a-mapping", "negative-time", "bad-handoff-size"],
)
def test_malformed_kit_results_are_one_line_and_store_nothing(board, tmp_path, spoil):
    d, model, units, data = board
    bad = json.loads(json.dumps(data))
    spoil(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    db = tmp_path / "p.db"
    r = _cli("profile", model, "--units", units, "--import", path, "--db", db)
    _one_line_error(r, "bad.json")
    with ProfileStore(db) as store:
        assert store.summary() == []


def test_tune_refuses_a_remote_unit_before_it_profiles_or_writes(tmp_path):
    """tune runs its plans here: a board unit is refused in one line before any profiling,
    planning or export (a plan and partitions used to be written, then the run failed)."""
    model = tmp_path / "m.onnx"
    zoo.save("branchy", model, image_size=32)
    out = tmp_path / "out"
    db = tmp_path / "p.db"
    r = _cli("tune", model, "--units", _units_file(tmp_path / "u.yaml"), "-o", out, "--db", db)
    _one_line_error(r, "unit 'b0' is a remote target", "partuner plan", "partuner export")
    assert not out.exists() and not db.exists()
