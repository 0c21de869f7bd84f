"""The stages glued together: model + units -> profile -> problem -> plan -> partitions -> run.

The CLI's ``tune`` is :func:`tune`; each step is also a function of its own so that the Python
API can stop anywhere (e.g. plan without running).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from partuner.errors import InfeasiblePlanError, PartunerError
from partuner.export import PartitionModel, PartitionSpec, PlanFile, cut, export_plan
from partuner.graph import ModelGraph
from partuner.plan import (
    Edge,
    Link,
    Plan,
    Problem,
    get_scheduler,
    plan_from_assignment,
    plan_from_schedule,
)
from partuner.plan import lower_bound as problem_lower_bound
from partuner.plan_checks import check_plan_model, plan_from_file, unsupported_nodes
from partuner.profile import Profile
from partuner.profile.load import LoadMeter, is_busy
from partuner.profile.measure import random_feeds
from partuner.runtime import CheckResult, Session, check_outputs
from partuner.units import UnitSet

__all__ = [
    "build_problem",
    "make_plan",
    "planning_stages",
    "plan_file",
    "plan_from_file",
    "proven_lower_bound",
    "check_plan_model",
    "reference_outputs",
    "unsupported_nodes",
    "measure_session",
    "measure_whole",
    "RunStats",
    "TuneResult",
]

log = logging.getLogger(__name__)

# `tune` keeps the planned partitions only when they measure faster than the whole model on the
# best single unit by at least this fraction; else the simpler plan (a gain within the noise of
# a median, ~1-2 % here, is not one, and a split that only ties may be slower on another run).
MEASURED_MARGIN = 0.01

# On measured units (none modeled), `auto` keeps a plan over several units only when it is
# predicted faster than the best one-unit plan by at least this fraction: a smaller predicted
# gain is within what the cost model misses on real units (hand-offs, cold partitions, the
# machine's own drift: docs/algorithms.md, "Known limits"). benchmarks/standin_bench.py
# checks it on every run ("Plans over several units ..."). Modeled units: no margin.
MEASURED_PLAN_MARGIN = 0.05


def build_problem(
    graph: ModelGraph,
    units: UnitSet,
    profile: Profile,
    corrections: Mapping[str, float] | None = None,
) -> Problem:
    """The planner's view of ``graph`` on ``units`` with ``profile``'s costs (and its fused
    groups, on the units that measured them). ``corrections`` (``{unit: factor}``, from
    ``partuner run --calibrate``: measured / predicted partition times) scale a unit's node
    costs to what running the plan showed. Each node's weights are its initializers' bytes
    (``NodeInfo.weight_bytes``); a unit's memory is its ``memory_mb`` (10^6 bytes each)."""
    from partuner.plan import FusedGroup

    fix = dict(corrections or {})
    names = [n.name for n in graph.compute_nodes]
    unit_names = [u for u in units.units if u in profile.units]
    _check_profile(graph, units, profile, names, unit_names)
    keep = set(names)
    pairs: dict[tuple[str, str], dict[str, int]] = {}
    for src, dst, value, nbytes in graph.edges():
        if src in keep and dst in keep:
            pairs.setdefault((src, dst), {})[value] = nbytes
    edges = [Edge(s, d, sum(vals.values()), tuple(vals)) for (s, d), vals in pairs.items()]
    links = {pair: Link(link.latency_us, link.gbps) for pair, link in profile.links.items()}
    groups = [
        FusedGroup(tuple(members), {u: c for u, c in cost.items() if u in unit_names})
        for members, cost in profile.groups
        if set(members) <= keep and any(u in unit_names for u in cost)
    ]
    return Problem(
        nodes=names,
        units=unit_names,
        cost={n: {u: profile.costs[n][u] * fix.get(u, 1.0) for u in unit_names} for n in names},
        edges=edges,
        links=links,
        default_link=Link(units.default_link.latency_us, units.default_link.gbps),
        call_overhead_us={u: profile.units[u].overhead_us for u in unit_names},
        boundary_us_per_byte={
            u: profile.units[u].boundary_us_per_byte
            for u in unit_names
            if profile.units[u].boundary_us_per_byte > 0
        },
        boundary_out_us_per_byte={
            u: profile.units[u].boundary_out_us_per_byte
            for u in unit_names
            if profile.units[u].boundary_out_us_per_byte > 0
        },
        modeled=frozenset(u for u in unit_names if profile.units[u].modeled),
        name=Path(graph.source).name,
        resources={
            u: frozenset(f"core{c}" for c in units[u].cores) for u in unit_names if units[u].cores
        },
        groups=groups,
        weight_bytes={n.name: n.weight_bytes for n in graph.compute_nodes if n.weight_bytes > 0},
        memory_bytes={
            u: units[u].memory_mb * 1e6 for u in unit_names if units[u].memory_mb is not None
        },
        corun={u: f for u in unit_names if (f := profile.units[u].corun) is not None},
    )


