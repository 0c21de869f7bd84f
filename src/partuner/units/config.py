"""Sets of units and the links between them, from a YAML units file or the machine's cores.

The units file
--------------
::

    units:                      # required, ordered: the order is the units' order everywhere
      cpu0: {backend: onnxruntime, threads: 1, cores: [0]}
      cpu1: {backend: onnxruntime, threads: 1, cores: [1]}
      npu:  {backend: modeled, gflops: 300, gbps: 8, overhead_us: 30,
             ops: [Conv, Relu, MaxPool, Add, Concat, GlobalAveragePool]}
    links:                      # optional
      default: {latency_us: 5, gbps: 20}     # every pair not named below
      cpu0-npu: {latency_us: 40, gbps: 2}    # symmetric: also npu-cpu0

* A unit name is letters, digits, ``_``, ``.`` and ``-`` (not starting with ``.`` or ``-``), at
  most 100 characters.
  Every unit takes ``backend`` plus that backend's options (``partuner units`` lists them) and
  the common options ``cores`` (declared core ids), ``ops`` (op types it runs) and
  ``memory_mb`` (megabytes it holds for weights and activations; default unlimited).
* A link key is ``A-B`` with ``A`` and ``B`` unit names. Because names may hold ``-``, the key is
  split at the one ``-`` that leaves a known unit name on both sides; a key that splits two ways
  (units ``a``, ``a-b``, ``b-c``, ``c`` and key ``a-b-c``) is rejected: rename a unit.
* A link has ``latency_us`` (>= 0) and ``gbps`` (> 0, ``.inf`` allowed); a field left out is
  taken from the default link. A transfer of ``n`` bytes costs
  ``latency_us + n / (gbps * 1e3)`` µs; within one unit it costs nothing.
* Without ``links.default`` the default link is :data:`DEFAULT_LINK`.
* A unit declaring ``cores`` this machine cannot use gets a logged warning (not an error);
  ``remote: true`` units (another machine's, measured by a profiling kit) are exempt.

Every problem raises :class:`~partuner.errors.UnitsFileError` with one line naming the file, the
problem and the fix.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partuner.errors import UnitError, UnitsFileError
from partuner.units.base import Unit, backend_names, get_backend
from partuner.yamlfile import UniqueKeyLoader, read_yaml

__all__ = [
    "DEFAULT_LINK",
    "Link",
    "UnitSet",
    "default_units",
    "load_units",
    "units_from_mapping",
]

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
#: the longest unit name (a plan file's rule too: names become file names there)
NAME_MAX = 100
_LINK_FIELDS = ("latency_us", "gbps")
#: units a units file may define (a plan's pairs of units grow as their square)
MAX_UNITS = 256


@dataclass(frozen=True)
class Link:
    """A data path between two units: fixed latency plus bandwidth.

    Examples
    --------
    >>> Link(latency_us=10, gbps=2).transfer_us(4000)
    12.0
    >>> Link(latency_us=3, gbps=math.inf).transfer_us(10**9)
    3.0
    """

    latency_us: float
    gbps: float = math.inf

    def __post_init__(self) -> None:
        if not (isinstance(self.latency_us, int | float) and 0 <= self.latency_us < math.inf):
            raise UnitError(f"link latency_us must be a number >= 0, got {self.latency_us!r}")
        if not (isinstance(self.gbps, int | float) and self.gbps > 0):
            raise UnitError(f"link gbps must be a number > 0 (or .inf), got {self.gbps!r}")

    def transfer_us(self, nbytes: int | float) -> float:
        """µs to move ``nbytes`` over this link."""
        return float(self.latency_us) + (nbytes / (self.gbps * 1e3) if nbytes else 0.0)

    def describe(self) -> dict[str, Any]:
        gbps: float | str = self.gbps if math.isfinite(self.gbps) else "inf"
        return {"latency_us": self.latency_us, "gbps": gbps}


#: Link between units on one host when nothing else is said. Measured on the 2-core development
#: machine: handing an array to another Python thread through a queue takes ~41 µs one way, and
#: copying 1 MiB runs at ~8 GB/s. ``partuner profile`` measures the real figures.
DEFAULT_LINK = Link(latency_us=40.0, gbps=8.0)


class UnitSet:
    """Ordered units plus the links between them.

    Iterating yields the :class:`Unit` objects in order; ``units["name"]`` or ``unitset["name"]``
    looks one up (the latter raises UnitError naming the known units).
    """

    def __init__(
        self,
        units: Mapping[str, Unit] | list[Unit],
        links: Mapping[frozenset[str], Link] | None = None,
        *,
        default_link: Link = DEFAULT_LINK,
        declared_links: set[frozenset[str]] | None = None,
        source: str = "<memory>",
    ) -> None:
        items = list(units.items()) if isinstance(units, Mapping) else [(u.name, u) for u in units]
        self.units: dict[str, Unit] = {}
        for name, unit in items:
            if name in self.units:
                raise UnitError(f"two units are called {name!r}; unit names must be unique")
            self.units[name] = unit
        self.links: dict[frozenset[str], Link] = {}
        for pair, link in (links or {}).items():
            pair = frozenset(pair)
            unknown = sorted(n for n in pair if n not in self.units)
            if len(pair) != 2 or unknown:
                raise UnitError(
                    f"link {sorted(pair)} must join two different known units; "
                    f"known: {list(self.units)}"
                )
            self.links[pair] = link
        self.default_link = default_link
        self.declared_links: set[frozenset[str]] = (
            set(declared_links) if declared_links is not None else set(self.links)
        )
        self.source = source
        #: the Ray cluster of the units file's ``ray`` key (``units/ray_unit.py``), if any
        self.ray: Any = None

    @property
    def names(self) -> list[str]:
        return list(self.units)

    def __iter__(self) -> Iterator[Unit]:
        return iter(self.units.values())

    def __len__(self) -> int:
        return len(self.units)

    def __contains__(self, name: object) -> bool:
        return name in self.units

    def __getitem__(self, name: str) -> Unit:
        try:
            return self.units[name]
        except KeyError:
            raise UnitError(f"unknown unit {name!r}; known units: {list(self.units)}") from None

    def link(self, a: str, b: str) -> Link:
        """The link between units ``a`` and ``b`` (the default link when none was declared)."""
        self[a], self[b]  # noqa: B018 - validate both names
        return self.links.get(frozenset((a, b)), self.default_link)

    def transfer_us(self, a: str, b: str, nbytes: int | float) -> float:
        """µs to move ``nbytes`` from ``a`` to ``b``; 0 when ``a == b``."""
        if a == b:
            self[a]  # noqa: B018 - validate the name
            return 0.0
        return self.link(a, b).transfer_us(nbytes)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary: source, units (in order) and links."""
        links = {"default": self.default_link.describe()}
        for pair, link in self.links.items():
            a, b = sorted(pair, key=list(self.units).index)
            links[f"{a}-{b}"] = link.describe()
        out = {
            "source": self.source,
            "units": [u.describe() for u in self],
            "links": links,
        }
        if self.ray is not None:
            out["ray"] = {"address": self.ray.address}
        return out

    def __repr__(self) -> str:
        return f"UnitSet({list(self.units)}, source={self.source!r})"


