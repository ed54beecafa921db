"""SIGINT/SIGTERM/SIGHUP during a swap or up: turned into exceptions so the transaction takes its orderly path.

The first signal interrupts (:class:`Interrupt`); one while restoring stops the waiting (:class:`Abandon`);
once the outcome is settled, signals are only noted.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    pass


class Interrupt(BaseException):
    """First SIGINT/SIGTERM: take the orderly path. A BaseException, so ``except Exception`` lets it pass."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Abandon(BaseException):
    """A signal while restoring: stop waiting, leave the journal and a status hint."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class SignalGuard:
    """Turns SIGINT/SIGTERM/SIGHUP into :class:`Interrupt`/:class:`Abandon` (main thread only; else a no-op).

    ``mode``: ``raise`` (the first signal interrupts), ``abandon`` (restoring: a signal stops the waiting),
    ``defer`` (the outcome is settled: signals are only noted). ``then``: the mode after the first signal
    (``up`` uses ``defer``: removing what it started must finish, whatever arrives next).
    """

    def __init__(self, enabled: bool, *, then: Literal["abandon", "defer"] = "abandon") -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.mode: Literal["raise", "abandon", "defer"] = "raise"
        self.then = then
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if self.enabled:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.mode == "defer":
            return
        if self.mode == "raise":
            self.mode = self.then
            raise Interrupt(signum)
        raise Abandon(signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
