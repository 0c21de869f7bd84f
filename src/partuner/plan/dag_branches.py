"""Branches of a problem's DAG: NEST-C's chains and levels, and parallel branch groups.

Pure functions of a :class:`~partuner.plan.problem.Problem`'s nodes and edges (costs are not
read). :func:`nest_branches` and :func:`nest_siblings` cut the DAG the way NEST-C's
PartitionTuner does (lib/Partitioner/NestPartitioner.cpp); :func:`parallel_groups` finds the
fork/join groups of independent branches, as :func:`partuner.graph.parallel_branch_groups` does
on an ONNX model.
"""

from __future__ import annotations

from dataclasses import dataclass

from partuner.dag import ROOT as _ROOT
from partuner.dag import fork_join_groups
from partuner.plan.problem import Problem

__all__ = [
    "Branch",
    "ParallelGroup",
    "Siblings",
    "nest_branches",
    "nest_siblings",
    "parallel_groups",
]


@dataclass(frozen=True)
class Branch:
    """A chain of nodes, listed input to output, at a nesting ``level`` (0: ends at an output)."""

    nodes: tuple[str, ...]
    level: int


@dataclass(frozen=True)
class Siblings:
    """The branches feeding one ``join`` node: NEST-C's candidates for running in parallel."""

    join: str
    branches: tuple[Branch, ...]


@dataclass(frozen=True)
class ParallelGroup:
    """Two or more branches that leave the same ``fork`` and meet at the same ``join``.

    ``fork`` is ``None`` when the branches start at the graph inputs. Each branch lists its
    nodes in topological order and is never empty; no path joins two branches of a group.
    """

    fork: str | None
    join: str
    branches: tuple[tuple[str, ...], ...]


def nest_branches(problem: Problem) -> list[Branch]:
    """Cut a DAG into NEST-C's branches: maximal chains, each at a nesting level.

    Walking back from the outputs (nodes without successors), a branch grows from a node to its
    producer while the node reads only that producer and the producer feeds only that node. A
    node reading several nodes is a join, and each of its producers ends a new branch one level
    deeper; a producer feeding several nodes (a fork) also ends a branch one level deeper. A
    branch reached from several deeper walks takes the deepest level found (NEST-C keeps the
    first its depth-first walk finds); so every branch is deeper than the branches reading it,
    and listing the branches deepest level first lists every node after its inputs.

    Parameters
    ----------
    problem : Problem
        A problem whose nodes are in topological order.

    Returns
    -------
    list of Branch
        Every node in exactly one branch, branches sorted by decreasing level, then by the
        topological position of their first node.

    Examples
    --------
    A diamond ``a -> (b, c) -> d``: ``d`` joins ``b`` and ``c``, and ``a`` forks.

    >>> from partuner.plan.problem import Edge, Problem
    >>> def dag(nodes, pairs):
    ...     cost = {n: {"u": 1.0} for n in nodes}
    ...     return Problem(list(nodes), ["u"], cost, [Edge(a, b, 0) for a, b in pairs])
    >>> diamond = dag("abcd", ["ab", "ac", "bd", "cd"])
    >>> [(b.nodes, b.level) for b in nest_branches(diamond)]
    [(('a',), 2), (('b',), 1), (('c',), 1), (('d',), 0)]
    >>> [b.nodes for b in nest_branches(dag("abc", ["ab", "bc"]))]
    [('a', 'b', 'c')]

    A fork without a join: three outputs at level 0, the fork one level deeper.

    >>> [(b.nodes, b.level) for b in nest_branches(dag("abcd", ["ab", "ac", "ad"]))]
    [(('a',), 1), (('b',), 0), (('c',), 0), (('d',), 0)]
    """
    chain_of: dict[str, int] = {}
    chains: list[list[str]] = []
    for n in problem.nodes:
        preds = problem.preds(n)
        if len(preds) == 1 and problem.succs(preds[0]) == [n]:
            chain = chain_of[preds[0]]
            chains[chain].append(n)
        else:
            chain = len(chains)
            chains.append([n])
        chain_of[n] = chain
    # A chain's readers start later chains, so going by decreasing last node sees them first.
    level = [0] * len(chains)
    for i in sorted(range(len(chains)), key=lambda i: -problem.index(chains[i][-1])):
        readers = problem.succs(chains[i][-1])
        level[i] = max((level[chain_of[s]] + 1 for s in readers), default=0)
    order = sorted(range(len(chains)), key=lambda i: (-level[i], problem.index(chains[i][0])))
    return [Branch(tuple(chains[i]), level[i]) for i in order]


