"""The whole batch job: profile per unit and size, split three ways, run, check, compare.

:func:`evaluate_batch` is what ``partuner batch`` calls. Baselines, all measured in the same run:
each unit alone on the whole batch (``unit_throughput``; the best of them is "best single unit"
and, over the best set of units that may run together, their sum is the physical limit of a data
split), the even split and the seed's greedy split. With ``hybrid`` the operator-level plan over
all units (``partuner tune``'s job) runs the whole batch as one more candidate.

The exact split is made on curves that are linear between the sampled sizes; the sizes it
chooses (and one item either side) are then timed and the split made again, up to
:data:`REFINE_ROUNDS` times, so that it stands on measured sizes, not on interpolation.

The measured runs are spread over :data:`ROUNDS` rounds, each running every split and every
unit alone, so that a change in the machine's load hits them alike; each figure is the median
of its rounds' medians.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from partuner.batch.hybrid import HybridRun, run_hybrid
from partuner.batch.model import BatchError, BatchModel
from partuner.batch.profile import BatchProfile, measure_sizes, profile_batches
from partuner.batch.run import (
    RunnerCache,
    RunStats,
    SplitRun,
    batch_feeds,
    reference,
    run_split,
    unit_throughput,
)
from partuner.batch.split import (
    Split,
    conflict_free_sets,
    conflicts_from_cores,
    split_even,
    split_exact,
    split_greedy,
)
from partuner.profile.store import ProfileStore
from partuner.runtime import validate_feeds
from partuner.units import UnitSet

__all__ = ["BatchResult", "evaluate_batch"]

log = logging.getLogger(__name__)


#: how many times the exact split is re-made after timing the sizes it chose
REFINE_ROUNDS = 3
#: rounds the measured runs are spread over (at least 3 runs each)
ROUNDS = 3


@dataclass
class BatchResult:
    """Everything ``partuner batch`` found: the profile, the splits, their runs, the baselines."""

    model: str
    batch: int
    profile: BatchProfile
    splits: dict[str, Split]  # "exact", "greedy", "even"
    runs: dict[str, SplitRun]
    alone: dict[str, dict[str, Any]]  # unit -> each unit alone on the whole batch
    limit_units: list[str]  # the conflict-free set whose summed throughput is the largest
    hybrid: HybridRun | None
    notes: list[str]
    #: the exact split's merged outputs (its last run), in input order; not in ``to_dict``
    outputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def run(self) -> SplitRun:
        """The exact split's run (the result)."""
        return self.runs["exact"]

    @property
    def physical_limit(self) -> float:
        """Items/s: the sum of the units' throughputs alone, over :attr:`limit_units`."""
        return sum(float(self.alone[u]["throughput"]) for u in self.limit_units)

    def best_single(self) -> tuple[str, dict[str, Any]] | None:
        """The unit with the largest throughput alone among those that take the whole batch."""
        whole = {u: a for u, a in self.alone.items() if a["batch"] == self.batch}
        if not whole:
            return None
        name = max(whole, key=lambda u: float(whole[u]["throughput"]))
        return name, whole[name]

    @property
    def modeled(self) -> bool:
        return self.run.modeled

    def loses_to_single(self) -> str | None:
        """One line when the exact split measured slower than the best single unit alone on
        the whole batch (None otherwise, or when a modeled unit makes the times emulated)."""
        best = self.best_single()
        run = self.run
        if best is None or run.modeled or best[1]["modeled"] or run.retried:
            return None  # (a unit lost mid-batch: the split did not run as made)
        if [u for u, b in run.split.sizes.items() if b > 0] == [best[0]]:
            return None  # the split is that unit alone
        split_ms, alone_ms = run.stats.median_us / 1e3, float(best[1]["median_ms"])
        if split_ms <= alone_ms:
            return None
        return (
            f"the split loses to one unit: {split_ms:.3f} ms, {split_ms / alone_ms - 1:.0%} "
            f"slower than {best[0]} alone on the whole batch ({alone_ms:.3f} ms); run it there"
        )

    def to_dict(self) -> dict[str, Any]:
        run = self.run
        best = self.best_single()
        out: dict[str, Any] = {
            "model": self.model,
            "batch": self.batch,
            "method": "exact",
            "split": dict(run.split.sizes),
            "predicted_ms": run.split.predicted_us / 1e3,
            "measured_ms": run.stats.median_us / 1e3,
            "throughput": run.throughput,
            "unit_predicted_ms": {u: t / 1e3 for u, t in run.split.unit_us.items()},
            "unit_measured_ms": {u: t / 1e3 for u, t in run.stats.unit_us.items()},
            "check": run.check.to_dict(),
            "retried": dict(run.retried),
            "modeled": run.modeled,
            "timing": "emulated on the host" if run.modeled else "measured",
            "loses_to_single": self.loses_to_single(),
            "unit_throughput": {u: a["throughput"] for u, a in self.alone.items()},
            "unit_alone": self.alone,
            "physical_limit": self.physical_limit,
            "limit_units": self.limit_units,
            "efficiency": run.throughput / self.physical_limit if self.physical_limit else None,
            "baselines": {
                "best_single": None
                if best is None
                else {
                    "unit": best[0],
                    "measured_ms": best[1]["median_ms"],
                    "throughput": best[1]["throughput"],
                    "predicted_ms": self.profile.curves[best[0]](self.batch) / 1e3,
                },
                **{m: self.runs[m].to_dict() for m in ("even", "greedy")},
            },
            "hybrid": None if self.hybrid is None else self.hybrid.to_dict(),
            "notes": self.notes,
            "profile": {
                "measured": self.profile.measured,
                "reused": self.profile.reused,
                "sizes": {u: sorted(rows) for u, rows in self.profile.table.items()},
                "failures": self.profile.to_dict()["failures"],
            },
        }
        if self.hybrid is not None:
            out["best"] = "hybrid" if self.hybrid.throughput > run.throughput else "split"
        return out


