"""Fused groups: chains of nodes a backend may run faster together than one by one.

A **chain** is a sequence of compute nodes ``n1 -> n2 -> ... -> nk`` (``k >= 2``) where, for
every member but the last, every output is read by the next member and by nothing else (no other
node, not a graph output). The next member may read other values too (``Add`` reads the
shortcut). This is the condition under which a backend can fuse the members without writing the
intermediate tensors out (onnxruntime's Conv+Relu / Conv+Add fusions check the same), and under
which a partition that holds the whole chain runs it as one fused kernel.

Chains come from three places:

- explicit patterns of op types, ``Conv-Relu`` (``--fuse``), matched by :func:`find_chains`;
- NEST-C's ``profileConfigs.yaml`` (``fuseOperators`` lines of Glow node kinds such as
  ``Convolution-Relu``), read by :func:`parse_profile_configs`;
- the automatic mode (``--fuse auto``): every chain of 2..K members, :func:`sequential_chains`,
  and every parallel branch group whole, :func:`region_groups` (a SqueezeNet fire module's
  expand convolutions and their concat, with the squeeze convolution before them; a GoogLeNet
  inception block): inside one call a backend keeps such a region in its own layout, which
  timing its nodes one by one misses. An automatic group is kept on a unit only where its
  measured time differs from the sum of its members' by more than the noise
  (:func:`differs_beyond_noise`).

A group's signature is its members' signatures joined by ``+`` (NEST-C's fused-profile key
style), so equal groups share one measurement in the store, across models.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from partuner.errors import ProfileError
from partuner.graph import ModelGraph
from partuner.graph.ops import op_type_problem
from partuner.profile.store import Measurement
from partuner.yamlfile import read_yaml

__all__ = [
    "GLOW_TO_ONNX",
    "candidate_groups",
    "differs_beyond_noise",
    "find_chains",
    "fused_saving",
    "group_signature",
    "next_in_chain",
    "parse_pattern",
    "parse_profile_configs",
    "region_groups",
    "sequential_chains",
]

#: The most members an automatic region group may have.
REGION_MAX_NODES = 24

#: NEST-C (Glow) node kinds -> the ONNX op type they come from. Names not listed are taken as
#: ONNX op types (``Relu``, ``Add``, ``MaxPool``, ``Concat`` are spelt alike in both).
GLOW_TO_ONNX: dict[str, str] = {
    "Convolution": "Conv",
    "FullyConnected": "Gemm",
    "AvgPool": "AveragePool",
    "SoftMax": "Softmax",
    "LocalResponseNormalization": "LRN",
}


def _op_name(name: str, text: str) -> str:
    op = GLOW_TO_ONNX.get(name, name)
    why = op_type_problem(op, also=GLOW_TO_ONNX)
    if why is not None:
        raise ProfileError(
            f"bad fuse pattern {text!r}: {why}, nor a NEST-C name ({sorted(GLOW_TO_ONNX)}); "
            "write op types joined by '-', e.g. Conv-Relu"
        )
    return op


def parse_pattern(text: str) -> list[str]:
    """Parse ``Conv-Relu`` (ONNX op types or NEST-C names joined by ``-``) into op types.

    Examples
    --------
    >>> parse_pattern("Convolution-Relu")
    ['Conv', 'Relu']
    >>> parse_pattern("Conv-Add-Relu")
    ['Conv', 'Add', 'Relu']
    """
    parts = [p.strip() for p in re.split(r"[-+]", text.strip())]
    if len(parts) < 2 or not all(parts):
        raise ProfileError(
            f"bad fuse pattern {text!r}: name at least two op types joined by '-', e.g. Conv-Relu"
        )
    return [_op_name(p, text) for p in parts]


def parse_profile_configs(path: str | Path) -> list[list[str]]:
    """The fusion patterns of a NEST-C ``profileConfigs.yaml`` (one pattern per
    ``fuseOperators`` line or comma-separated item; documents may repeat)."""
    p = Path(path)
    docs = read_yaml(p, ProfileError, "is it a NEST-C profileConfigs.yaml?", all_docs=True)
    entries: list[object] = []
    for d in docs:
        entries.extend(d if isinstance(d, list) else [d])
    patterns: list[list[str]] = []
    for e in entries:
        if not isinstance(e, dict) or "fuseOperators" not in e:
            raise ProfileError(
                f"{p}: expected entries like 'name: Profile1' + 'fuseOperators: |' with one "
                f"pattern per line, got {e!r}"
            )
        for item in re.split(r"[\n,]", str(e["fuseOperators"] or "")):
            if item.strip():
                patterns.append(parse_pattern(item))
    if not patterns:
        raise ProfileError(f"{p} names no fuseOperators pattern")
    return patterns


def next_in_chain(graph: ModelGraph, name: str) -> str | None:
    """The one compute node that reads every output of ``name`` and is the only reader of them
    (see the module docstring), or ``None``."""
    readers: set[str] = set()
    for v in graph.node(name).outputs:
        if not v:
            continue
        info = graph.values[v]
        if info.is_graph_output:
            return None
        readers.update(info.consumers)
    if len(readers) != 1:
        return None
    (nxt,) = readers
    return None if graph.is_constant(nxt) else nxt


def find_chains(graph: ModelGraph, pattern: Sequence[str]) -> list[tuple[str, ...]]:
    """Every chain of compute nodes whose op types are ``pattern``, in topological order of
    their first member. Occurrences may overlap (``Relu-Relu`` in three Relus gives two).

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("branchy", image_size=32))
    >>> find_chains(g, ["Conv", "Relu", "Conv"])
    [('a.b2.0.conv', 'a.b2.0.relu', 'a.b2.conv2'), ('b.b2.0.conv', 'b.b2.0.relu', 'b.b2.conv2'), \
('c.b2.0.conv', 'c.b2.0.relu', 'c.b2.conv2')]
    """
    if len(pattern) < 2:
        raise ProfileError(f"a fuse pattern needs at least two op types, got {list(pattern)}")
    out: list[tuple[str, ...]] = []
    for n in graph.compute_nodes:
        if n.op_type != pattern[0]:
            continue
        chain = [n.name]
        for op in pattern[1:]:
            nxt = next_in_chain(graph, chain[-1])
            if nxt is None or graph.node(nxt).op_type != op:
                break
            chain.append(nxt)
        if len(chain) == len(pattern):
            out.append(tuple(chain))
    return out


def sequential_chains(graph: ModelGraph, max_len: int) -> list[tuple[str, ...]]:
    """Every chain of 2..``max_len`` members (the automatic mode's candidates).

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("branchy", image_size=32))
    >>> [c for c in sequential_chains(g, 3) if c[0] == "b.add"]
    [('b.add', 'b.relu'), ('b.add', 'b.relu', 'pool')]
    """
    out: list[tuple[str, ...]] = []
    for n in graph.compute_nodes:
        chain = [n.name]
        while len(chain) < max_len:
            nxt = next_in_chain(graph, chain[-1])
            if nxt is None:
                break
            chain.append(nxt)
            out.append(tuple(chain))
    return out


def region_groups(graph: ModelGraph, lead: int = 1) -> list[tuple[str, ...]]:
    """Every parallel branch group as one group: its branches and its join, then with the fork
    and up to ``lead`` nodes of the chain leading into the fork (members in topological order;
    at most :data:`REGION_MAX_NODES` members).

    Examples
    --------
    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("squeezenet", image_size=32))
    >>> [len(r) for r in region_groups(g)[:3]]
    [5, 6, 7]
    >>> region_groups(g)[2][0], region_groups(g)[2][-1]
    ('features.3.squeeze', 'features.3.concat')
    """
    from partuner.graph.branches import parallel_branch_groups

    index = {n.name: i for i, n in enumerate(graph.nodes)}
    out: list[tuple[str, ...]] = []
    for grp in parallel_branch_groups(graph):
        members = [n for b in grp.branches for n in b] + [grp.join]
        heads = [] if grp.fork is None else [grp.fork]
        while heads and len(heads) <= lead:
            preds = [p for p in graph.predecessors(heads[-1]) if not graph.is_constant(p)]
            if len(preds) != 1 or next_in_chain(graph, preds[0]) != heads[-1]:
                break
            heads.append(preds[0])
        for k in range(len(heads) + 1):
            group = members + heads[:k]
            if len(group) <= REGION_MAX_NODES:
                out.append(tuple(sorted(group, key=index.__getitem__)))
    return list(dict.fromkeys(out))


def candidate_groups(
    graph: ModelGraph, fuse: Sequence[Sequence[str]] | None, fuse_auto: int
) -> list[tuple[tuple[str, ...], bool]]:
    """The groups to time: ``(members, explicit)``; explicit ones (from ``fuse`` patterns) are
    kept whatever they measure, automatic ones (chains of 2..``fuse_auto`` members and the
    parallel branch regions of :func:`region_groups`) only if they differ from their members'
    sum beyond the noise."""
    out: dict[tuple[str, ...], bool] = {}
    for pattern in fuse or ():
        for c in find_chains(graph, list(pattern)):
            out[c] = True
    if fuse_auto >= 2:
        for c in sequential_chains(graph, fuse_auto):
            out.setdefault(c, False)
        for c in region_groups(graph):
            out.setdefault(c, False)
    return list(out.items())


def group_signature(member_signatures: Iterable[str]) -> str:
    """The store key of a group: its members' signatures joined by ``+``."""
    return "+".join(member_signatures)


