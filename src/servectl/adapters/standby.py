"""Warm standbys in the state folder: which containers hold no GPU memory now, and what a resume costs.

A container that a swap released (``swap.standby: warm``) keeps running; Docker cannot tell it from a
serving one, so servectl keeps one small JSON file per such container under ``standby/``, written the
moment SGLang answers the release and removed when the container resumes or is removed. The last measured
release and resume of each profile are kept beside it (``standby/resume-<profile>.json``,
``standby/release-<profile>.json``), for ``status``, ``rollback-check`` and the gateway's ``Retry-After``; and per
container its trust (``standby/trust-<id>.json``: the fingerprint taken at its first start, how many
release/resume cycles it has been through, :mod:`servectl.service.fingerprint`, and the host RAM of its CPU copy
of the weights: how much, whether the pinned buffer is kept for the container's life, whether it is paid yet).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

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

    def on_standby(self, profile: str) -> bool:
        """Whether a container of ``profile`` is on standby now (a readable record names it)."""
        if not self.folder.is_dir():
            return False
        for path in self.folder.glob("*.json"):
            entry = self.entry(path.stem) if _ID.match(path.stem) else None
            if entry is not None and entry.profile == profile:
                return True
        return False

    def clear(self, container_id: str) -> None:
        """The container resumed or is gone."""
        if _ID.match(container_id):
            (self.folder / f"{container_id}.json").unlink(missing_ok=True)

    def note_resume(self, profile: str, resume_s: float, at: float) -> None:
        """Keep the last measured resume of ``profile``."""
        self._note("resume", profile, resume_s, at)

    def note_release(self, profile: str, release_s: float, at: float) -> None:
        """Keep the last measured release of ``profile`` (the call and the cards' verification)."""
        self._note("release", profile, release_s, at)

    def last_resume_s(self, profile: str) -> float | None:
        """The last measured resume of ``profile`` in seconds (None: never measured, or unreadable)."""
        return self._last("resume", profile)

    def last_release_s(self, profile: str) -> float | None:
        """The last measured release of ``profile`` in seconds (None: never measured, or unreadable)."""
        return self._last("release", profile)

    def _note(self, which: str, profile: str, seconds: float, at: float) -> None:
        if _PROFILE.match(profile):
            text = json.dumps({f"{which}_s": round(seconds, 3), "at": at}) + "\n"
            atomic_write_text(self.folder / f"{which}-{profile}.json", text)

    def _last(self, which: str, profile: str) -> float | None:
        if not _PROFILE.match(profile):
            return None
        try:
            data = read_state_json(self.folder / f"{which}-{profile}.json", what=f"last {which}", fix=_FIX)
            return None if data is None else float(data[f"{which}_s"])
        except (StateDamaged, ValueError, KeyError, TypeError):
            return None

    def trust(self, container_id: str) -> Trust | None:
        """The trust record of ``container_id`` (None: not a warm service's, or unreadable)."""
        if not _ID.match(container_id):
            return None
        try:
            data = read_state_json(self.folder / f"trust-{container_id}.json", what="standby trust", fix=_FIX)
            return None if data is None else Trust.from_dict(data)
        except (StateDamaged, ValueError, KeyError, TypeError):
            return None

    def set_trust(self, container_id: str, trust: Trust) -> None:
        """Keep ``container_id``'s fingerprint and cycle count."""
        if _ID.match(container_id):
            atomic_write_text(self.folder / f"trust-{container_id}.json", json.dumps(asdict(trust)) + "\n")

    def forget(self, container_id: str) -> None:
        """The container is gone: its record and trust go with it."""
        self.clear(container_id)
        if _ID.match(container_id):
            (self.folder / f"trust-{container_id}.json").unlink(missing_ok=True)


@dataclass(frozen=True)
class Trust:
    """A container's fingerprint (as :meth:`servectl.service.fingerprint.Fingerprint.to_list` writes it),
    taken at its first start, the release/resume cycles it has passed since, and its CPU copy of the weights.

    Attributes:
        backup_bytes: host RAM the CPU copy of its weights takes (0: no CPU copy).
        retained: the copy's pinned buffer is kept between cycles (``swap.standby_retain_backup``:
            ``TMS_RETAIN_CPU_BACKUP=1``), so once paid it stays pinned for as long as the container runs.
        pinned: the retained buffer is paid (its first release happened): that host RAM is in use now.
    """

    fingerprint: list[dict[str, Any]]
    cycles: int = 0
    backup_bytes: int = 0
    retained: bool = False
    pinned: bool = False

    @classmethod
    def from_dict(cls, data: Any) -> Trust:
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), list):
            raise ValueError("not a trust record")
        return cls(
            fingerprint=list(data["fingerprint"]),
            cycles=int(data.get("cycles", 0)),
            backup_bytes=int(data.get("backup_bytes", 0)),
            retained=bool(data.get("retained", False)),
            pinned=bool(data.get("pinned", False)),
        )


BackupHold = Literal["held", "to-pin", "on-release"]
"""How a warm container's CPU copy of the weights takes host RAM: ``held`` now (a retained buffer already paid,
or any copy while the container is released), ``to-pin`` (retained, paid at its first release, then held for as
long as it runs), ``on-release`` (taken only while it is released, freed at each resume)."""


def backup_hold(trust: Trust | None, entry: StandbyEntry | None) -> tuple[int, BackupHold] | None:
    """The host RAM of a container's CPU copy of the weights and how it takes it (None: no copy known)."""
    if entry is not None and entry.host_ram_bytes:
        return entry.host_ram_bytes, "held"
    if trust is None or not trust.backup_bytes:
        return None
    if trust.retained:
        return trust.backup_bytes, "held" if trust.pinned else "to-pin"
    return trust.backup_bytes, "on-release"


__all__ = ["STANDBY_DIR", "BackupHold", "StandbyEntry", "StandbyRecord", "Trust", "backup_hold"]
