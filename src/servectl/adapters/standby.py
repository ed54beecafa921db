"""Warm standbys in the state folder: which containers hold no GPU memory now, and what a resume costs.

A container that a swap released (``swap.standby: warm``) keeps running; Docker cannot tell it from a
serving one, so servectl keeps one small JSON file per such container under ``standby/``, written the
moment the release is verified and removed when the container resumes or is removed. The last measured
resume of each profile is kept beside it (``standby/resume-<profile>.json``), for ``status``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servectl.adapters.state import atomic_write_text, read_state_json
from servectl.errors import StateDamaged

STANDBY_DIR = "standby"
_ID = re.compile(r"^[0-9a-f]{12,64}$")
_PROFILE = re.compile(r"^_?[a-z0-9][a-z0-9._-]*$")
_FIX = "remove the file; `servectl down NAME` stops a standby service"


@dataclass(frozen=True)
class StandbyEntry:
    """A released service: its container, when and how fast it was released, and what it keeps.

    Attributes:
        profile, container_id: the service.
        released_at: epoch seconds of the release.
        release_s: how long the release and its verification took.
        host_ram_bytes: host RAM the CPU copy of its weights takes (0 without ``--enable-weights-cpu-backup``).
        reference_answer: its greedy answer to the gate's prompt before the release (a resume must match it).
    """

    profile: str
    container_id: str
    released_at: float
    release_s: float
    host_ram_bytes: int
    reference_answer: str

    @classmethod
    def from_dict(cls, data: Any) -> StandbyEntry:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return cls(
            profile=str(data["profile"]),
            container_id=str(data["container_id"]),
            released_at=float(data["released_at"]),
            release_s=float(data["release_s"]),
            host_ram_bytes=int(data["host_ram_bytes"]),
            reference_answer=str(data["reference_answer"]),
        )


class StandbyRecord:
    """The standby files of one state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.folder = Path(state_dir) / STANDBY_DIR

    def mark(self, entry: StandbyEntry) -> None:
        """Record that ``entry.container_id`` is on standby now."""
        if _ID.match(entry.container_id):
            atomic_write_text(self.folder / f"{entry.container_id}.json", json.dumps(asdict(entry)) + "\n")

    def entry(self, container_id: str) -> StandbyEntry | None:
        """The record of ``container_id`` (None: it is not on standby, or its file is damaged)."""
        if not _ID.match(container_id):
            return None
        path = self.folder / f"{container_id}.json"
        try:  # a damaged record counts as none: status still reads, a swap treats it as a running service
            data = read_state_json(path, what="standby record", fix=_FIX)
            return None if data is None else StandbyEntry.from_dict(data)
        except (StateDamaged, ValueError, KeyError, TypeError):
            return None

    def clear(self, container_id: str) -> None:
        """The container resumed or is gone."""
        if _ID.match(container_id):
            (self.folder / f"{container_id}.json").unlink(missing_ok=True)

    def note_resume(self, profile: str, resume_s: float, at: float) -> None:
        """Keep the last measured resume of ``profile``."""
        if _PROFILE.match(profile):
            text = json.dumps({"resume_s": round(resume_s, 3), "at": at}) + "\n"
            atomic_write_text(self.folder / f"resume-{profile}.json", text)

    def last_resume_s(self, profile: str) -> float | None:
        """The last measured resume of ``profile`` in seconds (None: never measured, or unreadable)."""
        if not _PROFILE.match(profile):
            return None
        try:
            data = read_state_json(self.folder / f"resume-{profile}.json", what="last resume", fix=_FIX)
            return None if data is None else float(data["resume_s"])
        except (StateDamaged, ValueError, KeyError, TypeError):
            return None


__all__ = ["STANDBY_DIR", "StandbyEntry", "StandbyRecord"]
