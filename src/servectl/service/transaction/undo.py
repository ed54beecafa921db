"""The one undo of a transaction: whatever stopped it (a failed target, a signal, ``kill -9``), the way back.

:func:`undo` takes the transaction's journal (what ran before, as a profile snapshot; the target; the
conflicts it stopped; the cards it touches) and a :class:`~servectl.service.transaction.context.TxContext`,
and runs the same small steps for every caller:

1. :func:`remove_unproven` - remove the target's containers that never passed their health gate (and a
   warm standby whose resume was cut short: :func:`servectl.service.standby.drop_resuming_target`);
   a previous service that went to warm standby is resumed (:func:`servectl.service.standby.resume_released`)
   and kept;
2. finish stopping the previous service (a stop may still be in flight in the engine) unless the
   transaction never began stopping it, or this undo already brought it back;
3. start the previous service again from the journal's snapshot, through the health gate (a failed one is
   removed again);
4. with nothing running, wait until the cards are free;
5. restore the conflicts the transaction stopped;
6. record the restored service in the history and clear the journal.

Each step moves the journal first, so an undo that is itself killed is settled by ``servectl recover``.
Callers (swap's failure path, ``recover``, ``rollback`` of a killed transaction, ``up``'s interrupt handler)
only word the :class:`Undone` they get back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servectl.adapters.conflicts import RestoreOutcome, restore_conflicts
from servectl.adapters.gpu import reads_cards, wait_until_free
from servectl.errors import ServectlError
from servectl.service.container import CARDS_FREE_DEADLINE_S, CARDS_POLL_S, StartResult
from servectl.service.journal import SwapJournal, clear_journal
from servectl.service.services import ALIVE_STATES, ServiceInfo
from servectl.service.standby import drop_resuming_target, resume_released
from servectl.service.transaction.context import TxContext
from servectl.service.transaction.model import TargetFailure, failure_of
from servectl.service.transaction.snapshot import previous_resolved

#: States of a service that passed its health gate and runs: it proved it serves.
PROVEN_STATES = ("ready", "unhealthy")
#: Journal phases an undo writes once the previous service is stopped for good.
_PREVIOUS_STOPPED = ("start-previous", "restore-conflicts")


@dataclass(frozen=True)
class Undone:
    """What :func:`undo` did.

    Attributes:
        previous: the profile that ran before (None: nothing did).
        removed: the target's containers removed (they never passed their gate).
        restored: the previous service, started again through the gate.
        restored_at: ``clock()`` when it passed.
        kept: the previous service was never stopped (or already back): it still runs.
        previous_failure: why the previous service did not come back.
        drift: a note when the previous service came from its file (no snapshot) or its plan moved.
        cards: with nothing running: whether the cards are free (" and cards 0, 1 are free", or a warning).
        restore: what restoring the conflicts did (None: there were none).
    """

    previous: str | None = None
    removed: tuple[str, ...] = ()
    restored: StartResult | None = None
    restored_at: float | None = None
    kept: bool = False
    previous_failure: TargetFailure | None = None
    drift: str = ""
    cards: str = ""
    restore: RestoreOutcome | None = None

    @property
    def previous_runs(self) -> bool:
        """Whether the previous service runs now (restored, or never stopped)."""
        return self.restored is not None or self.kept


def is_proven(service: ServiceInfo) -> bool:
    """Whether ``service`` passed its health gate and runs."""
    return service.state in PROVEN_STATES


def remove_unproven(
    tx: TxContext,
    *,
    profile: str | None,
    container_name: str = "",
    among: Sequence[ServiceInfo] | None = None,
) -> list[ServiceInfo]:
    """Remove the services of ``profile`` (of any profile when None; also the container ``container_name``)
    that never passed their health gate or no longer run; what was removed.

    Args:
        among: the services as just listed (default: list them now).

    Raises:
        ServectlError: the engine did not answer, or a container would not go.
    """
    removed = []
    for service in tx.ctx.runtime.services(probe=False) if among is None else among:
        mine = profile is None or service.profile == profile or service.container_name == (container_name or None)
        if mine and not is_proven(service) and service.state != "standby":  # a warm standby passed its gate
            tx.stop(service)
            removed.append(service)
    return removed


def undo(
    journal: SwapJournal, tx: TxContext, *, why: str = "", record_extra: Mapping[str, Any] | None = None
) -> Undone:
    """Undo the transaction ``journal`` describes (see the module docstring); the journal is cleared at the end.

    Args:
        journal: the transaction's journal as last written (its snapshot, target, conflicts, cards).
        ctx: the adapters and state.
        why: the note kept in the journal while undoing (what failed).
        record_extra: more keys for the history event of the restored service.

    Raises:
        ServectlError: the engine failed while removing or stopping (the journal stays for ``recover``).
        Abandon: a second signal (the journal stays).
    """
    previous = journal.from_profile if journal.from_profile != journal.to_profile else None
    began_in = journal.phase
    journal = tx.journal_at(journal, "remove-target", why)
    with tx.phase("remove-target", journal.to_profile):
        removed = remove_unproven(tx, profile=journal.to_profile, container_name=journal.target_container)
        removed += drop_resuming_target(tx, journal)
        resumed = resume_released(tx, journal, previous)  # a warm standby: released, not stopped
        stopped, kept = ([], True) if resumed else _finish_stopping(tx, previous, began_in)
    devices = set(journal.devices).union(*(s.gpus for s in (*removed, *stopped)))
    restored: StartResult | None = None
    restored_at: float | None = None
    failure: TargetFailure | None = None
    drift = ""
    if previous is not None and not kept:
        journal = tx.journal_at(journal, "start-previous", why)
        restored, failure, drift = _start_previous(tx, journal, previous)
        restored_at = tx.ctx.clocks.monotonic() if restored is not None else None
        if failure is not None:
            _remove_previous(tx, previous)
    cards = "" if restored is not None or kept else _wait_for_cards(tx, devices)
    journal = tx.journal_at(journal, "restore-conflicts", why)
    restore = _restore_conflicts(tx, journal)
    if restored is not None:
        tx.record(_restored_event(journal, restored, record_extra))
    clear_journal(tx.ctx.state_dir)
    return Undone(
        previous=previous,
        removed=tuple(s.container_name for s in removed),
        restored=restored,
        restored_at=restored_at,
        kept=kept,
        previous_failure=failure,
        drift=drift,
        cards=cards,
        restore=restore,
    )


def _finish_stopping(tx: TxContext, previous: str | None, began_in: str) -> tuple[list[ServiceInfo], bool]:
    """Stop what is left of the previous service: (what was stopped, whether it still runs and is kept).

    Kept when the transaction never began stopping it (journal phase ``begin``) or this undo already brought
    it back (it passed its gate again); otherwise a stop may still be in flight in the engine, so what looks
    alive is finished off and started again as it ran.
    """
    if previous is None:
        return [], False
    mine = [s for s in tx.ctx.runtime.services(probe=False) if s.profile == previous]
    if began_in == "begin":
        return [], any(s.state in ALIVE_STATES for s in mine)
    if began_in in _PREVIOUS_STOPPED and any(is_proven(s) for s in mine):
        return [], True
    for service in mine:
        tx.stop(service)
    return mine, False


def _start_previous(
    tx: TxContext, journal: SwapJournal, previous: str
) -> tuple[StartResult | None, TargetFailure | None, str]:
    """Start the previous service from the journal's snapshot through the gate: (started, failure, drift)."""
    drift = ""
    with tx.phase("start-previous", previous) as mark:
        try:
            resolved, drift = previous_resolved(journal, environ=tx.ctx.environ, resolve=tx.resolve)
            progress = tx.progress("start-previous")
            tx.ctx.runtime.ensure_image(resolved, on_phase=progress)
            started = tx.ctx.runtime.start(resolved=resolved, on_phase=progress)
        except ServectlError as err:
            mark.failed = True
            return None, failure_of(previous, err), drift
    return started, None, drift


