"""The profile store never lies and never breaks.

A timing that failed (a compiler crash, a timeout, any error) is stored as ``failed`` and timed
again on the next run; only a backend's refusal is stored as ``unsupported`` for good. A damaged,
read-only or full store gives one line naming the file, and keeps what it holds.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
import yaml
from onnx import TensorProto, helper

import fake_vendor
from partuner.errors import ProfileError
from partuner.graph import load_model
from partuner.profile import Measurement, ProfileStore, profile_model
from partuner.profile.signature import node_signature
from partuner.units import load_units, make_unit

VENDOR = Path(fake_vendor.__file__).resolve()
PARTUNER = Path(sys.executable).with_name("partuner")
FLAKY_ENV = "PARTUNER_TEST_CC_CRASH"
RT = "refusing_rt:load"
# a compiler that crashes while FLAKY_ENV is set and works (as the fake vendor's) once it is not
FLAKY_CC = f"""
import os, sys
if os.environ.get({FLAKY_ENV!r}):
    print("vendorc: internal compiler error: segmentation fault", file=sys.stderr)
    sys.exit(139)
sys.path.insert(0, {str(VENDOR.parent)!r})
import fake_vendor
sys.exit(fake_vendor.main(sys.argv[1:]))
"""


def _tiny(ops: tuple[str, ...] = ("Relu", "Sigmoid")) -> onnx.ModelProto:
    """A chain of elementwise ops over a 1x16 float tensor."""
    names = ["x", *[f"v{i}" for i in range(len(ops) - 1)], "y"]
    nodes = [
        helper.make_node(op, [names[i]], [names[i + 1]], name=f"n{i}_{op.lower()}")
        for i, op in enumerate(ops)
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    g = helper.make_graph(nodes, "tiny", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _npu_units(tmp_path: Path, compile_cmd: str, **npu: object):
    doc = {"units": {"npu": {"backend": "external", "compile": compile_cmd, **npu}}}
    doc["units"]["npu"].setdefault("runner", "fake_vendor:load")
    path = tmp_path / "units.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_units(path)


def _rows(db: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT signature, status, detail FROM measurements").fetchall()
    return {s: (st, d) for s, st, d in rows}


def _node_rows(graph, db: Path) -> list[tuple[str, str]]:
    rows = _rows(db)
    return [rows[node_signature(graph, n)] for n in graph.compute_nodes]


# -- 1. a failure is retried, a refusal is kept --------------------------------------------------


def test_crashed_compiler_is_retried_on_the_next_run(tmp_path, monkeypatch, caplog):
    cc = tmp_path / "flaky_cc.py"
    cc.write_text(FLAKY_CC)
    units = _npu_units(tmp_path, f"{{python}} '{cc}' {{onnx}} {{artifact}}")
    graph = load_model(_tiny())
    db = tmp_path / "p.db"
    monkeypatch.setenv(FLAKY_ENV, "1")
    with ProfileStore(db) as store, caplog.at_level(logging.WARNING):
        first = profile_model(graph, units, store=store, budget_s=0.01, layers=False)
    assert all(math.isinf(c["npu"]) for c in first.costs.values())
    for status, detail in _node_rows(graph, db):
        assert status == "failed" and "compile command failed (exit 139)" in detail
    assert {(n, u) for n, u, _ in first.failed} == {("n0_relu", "npu"), ("n1_sigmoid", "npu")}
    assert not first.unsupported
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("n0_relu" in w and "npu" in w and "exit 139" in w for w in warned), warned

    monkeypatch.delenv(FLAKY_ENV)  # the compiler is fixed
    with ProfileStore(db) as store:
        second = profile_model(graph, units, store=store, budget_s=0.01, layers=False)
    assert all(math.isfinite(c["npu"]) and c["npu"] >= 0 for c in second.costs.values())
    assert second.measured >= 3 and not second.failed  # the call and both nodes, timed again
    assert [s for s, _ in _node_rows(graph, db)] == ["ok", "ok"]


def test_compile_timeout_is_not_stored_as_unsupported(tmp_path):
    units = _npu_units(
        tmp_path,
        f"{{python}} '{VENDOR}' --sleep 20 {{onnx}} {{artifact}}",
        compile_timeout_s=0.3,
    )
    graph = load_model(_tiny(("Relu",)))
    db = tmp_path / "p.db"
    with ProfileStore(db) as store:
        prof = profile_model(graph, units, store=store, budget_s=0.01, layers=False)
    assert math.isinf(prof.costs["n0_relu"]["npu"]) and not prof.unsupported
    ((status, detail),) = _node_rows(graph, db)
    assert status == "failed" and "timed out after 0.3 s" in detail
    assert {s for s, _ in _rows(db).values()} == {"failed"}


def test_backend_refusal_is_stored_for_good(tmp_path, monkeypatch):
    (tmp_path / "refusing_rt.py").write_text(
        "def load(artifact):\n    raise NotImplementedError('this NPU has no Sigmoid kernel')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "refusing.yaml"
    path.write_text(yaml.safe_dump({"units": {"npu": {"backend": "external", "runner": RT}}}))
    units = load_units(path)
    graph = load_model(_tiny(("Sigmoid",)))
    db = tmp_path / "p.db"
    with ProfileStore(db) as store:
        first = profile_model(graph, units, store=store, budget_s=0.01, layers=False)
    ((status, detail),) = _node_rows(graph, db)
    assert status == "unsupported" and detail.startswith("refused:") and "Sigmoid" in detail
    assert [(n, u) for n, u, _ in first.unsupported] == [("n0_sigmoid", "npu")]
    with ProfileStore(db) as store:
        second = profile_model(graph, units, store=store, budget_s=0.01, layers=False)
    assert second.measured == 0 and math.isinf(second.costs["n0_sigmoid"]["npu"])


def test_legacy_unsupported_row_of_a_local_unit_is_timed_again(tmp_path):
    graph = load_model(_tiny(("Relu",)))
    cpu = make_unit("cpu", "onnxruntime", threads=1)
    sig = node_signature(graph, graph.compute_nodes[0])
    db = tmp_path / "p.db"
    with ProfileStore(db) as store:  # what partuner wrote before failures were told apart
        legacy = "UnitError: unit 'cpu': compile command timed out after 600 s"
        store.put(
            cpu.fingerprint(),
            sig,
            Measurement(math.inf, math.inf, math.inf, 0, "unsupported", legacy),
        )
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}}))
    with ProfileStore(db) as store:
        prof = profile_model(graph, load_units(path), store=store, budget_s=0.01, layers=False)
        assert store.get(cpu.fingerprint(), sig).status == "ok"
    assert math.isfinite(prof.costs["n0_relu"]["cpu"])


# -- 2. a damaged, read-only or full store: one line, nothing lost -------------------------------


def _filled(path: Path, n: int = 300) -> None:
    with ProfileStore(path) as s:
        for i in range(n):
            s.put("fp", f"sig{i:04d}", Measurement(float(i), 0.0, 0.0, 1, "ok", "x" * 40))


def _corrupt_measurements(path: Path) -> None:
    """Overwrite the root pages of the measurements table and its index (page 1 stays)."""
    with sqlite3.connect(path) as c:
        page = c.execute("PRAGMA page_size").fetchone()[0]
        roots = [
            r[0]
            for r in c.execute(
                "SELECT rootpage FROM sqlite_master WHERE tbl_name='measurements' AND rootpage>1"
            )
        ]
    data = bytearray(path.read_bytes())
    for root in roots:
        data[(root - 1) * page : root * page] = b"\xa5" * page
    path.write_bytes(bytes(data))


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("partuner: error: "), proc.stderr
    return lines[0]


def test_damaged_page_at_query_time_names_the_file(tmp_path):
    db = tmp_path / "p.db"
    _filled(db)
    _corrupt_measurements(db)
    before = db.read_bytes()
    with ProfileStore(db) as store:  # the first page is fine: opening works
        with pytest.raises(ProfileError) as exc:
            store.get("fp", "sig0001")
        with pytest.raises(ProfileError):
            store.summary()
        with pytest.raises(ProfileError):
            store.put("fp", "new", Measurement(1.0, 1.0, 1.0, 1))
    msg = str(exc.value)
    assert str(db) in msg and "damaged" in msg and "restore" in msg and "\n" not in msg
    assert db.read_bytes() == before  # nothing deleted or rewritten


def test_a_store_with_an_sql_trigger_is_refused_before_any_write(tmp_path):
    """A store from elsewhere holding a trigger (one that empties a table on every insert) is
    refused on opening: none of its rows lost, nothing written."""
    for journal in ("wal", "delete"):  # partuner's own stores, and one in SQLite's default
        db = tmp_path / f"{journal}.db"
        _filled(db)
        con = sqlite3.connect(db)
        con.execute(f"PRAGMA journal_mode={journal}")
        with con:
            con.execute(
                "CREATE TRIGGER t1 AFTER INSERT ON measurements BEGIN DELETE FROM units; END"
            )
        con.close()
        before = db.read_bytes()
        with pytest.raises(ProfileError, match="SQL trigger 't1'.*use another --db"):
            ProfileStore(db)
        assert db.read_bytes() == before


def test_damaged_store_via_cli_is_one_line(tmp_path):
    db = tmp_path / "p.db"
    _filled(db)
    _corrupt_measurements(db)
    model = tmp_path / "m.onnx"
    onnx.save(_tiny(("Relu",)), model)
    units = tmp_path / "u.yaml"
    units.write_text(yaml.safe_dump({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}}))
    args = [str(PARTUNER), "profile", str(model), "--units", str(units), "--db", str(db), "-q"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    line = _one_line_error(proc)
    assert str(db) in line and "damaged" in line


def test_full_store_keeps_what_it_committed(tmp_path):
    db = tmp_path / "p.db"
    store = ProfileStore(db)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count={pages + 2}")
    stored = 0
    with pytest.raises(ProfileError) as exc:
        for i in range(10_000):
            store.put("fp", f"sig{i:05d}", Measurement(float(i), 0.0, 0.0, 1, "ok", "x" * 40))
            stored += 1
    store.close()
    msg = str(exc.value)
    assert str(db) in msg and "full" in msg and "--db" in msg and "\n" not in msg
    assert stored > 10
    with ProfileStore(db) as again:
        (row,) = again.summary()
        assert row["rows"] == stored
        assert again.get("fp", f"sig{stored - 1:05d}").median_us == stored - 1


# -- read-only stores: run as another user when root (root writes anything) -----------------------


@pytest.fixture()
def open_dir() -> Iterator[Path]:
    """A folder another user can enter (pytest's tmp_path is private to its user)."""
    d = Path(tempfile.mkdtemp(prefix="partuner-ro-"))
    d.chmod(0o777)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir():
            p.chmod(0o777)
    shutil.rmtree(d, ignore_errors=True)


def _as_user(args: list[str]) -> subprocess.CompletedProcess:
    """Run ``args`` as an unprivileged user (``nobody`` through ``setpriv`` when we are root)."""
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot drop the right to write")
        args = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *args]
    env = {**os.environ, "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


READ_THEN_WRITE = """
import sys
from partuner.errors import ProfileError
from partuner.profile import Measurement, ProfileStore
with ProfileStore(sys.argv[1]) as s:
    assert s.get("fp", "sig0007").median_us == 7.0, s.get("fp", "sig0007")
    assert s.summary()[0]["rows"] == 300
    try:
        s.put("fp", "new", Measurement(1.0, 1.0, 1.0, 1))
    except ProfileError as exc:
        print(exc)
    else:
        print("WROTE")
"""


@pytest.mark.parametrize("where", ["file", "folder"])
def test_read_only_store_reads_and_refuses_writes_in_one_line(open_dir, where):
    folder = open_dir / "store"
    folder.mkdir(mode=0o777)
    db = folder / "p.db"
    _filled(db)
    if where == "file":
        db.chmod(0o444)
    else:
        db.chmod(0o666)
        folder.chmod(0o555)
    proc = _as_user([sys.executable, "-c", READ_THEN_WRITE, str(db)])
    assert proc.returncode == 0, proc.stderr
    msg = proc.stdout.strip()
    assert str(db) in msg and "read-only" in msg and "--db" in msg and "\n" not in msg
    folder.chmod(0o777)
    with ProfileStore(db) as s:
        assert s.summary()[0]["rows"] == 300 and s.get("fp", "new") is None


def test_read_only_store_via_cli(open_dir):
    model = open_dir / "m.onnx"
    onnx.save(_tiny(("Relu",)), model)
    units = open_dir / "u.yaml"
    units.write_text(yaml.safe_dump({"units": {"cpu": {"backend": "onnxruntime", "threads": 1}}}))
    db = open_dir / "p.db"
    base = [str(PARTUNER), "profile", str(model), "--units", str(units), "-q"]
    subprocess.run([*base, "--db", str(db), "--budget", "0.01"], check=True, capture_output=True)
    db.chmod(0o444)
    plan = [str(PARTUNER), "plan", str(model), "--units", str(units), "--db", str(db), "-q"]
    proc = _as_user([*plan, "--json"])  # everything is stored: reading is enough
    assert proc.returncode == 0, proc.stderr
    show = _as_user([str(PARTUNER), "profile", "--show", "--db", str(db), "--json"])
    assert show.returncode == 0 and str(db) in show.stdout, show.stderr
    model2 = open_dir / "m2.onnx"
    onnx.save(_tiny(("Sigmoid",)), model2)  # a new operator must be stored: refused
    proc = _as_user(
        [
            str(PARTUNER),
            "profile",
            str(model2),
            "--units",
            str(units),
            "--db",
            str(db),
            "-q",
            "--budget",
            "0.01",
        ]
    )
    line = _one_line_error(proc)
    assert str(db) in line and "read-only" in line


READ_OLD = """
import sys
from partuner.profile import ProfileStore
with ProfileStore(sys.argv[1]) as s:
    m = s.get("fp", "sig0007")
    print(s.read_only, m.median_us, m.load)
"""


def test_a_read_only_store_from_before_loads_were_kept_reads(open_dir):
    """A store written before the ``conditions`` table existed, opened where it cannot be
    written (so the table cannot be added): rows read, their load unknown."""
    db = open_dir / "p.db"
    _filled(db)
    with sqlite3.connect(db) as c:
        c.execute("DROP TABLE conditions")
    db.chmod(0o444)
    proc = _as_user([sys.executable, "-c", READ_OLD, str(db)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "7.0", "None"]


@pytest.mark.parametrize(
    "update, said",
    [
        ("median_us='abc'", "median_us = 'abc'"),
        ("detail=x'00ff'", r"detail = b'\x00\xff'"),
        ("median_us=-2.5", "median_us = -2.5"),
        ("median_us=NULL", "median_us = None"),
        ("p90_us=-9e999", "p90_us = -inf"),
        ("count='many'", "count = 'many'"),
        ("median_us=1e308", "median_us = 1e+308, not a time from 0 to 1e+12 µs"),
    ],
    ids=[
        "text-time",
        "blob-detail",
        "negative-time",
        "null-time-of-an-ok-row",
        "inf-p90",
        "text-count",
        "huge-time",
    ],  # fmt: skip
)
def test_a_row_edited_by_hand_is_one_line_naming_the_store(tmp_path, update, said):
    """Found by a new-user trial: a text time or a blob detail ended `plan` in a TypeError."""
    import sqlite3

    from partuner.profile.store import Measurement, ProfileStore

    db = tmp_path / "p.db"
    with ProfileStore(db) as store:
        store.put("fp", "sig", Measurement(3.0, 2.0, 4.0, 5))
    with sqlite3.connect(db) as raw:
        raw.execute(f"UPDATE measurements SET {update}")
    with ProfileStore(db) as store, pytest.raises(ProfileError) as exc:
        store.get("fp", "sig")
    assert str(db) in str(exc.value) and "\n" not in str(exc.value)
    assert said in str(exc.value), exc.value  # the bad field and its value are named


@pytest.mark.parametrize("detail", ["not json", '{"partitions": 4}', "[" * 100_000])
def test_a_damaged_chain_row_is_warned_about_not_a_traceback(branchy, tmp_path, caplog, detail):
    """A store passed on may hold a chain timing whose detail is not what partuner wrote: the
    profile warns, naming the row, and fits no cut costs from it (it used to raise)."""
    units = load_units(None)
    one = type(units)([units["cpu0"]])
    db = tmp_path / "p.db"
    with ProfileStore(db) as store:
        profile_model(branchy, one, store=store, budget_s=0.02)
    with sqlite3.connect(db) as raw:
        n = raw.execute(
            "UPDATE measurements SET detail=? WHERE signature LIKE '\\_\\_chain\\_\\_#%#k4#t0' "
            "ESCAPE '\\'",
            (detail,),
        ).rowcount
    assert n >= 1
    with ProfileStore(db) as store, caplog.at_level(logging.WARNING):
        prof = profile_model(branchy, one, store=store, budget_s=0.02)
    assert "damaged: cuts not fitted" in caplog.text and prof.units["cpu0"] is not None


def test_a_damaged_ray_transport_row_is_measured_again(tmp_path, monkeypatch):
    """A Ray unit's stored transport costs whose detail is damaged are measured again (and
    stored), not a KeyError."""
    import json
    import socket
    from types import SimpleNamespace

    from partuner.profile import fleet

    good = Measurement(900.0, 800.0, 1000.0, 12, "ok", json.dumps(
        {"in_us_per_byte": 0.002, "out_us_per_byte": 0.003}))  # fmt: skip
    calls = []
    monkeypatch.setattr(fleet, "_measure_transport", lambda u: calls.append(u) or good)
    unit = SimpleNamespace(
        fingerprint=lambda: "fp-ray",
        placement=SimpleNamespace(describe=lambda: "node-a: 1"),
        describe=lambda: {"name": "a"},
    )
    sig = fleet.TRANSPORT_SIG.format("node-a:1", socket.gethostname())
    with ProfileStore(tmp_path / "p.db") as store:
        store.put("fp-ray", sig, Measurement(5.0, 5.0, 5.0, 1, "ok", '{"in": 1}'))
        assert fleet.transport_costs(unit, store) == (900.0, 0.002, 0.003)
        assert len(calls) == 1 and store.get("fp-ray", sig).median_us == 900.0
        assert fleet.transport_costs(unit, store) == (900.0, 0.002, 0.003) and len(calls) == 1


def test_a_store_made_by_a_failed_command_is_not_left_behind(tmp_path):
    """A refused command (`plan` with a unit that is not there) left an empty --db file; one
    that held rows before, or got some, stays as it is."""
    new = tmp_path / "new.db"
    with pytest.raises(RuntimeError), ProfileStore(new):
        raise RuntimeError("refused")
    assert sorted(tmp_path.iterdir()) == []
    row = Measurement(5.0, 4.0, 6.0, 3)
    with pytest.raises(RuntimeError), ProfileStore(new) as store:
        store.put("fp", "sig", row)
        raise RuntimeError("failed after a row was stored")
    with ProfileStore(new) as store:  # an existing store, failing with nothing new: kept
        assert store.get("fp", "sig") == row
    with pytest.raises(RuntimeError), ProfileStore(new):
        raise RuntimeError("refused")
    with ProfileStore(new) as store:
        assert store.get("fp", "sig") == row
    with ProfileStore(tmp_path / "ok.db"):  # a command that succeeds keeps its store, empty
        pass
    assert (tmp_path / "ok.db").is_file()


def test_listing_remote_units_creates_no_store(tmp_path):
    """`partuner units` with a remote unit and a new --db made an empty store (a new user's
    trial): looking creates nothing."""
    from click.testing import CliRunner

    from partuner.cli import main

    units = tmp_path / "board.yaml"
    units.write_text("units:\n  b0: {backend: onnxruntime, threads: 1, remote: true}\n")
    r = CliRunner().invoke(main, ["units", "--units", str(units), "--db", str(tmp_path / "n.db")])
    assert r.exit_code == 0, r.output
    assert "no kit results imported yet" in r.output
    assert not (tmp_path / "n.db").exists()
