"""Try partuner's commands on bad inputs and write what each answers to docs/bad-input.md.

Run: python tools/bad_inputs.py [--check]   (about a minute; needs the package installed)

Every case makes its bad input in a fresh temporary folder, runs the real ``partuner`` command
in a subprocess, and records the exit code and the first line of stderr. A case fails when the
command prints a traceback, exits with another code than expected, or leaves a file it must not
(each case says which). The table between the markers of docs/bad-input.md is rewritten from the
run; ``--check`` only runs the cases and exits 1 if any fails.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad-input.md"
BEGIN, END = "<!-- bad-input:begin (written by tools/bad_inputs.py) -->", "<!-- bad-input:end -->"
SMALL = ("--input-shape", "input=1x3x64x64")


@dataclass
class Case:
    input: str  # what is wrong, in words
    setup: Callable[[Path], list[str]]  # makes the files, returns the partuner arguments
    code: int = 2
    absent: tuple[str, ...] = ()  # paths (relative to the folder) that must not exist after
    unchanged: tuple[str, ...] = ()  # paths whose bytes must not change
    env: dict[str, str] = field(default_factory=dict)
    as_other_user: bool = False  # run as nobody when root (root writes read-only files anyway)
    interrupt_after: float | None = None  # send SIGINT (Ctrl-C) after this many seconds


def _tiny(d: Path, name: str = "m.onnx", batch: int | str = 1) -> Path:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["input"], ["y"], name="r")], "t", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, d / name)
    return d / name


def _plan(d: Path, **partuner_section: object) -> Path:
    """A valid plan for _tiny, with partuner's section updated by ``partuner_section``."""
    own = {
        "version": 1,
        "model": "m.onnx",
        "input_shapes": {"input": [1, 4]},
        "scheduler": "single",
        "units": {"cpu0": {"backend": "onnxruntime", "threads": 1}},
        "partitions": [{"name": "p0", "unit": "cpu0", "nodes": ["r"]}],
    }
    own.update(partuner_section)
    doc = {
        "funcName": "m.onnx",
        "numOfPartitions": 1,
        "backendNames": "cpu0",
        "partitionNames": "p0",
        "nodeToPartition": "r-0",
        "logicalIDs": "0",
        "partuner": own,
    }
    (d / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return d / "plan.yaml"


def _stream_plan(stream: object) -> Callable[[Path], list[str]]:
    """``run --stream`` on a plan whose ``partuner.stream`` section is ``stream``."""

    def setup(d: Path) -> list[str]:
        _tiny(d)
        _plan(d, stream=stream)
        return ["run", "m.onnx", "--plan", "plan.yaml", "--stream", "5"]

    return setup


def _stream_plan_units(
    extra: dict[str, object], stream: object, cores: list[int] | None = None
) -> Callable[[Path], list[str]]:
    """``run --stream`` on a plan whose units file adds ``extra`` units and whose
    ``partuner.stream`` section is ``stream`` (``cores``: cpu0's declared cores)."""

    def setup(d: Path) -> list[str]:
        _tiny(d)
        cpu0: dict[str, object] = {"backend": "onnxruntime", "threads": 1}
        if cores is not None:
            cpu0["cores"] = cores
        units = {"cpu0": cpu0, **extra}
        (d / "units.yaml").write_text(yaml.safe_dump({"units": units}))
        _plan(d, stream=stream, units=units)
        return ["run", "m.onnx", "--plan", "plan.yaml", "--units", "units.yaml", "--stream", "5"]

    return setup


def _stream_plan_bound(ms: str) -> Callable[[Path], list[str]]:
    """``plan --objective throughput --max-latency-ms MS -o plan.yaml`` on the tiny model."""

    def setup(d: Path) -> list[str]:
        _tiny(d)
        args = ["plan", "m.onnx", "--objective", "throughput", "--max-latency-ms", ms]
        return [*args, "--time-limit", "1", "-o", "plan.yaml"]

    return setup


def _write(d: Path, name: str, text: str) -> Path:
    (d / name).write_text(text, errors="surrogateescape")  # a lone \udcXX: that byte
    return d / name


def _gzip_bomb(d: Path) -> list[str]:
    # 3 GiB of zeros compress to about 3 MB: more than protobuf's 2 GiB limit once inflated.
    with gzip.open(d / "bomb.onnx.gz", "wb", compresslevel=9) as f:
        chunk = bytes(64 << 20)
        for _ in range(48):
            f.write(chunk)
    return ["inspect", str(d / "bomb.onnx.gz")]


def _external_outside(d: Path) -> list[str]:
    (d / "sub").mkdir()
    _tiny(d / "sub")
    m = onnx.load(d / "sub" / "m.onnx")
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 4], np.zeros(4, np.float32).tobytes(), True)
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="../secret.bin")
    m.graph.initializer.append(w)
    m.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"], name="a"))
    m.graph.output[0].name = "z"
    (d / "secret.bin").write_bytes(bytes(16))
    onnx.save(m, d / "sub" / "m.onnx")
    return ["inspect", str(d / "sub" / "m.onnx")]


