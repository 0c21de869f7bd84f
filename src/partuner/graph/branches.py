"""Parallel branch groups: the fork/join structures whose branches can run at the same time."""

from __future__ import annotations

from dataclasses import dataclass

from partuner.graph.model import ModelGraph

__all__ = ["BranchGroup", "parallel_branch_groups"]

_ROOT = -1  # index of the virtual node standing for the graph inputs


@dataclass(frozen=True)
class BranchGroup:
    """Two or more branches that leave the same fork node and meet at the same join node.

    ``fork`` is ``None`` when the branches start at the graph inputs. Each branch lists its node
    names in topological order; a branch is never empty (a direct fork -> join edge, such as a
    ResNet identity shortcut, is not a branch).
    """

    fork: str | None
    join: str
    branches: tuple[tuple[str, ...], ...]


def parallel_branch_groups(graph: ModelGraph) -> list[BranchGroup]:
    """Find the groups of parallel branches of a model: forks and joins with independent paths.

    A branch is a chain of sequentially connected nodes; a parallel branch group is a set of two
    or more branches that share the same fork node and the same join node, with no path between
    them. Concretely, for each join (a node with two or more producers) the fork is its immediate
    dominator, and the nodes on paths from fork to join split into connected pieces; each piece
    whose nodes feed only each other or the join is one branch. A piece with an edge leaving the
    fork/join region (a side output) is not a branch. When groups nest, the outer group's branch
    holds the whole inner group, so its nodes form a sub-graph rather than a chain.

    Constant nodes (:meth:`ModelGraph.is_constant`: ``Constant`` nodes, ``Identity`` copies of
    weights) are ignored: they neither fork nor join, and belong to no branch.

    Parameters
    ----------
    graph : ModelGraph
        A loaded model (see :func:`partuner.graph.load_model`).

    Returns
    -------
    list of BranchGroup
        Groups with at least two non-empty branches, sorted by the topological position of the
        fork (groups forking at the graph inputs first), then of the join.

    Examples
    --------
    Every fire module of SqueezeNet 1.1 is a group of two branches:

    >>> from partuner.graph import load_model, zoo
    >>> g = load_model(zoo.build("squeezenet", image_size=32))
    >>> groups = parallel_branch_groups(g)
    >>> len(groups), {len(grp.branches) for grp in groups}
    (8, {2})
    >>> groups[0].fork, groups[0].join
    ('features.3.squeeze_activation', 'features.3.concat')
    >>> groups[0].branches[1]
    ('features.3.expand3x3', 'features.3.expand3x3_activation')
    """
    nodes = graph.nodes
    index = {n.name: i for i, n in enumerate(nodes)}
    const = {index[name] for name in graph.constant_nodes}
    preds: list[list[int]] = [[] for _ in nodes]
    succs: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        if i in const:
            continue
        for v in n.inputs:
            if not v:
                continue
            info = graph.values[v]
            if info.producer is not None:
                p = index[info.producer]
                if p in const:
                    continue
            elif info.is_graph_input:
                p = _ROOT
            else:
                continue  # an initializer
            if p not in preds[i]:
                preds[i].append(p)
                if p != _ROOT:
                    succs[p].append(i)

    idom = _immediate_dominators(preds, const)
    groups: list[tuple[int, int, BranchGroup]] = []
    for j in range(len(nodes)):
        if len(preds[j]) < 2:
            continue
        fork = idom[j]
        region = _region(j, fork, preds)
        branches = []
        for piece in _pieces(region, preds, succs):
            if all(s in piece or s == j for i in piece for s in succs[i]):
                branches.append(tuple(nodes[i].name for i in sorted(piece)))
        if len(branches) >= 2:
            branches.sort(key=lambda br: index[br[0]])
            name = nodes[fork].name if fork != _ROOT else None
            groups.append((fork, j, BranchGroup(name, nodes[j].name, tuple(branches))))
    groups.sort(key=lambda t: (t[0], t[1]))
    return [g for _, _, g in groups]


def _immediate_dominators(preds: list[list[int]], skip: set[int]) -> list[int]:
    """Immediate dominator of each node of a DAG in topological order (Cooper et al., 2001).

    The virtual root ``_ROOT`` dominates everything; nodes in ``skip`` get ``_ROOT``.
    """
    idom = [_ROOT] * len(preds)

    def intersect(a: int, b: int) -> int:
        while a != b:
            while a > b:
                a = idom[a]
            while b > a:
                b = idom[b]
        return a

    for i, ps in enumerate(preds):
        if i in skip or not ps:
            continue
        d = ps[0]
        for p in ps[1:]:
            d = intersect(d, p)
        idom[i] = d
    return idom


def _region(join: int, fork: int, preds: list[list[int]]) -> set[int]:
    """Nodes on paths from ``fork`` to ``join``, both excluded (``fork`` dominates ``join``)."""
    seen: set[int] = set()
    stack = [p for p in preds[join] if p != fork]
    while stack:
        i = stack.pop()
        if i in seen or i == _ROOT:
            continue
        seen.add(i)
        stack.extend(p for p in preds[i] if p != fork)
    return seen


def _pieces(region: set[int], preds: list[list[int]], succs: list[list[int]]) -> list[set[int]]:
    """Connected components of ``region``, edges taken in either direction."""
    left = set(region)
    out = []
    while left:
        start = left.pop()
        piece = {start}
        stack = [start]
        while stack:
            i = stack.pop()
            for k in (*preds[i], *succs[i]):
                if k in left:
                    left.remove(k)
                    piece.add(k)
                    stack.append(k)
        out.append(piece)
    return out
