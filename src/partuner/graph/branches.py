"""Parallel branch groups: the fork/join structures whose branches can run at the same time."""

from __future__ import annotations

from dataclasses import dataclass

from partuner.dag import ROOT, fork_join_groups
from partuner.graph.model import ModelGraph

__all__ = ["BranchGroup", "parallel_branch_groups"]


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
                p = ROOT
            else:
                continue  # an initializer
            if p not in preds[i]:
                preds[i].append(p)
                if p != ROOT:
                    succs[p].append(i)

    return [
        BranchGroup(
            nodes[fork].name if fork != ROOT else None,
            nodes[join].name,
            tuple(tuple(nodes[i].name for i in br) for br in branches),
        )
        for fork, join, branches in fork_join_groups(preds, succs, const)
    ]
