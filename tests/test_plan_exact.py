"""The exact (CP-SAT) scheduler, its decomposition, the auto scheduler and `partuner plan`'s
planning options.

Exact minimises the node-level makespan with partition-aware delays: ``cut_us`` across units
and a unit's call overhead before a node without inputs. :func:`cut_makespan` recomputes that
makespan for any schedule, independently of the implementation, so exact can be compared with
the heuristics on its own terms. The scheduler modules are imported inside the tests, so that
collecting this file does not register ``exact`` and ``auto`` for other test modules.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings

from partuner.cli import main
from partuner.errors import PartunerError
from partuner.plan import (
    Edge,
    Link,
    Problem,
    Schedule,
    get_scheduler,
    lower_bound,
    plan_from_schedule,
)
from test_plan_cases import CASES, PROPERTY, make_problem, problems

pytest.importorskip("ortools")

FEW = settings(PROPERTY, max_examples=30)


def _exact(**kw):
    from partuner.plan.exact import Exact

    return Exact(workers=1, **kw)


def _auto():
    from partuner.plan.auto import Auto

    return Auto(workers=1)


def _heuristics() -> list[str]:
    from partuner.plan.exact import heuristic_names

    return heuristic_names()


def cut_makespan(p: Problem, s: Schedule) -> float:
    """The makespan of ``s``'s assignment and order re-timed under exact's delays."""
    sl = s.slots
    order = sorted(p.nodes, key=lambda n: (sl[n].start, sl[n].end, p.index(n)))
    free: dict[str, float] = {}
    end: dict[str, float] = {}
    for n in order:
        u = sl[n].unit
        t = max([free.get(r, 0.0) for r in p.resources_of(u)] + [0.0])
        if not p.preds(n):
            t = max(t, p.call_overhead_us.get(u, 0.0))
        for q in p.preds(n):
            t = max(t, end[q] + p.cut_us(q, n, sl[q].unit, u))
        end[n] = t + p.cost[n][u]
        for r in p.resources_of(u):
            free[r] = end[n]
    return max(end.values(), default=0.0)


def check_exact(p: Problem, s: Schedule, tick_us: float = 0.1) -> None:
    """Valid, obeys exact's own delays, bound below makespan, no worse than any heuristic."""
    s.validate(p)
    assert s.scheduler == "exact" and s.status in ("optimal", "feasible")
    for n, sl in s.slots.items():
        if not p.preds(n):
            assert sl.start >= p.call_overhead_us.get(sl.unit, 0.0) - 1e-9
        for q in p.preds(n):
            assert sl.start >= s.slots[q].end + p.cut_us(q, n, s.slots[q].unit, sl.unit) - 1e-9
    assert cut_makespan(p, s) == pytest.approx(s.makespan, rel=1e-9, abs=1e-9)
    assert lower_bound(p) - 1e-9 <= s.lower_bound <= s.makespan + 1e-9
    tol = 2 * (len(p.nodes) + 1) * tick_us + 1e-9 * s.makespan
    for name in _heuristics():
        try:
            h = get_scheduler(name).schedule(p)
        except PartunerError:
            continue
        assert s.makespan <= cut_makespan(p, h) + tol, name


def diamonds(k: int, units: tuple[str, ...] = ("u0", "u1", "u2"), seed: int = 0) -> Problem:
    """``k`` fork-join diamonds in a row: s0 -> (l0, r0) -> s1 -> ... -> sk."""
    rng = random.Random(seed)
    nodes, edges = ["s0"], []
    for i in range(k):
        a, b, c = f"l{i}", f"r{i}", f"s{i + 1}"
        nodes += [a, b, c]
        edges += [
            Edge(f"s{i}", a, 4000, (f"s{i}_o",)),
            Edge(f"s{i}", b, 4000, (f"s{i}_o",)),
            Edge(a, c, 2000, (f"{a}_o",)),
            Edge(b, c, 2000, (f"{b}_o",)),
        ]
    cost = {
        n: {u: rng.choice([5.0, 10.0, 20.0, 40.0]) * (1 + 0.3 * j) for j, u in enumerate(units)}
        for n in nodes
    }
    return Problem(
        nodes,
        list(units),
        cost,
        edges,
        default_link=Link(2.0, 10.0),
        call_overhead_us=dict.fromkeys(units, 3.0),
        name=f"diamonds{k}",
    )


# -- exact -------------------------------------------------------------------------------


@pytest.mark.parametrize(("dag", "units"), CASES)
def test_exact_on_canonical_cases(dag: str, units: str) -> None:
    p = make_problem(dag, units)
    s = _exact().schedule(p, time_limit=5)
    check_exact(p, s)
    assert s.status == "optimal"  # tiny: proved well within the limit


