"""The journal of a swap in progress, and what ``servectl status`` says about unfinished work.

A swap rewrites its journal at every step and removes it when it ends in an orderly way, so a journal found
later says which swap stopped where and what to run next (:meth:`SwapJournal.hint`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servectl.adapters.conflicts import StoppedConflict
from servectl.errors import ServectlError

JOURNAL_FILE = "swap-journal.json"


@dataclass(frozen=True)
class SwapJournal:
    """The swap in progress: rewritten at every step, removed when the swap ends in an orderly way."""

    pid: int
    from_profile: str | None
    to_profile: str
    phase: str
    started_at: float
    stopped_conflicts: tuple[StoppedConflict, ...] = ()
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stopped_conflicts"] = [s.to_dict() for s in self.stopped_conflicts]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwapJournal:
        return cls(
            pid=int(data["pid"]),
            from_profile=data.get("from_profile"),
            to_profile=str(data["to_profile"]),
            phase=str(data["phase"]),
            started_at=float(data["started_at"]),
            stopped_conflicts=tuple(StoppedConflict.from_dict(s) for s in data.get("stopped_conflicts", ())),
            note=str(data.get("note", "")),
        )

    def hint(self) -> str:
        """One line for ``servectl status``: which swap stopped where, and what to run next."""
        text = (
            f"a swap from {self.from_profile or 'nothing'} to {self.to_profile} (pid {self.pid}) "
            f"stopped during '{self.phase}'"
        )
        if self.note:
            text += f" ({self.note})"
        nxt = f"servectl swap {self.from_profile}" if self.from_profile else f"servectl swap {self.to_profile}"
        return text + f"; check what runs, then `{nxt}` (or `servectl down`)"


def read_journal(state_dir: Path) -> SwapJournal | None:
    """The journal an unfinished swap left, or ``None`` (``servectl status`` shows its hint)."""
    path = state_dir / JOURNAL_FILE
    try:
        return SwapJournal.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ServectlError(f"{path}: unreadable swap journal ({e}); delete it once `servectl status` is clear") from e


def write_journal(state_dir: Path, journal: SwapJournal) -> None:
    from servectl.adapters.state import atomic_write_text

    atomic_write_text(state_dir / JOURNAL_FILE, json.dumps(journal.to_dict(), indent=1) + "\n")


def clear_journal(state_dir: Path) -> None:
    (state_dir / JOURNAL_FILE).unlink(missing_ok=True)


def status_notes(*, state_dir: Path) -> list[str]:
    """Lines for ``servectl status``: an unfinished swap (its journal), and conflicts servectl keeps stopped."""
    from servectl.adapters.conflicts import load_stopped

    notes = []
    journal = read_journal(state_dir)
    if journal is not None:
        notes.append(f"unfinished swap: {journal.hint()}")
    for stopped in load_stopped(state_dir):
        notes.append(
            f"{stopped.label()} was stopped for {stopped.stopped_by or 'a servectl service'}; "
            f"`servectl down` restores it once nothing of servectl runs (or `{stopped.restore_command()}`)"
        )
    return notes