def _check_profile(
    graph: ModelGraph, units: UnitSet, profile: Profile, names: list[str], unit_names: list[str]
) -> None:
    """Raise ProfileError when ``profile`` was made for another model or other units."""
    from partuner.errors import ProfileError

    if not isinstance(profile, Profile):
        raise ProfileError(f"profile must be a Profile (from profile_model), got {profile!r:.80}")
    missing = [n for n in names if n not in profile.costs]
    if missing:
        raise ProfileError(
            f"the profile has no costs for node {missing[0]!r} of {graph.source} "
            f"({len(missing)} of {len(names)} nodes): it was made for another model; profile "
            "this one (profile_model(graph, units))"
        )
    if not unit_names:
        raise ProfileError(
            f"the profile holds units {sorted(profile.units)}, none of the units "
            f"{list(units.units)}: it was made with other units; profile with these"
        )
    for n in graph.compute_nodes:  # no unit runs it, though no ops list leaves it out
        if all(math.isinf(profile.costs[n.name][u]) for u in unit_names) and all(
            units[u].supports(n, graph) for u in unit_names
        ):
            why = [w for node, _, w in [*profile.unsupported, *profile.failed] if node == n.name]
            op = f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
            raise InfeasiblePlanError(
                f"node {n.name!r} ({op}) cannot run on any unit of {list(unit_names)}: each "
                f"failed or refused it ({(why or ['no reason recorded'])[0][:200]}); use a unit "
                "whose backend implements it (an external unit for a vendor's op), or "
                "replace the op in the model"
            )


def check_time_limit(time_limit: object) -> float | None:
    """``time_limit`` as seconds (None: the default), or PartunerError naming what is wrong."""
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, int | float):
        raise PartunerError(f"time_limit must be a number of seconds, got {time_limit!r:.40}")
    if not math.isfinite(time_limit) or time_limit < 0:
        raise PartunerError(f"time_limit must be finite and >= 0 seconds, got {time_limit}")
    return float(time_limit)


def make_plan(
    problem: Problem,
    scheduler: str = "auto",
    *,
    time_limit: float | None = None,
    progress: Callable[[str, float, float], None] | None = None,
    every: bool = False,
) -> tuple[Plan, dict[str, Plan]]:
    """Plan ``problem`` with ``scheduler`` within about ``time_limit`` seconds.

    ``"auto"`` runs the registered ``auto`` scheduler: every other scheduler, judged by its
    plan's predicted latency as partitions (call overheads and transfers included), then a
    local search (:class:`partuner.plan.auto.Auto`). Returns the chosen plan and every plan
    computed by scheduler name (with ``"auto"``: each scheduler ``auto`` ran, its improved
    plans as ``"<name>+anneal"``, ``"<name>+local"`` or ``"<name>+parts"``, and ``"auto"``,
    the chosen one);
    ``progress(stage, best_us, bound_us)`` hears each stage of ``auto`` start with the best plan
    and the best bound so far; ``every``: each of auto's stages runs even once a plan meets a
    proven bound (for every scheduler's plan). Each plan carries its
    ``solve_s``; the chosen plan's ``scheduler`` names the algorithm that found it and its
    ``lower_bound_us`` is the best bound proven on any plan's predicted latency.
    """
    from partuner.plan.auto import Auto  # registers "auto" and "exact"

    time_limit = check_time_limit(time_limit)
    t0 = time.perf_counter()
    if scheduler != "auto":
        s = get_scheduler(scheduler).schedule(problem, time_limit=time_limit)
        s.validate(problem)
        plan = plan_from_schedule(problem, s)
        if s.lower_bound is not None:
            plan.lower_bound_us = max(plan.lower_bound_us or 0.0, s.lower_bound)
        plan.solve_s = time.perf_counter() - t0  # type: ignore[attr-defined]
        return plan, {scheduler: plan}
    auto = Auto(progress=progress, stop_at_bound=not every)
    s = auto.schedule(problem, time_limit=time_limit)
    plans: dict[str, Plan] = {}
    for name, run in auto.runs.items():
        run.plan.solve_s = run.solve_s  # type: ignore[attr-defined]
        if run.schedule.lower_bound is not None:
            run.plan.lower_bound_us = max(run.plan.lower_bound_us or 0.0, run.schedule.lower_bound)
        plans[name] = run.plan
    best = plan_from_schedule(problem, s)
    best.scheduler = auto.chosen
    best = _simpler_plan(problem, best, plans)
    best.lower_bound_us = s.lower_bound
    best.solve_s = time.perf_counter() - t0  # type: ignore[attr-defined]
    plans["auto"] = best
    return best, plans


