"""Canonical DAGs, unit sets and hypothesis strategies shared by the plan tests.

The other ``test_plan_*`` modules import from here; the tests below pin the cases' hand-computed
lower bounds so a change to a case is noticed.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from partuner.errors import PartitionCycleError
from partuner.plan import (
    Edge,
    Link,
    Partition,
    Problem,
    critical_path_bound,
    simulate,
    total_work_bound,
)

INF = math.inf

# Hypothesis: reproducible and small, so the plan tests stay fast.
PROPERTY = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# name -> (nodes, edges as (src, dst) pairs)
DAGS: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    "empty": ([], []),
    "one": (["a"], []),
    "chain": (["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "d")]),
    "fork": (["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("a", "d")]),
    "join": (["a", "b", "c", "d"], [("a", "d"), ("b", "d"), ("c", "d")]),
    "diamond": (["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]),
    "two_branch": (
        ["a", "b1", "b2", "c1", "c2", "d"],
        [("a", "b1"), ("b1", "b2"), ("b2", "d"), ("a", "c1"), ("c1", "c2"), ("c2", "d")],
    ),
    "wide_fanout": (
        ["a", *[f"x{i}" for i in range(8)], "z"],
        [("a", f"x{i}") for i in range(8)] + [(f"x{i}", "z") for i in range(8)],
    ),
}


def base_cost(i: int) -> float:
    """The cost of the i-th node on a speed-1 unit: 1..5 µs, varied."""
    return float(1 + (i * 7) % 5)


# name -> (units with speed factor, a predicate "unit cannot run node i", links, overheads)
UNIT_SETS = {
    "one_unit": ({"u0": 1.0}, None, {}, {}),
    "two_equal": ({"u0": 1.0, "u1": 1.0}, None, {("u0", "u1"): Link(1.0, 10.0)}, {}),
    "two_unequal_slow_link": (
        {"fast": 1.0, "slow": 3.0},
        None,
        {("fast", "slow"): Link(50.0, 0.1)},
        {"slow": 2.0},
    ),
    "some_infinite": (
        {"cpu": 2.0, "npu": 0.5},
        lambda unit, i: unit == "npu" and i % 3 == 1,
        {("cpu", "npu"): Link(5.0, 1.0)},
        {"npu": 10.0},
    ),
    # a 2-core machine offering two 1-thread units and one 2-thread unit on both cores
    "shared_cores": (
        {"cpu0": 1.0, "cpu1": 1.0, "cpu01": 0.6},
        None,
        {},
        {"cpu01": 1.0},
    ),
    "more_units_than_nodes": (
        {f"u{j}": 1.0 + 0.5 * j for j in range(12)},
        None,
        {("u0", "u1"): Link(0.0, math.inf), ("u2", "u0"): Link(3.0, 0.5)},
        {"u3": 1.0},
    ),
}


# unit set -> the hardware each unit occupies (units sharing a resource never overlap)
RESOURCES = {
    "shared_cores": {"cpu0": {"core0"}, "cpu1": {"core1"}, "cpu01": {"core0", "core1"}},
}


def make_problem(dag: str, unit_set: str) -> Problem:
    """The canonical DAG ``dag`` on the unit set ``unit_set``."""
    nodes, pairs = DAGS[dag]
    speeds, cannot, links, overheads = UNIT_SETS[unit_set]
    cost = {
        n: {
            u: INF if cannot is not None and cannot(u, i) else base_cost(i) * f
            for u, f in speeds.items()
        }
        for i, n in enumerate(nodes)
    }
    edges = [Edge(s, d, 1000 * (k + 1), (f"{s}_out",)) for k, (s, d) in enumerate(pairs)]
    return Problem(
        nodes=list(nodes),
        units=list(speeds),
        cost=cost,
        edges=edges,
        links=dict(links),
        default_link=Link(2.0, 5.0),
        call_overhead_us=dict(overheads),
        modeled=frozenset({"npu"}) if "npu" in speeds else frozenset(),
        name=f"{dag}@{unit_set}",
        resources={u: frozenset(r) for u, r in RESOURCES.get(unit_set, {}).items()},
    )


CASES = [(d, u) for d in DAGS for u in UNIT_SETS]

COSTS = st.one_of(
    st.sampled_from([0.0, 1.0, 2.0, 5.0, 10.0]),
    st.floats(min_value=0.0, max_value=100.0, allow_nan=False),
)


@st.composite
def problems(draw, max_nodes: int = 8, max_units: int = 4, degenerate: bool = False) -> Problem:
    """Random DAGs in topological order with random costs (some infinite, never all), zero
    costs and ties, random link latencies and bandwidths, and call overheads.

    ``degenerate`` draws mostly zero costs and free links, where many times coincide.
    """
    costs = st.sampled_from([0.0, 0.0, 1.0]) if degenerate else COSTS
    n = draw(st.integers(0, max_nodes))
    units = [f"u{j}" for j in range(draw(st.integers(1, max_units)))]
    nodes = [f"n{i}" for i in range(n)]
    cost: dict[str, dict[str, float]] = {}
    for node in nodes:
        row = {u: draw(st.one_of(st.just(INF), costs)) for u in units}
        if all(math.isinf(c) for c in row.values()):
            row[draw(st.sampled_from(units))] = draw(costs)
        cost[node] = row
    edges = []
    for j in range(n):
        for i in range(j):
            if draw(st.integers(0, 2)) == 0:
                nbytes = draw(st.sampled_from([0, 100, 4096, 10**6]))
                edges.append(Edge(nodes[i], nodes[j], nbytes, (f"{nodes[i]}_out",)))
    bandwidth = st.just(INF) if degenerate else st.sampled_from([0.01, 1.0, 16.0, INF])
    latency = st.just(0.0) if degenerate else st.sampled_from([0.0, 1.0, 20.0])
    links = {}
    for a in range(len(units)):
        for b in range(a + 1, len(units)):
            if draw(st.booleans()):
                links[(units[a], units[b])] = Link(draw(latency), draw(bandwidth))
    overhead = {u: draw(st.sampled_from([0.0, 0.0, 3.0])) for u in units}
    written = {u: draw(st.sampled_from([0.0, 0.0, 1e-3])) for u in units}
    # Some units share hardware: each unit holds one or two of a few cores.
    resources = {}
    if len(units) > 1 and draw(st.booleans()):
        cores = [f"c{k}" for k in range(len(units) - 1)]
        for u in units:
            resources[u] = frozenset(
                draw(st.lists(st.sampled_from(cores), min_size=1, max_size=2, unique=True))
            )
    return Problem(
        nodes=nodes,
        units=units,
        cost=cost,
        edges=edges,
        links=links,
        default_link=Link(draw(latency), draw(bandwidth)),
        call_overhead_us=overhead,
        boundary_out_us_per_byte={u: r for u, r in written.items() if r},
        modeled=frozenset(u for u in units if draw(st.booleans())),
        name="random",
        resources=resources,
    )


@pytest.mark.parametrize(
    ("dag", "cp", "work"),
    [
        ("empty", 0.0, 0.0),
        ("one", 1.0, 1.0),
        ("chain", 1 + 3 + 5 + 2, 11.0),
        ("fork", 1 + 5, 11.0),
        ("diamond", 1 + 5 + 2, 11.0),
        ("join", 5 + 2, 11.0),
        ("two_branch", 1 + 3 + 5 + 1, 1 + 3 + 5 + 2 + 4 + 1),
    ],
)
def test_canonical_bounds_on_one_unit(dag: str, cp: float, work: float) -> None:
    # base costs by index: 1, 3, 5, 2, 4, 1, 3, ...
    p = make_problem(dag, "one_unit")
    assert critical_path_bound(p) == cp
    assert total_work_bound(p) == work


def test_infinite_unit_set_blocks_every_third_node() -> None:
    p = make_problem("chain", "some_infinite")
    assert [p.runnable_units(n) for n in p.nodes] == [
        ["cpu", "npu"],
        ["cpu"],
        ["cpu", "npu"],
        ["cpu", "npu"],
    ]


# -- every plan of a tiny problem: the true optimum of the partition simulation -------------


def topological_orders(p: Problem):
    """Every order of ``p.nodes`` that lists each node after its inputs."""
    placed: list[str] = []
    left = set(p.nodes)

    def walk():
        if not left:
            yield list(placed)
            return
        for n in sorted(left, key=p.index):
            if all(q not in left for q in p.preds(n)):
                left.remove(n)
                placed.append(n)
                yield from walk()
                placed.pop()
                left.add(n)

    yield from walk()


def cut(sequence: list[str], cuts: int) -> list[list[str]]:
    """``sequence`` cut after position i wherever bit i of ``cuts`` is set."""
    out = [[sequence[0]]]
    for i, n in enumerate(sequence[1:]):
        if cuts >> i & 1:
            out.append([n])
        else:
            out[-1].append(n)
    return out


def every_plan(p: Problem):
    """Every plan of a tiny problem, as partition lists that run (cyclic ones are skipped)."""
    seen = set()
    for order in topological_orders(p):
        for units in itertools.product(*(p.runnable_units(n) for n in order)):
            on: dict[str, list[str]] = {}
            for n, u in zip(order, units, strict=True):
                on.setdefault(u, []).append(n)
            per_unit = list(on.items())
            for cuts in itertools.product(*(range(2 ** (len(s) - 1)) for _, s in per_unit)):
                runs = [
                    (u, tuple(r))
                    for (u, s), c in zip(per_unit, cuts, strict=True)
                    for r in cut(s, c)
                ]
                # partitions listed in the order of their first node: each unit's in turn
                runs.sort(key=lambda r: order.index(r[1][0]))
                key = tuple(runs)
                if key in seen:
                    continue
                seen.add(key)
                yield [Partition(f"p{i}", u, ns) for i, (u, ns) in enumerate(runs)]


def optimum(p: Problem) -> float:
    best = math.inf
    for parts in every_plan(p):
        try:
            best = min(best, simulate(p, parts).makespan_us)
        except PartitionCycleError:
            continue
    return best
