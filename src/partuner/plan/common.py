"""Pieces shared by the schedulers: upward rank, insertion slots and makespan lower bounds.

All functions expect a validated :class:`~partuner.plan.problem.Problem`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from partuner.plan.problem import Problem

__all__ = [
    "upward_rank",
    "earliest_insertion",
    "critical_path_bound",
    "total_work_bound",
    "lower_bound",
    "min_cost",
    "mean_cost",
    "mean_comm",
]


def min_cost(problem: Problem, node: str) -> float:
    """The smallest cost of ``node`` over all units, less the largest saving of a fused group
    it belongs to (so bounds built on it stay valid when groups run fused)."""
    best = min(problem.cost[node][u] for u in problem.units)
    saving = max(
        (g.saving(problem, u) for g in problem.groups_of(node) for u in problem.units),
        default=0.0,
    )
    return max(0.0, best - saving)


def mean_cost(problem: Problem, node: str) -> float:
    """The mean cost of ``node`` over the units that can run it (HEFT's and CPOP's weight)."""
    finite = [c for c in (problem.cost[node][u] for u in problem.units) if math.isfinite(c)]
    return sum(finite) / len(finite)


def mean_comm(problem: Problem, src: str, dst: str) -> float:
    """The mean transfer ``src -> dst`` over pairs of distinct units that can run the ends."""
    nbytes = problem.pair_nbytes(src, dst)
    times = [
        problem.transfer_us(u, v, nbytes)
        for u in problem.runnable_units(src)
        for v in problem.runnable_units(dst)
        if u != v
    ]
    return sum(times) / len(times) if times else 0.0


def upward_rank(problem: Problem) -> dict[str, float]:
    """The upward rank of every node (Topcuoglu, Hariri and Wu 2002, eq. 7).

    ``rank(n) = mean cost of n + max over successors s of (mean transfer(n, s) + rank(s))``,
    where a mean cost is over the units that can run the node and a mean transfer is over the
    pairs of distinct units that can run the two ends.

    Parameters
    ----------
    problem : Problem
        A validated problem.

    Returns
    -------
    dict
        ``{node: rank}`` in µs; a node's rank is at least each successor's.

    Examples
    --------
    >>> from partuner.plan.problem import Problem, Edge
    >>> p = Problem(["a", "b"], ["u", "v"], {"a": {"u": 2, "v": 4}, "b": {"u": 1, "v": 1}},
    ...             [Edge("a", "b", 0)])
    >>> upward_rank(p)
    {'b': 1.0, 'a': 4.0}
    """
    rank: dict[str, float] = {}
    for n in reversed(problem.nodes):
        tail = max((mean_comm(problem, n, s) + rank[s] for s in problem.succs(n)), default=0.0)
        rank[n] = mean_cost(problem, n) + tail
    return rank


def earliest_insertion(busy: Sequence[tuple[float, float]], ready: float, duration: float) -> float:
    """The earliest start ``>= ready`` of a ``duration``-long job among ``busy`` intervals.

    The insertion policy of HEFT: the job may go into an idle gap between two busy intervals if
    it fits, else after the last one.

    Parameters
    ----------
    busy : sequence of (start, end)
        The unit's busy intervals, sorted and not overlapping.
    ready : float
        When the job's inputs are all available.
    duration : float
        How long the job runs.

    Returns
    -------
    float
        The start time.

    Examples
    --------
    >>> earliest_insertion([(0, 5), (8, 12)], ready=1, duration=3)
    5
    >>> earliest_insertion([(0, 5), (8, 12)], ready=1, duration=4)
    12
    """
    # Intervals ending at or before ``ready`` cannot delay the job.
    i = bisect_right(busy, ready, key=lambda iv: iv[1])
    prev_end = busy[i - 1][1] if i > 0 else ready
    for start, end in busy[i:]:
        candidate = max(ready, prev_end)
        if candidate + duration <= start:
            return candidate
        prev_end = end
    return max(ready, prev_end)


def critical_path_bound(problem: Problem, *, partitions: bool = False) -> float:
    """The longest path through the DAG with each node at its minimum cost, transfers ignored;
    with ``partitions``, plus the least call overhead of a unit.

    No schedule can finish earlier: a path's nodes run one after another. No plan can finish
    earlier than that plus a call overhead: the partition holding the path's first node is
    called before it runs.

    >>> from partuner.plan.problem import Problem, Edge
    >>> p = Problem(["a", "b", "c"], ["u"], {"a": {"u": 2}, "b": {"u": 3}, "c": {"u": 4}},
    ...             [Edge("a", "b", 0), Edge("a", "c", 0)])
    >>> critical_path_bound(p)
    6.0
    """
    finish: dict[str, float] = {}
    for n in problem.nodes:
        start = max((finish[p] for p in problem.preds(n)), default=0)
        finish[n] = start + min_cost(problem, n)
    if not finish:
        return 0.0
    # the path's first partition pays its unit's call overhead before any of its nodes run
    return max(finish.values()) + (_least_overhead(problem, width=False) if partitions else 0.0)


def _least_overhead(problem: Problem, width: bool) -> float:
    """The least call overhead any unit charges a partition (times its resources if
    ``width``): every plan has at least one partition."""
    return min(
        (
            problem.call_overhead_us.get(u, 0.0) * (len(problem.resources_of(u)) if width else 1)
            for u in problem.units
        ),
        default=0.0,
    )


def total_work_bound(problem: Problem, *, partitions: bool = False) -> float:
    """The least hardware-time the nodes need, divided by the hardware there is.

    A node on unit ``u`` occupies ``u``'s resources (``Problem.resources``; by default one of
    its own) for its cost, so it needs at least ``min_u cost[n][u] * |resources(u)|`` resource-µs;
    no schedule can finish before the sum of these over all nodes, divided by the number of
    distinct resources. With ``partitions`` (a bound on plans), the least call overhead times its
    unit's resources is added to the sum: some partition is called. With one resource per unit
    and no call overhead, this is the sum of the nodes' minimum costs divided by the number of
    units.

    >>> from partuner.plan.problem import Problem
    >>> total_work_bound(Problem(["a", "b"], ["u", "v"], {"a": {"u": 2, "v": 9},
    ...                                                   "b": {"u": 4, "v": 4}}))
    3.0
    """
    if not problem.units:
        return 0.0
    width = {u: len(problem.resources_of(u)) for u in problem.units}
    total = len({r for u in problem.units for r in problem.resources_of(u)})
    need = 0.0
    for n in problem.nodes:
        # a fused group may make its members cheaper than their own costs
        saving = max(
            (g.saving(problem, u) for g in problem.groups_of(n) for u in problem.units),
            default=0.0,
        )
        need += min(
            (
                max(0.0, problem.cost[n][u] - saving) * width[u]
                for u in problem.units
                if math.isfinite(problem.cost[n][u])
            ),
            default=0.0,
        )
    if partitions and problem.nodes:
        need += _least_overhead(problem, width=True)  # at least one partition is called
    return need / total


def lower_bound(problem: Problem, *, partitions: bool = False) -> float:
    """The larger of :func:`critical_path_bound` and :func:`total_work_bound`: a bound on
    node-level schedules, or with ``partitions`` on the predicted latency of plans. Found
    once per problem (a problem is not changed once built; every scheduler asks)."""
    memo = problem.__dict__.setdefault("_lower_bounds", {})
    if partitions not in memo:
        memo[partitions] = float(
            max(
                critical_path_bound(problem, partitions=partitions),
                total_work_bound(problem, partitions=partitions),
            )
        )
    return memo[partitions]