@FEW
@given(p=problems(max_nodes=8, max_units=4))
def test_exact_on_random_problems(p: Problem) -> None:
    check_exact(p, _exact().schedule(p, time_limit=5))


@FEW
@given(p=problems(max_nodes=7, max_units=3))
def test_exact_equals_brute_force_when_cuts_cost_only_transfers(p: Problem) -> None:
    from partuner.plan.oracle import brute_force

    # No call overhead (and no boundary cost): cut_us == comm_us, the oracle's delays.
    p = dataclasses.replace(
        p, call_overhead_us={}, boundary_us_per_byte={}, boundary_out_us_per_byte={}
    )
    s = _exact(tick_us=1e-3).schedule(p, time_limit=5)
    best = brute_force(p)
    assert s.status == "optimal"
    tol = 2 * (len(p.nodes) + 1) * 1e-3 + 1e-9 * best.makespan
    assert s.makespan == pytest.approx(best.makespan, abs=tol)
    assert s.lower_bound <= best.makespan + 1e-9


def test_no_time_means_no_proof() -> None:
    p = diamonds(12)
    s = _exact().schedule(p, time_limit=0.0)
    assert s.status == "feasible"
    check_exact(p, s)


def test_exact_prefers_one_unit_when_cuts_are_dear() -> None:
    # Two units, each branch a bit faster apart, but a cut costs far more than it saves.
    p = make_problem("diamond", "two_equal")
    p = dataclasses.replace(p, call_overhead_us={"u0": 50.0, "u1": 50.0})
    s = _exact().schedule(p, time_limit=5)
    assert len(set(s.assignment.values())) == 1 and s.status == "optimal"
    assert plan_from_schedule(p, s).predicted_us == pytest.approx(50.0 + 11.0)


