"""NEST-C profile files: export partuner's costs as NEST-C profiles, import NEST-C's.

NEST-C keeps one flat YAML map per unit (``initialProfile<UNIT>.yaml``; fused groups in
``fusedProfile<UNIT>.yaml``): ``backendName``, ``commCost``, then one key per operator signature
with its time in integer µs, or ``INFINITY`` where the unit cannot run it. A key is
``<Kind>-<first input's dims>-<dtype>``, plus ``-<out channels>-<kernel>-<stride>`` for
convolutions; 4-D dims are written NHWC (N, H, W, C), as Glow lays tensors out; a group joins its
members' keys with ``+``. Glow's node kinds are ONNX op types renamed by :data:`ONNX_TO_GLOW`.

A NEST-C key is coarser than partuner's signature (it ignores padding, groups, dilations and
the other inputs), so on import one key may set several of this model's signatures; on export
nodes that share a key are written once, with their mean cost (``INFINITY`` if any is).

Imported times are operator times, not call times: they are stored with a ``detail`` starting
with ``net:`` and the profiler does not subtract the call overhead from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from partuner.errors import ProfileError
from partuner.graph import ModelGraph, NodeInfo
from partuner.profile.groups import GLOW_TO_ONNX, group_signature, sequential_chains
from partuner.profile.profiler import Profile
from partuner.profile.signature import node_signature
from partuner.profile.store import NET, Measurement, ProfileStore
from partuner.yamlfile import read_yaml

__all__ = ["ONNX_TO_GLOW", "NestcImport", "export_nestc", "import_nestc", "nestc_key"]

#: ONNX op type -> Glow node kind, where they differ (the inverse of ``GLOW_TO_ONNX`` plus
#: ops Glow imports as another kind).
ONNX_TO_GLOW: dict[str, str] = {
    **{onnx_op: glow for glow, onnx_op in GLOW_TO_ONNX.items()},
    "GlobalAveragePool": "AvgPool",
    "Flatten": "Reshape",
}

#: numpy dtype name -> Glow element type name.
DTYPES: dict[str, str] = {
    "float32": "float",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}

_META = ("backendName", "commCost", "Type")


def nestc_key(graph: ModelGraph, node: NodeInfo) -> str:
    """NEST-C's profile key of ``node``.

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("branchy", image_size=32))
    >>> nestc_key(g, g.node("a.b2.conv2"))
    'Convolution-1-16-16-8-float-8-3-1'
    >>> nestc_key(g, g.node("a.b2.0.relu"))
    'Relu-1-16-16-8-float'
    """
    kind = ONNX_TO_GLOW.get(node.op_type, node.op_type)
    first = next((v for v in node.inputs if v), None)
    if first is None:
        return kind
    info = graph.values[first]
    dims = list(info.shape)
    if len(dims) == 4:
        dims = [dims[0], dims[2], dims[3], dims[1]]
    parts = [kind, *(str(d) for d in dims), DTYPES.get(str(info.dtype), str(info.dtype))]
    if node.op_type == "Conv" and len(node.inputs) > 1:
        w = graph.values[node.inputs[1]].shape
        kernel = list(node.attributes.get("kernel_shape") or w[2:] or [1])  # type: ignore[arg-type]
        strides = list(node.attributes.get("strides") or [1])  # type: ignore[arg-type]
        parts += [str(w[0]), str(kernel[0]), str(strides[0])]
    return "-".join(parts)


def _write(path: Path, backend: str, comm: float, entries: Mapping[str, list[float]]) -> Path:
    lines = ["---", f"backendName: {backend}", f"commCost: {round(float(comm), 3)}"]
    for key, vals in entries.items():
        v = math.inf if any(math.isinf(x) for x in vals) else sum(vals) / len(vals)
        lines.append(f"{key}: {'INFINITY' if math.isinf(v) else int(round(v))}")
    lines.append("...")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def export_nestc(
    profile: Profile,
    graph: ModelGraph,
    outdir: str | Path,
    *,
    units: Sequence[str] | None = None,
    backend_names: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write ``initialProfile<UNIT>.yaml`` (and ``fusedProfile<UNIT>.yaml`` when the profile
    has groups on that unit) for each unit; returns the files written.

    Costs are the profile's (µs, calibrated like the planner's). ``backendName`` is
    ``backend_names[unit]``, else ``CPU`` for measured units and the unit's name for modeled
    ones; ``commCost`` is the largest link latency (µs) from that unit to another.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in units or list(profile.units):
        if unit not in profile.units:
            raise ProfileError(f"unknown unit {unit!r}; the profile has {list(profile.units)}")
        modeled = profile.units[unit].modeled
        backend = (backend_names or {}).get(unit) or (unit if modeled else "CPU")
        comm = max(
            (lk.latency_us for pair, lk in profile.links.items() if unit in pair), default=0.0
        )
        entries: dict[str, list[float]] = {}
        for n in graph.compute_nodes:
            entries.setdefault(nestc_key(graph, n), []).append(profile.costs[n.name][unit])
        written.append(_write(out / f"initialProfile{unit}.yaml", backend, comm, entries))
        fused: dict[str, list[float]] = {}
        for members, cost in profile.groups:
            if unit in cost:
                key = "+".join(nestc_key(graph, graph.node(m)) for m in members)
                fused.setdefault(key, []).append(cost[unit])
        if fused:
            written.append(_write(out / f"fusedProfile{unit}.yaml", backend, comm, fused))
    return written


@dataclass
class NestcImport:
    """What :func:`import_nestc` did: rows written, keys matched and not."""

    backend: str
    rows: int = 0
    matched: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)


def _parse_value(key: str, v: object, path: Path) -> float:
    if isinstance(v, str) and v.strip().upper() in ("INFINITY", "INF", ".INF"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or math.isnan(v):
        raise ProfileError(f"{path}: {key!r} has bad time {v!r}; write integer µs or INFINITY")
    return float(v)


def import_nestc(
    store: ProfileStore,
    path: str | Path,
    graph: ModelGraph,
    fingerprint: str,
    *,
    description: str = "",
) -> NestcImport:
    """Load a NEST-C profile YAML into ``store`` for unit ``fingerprint`` and model ``graph``.

    Keys are matched to this model's nodes (and chains, for ``+`` keys) by generating the same
    key strings; keys no node produces are reported in ``unmatched``.

    Raises
    ------
    ProfileError : unreadable file, not a flat map, a transfer-time profile, or a bad value.
    """
    p = Path(path)
    data = read_yaml(p, ProfileError, "is it a NEST-C profile?")
    if not isinstance(data, dict):
        raise ProfileError(f"{p} is not a NEST-C profile (a flat map of key: time)")
    if str(data.get("Type", "ExeTime")) == "CommTime":
        raise ProfileError(
            f"{p} is a transfer-time profile (Type: CommTime); import execution-time profiles "
            "(initialProfile*.yaml / fusedProfile*.yaml)"
        )
    sigs: dict[str, set[str]] = {}
    sig_of = {n.name: node_signature(graph, n) for n in graph.compute_nodes}
    for n in graph.compute_nodes:
        sigs.setdefault(nestc_key(graph, n), set()).add(sig_of[n.name])
    longest = max((str(k).count("+") + 1 for k in data), default=1)
    if longest >= 2:
        for chain in sequential_chains(graph, longest):
            key = "+".join(nestc_key(graph, graph.node(m)) for m in chain)
            sigs.setdefault(key, set()).add(group_signature(sig_of[m] for m in chain))
    imp = NestcImport(str(data.get("backendName", "")))
    detail = f"{NET}NEST-C {p.name}"
    rows: list[tuple[str, Measurement]] = []  # every value checked before any is stored
    for key, raw in data.items():
        if key in _META:
            continue
        t = _parse_value(str(key), raw, p)
        found = sigs.get(str(key))
        if not found:
            imp.unmatched.append(str(key))
            continue
        imp.matched.append(str(key))
        m = (
            Measurement(t, t, t, 1, "ok", detail)
            if math.isfinite(t)
            else Measurement(math.inf, math.inf, math.inf, 0, "unsupported", detail)
        )
        rows += [(sig, m) for sig in sorted(found)]
    for sig, m in rows:
        store.put(fingerprint, sig, m, description=description)
    imp.rows = len(rows)
    if not imp.matched:  # nothing was stored
        seen = [str(k) for k in data if k not in _META]
        got = f"{seen[:3]}{' ...' if len(seen) > 3 else ''}" if seen else "none"
        raise ProfileError(
            f"{p}: no key is the NEST-C key of a node of {graph.source} (keys: {got}); expected "
            f"keys like {list(sigs)[:2]} (op kind, then shapes): pass the NEST-C profile made "
            "for this model (and its --input-shape); nothing was imported"
        )
    return imp
