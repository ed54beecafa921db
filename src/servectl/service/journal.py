"""The journal of a transaction in progress (swap, rollback, up), and what ``servectl status`` says about
unfinished work.

A transaction rewrites its journal at every step and removes it only once it is resolved, so a journal found
later (after ``kill -9``, a power cut) says which transaction stopped where, what ran before it - the
profile document as it was, so recovery restores what ran and not today's file - and what to run next
(:meth:`SwapJournal.hint`; ``servectl recover`` acts on it, see :mod:`servectl.service.recover`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servectl.adapters.conflicts import StoppedConflict, load_stopped
from servectl.adapters.state import HistoryLog, atomic_write_text, read_state_json
from servectl.errors import StateDamaged, UnfinishedTransaction

JOURNAL_FILE = "swap-journal.json"


@dataclass(frozen=True)
class PreviousService:
    """What ran before a transaction, kept so that recovery restores *that* and not today's file.

    Attributes:
        profile: its profile name.
        source: the profile file it was loaded from.
        data: the merged profile document as it was when the transaction began (``extends`` resolved).
        plan_hash: the plan hash of the container that ran (its label), to tell drift apart.
    """

    profile: str
    source: str
    data: Mapping[str, Any]
    plan_hash: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "source": self.source, "data": dict(self.data), "plan_hash": self.plan_hash}

    @classmethod
    def from_dict(cls, data: Any) -> PreviousService:
        if not isinstance(data, dict) or not isinstance(data.get("data"), dict):
            raise ValueError("'previous' is not a profile snapshot")
        return cls(
            profile=_text(data, "profile"),
            source=_text(data, "source"),
            data=data["data"],
            plan_hash=str(data.get("plan_hash") or ""),
        )


@dataclass(frozen=True)
class SwapJournal:
    """A transaction in progress (``swap``, ``rollback`` or ``up``): rewritten at every step, removed only
    when the transaction is resolved (it ended in an orderly way, or ``servectl recover`` settled it).
    """

    pid: int
    from_profile: str | None
    to_profile: str
    phase: str
    started_at: float
    stopped_conflicts: tuple[StoppedConflict, ...] = ()
    note: str = ""
    kind: str = "swap"
    previous: PreviousService | None = None
    target_container: str = ""  # the target's container name (the undo removes it unless it passed its gate)
    devices: tuple[int, ...] = ()  # the cards the transaction touches (the undo waits until they are free)
    standby: str = ""  # a warm standby step under way: releasing / released (the previous), resuming (the target)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stopped_conflicts"] = [s.to_dict() for s in self.stopped_conflicts]
        data["previous"] = self.previous.to_dict() if self.previous is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Any) -> SwapJournal:
        """The journal in ``data``.

        Raises:
            ValueError: ``data`` is not a journal (wrong shape or types).
        """
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        from_profile = data.get("from_profile")
        if from_profile is not None and not isinstance(from_profile, str):
            raise ValueError("'from_profile' is not a profile name")
        stopped = data.get("stopped_conflicts", [])
        if not isinstance(stopped, list):
            raise ValueError("'stopped_conflicts' is not a list")
        devices = data.get("devices") or []
        if not isinstance(devices, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise ValueError("'devices' is not a list of card numbers")
        try:
            return cls(
                pid=int(data["pid"]),
                from_profile=from_profile,
                to_profile=_text(data, "to_profile"),
                phase=_text(data, "phase"),
                started_at=float(data["started_at"]),
                stopped_conflicts=tuple(StoppedConflict.from_dict(s) for s in stopped),
                note=str(data.get("note", "")),
                kind=str(data.get("kind") or "swap"),
                previous=PreviousService.from_dict(data["previous"]) if data.get("previous") else None,
                target_container=str(data.get("target_container") or ""),
                devices=tuple(devices),
                standby=str(data.get("standby") or ""),
            )
        except (KeyError, TypeError, AttributeError, OverflowError) as e:
            raise ValueError(f"missing or wrong {e}") from None

    def hint(self) -> str:
        """One line for ``servectl status``: which transaction stopped where, and what to run next."""
        what = f"`servectl up {self.to_profile}`" if self.kind == "up" else f"a {self.kind}"
        text = (
            f"{what} from {self.from_profile or 'nothing'} to {self.to_profile} (pid {self.pid}) "
            f"stopped during '{self.phase}'"
        )
        if self.note:
            text += f" ({self.note})"
        return text + f"; `servectl recover` settles it ({self.recover_plan()})"

    def recover_plan(self) -> str:
        """What ``servectl recover`` will do, in words."""
        steps = [f"remove {self.to_profile} unless it passed its health gate"]
        if self.from_profile:
            steps.append(f"bring back {self.from_profile} as it ran")
        if self.stopped_conflicts:
            steps.append("restore " + ", ".join(s.label() for s in self.stopped_conflicts))
        return ", ".join(steps)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key!r} is not text")
    return value


JOURNAL_FIX = "`servectl status` shows what runs; once that is right, move the file aside"


def read_journal(state_dir: Path) -> SwapJournal | None:
    """The journal an unfinished transaction left, or ``None``.

    Raises:
        StateDamaged: the journal is damaged (one line naming it and what to do).
    """
    path = state_dir / JOURNAL_FILE
    data = read_state_json(path, what="swap journal", fix=JOURNAL_FIX)
    if data is None:
        return None
    try:
        return SwapJournal.from_dict(data)
    except ValueError as e:
        raise StateDamaged(f"{path}: the swap journal is malformed ({e}); {JOURNAL_FIX}", path=path) from None


def refuse_if_unfinished(state_dir: Path, *, up_of: str | None = None) -> SwapJournal | None:
    """Raise when an unfinished transaction's journal is there; ``up NAME`` may settle its own.

    Args:
        up_of: the profile an ``up`` is about to start: a journal of an interrupted ``up`` of that same
            profile is returned (that ``up`` replaces what it left) instead of raised.

    Raises:
        UnfinishedTransaction: a journal names a transaction that is not resolved.
        StateDamaged: the journal is damaged.
    """
    journal = read_journal(state_dir)
    if journal is None or (up_of is not None and journal.kind == "up" and journal.to_profile == up_of):
        return journal
    raise UnfinishedTransaction(f"unfinished {journal.kind}: {journal.hint()}")


def write_journal(state_dir: Path, journal: SwapJournal) -> None:
    """Replace the journal atomically."""
    atomic_write_text(state_dir / JOURNAL_FILE, json.dumps(journal.to_dict(), indent=1) + "\n")


def clear_journal(state_dir: Path) -> None:
    """Remove the journal: only once its transaction is resolved."""
    (state_dir / JOURNAL_FILE).unlink(missing_ok=True)


def status_notes(*, state_dir: Path, history: HistoryLog) -> list[str]:
    """Lines for ``servectl status``: an unfinished transaction (its journal), conflicts servectl keeps
    stopped, and a warning for each damaged state file (status goes on with what Docker says).
    """
    notes = []
    try:
        journal = read_journal(state_dir)
        if journal is not None:
            notes.append(f"unfinished {journal.kind}: {journal.hint()}")
    except StateDamaged as err:
        notes.append(f"warning: {err.message}")
    try:
        for stopped in load_stopped(state_dir):
            notes.append(
                f"{stopped.label()} was stopped for {stopped.stopped_by or 'a servectl service'}; "
                f"`servectl down` restores it once nothing of servectl runs (or `{stopped.restore_command()}`)"
            )
    except StateDamaged as err:
        notes.append(f"warning: {err.message}")
    _, damaged = history.readable_events()
    if damaged:
        notes.append(f"warning: {damaged}")
    return notes
