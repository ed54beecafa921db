"""Per-key usage: requests and tokens out, and the count against the key's budget in its current period.

The gateway keeps the counters in memory and writes them beside the key file (``usage.json``, names and
numbers only, never a key or a digest) at most once a second, so ``servectl gateway keys list`` shows them
and a restarted gateway goes on counting the budget where it stopped. A period is a calendar one in UTC
(the hour, the day, the ISO week from Monday, the month): a budget of ``1000/day`` starts again at 00:00
UTC, and a key over it is told so (429) with Retry-After up to then.

A key revoked and created again under the same name starts from zero (the counters remember the
``created_at`` of the key they belong to).
"""

from __future__ import annotations

import calendar
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from servectl.adapters.state import atomic_write_text, read_state_json
from servectl.errors import StateDamaged
from servectl.gateway.keys import Budget, KeyEntry

log = logging.getLogger("servectl.gateway")


def usage_path(keys_path: Path) -> Path:
    """``usage.json`` beside the key file."""
    return keys_path.with_name("usage.json")


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """The UTC calendar ``period`` (hour, day, week, month) holding ``now``: ``(start, end)`` epoch seconds."""
    t = datetime.fromtimestamp(now, UTC)
    if period == "hour":
        start = t.replace(minute=0, second=0, microsecond=0)
        end = start + timedelta(hours=1)
    elif period == "day":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=1)
    elif period == "week":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=t.weekday())
        end = start + timedelta(weeks=1)
    elif period == "month":
        start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=calendar.monthrange(t.year, t.month)[1])
    else:
        raise ValueError(f"unknown budget period {period!r}")
    return start.timestamp(), end.timestamp()


@dataclass
class KeyUsage:
    """One key's counters (what ``usage.json`` keeps per key name)."""

    created_at: float = 0.0  # the key's, so a key made again under the same name starts from zero
    requests_total: int = 0
    tokens_out_total: int = 0
    period_start: float = 0.0  # the budget period the next field counts in
    period_requests: int = 0
    last_used_at: float | None = None

    def in_period(self, budget: Budget | None, now: float) -> int:
        """Requests counted in the budget period holding ``now`` (0 when that period has not been used)."""
        if budget is None:
            return 0
        return self.period_requests if self.period_start == period_bounds(budget.period, now)[0] else 0


def read_usage(path: Path) -> dict[str, KeyUsage]:
    """The counters in ``path`` (none when it does not exist).

    Raises:
        StateDamaged: the file is not a usage file (names it and says how to start over).
    """
    fix = f"move {path} aside (the counters start again from zero)"
    data = read_state_json(path, what="gateway usage file", fix=fix)
    if data is None:
        return {}
    try:
        return {str(name): KeyUsage(**row) for name, row in data["keys"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise StateDamaged(f"{path}: not a gateway usage file ({err!r}); {fix}", path=path) from None


class UsageBook:
    """The counters of every key, as the running gateway keeps them; :meth:`flush` writes them out."""

    def __init__(self, path: Path | None, *, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._rows: dict[str, KeyUsage] = {}
        self._dirty = False
        self.error: str | None = None  # the last problem reading or writing the file (counting goes on)
        if path is not None:
            try:
                self._rows = read_usage(path)
            except StateDamaged as err:
                self.error = err.message
                log.warning("%s", err.message)

    def _row(self, entry: KeyEntry) -> KeyUsage:
        row = self._rows.get(entry.name)
        if row is None or row.created_at != entry.created_at:
            row = self._rows[entry.name] = KeyUsage(created_at=entry.created_at)
        return row

    def over_budget(self, entry: KeyEntry) -> int:
        """0 when ``entry`` may make one more request in its budget period, else the seconds to the next."""
        if entry.budget is None:
            return 0
        now = self._clock()
        if self._row(entry).in_period(entry.budget, now) < entry.budget.requests:
            return 0
        return max(1, int(period_bounds(entry.budget.period, now)[1] - now + 0.999))

    def charge(self, entry: KeyEntry) -> None:
        """Count one request of ``entry`` (against its budget, when it has one)."""
        now = self._clock()
        row = self._row(entry)
        row.requests_total += 1
        row.last_used_at = now
        if entry.budget is not None:
            start = period_bounds(entry.budget.period, now)[0]
            if row.period_start != start:
                row.period_start, row.period_requests = start, 0
            row.period_requests += 1
        self._dirty = True

    def tokens(self, entry: KeyEntry, count: int) -> None:
        if count:
            self._row(entry).tokens_out_total += count
            self._dirty = True

    def rows(self, entries: Iterable[KeyEntry]) -> list[tuple[KeyEntry, KeyUsage]]:
        """Each key of ``entries`` with its counters (zero for a key not used yet)."""
        return [(e, self._row(e)) for e in entries]

    def flush(self) -> None:
        """Write the counters when they changed; a write that fails is logged once and counting goes on."""
        if not self._dirty or self.path is None:
            return
        text = json.dumps({"keys": {n: asdict(r) for n, r in sorted(self._rows.items())}}, indent=1) + "\n"
        try:
            atomic_write_text(self.path, text, mode=0o600)
        except OSError as err:
            message = f"{self.path}: cannot write the key usage ({err.strerror}); counting goes on in memory"
            if message != self.error:
                log.warning("%s", message)
            self.error = message
            return
        self._dirty, self.error = False, None


def usage_rows(keys_path: Path, entries: Iterable[KeyEntry], *, now: float) -> list[dict[str, Any]]:
    """What ``gateway keys list`` prints: each key's scope and its counters from ``usage.json``.

    Raises:
        StateDamaged: the usage file is damaged.
    """
    stored = read_usage(usage_path(keys_path))
    out = []
    for entry in entries:
        row = stored.get(entry.name)
        if row is None or row.created_at != entry.created_at:
            row = KeyUsage(created_at=entry.created_at)
        used = row.in_period(entry.budget, now)
        out.append({
            "name": entry.name,
            "aliases": None if entry.aliases is None else list(entry.aliases),
            "read_only": entry.read_only,
            "budget": None if entry.budget is None else str(entry.budget),
            "budget_used": used if entry.budget else None,
            "budget_resets_at": period_bounds(entry.budget.period, now)[1] if entry.budget else None,
            "requests_total": row.requests_total,
            "tokens_out_total": row.tokens_out_total,
            "last_used_at": row.last_used_at,
            "expires_at": entry.expires_at,
            "expired": entry.expired(now),
        })  # fmt: skip
    return out