def _external_unit_plan(d: Path) -> list[str]:
    _tiny(d)
    units = {
        "npu": {
            "backend": "external",
            "compile": "touch owned.txt {artifact}",
            "runner": "os:system",
        }
    }
    parts = [{"name": "p0", "unit": "npu", "nodes": ["r"]}]
    _plan(d, units=units, partitions=parts)
    doc = yaml.safe_load((d / "plan.yaml").read_text())
    doc["backendNames"] = "npu"
    (d / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return ["run", str(d / "m.onnx"), "--plan", str(d / "plan.yaml")]


def _partition_named(name: str) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        _tiny(d)
        _plan(d, partitions=[{"name": name, "unit": "cpu0", "nodes": ["r"]}])
        doc = yaml.safe_load((d / "plan.yaml").read_text())
        doc["partitionNames"] = name
        (d / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]

    return setup


def _duplicate_partitions(d: Path) -> list[str]:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Relu", ["input"], ["y"], name="r"),
        helper.make_node("Neg", ["y"], ["y2"], name="n"),
    ]
    g = helper.make_graph(nodes, "t", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    parts = [
        {"name": "p0", "unit": "cpu0", "nodes": ["r"]},
        {"name": "p0", "unit": "cpu0", "nodes": ["n"]},
    ]
    _plan(d, partitions=parts)
    doc = yaml.safe_load((d / "plan.yaml").read_text())
    doc.update(
        numOfPartitions=2,
        backendNames="cpu0:cpu0",
        partitionNames="p0:p0",
        nodeToPartition="r-0:n-1",
        logicalIDs="0:0",
    )
    (d / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]


def _plan_text(text: str) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        _tiny(d)
        _write(d, "plan.yaml", text)
        return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]

    return setup


def _truncated_plan(d: Path) -> list[str]:
    _tiny(d)
    text = _plan(d).read_text()
    _write(d, "plan.yaml", text[: len(text) - 12])
    return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]


def _wrong_type_plan(d: Path) -> list[str]:
    _tiny(d)
    _plan(d, partitions=[{"name": "p0", "unit": "cpu0", "nodes": 7}])
    return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]


def _corrupt_store(d: Path) -> list[str]:
    _tiny(d)
    units = _units(d, {"cpu0": {"backend": "onnxruntime", "threads": 1}})
    args = ["profile", str(d / "m.onnx"), "--db", str(d / "p.db"), "-q", "--units", str(units)]
    subprocess.run([*_partuner(), *args], check=True, capture_output=True)
    with sqlite3.connect(d / "p.db") as db:  # fold the WAL into the file, then spoil its pages
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray((d / "p.db").read_bytes())
    page = int.from_bytes(raw[16:18], "big") or 65536
    raw[page:] = bytes((i * 7 + 3) % 256 for i in range(len(raw) - page))
    (d / "p.db").write_bytes(bytes(raw))
    return args


def _schema_store(d: Path) -> list[str]:
    """A store whose schema entry is no number (an SQLite file someone else wrote)."""
    _tiny(d)
    with sqlite3.connect(d / "p.db") as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('schema', 'x; drop')")
    return ["profile", str(d / "m.onnx"), "--db", str(d / "p.db"), "-q"]


def _binary_problem(d: Path) -> list[str]:
    (d / "p.json").write_bytes(bytes(range(256)) * 4)
    return ["plan", "--load-problem", str(d / "p.json")]


