"""Pure algorithms on DAGs given as integer adjacency lists, shared by ``graph`` and ``plan``.

Nodes are ``0..n-1`` in topological order; ``ROOT`` (-1) is a virtual node standing for the
graph inputs. This module imports nothing from partuner, so every stage may use it.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["ROOT", "fork_join_groups", "immediate_dominators"]

ROOT = -1  # the virtual node standing for the graph inputs


def fork_join_groups(
    preds: list[list[int]], succs: list[list[int]], skip: Collection[int] = ()
) -> list[tuple[int, int, list[list[int]]]]:
    """Parallel branch groups: ``(fork, join, branches)`` with each branch's nodes sorted.

    For each join (a node with two or more producers) the fork is its immediate dominator; the
    nodes on paths from the fork to the join split into connected pieces, and each piece whose
    nodes feed only each other or the join is a branch. Groups need two branches; they come
    sorted by fork, then join, and their branches by first node.

    Examples
    --------
    >>> fork_join_groups([[ROOT], [0], [0], [1, 2]], [[1, 2], [3], [3], []])
    [(0, 3, [[1], [2]])]
    """
    idom = immediate_dominators(preds, skip)
    groups = []
    for j, ps in enumerate(preds):
        if len(ps) < 2 or j in skip:
            continue
        fork = idom[j]
        branches = [
            sorted(piece)
            for piece in _pieces(_region(j, fork, preds), preds, succs)
            if all(s in piece or s == j for i in piece for s in succs[i])
        ]
        if len(branches) >= 2:
            groups.append((fork, j, sorted(branches)))
    groups.sort(key=lambda t: (t[0], t[1]))
    return groups


def immediate_dominators(preds: list[list[int]], skip: Collection[int] = ()) -> list[int]:
    """Immediate dominator of each node (Cooper, Harvey and Kennedy, 2001); ``ROOT`` dominates
    everything, and nodes in ``skip`` or without producers get ``ROOT``.

    >>> immediate_dominators([[ROOT], [0], [0], [1, 2]])
    [-1, 0, 0, 0]
    """
    idom = [ROOT] * len(preds)

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
        if i in seen or i == ROOT:
            continue
        seen.add(i)
        stack.extend(p for p in preds[i] if p != fork)
    return seen


def _pieces(region: set[int], preds: list[list[int]], succs: list[list[int]]) -> list[set[int]]:
    """Connected components of ``region``, edges taken in either direction."""
    pieces: list[set[int]] = []
    left = set(region)
    while left:
        start = min(left)
        piece = {start}
        stack = [start]
        while stack:
            i = stack.pop()
            for k in (*preds[i], *succs[i]):
                if k in left and k not in piece:
                    piece.add(k)
                    stack.append(k)
        left -= piece
        pieces.append(piece)
    return pieces
