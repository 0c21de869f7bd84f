"""Held-out trial, hostile inputs (round D): what a command writes never replaces what it reads;
options out of range are one line; stores that are not partuner's are left as they are."""

from __future__ import annotations

import subprocess
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from partuner.cli import main

UNITS = "units:\n  cpu0: {backend: onnxruntime, threads: 1}\n"


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    r = CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def _one_line(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partuner: error: "), res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """A tiny model, a units file and a plan made for them."""
    d = tmp_path_factory.mktemp("outputs")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    (d / "u.yaml").write_text(UNITS)
    got = _cli("plan", d / "m.onnx", "--units", d / "u.yaml", "--db", d / "p.db", "-q",
               "--time-limit", "1", "-o", d / "plan.yaml")  # fmt: skip
    assert got.returncode == 0, got.stderr
    return d


def test_a_negative_seed_is_one_line(files: Path) -> None:
    d = files
    _one_line(_cli("zoo", "squeezenet", "--seed", "-1", "-o", d / "z.onnx"), "'--seed'")
    got = _cli("run", d / "m.onnx", "--plan", d / "plan.yaml", "--units", d / "u.yaml",
               "--repeat", "1", "--seed", "-5")  # fmt: skip
    _one_line(got, "'--seed'", "0<=x")
    assert not (d / "z.onnx").exists()


def test_repeat_has_an_upper_bound(files: Path) -> None:
    d = files
    got = _cli("run", d / "m.onnx", "--plan", d / "plan.yaml", "--repeat", "100000000")
    _one_line(got, "'--repeat'")


@pytest.mark.parametrize(
    "args",
    [
        ("report", "{d}/m.onnx", "--plan", "{d}/plan.yaml", "-o", "{d}/m.onnx"),
        ("report", "{d}/m.onnx", "--plan", "{d}/plan.yaml", "-o", "{d}/plan.yaml"),
        ("run", "{d}/m.onnx", "--plan", "{d}/plan.yaml", "--trace", "{d}/m.onnx"),
        (
            "run",
            "{d}/m.onnx",
            "--plan",
            "{d}/plan.yaml",
            "--trace",
            "{d}/u.yaml",
            "--units",
            "{d}/u.yaml",
        ),  # fmt: skip
        ("plan", "{d}/m.onnx", "--units", "{d}/u.yaml", "--db", "{d}/p.db", "-o", "{d}/m.onnx"),
        ("plan", "{d}/m.onnx", "--db", "{d}/p.db", "--dump-problem", "{d}/p.db"),
        ("export", "{d}/m.onnx", "--plan", "{d}/plan.yaml", "-o", "{d}"),
        (
            "tune",
            "{d}/m.onnx",
            "--units",
            "{d}/u.yaml",
            "--db",
            "{d}/p.db",
            "-o",
            "{d}/t",
            "--input-shape",
            "x=1x4",
        ),  # fmt: skip
    ],
)
def test_an_output_over_an_input_is_refused(files: Path, args: tuple[str, ...]) -> None:
    """Each of these exited 0 and left the model, plan or store replaced by what it wrote."""
    d = files
    if args[0] == "tune":  # the model sits where tune writes a partition
        (d / "t" / "partitions").mkdir(parents=True, exist_ok=True)
        (d / "t" / "partitions" / "p0.onnx").write_bytes((d / "m.onnx").read_bytes())
        args = ("tune", "{d}/t/partitions/p0.onnx", *args[2:])
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    _one_line(_cli(*(a.format(d=d) for a in args)), "is an input of this command")
    assert {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} == before


def test_export_beside_its_inputs_still_writes(files: Path, tmp_path: Path) -> None:
    """An output folder holding the model (not where a partition goes) is fine."""
    (tmp_path / "m.onnx").write_bytes((files / "m.onnx").read_bytes())
    got = _cli("export", tmp_path / "m.onnx", "--plan", files / "plan.yaml", "-o", tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "plan.yaml").is_file()


def test_an_sqlite_file_of_something_else_is_left_as_it_is(files: Path, tmp_path: Path) -> None:
    """partuner added its tables to it and switched it to WAL before finding it was not a
    store."""
    import sqlite3

    db = tmp_path / "s.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE bookmarks (url TEXT)")
        c.execute("INSERT INTO bookmarks VALUES ('http://x')")
    c.close()
    before = db.read_bytes()
    got = _cli("profile", files / "m.onnx", "--units", files / "u.yaml", "--db", db, "-q")
    _one_line(got, "not a partuner profile store", "bookmarks")
    assert db.read_bytes() == before and sorted(tmp_path.iterdir()) == [db]


@pytest.mark.parametrize("schema", ["0", "-7"])
def test_a_store_of_no_version_partuner_writes_is_refused(files: Path, tmp_path, schema) -> None:
    import sqlite3

    db = tmp_path / "p.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        c.execute("INSERT INTO meta VALUES ('schema', ?)", (schema,))
    c.close()
    got = _cli("profile", files / "m.onnx", "--units", files / "u.yaml", "--db", db, "-q")
    _one_line(got, "no version partuner writes")


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE units SET description = x'ffff'",
        "UPDATE measurements SET created = 'yesterday'",
        "UPDATE measurements SET created = 1e300",
        "UPDATE measurements SET fingerprint = x'00ff'",
    ],
)
def test_show_lists_a_store_edited_by_hand(files: Path, tmp_path: Path, edit: str) -> None:
    """`profile --show` was a traceback (rich, json, OverflowError) where plan read it fine."""
    import shutil
    import sqlite3

    db = tmp_path / "p.db"
    shutil.copy(files / "p.db", db)
    with sqlite3.connect(db) as c:
        c.execute(edit)
    c.close()
    for extra in ((), ("--json",)):
        got = _cli("profile", "--show", "--db", db, *extra)
        assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr


def test_a_plan_file_too_large_is_refused_unparsed(files: Path, tmp_path, monkeypatch) -> None:
    """A 200 MB plan file ran for minutes without a word; the cap is checked before parsing."""
    import partuner.yamlfile as yf

    monkeypatch.setattr(yf, "YAML_MAX_BYTES", 1 << 10)
    plan = tmp_path / "plan.yaml"
    plan.write_text((files / "plan.yaml").read_text() + "# " + "y" * 2000 + "\n")
    got = _cli("export", files / "m.onnx", "--plan", plan, "-o", tmp_path / "o")
    _one_line(got, "larger than", "is it a plan file?")
    assert not (tmp_path / "o").exists()


def test_a_key_twice_in_a_plan_file_is_named(files: Path, tmp_path: Path) -> None:
    """YAML keeps the last of two keys: a plan with `partuner:` twice was refused for a missing
    partitions list, naming nothing of what was wrong."""
    text = (files / "plan.yaml").read_text()
    plan = tmp_path / "plan.yaml"
    plan.write_text(text + "partuner: {version: 1}\n")
    got = _cli("export", files / "m.onnx", "--plan", plan, "-o", tmp_path / "o")
    _one_line(got, "key 'partuner' appears twice")


def test_a_batch_too_large_for_its_inputs_is_refused_at_once(files: Path) -> None:
    """`batch --batch 1000000000` timed batch sizes 1, 2, 4, ... and took gigabytes of memory
    without a word."""
    got = _cli("batch", files / "m.onnx", "--units", files / "u.yaml", "--db", files / "p.db",
               "--batch", "1000000000", "--repeat", "1", "-q")  # fmt: skip
    _one_line(got, "a batch of 1000000000 makes input 'x' 4e+09 elements")


@pytest.mark.parametrize(
    ("written", "fix"), [("1e-300", "1.0e-300"), ("2E3", "2.0e+3"), ("1.5e3", "1.5e+3")]
)
def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path: Path, written, fix) -> None:
    """YAML 1.1 reads 1e-300 as text: the error said 'must be a finite number' of what the
    user wrote as one; it now says how to write it, and that way is read as a number."""
    units = tmp_path / "u.yaml"
    units.write_text(f"units:\n  npu: {{backend: modeled, gflops: {written}, gbps: 10}}\n")
    _one_line(_cli("units", "--units", units), f"write {fix}, with a dot and a signed exponent")
    units.write_text(f"units:\n  npu: {{backend: modeled, gflops: {fix}, gbps: 10}}\n")
    assert _cli("units", "--units", units).returncode == 0
