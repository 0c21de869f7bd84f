"""The planner's clock: deterministic work budgets, with the wall clock only as a cap.

A planner that shares out wall-clock time gives a different plan whenever the machine is busier
or quieter. So the planner measures its work instead: CP-SAT reports the *deterministic time*
each solve spent (a count of its operations, the same on every run of the same model with the
same parameters), and the local searches charge a fixed amount per move they evaluate. A
:class:`WorkClock` adds these up in **budget seconds** (:func:`charge`): each solve costs
:data:`CALL_S`, :data:`ROW_S` per constraint of its model (building it and CP-SAT's presolve,
which its deterministic time leaves out: a problem making many small solves of large models was
otherwise charged next to nothing for them and reached the cap) and its deterministic time over
:func:`work_rate`: :data:`WORK_PER_S_ONE` deterministic seconds make one budget second for a
single search, :data:`WORK_PER_S` for several interleaved ones (a single search without LP
accrues deterministic time several times slower per second of wall time). All are set to
overcharge, so that the wall-clock cap stays out of reach: benchmarks/clock_bench.py times every
solve of ``auto`` at the default budget, fits the time from one solve's end to the next's
against deterministic time and constraints, and compares (docs/results.md#clock);
benchmarks/repro_bench.py checks the cap.
Every stage that used to compare :func:`time.monotonic` with a deadline compares
:meth:`WorkClock.now` instead, so the same problem gets the same stages, solves and plan on
every run.

The wall clock stays a cap: each solve also stops at the ``time_limit`` of wall time (given
:data:`MIN_WALL_S` at least, so a solve started just before the cap may pass it by that much:
a solve stopped by the wall clock in its first moments can abort the process), and a run that
reaches it first stops early, logs a warning once and sets :attr:`WorkClock.capped` (its plan
may then differ between runs). CP-SAT's solvers are made here
(:meth:`WorkClock.solver`): with a fixed seed, a deterministic parallel search
(``interleave_search``) and without CP-SAT's own SIGINT handler, so Ctrl-C raises
``KeyboardInterrupt`` in Python at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = [
    "CALL_S",
    "EVAL_S_PER_NODE",
    "MIN_WALL_S",
    "MOVE_S_PER_NODE",
    "PLACE_S",
    "ROW_S",
    "SIM_S_PER_NODE",
    "SIM_S_PER_PART",
    "START_S",
    "START_S_PER_NODE",
    "START_S_PER_NODE_UNIT2",
    "WORK_PER_S",
    "WORK_PER_S_ONE",
    "WorkClock",
    "charge",
    "start_charge",
    "work_rate",
]

log = logging.getLogger(__name__)

WORK_PER_S = 0.28  # CP-SAT deterministic seconds per second of time_limit, parallel searches
WORK_PER_S_ONE = 0.09  # the same for a single search (it accrues deterministic time slower)
CALL_S = 0.014  # budget seconds each CP-SAT solve costs besides its deterministic time
ROW_S = 7e-5  # and per constraint of its model (building it, CP-SAT's presolve)
MOVE_S_PER_NODE = 4.2e-5  # budget seconds a move judged by name costs, per node of the problem
EVAL_S_PER_NODE = 1.0e-5  # the same for a local-search move judged on indices (plan/evaluate.py)
SIM_S_PER_NODE = 1.0e-6  # the same for partitions simulated as they are (plan/part_anneal.py),
SIM_S_PER_PART = 1.0e-5  # and per partition of the candidate
#: wall seconds a CP-SAT solve is given at least, past the cap if need be: OR-Tools 9.15
#: aborts the whole process (``Check failed: solution->size() == postsolve_mapping.size()``)
#: now and then when a solve of a hinted model is stopped by its wall-time limit early, during
#: its presolve (seen replaying one captured model; never when deterministic time stopped it)
MIN_WALL_S = 0.5
START_S = 0.02  # auto's block floors and list heuristics: a fixed part,
START_S_PER_NODE = 6e-4  # per node (cutting and checking each heuristic's plan),
START_S_PER_NODE_UNIT2 = 1.2e-4  # and per node x units squared
PLACE_S = 1.4e-5  # per node the branch heuristic's region list schedules place
#: the chain programme (plan/chain.py): per node, and per node^2 x units^2 (the segments); the
#: finer one charging whole hand-offs per node^3 x units^2 (about twice their time here)
CHAIN_S_PER_NODE, CHAIN_S_PER_CELL, HANDOFF_S_PER_CELL = 5e-4, 7e-8, 2.5e-9


class WorkClock:
    """A budget of ``time_limit`` seconds of deterministic work, capped by as much wall time.

    Examples
    --------
    >>> clock = WorkClock(10.0)
    >>> clock.spend(2.5)
    >>> clock.now()
    2.5
    >>> clock.expired(2.5), clock.expired(3.0)
    (True, False)
    """

    def __init__(self, time_limit: float) -> None:
        self.limit_s = max(0.0, time_limit)
        self.wall_end = time.monotonic() + self.limit_s
        self.capped = False
        self._spent = 0.0

    @classmethod
    def of(cls, clock: WorkClock | None, time_limit: float) -> WorkClock:
        """``clock``, or a new one of ``time_limit`` seconds when None."""
        return clock if clock is not None else cls(time_limit)

    def now(self) -> float:
        """Budget seconds of work spent so far (deterministic)."""
        return self._spent

    def spend(self, seconds: float) -> None:
        """Charge ``seconds`` budget seconds of work."""
        self._spent += max(0.0, seconds)

    def wall_left(self, grace_s: float = 0.0) -> float:
        """Wall seconds left before the cap (plus ``grace_s``)."""
        return self.wall_end + grace_s - time.monotonic()

    def hit_cap(self, grace_s: float = 0.0) -> bool:
        """Whether the wall-clock cap (plus ``grace_s``) has passed; warns the first time."""
        if self.wall_left(grace_s) > 0:
            return False
        if not self.capped:
            self.capped = True
            log.warning(  # limit_s may be a stage's share (a stream plan's latency stage)
                "planning reached its wall-clock limit of %.3g s (--time-limit, or the share "
                "of it this planning stage was given) before its work budget; the plan may "
                "differ between runs (a quieter machine or a larger --time-limit gives a "
                "reproducible one)",
                self.limit_s,
            )
        return True

    def expired(self, deadline: float, grace_s: float = 0.0) -> bool:
        """Whether the work spent reached ``deadline`` (budget seconds) or the wall cap passed."""
        return self._spent >= deadline - 1e-12 or self.hit_cap(grace_s)

    def solver(self, cp_model: Any, time_limit: float, workers: int, seed: int) -> Any:
        """A CP-SAT solver that may spend ``time_limit`` budget seconds, deterministically:
        a fixed seed, ``interleave_search`` when it has several workers (one batch of
        ``workers`` tasks at a time), and SIGINT left to Python. Pass it to :meth:`solve`."""
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.catch_sigint_signal = False
        p.max_deterministic_time = max(1e-4, (time_limit - CALL_S) * work_rate(workers))
        p.max_time_in_seconds = max(MIN_WALL_S, self.wall_left())
        p.num_workers = max(1, workers)
        p.random_seed = seed
        if workers > 1:
            p.interleave_search = True
            p.interleave_batch_size = workers
        return solver

    def solve(self, solver: Any, model: Any) -> Any:
        """``solver.solve(model)``, charging its deterministic time and :data:`CALL_S`;
        returns the status."""
        code = solver.solve(model)
        det = solver.response_proto.deterministic_time
        self.spend(charge(det, len(model.proto.constraints), solver.parameters.num_workers))
        self.hit_cap()
        return code


def work_rate(workers: int) -> float:
    """CP-SAT deterministic seconds per budget second for a solver of ``workers`` workers:
    :data:`WORK_PER_S_ONE` for one, :data:`WORK_PER_S` for several (their interleaved
    searches, neighbourhood searches among them, accrue deterministic time faster per second
    of wall time; ``benchmarks/clock_bench.py`` measures both)."""
    return WORK_PER_S_ONE if workers <= 1 else WORK_PER_S


def start_charge(nodes: int, units: int) -> float:
    """Budget seconds ``auto``'s block floors and list heuristics (but ``branch``, charged
    :data:`PLACE_S` per placement) cost on a problem of ``nodes`` nodes and ``units`` units:
    deterministic work the wall clock would otherwise spend unaccounted.

    >>> round(start_charge(100, 3), 6)
    0.188
    """
    return START_S + START_S_PER_NODE * nodes + START_S_PER_NODE_UNIT2 * nodes * units**2


def chain_charge(nodes: int, units: int, *, whole_handoff: bool = False) -> float:
    """Budget seconds the chain programme costs (``whole_handoff``: the finer one).

    >>> round(chain_charge(430, 5), 3), round(chain_charge(430, 3, whole_handoff=True), 3)
    (0.539, 1.789)
    """
    if whole_handoff:
        return HANDOFF_S_PER_CELL * nodes**3 * units**2
    return CHAIN_S_PER_NODE * nodes + CHAIN_S_PER_CELL * nodes**2 * units**2


def charge(det_s: float, rows: int, workers: int) -> float:
    """Budget seconds a solve is charged: :data:`CALL_S`, :data:`ROW_S` per constraint of its
    model and its deterministic time over :func:`work_rate`.

    >>> round(charge(0.09, 1000, 1), 6)
    1.084
    """
    return CALL_S + ROW_S * rows + det_s / work_rate(workers)