def test_exact_without_ortools(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    p = make_problem("diamond", "two_equal")
    with pytest.raises(PartunerError, match=r"pip install partuner\[solver\]"):
        _exact().schedule(p)
    auto = _auto()
    auto.schedule(p, time_limit=1).validate(p)
    assert "exact" not in auto.runs and "heft" in auto.runs


# -- decomposition -------------------------------------------------------------------------


def test_articulation_nodes_and_regions() -> None:
    from partuner.plan.decompose import articulation_nodes, regions

    p = diamonds(40)
    assert articulation_nodes(p) == [f"s{i}" for i in range(41)]
    parts = regions(p, 20)
    assert [n for r in parts for n in r.nodes] == p.nodes
    assert all(len(r.nodes) <= 20 for r in parts)
    for a, b in zip(parts, parts[1:], strict=False):
        assert b.entry == a.exit == a.nodes[-1]


def test_decomposition_on_forty_diamonds() -> None:
    p = diamonds(40)
    s = _exact(max_nodes=30, region_nodes=20).schedule(p, time_limit=10)
    check_exact(p, s)
    assert s.lower_bound > lower_bound(p)  # the regions' bounds beat the generic one


def test_decomposition_is_exact_on_a_short_chain() -> None:
    p = diamonds(5, seed=3)
    whole = _exact().schedule(p, time_limit=10)
    split = _exact(max_nodes=4, region_nodes=4).schedule(p, time_limit=10)
    assert whole.status == split.status == "optimal"
    assert split.makespan == pytest.approx(whole.makespan, abs=2 * len(p.nodes) * 0.1)
    check_exact(p, split)


def test_a_region_share_too_small_to_pay_for_a_solve_takes_its_warm_start(monkeypatch) -> None:
    """A short budget over many regions and unit pairs: a job whose share does not pay for a
    solve's call (``CALL_S``) would get no search at all, only its charge; it takes its warm
    start (time 0) and leaves the time to the others. The plan and bound stay valid."""
    import partuner.plan.decompose as decompose
    from partuner.plan.clock import CALL_S, WorkClock

    p = diamonds(20)
    limits: list[float] = []
    real = decompose.solve

    def spy(inst, *, time_limit, **kw):
        limits.append(time_limit)
        return real(inst, time_limit=time_limit, **kw)

    monkeypatch.setattr(decompose, "solve", spy)
    clock = WorkClock(30.0)  # the work budget runs short, never the wall clock
    s = _exact(max_nodes=4, region_nodes=4).solve(p, time_limit=0.3, clock=clock)
    assert limits and all(t == 0 or t > CALL_S for t in limits), sorted(limits)[:5]
    assert 0 in limits  # the budget did run short here
    check_exact(p, s)


# -- auto ----------------------------------------------------------------------------------


def check_auto(p: Problem, time_limit: float = 2.0) -> None:
    auto = _auto()
    s = auto.schedule(p, time_limit=time_limit)
    s.validate(p)
    assert s.scheduler == "auto" and auto.chosen in auto.runs
    got = plan_from_schedule(p, s).predicted_us
    assert got == pytest.approx(auto.runs[auto.chosen].plan.predicted_us)
    for name, run in auto.runs.items():
        assert got <= run.plan.predicted_us + 1e-9, name
    assert s.lower_bound <= got * (1 + 1e-9) + 1e-9  # a bound on every plan's latency
    if s.status == "optimal":
        ex = auto.runs.get("exact")
        proved = ex is not None and ex.schedule.status == "optimal"
        assert (proved and auto.chosen == "exact") or got <= s.lower_bound * (1 + 1e-9) + 1e-9


@pytest.mark.parametrize(("dag", "units"), CASES)
def test_auto_never_worse_on_canonical_cases(dag: str, units: str) -> None:
    check_auto(make_problem(dag, units))


@FEW
@given(p=problems(max_nodes=8, max_units=4))
def test_auto_never_worse_on_random_problems(p: Problem) -> None:
    check_auto(p, time_limit=1.0)


def test_auto_local_search_merges_a_needless_cut() -> None:
    from partuner.plan.auto import Run, improve, list_schedule

    p = make_problem("chain", "two_equal")  # a cut only adds a transfer
    split = {"a": "u0", "b": "u1", "c": "u0", "d": "u1"}
    s = list_schedule(p, split, p.nodes, "test")
    start = Run(s, plan_from_schedule(p, s), 0.0)
    got = improve(p, start, math.inf, "test")
    assert len(got.plan.partitions) == 1 and got.plan.predicted_us == pytest.approx(11.0)


# -- CLI -----------------------------------------------------------------------------------


def _invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_plan_load_problem_explain_and_json(tmp_path, branchy_file, units_file, db) -> None:
    prob = tmp_path / "prob.json"
    common = ("--compare", "--json", "--time-limit", "1")
    r = _invoke(
        "plan", branchy_file, "--units", units_file, "--db", db, "--dump-problem", prob, *common
    )
    assert r.exit_code == 0, r.output
    first = json.loads(r.output)
    r = _invoke("plan", "--load-problem", prob, *common, "--explain", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    for key in ("predicted_ms", "scheduler", "lower_bound_ms", "status", "critical_path_bound_ms"):
        assert key in res
    assert res["lower_bound_ms"] <= res["predicted_ms"] + 1e-9
    assert res["critical_path_bound_ms"] <= res["lower_bound_ms"] + 1e-9
    runs = res["schedulers"]
    assert {"heft", "single", "exact", "auto"} <= set(runs)
    assert all({"predicted_ms", "solve_s", "status"} <= set(v) for v in runs.values())
    assert res["predicted_ms"] <= min(v["predicted_ms"] for v in runs.values()) + 1e-9
    for name in ("heft", "single"):  # deterministic: the dumped problem is the same problem
        assert runs[name]["predicted_ms"] == pytest.approx(
            first["schedulers"][name]["predicted_ms"]
        )
    names = [p["name"] for p in res["partitions"]]
    assert [e["partition"] for e in res["explain"]] == names
    doc = yaml.safe_load((tmp_path / "p.yaml").read_text())["partuner"]
    problem = Problem.from_json(prob.read_text())
    assert sorted(n for part in doc["partitions"] for n in part["nodes"]) == sorted(problem.nodes)

    r = _invoke(
        "plan", "--load-problem", prob, "--time-limit", "1", "--explain", "--scheduler", "heft"
    )
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if " on " in x and "nodes;" in x]
    heft = plan_from_schedule(problem, get_scheduler("heft").schedule(problem))
    assert [x.split()[0] for x in lines] == [p.name for p in heft.partitions]


def test_plan_without_model_or_problem_fails_cleanly(tmp_path) -> None:
    r = _invoke("plan")
    assert r.exit_code == 2 and "--load-problem" in r.output
    r = _invoke("plan", "--load-problem", tmp_path / "none.json")
    assert r.exit_code == 2 and "not found" in r.output


def test_a_solve_started_at_the_cap_still_gets_its_minimum_wall_time() -> None:
    """A solve stopped by the wall clock during its presolve can abort the process (OR-Tools
    9.15, ``plan/clock.py``): one made when the cap has passed is given MIN_WALL_S all the
    same, and its deterministic budget stays what was asked."""
    from ortools.sat.python import cp_model

    from partuner.plan.clock import MIN_WALL_S, WorkClock

    clock = WorkClock(0.0)
    solver = clock.solver(cp_model, 1.0, 1, 0)
    assert solver.parameters.max_time_in_seconds >= MIN_WALL_S
    assert 0 < solver.parameters.max_deterministic_time < 1.0
    late = WorkClock(60.0)
    assert late.solver(cp_model, 1.0, 1, 0).parameters.max_time_in_seconds > 59
