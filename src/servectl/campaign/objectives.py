"""Operating points: where to serve, chosen per objective from what the campaign measured, and written as profiles.

A campaign's ``objectives`` (:class:`~servectl.campaign.model.Objective`) each pick one (variant, point) among
the incumbent and the accepted variants, from the medians over the repeats of every metric the lab recorded for
that point (``Measured.detail["metrics"]``: decode tok/s, TTFT, output tokens per minute):

* ``lowest_ttft``: the point with the lowest TTFT whose decode tok/s is at least ``decode_floor_tok_s``;
* ``max_output_tpm``: the point with the highest output tokens per minute;
* ``latency_budget``: the point with the highest output tokens per minute whose TTFT is within
  ``ttft_budget_s`` (only points at ``concurrency`` when it is given).

An objective some point meets is ``accepted-<objective>-profile`` and gets a profile: the base extended with
the chosen variant's overrides and ``engine.max_running_requests`` set to the point's concurrency (a service
that admits more requests than it was measured at is not the one measured). One no point meets is
``rejected-<objective>-unmet``, with the closest point in its reason. Cold and warm-prefix points are separate
points of the workload (``Point.prefix``), so each is chosen, or not, on its own measurements.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.campaign.model import Objective, Point

if TYPE_CHECKING:
    from servectl.adapters.campaign_db import CampaignDb
    from servectl.campaign.run import CampaignRow
    from servectl.campaign.variants import CampaignCheck
    from servectl.profile.loader import ProfileSearch

#: The metrics an objective reads (each point's median over its repeats).
OBJECTIVE_METRICS = ("decode_tok_s", "ttft_s", "output_tok_per_min")


@dataclass(frozen=True)
class PointFigures:
    """One variant's medians at one point."""

    variant: str
    point: Point
    decode_tok_s: float | None
    ttft_s: float | None
    output_tok_per_min: float | None
    repeats: int

    def describe(self) -> str:
        def show(value: float | None, unit: str, digits: int) -> str:
            return "-" if value is None else f"{value:,.{digits}f} {unit}"

        return (
            f"{self.variant} at {self.point.name} (C{self.point.concurrency}, {self.point.prefix}): "
            f"TTFT {show(self.ttft_s, 's', 3)}, decode {show(self.decode_tok_s, 'tok/s', 1)}, "
            f"{show(self.output_tok_per_min, 'output tok/min', 0)}"
        )


@dataclass(frozen=True)
class ObjectiveRow:
    """An objective's outcome: its status, the chosen point (accepted) and the profile written for it."""

    name: str
    kind: str
    status: str
    reason: str
    chosen: PointFigures | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    profile: str | None = None  # the profile's name (accepted)

    def to_dict(self) -> dict[str, Any]:
        chosen = self.chosen
        return {
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "reason": self.reason,
            "profile": self.profile,
            "variant": chosen.variant if chosen else None,
            "point": chosen.point.name if chosen else None,
            "concurrency": chosen.point.concurrency if chosen else None,
            "prefix": chosen.point.prefix if chosen else None,
            "decode_tok_s": chosen.decode_tok_s if chosen else None,
            "ttft_s": chosen.ttft_s if chosen else None,
            "output_tok_per_min": chosen.output_tok_per_min if chosen else None,
            "overrides": dict(self.overrides),
        }


def point_figures(
    points: Sequence[Point], measurements: Sequence[tuple[str, str, Mapping[str, Any]]], variants: Sequence[str]
) -> list[PointFigures]:
    """Each (variant, point)'s medians over its repeats, from ``(variant, point, metrics)`` of each repeat."""
    out: list[PointFigures] = []
    for variant in variants:
        for point in points:
            seen = [metrics for v, p, metrics in measurements if v == variant and p == point.name]
            if not seen:
                continue
            medians: dict[str, float | None] = {}
            for metric in OBJECTIVE_METRICS:
                values = [float(m[metric]) for m in seen if m.get(metric) is not None]
                medians[metric] = statistics.median(values) if values else None
            out.append(
                PointFigures(
                    variant,
                    point,
                    medians["decode_tok_s"],
                    medians["ttft_s"],
                    medians["output_tok_per_min"],
                    len(seen),
                )
            )
    return out


def choose(
    objective: Objective, figures: Sequence[PointFigures], overrides: Mapping[str, Mapping[str, Any]], campaign: str
) -> ObjectiveRow:
    """The point ``objective`` picks among ``figures`` (the incumbent's and the accepted variants'), and the
    overrides of its profile (``overrides``: each candidate variant's own, ``{}`` for the incumbent)."""
    feasible, closest = _feasible(objective, figures)
    if not feasible:
        near = f"; closest: {closest.describe()}" if closest else "; nothing was measured"
        status = f"rejected-{objective.name}-unmet"
        return ObjectiveRow(objective.name, objective.kind, status, _unmet(objective) + near)
    if objective.kind == "lowest_ttft":
        best = min(feasible, key=lambda f: (f.ttft_s or 0.0, -(f.decode_tok_s or 0.0)))
        why = f"lowest TTFT with decode >= {objective.decode_floor_tok_s:g} tok/s"
    elif objective.kind == "max_output_tpm":
        best = max(feasible, key=lambda f: f.output_tok_per_min or 0.0)
        why = "highest output tokens per minute"
    else:
        best = max(feasible, key=lambda f: f.output_tok_per_min or 0.0)
        at = f" at C{objective.concurrency}" if objective.concurrency is not None else ""
        why = f"highest output tokens per minute with TTFT <= {objective.ttft_budget_s:g} s{at}"
    merged = copy.deepcopy(dict(overrides.get(best.variant, {})))
    merged.setdefault("engine", {})["max_running_requests"] = best.point.concurrency
    return ObjectiveRow(
        objective.name,
        objective.kind,
        f"accepted-{objective.name}-profile",
        f"{why}: {best.describe()} over {best.repeats} repeats",
        best,
        merged,
        f"{campaign}.{objective.name}",
    )