def _usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def default_units() -> UnitSet:
    """The local default: one 1-thread onnxruntime unit per usable core (``cpu<core>`` with
    ``cores: [core]``) and, on a machine with several cores, ``cpuall``: one onnxruntime unit
    with a thread per core on all of them. Where OpenVINO is installed and runs on this CPU,
    also ``ovall``: OpenVINO at f32 (never its silent bf16) with a thread per core, a second
    backend whose kernels are faster than onnxruntime's on some models and regions. ``cpuall``
    and ``ovall`` share their cores with the others, so the planner chooses, region by region,
    between backends, between intra-operator threads and running branches side by side
    (``cpu0``, ``cpu1``, ...); units that share a core never run at the same time. Units are
    joined by :data:`DEFAULT_LINK`."""
    onnxruntime_unit = get_backend("onnxruntime")
    cores = _usable_cores()
    units = [onnxruntime_unit(f"cpu{c}", threads=1, cores=[c]) for c in cores]
    if len(cores) > 1:
        # Spin only during a run: every partition of a plan is its own session with its own
        # thread pool, and pools that keep spinning between runs starve each other, while no
        # spinning at all wakes the pool slower (benchmarks/unit_settings_bench.py).
        units.append(onnxruntime_unit("cpuall", threads=len(cores), cores=cores, spinning="run"))
    ov = _openvino_unit(cores)
    if ov is not None:
        units.append(ov)
    return UnitSet(units, {}, default_link=DEFAULT_LINK, source="default")


