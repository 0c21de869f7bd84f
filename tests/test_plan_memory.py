"""Per-unit memory capacity: the units' ``memory_mb``, the problem's weights and capacities, and
every scheduler keeping each unit within its memory.

A unit's use is the weights of its nodes plus the largest output one of them passes on
(``Problem.memory_use``); the tests recompute it by hand where it matters.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from partuner.cli import main
from partuner.errors import InfeasiblePlanError, InvalidScheduleError, PartunerError, UnitsFileError
from partuner.plan import (
    Edge,
    Link,
    Problem,
    Schedule,
    Slot,
    brute_force,
    get_scheduler,
    plan_from_assignment,
    plan_from_schedule,
    scheduler_names,
)
from partuner.plan.memory import Ledger, overflow, pack
from partuner.units import backend_names, get_backend, load_units
from test_plan_cases import CASES, INF, PROPERTY, make_problem, problems

NAMES = scheduler_names()
FEW = settings(PROPERTY, max_examples=40)


def chain(weights: dict[str, int], caps: dict[str, float], nbytes: int = 0) -> Problem:
    """A chain of the given nodes; ``u`` runs each node in 1 µs, ``v`` in 2 µs."""
    nodes = list(weights)
    return Problem(
        nodes=nodes,
        units=["u", "v"],
        cost={n: {"u": 1.0, "v": 2.0} for n in nodes},
        edges=[Edge(a, b, nbytes, (f"{a}_out",)) for a, b in zip(nodes, nodes[1:], strict=False)],
        default_link=Link(1.0, INF),
        weight_bytes=weights,
        memory_bytes=caps,
        name="chain",
    )


def use_by_hand(p: Problem, assignment: dict[str, str]) -> dict[str, int]:
    """Each unit's memory use, computed without the library's helpers."""
    out = {}
    for u in p.units:
        on = [n for n, w in assignment.items() if w == u]
        outputs = [
            sum({(e.src, e.values): e.nbytes for e in p.edges if e.src == n}.values()) for n in on
        ]
        out[u] = sum(p.weight_bytes.get(n, 0) for n in on) + max(outputs, default=0)
    return out


def feasible(p: Problem) -> bool:
    """Whether any placement keeps every unit within its memory (exhaustive depth-first
    search, roomiest units first, cut where a partial placement already overflows)."""

    def go(k: int, placed: dict[str, str]) -> bool:
        if overflow(p, placed) is not None:
            return False
        if k == len(p.nodes):
            return True
        n = p.nodes[k]
        able = sorted(p.runnable_units(n), key=lambda u: -p.capacity(u))
        return any(go(k + 1, {**placed, n: u}) for u in able)

    return go(0, {})


def check_memory_schedule(p: Problem, name: str) -> None:
    """``name`` plans ``p`` within every unit's memory when some placement fits, else raises
    InfeasiblePlanError; ``single`` only when one unit can hold the whole model."""
    try:
        p.validate()
    except InfeasiblePlanError:
        with pytest.raises(InfeasiblePlanError):
            get_scheduler(name).schedule(p, time_limit=2)
        return
    if not feasible(p):
        with pytest.raises(InfeasiblePlanError):
            get_scheduler(name).schedule(p, time_limit=2)
        return
    try:
        s = get_scheduler(name).schedule(p, time_limit=2)
    except InfeasiblePlanError as exc:
        assert name == "single", exc
        need = p.memory_use(p.nodes)
        assert not any(
            need <= p.capacity(u) and all(math.isfinite(p.cost[n][u]) for n in p.nodes)
            for u in p.units
        )
        return
    s.validate(p)
    use = use_by_hand(p, s.assignment)
    for u in p.units:
        assert use[u] <= p.capacity(u), (name, u, use[u], p.capacity(u))
    plan_from_schedule(p, s)  # the plan of a valid schedule simulates


# -- the memory model -------------------------------------------------------------------


def test_memory_use_is_weights_plus_the_largest_output() -> None:
    p = Problem(
        ["a", "b", "c"],
        ["u"],
        {n: {"u": 1.0} for n in "abc"},
        [Edge("a", "b", 300, ("x",)), Edge("a", "c", 300, ("x",)), Edge("b", "c", 50, ("y",))],
        weight_bytes={"a": 1000, "c": 7},
    )
    assert [p.activation_bytes(n) for n in "abc"] == [300, 50, 0]  # x counted once
    assert p.memory_use("abc") == 1007 + 300
    assert p.memory_use(["b", "c"]) == 7 + 50
    assert p.memory_use([]) == 0
    assert p.capacity("u") == INF and not p.memory_limited
    assert dataclasses.replace(p, memory_bytes={"u": 1307}).memory_limited is False
    assert dataclasses.replace(p, memory_bytes={"u": 1306}).memory_limited is True


def test_ledger_tracks_weights_and_peak() -> None:
    p = chain({"a": 10, "b": 20, "c": 5}, {"u": 100}, nbytes=40)
    ledger = Ledger(p)
    ledger.take("a", "u")
    assert ledger.use("u") == 10 + 40 and ledger.use_with("c", "u") == 15 + 40
    assert ledger.fits("b", "u") and ledger.room_after("b", "u") == 100 - 70
    assert ledger.fits("b", "v") and math.isinf(ledger.room_after("b", "v"))


# -- validation: the named errors ---------------------------------------------------------


def test_a_node_too_big_for_every_unit_is_named() -> None:
    p = chain({"a": 10, "big": 500, "c": 10}, {"u": 100, "v": 200})
    with pytest.raises(InfeasiblePlanError, match=r"node 'big' of 'chain' needs 500 bytes") as e:
        p.validate()
    assert "u 100 bytes, v 200 bytes" in str(e.value) and "memory_mb" in str(e.value)
    # it fits v, but only u can run it
    p = dataclasses.replace(
        chain({"a": 10, "big": 150}, {"u": 100, "v": 200}),
        cost={"a": {"u": 1.0, "v": 1.0}, "big": {"u": 1.0, "v": INF}},
    )
    with pytest.raises(InfeasiblePlanError, match=r"node 'big' .* no unit that can run it"):
        p.validate()
    for name in NAMES:
        with pytest.raises(InfeasiblePlanError, match="'big'"):
            get_scheduler(name).schedule(p)


def test_a_node_whose_output_is_too_big_is_named() -> None:
    p = chain({"a": 10, "b": 10}, {"u": 100, "v": 100}, nbytes=150)
    with pytest.raises(InfeasiblePlanError, match=r"'a' .* \(10 bytes of weights \+ 150 bytes"):
        p.validate()


def test_weights_beyond_the_units_together_are_refused() -> None:
    p = chain({"a": 80, "b": 80, "c": 80}, {"u": 100, "v": 100})
    with pytest.raises(InfeasiblePlanError) as e:
        p.validate()
    msg = str(e.value)
    assert "weights of 'chain' total 240 bytes" in msg and "hold 200 bytes together" in msg
    assert "(u 100 bytes, v 100 bytes): 40 bytes too much" in msg
    # an unlimited unit holds anything
    dataclasses.replace(p, memory_bytes={"u": 100}).validate()


def test_bad_memory_fields_are_refused() -> None:
    p = chain({"a": 1}, {"u": 10})
    for edit, msg in [
        ({"weight_bytes": {"zz": 1}}, "weight_bytes given for unknown node 'zz'"),
        ({"weight_bytes": {"a": -1}}, "weight_bytes of node 'a' must be an integer >= 0"),
        ({"weight_bytes": {"a": 1.5}}, "weight_bytes of node 'a' must be an integer"),
        ({"memory_bytes": {"w": 1.0}}, "memory_bytes given for unknown unit 'w'"),
        ({"memory_bytes": {"u": 0.0}}, "memory_bytes of unit 'u' must be > 0"),
        ({"memory_bytes": {"u": math.nan}}, "memory_bytes of unit 'u' must be > 0"),
    ]:
        with pytest.raises(PartunerError, match=msg):
            dataclasses.replace(p, **edit).validate()


def test_packing_that_fails_is_refused_by_every_scheduler() -> None:
    # each node fits each unit and 180 <= 200 together, but no two nodes share a unit
    p = chain({"a": 60, "b": 60, "c": 60}, {"u": 100, "v": 100})
    p.validate()
    assert pack(p) is None
    for name in NAMES:
        reason = "holds it in memory" if name == "single" else "no placement"
        with pytest.raises(InfeasiblePlanError, match=reason):
            get_scheduler(name).schedule(p, time_limit=2)
    with pytest.raises(InfeasiblePlanError, match="no placement"):
        brute_force(p)


# -- schedules and imported plans ------------------------------------------------------------


def test_validate_names_the_unit_its_use_and_capacity() -> None:
    p = chain({"a": 60, "b": 60}, {"u": 100}, nbytes=8)
    s = Schedule({"a": Slot("a", "u", 0, 1), "b": Slot("b", "u", 1, 2)}, "hand")
    with pytest.raises(InvalidScheduleError) as e:
        s.validate(p)
    assert str(e.value) == (
        "unit 'u' holds 128 bytes (120 bytes of weights + 8 bytes of activations) but its "
        "memory is 100 bytes; the schedule puts too much on it"
    )
    Schedule({"a": Slot("a", "u", 0, 1), "b": Slot("b", "v", 2, 4)}, "hand").validate(p)


def test_an_imported_plan_that_overfills_a_unit_is_refused() -> None:
    p = chain({"a": 60, "b": 60}, {"u": 100})
    with pytest.raises(InfeasiblePlanError, match=r"does not fit 'chain' in memory: unit 'u'"):
        plan_from_assignment(p, {"a": "u", "b": "u"})
    plan = plan_from_assignment(p, {"a": "u", "b": "v"})
    assert plan.node_unit == {"a": "u", "b": "v"}


# -- every scheduler --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_weights_force_a_chain_across_two_units(name: str) -> None:
    # u is twice as fast but holds only two of the four nodes
    p = chain({"a": 40, "b": 40, "c": 40, "d": 40}, {"u": 100, "v": 100})
    if name == "single":
        with pytest.raises(InfeasiblePlanError, match="no single unit .* holds it in memory"):
            get_scheduler(name).schedule(p)
        return
    s = get_scheduler(name).schedule(p, time_limit=2)
    s.validate(p)
    assert sorted(s.assignment.values()) == ["u", "u", "v", "v"]


def test_single_picks_the_cheapest_unit_that_holds_the_model() -> None:
    p = chain({"a": 40, "b": 40}, {"u": 60})
    assert set(get_scheduler("single").schedule(p).assignment.values()) == {"v"}
    p = dataclasses.replace(p, memory_bytes={"u": 80})
    assert set(get_scheduler("single").schedule(p).assignment.values()) == {"u"}


def test_static_repairs_a_placement_that_runs_out_of_memory() -> None:
    # static puts a on u (first with room); then b fits nowhere, so the placement is repaired
    p = chain({"a": 60, "b": 100}, {"u": 100, "v": 60})
    s = get_scheduler("static").schedule(p)
    s.validate(p)
    assert s.assignment == {"a": "v", "b": "u"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("dag", "units"), [c for c in CASES if c[1] != "one_unit"])
def test_canonical_cases_with_a_small_first_unit(name: str, dag: str, units: str) -> None:
    """Every canonical case, the first unit holding half of what the model needs."""
    p = make_problem(dag, units)
    weights = {n: 500 * (i % 3) for i, n in enumerate(p.nodes)}
    p = dataclasses.replace(p, weight_bytes=weights)
    p = dataclasses.replace(p, memory_bytes={p.units[0]: max(1.0, p.memory_use(p.nodes) / 2)})
    check_memory_schedule(p, name)


@st.composite
def memory_problems(draw, max_nodes: int = 6, max_units: int = 3) -> Problem:
    """Random problems of two or more nodes with weights; the first unit and some others hold
    the largest output plus the largest weight or a share of all the weights, whichever is
    more, so that every node fits alone and memory usually binds."""
    p = draw(problems(max_nodes=max_nodes, max_units=max_units).filter(lambda p: len(p.nodes) > 1))
    weights = {n: draw(st.sampled_from([0, 100, 1000, 5000])) for n in p.nodes}
    p = dataclasses.replace(p, weight_bytes=weights, name="random-memory")
    top = max(p.activation_bytes(n) for n in p.nodes)
    caps = {}
    for k, u in enumerate(p.units):
        share = draw(st.sampled_from([0.25, 0.4, 0.6, 0.8] + ([None] if k else [])))
        if share is not None:
            caps[u] = max(1.0, top + max(max(weights.values()), share * sum(weights.values())))
    return dataclasses.replace(p, memory_bytes=caps)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(p=memory_problems())
def test_random_schedules_respect_memory(name: str, p: Problem) -> None:
    check_memory_schedule(p, name)


@FEW
@given(p=memory_problems(max_nodes=6, max_units=3))
def test_exact_equals_brute_force_with_memory(p: Problem) -> None:
    pytest.importorskip("ortools")
    from partuner.plan.exact import Exact

    # No call overhead (and no boundary cost): cut_us == comm_us, the oracle's delays.
    p = dataclasses.replace(p, call_overhead_us={}, boundary_us_per_byte={})
    exact = Exact(workers=1, tick_us=1e-3)
    try:
        p.validate()
        best = brute_force(p)
    except InfeasiblePlanError:
        with pytest.raises(InfeasiblePlanError):
            exact.schedule(p, time_limit=5)
        return
    s = exact.schedule(p, time_limit=5)
    s.validate(p)
    assert s.status == "optimal"
    tol = 2 * (len(p.nodes) + 1) * 1e-3 + 1e-9 * best.makespan
    assert s.makespan == pytest.approx(best.makespan, abs=tol)
    assert s.lower_bound <= best.makespan + 1e-9


def test_exact_solves_without_a_hint_that_fits() -> None:
    pytest.importorskip("ortools")
    from partuner.plan.exact import Instance, solve

    p = chain({"a": 40, "b": 40, "c": 40, "d": 40}, {"u": 100, "v": 100})
    sol = solve(Instance.of(p), time_limit=5)  # the only hint, all on u, overflows u
    assert overflow(p, sol.assignment) is None and sol.status == "optimal"
    bad = chain({"a": 60, "b": 60, "c": 60}, {"u": 100, "v": 100})
    with pytest.raises(InfeasiblePlanError, match="proved by CP-SAT"):
        solve(Instance.of(bad), time_limit=5)
    with pytest.raises(InfeasiblePlanError, match="no time is left"):
        solve(Instance.of(bad), time_limit=0)


def test_exact_does_not_decompose_a_memory_limited_problem() -> None:
    pytest.importorskip("ortools")
    from partuner.plan.exact import Exact

    # decomposed, every region would put its nodes on the fast unit u
    p = chain({f"n{i}": 30 for i in range(8)}, {"u": 120})
    s = Exact(workers=1, max_nodes=4, region_nodes=2).schedule(p, time_limit=5)
    s.validate(p)
    assert list(s.assignment.values()).count("u") == 4


def test_auto_local_search_stays_within_memory() -> None:
    from partuner.plan.auto import Auto

    p = chain({f"n{i}": 30 for i in range(6)}, {"u": 100}, nbytes=10)
    auto = Auto(workers=1)
    s = auto.schedule(p, time_limit=3)
    s.validate(p)
    for run in auto.runs.values():
        assert overflow(p, run.schedule.assignment) is None


# -- JSON ----------------------------------------------------------------------------------------


def test_json_round_trip_keeps_weights_and_capacities() -> None:
    p = chain({"a": 12, "b": 0}, {"u": 1e6, "v": INF}, nbytes=4)
    data = json.loads(p.to_json())
    assert data["weight_bytes"] == {"a": 12, "b": 0}
    assert data["memory_bytes"] == {"u": 1e6, "v": "inf"}
    assert Problem.from_json(p.to_json()) == p
    del data["weight_bytes"], data["memory_bytes"]
    q = Problem.from_dict(data)
    assert q.weight_bytes == {} and q.memory_bytes == {} and not q.memory_limited
    for key, value in [("weight_bytes", {"a": 1.5}), ("weight_bytes", {"a": "x"}),
                       ("memory_bytes", {"u": "lots"})]:  # fmt: skip
        with pytest.raises(PartunerError, match="malformed problem JSON"):
            Problem.from_dict({**data, key: value})


# -- units and build_problem ------------------------------------------------------------------


MEMORY_UNITS = """
units:
  cpu: {backend: onnxruntime, threads: 1, memory_mb: 512}
  npu: {backend: modeled, gflops: 300, gbps: 8, memory_mb: 0.5}
