"""The last requests the gateway answered, for the dashboard: when, alias, key name, status, time, tokens.

Never the prompt, the answer or the key itself: a row holds only what the gateway's log line holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

RECENT_LIMIT = 200


@dataclass(frozen=True)
class RequestRecord:
    """One answered request."""

    at: float  # epoch seconds when it arrived
    path: str  # /v1/chat/completions
    alias: str  # "-" when it named none (or was refused before)
    key: str  # the key's name, "-" without one
    status: int
    latency_ms: float  # arrival to the last byte sent
    ttfb_ms: float | None  # arrival to the engine's first byte (None: it never reached an engine)
    tokens_out: int | None  # completion tokens from the engine's usage (None: not reported)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RecentRequests:
    """A bounded ring of :class:`RequestRecord`, newest last."""

    def __init__(self, limit: int = RECENT_LIMIT) -> None:
        self._rows: deque[RequestRecord] = deque(maxlen=limit)

    def add(self, record: RequestRecord) -> None:
        self._rows.append(record)

    def newest(self, *, aliases: Iterable[str] | None = None, limit: int = 50) -> list[RequestRecord]:
        """The newest ``limit`` rows, newest first; only those of ``aliases`` when given."""
        wanted = None if aliases is None else frozenset(aliases)
        out: list[RequestRecord] = []
        for row in reversed(self._rows):
            if wanted is None or row.alias in wanted:
                out.append(row)
                if len(out) >= limit:
                    break
        return out
