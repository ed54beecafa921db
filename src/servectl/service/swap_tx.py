"""The swap's transaction object: one :class:`SwapTx` owns the journal, the phases (through its
:class:`~servectl.service.transaction.context.TxContext`), the conflicts it stopped and what a signal does at each
step; :mod:`servectl.service.swap` only sequences the steps on it.

Its steps: :meth:`SwapTx.begin` (what the swap replaces, and the journal's snapshot of it), :meth:`SwapTx.at`
(the journal at each phase), :meth:`SwapTx.stop_conflicts`, and how it ends: :meth:`SwapTx.finish` (swapped,
recorded), :meth:`SwapTx.fail_back` (undone, worded), :meth:`SwapTx.untouched_interrupt` (a signal before any
change) or :meth:`SwapTx.abandon` (stopped mid-undo). The way back itself is
:func:`servectl.service.transaction.undo.undo`; this module says what happened (:class:`SwapRolledBack`,
:class:`SwapFailed`, :class:`StartupFailed`, :class:`SwapInterrupted`) and records the swap's history event.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from servectl.adapters.conflicts import StoppedConflict, conflict_key, record_stopped
from servectl.errors import ServectlError, StartupFailed, SwapFailed, SwapInterrupted, SwapRolledBack
from servectl.service.journal import SwapJournal, clear_journal
from servectl.service.services import ServiceInfo
from servectl.service.swap_preflight import overlap_reason
from servectl.service.transaction.context import TxContext
from servectl.service.transaction.model import SwapResult, TargetFailure, log_tail
from servectl.service.transaction.snapshot import take_snapshot
from servectl.service.transaction.undo import Undone, undo
from servectl.signals import Abandon, signal_name

if TYPE_CHECKING:
    from servectl.plan.resolve import Resolved
    from servectl.service.container import StartResult


@dataclass(frozen=True)
class Timings:
    """The forward path's measurements, for the result."""

    down_since: float | None = None
    old_stop_s: float | None = None
    forced: bool = False
    released: bool = False


