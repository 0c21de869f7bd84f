"""Units files, links and the default unit set."""

from __future__ import annotations

import math
import os
from importlib.util import find_spec
from pathlib import Path

import pytest

from partuner.errors import UnitError, UnitsFileError
from partuner.units import (
    DEFAULT_LINK,
    Link,
    ModeledUnit,
    OnnxruntimeUnit,
    OpenvinoUnit,
    UnitSet,
    default_units,
    load_units,
    units_from_mapping,
)

EXAMPLE = """\
units:
  cpu0: {backend: onnxruntime, threads: 1}
  cpu1: {backend: onnxruntime, threads: 1}
  npu:  {backend: modeled, gflops: 300, gbps: 8, overhead_us: 30,
         ops: [Conv, Relu, MaxPool, Add, Concat, GlobalAveragePool]}
links:
  default: {latency_us: 5, gbps: 20}
  cpu0-npu: {latency_us: 40, gbps: 2}
"""


def write(tmp_path: Path, text: str, name: str = "units.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_example_loads(tmp_path):
    path = write(tmp_path, EXAMPLE)
    us = load_units(path)
    assert us.names == ["cpu0", "cpu1", "npu"]
    assert us.source == str(path)
    assert [u.name for u in us] == ["cpu0", "cpu1", "npu"]
    assert isinstance(us["cpu0"], OnnxruntimeUnit) and isinstance(us["npu"], ModeledUnit)
    npu = us["npu"]
    assert npu.modeled and npu.options["gflops"] == 300 and npu.overhead_us == 30
    assert npu.ops == frozenset({"Conv", "Relu", "MaxPool", "Add", "Concat", "GlobalAveragePool"})
    assert us.default_link == Link(5, 20)
    assert us.link("cpu0", "npu") == us.link("npu", "cpu0") == Link(40, 2)
    assert us.link("cpu1", "npu") == Link(5, 20)
    assert us.declared_links == {frozenset({"cpu0", "npu"})}
    # 4000 bytes over 2 GB/s = 2 µs, plus 40 µs latency
    assert us.transfer_us("cpu0", "npu", 4000) == pytest.approx(42.0)
    assert us.transfer_us("npu", "cpu0", 4000) == pytest.approx(42.0)
    assert us.transfer_us("cpu0", "cpu1", 20_000) == pytest.approx(6.0)
    assert us.transfer_us("npu", "npu", 10**9) == 0
    d = us.describe()
    assert d["links"]["cpu0-npu"] == {"latency_us": 40.0, "gbps": 2.0}
    assert [u["name"] for u in d["units"]] == ["cpu0", "cpu1", "npu"]


def test_cores_option_and_partial_link(tmp_path):
    us = load_units(
        write(
            tmp_path,
            "units:\n  a: {backend: onnxruntime, cores: [0]}\n  b-1: {backend: onnxruntime}\n"
            "links:\n  default: {latency_us: 7, gbps: .inf}\n  a-b-1: {gbps: 1}\n",
        )
    )
    assert us["a"].cores == (0,) and us["b-1"].cores is None
    assert us.default_link.gbps == math.inf
    assert us.transfer_us("a", "b-1", 10**9) == pytest.approx(7.0 + 1e6)  # latency inherited


def test_getitem_and_link_name_known_units(tmp_path):
    us = load_units(write(tmp_path, EXAMPLE))
    with pytest.raises(UnitError, match=r"unknown unit 'gpu'; known units: \['cpu0', 'cpu1'"):
        us["gpu"]
    with pytest.raises(UnitError, match="unknown unit 'gpu'"):
        us.link("cpu0", "gpu")
    with pytest.raises(UnitError, match="unknown unit 'gpu'"):
        us.transfer_us("gpu", "gpu", 1)
    assert "cpu0" in us and "gpu" not in us and len(us) == 3


def test_link_transfer():
    assert Link(10, 2).transfer_us(4000) == pytest.approx(12.0)
    assert Link(10, math.inf).transfer_us(10**12) == 10.0
    assert Link(0, 1).transfer_us(0) == 0.0
    with pytest.raises(UnitError):
        Link(-1, 1)
    with pytest.raises(UnitError):
        Link(1, 0)


def test_default_units():
    us = default_units()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    n = len(cores) if cores is not None else (os.cpu_count() or 1)
    ov = OpenvinoUnit("x").availability()[0] if find_spec("openvino") else False
    assert len(us) == (n + 1 if n > 1 else 1) + ov and us.source == "default"
    singles = [u for u in us if u.name not in ("cpuall", "ovall")]
    assert len(singles) == n
    for unit in singles:
        assert isinstance(unit, OnnxruntimeUnit)
        assert unit.options["threads"] == 1
        assert unit.cores is not None and len(unit.cores) == 1
        assert unit.name == f"cpu{unit.cores[0]}"
    assert len({u.fingerprint() for u in singles}) == 1
    if n > 1:
        allc = us["cpuall"]
        assert allc.options["threads"] == n and sorted(allc.cores) == sorted(cores or range(n))
    if ov:  # OpenVINO at an explicit f32 on every core
        o = us["ovall"]
        assert o.precision == "f32" and o.options["threads"] == n and len(o.cores) == n
    assert us.default_link == DEFAULT_LINK and us.declared_links == set()
    assert load_units(None).names == us.names


def test_unitset_rejects_duplicate_names_and_bad_links():
    a, b = OnnxruntimeUnit("a"), OnnxruntimeUnit("b")
    with pytest.raises(UnitError, match="two units are called 'a'"):
        UnitSet([a, OnnxruntimeUnit("a")])
    with pytest.raises(UnitError, match="must join two different known units"):
        UnitSet([a, b], {frozenset({"a", "c"}): Link(1, 1)})
    us = UnitSet([a, b], {frozenset({"a", "b"}): Link(1, 1)})
    assert us.declared_links == {frozenset({"a", "b"})} and us.source == "<memory>"


UNITS_OK = "units:\n  cpu0: {backend: onnxruntime}\n  npu: {backend: modeled, gflops: 1, gbps: 1}\n"


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("units:\n  cpu0: {backend: onnxruntime\n", r"YAML syntax error at line \d+"),
        (
            "units:\n  a: {backend: onnxruntime}\n  a: {backend: modeled}\n",
            r"YAML syntax error at line 3: key 'a' appears twice",
        ),
        ("- cpu0\n", "expected a mapping with a 'units' key"),
        ("links: {}\n", "no 'units' defined; add e.g."),
        ("units: {}\n", "no 'units' defined"),
        ("units: [cpu0]\n", "'units' must map unit names"),
        (
            "units:\n  cpu0: {backend: onnxruntime}\nunit: {}\n",
            r"unknown top-level key 'unit'; allowed: \['units', 'links', 'ray'\]",
        ),
        ("units:\n  cpu0: onnxruntime\n", "unit 'cpu0' must be a mapping like"),
        ("units:\n  cpu0:\n", "unit 'cpu0' must be a mapping like"),
        ("units:\n  cpu 0: {backend: onnxruntime}\n", "bad unit name 'cpu 0'"),
        ("units:\n  .a: {backend: onnxruntime}\n", "bad unit name '.a': .* not starting with '.'"),
        (  # a plan file refuses it (names become file names): refused here already
            "units:\n  " + "n" * 101 + ": {backend: onnxruntime}\n",
            r"bad unit name 'nnn.*\.\.\.: .* at most 100",
        ),
        ("units:\n  cpu0: {threads: 1}\n", r"unit 'cpu0' has no 'backend'; known backends: \["),
        (
            "units:\n  cpu0: {backend: tensorflow}\n",
            r"unit 'cpu0': unknown backend 'tensorflow'; known: \[.*'modeled'.*'onnxruntime'",
        ),
        (
            "units:\n  cpu0: {backend: onnxruntime, thread: 1}\n",
            r"unit 'cpu0': unknown option 'thread' for backend 'onnxruntime'; valid options: \[",
        ),
        (
            "units:\n  cpu0: {backend: onnxruntime, threads: 0}\n",
            r"unit 'cpu0': option 'threads' must be >= 1, got 0",
        ),
        (
            "units:\n  cpu0: {backend: onnxruntime, threads: two}\n",
            "option 'threads' must be an integer",
        ),
        (
            "units:\n  npu: {backend: modeled, gflops: 0, gbps: 8}\n",
            "unit 'npu': option 'gflops' must be > 0",
        ),
        ("units:\n  npu: {backend: modeled, gflops: -3, gbps: 8}\n", "'gflops' must be > 0"),
        ("units:\n  npu: {backend: modeled, gbps: 8}\n", "'gflops' is required"),
        (
            "units:\n  npu: {backend: modeled, gflops: 1, gbps: 1, precision: fp64}\n",
            r"'precision' must be one of \['f32', 'bf16', 'f16', 'int8'\]",
        ),
        (
            "units:\n  ov: {backend: openvino, precision: int4}\n",
            r"unit 'ov': option 'precision' must be one of \['f32', 'bf16', 'f16', 'auto'\]",
        ),
        ("units:\n  cpu0: {backend: onnxruntime, cores: zero}\n", "option 'cores' must be"),
        (
            UNITS_OK + "links:\n  cpu0-gpu: {latency_us: 1}\n",
            r"link 'cpu0-gpu' names unknown unit 'gpu'; known units: \['cpu0', 'npu'\]",
        ),
        (
            UNITS_OK + "links:\n  cpu0npu: {latency_us: 1}\n",
            "malformed link key 'cpu0npu': write two unit names joined by '-'",
        ),
        (UNITS_OK + "links:\n  cpu0-cpu0: {latency_us: 1}\n", "joins unit 'cpu0' to itself"),
        (
            UNITS_OK + "links:\n  cpu0-npu: {latency_us: -1}\n",
            "link 'cpu0-npu': latency_us must be >= 0",
        ),
        (UNITS_OK + "links:\n  default: {latency_us: -5}\n", "link 'default': latency_us must"),
        (UNITS_OK + "links:\n  cpu0-npu: {gbps: 0}\n", "link 'cpu0-npu': gbps must be > 0"),
        (UNITS_OK + "links:\n  cpu0-npu: {gbps: fast}\n", "gbps must be a number"),
        (
            UNITS_OK + "links:\n  cpu0-npu: {latency: 1}\n",
            r"link 'cpu0-npu': unknown field 'latency'; allowed: \['latency_us', 'gbps'\]",
        ),
        (UNITS_OK + "links:\n  cpu0-npu: 5\n", "link 'cpu0-npu' must be a mapping"),
        (
            UNITS_OK + "links:\n  cpu0-npu: {gbps: 1}\n  npu-cpu0: {gbps: 2}\n",
            "links 'cpu0-npu' and 'npu-cpu0' name the same pair; keep one",
        ),
        (UNITS_OK + "links: [cpu0-npu]\n", "'links' must map"),
        (
            "units:\n  a: {backend: onnxruntime}\n  a-b: {backend: onnxruntime}\n"
            "  b-c: {backend: onnxruntime}\n  c: {backend: onnxruntime}\n"
            "links:\n  a-b-c: {gbps: 1}\n",
            "link key 'a-b-c' is ambiguous",
        ),
    ],
)
def test_units_file_errors(tmp_path, text, pattern):
    path = write(tmp_path, text)
    with pytest.raises(UnitsFileError, match=pattern) as info:
        load_units(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(UnitsFileError, match="units file not found: .*nope.yaml; pass a YAML"):
        load_units(tmp_path / "nope.yaml")
    with pytest.raises(UnitsFileError, match="is a folder"):
        load_units(tmp_path)


def test_spec_round_trips_through_units_from_mapping(tmp_path):
    us = load_units(write(tmp_path, EXAMPLE))
    again = units_from_mapping({"units": {u.name: u.spec() for u in us}}, source="plan.yaml")
    assert again.names == us.names and again.source == "plan.yaml"
    for a, b in zip(us, again, strict=True):
        assert a.spec() == b.spec() and a.fingerprint() == b.fingerprint()
        assert a.ops == b.ops and a.cores == b.cores
    # describe() dicts are accepted too (a plan file may store them)
    from_describe = units_from_mapping({"units": {u.name: u.describe() for u in us}})
    assert [u.spec() for u in from_describe] == [u.spec() for u in us]
    assert us["npu"].spec() == {
        "backend": "modeled",
        "gflops": 300.0,
        "gbps": 8.0,
        "overhead_us": 30.0,
        "precision": "f32",
        "ops": ["Add", "Concat", "Conv", "GlobalAveragePool", "MaxPool", "Relu"],
    }


def test_units_from_mapping_errors_name_the_source():
    with pytest.raises(UnitsFileError, match=r"^plan.yaml: unit 'x': unknown backend 'nope'"):
        units_from_mapping({"units": {"x": {"backend": "nope"}}}, source="plan.yaml")
    with pytest.raises(UnitsFileError, match=r"^<memory>: no 'units' defined"):
        units_from_mapping({})


def test_host_memory():
    assert OnnxruntimeUnit("cpu0").host_memory
    assert not OnnxruntimeUnit("gpu", provider="cuda").host_memory
    assert not ModeledUnit("npu", gflops=1, gbps=1).host_memory
    from partuner.units import OpenvinoUnit

    assert OpenvinoUnit("ov").host_memory and not OpenvinoUnit("g", device="GPU").host_memory


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_thread_count_no_unit_needs_is_refused(tmp_path, backend):
    """10^5 intra-op threads hung `partuner run` for minutes; more than MAX_THREADS is refused."""
    from partuner.units.base import MAX_THREADS

    path = tmp_path / "u.yaml"
    path.write_text(f"units: {{big: {{backend: {backend}, threads: 100000}}}}\n")
    with pytest.raises(UnitsFileError, match=f"'threads' must be <= {MAX_THREADS}"):
        load_units(path)


def test_more_threads_than_declared_cores_is_warned(tmp_path, caplog):
    """Found by a new-user trial: `threads: 2, cores: [1]` was taken without a word; its
    threads take turns on the one core."""
    import logging

    from partuner.units import load_units

    p = tmp_path / "u.yaml"
    p.write_text(
        "units:\n  a: {backend: onnxruntime, threads: 2, cores: [0]}\n"
        "  b: {backend: onnxruntime, threads: 1, cores: [0]}\n"
    )
    with caplog.at_level(logging.WARNING, logger="partuner"):
        load_units(p)
    lines = [r.getMessage() for r in caplog.records if "threads" in r.getMessage()]
    assert len(lines) == 1 and "unit 'a' runs 2 threads on 1 core(s) [0]" in lines[0]