def _remove_previous(tx: TxContext, previous: str) -> list[ServiceInfo]:
    """The previous service failed to come back: make sure nothing of it is left."""
    with tx.phase("remove-previous", previous):
        mine = [s for s in tx.ctx.runtime.services(probe=False) if s.profile == previous]
        for service in mine:
            tx.stop(service)
    return mine


def _wait_for_cards(tx: TxContext, devices: Iterable[int]) -> str:
    """With a GPU inventory: wait until the transaction's cards run nothing; the words for the message."""
    cards = sorted(set(devices))
    if not cards or not reads_cards(tx.gpus):
        return ""
    with tx.phase("verify-cards", ",".join(map(str, cards))):
        free = wait_until_free(
            tx.gpus,
            cards,
            CARDS_FREE_DEADLINE_S,
            poll_s=CARDS_POLL_S,
            clock=tx.ctx.clocks.monotonic,
            sleep=tx.ctx.clocks.sleep,
        )
    shown = ", ".join(map(str, cards))
    if free.leaked_pids:
        pids = ", ".join(map(str, free.leaked_pids))
        return f"; but cards {shown} still run pids {pids}: find them with nvidia-smi"
    if free.unknown_cards:
        unread = ", ".join(map(str, free.unknown_cards))
        return f"; cards {shown} could not all be read (card {unread}): check them with nvidia-smi"
    return f" and cards {shown} are free"


def _restore_conflicts(tx: TxContext, journal: SwapJournal) -> RestoreOutcome | None:
    if not journal.stopped_conflicts:
        return None
    with tx.phase("restore-conflicts", ", ".join(s.label() for s in journal.stopped_conflicts)):
        return restore_conflicts(journal.stopped_conflicts, handler=tx.ctx.conflicts, state_dir=tx.ctx.state_dir)


def _restored_event(journal: SwapJournal, restored: StartResult, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    service = restored.service
    return {
        "event": "up",
        "profile": service.profile,
        "plan_hash": service.plan_hash,
        "container_id": service.container_id,
        "container_name": service.container_name,
        "startup_s": round(restored.startup_s, 3),
        "restored_after": journal.to_profile,
        **(extra or {}),
    }
