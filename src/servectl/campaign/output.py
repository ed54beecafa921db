"""What a campaign leaves in its folder: ``campaign.json`` (rows, settings, provenance), ``README.md`` (the table
variant x point with statuses) and the winner as a candidate profile, all from the campaign's database."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servectl.adapters.campaign_db import CampaignDb
from servectl.campaign.objectives import ObjectiveRow
from servectl.campaign.references import IncumbentReference, incumbent_references
from servectl.campaign.run import CampaignRow
from servectl.campaign.schedule import INCUMBENT
from servectl.campaign.variants import CampaignCheck, CheckedVariant

SCHEMA = "servectl.campaign/v1"


@dataclass(frozen=True)
class CampaignOutcome:
    """A finished (or budget-ended) campaign: its folder, the checked campaign, one row per variant, the winner."""

    folder: Path
    check: CampaignCheck
    rows: tuple[CampaignRow, ...]
    winner: str | None = None  # the accepted variant with the largest gain at the primary point
    winner_profile: Path | None = None
    objectives: tuple[ObjectiveRow, ...] = ()  # the operating points (servectl.campaign.objectives)
    references: tuple[IncumbentReference, ...] = ()  # earlier figures of the incumbent, shown beside it
    incumbent_decode: Mapping[str, float | None] = field(default_factory=dict)  # its median decode per point


def provenance(variant: CheckedVariant, image_ids: Sequence[str] = ()) -> dict[str, Any]:
    """What identifies a variant's service: plan hash, image (its pinned digest, and the image ids its containers
    really ran: an unpinned tag has no digest, and a tag rebuilt mid-campaign shows as two ids), model revision."""
    profile = variant.loaded.profile if variant.loaded is not None else None
    return {
        "plan_hash": variant.plan_hash,
        "image": profile.image.ref if profile else None,
        "image_digest": profile.image.digest if profile else None,
        "image_ids": list(image_ids),
        "model_revision": profile.model.revision if profile else None,
    }


def campaign_document(check: CampaignCheck, rows: Sequence[CampaignRow], db: CampaignDb) -> dict[str, Any]:
    """``campaign.json``: the settings, each variant's row with its comparisons and provenance, every measurement."""
    stored = {r.name: r for r in db.variants()}
    startups = db.startups()
    images = db.image_ids()
    by_name = {v.name: v for v in check.variants}
    variants = []
    for row in rows:
        detail = stored[row.name].detail if row.name in stored else {}
        times = startups.get(row.name, [])
        variants.append(
            {
                "name": row.name,
                "profile": row.profile,
                "status": row.status,
                "reason": row.reason,
                "overrides": dict(by_name[row.name].spec.overrides),
                "comparisons": detail.get("comparisons", []),
                "repeats": detail.get("repeats"),
                "more_repeats": detail.get("more_repeats"),
                "startup_s": statistics.median(times) if times else None,
                "provenance": provenance(by_name[row.name], images.get(row.name, ())),
            }
        )
    inc = check.incumbent
    times = startups.get(INCUMBENT, [])
    return {
        "schema": SCHEMA,
        "campaign": check.loaded.campaign.name,
        "file": str(check.loaded.path),
        "settings": check.loaded.campaign.model_dump(mode="json"),
        "incumbent": {
            "profile": inc.profile_name,
            "startup_s": statistics.median(times) if times else None,
            "provenance": provenance(inc, images.get(INCUMBENT, ())),
            "references": [r.to_dict() for r in incumbent_references(check.loaded)],  # shown, never deciding
        },
        "variants": variants,
        "measurements": [
            {
                "variant": m.variant,
                "round": m.round,
                "point": m.point,
                "value": m.value,
                "flagged": m.flagged,
                "measured_at": _iso(m.measured_at),
                **dict(m.detail),
            }
            for m in db.measurements()
        ],
    }


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