"""


def test_every_backend_takes_memory_mb() -> None:
    for b in backend_names():
        assert "memory_mb" in get_backend(b).option_names(), b


def test_units_file_memory_mb(tmp_path) -> None:
    path = tmp_path / "units.yaml"
    path.write_text(MEMORY_UNITS)
    us = load_units(path)
    assert us["cpu"].memory_mb == 512.0 and us["npu"].memory_mb == 0.5
    assert us["npu"].spec()["memory_mb"] == 0.5
    assert us["cpu"].describe()["memory_mb"] == 512.0
    # memory does not change speed: measurements are shared
    npu = get_backend("modeled")("npu", gflops=300, gbps=8)
    assert npu.fingerprint() == us["npu"].fingerprint() and npu.memory_mb is None
    assert "memory_mb" not in npu.spec() and npu.describe()["memory_mb"] is None


@pytest.mark.parametrize("value", ["0", "-1", "lots", "true", ".inf", "[1]"])
def test_units_file_rejects_bad_memory_mb(tmp_path, value: str) -> None:
    path = tmp_path / "units.yaml"
    path.write_text(f"units:\n  cpu: {{backend: onnxruntime, memory_mb: {value}}}\n")
    with pytest.raises(UnitsFileError, match=r"unit 'cpu': option 'memory_mb' must be a number"):
        load_units(path)


def _modeled_units(tmp_path, memory_mb: float, count: int = 2):
    units = {
        f"m{i}": {"backend": "modeled", "gflops": 100 / (i + 1), "gbps": 8, "memory_mb": memory_mb}
        for i in range(count)
    }
    path = tmp_path / "mem.yaml"
    path.write_text(yaml.safe_dump({"units": units}))
    return path


def test_build_problem_fills_weights_and_capacities(tmp_path, branchy) -> None:
    from partuner.pipeline import build_problem
    from partuner.profile import ProfileStore, profile_model

    us = load_units(_modeled_units(tmp_path, 0.1))
    with ProfileStore(tmp_path / "p.db") as store:
        prof = profile_model(branchy, us, store=store)
    p = build_problem(branchy, us, prof)
    assert p.memory_bytes == {"m0": 1e5, "m1": 1e5}
    assert sum(p.weight_bytes.values()) == branchy.weight_bytes
    assert all(p.weights(n.name) == n.weight_bytes for n in branchy.compute_nodes)
    assert p.memory_limited  # one unit cannot hold the whole model
    for name in NAMES:
        check_memory_schedule(p, name)


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize(
    ("memory_mb", "count", "needle"),
    [
        (0.05, 1, "the weights of 'branchy.onnx' total 80200 bytes but the units hold 50000"),
        (0.03, 2, "node 'b.b2.0.conv' of 'branchy.onnx' needs 45408 bytes of memory"),
    ],
)
def test_cli_plan_refuses_units_that_cannot_hold_the_model(
    tmp_path, branchy_file, db, memory_mb: float, count: int, needle: str
) -> None:
    units = _modeled_units(tmp_path, memory_mb, count)
    r = _invoke("plan", branchy_file, "--units", units, "--db", db)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("partuner: error: "), r.output
    assert needle in lines[0] and "memory_mb" in lines[0] and "Traceback" not in r.output


def test_cli_plan_keeps_each_unit_within_its_memory(tmp_path, branchy_file, db) -> None:
    from partuner.export import read_plan

    units = _modeled_units(tmp_path, 0.1)
    r = _invoke(
        "plan", branchy_file, "--units", units, "--db", db, "--time-limit", "3",
        "--dump-problem", tmp_path / "prob.json", "-o", tmp_path / "plan.yaml",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    p = Problem.from_json((tmp_path / "prob.json").read_text())
    assert p.memory_bytes == {"m0": 1e5, "m1": 1e5} and p.memory_limited
    node_unit = read_plan(tmp_path / "plan.yaml").node_unit
    assert overflow(p, node_unit) is None and set(node_unit.values()) == {"m0", "m1"}