@dataclass
class SwapTx:
    """One swap (or rollback): the one object that owns its journal, its phases, the conflicts it stopped and
    its signal mode (through :attr:`tx`: :meth:`TxContext.enter_restore`, :meth:`TxContext.settle`).

    Attributes:
        tx: the transaction's view of the context (its phases, its profiles as resolved once, its signal guard).
        kind: ``swap`` or ``rollback``, for the history.
        skip: preflight check ids to skip.
        target: the profile it starts, once :meth:`begin` knows it.
        current: the service it replaces (None: it replaces nothing).
        stopped: the conflicts it stopped, in order.
        journal: the journal as last written (None before :meth:`begin`).
        untouched: servectl services that run beside the swap (it never touches them).
        replaced_why: what the replaced service shared with the target (``"port 8190"``, ``"cards 0, 1"``).
        timings: the forward path's measurements so far.
    """

    tx: TxContext
    kind: str
    skip: frozenset[str]
    target: Resolved | None = None
    current: ServiceInfo | None = None
    stopped: list[StoppedConflict] = field(default_factory=list)
    journal: SwapJournal | None = None
    untouched: tuple[str, ...] = ()
    replaced_why: str = ""
    timings: Timings = Timings()

    # -- forward ----------------------------------------------------------------------------------------------
    def begin(self, resolved: Resolved, current: ServiceInfo | None, untouched: Sequence[str]) -> None:
        """Before the first change: what the swap replaces, and its journal (with the replaced service's profile
        document, so every way back restores what ran); written at the first :meth:`at`."""
        self.target, self.current, self.untouched = resolved, current, tuple(untouched)
        self.replaced_why = overlap_reason(current, resolved) if current is not None else ""
        plan = resolved.plan
        self.journal = SwapJournal(
            pid=os.getpid(),
            from_profile=current.profile if current is not None else None,
            to_profile=resolved.name,
            phase="begin",
            started_at=self.tx.ctx.clocks.wall(),
            kind=self.kind,
            previous=take_snapshot(current, self.tx.resolve) if current is not None else None,
            target_container=plan.docker.name,
            devices=tuple(
                sorted({int(d) for d in plan.docker.device_ids if d.isdigit()} | set(current.gpus if current else ()))
            ),
        )

    def at(self, phase: str, note: str = "") -> None:
        """Write the journal at ``phase`` (with the conflicts stopped so far)."""
        assert self.journal is not None
        self.journal = self.tx.journal_at(replace(self.journal, stopped_conflicts=tuple(self.stopped)), phase, note)

    def mark_standby(self, standby: str) -> None:
        """Write the journal with the warm standby step under way (``servectl.service.standby``)."""
        assert self.journal is not None
        self.journal = self.tx.journal_at(replace(self.journal, standby=standby), self.journal.phase)

    def stop_conflicts(self) -> None:
        """Stop the target's declared conflicts, each recorded (and journalled) the moment it stopped."""
        assert self.target is not None
        for spec in self.target.loaded.profile.conflicts:
            kind, ref = conflict_key(spec)
            if any((s.kind, s.ref) == (kind, ref) for s in self.stopped):
                continue
            stopped = self.tx.ctx.conflicts.stop(spec, stopped_by=self.target.name)
            if stopped is not None:
                self.stopped.append(stopped)
                record_stopped(self.tx.ctx.state_dir, stopped)  # before anything else can go wrong
                self.at("stop-conflicts")

    # -- results ----------------------------------------------------------------------------------------------
    def result(self, **kwargs: Any) -> SwapResult:
        return SwapResult(phases=tuple(self.tx.phases), stopped_conflicts=tuple(self.stopped), **kwargs)

    def record_result(self, result: SwapResult, **extra: Any) -> None:
        event: dict[str, Any] = {
            "event": self.kind if result.outcome in ("swapped", "started") else "swap-failed",
            "kind": self.kind,
            "profile": result.to_profile,
            "replaced": result.from_profile,
            "outcome": result.outcome,
            "downtime_s": None if result.downtime_s is None else round(result.downtime_s, 3),
            "old_stop_s": None if result.old_stop_s is None else round(result.old_stop_s, 3),
            "old_released": result.old_released,
            "target_resumed": result.target_resumed,
            "forced_stop": result.forced_stop,
            "phases": {p.phase: round(p.duration_s, 3) for p in result.phases},
            "stopped_conflicts": [s.to_dict() for s in result.stopped_conflicts],
        }
        if result.target_failure:
            event["reason"] = result.target_failure.describe()
        if result.previous_failure:
            event["previous_reason"] = result.previous_failure.describe()
        self.tx.record({**event, **extra})

    # -- how it ends ------------------------------------------------------------------------------------------
    def finish(self, started: StartResult, up_at: float) -> SwapResult:
        """The target passed the gate: the result, recorded in the history; the journal is done."""
        resolved, t = self.resolved_target(), self.timings
        from_profile = self.current.profile if self.current is not None else None
        downtime = up_at - t.down_since if t.down_since is not None else None
        message = f"{resolved.name} is up ({resolved.plan.url})"
        if from_profile:
            message += f", replacing {from_profile}" + (f" (it held {self.replaced_why})" if self.replaced_why else "")
            message += f"; downtime {downtime:.2f} s" if downtime is not None else ""
        else:
            message += "; it stopped no servectl service: none held its port or cards"
        if self.stopped:
            message += f"; stopped {', '.join(s.label() for s in self.stopped)} (`servectl down` restores it)"
        if self.untouched:
            verb = "serves" if len(self.untouched) == 1 else "serve"
            message += (
                f"; {', '.join(self.untouched)} still {verb} beside it (a swap replaces only the service on its port "
                "or cards, and its conflicts: `servectl down NAME` stops one)"
            )
        result = self.result(
            from_profile=from_profile,
            to_profile=resolved.name,
            outcome="swapped" if from_profile else "started",
            downtime_s=downtime,
            old_stop_s=t.old_stop_s,
            target_startup_s=started.startup_s,
            forced_stop=t.forced,
            old_released=t.released,
            target_resumed=started.resumed,
            message=message,
        )
        self.record_result(
            result,
            container_id=started.service.container_id,
            container_name=started.service.container_name,
            plan_hash=resolved.plan.plan_hash,
            # a resume is not a start: the gateway's Retry-After for a cold start reads startup_s alone
            **{"resume_s" if started.resumed else "startup_s": round(started.startup_s, 3)},
        )
        clear_journal(self.tx.ctx.state_dir)
        return result

    def untouched_interrupt(self, signum: int) -> NoReturn:
        """A signal before the swap changed anything: the journal goes, whatever ran still runs."""
        self.tx.settle()
        clear_journal(self.tx.ctx.state_dir)
        from_profile = self.current.profile if self.current is not None else None
        raise SwapInterrupted(
            f"interrupted ({signal_name(signum)}) before anything changed; "
            + (f"{from_profile} still runs" if from_profile else "nothing was started"),
            signum=signum,
        ) from None

    def fail_back(
        self, failure: TargetFailure, interrupted_by: int | None, cause: BaseException | None = None
    ) -> NoReturn:
        """The target failed or the user interrupted: undo (the one way back), then say how it ended."""
        assert self.journal is not None
        resolved, t = self.resolved_target(), self.timings
        self.tx.enter_restore()
        if interrupted_by is not None or failure.message.startswith("stopping "):
            why = failure.describe()
        else:
            why = f"{resolved.name} failed: {failure.describe()}"
        try:
            got = undo(replace(self.journal, stopped_conflicts=tuple(self.stopped)), self.tx, why=why)
        except Abandon as abandon:
            self.abandon(failure, f"stopped waiting after {signal_name(abandon.signum)}", signum=abandon.signum)
        except (ServectlError, OSError) as err:  # the engine (or the disk) failed us: say what is known, keep it
            reason = err.message if isinstance(err, ServectlError) else f"{err.strerror or err}"
            self.abandon(failure, f"cleanup failed: {reason}", SwapFailed)
        self.tx.settle()
        restored_at = got.restored_at
        downtime = restored_at - t.down_since if restored_at is not None and t.down_since is not None else None
        result = self.result(
            from_profile=self.current.profile if self.current is not None else None,
            to_profile=resolved.name,
            outcome="failed",
            downtime_s=downtime,
            old_stop_s=t.old_stop_s,
            forced_stop=t.forced,
            conflicts_restore=got.restore,
            target_failure=failure,
            previous_failure=got.previous_failure,
        )
        raise _undone_error(self, resolved, failure, why, got, result, interrupted_by) from cause

    def abandon(
        self,
        failure: TargetFailure,
        why_stopped: str,
        error: type[SwapInterrupted] | type[SwapFailed] = SwapInterrupted,
        *,
        signum: int | None = None,
    ) -> NoReturn:
        """Stop undoing (a signal, or the engine failed): say what runs and what to do; keep the journal."""
        resolved = self.resolved_target()
        self.tx.settle()
        previous = self.journal.from_profile if self.journal is not None else None
        previous = previous if previous != resolved.name else None
        try:
            running = [f"{s.profile} ({s.state})" for s in self.tx.ctx.runtime.services(probe=True)]
            now = ", ".join(running) if running else "nothing of servectl"
        except ServectlError:
            now = "unknown (the engine did not answer)"
        note = f"{why_stopped}; running now: {now}"
        # the journal stays, so a later swap is refused until recover settles it (and brings the previous one back)
        after = f" (it starts {previous} again)" if previous else " (it removes what never passed its gate)"
        next_step = f"`servectl status`, then `servectl recover`{after}"
        lead = failure.message if failure.message.startswith("interrupted") else f"{resolved.name} failed"
        message = f"{lead}; {note}. Next: {next_step}"
        if self.stopped:
            message += "; still stopped: " + ", ".join(f"{s.label()} (`{s.restore_command()}`)" for s in self.stopped)
        with suppress(OSError, AssertionError, ServectlError):
            self.at("abandoned", note)
        result = self.result(
            from_profile=previous,
            to_profile=resolved.name,
            outcome="interrupted" if error is SwapInterrupted else "failed",
            target_failure=failure,
            message=message,
        )
        self.record_result(result)
        raise error(message, result=result, signum=signum)

    def resolved_target(self) -> Resolved:
        assert self.target is not None, "the swap has not begun"
        return self.target


