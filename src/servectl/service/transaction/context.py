"""One transaction's view of the :class:`~servectl.service.context.Context`: the cards its stops wait on, the
wait for the lock, the phases it times and the one who hears of them, each profile as it resolved it, and what
a signal does at each step of it.

A transaction's signal guard (:class:`~servectl.signals.SignalGuard`) changes mode only here, by two named
transitions: :meth:`TxContext.enter_restore` (undoing: a signal stops the waiting) and :meth:`TxContext.settle`
(the outcome is settled: signals are only noted); a test fails on a ``.mode =`` anywhere else.

``swap``, ``rollback``, ``recover``, ``up`` and ``down`` take the host's ``Context`` and open a
:class:`TxContext` over it with :meth:`TxContext.of`; the wiring itself (state folder, lock, history,
conflicts, runtime, profile resolution) has its one home in :mod:`servectl.service.context`.

The Context is the one door to the adapters: transaction code reads them as ``tx.ctx.<adapter>`` (``docker``,
``runtime``, ``conflicts``, ``history``, ``state_dir``, ``environ``, ``clocks``). A TxContext keeps only what
the transaction owns and never forwards a part of its Context unchanged; ``tests/unit/test_tx_context_shape.py``
fails on a method or property that does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from servectl.adapters.conflicts import STOPPED_CONFLICTS_FILE
from servectl.adapters.state import GATE_DIR, HISTORY_FILE, LOCK_FILE, PENDING_DIR, prove_writable
from servectl.errors import ServectlError
from servectl.service.container import StopResult
from servectl.service.context import DEFAULT_LOCK_TIMEOUT_S, Context, Lock, lock_timeout_default
from servectl.service.health import Progress
from servectl.service.journal import JOURNAL_FILE, SwapJournal, write_journal
from servectl.service.services import ServiceInfo
from servectl.service.transaction.model import PhaseEvent, PhaseMark, PhaseTiming
from servectl.signals import SignalGuard

if TYPE_CHECKING:
    from servectl.adapters.gpu import GpuInventory
    from servectl.plan.resolve import Resolved

__all__ = ["DEFAULT_LOCK_TIMEOUT_S", "GENERATED_DIR", "Lock", "TxContext", "lock_timeout_default"]

#: Under the state folder: the files a plan generates, one folder per profile (see ``plan.compile``).
GENERATED_DIR = "generated"


@dataclass
class TxContext:
    """One transaction over the host's :class:`~servectl.service.context.Context`.

    Attributes:
        ctx: the adapters and state (shared by every transaction of the host).
        gpus: the inventory this transaction's stops wait on until the cards are free: :attr:`Context.gpus`
            (:meth:`of`), the warm standbys' processes left out for one stop (``service.standby``).
        lock_timeout_s: how long :meth:`lock` waits for another servectl (None: the context's default).
        on_phase: hears of each phase as it begins, progresses and ends.
        phases: the timing of each phase run through :meth:`phase`.
        resolved: each profile as this transaction resolved it (:meth:`resolve`), or why it did not resolve.
        signals: what SIGINT/SIGTERM/SIGHUP do during it (entered by the command; default: nothing is caught).
    """

    ctx: Context
    gpus: GpuInventory
    lock_timeout_s: float | None = None
    on_phase: Callable[[PhaseEvent], None] | None = None
    phases: list[PhaseTiming] = field(default_factory=list)
    resolved: dict[str, Resolved | ServectlError] = field(default_factory=dict)
    signals: SignalGuard = field(default_factory=lambda: SignalGuard(False))

    @classmethod
    def of(
        cls,
        ctx: Context,
        *,
        on_phase: Callable[[PhaseEvent], None] | None = None,
        lock_timeout_s: float | None = None,
        signals: SignalGuard | None = None,
    ) -> TxContext:
        """A transaction over ``ctx`` whose stops wait on the context's cards (:attr:`Context.gpus`)."""
        guard = signals if signals is not None else SignalGuard(False)
        return cls(ctx=ctx, gpus=ctx.gpus, lock_timeout_s=lock_timeout_s, on_phase=on_phase, signals=guard)

    # -- what a signal does now (the guard's mode has this one home) ----------------------------------------
    def enter_restore(self) -> None:
        """The way back begins: a signal now stops the waiting (:class:`~servectl.signals.Abandon`) and leaves
        the journal for ``recover``, instead of interrupting the undo itself."""
        self.signals.mode = "abandon"

    def settle(self) -> None:
        """The outcome is settled (the target passed its gate, the undo ended, or nothing was touched): the
        bookkeeping finishes whatever arrives; signals are only noted (a campaign around it still stops)."""
        self.signals.mode = "defer"

    def resolve(self, name: str) -> Resolved:
        """Profile ``name`` as this transaction sees it: resolved once (:meth:`Context.resolve`), then the same
        plan for every step (the snapshot, the warm checks, the release), even if its file changes meanwhile.

        Raises:
            ServectlError: the profile does not resolve (the same error each time it is asked for).
        """
        if name not in self.resolved:
            try:
                self.resolved[name] = self.ctx.resolve(name)
            except ServectlError as err:
                self.resolved[name] = err
                raise
        known = self.resolved[name]
        if isinstance(known, ServectlError):
            raise known
        return known

    def knows(self, resolved: Resolved) -> None:
        """Take ``resolved`` (resolved by the caller for this transaction) as its profile's plan."""
        self.resolved[resolved.name] = resolved

    def lock(self, purpose: str) -> AbstractContextManager[object]:
        """The state lock, waiting :attr:`lock_timeout_s` for another servectl.

        Not a pass-through: the wait is this transaction's (``--lock-timeout`` of the command that opened it)."""
        return self.ctx.lock(purpose, timeout_s=self.lock_timeout_s)

    def stop(self, service: ServiceInfo) -> StopResult:
        """Stop and remove ``service`` (waiting for its cards when there is a GPU inventory).

        Not a pass-through: the cards waited on are this transaction's :attr:`gpus` (the warm standbys' processes
        left out for one stop), not the Context's inventory."""
        return self.ctx.runtime.stop(service=service, gpus=self.gpus)

    def emit(self, event: PhaseEvent) -> None:
        if self.on_phase is not None:
            with suppress(Exception):  # rendering must never break the transaction
                self.on_phase(event)

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[PhaseMark]:
        """Time a phase, tell ``on_phase`` it began and ended; set ``mark.failed`` for a handled failure."""
        self.emit(PhaseEvent(name, "begin", detail=detail))
        began = self.ctx.clocks.monotonic()
        ok = False
        mark = PhaseMark()
        try:
            yield mark
            ok = not mark.failed
        finally:
            timing = PhaseTiming(name, self.ctx.clocks.monotonic() - began, ok, detail)
            self.phases.append(timing)
            self.emit(PhaseEvent(name, "end", timing.duration_s, ok, detail))

    def progress(self, phase: str) -> Callable[[Progress], None]:
        """The runtime's start progress, forwarded as ``progress`` events of ``phase``."""

        def forward(progress: Progress) -> None:
            parts = [progress.phase]
            if progress.percent is not None:
                parts.append(f"{progress.percent}%")
            if progress.detail:
                parts.append(progress.detail)
            self.emit(PhaseEvent(phase, "progress", detail=" ".join(parts), step=progress.phase))

        return forward

    def record(self, event: dict[str, Any]) -> None:
        """Append to the history; a failed write is not an error (the services are right, history is a record).

        Not a pass-through: :meth:`HistoryLog.record` raises on a failed write, a transaction goes on."""
        with suppress(ServectlError, OSError):
            self.ctx.history.record(event)

    def prove_state_writable(self, *, profiles: Iterable[str] = (), repairs: Iterable[str] = ()) -> None:
        """Before anything changes: every file and folder of the state folder this transaction may write
        (gate records, generated files of ``profiles``, the journal, the record of stopped conflicts, the
        locks) is of the right kind and writable; ``repairs`` are files the command itself sets aside.

        Raises:
            StateDamaged: one line naming the entry and the fix; nothing was changed.
        """
        skip = set(repairs)
        prove_writable(
            self.ctx.state_dir,
            folders=(GATE_DIR, f"{GATE_DIR}/{PENDING_DIR}", GENERATED_DIR, *(f"{GENERATED_DIR}/{p}" for p in profiles)),
            files=[
                f for f in (LOCK_FILE, f"{HISTORY_FILE}.lock", JOURNAL_FILE, STOPPED_CONFLICTS_FILE) if f not in skip
            ],
        )

    def journal_at(self, journal: SwapJournal, phase: str, note: str | None = None) -> SwapJournal:
        """``journal`` moved to ``phase`` (and ``note``), written to the state folder."""
        moved = replace(journal, phase=phase, note=journal.note if note is None else note)
        write_journal(self.ctx.state_dir, moved)
        return moved