def _openvino_unit(cores: list[int]) -> Unit | None:
    """``ovall`` where OpenVINO is installed and its CPU device runs f32, else None."""
    import importlib.util

    if importlib.util.find_spec("openvino") is None:
        return None
    unit = get_backend("openvino")("ovall", threads=len(cores), cores=cores, precision="f32")
    ok, why = unit.availability()
    if not ok:
        log.info("no ovall unit: %s", why)
        return None
    return unit


def load_units(path: str | Path | None) -> UnitSet:
    """Read a units file (see the module docstring); ``None`` gives :func:`default_units`.

    Raises
    ------
    UnitsFileError : missing file, bad YAML, unknown backend or option, bad value, bad link.
    """
    if path is None:
        return default_units()
    p = Path(path)
    if not p.is_file():
        what = "is a folder, not a YAML file" if p.is_dir() else "not found"
        raise UnitsFileError(
            f"units file {what}: {p}; pass a YAML units file (see docs/units.md) or leave it "
            "out to get one onnxruntime unit per core"
        )
    data = read_yaml(p, UnitsFileError, "fix the YAML (docs/units.md)", loader=UniqueKeyLoader)
    return _from_mapping(data, str(p))


def units_from_mapping(data: Mapping[str, Any], source: str = "<memory>") -> UnitSet:
    """Build a unit set from an already-parsed units mapping ``{"units": ..., "links": ...}``
    (e.g. the units section of a plan file). A unit entry may also be a :meth:`Unit.describe`
    dict: its ``spec`` is used. Errors raise UnitsFileError prefixed with ``source``."""
    return _from_mapping(data, source)


def _from_mapping(data: object, source: str) -> UnitSet:
    def fail(msg: str) -> UnitsFileError:
        return UnitsFileError(f"{source}: {msg}")

    if not isinstance(data, Mapping):
        raise fail("expected a mapping with a 'units' key at the top; see docs/units.md")
    extra = [k for k in data if k not in ("units", "links", "ray")]
    if extra:
        raise fail(f"unknown top-level key {extra[0]!r}; allowed: ['units', 'links', 'ray']")
    spec = data.get("units")
    if not spec:
        raise fail(
            "no 'units' defined; add e.g. 'units: {cpu0: {backend: onnxruntime, threads: 1}}'"
        )
    if not isinstance(spec, Mapping):
        raise fail(f"'units' must map unit names to their settings, got {type(spec).__name__}")
    if len(spec) > MAX_UNITS:  # every pair of units has a link: listed, profiled, planned
        raise fail(f"{len(spec)} units; a units file defines at most {MAX_UNITS}")
    cluster = None
    if "ray" in data or any(isinstance(e, Mapping) and "ray" in e for e in spec.values()):
        from partuner.units.ray_unit import parse_cluster

        try:
            cluster = parse_cluster(data.get("ray"))
        except UnitError as exc:
            raise fail(str(exc)) from None
    units = [_build_unit(name, entry, fail, cluster) for name, entry in spec.items()]
    _warn_missing_cores(units, source)
    names = [u.name for u in units]
    default_link = DEFAULT_LINK
    links: dict[frozenset[str], Link] = {}
    keys_of: dict[frozenset[str], str] = {}
    raw_links = data.get("links") or {}
    if not isinstance(raw_links, Mapping):
        raise fail("'links' must map 'default' or 'A-B' unit pairs to {latency_us, gbps}")
    if "default" in raw_links:
        default_link = _build_link("default", raw_links["default"], DEFAULT_LINK, fail)
    for key, entry in raw_links.items():
        if key == "default":
            continue
        pair = _split_link_key(key, names, fail)
        if pair in keys_of:
            raise fail(f"links {keys_of[pair]!r} and {key!r} name the same pair; keep one")
        keys_of[pair] = str(key)
        links[pair] = _build_link(str(key), entry, default_link, fail)
    out = UnitSet(units, links, default_link=default_link, declared_links=set(links), source=source)
    out.ray = cluster
    return out