def _simpler_plan(problem: Problem, best: Plan, plans: Mapping[str, Plan]) -> Plan:
    """The plan ``auto`` ships: :func:`_one_unit_plan`, else :func:`_fewer_partitions_plan`
    where that beats one unit by the margin too (docs/algorithms.md), else ``best``."""
    fewer = _one_unit_plan(problem, best) or _fewer_partitions_plan(problem, best, plans)
    return best if fewer is None else _one_unit_plan(problem, fewer) or fewer


def _fewer_partitions_plan(problem: Problem, best: Plan, plans: Mapping[str, Plan]) -> Plan | None:
    """On measured units, the plan of ``plans`` over several units with the fewest partitions
    (then the fastest) that ``best`` has more partitions than and is not predicted
    :data:`MEASURED_PLAN_MARGIN` faster than; else None.

    Each cut is where the model misses most on real units (a hand-off, a cold partition), so
    between plans with different numbers of partitions a small predicted gain is not one:
    benchmarks/standin_bench.py checks it on every run ("Plans with more partitions ...")."""
    if problem.modeled or problem.memory_limited:
        return None
    fewer = [
        p
        for p in plans.values()
        if len(p.partitions) < len(best.partitions)
        and best.predicted_us >= p.predicted_us * (1 - MEASURED_PLAN_MARGIN)
        and len(set(p.units)) > 1  # one unit alone: _one_unit_plan's call
    ]
    if not fewer:
        return None
    pick = min(fewer, key=lambda p: (len(p.partitions), p.predicted_us, p.scheduler))
    log.info(
        "keeping %s's plan of %d partitions (%.3f ms predicted): the best plan (%d partitions, "
        "%.3f ms) is not %.0f %% faster, within what the model misses on measured units",
        pick.scheduler, len(pick.partitions), pick.predicted_us / 1e3,
        len(best.partitions), best.predicted_us / 1e3, 100 * MEASURED_PLAN_MARGIN,
    )  # fmt: skip
    kept = replace(pick)
    if kept.status == "optimal" and kept.predicted_us > best.predicted_us:
        kept.status = "feasible"
    return kept


def _one_unit_plan(problem: Problem, best: Plan) -> Plan | None:
    """The fastest one-unit plan where ``best`` spans several measured units and is not
    predicted :data:`MEASURED_PLAN_MARGIN` faster than it; else None."""
    if problem.modeled or problem.memory_limited or len(set(best.units)) < 2:
        return None
    whole = [
        u for u in problem.units if all(math.isfinite(problem.cost[n][u]) for n in problem.nodes)
    ]
    ones = [
        plan_from_assignment(problem, dict.fromkeys(problem.nodes, u), scheduler="one-unit")
        for u in whole
    ]
    one = min(ones, key=lambda p: p.predicted_us, default=None)
    if one is None or best.predicted_us < one.predicted_us * (1 - MEASURED_PLAN_MARGIN):
        return None
    log.info(
        "keeping %s alone (%.3f ms predicted): the best plan over several units (%.3f ms) is "
        "not %.0f %% faster, within what the model misses on measured units",
        one.units[0], one.predicted_us / 1e3, best.predicted_us / 1e3, 100 * MEASURED_PLAN_MARGIN,
    )  # fmt: skip
    one.status = "heuristic"
    return one


def planning_stages(say: Callable[[str], None]) -> Callable[[str, float, float], None]:
    """A :func:`make_plan` ``progress`` that says each stage of ``auto`` as one line, e.g.
    ``planning: pexact (best so far 26.509 ms, bound 23.720 ms)``."""

    def said(step: str, best_us: float, bound_us: float) -> None:
        best, bound = best_us / 1e3, bound_us / 1e3
        say(f"planning: {step} (best so far {best:.3f} ms, bound {bound:.3f} ms)")

    return said