def evaluate_batch(
    model: BatchModel,
    units: UnitSet,
    batch: int,
    *,
    store: ProfileStore | None = None,
    repeat: int = 10,
    budget_s: float = 0.5,
    min_repeats: int = 5,
    greedy_chunk: int = 1,
    hybrid: bool = False,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    retry: bool = False,
    feeds: Mapping[str, np.ndarray] | None = None,
) -> BatchResult:
    """Profile ``model`` on ``units`` up to ``batch``, split it (exact, greedy, even), run each
    split and each unit alone on the same inputs, and check the merged outputs.

    ``feeds``: the batch's inputs, ``batch`` items each (checked against the model); inputs it
    lacks are seeded random (``seed``). The exact split's merged outputs are
    :attr:`BatchResult.outputs`.

    Raises
    ------
    BatchError : ``batch`` < 1, no unit can take an item, the units cannot take ``batch`` items.
    BatchDimensionError : (from :class:`BatchModel`) the batch dimension cannot change.
    UnitUnavailableError : a unit cannot run here, or (without ``retry``) was lost meanwhile
        (a Ray node: :class:`~partuner.units.ray_unit.RayNodeLost` names it). With ``retry``,
        a unit lost during the runs has its share re-run on the fastest unit left (outputs in
        input order, checked as always), is left out of the rest, and a note says so.
    """
    say = progress or (lambda _msg: None)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise BatchError(f"batch size must be an integer >= 1, got {batch!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise BatchError(f"repeat must be an integer >= 1, got {repeat!r}")
    say(f"profiling {len(units)} unit(s) at batch sizes up to {batch}")
    prof = profile_batches(
        model, units, batch, store=store, budget_s=budget_s, min_repeats=min_repeats
    )
    curves = prof.curves
    if not curves:
        raise BatchError(
            f"no unit can run {model.name} even at batch 1: "
            + "; ".join(f"{u}: {f.reason}" for u, f in prof.failures.items())
        )
    conflicts = conflicts_from_cores({u: units[u].cores for u in curves})
    try:
        exact = split_exact(batch, curves, conflicts)
        # The curves are linear between sampled sizes, and a unit's cost per item can jump
        # between them: time the sizes the split chose (and one more item each way, where the
        # balance moves) and split again, until the split stands on measured sizes.
        for _ in range(REFINE_ROUNDS):
            near = {u: (b - 1, b, b + 1) for u, b in exact.sizes.items() if b > 0}
            if not measure_sizes(
                model, units, prof, near, store=store, budget_s=budget_s, min_repeats=min_repeats
            ):
                break
            say(f"timed the sizes the split chose: {_fmt_sizes(exact)}; splitting again")
            curves = prof.curves
            exact = split_exact(batch, curves, conflicts)
    except BatchError as exc:
        raise BatchError("; ".join([*prof.notes(), str(exc)])) from None
    notes = prof.notes()
    splits = {
        "exact": exact,
        "greedy": split_greedy(batch, curves, conflicts, chunk=greedy_chunk),
        "even": split_even(batch, curves, conflicts),
    }
    given = dict(feeds or {})
    feeds = {**batch_feeds(model, batch, seed), **given}
    validate_feeds(model.at(batch), feeds)
    say("running the reference (onnxruntime CPU f32, whole batch)")
    ref = reference(model, feeds)
    # Rounds: every split and every unit alone run in each round, so that a change in the
    # machine's load hits them alike; each figure is the median of its rounds' medians.
    rounds = max(1, min(ROUNDS, repeat // 3))
    per_round = [repeat // rounds + (1 if i < repeat % rounds else 0) for i in range(rounds)]
    first_of: dict[tuple, str] = {}  # identical splits are measured once
    for method, split in splits.items():
        first_of.setdefault(tuple(sorted(split.sizes.items())), method)
    distinct = {m: first_of[tuple(sorted(sp.sizes.items()))] for m, sp in splits.items()}
    split_rounds: dict[str, list[SplitRun]] = {m: [] for m in splits if distinct[m] == m}
    merged: dict[str, dict[str, np.ndarray]] = {}  # per measured split: its last run's outputs
    alone_rounds: list[dict[str, dict[str, object]]] = []
    lost: set[str] | None = set() if retry else None
    with RunnerCache(model, units) as runners:
        for r, n in enumerate(per_round):
            for method in split_rounds:
                if r == 0:
                    say(f"running the {method} split {_fmt_sizes(splits[method])}")
                run, merged[method] = run_split(
                    model,
                    units,
                    splits[method],
                    feeds,
                    repeat=n,
                    runners=runners,
                    ref=ref,
                    lost=lost,
                )
                split_rounds[method].append(run)
            if r == 0:
                say("running each unit alone on the whole batch")
            alone_rounds.append(
                unit_throughput(model, units, curves, feeds, repeat=n, runners=runners, lost=lost)
            )
    runs = {m: replace(_merge(split_rounds[distinct[m]]), split=splits[m]) for m in splits}
    for unit in sorted(lost or ()):
        took = sorted(
            {r.retried[unit] for rs in split_rounds.values() for r in rs if unit in r.retried}
        )
        notes.append(
            f"unit {unit!r} was lost during the runs; its share was re-run on "
            f"{', '.join(took) or 'the others'} (--retry), and it was left out after that"
        )
    alone = _merge_alone(
        [{u: a for u, a in r.items() if u not in (lost or ())} for r in alone_rounds]
    )

    # a split of `batch` items keeps at most `batch` units busy (one item cannot be split)
    def busiest(s: list[str]) -> list[str]:  # its `batch` fastest units, in their order
        top = set(sorted(s, key=lambda u: -float(alone[u]["throughput"]))[:batch])
        return [u for u in s if u in top]

    sets = [busiest(s) for s in conflict_free_sets(list(alone), conflicts)]
    limit_units = max(sets, key=lambda s: sum(float(alone[u]["throughput"]) for u in s))
    hyb = None
    if hybrid:
        say("profiling and running the operator-level plan on the whole batch (--hybrid)")
        hyb = run_hybrid(model, units, batch, feeds, ref, store=store, repeat=repeat)
    out = merged[distinct["exact"]]
    return BatchResult(model.name, batch, prof, splits, runs, alone, limit_units, hyb, notes, out)


def _merge(rounds: list[SplitRun]) -> SplitRun:
    """One run of several rounds: the median of the rounds' medians, the widest spread."""
    if len(rounds) == 1:
        return rounds[0]
    retried = {u: v for r in rounds for u, v in r.retried.items()}
    stats = [r.stats for r in rounds]
    units = {u for s in stats for u in s.unit_us}
    merged = RunStats(
        statistics.median(s.median_us for s in stats),
        min(s.p10_us for s in stats),
        max(s.p90_us for s in stats),
        sum(s.runs for s in stats),
        {u: statistics.median(s.unit_us[u] for s in stats if u in s.unit_us) for u in units},
    )
    checks = [r.check for r in rounds]
    check = next((c for c in checks if not c.passed), checks[-1])
    return replace(rounds[-1], stats=merged, check=check, retried=retried)


def _merge_alone(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each unit alone over several rounds: the median of the rounds' medians."""
    out = {}
    for unit, first in rounds[0].items():
        if not all(unit in r for r in rounds):
            continue
        ms = statistics.median(float(r[unit]["median_ms"]) for r in rounds)
        out[unit] = {**first, "median_ms": ms, "throughput": int(first["batch"]) / (ms / 1e3)}
    return out


def _fmt_sizes(split: Split) -> str:
    return "{" + ", ".join(f"{u}: {b}" for u, b in split.sizes.items()) + "}"