def _feasible(objective: Objective, figures: Sequence[PointFigures]) -> tuple[list[PointFigures], PointFigures | None]:
    """The points that meet ``objective``'s constraint, and (none meeting it) the one closest to it."""
    if objective.kind == "lowest_ttft":
        floor = objective.decode_floor_tok_s or 0.0
        have = [f for f in figures if f.decode_tok_s is not None and f.ttft_s is not None]
        ok = [f for f in have if (f.decode_tok_s or 0.0) >= floor]
        return ok, max(have, key=lambda f: f.decode_tok_s or 0.0, default=None)
    if objective.kind == "max_output_tpm":
        ok = [f for f in figures if f.output_tok_per_min is not None]
        return ok, None
    budget = objective.ttft_budget_s or 0.0
    have = [
        f
        for f in figures
        if f.ttft_s is not None
        and f.output_tok_per_min is not None
        and (objective.concurrency is None or f.point.concurrency == objective.concurrency)
    ]
    ok = [f for f in have if (f.ttft_s or 0.0) <= budget]
    return ok, min(have, key=lambda f: f.ttft_s or 0.0, default=None)


def _unmet(objective: Objective) -> str:
    if objective.kind == "lowest_ttft":
        return f"no point of the incumbent or an accepted variant decodes at >= {objective.decode_floor_tok_s:g} tok/s"
    if objective.kind == "max_output_tpm":
        return "no point of the incumbent or an accepted variant has an output-token figure"
    at = f" at C{objective.concurrency}" if objective.concurrency is not None else ""
    return f"no point{at} of the incumbent or an accepted variant has TTFT <= {objective.ttft_budget_s:g} s"


def profile_document(row: ObjectiveRow, *, base: str, campaign: str, source: str) -> tuple[str, dict[str, Any]]:
    """The YAML header and document of an accepted objective's profile: the base ``extends``-ed with the chosen
    variant's overrides and the point's ``max_running_requests``."""
    assert row.chosen is not None and row.profile is not None
    document: dict[str, Any] = {
        "name": row.profile,
        "extends": base,
        "description": f"campaign {campaign}, objective {row.name}: {row.chosen.describe()}",
        "status": "candidate",
        "evidence": None,
        **copy.deepcopy(dict(row.overrides)),
    }
    header = (
        f"# Operating point {row.name} of campaign {campaign} ({source}), written by servectl campaign run:\n"
        f"# {row.reason}\n"
    )
    return header, document


def objective_rows(check: CampaignCheck, rows: Sequence[CampaignRow], db: CampaignDb) -> list[ObjectiveRow]:
    """Each objective of ``check``'s campaign decided over the incumbent and the accepted variants of ``rows``,
    from the per-repeat metrics in ``db`` (pure apart from reading it)."""
    from servectl.campaign.schedule import INCUMBENT

    c = check.loaded.campaign
    accepted = [r.name for r in rows if r.status.startswith("accepted-")]
    overrides: dict[str, Mapping[str, Any]] = {INCUMBENT: {}}  # the incumbent's profile is extended as it is
    overrides.update({v.name: v.spec.overrides for v in check.variants if v.name in accepted})
    seen = [(m.variant, m.point, m.detail.get("metrics") or {}) for m in db.measurements() if m.value is not None]
    figures = point_figures(c.workload.points, seen, [INCUMBENT, *accepted])
    return [choose(objective, figures, overrides, c.name) for objective in c.objectives]


def write_objectives(
    folder: Path,
    check: CampaignCheck,
    rows: Sequence[CampaignRow],
    db: CampaignDb,
    *,
    folders: ProfileSearch,
    environ: Mapping[str, str],
) -> list[ObjectiveRow]:
    """Decide every objective, write each accepted one's profile to ``folder/winner/<campaign>.<objective>.yaml``
    (checked and compiled as a variant is, before it is written) and all of them to ``folder/objectives.json``."""
    import json
    from dataclasses import replace

    import yaml

    from servectl.adapters.state import atomic_write_text
    from servectl.campaign.load import VariantSpec
    from servectl.campaign.variants import check_variant

    c = check.loaded.campaign
    incumbent = c.incumbent.profile or c.base
    out: list[ObjectiveRow] = []
    for index, row in enumerate(objective_rows(check, rows, db)):
        if row.chosen is None or row.profile is None:
            out.append(row)
            continue
        extends = incumbent if row.chosen.variant == "incumbent" else c.base
        spec = VariantSpec(row.name, "", row.overrides, {(): check.loaded.location(("objectives", index))})
        checked = check_variant(check.loaded, spec, folders, environ, extends=extends)
        if not checked.valid:
            out.append(replace(row, status=f"rejected-{row.name}-invalid", reason=checked.reason(), profile=None))
            continue
        header, document = profile_document(row, base=extends, campaign=c.name, source=str(check.loaded.path))
        atomic_write_text(folder / "winner" / f"{row.profile}.yaml", header + yaml.safe_dump(document, sort_keys=False))
        out.append(row)
    atomic_write_text(folder / "objectives.json", json.dumps([r.to_dict() for r in out], indent=2) + "\n")
    return out
