"""How busy the machine was while something was timed: other work's share of its cores.

A time measured while other programs ran (a test suite, a build, another profiling run, a
neighbour on the hypervisor) is a time plans cannot trust, and the profile store would hand it
to every later run. :class:`LoadMeter` reads the CPU time of the cores this process may run on
(``/proc/stat``: busy and stolen by the hypervisor; all cores unless it is pinned to some, as a
Ray unit's actor is to the unit's ``cores``) and this process's own (all its threads, and the
child processes it waited for), so that what *other* work took there is their difference.

``/proc/stat`` counts in clock ticks (10 ms), so a window is stretched back to at least
:data:`SPAN_S` over the readings taken before it (a row timed in 5 ms is judged by the
quarter-second before it ended; the first rows of a run wait until half that has passed since
the meter's first reading); where the file cannot be read (not Linux), the share is unknown
(``None``), never a guess.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from partuner.profile.store import BUSY_SHARE, NET, OK, Measurement

__all__ = [
    "BUSY_SHARE",
    "SPAN_S",
    "LoadMeter",
    "is_busy",
    "stale",
    "time_again",
    "warn_busy",
]


#: the shortest window a share is computed over (clock ticks are 10 ms)
SPAN_S = 0.25

_STAT = Path("/proc/stat")


def is_busy(load: float | None) -> bool:
    """Whether a row timed at ``load`` (other work's share, ``None``: unknown) is busy.

    >>> is_busy(0.4), is_busy(0.1), is_busy(None)
    (True, False, False)
    """
    return load is not None and load > BUSY_SHARE


def stale(m: Measurement, meter: LoadMeter) -> bool:
    """Whether a stored ``ok`` row is to be timed again where its unit is here: it was timed on
    a busy machine, or by a partuner that did not note the load (once: the new timing notes
    it; not where this machine's load cannot be read)."""
    if m.status != OK:
        return False
    return is_busy(m.load) or (m.load is None and meter.works and not m.detail.startswith(NET))


def _machine() -> tuple[float, int] | None:
    """(busy CPU seconds so far of the cores this process may run on, how many), or None."""
    try:
        mine = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        rows = [ln.split() for ln in _STAT.read_text().splitlines() if ln.startswith("cpu")]
        # user nice system idle iowait irq softirq steal, per core
        ticks = [[int(x) for x in r[1:9]] for r in rows if r[0] in mine]
    except (OSError, ValueError, AttributeError):
        return None
    if not ticks or any(len(t) < 8 for t in ticks):
        return None
    busy = sum(sum(t) - t[3] - t[4] for t in ticks)
    return busy / os.sysconf("SC_CLK_TCK"), len(ticks)


def _ours() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class LoadMeter:
    """Readings of the machine's and this process's CPU time; :meth:`share` gives other work's
    share of all cores' time since a reading.

    >>> meter = LoadMeter()
    >>> start = meter.read()
    >>> share = meter.share(start)
    >>> share is None or 0.0 <= share <= 1.0
    True
    """

    def __init__(self) -> None:
        self._readings: deque[tuple[float, float, float]] = deque(maxlen=4096)
        self._cores = 1

    @property
    def works(self) -> bool:
        """Whether this machine's load can be read here (``/proc/stat``)."""
        return bool(self._readings)

    def read(self) -> float:
        """Take a reading now; returns its time (``time.monotonic()``) to pass to
        :meth:`share`."""
        now = time.monotonic()
        got = _machine()
        if got is not None:
            self._cores = got[1]
            self._readings.append((now, got[0], _ours()))
        return now

    def share(self, since: float) -> float | None:
        """Other work's share of all cores' time from ``since`` (a :meth:`read` time, moved
        back to at least :data:`SPAN_S` before now where earlier readings allow) until now;
        ``None`` if unknown."""
        self.read()
        if len(self._readings) < 2:
            return None
        end = self._readings[-1]
        start_by = min(since, end[0] - SPAN_S)
        first = None
        for r in reversed(self._readings):
            if r[0] <= start_by:
                first = r
                break
        if first is None:  # early in a run: from the first reading, at least SPAN_S / 2 long
            first = self._readings[0]
            wait = SPAN_S / 2 - (end[0] - first[0])
            if wait > 0:
                time.sleep(wait)
                self.read()
                end = self._readings[-1]
        wall = end[0] - first[0]
        if wall <= 0:
            return None
        other = (end[1] - first[1]) - (end[2] - first[2])
        return min(max(other / (wall * self._cores), 0.0), 1.0)


def time_again(
    old: Measurement | None, make: Callable[[], Measurement], meter: LoadMeter
) -> tuple[Measurement, bool]:
    """Time an item (``make``), noting how busy the machine was meanwhile: ``(the row to use,
    whether it is new)``. A stored ``ok`` row timed on a busier machine (``old``) is replaced
    only by a timing on a quieter one that did not fail; else the old row stays in use."""
    start = meter.read()
    m = make()
    m = replace(m, load=meter.share(start))
    if old is not None and old.status == OK:  # a busy row, timed again
        if m.status != OK or (is_busy(m.load) and (m.load or 0.0) >= (old.load or 0.0)):
            return old, False
    return m, True


def warn_busy(
    busy: list[tuple[str, str, float]], log: logging.Logger
) -> list[tuple[str, str, float]]:
    """One warning on ``log`` per unit with rows in use timed on a busy machine (``busy``:
    ``(unit, what, share)``); returns ``busy``."""
    by_unit: dict[str, list[tuple[str, float]]] = {}
    for unit, what, share in busy:
        by_unit.setdefault(unit, []).append((what, share))
    for unit, rows in by_unit.items():
        names = sorted({w for w, _ in rows})
        log.warning(
            "%s: %d measurement(s) in use (%s%s) were timed while other work took up to "
            "%.0f%% of the machine's cores; the next profiling run times them again: profile "
            "on a quiet machine for costs plans can trust",
            f"units {unit.replace('/', ', ')}" if "/" in unit else f"unit {unit}",
            len(rows),
            ", ".join(names[:3]),
            ", ..." if len(names) > 3 else "",
            100 * max(s for _, s in rows),
        )
    return busy
