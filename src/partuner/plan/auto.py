"""``auto``, the default scheduler: every other scheduler, then a partition-aware local search.

Schedulers optimise a node-level model; what a plan costs is its partition simulation
(:func:`~partuner.plan.partitions.plan_from_schedule`: call overheads, boundary costs, a
partition's outputs leaving only when it ends, fused groups). ``auto`` therefore runs every
registered scheduler (the partition-level exact one, ``pexact``, optimises that cost itself),
judges each by its plan's predicted latency, and then improves the best one by moving
partitions and boundary nodes between units, re-simulating each move.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from partuner.errors import InfeasiblePlanError, PartunerError
from partuner.plan.assemble import schedule_of_parts
from partuner.plan.chain import SegmentPlan, chain_order, segment_plan, segment_plan_whole_handoff
from partuner.plan.clock import PLACE_S, WorkClock, chain_charge, start_charge
from partuner.plan.common import lower_bound
from partuner.plan.exact import (
    Exact,
    group_slack,
    heuristic_names,
    solver_available,
)
from partuner.plan.floors import Floors
from partuner.plan.local import Run, anneal, improve, list_schedule
from partuner.plan.part_anneal import anneal_partitions
from partuner.plan.partitions import plan_from_schedule
from partuner.plan.pexact import PartitionExact
from partuner.plan.problem import Problem
from partuner.plan.registry import Scheduler, get_scheduler, register
from partuner.plan.schedule import Schedule

__all__ = ["Auto", "Run", "improve", "list_schedule"]

log = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S = 10.0
#: nodes^3 x units^2 at most for the finer chain programme: O(n^3 U^2) memory and work
#: (DenseNet-121's 430 nodes on two units: 3.2e8; its time: benchmarks/anytime_bench.py)
WHOLE_HANDOFF_WORK = 8e8
#: the heuristics a problem too big for its budget is planned with (the methods auto must beat)
BASELINES = ("single", "static", "heft", "nestc")
_REL = 1e-9  # relative improvement a move must bring


@register
class Auto(Scheduler):
    """The best of every registered scheduler by predicted latency, then improved locally.

    0. A chain-shaped problem is solved by :func:`~partuner.plan.chain.segment_plan` (and,
       when that plan misses its bound, by the finer
       :func:`~partuner.plan.chain.segment_plan_whole_handoff`); when the plan meets the
       bound it is returned at once, ``optimal``.
    1. Each heuristic (every registered scheduler but ``auto``, ``exact`` and ``pexact``) runs;
       its schedule is cut into partitions and simulated (``plan_from_schedule(...)``).
    2. Simulated annealing (:func:`~partuner.plan.local.anneal`) from the best plan so far with
       ``anneal_share`` (10 %) of the budget.
    3. When OR-Tools is installed: ``exact`` (node-level CP-SAT) with ``exact_share`` (10 %)
       of the remaining budget, then ``pexact`` (partition-level CP-SAT,
       :mod:`partuner.plan.pexact`) with ``pexact_share`` (85 %) of what is left, each
       warm-started from the schedules so far.
    4. Annealing again from the best plan of all with most of what is left, then a hill climb
       (:func:`~partuner.plan.local.improve`) that moves whole partitions, chains of nodes
       (branches) and partition-boundary nodes to other units, keeping each move that lowers
       the re-simulated latency, never past a unit's memory.
    5. Simulated annealing on the best plan's partitions themselves
       (:func:`~partuner.plan.part_anneal.anneal_partitions`) with the rest: ``parts_share``
       (20 %) of the budget is kept from stages 2-4 for it.

    Each stage after 1. runs only while the best plan misses the best bound proven: a plan
    meeting it is optimal, and returned at once (unless ``stop_at_bound`` is false: every
    stage then runs, for their plans, as ``plan --compare`` and stream planning want).

    ``workers``: CP-SAT's workers for ``exact`` and ``pexact`` (default 1: one full search,
    whose proofs move the bound; on two cores a second worker, a neighbourhood search, took
    half the work budget for no proof, and one worker gives the same plan on any machine).

    ``progress(stage, best_us, bound_us)``, when given, hears each stage start with the best
    plan and bound so far.

    The result is never worse than any scheduler run. ``time_limit`` (default 10 s) bounds the
    whole. ``lower_bound`` is the best bound proven on the predicted latency of any plan
    (pexact's or exact's, else :func:`~partuner.plan.common.lower_bound`), so it can exceed
    the returned schedule's node-level ``makespan``. ``status`` is ``"optimal"`` only when the
    predicted latency meets that proven bound (no fused groups): exact's node-level optimum
    alone proves nothing about the partitioned plan. Else ``"feasible"`` when the result
    comes from exact or pexact, ``"heuristic"`` otherwise.

    After :meth:`schedule`, ``runs`` holds each scheduler's :class:`Run` by name (the local
    searches' as ``"<start>+anneal"`` / ``"<start>+local"`` / ``"<start>+parts"`` when they
    helped), ``errors`` why the others gave none, and ``chosen`` the winner's name.
    """

    name = "auto"

    def __init__(
        self,
        *,
        anneal_share: float = 0.1,
        exact_share: float = 0.1,
        pexact_share: float = 0.85,
        parts_share: float = 0.2,
        workers: int = 1,
        progress: Callable[[str, float, float], None] | None = None,
        stop_at_bound: bool = True,
    ) -> None:
        self.stop_at_bound = stop_at_bound
        self.anneal_share = anneal_share
        self.progress = progress
        self.exact_share = exact_share
        self.pexact_share = pexact_share
        self.parts_share = parts_share
        self.workers = workers
        self.runs: dict[str, Run] = {}
        self.errors: dict[str, str] = {}
        self.chosen = ""
        self._chain_bound: float | None = None
        self._floor_bound = self._whole_bound = 0.0

    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        problem.validate()
        budget = DEFAULT_TIME_LIMIT_S if time_limit is None else max(0.0, time_limit)
        # OR-Tools imported before the clock starts: its import (pandas with it), once per
        # process, is charged by no budget; inside the wall-clock cap it left the last stage
        # no time on a slower machine
        solvers = solver_available()
        clock = WorkClock(budget)  # deterministic work, the wall clock only a cap
        deadline = clock.now() + budget
        self.runs = {}
        self.errors = {}
        self._floor_bound = self._whole_bound = 0.0
        chain_bound = self._chain_bound = self._chain(problem, clock, budget)
        if chain_bound is not None and "chain" in self.runs:
            run = self.runs["chain"]
            if run.plan.predicted_us <= chain_bound * (1 + 1e-9) + 1e-9:
                self.chosen, slots = "chain", dict(run.schedule.slots)  # proven optimal
                return Schedule(slots, self.name, "optimal", chain_bound, run.schedule.partitions)
        self._whole_bound = lower_bound(problem, partitions=True)
        start = start_charge(len(problem.nodes), len(problem.units))
        names = heuristic_names()
        big = start > budget - clock.now()  # too big for the budget: the baselines alone
        if big:
            names = [n for n in names if n in BASELINES]
            log.info("auto: %d nodes: only %s in %g s", len(problem.nodes), names, budget)
        floors = Floors(problem)  # block bounds (none when big), shared with pexact
        self._floor_bound = 0.0 if big else floors.whole()
        clock.spend(start)
        for k, name in enumerate(names):
            share = max(0.0, deadline - clock.now()) / (4 * (len(names) - k))
            heuristic = get_scheduler(name)
            self._run(problem, name, partial(heuristic.schedule, time_limit=share))
            clock.spend(PLACE_S * getattr(heuristic, "placements", 0))
        if not self.runs:
            why = next((e for n, e in self.errors.items() if n != "single"), "")
            raise InfeasiblePlanError(
                f"no scheduler could plan {problem.name!r} (tried {names})"
                + (f": {why}" if why else "")
            )
        # a good plan early: annealing from the best heuristic plan before the solvers; then
        # exact, pexact (each warm-started from the plans so far), annealing again from the
        # best plan of all and a hill climb; none once the best plan meets a proven bound
        if not solvers:
            log.info("auto: OR-Tools is not installed; skipping the exact scheduler")
        reserve = budget * self.parts_share  # kept for the last stage
        for stage in () if big else ("annealing", "exact", "pexact", "annealing again"):
            if (self.stop_at_bound and self._proven(problem)) or (
                stage.endswith("exact") and not solvers
            ):
                continue
            self._say(stage, problem)
            left = max(0.0, deadline - reserve - clock.now())
            if stage == "annealing":
                self._anneal(problem, budget * self.anneal_share, clock, "early")
            elif stage.endswith("exact"):  # warm-started from the plans so far
                pex = stage == "pexact"
                solver = (PartitionExact if pex else Exact)(workers=self.workers)
                limit = left * (self.pexact_share if pex else self.exact_share)
                hints = [r.schedule for r in self.runs.values()]
                kw = {"floors": floors} if pex else {}
                solve = partial(solver.solve, hints=hints, clock=clock, time_limit=limit, **kw)
                self._run(problem, stage, solve)
            else:
                self._anneal(problem, left * 0.8, clock, "late")
        best_name, best = min(self.runs.items(), key=lambda kv: _rank(kv[1]))
        if not big and not clock.expired(deadline - reserve) and not self._done(problem):
            got = improve(problem, best, deadline - reserve, self.name, clock)
            if got is not best:
                best_name, best = f"{best_name}+local", got
                self.runs[best_name] = got
        if not big and not clock.expired(deadline) and not self._done(problem):
            self._say("annealing the partitions", problem)
            left = max(0.0, deadline - clock.now())
            got = anneal_partitions(problem, best, left, self.name, clock, seed=2)
            if got is not best:
                best_name, best = f"{best_name}+parts", got
                self.runs[best_name] = got

        bound = self._bound(problem)
        if self._proven(problem):
            status = "optimal"  # the plan meets a bound no plan can beat: a proof
        elif best_name.startswith(("exact", "pexact")):
            status = "feasible"
        else:
            status = "heuristic"
        self.chosen = best_name
        return Schedule(
            dict(best.schedule.slots), self.name, status, bound, best.schedule.partitions
        )

    def _done(self, problem: Problem) -> bool:
        """Whether to stop: the best plan meets a proven bound and ``stop_at_bound``."""
        return self.stop_at_bound and self._proven(problem)

    def _proven(self, problem: Problem) -> bool:
        """Whether the best plan so far meets the best bound proven (no fused groups)."""
        best = min(r.plan.predicted_us for r in self.runs.values())
        return best <= self._bound(problem) + 1e-9 * max(1.0, best) and not group_slack(problem)

    def _say(self, stage: str, problem: Problem) -> None:
        """Report the stage starting, with the best plan and the best bound so far (µs)."""
        if self.progress is not None and self.runs:
            best = min(r.plan.predicted_us for r in self.runs.values())
            self.progress(stage, best, self._bound(problem))

    def _bound(self, problem: Problem) -> float:
        """The best bound proven so far on every plan's predicted latency (µs)."""
        solved = [self.runs[s].schedule.lower_bound for s in ("exact", "pexact") if s in self.runs]
        chain = self._chain_bound or 0.0
        whole = self._whole_bound
        return max(whole, chain, self._floor_bound, *(b for b in solved if b is not None))

    def _anneal(self, problem: Problem, budget_s: float, clock: WorkClock, tag: str) -> None:
        """Anneal from the best plan so far for ``budget_s``; kept as ``<start>+anneal``."""
        name, start = min(self.runs.items(), key=lambda kv: _rank(kv[1]))
        early = tag == "early"
        got = anneal(
            problem, start, budget_s, self.name, clock, seed=0 if early else 1, patient=not early
        )
        if got is not start:
            self.runs[f"{name.split('+')[0]}+anneal"] = got

    def _chain(self, problem: Problem, clock: WorkClock, budget: float) -> float | None:
        """For a chain-shaped problem, the segment plan (as run ``chain``, when it fits in
        memory) and its bound (:mod:`partuner.plan.chain`); None for other problems, and for
        chains too long for the ``budget`` (:func:`~partuner.plan.clock.chain_charge`, charged
        to ``clock``). When that plan misses its bound, and the problem is small enough
        (:data:`WHOLE_HANDOFF_WORK`, and the budget left), the finer programme
        charging whole hand-offs (:func:`~partuner.plan.chain.segment_plan_whole_handoff`)
        adds its bound and plan."""
        n, nu = len(problem.nodes), len(problem.units)
        if chain_order(problem) is None:
            return None
        if chain_charge(n, nu) > budget:
            log.info("auto: a chain of %d nodes: too long for its programme in %g s", n, budget)
            return None
        t0 = time.perf_counter()
        clock.spend(chain_charge(n, nu))
        seg = segment_plan(problem)
        if seg is None:
            return None
        bound = seg.bound_us
        runs = [r for r in [self._chain_run(problem, seg, t0)] if r is not None]
        missed = not runs or runs[0].plan.predicted_us > bound * (1 + 1e-9) + 1e-9
        finer = chain_charge(n, nu, whole_handoff=True)
        if missed and n**3 * nu**2 <= WHOLE_HANDOFF_WORK and finer <= budget - clock.now():
            clock.spend(finer)
            got_finer = segment_plan_whole_handoff(problem)
            if got_finer is not None:
                bound = max(bound, got_finer.bound_us)
                got = self._chain_run(problem, got_finer, t0)
                runs += [got] if got is not None else []
        if runs:
            self.runs["chain"] = min(runs, key=_rank)
        return bound

    @staticmethod
    def _chain_run(problem: Problem, seg: SegmentPlan, t0: float) -> Run | None:
        """The run of a segment plan, None when it does not fit in memory."""
        if not seg.fits:
            return None
        sched, _ = schedule_of_parts(problem, seg.parts, "chain")
        return Run(sched, plan_from_schedule(problem, sched), time.perf_counter() - t0)

    def _run(self, problem: Problem, name: str, scheduler: Callable[[Problem], Schedule]) -> None:
        t0 = time.perf_counter()
        try:
            s = scheduler(problem)
            s.validate(problem)
            plan = plan_from_schedule(problem, s)
        except PartunerError as exc:  # e.g. 'single' when no unit runs every node
            log.info("auto: scheduler %r gave no plan: %s", name, exc)
            self.errors[name] = str(exc)
            return
        self.runs[name] = Run(s, plan, time.perf_counter() - t0)


def _rank(run: Run) -> tuple[float, int]:
    return (run.plan.predicted_us, len(run.plan.partitions))
