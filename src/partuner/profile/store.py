"""The profile store: measured costs in an embedded SQLite database.

Rows are keyed by (unit fingerprint, signature): a unit's fingerprint covers its backend, version,
speed-relevant options and the host CPU, never its name, so two identical units share rows and a
second model reuses every signature already measured. Each measurement is committed as soon as it
is taken (an interrupted run keeps what it measured); WAL mode lets two profiling processes share
one file.

Default location: ``$PARTUNER_DB``, else ``$XDG_CACHE_HOME/partuner/profiles.db``, else
``~/.cache/partuner/profiles.db``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from partuner.errors import ProfileError

__all__ = ["NET", "Measurement", "ProfileStore", "default_db_path", "net_us"]

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
    status      TEXT NOT NULL,          -- 'ok' or 'unsupported'
    median_us   REAL,
    p10_us      REAL,
    p90_us      REAL,
    count       INTEGER,
    detail      TEXT,
    created     REAL NOT NULL,
    PRIMARY KEY (fingerprint, signature)
);
"""


@dataclass(frozen=True)
class Measurement:
    """One timed item: median and spread (10th/90th percentile) over ``count`` runs, in µs."""

    median_us: float
    p10_us: float
    p90_us: float
    count: int
    status: str = "ok"  # "ok" or "unsupported" (the backend rejected it)
    detail: str = ""


#: ``detail`` prefix of a row whose time is already net of the call overhead (imported from a
#: NEST-C profile, which records operator times, not call times).
NET = "net:"


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


class ProfileStore:
    """A SQLite-backed map ``(fingerprint, signature) -> Measurement``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                with self._db:
                    self._db.execute(
                        "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                    )
            elif int(row[0]) > SCHEMA_VERSION:
                raise ProfileError(
                    f"profile store {self.path} has schema {row[0]}, newer than this partuner "
                    f"({SCHEMA_VERSION}); upgrade partuner or use another --db"
                )
        except sqlite3.DatabaseError as exc:
            raise ProfileError(
                f"profile store {self.path} is not a readable SQLite database ({exc}); "
                "move it aside or pass another --db (nothing was deleted)"
            ) from None
        except OSError as exc:
            raise ProfileError(f"cannot open profile store {self.path}: {exc.strerror}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ProfileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, fingerprint: str, signature: str) -> Measurement | None:
        row = self._db.execute(
            "SELECT median_us, p10_us, p90_us, count, status, detail FROM measurements "
            "WHERE fingerprint=? AND signature=?",
            (fingerprint, signature),
        ).fetchone()
        if row is None:
            return None
        return Measurement(
            row[0] if row[0] is not None else float("inf"),
            row[1] if row[1] is not None else float("inf"),
            row[2] if row[2] is not None else float("inf"),
            row[3] or 0,
            row[4],
            row[5] or "",
        )

    def put(self, fingerprint: str, signature: str, m: Measurement, description: str = "") -> None:
        """Store one measurement and commit at once."""
        with self._db:
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

    def summary(self) -> list[dict[str, object]]:
        """Per unit fingerprint: description and number of rows (``partuner profile --show``)."""
        rows = self._db.execute(
            "SELECT m.fingerprint, COALESCE(u.description, ''), COUNT(*), "
            "SUM(m.status != 'ok'), MAX(m.created) FROM measurements m "
            "LEFT JOIN units u ON u.fingerprint = m.fingerprint GROUP BY m.fingerprint"
        ).fetchall()
        return [
            {
                "fingerprint": r[0],
                "unit": r[1],
                "rows": r[2],
                "unsupported": r[3] or 0,
                "last": r[4],
            }
            for r in rows
        ]