def _warn_missing_cores(units: list[Unit], source: str) -> None:
    """Log a warning for each local unit that declares cores this machine cannot use, or more
    threads than the cores it declares."""
    usable = _usable_cores()
    for unit in units:
        lacking = [c for c in unit.cores or () if c not in usable]
        if lacking and unit.remote is None:
            log.warning(
                "%s: unit %r declares cores %s that this machine lacks (its usable cores: %s); "
                "fix 'cores' or mark the unit 'remote: true' if it is another machine's",
                source,
                unit.name,
                lacking,
                usable,
            )
        threads = unit.options.get("threads")
        if unit.cores and isinstance(threads, int) and threads > len(unit.cores):
            log.warning(
                "%s: unit %r runs %d threads on %d core(s) %s: its threads take turns there, "
                "slower than one thread per core; set threads to at most the cores listed",
                source,
                unit.name,
                threads,
                len(unit.cores),
                list(unit.cores),
            )


def _build_unit(name: object, entry: object, fail: Any, cluster: Any = None) -> Unit:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or len(name) > NAME_MAX:
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise fail(
            f"bad unit name {shown}: use letters, digits, '_', '.' and '-', not starting with "
            f"'.' or '-', at most {NAME_MAX} (e.g. cpu0, npu-1)"
        )
    if isinstance(entry, Mapping) and isinstance(entry.get("spec"), Mapping):
        entry = entry["spec"]  # a Unit.describe() dict
    if not isinstance(entry, Mapping):
        raise fail(
            f"unit {name!r} must be a mapping like {{backend: onnxruntime, threads: 1}}, "
            f"got {entry!r}"
        )
    options = dict(entry)
    backend = options.pop("backend", None)
    if backend is None:
        raise fail(f"unit {name!r} has no 'backend'; known backends: {backend_names()}")
    if not isinstance(backend, str) or backend not in backend_names():
        try:
            get_backend(str(backend))  # says why an entry-point backend failed to load
        except UnitError as exc:
            raise fail(f"unit {name!r}: {exc}") from None
    placement = options.pop("ray", None)
    try:
        unit = get_backend(backend)(name, **options)
        if placement is None:
            return unit
        from partuner.units.ray_unit import RayUnit, parse_placement

        return RayUnit(unit, parse_placement(placement), cluster)
    except UnitError as exc:
        raise fail(f"unit {name!r}: {exc}") from None


def _build_link(key: str, entry: object, base: Link, fail: Any) -> Link:
    if not isinstance(entry, Mapping):
        raise fail(
            f"link {key!r} must be a mapping like {{latency_us: 5, gbps: 20}}, got {entry!r}"
        )
    extra = [k for k in entry if k not in _LINK_FIELDS]
    if extra:
        raise fail(f"link {key!r}: unknown field {extra[0]!r}; allowed: {list(_LINK_FIELDS)}")
    latency = entry.get("latency_us", base.latency_us)
    gbps = entry.get("gbps", base.gbps)
    if isinstance(gbps, str) and gbps.strip().lower() in ("inf", ".inf", "infinity"):
        gbps = math.inf
    for field, value in (("latency_us", latency), ("gbps", gbps)):
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise fail(f"link {key!r}: {field} must be a number, got {value!r}")
    if latency < 0 or math.isinf(latency):
        raise fail(f"link {key!r}: latency_us must be >= 0 and finite, got {latency}")
    if gbps <= 0:
        raise fail(f"link {key!r}: gbps must be > 0 (use .inf for free transfers), got {gbps}")
    return Link(latency_us=float(latency), gbps=float(gbps))


def _split_link_key(key: object, names: list[str], fail: Any) -> frozenset[str]:
    if not isinstance(key, str) or "-" not in key:
        raise fail(f"malformed link key {key!r}: write two unit names joined by '-', e.g. cpu0-npu")
    known = set(names)
    splits = [
        (key[:i], key[i + 1 :])
        for i, ch in enumerate(key)
        if ch == "-" and key[:i] in known and key[i + 1 :] in known
    ]
    if not splits:
        a, _, b = key.partition("-")
        unknown = [x for x in (a, b) if x not in known] or [key]
        raise fail(f"link {key!r} names unknown unit {unknown[0]!r}; known units: {names}")
    if len(splits) > 1:
        ways = " or ".join(f"{a!r} + {b!r}" for a, b in splits)
        raise fail(f"link key {key!r} is ambiguous ({ways}); rename a unit")
    a, b = splits[0]
    if a == b:
        raise fail(f"link {key!r} joins unit {a!r} to itself; transfers within a unit are free")
    return frozenset((a, b))