def readme_table(document: dict[str, Any], figures: Sequence[str] = ()) -> str:
    """The README of a campaign folder from its record (``campaign.json``): one row per variant, one column per
    point (gain and interval), each variant's startup time, then the figures (file names in the folder; a line
    saying why, when none). The claim ledger's recount renders it again from the artifacts and compares."""
    settings = document["settings"]
    decision = settings["decision"]
    points = [str(p["name"]) for p in settings["workload"]["points"]]
    lines = [
        f"# Campaign {settings['name']}",
        "",
        f"Base `{settings['base']}`, incumbent `{document['incumbent']['profile']}` measured in the same run; "
        f"{decision['metric']} at {', '.join(points)} (primary {decision['primary_point']}); each cell is the gain "
        "over the incumbent with its interval.",
        "",
        "| variant | status | " + " | ".join(points) + " | startup s | reason |",
        "| --- | --- | " + " | ".join("---" for _ in points) + " | --- | --- |",
    ]
    for v in document["variants"]:
        cells = {
            x["point"]: f"{x['gain_pct']:+.1f} % [{x['low_pct']:+.1f}, {x['high_pct']:+.1f}]" for x in v["comparisons"]
        }
        startup = f"{v['startup_s']:.1f}" if v["startup_s"] is not None else "-"
        lines.append(
            f"| {v['name']} | {v['status']} | "
            + " | ".join(cells.get(p, "-") for p in points)
            + f" | {startup} | {v['reason'].replace('|', '/')} |"
        )
    inc = document["incumbent"]
    if inc.get("startup_s") is not None:
        lines += ["", f"The incumbent `{inc['profile']}` started in {inc['startup_s']:.1f} s (median of its visits)."]
    mixed = [
        (side.get("name") or side.get("profile"), ids)
        for side in (inc, *document["variants"])
        if len(ids := (side.get("provenance") or {}).get("image_ids") or []) > 1
    ]
    for name, ids in mixed:
        short = ", ".join(i.removeprefix("sha256:")[:12] for i in ids)
        lines += [
            "",
            f"Warning: `{name}` ran on {len(ids)} different images ({short}): "
            "its image changed during the campaign, so its rounds mix builds; pin image.digest and run it again.",
        ]
    if document.get("winner"):
        lines += ["", f"Winner: `{document['winner']}` (`winner/` holds its candidate profile)."]
    lines.append("")
    if figures:
        lines += [f"![{Path(f).stem}]({f})" for f in figures]
    else:
        lines.append(f"No figures: {document.get('figures_note') or 'nothing to draw'}.")
    return "\n".join(lines) + "\n"


def pick_winner(check: CampaignCheck, document: dict[str, Any]) -> str | None:
    """The accepted variant with the largest gain at the primary point (None: none was accepted)."""
    primary = check.loaded.campaign.decision.primary_point
    accepted = [
        (next((x["gain_pct"] for x in v["comparisons"] if x["point"] == primary), 0.0), v["name"])
        for v in document["variants"]
        if v["status"].startswith("accepted-")
    ]
    return max(accepted)[1] if accepted else None


def write_outputs(folder: Path, check: CampaignCheck, rows: Sequence[CampaignRow], db: CampaignDb) -> CampaignOutcome:
    """Write ``campaign.json``, ``README.md`` and ``winner/<profile>.yaml`` into ``folder``."""
    from servectl.adapters.state import atomic_write_text
    from servectl.campaign.lab import variant_file

    document = campaign_document(check, rows, db)
    winner = pick_winner(check, document)
    document["winner"] = winner
    figures, note = draw_figures(folder, document)
    document["figures"] = figures
    document["figures_note"] = note
    atomic_write_text(folder / "campaign.json", json.dumps(document, indent=2) + "\n")
    atomic_write_text(folder / "README.md", readme_table(document, figures))
    winner_profile = None
    if winner is not None:
        variant = next(v for v in check.variants if v.name == winner)
        winner_profile = folder / "winner" / f"{variant.profile_name}.yaml"
        atomic_write_text(winner_profile, variant_file(check, variant))
    return CampaignOutcome(folder, check, tuple(rows), winner, winner_profile)


def draw_figures(folder: Path, document: dict[str, Any]) -> tuple[list[str], str | None]:
    """Draw ``taper.png`` and ``pareto.png`` into ``folder`` from the bench artifacts of ``document``'s
    measurements; returns the files drawn and, when one was not, why."""
    from servectl.campaign.plot import (
        PARETO_FILE,
        TAPER_FILE,
        can_plot,
        plot_pareto,
        plot_taper_overlay,
        point_series,
    )
    from servectl.campaign.readings import aggregate, read_readings

    if not can_plot():
        return [], "the figures need matplotlib: pip install 'servectl[bench]'"
    aggregates = aggregate(read_readings(folder, document))
    if not aggregates:
        return [], "no measurement left bench artifacts"
    accepted = [v["name"] for v in document["variants"] if str(v["status"]).startswith("accepted-")]
    title = str(document["campaign"])
    incumbent = str(document["incumbent"]["profile"])
    series = point_series(document["settings"]["workload"]["points"])
    drawn: list[str] = []
    notes: list[str] = []
    for name in (TAPER_FILE, PARETO_FILE):
        try:
            if name == TAPER_FILE:
                shown = [INCUMBENT, *accepted]
                plot_taper_overlay(
                    aggregates, shown=shown, incumbent_profile=incumbent, title=title, path=folder / name, series=series
                )
            else:
                winner = document.get("winner")
                plot_pareto(
                    aggregates,
                    incumbent_profile=incumbent,
                    winner=winner,
                    title=title,
                    path=folder / name,
                    series=series,
                )
            drawn.append(name)
        except ValueError as err:
            notes.append(f"{name}: {err}")
    return drawn, "; ".join(notes) or None
