"""Where a campaign stands, read from its database alone (``servectl campaign status DIR``), also while another
process runs it: variants settled of all, what is being measured, and an ETA from the visits measured so far."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from servectl.adapters.campaign_db import DB_FILE, CampaignDb
from servectl.errors import UsageError


@dataclass(frozen=True)
class VariantProgress:
    """One variant's row as it stands: its status and reason, and the repeats measured so far."""

    name: str
    status: str
    reason: str
    repeats: int


@dataclass(frozen=True)
class CampaignProgress:
    """A campaign's progress (see the module docstring)."""

    campaign: str
    variants: tuple[VariantProgress, ...]
    last_event: str
    finished: bool
    measurements: int
    eta_s: float | None  # None: nothing measured yet, or finished

    @property
    def settled(self) -> int:
        return sum(v.status != "measuring" for v in self.variants)

    def to_dict(self) -> dict[str, object]:
        return {
            "campaign": self.campaign,
            "settled": self.settled,
            "variants": [v.__dict__ for v in self.variants],
            "last_event": self.last_event,
            "finished": self.finished,
            "measurements": self.measurements,
            "eta_s": self.eta_s,
        }


def read_progress(folder: Path) -> CampaignProgress:
    """The progress of the campaign in ``folder`` (read-only; safe beside the process that runs it).

    Raises:
        UsageError: ``folder`` holds no campaign.
    """
    if not (folder / DB_FILE).is_file():
        raise UsageError(f"{folder}: no campaign here ({DB_FILE} missing); give the folder of `campaign run --out`")
    with CampaignDb(folder, read_only=True) as db:
        meta = db.meta()
        rows = db.variants()
        measurements = db.measurements()
        events = list(db.events())
    decision = json.loads(meta.get("decision", "{}"))
    repeats: dict[str, set[int]] = {}
    for m in measurements:
        repeats.setdefault(m.variant, set()).add(m.round)
    order = {name: index for index, name in enumerate(json.loads(meta.get("variants", "[]")))}
    rows.sort(key=lambda r: order.get(r.name, len(order)))  # the file's order (a replaced row moves to the end)
    progress = tuple(VariantProgress(r.name, r.status, r.reason, len(repeats.get(r.name, ()))) for r in rows)
    finished = bool(events) and events[-1][1] == "restored"
    eta = None
    open_rows = [v for v in progress if v.status == "measuring"]
    if measurements and open_rows and not finished:
        most = int(decision.get("max_repeats", 0))
        left = [max(0, most - v.repeats) for v in open_rows]
        visits_done = sum(len(r) for r in repeats.values())
        per_visit = (measurements[-1].measured_at - events[0][0]) / max(visits_done, 1)
        eta = per_visit * (sum(left) + max(left))  # the open variants' repeats, and the incumbent's each round
    return CampaignProgress(
        campaign=meta.get("campaign", "?"),
        variants=progress,
        last_event=f"{events[-1][1]} {events[-1][2] or ''}".strip() if events else "",
        finished=finished,
        measurements=len(measurements),
        eta_s=eta,
    )


def campaign_file_of(folder: Path) -> Path:
    """The campaign file the campaign in ``folder`` was run from.

    Raises:
        UsageError: ``folder`` holds no campaign, or its file is gone.
    """
    if not (folder / DB_FILE).is_file():
        raise UsageError(f"{folder}: no campaign here ({DB_FILE} missing); give the folder of `campaign run --out`")
    with CampaignDb(folder, read_only=True) as db:
        file = db.meta().get("file")
    if not file or not Path(file).is_file():
        raise UsageError(f"{folder}: its campaign file {file} is gone; run `servectl campaign run FILE --out {folder}`")
    return Path(file)