def _undone_error(
    tx: SwapTx,
    resolved: Resolved,
    failure: TargetFailure,
    why: str,
    got: Undone,
    result: SwapResult,
    interrupted_by: int | None,
) -> ServectlError:
    """The error that says how the undo ended (the history records it)."""
    restore_text = f"; {got.restore.summary()}" if got.restore and got.restore.summary() else ""
    previous = got.previous
    beside = _beside(tx.untouched)
    if previous is not None and got.previous_runs:
        downtime = result.downtime_s
        message = (
            f"{why}; {resolved.name} was removed and the previous service {previous} is back "
            "(it passed the health gate"
            + (f"; downtime {downtime:.1f} s)" if downtime is not None else ")")
            + got.drift
            + restore_text
            + (f". Fix {resolved.name} before swapping again" if interrupted_by is None else "")
            + log_tail(failure)
        )
        result = replace(result, outcome="interrupted" if interrupted_by else "rolled-back", message=message)
        tx.record_result(result)
        return SwapRolledBack(message, result=result, signum=interrupted_by)
    if previous is not None and got.previous_failure is not None:
        nothing = f"Nothing of {resolved.name} or {previous} runs now" if beside else "Nothing of servectl runs now"
        message = (
            f"{why}; the previous service {previous} did not come back either: "
            f"{got.previous_failure.describe()}. {nothing}{got.cards}{restore_text}{beside}. "
            f"Check both (the log lines below, `servectl validate {resolved.name}`), "
            f"then `servectl up {previous}`" + log_tail(failure) + log_tail(got.previous_failure)
        )
        result = replace(result, message=message)
        tx.record_result(result)
        return SwapFailed(message, result=result, signum=interrupted_by)
    # nothing ran in the target's place before: this swap acted like `up`
    if beside:
        before = f"it replaced nothing, so nothing of it runs now{got.cards}{restore_text}{beside}"
    else:
        before = f"nothing was serving before, so nothing runs now{got.cards}{restore_text}"
    message = f"{why}; {resolved.name} was removed; {before}" + log_tail(failure)
    result = replace(result, outcome="interrupted" if interrupted_by else "failed", message=message)
    tx.record_result(result)
    if interrupted_by is not None:
        return SwapInterrupted(message, result=result, signum=interrupted_by)
    return StartupFailed(
        message,
        last_log_lines=failure.last_log_lines,
        exit_code_of_container=failure.exit_code_of_container,
        oom_killed=failure.oom_killed,
    )


def _beside(untouched: Sequence[str]) -> str:
    if not untouched:
        return ""
    return f"; {', '.join(untouched)} {'still serves' if len(untouched) == 1 else 'still serve'} (not touched)"
