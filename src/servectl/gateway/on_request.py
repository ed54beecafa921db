"""Swap on request (``swap.on_request``): the I/O around :mod:`servectl.gateway.turns`' rule.

A request for a listed alias whose profile does not run waits for its swap's turn (what runs stays loaded
``swap.min_loaded_s``; one swap at a time, in the order asked), then starts ``servectl swap`` to the alias's
first profile in a thread and waits for it, all within ``swap.hold_s``; a waiting stream gets an SSE comment
every :data:`KEEPALIVE_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from servectl.gateway.admission import Admission
from servectl.gateway.config import GatewayConfig
from servectl.gateway.metrics import Metrics
from servectl.gateway.reject import Reject
from servectl.gateway.routes import AliasTable, Route, Upstream
from servectl.gateway.turns import SwapTurns

log = logging.getLogger("servectl.gateway")
KEEPALIVE_S = 5.0  # a streaming client waiting for a swap on request gets an SSE comment this often
BUSY_RETRY_S = 5  # swap.when_busy: refuse answers 503 with this Retry-After (the busy requests are finishing)


class _Pinger:
    """Calls ``on_wait`` (an SSE comment to a waiting stream) at most every :data:`KEEPALIVE_S`."""

    def __init__(self, on_wait: Callable[[], Awaitable[None]] | None) -> None:
        self.on_wait, self.last = on_wait, time.monotonic()

    async def __call__(self) -> None:
        if self.on_wait is not None and time.monotonic() - self.last >= KEEPALIVE_S:
            self.last = time.monotonic()
            await self.on_wait()


async def _until(future: asyncio.Future[Any], deadline: float, ping: _Pinger) -> bool:
    """Wait for ``future`` up to ``deadline``, pinging meanwhile; whether it is done."""
    while not future.done() and (left := deadline - time.monotonic()) > 0:
        await asyncio.wait({future}, timeout=min(KEEPALIVE_S, left))
        if not future.done():
            await ping()
    return future.done()


class SwapHost(Protocol):
    """What a swap on request reads of its gateway (:class:`servectl.gateway.proxy.Gateway`)."""

    config: GatewayConfig
    table: AliasTable
    upstreams: list[Upstream]
    admission: Admission
    metrics: Metrics
    turns: SwapTurns
    start: Callable[[str], object] | None
    startup_s: Callable[[str], float | None]
    replaced_by: Callable[[str], Collection[str]] | None

    async def refresh(self, *, force: bool = False) -> None: ...

    def refresh_soon(self) -> None: ...


class SwapOnRequest:
    """The swaps on request of one gateway: its lock (one swap at a time) and the waits for their turns."""

    def __init__(self, gateway: SwapHost) -> None:
        self.gateway = gateway
        self.lock = asyncio.Lock()

    async def swap_for(self, alias: str, on_wait: Callable[[], Awaitable[None]] | None) -> Route | None:
        """Swap to the alias's first profile when its turn comes (:mod:`servectl.gateway.turns`: what runs
        stays loaded ``swap.min_loaded_s``, meanwhile its aliases are served; one swap at a time, in the order
        asked). The swap's own hold drains the service it replaces and holds the requests of the aliases it
        touches. The request waits up to ``hold_s`` in all, counted as held."""
        target = self.gateway.table.profiles(alias)[0]
        deadline = time.monotonic() + (self.gateway.config.swap.hold_s or 1e9)
        ping = _Pinger(on_wait)
        waiting = self.gateway.admission.waiting
        waiting[alias] = waiting.get(alias, 0) + 1
        try:
            acquiring = asyncio.ensure_future(self.lock.acquire())
            got = False
            try:
                got = await _until(acquiring, deadline, ping)
            finally:  # timed out, or the client left: the lock is not ours to keep
                if not got and not acquiring.cancel():  # it got the lock at the last moment
                    self.lock.release()
            if not got:
                raise self._turn_missed(alias, target, self.gateway.turns.wait_s(target))
            return await self._swap_in_turn(alias, target, deadline, ping)
        finally:
            waiting[alias] -= 1

    async def _swap_in_turn(self, alias: str, target: str, deadline: float, ping: _Pinger) -> Route | None:
        """Holding the swap lock: wait for the turn, swap, route. The lock is released when the swap ends, also
        when the request stopped waiting for it first (so no second swap starts meanwhile)."""
        from servectl.errors import ServectlError

        assert self.gateway.start is not None
        swapping: asyncio.Future[object] | None = None
        try:
            replaces = await self._replaced_by(target)
            deferred = False
            while True:
                await self.gateway.refresh(force=True)  # a swap that ran while this request waited may have done it
                if (route := self.gateway.table.route(alias, self.gateway.upstreams)) is not None:
                    return route
                decision = self.gateway.turns.decide(target, in_flight=self._in_flight_by_profile(), replaces=replaces)
                if decision.action == "swap":
                    break
                if decision.action == "refuse":
                    serving = ", ".join(f"{p} ({n} in flight)" for p, n in decision.busy)
                    raise Reject(503, f"alias {alias!r}: not swapping to {target} while {serving} is serving "
                                 "(swap.when_busy: refuse); retry", "unavailable", reason="swap_busy",
                                 headers={"Retry-After": str(BUSY_RETRY_S)})  # fmt: skip
                if (left := deadline - time.monotonic()) <= 0:
                    raise self._turn_missed(alias, target, decision.wait_s)
                if not deferred:
                    deferred = True
                    self.gateway.metrics.swap_event("on_request_deferred")
                    log.info("swap on request: alias %s -> %s in %.1f s (swap.min_loaded_s)", alias, target,
                             decision.wait_s)  # fmt: skip
                await asyncio.sleep(min(decision.wait_s, KEEPALIVE_S, left))
                await ping()
            self.gateway.metrics.swap_event("on_request")
            log.info("swap on request: alias %s -> %s", alias, target)
            swapping = asyncio.ensure_future(asyncio.to_thread(self.gateway.start, target))
            finished = await _until(swapping, deadline, ping)
        finally:
            if swapping is None:
                self.lock.release()
            else:
                swapping.add_done_callback(lambda done: self._swap_ended(target, done))
        if not finished:
            retry = str(max(1, round(self.gateway.startup_s(target) or 30)))
            raise Reject(503, f"alias {alias!r}: {target} is still starting; retry", "unavailable",
                         reason="swapping", headers={"Retry-After": retry})  # fmt: skip
        try:
            swapping.result()
        except ServectlError as err:
            raise Reject(503, f"alias {alias!r}: the swap to {target} failed: {err.lines()[0]}; what ran before "
                         "still serves its aliases", "unavailable", reason="swap_failed") from None  # fmt: skip
        await self.gateway.refresh(force=True)
        return self.gateway.table.route(alias, self.gateway.upstreams)

    def _swap_ended(self, target: str, done: asyncio.Future[object]) -> None:
        if done.cancelled() or done.exception() is not None:  # also retrieves the exception
            self.gateway.turns.swap_failed(target)
        self.gateway.refresh_soon()
        self.lock.release()

    def _turn_missed(self, alias: str, target: str, wait_s: float) -> Reject:
        """503 ``swapping`` for a request that waited ``hold_s`` for its swap's turn."""
        retry = str(max(1, round(wait_s + (self.gateway.startup_s(target) or 30))))
        return Reject(503, f"alias {alias!r}: the swap to {target} waits for its turn (what runs stays loaded "
                      f"swap.min_loaded_s = {self.gateway.turns.min_loaded_s:g} s); retry", "unavailable",
                      reason="swapping", headers={"Retry-After": retry})  # fmt: skip

    async def _replaced_by(self, target: str) -> Collection[str] | None:
        """The profiles a swap to ``target`` would stop (their cards or port), None when it cannot be told."""
        from servectl.errors import ServectlError

        if self.gateway.replaced_by is None:
            return None
        try:
            return await asyncio.to_thread(self.gateway.replaced_by, target)
        except ServectlError:
            return None

    def _in_flight_by_profile(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for flight in self.gateway.admission.flights:
            out[flight.profile] = out.get(flight.profile, 0) + 1
        return out
