"""A campaign's journal and rows: one SQLite database in the campaign folder (``campaign.sqlite``, WAL).

The standard library's ``sqlite3``, so a user can query it (``sqlite3 DIR/campaign.sqlite 'select * from
measurements'``). Every measurement is committed as it is taken (``synchronous=FULL``: on disk before the next
request is sent), so after ``kill -9`` or a reboot a resumed campaign finds each finished (variant, round,
point) and never measures it again. WAL lets ``servectl campaign status DIR`` read while another process
writes: readers open the file read-only and see the last committed state.

Tables (one row per thing, plain columns; JSON only for what varies):

* ``meta(key, value)``: the campaign's name, file, its hash, when it started;
* ``variants(name, profile, plan_hash, status, reason, detail)``: one row per variant and the incumbent;
* ``measurements(variant, round, point, value, flagged, detail, measured_at)``: one metric value per
  (variant, round, point), the primary key that makes a resumed campaign skip it;
* ``visits(variant, round, startup_s, free_vram_mib, detail, at)``: each start of a variant and what it cost;
* ``events(id, at, kind, variant, detail)``: the journal, in order.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.errors import StateDamaged

DB_FILE = "campaign.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS variants (
    name TEXT PRIMARY KEY, profile TEXT NOT NULL, plan_hash TEXT, status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS measurements (
    variant TEXT NOT NULL, round INTEGER NOT NULL, point TEXT NOT NULL, value REAL,
    flagged INTEGER NOT NULL DEFAULT 0, detail TEXT NOT NULL DEFAULT '{}', measured_at REAL NOT NULL,
    PRIMARY KEY (variant, round, point)
);
CREATE TABLE IF NOT EXISTS visits (
    variant TEXT NOT NULL, round INTEGER NOT NULL, startup_s REAL, free_vram_mib TEXT,
    detail TEXT NOT NULL DEFAULT '{}', at REAL NOT NULL, PRIMARY KEY (variant, round)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL, variant TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
"""


@dataclass(frozen=True)
class Measurement:
    """One metric value of a variant at a point in a round (None: the repeat failed)."""

    variant: str
    round: int
    point: str
    value: float | None
    flagged: bool
    detail: Mapping[str, Any]
    measured_at: float


@dataclass(frozen=True)
class VariantRow:
    """A variant's row: its profile, plan hash, status and the one-line reason."""

    name: str
    profile: str
    plan_hash: str | None
    status: str
    reason: str
    detail: Mapping[str, Any]


class CampaignDb:
    """The campaign folder's database; ``read_only`` for a reader beside the running campaign."""

    def __init__(self, folder: Path, *, read_only: bool = False) -> None:
        self.path = folder / DB_FILE
        try:
            if read_only:
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10.0)
            else:
                folder.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, timeout=30.0)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                with self._db:
                    self._db.executescript(_SCHEMA)
                    self._db.execute(
                        "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                    )
        except sqlite3.Error as err:
            raise StateDamaged(
                f"{self.path}: cannot open the campaign database ({err}); check the folder, or start a new campaign "
                "in another folder"
            ) from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> CampaignDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta ------------------------------------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    # -- variants ----------------------------------------------------------------------------------------------
    def put_variant(
        self, name: str, *, profile: str, plan_hash: str | None, status: str, reason: str = "", detail: Any = None
    ) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO variants (name, profile, plan_hash, status, reason, detail) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (name, profile, plan_hash, status, reason, json.dumps(detail or {})),
            )

    def variants(self) -> list[VariantRow]:
        rows = self._db.execute("SELECT name, profile, plan_hash, status, reason, detail FROM variants ORDER BY rowid")
        return [VariantRow(n, p, h, s, r, json.loads(d)) for n, p, h, s, r, d in rows.fetchall()]

    # -- measurements --------------------------------------------------------------------------------------------
    def record_measurement(
        self, variant: str, round_index: int, point: str, value: float | None, *, flagged: bool, detail: Any, at: float
    ) -> None:
        """Commit one measurement (durable before this returns)."""
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO measurements (variant, round, point, value, flagged, detail, measured_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (variant, round_index, point, value, int(flagged), json.dumps(detail or {}), at),
            )

    def measurements(self) -> list[Measurement]:
        rows = self._db.execute(
            "SELECT variant, round, point, value, flagged, detail, measured_at FROM measurements "
            "ORDER BY round, variant, point"
        )
        return [Measurement(v, r, p, val, bool(f), json.loads(d), at) for v, r, p, val, f, d, at in rows.fetchall()]

    def measured(self, variant: str, round_index: int) -> set[str]:
        """The points of ``variant`` already measured in round ``round_index``."""
        rows = self._db.execute(
            "SELECT point FROM measurements WHERE variant = ? AND round = ?", (variant, round_index)
        )
        return {p for (p,) in rows.fetchall()}

    # -- visits and events ----------------------------------------------------------------------------------------
    def record_visit(
        self,
        variant: str,
        round_index: int,
        *,
        startup_s: float | None,
        free_vram_mib: list[int] | None = None,
        detail: Any = None,
        at: float,
    ) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO visits (variant, round, startup_s, free_vram_mib, detail, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (variant, round_index, startup_s, json.dumps(free_vram_mib), json.dumps(detail or {}), at),
            )

    def startups(self) -> dict[str, list[float]]:
        """Each variant's measured startup times, in order."""
        out: dict[str, list[float]] = {}
        rows = self._db.execute("SELECT variant, startup_s FROM visits WHERE startup_s IS NOT NULL ORDER BY at")
        for variant, startup in rows.fetchall():
            out.setdefault(variant, []).append(startup)
        return out

    def image_ids(self) -> dict[str, list[str]]:
        """The image ids each variant's started containers ran, distinct, in the order first seen."""
        out: dict[str, list[str]] = {}
        for variant, detail in self._db.execute("SELECT variant, detail FROM visits ORDER BY at").fetchall():
            image = json.loads(detail or "{}").get("image_id")
            if image and image not in out.setdefault(variant, []):
                out[variant].append(image)
        return out

    def event(self, kind: str, *, at: float, variant: str | None = None, detail: Any = None) -> None:
        with self._db:
            self._db.execute(
                "INSERT INTO events (at, kind, variant, detail) VALUES (?, ?, ?, ?)",
                (at, kind, variant, json.dumps(detail or {})),
            )

    def events(self) -> Iterator[tuple[float, str, str | None, dict[str, Any]]]:
        for at, kind, variant, detail in self._db.execute("SELECT at, kind, variant, detail FROM events ORDER BY id"):
            yield at, kind, variant, json.loads(detail)
