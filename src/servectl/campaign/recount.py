"""``servectl claims verify DIR`` on a campaign folder: the table recounted from the bench artifacts.

A campaign's claims are its table: each measurement's value, each variant's gain and interval at each point,
each status and reason, and the README that shows them. :func:`verify_campaign` recounts them all from the
artifacts alone - every repeat's value read again from its bench ``summary.json`` (the number the decision
read), the decision replayed round by round with the campaign's own policy (:func:`servectl.campaign.decide.
decide`, the incumbent's repeats of the same rounds), and the README rendered again from the recounted record -
and says, one line each, what no longer holds: a missing or different artifact, a status or interval the
artifacts do not give, a variant measured past the round that settled it, or a README that is not the table.
Statuses decided before any measurement (``rejected-invalid``, ``rejected-startup``, ``rejected-gate-<id>``,
``rejected-vram``, ``rejected-flagged-requests``, a budget's ``inconclusive``) are not recounted (they rest on
logs and the swap, not on numbers) and are counted apart.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servectl.bench.finding.verify import VerifyResult
from servectl.campaign.decide import decide
from servectl.campaign.export import read_campaign_document
from servectl.campaign.model import Decision
from servectl.campaign.output import readme_table
from servectl.campaign.readings import Reading, read_readings
from servectl.campaign.schedule import INCUMBENT
from servectl.files import FileRefused, read_text_bounded

README_FILE = "README.md"


def is_campaign_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a campaign's record (and so is verified as a campaign, not as a finding)."""
    return (folder / "campaign.json").is_file() and not (folder / "claims.json").is_file()


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def _values_by_round(readings: Sequence[Reading], variant: str, points: Sequence[str]) -> dict[int, dict[str, float]]:
    """Round -> point -> value of ``variant``'s complete, measured repeats (as the run collected them)."""
    rounds: dict[int, dict[str, float]] = {}
    for r in readings:
        if r.variant == variant and r.value is not None:
            rounds.setdefault(r.round, {})[r.point] = r.value
    return rounds


def _replay(
    decision: Decision, variant: str, points: Sequence[str], readings: Sequence[Reading]
) -> tuple[Any, list[str]]:
    """The verdict the artifacts give ``variant`` at its last measured round, and problems of the replay (a
    round at which it had already settled)."""
    mine = _values_by_round(readings, variant, points)
    inc = _values_by_round(readings, INCUMBENT, points)
    measured: dict[str, list[float]] = {p: [] for p in points}
    verdict = None
    problems: list[str] = []
    rounds = sorted(mine)
    for index, round_index in enumerate(rounds):
        for p in points:
            if p in mine[round_index]:
                measured[p].append(mine[round_index][p])
        incumbent = {p: [inc[r][p] for r in sorted(inc) if r <= round_index and p in inc[r]] for p in points}
        verdict = decide(decision, variant=variant, points=points, measured=measured, incumbent=incumbent)
        if verdict.settled and index < len(rounds) - 1:
            problems.append(
                f"variant {variant}: the artifacts settle it ({verdict.status}) after round {round_index}, "
                f"but it was measured in round {rounds[-1]} too"
            )
            break
    return verdict, problems


def verify_campaign(folder: Path) -> VerifyResult:
    """Recount the table of the campaign in ``folder`` from its bench artifacts (see the module docstring).

    Raises:
        UsageError: no campaign record there.
    """
    document = read_campaign_document(folder)
    settings = document["settings"]
    decision = Decision.model_validate(settings["decision"])
    points = [str(p["name"]) for p in settings["workload"]["points"]]
    readings = read_readings(folder, document)
    problems: list[str] = []
    recounted = 0
    for m, r in zip(document.get("measurements", []), readings, strict=True):
        where = f"measurement {m['variant']} round {m['round']} {m['point']}"
        if r.artifact is None:
            problems.append(f"{where}: its bench artifact {m.get('artifacts')}/summary.json is missing or unreadable")
            continue
        recounted += 1
        if not _same(r.value, m.get("value")):
            problems.append(f"{where}: {r.artifact} gives {r.value}, the record says {m.get('value')}")
    recounted_doc = copy.deepcopy(document)
    not_recounted = 0
    for v in recounted_doc["variants"]:
        if not v.get("comparisons"):
            not_recounted += 1
            continue
        verdict, replay_problems = _replay(decision, v["name"], points, readings)
        problems += replay_problems
        recounted += 1 + len(v["comparisons"])
        if verdict is None:
            problems.append(f"variant {v['name']}: no repeat of it in the artifacts, the record says {v['status']}")
            continue
        if not verdict.settled:
            problems.append(f"variant {v['name']}: the artifacts leave it unsettled, the record says {v['status']}")
        elif verdict.status != v["status"]:
            problems.append(f"variant {v['name']}: the artifacts give {verdict.status}, the record says {v['status']}")
        recomputed = [c.to_dict() for c in verdict.comparisons]
        if recomputed != v["comparisons"]:
            stated = {c["point"]: c for c in v["comparisons"]}
            for c in recomputed:
                s = stated.get(c["point"], {})
                if any(s.get(k) != c[k] for k in ("gain_pct", "low_pct", "high_pct", "n_variant", "n_incumbent")):
                    problems.append(
                        f"variant {v['name']} at {c['point']}: the artifacts give {c['gain_pct']:+.3f} % "
                        f"[{c['low_pct']:+.3f}, {c['high_pct']:+.3f}], the record says "
                        f"{s.get('gain_pct')} % [{s.get('low_pct')}, {s.get('high_pct')}]"
                    )
        v.update(status=verdict.status, reason=verdict.reason, comparisons=recomputed)
    problems += _readme_problems(folder, recounted_doc)
    return VerifyResult(
        folder=folder, problems=tuple(problems), recounted=recounted, imported=not_recounted, what="campaign"
    )


def _readme_problems(folder: Path, recounted: Mapping[str, Any]) -> list[str]:
    try:
        text: str | None = read_text_bounded(folder / README_FILE, limit_bytes=16 * 2**20, what="README")
    except (FileNotFoundError, FileRefused):
        text = None
    expected = readme_table(dict(recounted), list(recounted.get("figures") or []))
    if text is None:
        return [f"{README_FILE}: missing; `servectl campaign resume {folder}` writes it again"]
    if text != expected:
        return [f"{README_FILE}: not the table the artifacts give (edited by hand, or the artifacts changed)"]
    return []
