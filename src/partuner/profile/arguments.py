"""The checks of :func:`~partuner.profile.profile_model`'s arguments: a library user's wrong
type or value is one :class:`~partuner.errors.ProfileError` naming it, not an AttributeError
from deep inside, and a misspelt fuse pattern is refused rather than matching nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from partuner.errors import ProfileError
from partuner.graph import ModelGraph
from partuner.profile.groups import parse_pattern
from partuner.profile.store import ProfileStore
from partuner.units import UnitSet

__all__ = ["check_arguments"]


def check_arguments(
    graph: Any,
    units: Any,
    store: Any,
    budget_s: Any,
    fuse: Sequence[Sequence[str]] | None,
    fuse_auto: Any,
) -> None:
    """Raise ProfileError for the first argument of the wrong kind.

    Examples
    --------
    >>> check_arguments(None, None, None, 0.1, None, 0)
    Traceback (most recent call last):
    partuner.errors.ProfileError: graph must be a ModelGraph (partuner.load_model(...)), got None
    """
    if not isinstance(graph, ModelGraph):
        raise ProfileError(
            f"graph must be a ModelGraph (partuner.load_model(...)), got {graph!r:.60}"
        )
    if not isinstance(units, UnitSet):
        raise ProfileError(f"units must be a UnitSet (partuner.load_units(...)), got {units!r:.60}")
    if store is not None and not isinstance(store, ProfileStore):
        raise ProfileError(
            f"store must be a ProfileStore (ProfileStore(path)) or None, got {store!r:.60}"
        )
    if isinstance(budget_s, bool) or not isinstance(budget_s, int | float):
        raise ProfileError(f"budget_s must be seconds per timed item, got {budget_s!r:.40}")
    if not math.isfinite(budget_s) or budget_s <= 0:
        raise ProfileError(f"budget_s must be finite and > 0 seconds, got {budget_s}")
    if isinstance(fuse_auto, bool) or not isinstance(fuse_auto, int) or fuse_auto < 0:
        raise ProfileError(f"fuse_auto must be an integer >= 0 (0: off), got {fuse_auto!r:.40}")
    for pattern in fuse or ():
        if isinstance(pattern, str) or not all(isinstance(op, str) for op in pattern):
            raise ProfileError(
                f"fuse must list patterns, each a list of op types like ['Conv', 'Relu'], got "
                f"{pattern!r:.60} among them"
            )
        parse_pattern("-".join(pattern))  # each op type known, at least two of them
