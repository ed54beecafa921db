"""``servectl recover``: settle a transaction (swap, rollback, up) that was killed before it finished.

A transaction keeps a journal (:mod:`servectl.service.journal`) from its first change until it is resolved.
After ``kill -9``, a power cut or a crash, the journal is still there and every command that would change
services refuses until it is settled. ``recover`` settles it from the journal, not from today's files:

* the target passed its health gate (its gate record says so): the transaction had in fact finished; it is
  recorded in the history, nothing is stopped;
* otherwise the transaction's one undo runs (:func:`servectl.service.transaction.undo.undo`, as swap's
  failure path does): the orphaned target is removed (it never proved it serves), the previous service is
  started again from the profile document kept in the journal (what ran, even if its file changed since),
  through the same health gate, and the conflicts the transaction stopped are restored.

The journal is removed once that is done (also when the previous service fails to come back: the failure is
then the state, reported with what to do). A damaged journal cannot say what ran before: ``recover`` then
removes only services that never passed their gate, sets the journal aside and says what runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from servectl.adapters.conflicts import RestoreOutcome
from servectl.adapters.state import set_aside
from servectl.errors import StateDamaged, SwapFailed
from servectl.service.context import Context
from servectl.service.journal import JOURNAL_FILE, SwapJournal, clear_journal, read_journal
from servectl.service.transaction.context import TxContext
from servectl.service.transaction.model import PhaseEvent
from servectl.service.transaction.undo import is_proven, remove_unproven, undo

RecoverOutcome = Literal["nothing", "finished", "restored", "cleared"]


@dataclass(frozen=True)
class RecoverResult:
    """What ``recover`` did.

    Attributes:
        outcome: ``nothing`` (no journal), ``finished`` (the target had passed its gate), ``restored`` (the
            previous service is back), ``cleared`` (the target removed; nothing ran before, or the journal
            was damaged).
        message: one paragraph for the user: what runs now.
        removed: container names removed.
        restored: the profile brought back, if any.
        conflicts_restore: what restoring the transaction's conflicts did.
    """

    outcome: RecoverOutcome
    message: str
    removed: tuple[str, ...] = ()
    restored: str | None = None
    conflicts_restore: RestoreOutcome | None = None


def recover(
    ctx: Context, *, lock_timeout_s: float | None = None, on_phase: Callable[[PhaseEvent], None] | None = None
) -> RecoverResult:
    """Settle the transaction the journal names (see the module docstring).

    Args:
        ctx: the adapters and state; each stop waits on :attr:`~servectl.service.context.Context.gpus`
            until the cards are free.
        lock_timeout_s: how long to wait for another servectl (default: the context's).
        on_phase: hears of each step of the undo, as ``swap``'s does.

    Raises:
        SwapFailed: the previous service did not pass its gate again; nothing of it runs (journal removed).
        LockTimeout: another servectl process is changing services.
    """
    tx = TxContext.of(ctx, on_phase=on_phase, lock_timeout_s=lock_timeout_s)
    return _recover(tx)


def _recover(tx: TxContext) -> RecoverResult:
    with tx.lock("recover"):
        try:
            journal = read_journal(tx.ctx.state_dir)
        except StateDamaged as err:
            tx.prove_state_writable(repairs=[JOURNAL_FILE])  # the damaged journal is what recover sets aside
            return _clear_damaged(err, tx)
        if journal is None:
            return RecoverResult("nothing", "no unfinished swap, rollback or up: nothing to recover")
        tx.prove_state_writable(profiles=[p for p in (journal.to_profile, journal.from_profile) if p])
        return settle(journal, tx)


def settle(journal: SwapJournal, tx: TxContext) -> RecoverResult:
    """Settle ``journal`` (the lock held): record it when its target passed its gate, else undo it."""
    what = f"the {journal.kind} from {journal.from_profile or 'nothing'} to {journal.to_profile}"
    served = [s for s in tx.ctx.runtime.services(probe=False) if s.profile == journal.to_profile and is_proven(s)]
    if served:  # killed after the gate passed, before the bookkeeping: it had finished
        tx.record(
            {
                "event": "up" if journal.kind == "up" else journal.kind,
                "profile": journal.to_profile,
                "replaced": journal.from_profile,
                "container_id": served[0].container_id,
                "container_name": served[0].container_name,
                "recovered": True,
            }
        )
        clear_journal(tx.ctx.state_dir)
        return RecoverResult(
            "finished", f"{what} had finished: {journal.to_profile} passed its health gate and runs; recorded it"
        )
    got = undo(journal, tx, why="settled by `servectl recover`", record_extra={"recovered": True})
    previous = got.previous
    restored = previous if got.previous_runs else None
    tx.record(
        {
            "event": "recovered",
            "profile": journal.to_profile,
            "kind": journal.kind,
            "replaced": previous,
            "restored": restored,
            "t_journal": journal.started_at,
        }
    )
    parts = [f"{what} was killed during '{journal.phase}'"]
    if got.removed:
        parts.append(f"removed {', '.join(got.removed)} (it never passed its health gate)")
    if got.restore is not None and got.restore.summary():
        parts.append(got.restore.summary())
    if got.previous_failure is not None:
        raise SwapFailed(
            "; ".join(parts)
            + f"; the previous service {previous} did not come back: {got.previous_failure.describe()}{got.drift}. "
            f"Nothing of it runs now{got.cards}: fix it, then `servectl up {previous}`"
        )
    if restored is not None:
        parts.append(f"{restored} runs (it passed its health gate){got.drift}")
        return RecoverResult("restored", "; ".join(parts), got.removed, restored, got.restore)
    parts.append(f"nothing ran before it, so nothing runs in its place now{got.cards}")
    return RecoverResult("cleared", "; ".join(parts), got.removed, None, got.restore)


def _clear_damaged(err: StateDamaged, tx: TxContext) -> RecoverResult:
    """A damaged journal cannot say what ran before: remove what never passed its gate, set the journal aside."""
    removed = [s.container_name for s in remove_unproven(tx, profile=None)]
    moved = set_aside(tx.ctx.state_dir / JOURNAL_FILE, clock=tx.ctx.clocks.wall)
    alive = [s.profile for s in tx.ctx.runtime.services(probe=False) if is_proven(s)]
    message = (
        f"{err.message.split(';')[0]}; it cannot say what ran before, so: "
        + (f"removed {', '.join(removed)} (never passed its health gate); " if removed else "")
        + f"moved the journal to {moved}; running now: {', '.join(alive) or 'nothing of servectl'}"
    )
    return RecoverResult("cleared", message, tuple(removed))
