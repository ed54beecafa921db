"""Who waits for whom while servectl changes a service: holds, in-flight requests, drains and cuts.

Everything here runs on the gateway's one event loop, so no locks. A *hold* (one per admin connection:
one swap, up, down or rollback) names the profiles it changes. While a hold is on:

* a new request for an alias those profiles serve waits (up to ``hold_s``) until the hold ends, then is
  routed to whatever runs then; past ``hold_s`` it gets 503 with ``Retry-After``;
* the requests in flight to those profiles finish (the drain), up to ``drain_s``; the rest are cut (a
  stream ends with an error event).

A *maintenance* hold (``servectl campaign`` while production is away for the campaign's whole run) makes no
request wait: one for an alias its profiles serve is answered 503 ``maintenance`` at once, with the ETA servectl
last gave as ``Retry-After``; it comes before any swap hold on the same alias.

A hold ends when servectl says so (the new service passed its health gate) or when its admin connection
closes, so a servectl killed mid-swap never leaves an alias held.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servectl.gateway.routes import AliasTable


@dataclass(eq=False)  # identity: flights live in a set
class Flight:
    """One request being proxied to an engine; ``cut()`` ends it from outside (a drain that timed out)."""

    alias: str
    profile: str
    on_cut: Callable[[], None] | None = None
    was_cut: bool = False

    def cut(self) -> None:
        self.was_cut = True
        if self.on_cut is not None:
            self.on_cut()


@dataclass
class Hold:
    """One change servectl is making (a swap, up, down or rollback) to ``profiles``."""

    id: int
    profiles: frozenset[str]
    reason: str
    expect_s: float  # the target's last measured startup time (for Retry-After); maintenance: the ETA
    started: float = field(default_factory=time.monotonic)
    maintenance: bool = False  # answer at once (503 maintenance) instead of holding the request

    def left_s(self) -> int:
        """Seconds until it is expected to end, as last said (at least 1: a Retry-After)."""
        return max(1, round(self.expect_s - (time.monotonic() - self.started)))


class HoldExpired(Exception):
    """A request waited ``hold_s`` for a hold to end."""

    def __init__(self, retry_after_s: int, reason: str, *, maintenance: bool = False) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s
        self.reason = reason
        self.maintenance = maintenance  # not waited: the alias is away for servectl's maintenance


class Admission:
    """The holds and the requests in flight."""

    def __init__(self, table: AliasTable, *, hold_s: float, drain_s: float) -> None:
        self.table = table
        self.hold_s = hold_s
        self.drain_s = drain_s
        self.holds: dict[int, Hold] = {}
        self.flights: set[Flight] = set()
        self._ids = itertools.count(1)
        self.waiting: dict[str, int] = {}  # requests held now, by alias
        self._changed = asyncio.Event()  # set (and replaced) whenever a hold ends or a flight lands

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def holding(self, alias: str) -> Hold | None:
        """The hold that keeps ``alias`` waiting now, if any (a maintenance hold first)."""
        for hold in sorted(self.holds.values(), key=lambda h: not h.maintenance):
            if self.table.affected(alias, hold.profiles):
                return hold
        return None

    async def admit(self, alias: str) -> float:
        """Return once no hold touches ``alias`` (the seconds waited).

        Raises:
            HoldExpired: still held after ``hold_s``.
        """
        t0 = time.monotonic()
        self.waiting[alias] = self.waiting.get(alias, 0) + 1
        try:
            while (hold := self.holding(alias)) is not None:
                if hold.maintenance:
                    raise HoldExpired(hold.left_s(), hold.reason, maintenance=True)
                left = self.hold_s - (time.monotonic() - t0)
                if left <= 0:
                    raise HoldExpired(hold.left_s(), hold.reason)
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=left)
        finally:
            self.waiting[alias] -= 1
        return time.monotonic() - t0

    async def wait_idle(self, timeout_s: float) -> int:
        """Wait until no request is in flight, up to ``timeout_s``; the number still in flight then."""
        deadline = time.monotonic() + timeout_s
        while self.flights and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=left)
        return len(self.flights)

    def take_off(self, flight: Flight) -> None:
        self.flights.add(flight)

    def land(self, flight: Flight) -> None:
        self.flights.discard(flight)
        self._notify()

    def in_flight(self, alias: str | None = None) -> int:
        return sum(1 for f in self.flights if alias is None or f.alias == alias)

    async def hold(self, profiles: frozenset[str], *, reason: str, expect_s: float) -> tuple[Hold, int, int]:
        """Start a hold, wait for the flights to ``profiles`` (up to ``drain_s``), cut the rest.

        Returns:
            ``(hold, finished, cut)``: the hold (end it with :meth:`release`), the flights that finished
            in time and those cut.
        """
        hold = Hold(id=next(self._ids), profiles=profiles, reason=reason, expect_s=expect_s)
        self.holds[hold.id] = hold
        draining = {f for f in self.flights if f.profile in profiles}
        deadline = time.monotonic() + self.drain_s
        while (waiting := draining & self.flights) and (left := deadline - time.monotonic()) > 0:
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), timeout=left)
            except TimeoutError:
                break
        left_over = draining & self.flights
        for flight in left_over:
            flight.cut()
        del waiting
        return hold, len(draining) - len(left_over), len(left_over)

    def maintain(self, profiles: frozenset[str], *, reason: str, eta_s: float, hold: Hold | None = None) -> Hold:
        """Start a maintenance hold on ``profiles`` (or give ``hold`` a new ETA); end it with :meth:`release`.
        Nothing is drained: the change servectl makes under it takes its own swap holds."""
        if hold is None or hold.id not in self.holds:
            hold = Hold(id=next(self._ids), profiles=profiles, reason=reason, expect_s=eta_s, maintenance=True)
            self.holds[hold.id] = hold
        else:
            hold.expect_s, hold.started, hold.reason = eta_s, time.monotonic(), reason
        self._notify()  # requests already waiting on a swap hold of these aliases are answered now
        return hold

    def release(self, hold: Hold) -> float:
        """End a hold (the seconds it lasted); waiting requests go on."""
        self.holds.pop(hold.id, None)
        self._notify()
        return time.monotonic() - hold.started