def _readonly_store(d: Path) -> list[str]:
    _tiny(d)
    (d / "ro").mkdir()
    store = ["--db", str(d / "ro" / "p.db"), "-q"]
    one = _units(d, {"cpu0": {"backend": "onnxruntime", "threads": 1}})
    subprocess.run(
        [*_partuner(), "profile", str(d / "m.onnx"), *store, "--units", str(one)],
        check=True,
        capture_output=True,
    )
    (d / "ro" / "p.db").chmod(0o444)
    (d / "ro").chmod(0o555)
    for p in (d.parent, d, d / "m.onnx"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    two = _units(d, {"cpu0": {"backend": "onnxruntime", "threads": 2}}, "u2.yaml")
    return ["profile", str(d / "m.onnx"), *store, "--units", str(two)]


def _units(d: Path, units: dict[str, object], name: str = "units.yaml") -> Path:
    return _write(d, name, yaml.safe_dump({"units": units}))


def _misspelt_plan(d: Path) -> list[str]:
    _tiny(d)
    _plan(d, partitons=[])
    return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]


def _args(*a: str) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        _tiny(d)
        return [x.replace("{d}", str(d)) for x in a]

    return setup


def _dynamic(*a: str) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        _tiny(d, batch="N")
        return [x.replace("{d}", str(d)) for x in a]

    return setup


def _with(text_file: str, text: str, *a: str) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        _tiny(d)
        _write(d, text_file, text)
        return [x.replace("{d}", str(d)) for x in a]

    return setup


def _input_array(arr: np.ndarray) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        _tiny(d)
        _plan(d)
        np.save(d / "x.npy", arr, allow_pickle=True)
        return [
            "run",
            str(d / "m.onnx"),
            "--plan",
            str(d / "plan.yaml"),
            "--input",
            f"input={d / 'x.npy'}",
        ]

    return setup


def _input_text(d: Path) -> list[str]:
    args = _input_array(np.zeros((1, 4), np.float32))(d)
    _write(d, "x.npy", "1 2 3 4\n")
    return args


#: ten million values in seven lines of YAML aliases (a "billion laughs" file)
BOMB = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{k}: &{k} [{', '.join(['*' + prev] * 10)}]\n"
    for prev, k in zip("abcdef", "bcdefg", strict=True)
)


def _input_bytes(raw: bytes) -> Callable[[Path], list[str]]:
    def setup(d: Path) -> list[str]:
        args = _input_array(np.zeros((1, 4), np.float32))(d)
        (d / "x.npy").write_bytes(raw)
        return args

    return setup


def _forged_npy_header() -> bytes:
    """An .npy header claiming 1e15 float32 items, followed by 16 bytes."""
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000, 100000), }"
    text = head.ljust(117).encode() + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + bytes(16)


def _trigger_store(d: Path) -> list[str]:
    """A store carrying an SQL trigger that empties a table on every insert."""
    _tiny(d)
    units = _units(d, {"cpu0": {"backend": "onnxruntime", "threads": 1}})
    args = ["profile", str(d / "m.onnx"), "--db", str(d / "p.db"), "-q", "--units", str(units)]
    subprocess.run([*_partuner(), *args], check=True, capture_output=True)
    db = sqlite3.connect(d / "p.db")
    with db:
        db.execute("CREATE TRIGGER t1 AFTER INSERT ON measurements BEGIN DELETE FROM units; END")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all in the file, whose bytes are compared
    db.close()
    return args


def _huge_fixed_input(d: Path) -> list[str]:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [100000, 100000, 100000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [100000, 100000, 100000])
    g = helper.make_graph([helper.make_node("Relu", ["input"], ["y"], name="r")], "t", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    return ["inspect", str(d / "m.onnx")]


def _foreign_sqlite(d: Path) -> list[str]:
    _tiny(d)
    db = sqlite3.connect(d / "s.db")
    with db:
        db.execute("CREATE TABLE bookmarks (url TEXT)")
    db.close()
    return ["profile", str(d / "m.onnx"), "--db", str(d / "s.db"), "-q"]


def _huge_computed_value(d: Path) -> list[str]:
    shape = numpy_helper.from_array(np.array([200000, 50000], dtype=np.int64), "shape")
    nodes = [helper.make_node("Expand", ["input", "shape"], ["big"], name="grow"),
             helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0, name="sum")]  # fmt: skip
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 50000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    g = helper.make_graph(nodes, "t", [x], [y], [shape])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d / "m.onnx")
    return ["profile", str(d / "m.onnx"), "--db", str(d / "p.db")]


