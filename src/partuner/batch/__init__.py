"""Splitting one batch across units by profiled throughput, running the parts, merging them.

``BatchModel`` sets a model's batch size; ``profile_batches`` times the whole model per unit and
size and fits a ``LatencyCurve``; ``split_exact`` / ``split_greedy`` / ``split_even`` choose the
items per unit; ``run_split`` runs the parts concurrently, concatenates them in input order and
checks them against the whole batch; ``evaluate_batch`` does all of it (the CLI's ``batch``).
See ``docs/batch.md``.
"""

from partuner.batch.evaluate import BatchResult, evaluate_batch
from partuner.batch.hybrid import HybridRun, run_hybrid
from partuner.batch.model import BatchDimensionError, BatchError, BatchModel
from partuner.batch.profile import (
    BatchProfile,
    LatencyCurve,
    UnitFailure,
    batch_signature,
    power_sizes,
    profile_batches,
)
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
    METHODS,
    Split,
    conflict_free_sets,
    conflicts_from_cores,
    split_batch,
    split_brute_force,
    split_even,
    split_exact,
    split_greedy,
)

__all__ = [
    "METHODS",
    "BatchDimensionError",
    "BatchError",
    "BatchModel",
    "BatchProfile",
    "BatchResult",
    "HybridRun",
    "RunStats",
    "RunnerCache",
    "SplitRun",
    "batch_feeds",
    "evaluate_batch",
    "reference",
    "run_hybrid",
    "run_split",
    "unit_throughput",
    "LatencyCurve",
    "Split",
    "UnitFailure",
    "batch_signature",
    "conflict_free_sets",
    "conflicts_from_cores",
    "power_sizes",
    "profile_batches",
    "split_batch",
    "split_brute_force",
    "split_even",
    "split_exact",
    "split_greedy",
]
