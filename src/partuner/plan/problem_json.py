"""Reading and writing planning problems as JSON.

A :class:`~partuner.plan.problem.Problem` as JSON: what ``--dump-problem`` writes and
``--problem`` reads. The schema (``"inf"`` stands for infinity wherever a number may
be infinite; ``"-inf"`` and NaN are never written and are rejected on reading)::

    {
      "format": "partuner.problem",       # required, exactly this string
      "version": 1,                        # required
      "name": "resnet18",                  # optional, default "problem"
      "nodes": ["conv0", "relu0", ...],    # required, topological order, unique
      "units": ["cpu0", "cpu1", ...],      # required, ordered, unique
      "cost": {"conv0": {"cpu0": 12.5, "cpu1": "inf"}, ...},   # required, µs per node per unit
      "edges": [{"src": "conv0", "dst": "relu0", "nbytes": 802816,
                 "values": ["conv0_out"]}, ...],               # optional, default []
      "links": [{"a": "cpu0", "b": "gpu0", "latency_us": 20.0, "gbps": 12.0}, ...],
                                           # optional, unordered pairs, default []
      "default_link": {"latency_us": 0.0, "gbps": "inf"},      # optional, this default
      "call_overhead_us": {"gpu0": 30.0},  # optional, µs charged once per partition
      "boundary_us_per_byte": {"cpu0": 2e-4},
                                           # optional, µs per byte a partition reads from
                                           # other partitions (layout conversion, copies)
      "boundary_out_us_per_byte": {"npu0": 4e-4},
                                           # optional, µs per byte a partition writes out
                                           # for other partitions (conversion, copies)
      "modeled": ["npu0"],                 # optional, units whose costs are computed
      "resources": {"cpu0": ["core0"], "cpu01": ["core0", "core1"]},
                                           # optional: hardware each unit occupies; units
                                           # sharing a resource never run at the same time
                                           # (default: each unit its own resource)
      "groups": [{"nodes": ["conv0", "relu0"], "cost": {"cpu0": 10.5}}],
                                           # optional fused chains and their cost when run
                                           # together, consecutively, on one unit
      "default_unit": "cpu0",              # optional, NEST-C's default unit (else the first
                                           # unit that runs every node, else units[0])
      "weight_bytes": {"conv0": 36864},    # optional, bytes of weights per node (default 0)
      "memory_bytes": {"npu0": 8e6},       # optional, bytes each unit holds for weights and
                                           # activations (default and "inf": unlimited)
      "corun": {"npu0": 1.08, "cpu0": 1.0} # optional: the units timed side by side
                                           # (profile/corun.py) and each one's factor >= 1 on
                                           # its partitions while another of them works (streams)
    }

Examples
--------
>>> p = Problem(nodes=["a", "b"], units=["u"], cost={"a": {"u": 1.0}, "b": {"u": 2.0}},
...             edges=[Edge("a", "b", 1000, ("a_out",))], corun={"u": 1.1})
>>> problem_to_dict(p)["corun"]
{'u': 1.1}
>>> problem_from_dict(problem_to_dict(p)) == p
True
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

from partuner.errors import PartunerError
from partuner.plan.problem import FORMAT, VERSION, Edge, FusedGroup, Link, Problem

__all__ = ["problem_from_dict", "problem_from_json", "problem_to_dict"]


def problem_to_dict(self: Problem) -> dict[str, Any]:
    """The problem as JSON-ready data (see the module docstring for the schema)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": self.name,
        "nodes": list(self.nodes),
        "units": list(self.units),
        "cost": {n: {u: _num(c) for u, c in row.items()} for n, row in self.cost.items()},
        "edges": [
            {"src": e.src, "dst": e.dst, "nbytes": e.nbytes, "values": list(e.values)}
            for e in self.edges
        ],
        "links": [
            {"a": a, "b": b, "latency_us": _num(k.latency_us), "gbps": _num(k.gbps)}
            for (a, b), k in self.links.items()
        ],
        "default_link": {
            "latency_us": _num(self.default_link.latency_us),
            "gbps": _num(self.default_link.gbps),
        },
        "call_overhead_us": {u: _num(t) for u, t in self.call_overhead_us.items()},
        "modeled": sorted(self.modeled),
        "resources": {u: sorted(r) for u, r in self.resources.items()},
        "groups": [
            {"nodes": list(g.nodes), "cost": {u: _num(c) for u, c in g.cost.items()}}
            for g in self.groups
        ],
        "default_unit": self.default_unit,
        "boundary_us_per_byte": dict(self.boundary_us_per_byte),
        "boundary_out_us_per_byte": dict(self.boundary_out_us_per_byte),
        "weight_bytes": dict(self.weight_bytes),
        "memory_bytes": {u: _num(b) for u, b in self.memory_bytes.items()},
        "corun": {u: _num(f) for u, f in self.corun.items()},
    }


