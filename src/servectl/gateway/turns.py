"""Whose turn it is to be loaded: the anti-thrash rule of swap on request. Pure: the clock comes in.

Two aliases on two profiles that replace each other (one card), both asked for at once, would swap once
per request: each swap stops the service the other alias's next request needs. The rule:

* a service stays loaded at least ``swap.min_loaded_s`` from the moment the gateway saw it ready; a
  request for an alias it does not serve waits (held, up to ``swap.hold_s``) until that time is up, while
  the requests for the aliases it serves go on being served;
* then the swap starts, however many requests the loaded alias still gets: its own hold stops admitting
  them and drains those in flight (``swap.drain_s``), so the waiting alias cannot starve;
* swaps take turns in the order their first request came (the gateway runs one at a time);
* a swap that failed counts as a load of whatever runs after it (a rollback restarted it), so a broken
  target is tried at most once per ``min_loaded_s``, not once per request;
* a service that already ran when the gateway first looked counts as loaded long enough;
* only the services the swap replaces count (those on its cards or port, as ``servectl swap`` decides): a
  service started meanwhile on other cards does not restart the clock.

With ``swap.when_busy: refuse`` the swap, once its time is up, is still refused while another service has
requests in flight (503 ``swap_busy``): what runs keeps serving, as that setting promises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SwapDecision:
    """What a request for a profile that does not run does now.

    ``swap``: start the swap; ``wait``: ask again within ``wait_s`` (what runs has not been loaded
    ``min_loaded_s`` yet); ``refuse``: 503 ``swap_busy``, ``busy`` naming the services with requests in flight.
    """

    action: Literal["swap", "wait", "refuse"]
    wait_s: float = 0.0
    busy: tuple[tuple[str, int], ...] = ()


class SwapTurns:
    """When each running service became ready, and whether a swap on request may replace it now.

    Args:
        min_loaded_s: the least time a service stays loaded before a request may swap it away.
        when_busy: ``wait`` (the swap's hold drains what is in flight) or ``refuse``.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        *,
        min_loaded_s: float,
        when_busy: Literal["wait", "refuse"] = "wait",
        clock: Callable[[], float],
    ) -> None:
        self.min_loaded_s = min_loaded_s
        self.when_busy = when_busy
        self._clock = clock
        self._since: dict[str, float] | None = None  # profile -> when seen ready; None: never looked

    def seen(self, ready: Iterable[str]) -> None:
        """The profiles whose services are ready now (each listing of the services)."""
        now = self._clock()
        profiles = set(ready)
        if self._since is None:  # running before the gateway looked: loaded long enough
            self._since = dict.fromkeys(profiles, -math.inf)
            return
        self._since = {p: self._since.get(p, now) for p in profiles}

    def loaded_since(self, profile: str) -> float | None:
        """When ``profile`` was seen ready (clock seconds; ``-inf``: before the gateway looked), None: not ready."""
        return None if self._since is None else self._since.get(profile)

    def swap_failed(self, target: str) -> None:
        """A swap to ``target`` failed: what runs now (the rollback's restart) counts as loaded from now."""
        now = self._clock()
        self._since = {p: (t if p == target else now) for p, t in (self._since or {}).items()}

    def wait_s(self, target: str, replaces: Collection[str] | None = None) -> float:
        """Seconds until a swap to ``target`` may replace what runs (0: now).

        ``replaces``: the profiles the swap stops (None: not known, every other ready service counts)."""
        others = [t for p, t in (self._since or {}).items() if p != target and (replaces is None or p in replaces)]
        if not others:
            return 0.0
        return max(0.0, max(others) + self.min_loaded_s - self._clock())

    def decide(
        self, target: str, *, in_flight: Mapping[str, int], replaces: Collection[str] | None = None
    ) -> SwapDecision:
        """What a request that needs ``target`` (not running) does now.

        Args:
            target: the profile the request's alias swaps to.
            in_flight: requests in flight now, by profile.
            replaces: the profiles the swap stops (None: not known, every other service counts).
        """
        if (wait := self.wait_s(target, replaces)) > 0:
            return SwapDecision("wait", wait_s=wait)
        busy = tuple(
            sorted(
                (p, n) for p, n in in_flight.items() if p != target and n > 0 and (replaces is None or p in replaces)
            )
        )
        if self.when_busy == "refuse" and busy:
            return SwapDecision("refuse", busy=busy)
        return SwapDecision("swap")
