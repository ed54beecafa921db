"""SIGINT/SIGTERM/SIGHUP during a swap or up: turned into exceptions so the transaction takes its orderly path.

The first signal interrupts (:class:`Interrupt`); one while restoring stops the waiting (:class:`Abandon`);
once the outcome is settled, signals are only noted. Inside :func:`critical` (a Docker call the engine finishes
whether or not servectl waits: creating a container) a signal is held until the call returned. Standard
library only, below every stage: the Docker adapter marks its critical calls, ``up`` and ``swap`` own the guard.

Python drops an exception raised inside a weakref callback or a ``__del__`` (it prints "Exception ignored in"
and goes on): a Ctrl-C that lands there, in importlib's module-lock callback say, would be lost and the swap
would run on. While a guard is in force, :func:`_unraisable` catches such a dropped :class:`Interrupt` or
:class:`Abandon` and sends the same signal to the main thread again, so it lands in the transaction's own code.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Literal


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
    (``up`` uses ``defer``: removing what it started must finish, whatever arrives next). ``restoring``: a guard
    around a way back only (a campaign putting production back after its run): from the start a signal stops
    the waiting (:class:`Abandon`), as in a swap's undo, instead of interrupting the way back halfway. Guards
    nest (a campaign's around each of its swaps): a signal the inner guard only noted is handed to the outer one
    when the inner exits, so the longer run still stops.
    """

    def __init__(
        self, enabled: bool, *, then: Literal["abandon", "defer"] = "abandon", restoring: bool = False
    ) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.mode: Literal["raise", "abandon", "defer"] = "abandon" if restoring else "raise"
        self.then = then
        self.received: list[int] = []
        self.deferred: list[int] = []  # received in ``defer`` mode: noted, not acted on
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if self.enabled:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self._previous[signum] = signal.signal(signum, self._handle)
            self._outer = _STATE.guard
            _STATE.guard = self
            if self._outer is None:
                _STATE.unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        # In the CLI the outcome is settled now and the process only reports it: a late signal is noted.
        late = _STATE.note_late and self._outer is None
        for signum, handler in self._previous.items():
            signal.signal(signum, _note_late if late else handler)
        if self._previous:
            _STATE.guard = self._outer
            if self._outer is None and _STATE.unraisable is not None:
                sys.unraisablehook, _STATE.unraisable = _STATE.unraisable, None
        self._previous.clear()
        outer, self._outer = self._outer, None
        if outer is not None and self.deferred:  # a longer run around this transaction (a campaign) stops now
            outer._handle(self.deferred[0], None)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.mode == "defer":
            self.deferred.append(signum)
            return
        if _STATE.depth:  # inside a call the engine finishes anyway: raise once it returned
            if _STATE.held is None:
                _STATE.held = signum
            return
        self._raise(signum)

    def _raise(self, signum: int) -> None:
        if self.mode == "raise":
            self.mode = self.then
            raise Interrupt(signum)
        raise Abandon(signum)

    _outer: SignalGuard | None = None


class _GuardState:
    """The guard in force (main thread), the critical sections open in it, and the CLI's late-signal mode."""

    def __init__(self) -> None:
        self.guard: SignalGuard | None = None
        self.depth = 0
        self.held: int | None = None
        self.note_late = False
        self.unraisable: Callable[[Any], object] | None = None  # the hook the outermost guard replaced


_STATE = _GuardState()

REDELIVER_AFTER_S = 0.01  # long enough for the interpreter to leave the callback that dropped the exception


def _unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a guard is in force: a dropped Interrupt/Abandon is delivered again.

    The exception never reached the transaction, so the guard goes back to the mode it was in, the signal is
    not counted twice, and a timer thread sends it to the main thread once the callback is over (a blocking
    call there is interrupted as by the first one). Anything else goes to the hook the guard replaced.
    """
    exc, guard = unraisable.exc_value, _STATE.guard
    if not isinstance(exc, Interrupt | Abandon) or guard is None:
        previous = _STATE.unraisable or sys.__unraisablehook__
        previous(unraisable)
        return
    if isinstance(exc, Interrupt) and guard.mode == guard.then:
        guard.mode = "raise"
    if guard.received and guard.received[-1] == exc.signum:
        guard.received.pop()
    main = threading.main_thread().ident
    if main is not None:
        timer = threading.Timer(REDELIVER_AFTER_S, signal.pthread_kill, (main, exc.signum))
        timer.daemon = True
        timer.start()


def note_late_signals() -> None:
    """For a process that exits once its transaction is over (the CLI): after the outermost guard, a
    SIGINT/SIGTERM/SIGHUP is noted and said, instead of killing the process while it reports an outcome that
    is already settled (a swap that finished must not look interrupted)."""
    _STATE.note_late = True


def ignore_late_signals_at_exit() -> None:
    """Where a settled transaction left late signals noted: ignore them for the rest of the process.

    While Python finalizes, it gives signals with a Python handler back their default action, so a Ctrl-C in
    the last milliseconds would still kill a process whose outcome is settled (exit -2); an ignored signal
    stays ignored.
    """
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is _note_late:
            signal.signal(signum, signal.SIG_IGN)


def _note_late(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write(f"note: {signal_name(signum)} arrived after the outcome was settled; ignored\n")


@contextmanager
def critical() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends, then raise it as the guard would.

    For calls whose effect happens whether or not we wait for the answer (the engine creates and starts a
    container once asked): interrupted halfway, servectl would not know the container it must remove.
    """
    _STATE.depth += 1
    try:
        yield
    finally:
        _STATE.depth -= 1
        held, guard = _STATE.held, _STATE.guard
        if _STATE.depth == 0 and held is not None:
            _STATE.held = None
            if guard is not None and guard.mode != "defer":
                guard._raise(held)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
