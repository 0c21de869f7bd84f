"""The profile store: measured costs in an embedded SQLite database.

Rows are keyed by (unit fingerprint, signature): a unit's fingerprint covers its backend, version,
speed-relevant options and the host CPU, never its name, so two identical units share rows and a
second model reuses every signature already measured. Each measurement is committed as soon as it
is taken (an interrupted run keeps what it measured); WAL mode lets two profiling processes share
one file.

A row timed by this partuner carries, in the ``conditions`` table, how busy the machine was
meanwhile (other work's share of its cores, ``profile/load.py``; rows without one: unknown); the
profiler times a busy row again. Earlier versions ignore that table.

A row's status is ``ok``, ``unsupported`` (the unit cannot run the item: an answer for good) or
``failed`` (timing it failed: a compiler crash, a timeout, any other error; the reason is in
``detail`` and the profiler times it again on its next run). Older partuner versions read a
``failed`` row as not runnable, as they read any row that is not ``ok``.

Every SQLite error becomes a one-line :class:`~partuner.errors.ProfileError` naming the file and
what to do; a store that cannot be written (a read-only file or folder) opens for reading, and
refuses only writes. Nothing stored is ever deleted or rewritten on an error.

Default location: ``$PARTUNER_DB``, else ``$XDG_CACHE_HOME/partuner/profiles.db``, else
``~/.cache/partuner/profiles.db``.
"""

from __future__ import annotations

import ast
import logging
import math
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from partuner.errors import ProfileError