def _node_on_a_unit_without_its_op(d: Path) -> list[str]:
    _tiny(d)
    _plan(d)
    _write(d, "u.yaml", "units: {cpu0: {backend: onnxruntime, ops: [Conv]}}\n")
    return ["run", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "--units", str(d / "u.yaml")]


def _empty_partition(d: Path) -> list[str]:
    _tiny(d)
    _plan(d, partitions=[{"name": "p0", "unit": "cpu0", "nodes": ["r"]},
                         {"name": "p1", "unit": "cpu0", "nodes": []}])  # fmt: skip
    return ["export", str(d / "m.onnx"), "--plan", str(d / "plan.yaml"), "-o", str(d / "o")]


def _plan_other_input(d: Path) -> list[str]:
    _tiny(d)
    _plan(d, input_shapes={"bogus": [1, 4]})
    return ["check", str(d / "m.onnx"), "--plan", str(d / "plan.yaml")]


def _parallel_unknown(d: Path) -> list[str]:
    _tiny(d)
    path = _plan(d)
    doc = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**doc, "parallelPartitions": "(p0||p9)"}, sort_keys=False))
    return ["check", str(d / "m.onnx"), "--plan", str(path)]


def _chain_plan(d: Path, backends: str, **keys: str) -> list[str]:
    """A NEST-C plan of two partitions for a model of two nodes, r -> n (p1 reads from p0)."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["input"], ["h"], name="r")]
    nodes.append(helper.make_node("Neg", ["h"], ["y"], name="n"))
    g = helper.make_graph(nodes, "t", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    doc = {"funcName": "m.onnx", "numOfPartitions": 2, "backendNames": backends}
    doc.update(partitionNames="p0:p1", nodeToPartition="r-0:n-1", **keys)
    (d / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return ["check", str(d / "m.onnx"), "--plan", str(d / "plan.yaml")]


def _unit_not_here_new_db(d: Path) -> list[str]:
    _tiny(d)
    unit = {"backend": "openvino", "device": "GPU", "threads": 1}
    units = _units(d, {"cpu0": {"backend": "onnxruntime", "threads": 1}, "gpu": unit})
    return ["plan", str(d / "m.onnx"), "--units", str(units), "--db", str(d / "p.db")]


def _output_is_input(d: Path) -> list[str]:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["input"], ["y"], name="r")], "t", [x], [y, x])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    return ["plan", str(d / "m.onnx"), "--time-limit", "1"]


def _input_npz(d: Path) -> list[str]:
    args = _input_array(np.zeros((1, 4), np.float32))(d)
    np.savez(d / "x.npy", input=np.zeros((1, 4), np.float32))  # an archive under .npy's name
    (d / "x.npy.npz").replace(d / "x.npy")
    return args


def _problem_dup_key(d: Path) -> list[str]:
    """A problem JSON giving a key twice (JSON would keep the last without a word)."""
    doc = '{"format": "partuner.problem", "version": 1, "nodes": ["a"], "units": ["u"], '
    (d / "p.json").write_text(doc + '"cost": {"a": {"u": 1.0}}, "cost": {"a": {"x": 2.0}}}')
    return ["plan", "--load-problem", str(d / "p.json"), "-q"]


def _kit_missing_unit(d: Path) -> list[str]:
    """A kit for two board units, run on the board for one of them only (`--units b0`)."""
    _tiny(d)
    unit = {"backend": "onnxruntime", "threads": 1}
    units = _units(d, {"b0": unit, "b1": {**unit, "optimization": "extended"}}, "board.yaml")
    kit = ["profile", str(d / "m.onnx"), "--units", str(units), "--kit", str(d / "kit")]
    subprocess.run([*_partuner(), *kit], check=True, capture_output=True, cwd=d)
    runner = [sys.executable, str(d / "kit" / "run_profile.py"), "--units", "b0", "--quiet"]
    subprocess.run([*runner, "--budget", "0.01"], check=True, capture_output=True, cwd=d)
    results = str(d / "kit" / "results.json")
    return [
        "profile",
        str(d / "m.onnx"),
        "--units",
        str(units),
        "--import",
        results,
        "--db",
        "p.db",
    ]


def _problem_unknown_unit(d: Path) -> list[str]:
    """A problem JSON costing a node on a unit it does not list (a typo: `cpy`)."""
    doc = '{"format": "partuner.problem", "version": 1, "nodes": ["a"], "units": ["cpu"], '
    (d / "p.json").write_text(doc + '"cost": {"a": {"cpu": 1.0, "cpy": 0.5}}}')
    return ["plan", "--load-problem", str(d / "p.json"), "-q"]


def _input_fifo(d: Path) -> list[str]:
    args = _input_array(np.zeros((1, 4), np.float32))(d)
    (d / "x.npy").unlink()
    os.mkfifo(d / "x.npy")  # opening it would wait for a writer for ever
    return args


def _input_negative_dim(d: Path) -> list[str]:
    args = _input_array(np.zeros((1, 4), np.float32))(d)
    raw = (d / "x.npy").read_bytes().replace(b"(1, 4)", b"(1,-4)")
    (d / "x.npy").write_bytes(raw)
    return args


def _input_twice(d: Path) -> list[str]:
    return [*_input_array(np.zeros((1, 4), np.float32))(d), "--input", f"input={d / 'x.npy'}"]


def _store_bad_field(d: Path) -> list[str]:
    """A profile store whose rows were edited by hand to a time of 1e308 µs."""
    _tiny(d)
    units = _units(d, {"cpu0": {"backend": "onnxruntime", "threads": 1}})
    args = ["profile", str(d / "m.onnx"), "--db", str(d / "p.db"), "-q", "--units", str(units)]
    subprocess.run([*_partuner(), *args], check=True, capture_output=True)
    with sqlite3.connect(d / "p.db") as db:
        db.execute("UPDATE measurements SET median_us = 1e308 WHERE status = 'ok'")
    return ["plan", str(d / "m.onnx"), "--db", str(d / "p.db"), "-q", "--units", str(units)]


def _openvino_bad_property(d: Path) -> list[str]:
    _tiny(d)
    ov = {"backend": "openvino", "threads": 1, "properties": {"NUM_STREAMS": -5}}
    units = _units(d, {"ov": ov})
    return ["plan", str(d / "m.onnx"), "--units", str(units), "--db", str(d / "p.db"), "-q"]


def _missing_external(d: Path) -> list[str]:
    args = _external_outside(d)
    m = onnx.load(d / "sub" / "m.onnx", load_external_data=False)
    m.graph.initializer[0].external_data[0].value = "gone.bin"
    onnx.save(m, d / "sub" / "m.onnx")
    return args


def _remote_without_rows(d: Path) -> list[str]:
    _tiny(d)
    units = _units(d, {"board": {"backend": "onnxruntime", "threads": 4, "remote": True}})
    return ["plan", str(d / "m.onnx"), "--units", str(units), "--db", str(d / "p.db"), "-q"]


def _missing_cores(d: Path) -> list[str]:
    units = _units(d, {"cpu9": {"backend": "onnxruntime", "threads": 1, "cores": [64]}})
    return ["units", "--units", str(units)]


def _ray_unreachable(d: Path) -> list[str]:
    _tiny(d)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    unit = {"backend": "onnxruntime", "ray": {"resources": {"board-a": 1}}}
    doc = {"ray": {"address": f"127.0.0.1:{port}"}, "units": {"npu0": unit}}
    _write(d, "fleet.yaml", yaml.safe_dump(doc))
    return ["profile", str(d / "m.onnx"), "--units", str(d / "fleet.yaml"), "--db", str(d / "p.db")]


def _partitions_link(d: Path) -> list[str]:
    args = _partition_named("p0")(d)
    (d / "o").mkdir()
    (d / "elsewhere").mkdir()
    (d / "o" / "partitions").symlink_to(d / "elsewhere")
    return args


def _reexport(d: Path) -> list[str]:
    args = _partition_named("p0")(d)
    subprocess.run([*_partuner(), *args], check=True, capture_output=True)
    (d / "o" / "partitions" / "mine.onnx").write_text("a file partuner did not write")
    return args


CASES: list[Case] = [
    Case("model file missing", _args("inspect", "{d}/missing.onnx")),
    Case("model file not ONNX", _with("bad.onnx", "not a model", "inspect", "{d}/bad.onnx")),
    Case("gzip bomb (3 GiB of zeros in a 3 MB `.onnx.gz`)", _gzip_bomb),
    Case("external data outside the model's folder", _external_outside),
    Case(
        "`--input-shape` dimension that overflows",
        _dynamic("inspect", "{d}/m.onnx", "--input-shape", "input=99999999999999999999x4"),
    ),
    Case(
        "`--input-shape` dimension 0",
        _dynamic("inspect", "{d}/m.onnx", "--input-shape", "input=0x4"),
    ),
    Case(
        "`--input-shape` naming no input", _args("inspect", "{d}/m.onnx", "--input-shape", "x=1x4")
    ),
    Case(
        "plan file defining an `external` unit that runs a command (no `--units`)",
        _external_unit_plan,
        absent=("owned.txt",),
    ),
    Case("partition named `../../x`", _partition_named("../../x"), absent=("x.onnx", "../x.onnx")),
    Case("partition named `/tmp/abs/model`", _partition_named("/tmp/abs/model")),
    Case("two partitions with one name", _duplicate_partitions, absent=("o",)),
    Case("plan file truncated", _truncated_plan, absent=("o",)),
    Case("plan file that is not YAML", _plan_text("{ this: is: not yaml"), absent=("o",)),
    Case("plan file that is a YAML list", _plan_text("- 1\n- 2\n"), absent=("o",)),
    Case("plan field of the wrong type (`nodes: 7`)", _wrong_type_plan, absent=("o",)),
    Case("plan key misspelt (`partitons` beside `partitions`)", _misspelt_plan, absent=("o",)),
    Case(
        "plan file with a `!!python/object/apply` tag",
        _plan_text("partuner: !!python/object/apply:os.system ['touch owned']\n"),
        absent=("o", "owned"),
    ),
    Case("`-o` through a file", _args("plan", "{d}/m.onnx", "-o", "{d}/m.onnx/plan.yaml")),
    Case("profile store with a corrupt page", _corrupt_store),
    Case("profile store whose schema is not a number", _schema_store),
    Case("problem file that is not UTF-8 text", _binary_problem),
    Case(
        "stream longer than a run may ask",
        _args("run", "m.onnx", "--plan", "x.yaml", "--stream", "10000000000"),
    ),
    Case("read-only profile store that must be written", _readonly_store, as_other_user=True),
    Case("`-o/partitions` is a link to another folder", _partitions_link),
    Case(
        "re-export over a folder holding a user's own file",
        _reexport,
        code=0,
        unchanged=("o/partitions/mine.onnx",),
    ),
    Case("remote unit with no imported measurements for the model", _remote_without_rows),
    Case("unit declaring cores this machine lacks (a warning)", _missing_cores, code=0),
    Case("Ray cluster address nobody answers", _ray_unreachable),
    Case(
        "Ray placement without resources",
        _with(
            "u.yaml",
            "units: {npu0: {backend: onnxruntime, ray: {resources: {}}}}\n",
            "units",
            "--units",
            "{d}/u.yaml",
        ),
    ),
    Case(
        "Ctrl-C while `tune` profiles, plans and runs",
        _args("tune", "zoo:googlenet", "-o", "{d}/out", "--time-limit", "30", "--repeat", "500"),
        code=130,
        interrupt_after=12.0,
    ),
    Case(
        "stream plan with 0 frames in flight",
        _stream_plan({"in_flight": [0]}),
    ),
    Case(
        "stream plan copying the plan onto a unit no partition runs on",
        _stream_plan({"in_flight": [1, 1], "copies": [{"gpu9": "cpu0"}]}),
    ),
    Case(
        "stream plan whose copy runs a partition on a unit that cannot run it",
        _stream_plan_units(
            {"npu0": {"backend": "onnxruntime", "threads": 1, "ops": ["Conv"]}},
            {"in_flight": [1, 1], "copies": [{"cpu0": "npu0"}]},
        ),
    ),
    Case(
        "stream plan whose copy runs on a core the plan runs on",
        _stream_plan_units(
            {"cpu9": {"backend": "onnxruntime", "threads": 1, "cores": [0]}},
            {"in_flight": [1, 1], "copies": [{"cpu0": "cpu9"}]},
            cores=[0],
        ),
    ),
    Case(
        "stream latency bound no plan can meet",
        _stream_plan_bound("1e-6"),
        absent=("plan.yaml",),
    ),
    Case(
        "stream latency bound that is not a number",
        _stream_plan_bound("nan"),
        absent=("plan.yaml",),
    ),
    Case("units file missing", _args("units", "--units", "{d}/nope.yaml")),
    Case(
        "units file with an unknown backend",
        _with("u.yaml", "units: {x: {backend: nope}}\n", "units", "--units", "{d}/u.yaml"),
    ),
    Case("`--input` array of the wrong shape", _input_array(np.zeros((2, 2), np.float32))),
    Case("`--input` file that holds a pickle", _input_array(np.array([{}], dtype=object))),
    Case("`--input` file that is text, not `.npy`", _input_text),
    Case("`--input` file that is empty", _input_bytes(b"")),
    Case(
        "`--input` header claiming 1e15 items (16 bytes follow)", _input_bytes(_forged_npy_header())
    ),
    Case(
        "units file that is a YAML alias bomb (1e7 values in 7 lines)",
        _with("u.yaml", BOMB, "units", "--units", "{d}/u.yaml"),
    ),
    Case("plan file that is a YAML alias bomb", _plan_text(BOMB), absent=("o",)),
    Case(
        "units file nested 5000 lists deep",
        _with("u.yaml", "units: " + "[" * 5000 + "]" * 5000, "units", "--units", "{d}/u.yaml"),
    ),
    Case(
        "NEST-C profile holding a 5000-digit number",
        _with(
            "n.yaml",
            "a: " + "9" * 5000,
            "profile",
            "m.onnx",
            "--import-nestc",
            "{d}/n.yaml",
            "--unit",
            "cpu0",
            "--db",
            "{d}/p.db",
        ),
    ),
    Case(
        "fusion config (`--profile-configs`) that is not UTF-8",
        _with(
            "c.yaml",
            "fuseOperators: Conv-Relu  # caf\udce9",
            "profile",
            "m.onnx",
            "--profile-configs",
            "{d}/c.yaml",
            "--db",
            "{d}/p.db",
        ),
        absent=("p.db",),
    ),
    Case("profile store holding an SQL trigger", _trigger_store, unchanged=("p.db",)),
    Case("model input fixed to 1e15 elements", _huge_fixed_input),
    Case("model expanding a small input to 1e10 elements", _huge_computed_value, absent=("p.db",)),
    Case("`--db` an SQLite file of something else", _foreign_sqlite, unchanged=("s.db",)),
    Case(
        "`-o` naming the command's own model",
        _args("plan", "{d}/m.onnx", "--time-limit", "1", "-o", "{d}/m.onnx"),
        unchanged=("m.onnx",),
    ),
    Case("negative `--seed`", _args("zoo", "squeezenet", "--seed", "-1", "-o", "{d}/z.onnx")),
    Case(
        "units file whose `ops` list misspells an op type",
        _with(
            "u.yaml",
            "units: {npu: {backend: onnxruntime, ops: [Conv, Rleu]}}\n",
            "units",
            "--units",
            "{d}/u.yaml",
        ),
    ),
    Case(
        "plan putting a node on a unit whose `ops` list leaves it out",
        _node_on_a_unit_without_its_op,
    ),
    Case("option value out of range", _args("plan", "m.onnx", "--time-limit", "-1")),
    Case("plan with a partition of no nodes", _empty_partition),
    Case("model output that is one of its inputs (no node computes it)", _output_is_input),
    Case("`--input` file that is an `.npz` archive", _input_npz),
    Case("problem file giving a key twice", _problem_dup_key),
    Case("`--input` that is a FIFO (opening it would wait for ever)", _input_fifo),
    Case("`--input` whose `.npy` header claims a negative dimension", _input_negative_dim),
    Case(
        "the same `--input` given twice",
        _input_twice,
    ),
    Case("profile store row edited to a time of 1e308 us", _store_bad_field),
    Case(
        "units file with `ops: Conv` (a string, not a list)",
        _with(
            "u.yaml",
            "units: {npu: {backend: onnxruntime, ops: Conv}}\n",
            "units",
            "--units",
            "{d}/u.yaml",
        ),
    ),
    Case("OpenVINO unit with a property value OpenVINO refuses", _openvino_bad_property),
    Case("plan made for an input the model does not have", _plan_other_input),
    Case("NEST-C `parallelPartitions` naming a partition the plan lacks", _parallel_unknown),
    Case(
        "NEST-C `logicalIDs` giving one unit two IDs",
        lambda d: _chain_plan(d, "cpu0:cpu0", logicalIDs="0:1"),
    ),
    Case(
        "NEST-C `parallelPartitions` group of one partition",
        lambda d: _chain_plan(d, "cpu0:cpu1", parallelPartitions="(p0)"),
    ),
    Case(
        "NEST-C `parallelPartitions` group whose partitions read from each other",
        lambda d: _chain_plan(d, "cpu0:cpu1", parallelPartitions="(p0||p1)"),
    ),
    Case("problem file costing a node on a unit it does not list", _problem_unknown_unit),
    Case(
        "unit not available here, with a new `--db` (no empty store left)",
        _unit_not_here_new_db,
        absent=("p.db",),
    ),
    Case(
        "kit results lacking a unit of the units file (the kit run for one of two)",
        _kit_missing_unit,
        absent=("p.db",),
    ),
    Case(
        "units file of 2000 units",
        _with(
            "u.yaml",
            "units:\n"
            + "".join(f"  m{i}: {{backend: modeled, gflops: 1.0}}\n" for i in range(2000)),
            "units",
            "--units",
            "{d}/u.yaml",
        ),
    ),
]


def _partuner() -> list[str]:
    return [sys.executable, "-c", "import sys; from partuner.cli import main; sys.exit(main())"]


def run_case(case: Case) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="partuner-bad-") as tmp:
        d = Path(tmp) / "w"
        d.mkdir()
        args = case.setup(d)
        before = {p: (d / p).read_bytes() for p in case.unchanged if (d / p).exists()}
        env = {**os.environ, "PARTUNER_DB": str(Path(tmp) / "default.db"), **case.env}
        user = []
        if case.as_other_user and os.geteuid() == 0 and shutil.which("setpriv"):
            user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        proc = subprocess.Popen(
            [*user, *_partuner(), *args],
            cwd=d,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if case.interrupt_after is not None:
            time.sleep(case.interrupt_after)
            proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=600)
        r = subprocess.CompletedProcess(proc.args, proc.returncode, out, errs)
        for p in (d / "ro", d / "ro" / "p.db"):
            if p.exists():
                p.chmod(0o755 if p.is_dir() else 0o644)
        err = [ln for ln in r.stderr.splitlines() if ln.strip()]
        problems = []
        if "Traceback" in r.stderr:
            problems.append("traceback")
        if r.returncode != case.code:
            problems.append(f"exit {r.returncode}, expected {case.code}")
        problems += [f"{p} exists" for p in case.absent if (d / p).exists()]
        problems += [f"temporary {p.name} left" for p in d.glob(".*") if p.name != ".."]
        problems += [f"{p} changed" for p, b in before.items() if (d / p).read_bytes() != b]
        answer = next((ln for ln in err if ln.startswith("partuner: error:")), None)
        answer = answer or next((ln for ln in err if ln.startswith("Error:")), None)  # click
        answer = answer or next((ln for ln in err if "WARNING" in ln or "warning" in ln), None)
        answer = answer or (err[0] if err else "(nothing on stderr)")
        shown = " ".join("partuner" if i == 0 else a for i, a in enumerate(["partuner", *args]))
        return {
            "input": case.input,
            "command": shown.replace(str(d) + "/", "").replace(str(d), "."),
            "exit": r.returncode,
            "answer": answer.replace(str(d) + "/", "").replace(str(Path(tmp)), "TMP"),
            "problems": problems,
        }


def table(rows: list[dict[str, object]]) -> str:
    out = ["| bad input | command | exit | answer |", "|---|---|---|---|"]
    for r in rows:
        ans = str(r["answer"]).replace("|", "\\|")
        flag = "" if not r["problems"] else f" **FAILS: {', '.join(r['problems'])}**"
        out.append(f"| {r['input']} | `{r['command']}` | {r['exit']} | {ans}{flag} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="run only; do not write the docs")
    ns = ap.parse_args()
    rows = []
    for case in CASES:
        r = run_case(case)
        rows.append(r)
        mark = "ok  " if not r["problems"] else "FAIL"
        print(f"{mark} {r['input']}: exit {r['exit']}: {r['answer']}", flush=True)
    if not ns.check:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{table(rows)}\n{END}{tail}")
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
