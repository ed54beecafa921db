"""Requests per key and minute: a token bucket per key (a burst of one minute's worth, refilled evenly)."""

from __future__ import annotations

import math
from collections.abc import Callable


class RateLimiter:
    """``take(key, per_minute)`` -> 0 when the request may go, else the seconds until it may (Retry-After)."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)

    def take(self, key: str, per_minute: int) -> int:
        now = self._clock()
        rate = per_minute / 60.0
        tokens, then = self._buckets.get(key, (float(per_minute), now))
        tokens = min(float(per_minute), tokens + (now - then) * rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0
        self._buckets[key] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / rate))