__all__ = [
    "BUSY_SHARE",
    "FAILED",
    "NET",
    "OK",
    "REFUSED",
    "UNSUPPORTED",
    "Measurement",
    "ProfileStore",
    "default_db_path",
    "net_us",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS units (
    fingerprint TEXT PRIMARY KEY,
    description TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    fingerprint TEXT NOT NULL,
    signature   TEXT NOT NULL,
    status      TEXT NOT NULL,          -- 'ok', 'unsupported' or 'failed'
    median_us   REAL,
    p10_us      REAL,
    p90_us      REAL,
    count       INTEGER,
    detail      TEXT,
    created     REAL NOT NULL,
    PRIMARY KEY (fingerprint, signature)
);
CREATE TABLE IF NOT EXISTS conditions (
    fingerprint TEXT NOT NULL,
    signature   TEXT NOT NULL,
    other_load  REAL NOT NULL,          -- other work's share of all cores while it was timed
    PRIMARY KEY (fingerprint, signature)
);
"""

_TABLES = frozenset({"meta", "units", "measurements", "conditions"})

#: a row's status: timed; the unit cannot run the item (for good); timing it failed (retried)
OK, UNSUPPORTED, FAILED = "ok", "unsupported", "failed"

#: the most µs a stored time may be: the planner's bound on a cost (plan/problem.py MAX_US)
MAX_US = 1e12

#: a row timed while other work took more than this share of all cores' time is "busy": used
#: (it is the best there is) but timed again by the next profiling run (profile/load.py)
BUSY_SHARE = 0.25


@dataclass(frozen=True)
class Measurement:
    """One timed item: median and spread (10th/90th percentile) over ``count`` runs, in µs."""

    median_us: float
    p10_us: float
    p90_us: float
    count: int
    status: str = OK  # OK, UNSUPPORTED (the backend refused it) or FAILED (timing failed)
    detail: str = ""
    # other work's share of all cores' time while it was timed (profile/load.py); None: unknown
    load: float | None = None


#: ``detail`` prefix of a row whose time is already net of the call overhead (imported from a
#: NEST-C profile, which records operator times, not call times).
NET = "net:"

#: ``detail`` prefix of an ``unsupported`` row the profiler stored because the backend refused
#: the item (``unsupported`` rows without it come from older partuner versions or imports).
REFUSED = "refused:"


def net_us(m: Measurement, call_us: float) -> float:
    """A node's or group's time without the call overhead ``call_us``."""
    if m.detail.startswith(NET):
        return m.median_us
    return max(m.median_us - call_us, 0.0)


def default_db_path() -> Path:
    env = os.environ.get("PARTUNER_DB")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "partuner" / "profiles.db"


def _kind(exc: sqlite3.Error) -> str:
    """``corrupt``, ``readonly``, ``full``, ``busy`` or ``other``."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text:
        return "corrupt"
    if "not a database" in text:
        return "corrupt"
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return "readonly"
    if name.startswith("SQLITE_FULL") or "is full" in text:
        return "full"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return "busy"
    return "other"


#: the files SQLite keeps beside a store while it is open
_SIDE = ("-wal", "-shm", "-journal")


class ProfileStore:
    """A SQLite-backed map ``(fingerprint, signature) -> Measurement``.

    ``read_only`` is true when the file or its folder cannot be written: reads work, writes
    raise :class:`ProfileError`.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = False
        self._why_read_only = ""
        self._conditions = True  # the conditions table is there (a read-only older store: no)
        # made by this store: a command that fails before it stores a row leaves no file behind
        self._made = str(self.path) != ":memory:" and not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if not self.path.is_file():
                why = exc.strerror or str(exc)
                blocker = next((q for q in self.path.parents if q.is_file()), None)
                if blocker is not None:
                    why = f"{blocker} is a file, not a folder"
                raise ProfileError(
                    f"cannot create profile store {self.path}: {why}; pass --db ELSEWHERE"
                ) from None
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            self._open()
        except sqlite3.Error as exc:
            self._db.close()
            if _kind(exc) != "readonly" or not self.path.is_file():
                raise self._error(exc, opening=True) from None
            self._open_read_only(exc)
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        # before anything is written (switching to WAL rewrites the file's header)
        hook = self._db.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchone()
        if hook is not None:  # SQL the file runs on partuner's writes (deleting rows, say)
            raise ProfileError(
                f"profile store {self.path} holds an SQL trigger {hook[0]!r}, which partuner never"
                " creates and which would run on every write; use another --db, or drop it"
            )
        # an SQLite file of something else (tables partuner never makes) is left as it is
        names = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
        foreign = sorted(n for n in names - _TABLES if not n.startswith("sqlite_"))
        if foreign:
            raise ProfileError(
                f"{self.path} is an SQLite database but not a partuner profile store (it holds "
                f"{', '.join(foreign[:3])}); pass another --db (it was left as it was)"
            )
        if "meta" in names:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is not None:
                self._check_version(row[0])
        # Switching a new file to WAL takes an exclusive lock that SQLite does not wait for
        # (no busy handler): two processes creating one store at once get "locked" at once.
        deadline = time.monotonic() + 30.0
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if _kind(exc) != "busy" or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            with self._db:
                self._db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
        else:
            self._check_version(row[0])

    def _check_version(self, value: str) -> None:
        try:
            version = int(value)
            if version < 1:
                raise ValueError(value)
        except (TypeError, ValueError):
            raise ProfileError(
                f"profile store {self.path} has schema {str(value)[:40]!r}, which is no version "
                "partuner writes; it is not a partuner profile store: use another --db"
            ) from None
        if version > SCHEMA_VERSION:
            raise ProfileError(
                f"profile store {self.path} has schema {value}, newer than this partuner "
                f"({SCHEMA_VERSION}); upgrade partuner or use another --db"
            )

    def _open_read_only(self, why: sqlite3.Error) -> None:
        """Open for reading only; a WAL file in a read-only folder needs ``immutable``."""
        uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro"
        last: sqlite3.Error = why
        for extra in ("", "&immutable=1"):
            try:
                self._db = sqlite3.connect(
                    uri + extra, uri=True, timeout=30.0, check_same_thread=False
                )
            except sqlite3.Error as exc:
                last = exc
                continue
            try:
                row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                self._db.execute("SELECT 1 FROM measurements LIMIT 1").fetchall()
            except sqlite3.Error as exc:
                self._db.close()
                last = exc
                if _kind(exc) in ("readonly", "other"):
                    continue
                raise self._error(exc, opening=True) from None
            if row is not None:
                self._check_version(row[0])
            self._conditions = (
                self._db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='conditions'"
                ).fetchone()
                is not None
            )
            self.read_only, self._why_read_only = True, str(why)
            log.info("profile store %s is read-only (%s): reading only", self.path, why)
            return
        raise self._error(last, opening=True) from None

    def _error(self, exc: sqlite3.Error, *, opening: bool = False) -> ProfileError:
        """The one-line error for ``exc``: the file, what is wrong, what to do."""
        p, kind = self.path, _kind(exc)
        if kind == "corrupt" and opening:
            msg = (
                f"profile store {p} is not a readable SQLite database ({exc}); "
                "move it aside or pass another --db (nothing was deleted)"
            )
        elif kind == "corrupt":
            msg = (
                f"profile store {p} is damaged ({exc}); restore it from a backup, or move it "
                "aside and pass another --db (nothing was deleted)"
            )
        elif kind == "readonly":
            msg = (
                f"profile store {p} is read-only ({exc}); make it and its folder writable or "
                "pass --db ELSEWHERE to keep new measurements (nothing stored was changed)"
            )
        elif kind == "full":
            msg = (
                f"profile store {p} cannot grow ({exc}); free some space or pass --db "
                "ELSEWHERE (the measurements stored so far are kept)"
            )
        elif kind == "busy":
            msg = (
                f"profile store {p} is locked by another process ({exc}); wait for it to "
                "finish or pass another --db"
            )
        else:
            msg = f"profile store {p}: {exc}; check the file and its folder or pass another --db"
        return ProfileError(" ".join(msg.split()))

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def close(self) -> None:
        with self._guard():
            self._db.close()

    def __enter__(self) -> ProfileStore:
        return self

    def __exit__(self, failed: object, *exc: object) -> None:
        empty = failed is not None and self._made and not self.read_only and self._empty()
        self.close()
        if empty:  # a refused command made this file and stored nothing in it
            for q in (self.path, *(self.path.with_name(self.path.name + s) for s in _SIDE)):
                q.unlink(missing_ok=True)

    def _empty(self) -> bool:
        try:
            with self._guard():
                return self._db.execute("SELECT 1 FROM measurements LIMIT 1").fetchone() is None
        except ProfileError:
            return False

    def get(self, fingerprint: str, signature: str) -> Measurement | None:
        load = (  # the conditions table, where the store has one (older read-only: none)
            "(SELECT other_load FROM conditions c WHERE c.fingerprint = m.fingerprint "
            "AND c.signature = m.signature)"
            if self._conditions
            else "NULL"
        )
        with self._guard():
            row = self._db.execute(
                f"SELECT median_us, p10_us, p90_us, count, status, detail, {load} "
                "FROM measurements m WHERE fingerprint=? AND signature=?",
                (fingerprint, signature),
            ).fetchone()
        if row is None:
            return None
        bad = _bad_field(row)
        if bad is not None:
            value = row[bad]
            shown = repr(value if not isinstance(value, str | bytes) else value[:40])
            raise ProfileError(
                f"profile store {self.path} holds a malformed row for {signature[:60]!r} "
                f"(unit fingerprint {fingerprint}): {_FIELDS[bad]} = {shown}, not "
                f"{_WANTED[bad]}; was it edited by hand? pass another --db to profile again "
                "(nothing was deleted)"
            )
        times = [math.inf if v is None else v for v in row[:3]]
        share = row[6] if isinstance(row[6], int | float) and 0 <= row[6] <= 1 else None
        return Measurement(*times, row[3] or 0, row[4], row[5] or "", share)

    def put(self, fingerprint: str, signature: str, m: Measurement, description: str = "") -> None:
        """Store one measurement and commit at once (an error leaves every earlier row)."""
        if self.read_only:
            raise self._error(sqlite3.OperationalError(self._why_read_only))
        with self._guard(), self._db:
            if description:
                self._db.execute(
                    "INSERT OR IGNORE INTO units VALUES (?, ?)", (fingerprint, description)
                )
            self._db.execute(
                "INSERT OR REPLACE INTO measurements VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    fingerprint,
                    signature,
                    m.status,
                    None if m.median_us == float("inf") else m.median_us,
                    None if m.p10_us == float("inf") else m.p10_us,
                    None if m.p90_us == float("inf") else m.p90_us,
                    m.count,
                    m.detail,
                    time.time(),
                ),
            )
            key = (fingerprint, signature)
            if m.load is None:
                self._db.execute("DELETE FROM conditions WHERE fingerprint=? AND signature=?", key)
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO conditions VALUES (?,?,?)", (*key, float(m.load))
                )

    def rows(self, fingerprint: str) -> list[tuple[str, Measurement]]:
        """Every row of one unit fingerprint, as ``(signature, measurement)``."""
        with self._guard():
            sigs = [
                r[0]
                for r in self._db.execute(
                    "SELECT signature FROM measurements WHERE fingerprint=? ORDER BY signature",
                    (fingerprint,),
                ).fetchall()
            ]
        out = []
        for sig in sigs:
            m = self.get(fingerprint, sig)
            if m is not None:
                out.append((sig, m))
        return out

    def summary(self) -> list[dict[str, object]]:
        """Per unit fingerprint: the unit's name (``unit``) and ``backend`` as described when
        measured, rows, rows the unit cannot run (``unsupported``), rows whose timing failed
        (``failed``, retried by the next profiling run) and rows timed while other work took
        more than :data:`BUSY_SHARE` of the machine's cores (``busy``, likewise)."""
        with self._guard():
            busy = (
                "SUM(m.status = 'ok' AND EXISTS (SELECT 1 FROM conditions c "
                "WHERE c.fingerprint = m.fingerprint AND c.signature = m.signature "
                "AND typeof(c.other_load) IN ('real', 'integer') "
                f"AND c.other_load > {BUSY_SHARE} AND c.other_load <= 1))"
                if self._conditions
                else "0"
            )
            rows = self._db.execute(
                "SELECT m.fingerprint, COALESCE(u.description, ''), COUNT(*), "
                "SUM(m.status NOT IN ('ok', 'failed')), SUM(m.status = 'failed'), "
                f"MAX(m.created), {busy} FROM measurements m "
                "LEFT JOIN units u ON u.fingerprint = m.fingerprint GROUP BY m.fingerprint"
            ).fetchall()
        return [
            {
                "fingerprint": _text(r[0]),
                **_unit_fields(_text(r[1])),
                "rows": r[2],
                "unsupported": r[3] or 0,
                "failed": r[4] or 0,
                "busy": r[6] or 0,
                # a time partuner wrote (seconds since 1970), else None: the file was edited
                "last": float(r[5]) if type(r[5]) in (int, float) and 0 <= r[5] < 1e11 else None,
            }
            for r in rows
        ]


_FIELDS = ("median_us", "p10_us", "p90_us", "count", "status", "detail")
_WANTED = (*[f"a time from 0 to {MAX_US:g} µs"] * 3, "a whole number", "text", "text")


def _bad_field(row: tuple[object, ...]) -> int | None:
    """The index (:data:`_FIELDS`) of ``row``'s first value partuner never writes, or None. An
    ``ok`` row's p10 may be below 0 (partuner 0.x's wake-up rows); others' median NaN or NULL."""
    for i, t in enumerate(math.inf if v is None else v for v in row[:3]):
        if not isinstance(t, int | float) or isinstance(t, bool) or (i == 0 and t < 0):
            return i
        if row[4] == OK and not abs(t) <= MAX_US:
            return i
    if not isinstance(row[3], int | None):
        return 3
    if not isinstance(row[4], str):
        return 4
    return None if isinstance(row[5], str | None) else 5


def _text(value: object) -> str:
    """A column partuner writes as text, as text whatever an edit of the file left there."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _unit_fields(description: str) -> dict[str, object]:
    """``unit`` and ``backend`` of a stored unit description: profiling stores a unit's
    ``describe()`` dict as its ``repr``; a description that is no such dict (a profiling kit's
    ``cpu0 on host (partuner kit, 1.2)``) is the ``unit`` whole, with no ``backend``.

    >>> _unit_fields("{'name': 'cpu0', 'backend': 'onnxruntime', 'cores': [0]}")
    {'unit': 'cpu0', 'backend': 'onnxruntime'}
    >>> _unit_fields("cpu0 on rpi (partuner kit, 1.2)")
    {'unit': 'cpu0 on rpi (partuner kit, 1.2)', 'backend': None}
    """
    try:
        fields = ast.literal_eval(description) if description.startswith("{") else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        fields = None  # e.g. a value literal_eval does not read (inf); the text is shown whole
    if isinstance(fields, dict) and isinstance(fields.get("name"), str):
        backend = fields.get("backend")
        return {"unit": fields["name"], "backend": backend if isinstance(backend, str) else None}
    return {"unit": description, "backend": None}