def differs_beyond_noise(group: Measurement, members: Sequence[Measurement]) -> bool:
    """Whether a group's time differs from the sum of its members' by more than the noise.

    ``group`` and ``members`` hold net times (the no-op call overhead already subtracted, as
    for node costs). The noise is the half-widths of the 10th-90th percentile spreads of every
    measurement involved, added in quadrature: a conservative bound, since it is the spread of
    single runs, not of their medians.

    Examples
    --------
    >>> m = lambda t, w: Measurement(t, t - w, t + w, 10)
    >>> differs_beyond_noise(m(100, 2), [m(80, 2), m(50, 2)])  # 30 saved, noise 3.5
    True
    >>> differs_beyond_noise(m(128, 2), [m(80, 2), m(50, 2)])
    False
    """
    total = sum(x.median_us for x in members)
    halves = [max(x.p90_us - x.p10_us, 0.0) / 2 for x in [group, *members]]  # half spreads
    noise = math.sqrt(sum(h**2 for h in halves))
    return abs(group.median_us - total) > noise


def fused_saving(
    order: Sequence[str],
    groups: Sequence[tuple[tuple[str, ...], float]],
    cost: dict[str, float],
) -> float:
    """What fused groups save when ``order`` runs as one call: groups whose members are
    consecutive in ``order``, non-overlapping, the largest savings first (as the planner's
    ``partition_cost`` charges them). ``groups`` holds ``(members, group cost)``.

    Examples
    --------
    >>> fused_saving(["a", "b", "c"], [(("a", "b"), 5.0), (("b", "c"), 9.0)],
    ...              {"a": 4.0, "b": 4.0, "c": 8.0})
    3.0
    """
    pos = {n: i for i, n in enumerate(order)}
    found = []
    for members, c in groups:
        idx = [pos.get(n) for n in members]
        if None in idx or not math.isfinite(c):
            continue
        if idx == list(range(idx[0], idx[0] + len(idx))):  # type: ignore[operator]
            save = sum(cost[n] for n in members) - c
            if save > 0:
                found.append((save, set(members)))
    taken: set[str] = set()
    total = 0.0
    for save, members in sorted(found, key=lambda x: -x[0]):
        if not members & taken:
            total += save
            taken |= members
    return total