def proven_lower_bound(problem: Problem, plans: Mapping[str, Plan]) -> float:
    """The best lower bound on any plan's predicted latency for ``problem``: its own bound and
    every bound the schedulers of ``plans`` proved. The one figure ``plan`` and ``tune`` print
    and write to the plan file."""
    bounds = [p.lower_bound_us or 0.0 for p in plans.values()]
    return max([problem_lower_bound(problem, partitions=True), *bounds])


def plan_file(plan: Plan, graph: ModelGraph, units: UnitSet) -> PlanFile:
    """The file form of ``plan`` (NEST-C keys + partuner's section)."""
    return PlanFile(
        partitions=[
            PartitionSpec(p.name, p.unit, tuple(p.nodes), p.start_us, p.end_us)
            for p in plan.partitions
        ],
        model=Path(graph.source).name,
        input_shapes={k: list(graph.values[k].shape) for k in graph.inputs},
        scheduler=plan.scheduler,
        status=plan.status,
        predicted_us=plan.predicted_us,
        lower_bound_us=plan.lower_bound_us,
        modeled=plan.modeled,
        units={u: units[u].spec() for u in plan.units},
        parallel=plan.parallel_groups(),
    )


def reference_outputs(graph: ModelGraph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of the unpartitioned model on onnxruntime's CPU provider, f32, all cores."""
    import onnxruntime as ort

    from partuner.runtime import validate_feeds

    validate_feeds(graph, feeds)  # one line naming the input, not onnxruntime's own message

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(
        graph.model.SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    outs = sess.run(list(graph.outputs), feeds)
    return dict(zip(graph.outputs, outs, strict=True))


@dataclass
class RunStats:
    """Measured latency over repeated runs, in ms."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    partition_ms: dict[str, float] = field(default_factory=dict)  # median per partition

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_ms,
            "p10_ms": self.p10_ms,
            "p90_ms": self.p90_ms,
            "runs": self.runs,
            "partition_ms": self.partition_ms,
        }


def _stats(samples: Sequence[float]) -> tuple[float, float, float]:
    arr = np.asarray(samples) * 1e3
    return float(np.median(arr)), float(np.percentile(arr, 10)), float(np.percentile(arr, 90))


def measure_session(
    session: Session, feeds: dict[str, np.ndarray], repeat: int, warmup: int = 3
) -> tuple[RunStats, dict[str, np.ndarray]]:
    """Run ``session`` ``warmup + repeat`` times; latency statistics and the last outputs."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise PartunerError(f"repeat must be an integer >= 1, got {repeat!r}")
    outs: list[np.ndarray] = []
    for _ in range(warmup):
        outs = session.run(None, feeds)
    samples: list[float] = []
    per_part: dict[str, list[float]] = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        outs = session.run(None, feeds)
        samples.append(time.perf_counter() - t0)
        for t in session.last_trace:
            per_part.setdefault(t.partition, []).append((t.end_s - t.start_s) * 1e3)
    med, p10, p90 = _stats(samples)
    return (
        RunStats(med, p10, p90, repeat, {k: statistics.median(v) for k, v in per_part.items()}),
        dict(zip(session.graph.outputs, outs, strict=True)),
    )


def measure_whole(
    graph: ModelGraph, feeds: dict[str, np.ndarray], threads: int, repeat: int, warmup: int = 3
) -> RunStats:
    """Plain onnxruntime on the whole model with ``threads`` intra-op threads (a baseline)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(
        graph.model.SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    for _ in range(warmup):
        sess.run(None, feeds)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        samples.append(time.perf_counter() - t0)
    med, p10, p90 = _stats(samples)
    return RunStats(med, p10, p90, repeat)


@dataclass
class TuneResult:
    """Everything ``partuner tune`` found, measured and wrote."""

    plan: Plan
    plans: dict[str, Plan]
    lower_bound_us: float
    profile: Profile
    measured: RunStats | None  # None when the plan uses a modeled unit
    single_unit: str
    single_measured: RunStats | None
    ort_all_cores: RunStats
    check: CheckResult
    outdir: Path
    files: list[str]
    note: str = ""  # set when the measurement overruled the prediction
    # other work's share of the machine's cores while the configurations ran (None: unknown)
    other_load: float | None = None


def tune(
    graph: ModelGraph,
    units: UnitSet,
    profile: Profile,
    outdir: str | Path,
    *,
    scheduler: str = "auto",
    repeat: int = 30,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    time_limit: float | None = None,
    corrections: Mapping[str, float] | None = None,
) -> TuneResult:
    """Plan, export, run and check ``graph`` on ``units`` with ``profile``'s costs."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise PartunerError(f"repeat must be an integer >= 1, got {repeat!r}")
    say = progress or (lambda _msg: None)
    problem = build_problem(graph, units, profile, corrections)
    problem.validate()
    say("planning")
    plan, plans = make_plan(
        problem, scheduler, time_limit=time_limit, progress=planning_stages(say)
    )
    lb = plan.lower_bound_us = proven_lower_bound(problem, plans)
    pf = plan_file(plan, graph, units)
    say("exporting")
    outdir = Path(outdir)
    parts: list[PartitionModel] = export_plan(graph, pf, outdir)
    feeds = random_feeds(graph, list(graph.inputs), seed=seed)
    say("running the plan")
    ref = reference_outputs(graph, feeds)
    meter = LoadMeter()
    started = meter.read()
    measured: RunStats | None = None
    with Session(graph, parts, units) as sess:
        stats, got = measure_session(sess, feeds, repeat)
        if not plan.modeled:
            measured = stats
    precisions = [units[u].precision for u in plan.units]
    check = check_outputs(ref, got, precisions)
    single = plans.get("single")
    if single is None:
        try:
            single = make_plan(problem, "single")[1]["single"]
            plans = {**plans, "single": single}  # its prediction goes beside its measurement
        except InfeasiblePlanError:  # no unit holds or runs the whole model
            single = None
    one = len(plan.partitions) == 1 and single is not None
    if one and plan.predicted_us <= single.predicted_us * (1 + 1e-9):  # type: ignore[union-attr]
        single = plan  # the whole model on a unit as fast as single's (a tie): the one kept
    single_unit = single.partitions[0].unit if single and single.partitions else ""
    single_measured = None
    same = len(plan.partitions) == 1 and plan.partitions[0].unit == single_unit
    if same and measured is not None:  # the plan is the whole model on that unit: ran above
        single_measured = measured
    elif single is not None and single_unit and not units[single_unit].modeled:
        say("running the best single unit")
        sparts = cut(graph, single.partitions)
        with Session(graph, sparts, units) as sess:
            single_measured, single_out = measure_session(sess, feeds, repeat)
    note = ""
    if (
        single is not None
        and measured is not None
        and single_measured is not None
        and len(plan.partitions) > 1
        and measured.median_ms > single_measured.median_ms * (1 - MEASURED_MARGIN)
    ):
        # The measurement overrules the prediction: keep the simpler plan unless the split
        # one is clearly faster.
        how = "slower" if measured.median_ms >= single_measured.median_ms else "no faster"
        note = (
            f"the planned {len(plan.partitions)} partitions ({plan.scheduler}) ran in "
            f"{measured.median_ms:.3f} ms, {how} than the whole model on {single_unit} "
            f"({single_measured.median_ms:.3f} ms, predicted "
            f"{plan.predicted_us / 1e3:.3f} vs {single.predicted_us / 1e3:.3f} ms); "
            f"{outdir} holds the single-unit plan instead"
        )
        plan, measured = single, single_measured
        plan.lower_bound_us = lb
        check = check_outputs(ref, single_out, [units[single_unit].precision])
        export_plan(graph, plan_file(plan, graph, units), outdir)
    say("running plain onnxruntime")
    ort_all = measure_whole(graph, feeds, os.cpu_count() or 1, repeat)
    other = meter.share(started)
    if is_busy(other):
        log.warning(
            "other work took %.0f%% of the machine's cores while the plan and its baselines "
            "ran: their measured times, and the choice between them, may not hold on a quiet "
            "machine; run tune again then",
            100 * (other or 0.0),
        )
    files = sorted(str(p.relative_to(outdir)) for p in outdir.rglob("*") if p.is_file())
    return TuneResult(
        plan,
        plans,
        lb,
        profile,
        measured,
        single_unit,
        single_measured,
        ort_all,
        check,
        outdir,
        files,
        note,
        other,
    )


def predicted_ms(plan: Plan) -> float:
    return plan.predicted_us / 1000.0 if math.isfinite(plan.predicted_us) else math.inf
