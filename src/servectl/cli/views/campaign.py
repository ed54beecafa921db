"""What ``servectl campaign validate|run|resume|status`` print: the campaign, then one line per variant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servectl.campaign.output import CampaignOutcome
    from servectl.campaign.progress import CampaignProgress
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
    lines += [f"note: {note}" for note in check.notes]
    return lines


def outcome_lines(outcome: CampaignOutcome) -> list[str]:
    """One line per variant: its status and reason; then where the table, the record and the winner are."""
    width = max((len(r.name) for r in outcome.rows), default=8)
    lines = [f"campaign {outcome.check.loaded.campaign.name}: {len(outcome.rows)} variants"]
    lines += [f"  {r.name:<{width}}  {r.status}: {r.reason}" for r in outcome.rows]
    lines.append(f"table {outcome.folder / 'README.md'}, record {outcome.folder / 'campaign.json'}")
    if outcome.winner_profile is not None:
        lines.append(f"winner {outcome.winner}: candidate profile {outcome.winner_profile} (qualify, then promote)")
    else:
        lines.append("no variant was accepted: the incumbent stays")
    if outcome.references:  # earlier figures of the incumbent, beside the one measured here
        from servectl.campaign.references import reference_lines

        lines += reference_lines(outcome.references, dict(outcome.incumbent_decode))
    for o in outcome.objectives:  # the operating points
        where = f" -> {outcome.folder / 'winner' / (o.profile + '.yaml')}" if o.profile else ""
        lines.append(f"objective {o.name}: {o.status}: {o.reason}{where}")
    lines += [f"note: {note}" for note in outcome.check.notes]
    return lines


def progress_lines(progress: CampaignProgress) -> list[str]:
    """The campaign's state: settled of all, then one line per variant with its repeats so far."""
    eta = f", ETA {progress.eta_s / 60:.0f} min" if progress.eta_s is not None else ""
    state = "finished" if progress.finished else f"running or stopped (last: {progress.last_event}){eta}"
    lines = [
        f"campaign {progress.campaign}: {progress.settled}/{len(progress.variants)} variants settled, "
        f"{progress.measurements} measurements; {state}"
    ]
    width = max((len(v.name) for v in progress.variants), default=8)
    lines += [f"  {v.name:<{width}}  {v.status} ({v.repeats} repeats) {v.reason}".rstrip() for v in progress.variants]
    return lines