def nest_siblings(problem: Problem, branches: list[Branch] | None = None) -> list[Siblings]:
    """The sibling branches of every join: the branches that end at the join's producers.

    Parameters
    ----------
    problem : Problem
        A problem whose nodes are in topological order.
    branches : list of Branch, optional
        :func:`nest_branches` of ``problem`` (computed when not given).

    Returns
    -------
    list of Siblings
        One entry per node reading two or more nodes, in topological order of the joins; the
        branches in topological order of their last node. A branch ending at a fork may be a
        sibling at several joins.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Problem
    >>> pairs = ["ab", "bc", "ad", "cd"]  # a -> b -> c -> d and a -> d
    >>> p = Problem(list("abcd"), ["u"], {n: {"u": 1.0} for n in "abcd"},
    ...             [Edge(x, y, 0) for x, y in pairs])
    >>> [(s.join, [b.nodes for b in s.branches]) for s in nest_siblings(p)]
    [('d', [('a',), ('b', 'c')])]
    """
    if branches is None:
        branches = nest_branches(problem)
    ending_at = {b.nodes[-1]: b for b in branches}
    out = []
    for n in problem.nodes:
        preds = problem.preds(n)
        if len(preds) >= 2:
            out.append(Siblings(n, tuple(ending_at[p] for p in preds)))
    return out


def parallel_groups(problem: Problem) -> list[ParallelGroup]:
    """Find the groups of parallel branches: forks and joins with independent paths between.

    A parallel branch group is a set of two or more branches that share the same fork node and
    the same join node, with no path between them. For each join (a node with two or more
    producers; a node without producers reads the graph inputs) the fork is its immediate
    dominator, and the nodes on paths from the fork to the join split into connected pieces;
    each piece whose nodes feed only each other or the join is one branch. A piece with an edge
    leaving the fork/join region is not a branch. When groups nest, the outer group's branch
    holds the whole inner group, so its nodes form a sub-graph rather than a chain.

    Parameters
    ----------
    problem : Problem
        A problem whose nodes are in topological order.

    Returns
    -------
    list of ParallelGroup
        Groups with at least two branches, sorted by the topological position of the fork
        (groups forking at the graph inputs first), then of the join.

    Examples
    --------
    >>> from partuner.plan.problem import Edge, Problem
    >>> def dag(nodes, pairs):
    ...     cost = {n: {"u": 1.0} for n in nodes}
    ...     return Problem(list(nodes), ["u"], cost, [Edge(a, b, 0) for a, b in pairs])
    >>> parallel_groups(dag("abcd", ["ab", "ac", "bd", "cd"]))
    [ParallelGroup(fork='a', join='d', branches=(('b',), ('c',)))]

    Nested: the outer group's first branch holds the inner diamond ``b -> (c, d) -> e``.

    >>> nested = dag("abcdefg", ["ab", "bc", "bd", "ce", "de", "af", "eg", "fg"])
    >>> [(g.fork, g.join, g.branches) for g in parallel_groups(nested)]
    [('a', 'g', (('b', 'c', 'd', 'e'), ('f',))), ('b', 'e', (('c',), ('d',)))]

    No join, no group; two inputs meeting form a group without a fork.

    >>> parallel_groups(dag("abc", ["ab", "ac"]))
    []
    >>> parallel_groups(dag("abc", ["ac", "bc"]))
    [ParallelGroup(fork=None, join='c', branches=(('a',), ('b',)))]
    """
    nodes = problem.nodes
    preds = [[problem.index(p) for p in problem.preds(n)] or [_ROOT] for n in nodes]
    succs = [[problem.index(s) for s in problem.succs(n)] for n in nodes]
    return [
        ParallelGroup(
            nodes[fork] if fork != _ROOT else None,
            nodes[join],
            tuple(tuple(nodes[i] for i in br) for br in branches),
        )
        for fork, join, branches in fork_join_groups(preds, succs)
    ]
