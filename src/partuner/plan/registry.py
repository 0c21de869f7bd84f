"""The scheduler registry: built-ins register with :func:`register`, plugins by entry point.

A third-party package adds a scheduler by exposing a :class:`Scheduler` subclass in the
``partuner.schedulers`` entry-point group::

    [project.entry-points."partuner.schedulers"]
    mine = "my_package.sched:MyScheduler"

Plugins are loaded the first time a name is looked up that no built-in has, or when
:func:`scheduler_names` lists them; a plugin that fails to load is skipped with a warning.
"""

from __future__ import annotations

import abc
import logging
from importlib.metadata import entry_points
from typing import ClassVar, TypeVar

from partuner.errors import PartunerError
from partuner.plan.problem import Problem
from partuner.plan.schedule import Schedule

__all__ = ["Scheduler", "register", "get_scheduler", "scheduler_names", "ENTRY_POINT_GROUP"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "partuner.schedulers"

_REGISTRY: dict[str, type[Scheduler]] = {}
_plugins_loaded = False


class Scheduler(abc.ABC):
    """Places every node of a problem on a unit and in time.

    Subclasses set ``name`` and implement :meth:`schedule`; their docstring cites the paper.
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def schedule(self, problem: Problem, *, time_limit: float | None = None) -> Schedule:
        """Schedule ``problem``, spending at most about ``time_limit`` seconds if given.

        Raises ``InfeasiblePlanError`` when the problem has no schedule.
        """


S = TypeVar("S", bound=type[Scheduler])


def register(cls: S) -> S:
    """Class decorator adding a :class:`Scheduler` subclass under its ``name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__} needs a non-empty string 'name' to be registered")
    other = _REGISTRY.get(name)
    if other is not None and other is not cls:
        raise ValueError(f"scheduler name {name!r} is taken by {other.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
                raise TypeError(f"{ep.value} is not a partuner Scheduler subclass")
            if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
                raise ValueError(f"its name {cls.name!r} is already taken")
            register(cls)
        except Exception as exc:  # a broken plugin must not break partuner
            log.warning("skipping scheduler plugin %r (%s): %s", ep.name, ep.value, exc)


def scheduler_names() -> list[str]:
    """The names of every available scheduler, built-in and plugin, sorted."""
    _load_plugins()
    return sorted(_REGISTRY)


def get_scheduler(name: str) -> Scheduler:
    """A new instance of the scheduler called ``name``.

    Raises
    ------
    PartunerError
        No scheduler has that name; the message lists the known ones.
    """
    if name not in _REGISTRY:
        _load_plugins()
    cls = _REGISTRY.get(name)
    if cls is None:
        raise PartunerError(f"unknown scheduler {name!r}; known: {sorted(_REGISTRY)}")
    return cls()