def problem_from_dict(data: Any) -> Problem:
    """Build a problem from :meth:`to_dict` data; raises ``PartunerError`` if malformed."""
    try:
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise PartunerError(
                f"not a {FORMAT} version {VERSION} file "
                f"(format {data.get('format')!r}, version {data.get('version')!r})"
            )
        dl = data.get("default_link", {"latency_us": 0.0, "gbps": "inf"})
        problem = Problem(
            nodes=_field("nodes", lambda: [str(n) for n in data["nodes"]]),
            units=_field("units", lambda: [str(u) for u in data["units"]]),
            cost=_field(
                "cost",
                lambda: {
                    str(n): {str(u): _float(c) for u, c in row.items()}
                    for n, row in data["cost"].items()
                },
            ),
            edges=_field(
                "edges",
                lambda: [
                    Edge(
                        str(e["src"]),
                        str(e["dst"]),
                        _int(e["nbytes"]),
                        tuple(str(v) for v in e.get("values", ())),
                    )
                    for e in data.get("edges", [])
                ],
            ),
            links=_field(
                "links",
                lambda: {
                    (str(k["a"]), str(k["b"])): Link(_float(k["latency_us"]), _float(k["gbps"]))
                    for k in data.get("links", [])
                },
            ),
            default_link=_field(
                "default_link", lambda: Link(_float(dl["latency_us"]), _float(dl["gbps"]))
            ),
            call_overhead_us=_field("call_overhead_us", lambda: _floats(data, "call_overhead_us")),
            modeled=_field("modeled", lambda: frozenset(str(u) for u in data.get("modeled", []))),
            name=str(data.get("name", "problem")),
            resources=_field(
                "resources",
                lambda: {
                    str(u): frozenset(str(r) for r in _list(rs))
                    for u, rs in data.get("resources", {}).items()
                },
            ),
            groups=_field(
                "groups",
                lambda: [
                    FusedGroup(
                        tuple(str(n) for n in g["nodes"]),
                        {str(u): _float(c) for u, c in g["cost"].items()},
                    )
                    for g in data.get("groups", [])
                ],
            ),
            default_unit=_opt_str(data.get("default_unit"), "default_unit"),
            boundary_us_per_byte=_field(
                "boundary_us_per_byte", lambda: _floats(data, "boundary_us_per_byte")
            ),
            boundary_out_us_per_byte=_field(
                "boundary_out_us_per_byte", lambda: _floats(data, "boundary_out_us_per_byte")
            ),
            weight_bytes=_field(
                "weight_bytes",
                lambda: {str(n): _int(w) for n, w in data.get("weight_bytes", {}).items()},
            ),
            memory_bytes=_field("memory_bytes", lambda: _floats(data, "memory_bytes")),
            corun=_field("corun", lambda: _floats(data, "corun")),
        )
        _only_known(problem)
        return problem
    except PartunerError:
        raise
    except KeyError as exc:
        raise PartunerError(f"problem JSON lacks required key {exc.args[0]!r}") from None
    except (AttributeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise PartunerError(f"malformed problem JSON: {str(exc)[:200]}") from None


def _only_known(p: Problem) -> None:
    """Refuse costs the planner would drop without a word: for a node or unit not listed."""
    units, nodes = set(p.units), set(p.nodes)
    for n, row in p.cost.items():
        if n not in nodes:
            raise PartunerError(f"malformed problem JSON: `cost` names node {n!r}, not in `nodes`")
        other = next((u for u in row if u not in units), None)
        if other is not None:
            raise PartunerError(
                f"malformed problem JSON: `cost` of node {n!r} names unit {other!r}, not in "
                f"`units` {p.units[:8]}; fix the name or add the unit"
            )


def problem_from_json(text: str) -> Problem:
    """Parse :meth:`to_json` output; raises ``PartunerError`` if malformed."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise PartunerError(f"problem file is not valid JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:  # nested too deep; an integer too long
        deep = isinstance(exc, RecursionError)
        why = "nested too deep" if deep else "a number in it has too many digits"
        raise PartunerError(f"problem file is not a problem --dump-problem writes: {why}") from None
    if not isinstance(data, dict):
        raise PartunerError(
            f"malformed problem JSON: it holds a {type(data).__name__}, not the object "
            '--dump-problem writes ({"nodes": [...], "units": [...], ...})'
        )
    return problem_from_dict(data)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice (JSON would keep the last)."""
    out = dict(pairs)
    if len(out) < len(pairs):
        k = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise PartunerError(f"malformed problem JSON: key {k!r} appears twice; keep one")
    return out


def _num(x: float) -> float | str:
    if math.isnan(x) or x == -math.inf:
        raise PartunerError(f"cannot write {x!r} to a problem file")
    return "inf" if x == math.inf else x


def _field(name: str, make: Any) -> Any:
    """``make()``, its errors named after the problem file's field ``name``."""
    try:
        return make()
    except KeyError as exc:
        key = exc.args[0]
        raise PartunerError(
            f"problem JSON lacks required key {key!r}"
            if key == name
            else f"malformed problem JSON: `{name}` lacks required key {key!r}"
        ) from None
    except (AttributeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise PartunerError(f"malformed problem JSON: `{name}`: {str(exc)[:200]}") from None


def _floats(data: Any, name: str) -> dict[str, float]:
    """``{unit or node: number}`` field ``name`` (absent: empty)."""
    got = data.get(name, {})
    if got is None or not isinstance(got, dict):
        raise TypeError(f'expected a mapping like {{"npu": 1.5}}, got {type(got).__name__}')
    return {str(k): _float(v) for k, v in got.items()}


def _list(x: Any) -> list[Any]:
    if not isinstance(x, list):
        raise TypeError(f"expected a list, got {x!r}")
    return x


def _opt_str(x: Any, what: str) -> str | None:
    if x is None or isinstance(x, str):
        return x
    raise ValueError(f"{what} must be a unit's name, got {x!r}")


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int | float) or not float(x).is_integer():
        raise ValueError(f"expected a whole number of bytes, got {x!r}")
    return int(x)


def _float(x: Any) -> float:
    if isinstance(x, str):
        if x.strip().lower() not in ("inf", "infinity", "+inf"):
            raise ValueError(f"expected a number or 'inf', got {x!r}")
        return math.inf
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"expected a number or 'inf', got {x!r}")
    value = float(x)
    if math.isnan(value):
        raise ValueError("NaN is not allowed")
    return value
