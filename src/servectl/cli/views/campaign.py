"""What ``servectl campaign validate`` prints: the campaign in one line, then one line per variant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servectl.campaign.variants import CampaignCheck


def check_lines(check: CampaignCheck) -> list[str]:
    """The campaign's base, incumbent, points and policy, then each variant: its plan hash, or why it is refused."""
    c = check.loaded.campaign
    d = c.decision
    points = ", ".join(f"{p.name} ({p.prompt_tokens} tok x C{p.concurrency}, {p.prefix})" for p in c.workload.points)
    invalid = len(check.invalid_variants)
    lines = [
        f"campaign {c.name}: base {c.base}, incumbent {check.incumbent.profile_name} "
        f"(plan {check.incumbent.plan_hash}); {len(check.variants)} variants"
        + (f", {invalid} rejected-invalid" if invalid else ", all valid"),
        f"  points: {points}",
        f"  decision: {d.metric} at {d.primary_point}, gain > +{d.min_gain_pct:g} %, regression tolerated "
        f"-{d.regression_tolerance_pct:g} %, {d.method}, alpha {d.alpha:g}, "
        + (
            f"{d.spending} alpha spending over {d.min_repeats}..{d.max_repeats} repeats"
            if d.sequential == "alpha-spending"
            else f"fixed {d.max_repeats} repeats"
        ),
    ]
    width = max(len(v.name) for v in check.variants)
    for v in check.variants:
        shown = f"plan {v.plan_hash}  {v.spec.description}".rstrip() if v.valid else f"rejected-invalid: {v.reason()}"
        lines.append(f"  {v.name:<{width}}  {shown}")
    return lines
