"""The decision on one variant against the incumbent, pure: its status in the registry's vocabulary and why.

:func:`decide` reads the repeats measured so far (per point, the variant's and the incumbent's values of the
campaign's metric) and the policy (:class:`~servectl.campaign.model.Decision`), and says whether the variant
is settled and how. The rule, at the look after ``n`` repeats of the variant (:mod:`servectl.campaign.stats`
for the interval and the level of the look):

* a point whose gain interval lies wholly below ``-regression_tolerance_pct`` rejects the variant:
  ``rejected-<point>-regression`` (the primary point first, then the others in workload order);
* the primary point's lower bound above ``min_gain_pct``, and every other point's lower bound above
  ``-regression_tolerance_pct``: ``accepted-<variant>`` (the gates and constraints are decided elsewhere,
  before and after the measurements, and their rejections come first);
* the primary point's upper bound below ``min_gain_pct`` (it is settled that the gain is too small) while no
  point regresses beyond tolerance: ``rejected-no-gain``;
* otherwise not settled: measured again while repeats remain, and at ``max_repeats`` ``inconclusive``, with
  the number of further repeats that would settle it were the estimates and spreads to hold.

The other statuses of a row (``rejected-invalid``, ``rejected-gate-<id>``, ``rejected-startup``,
``rejected-vram``, ``rejected-flagged-requests``) are given by the steps that find them; :data:`STATUS_WORDS`
lists the vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from servectl.campaign.model import HIGHER_IS_BETTER, METHOD_TRIM, Decision
from servectl.campaign.stats import LogWelch, Spending, log_welch, look_level

#: What each status of a campaign row means (the registry's ``accepted-...``/``rejected-...`` vocabulary).
STATUS_WORDS: dict[str, str] = {
    "accepted-<variant>": "significant gain at the primary point, no point regressing beyond tolerance, gates passed",
    "rejected-<point>-regression": "the gain interval at that point lies wholly below the tolerated regression",
    "rejected-no-gain": "settled: the gain at the primary point is below the minimum gain",
    "rejected-gate-<id>": "a qualification gate failed before the measurements",
    "rejected-invalid": "the variant did not validate or compile; no container was created",
    "rejected-startup": "the variant's engine did not come up (its failing log lines are recorded)",
    "rejected-vram": "free VRAM per card after its measurements was under the campaign reserve (no waiver)",
    "rejected-flagged-requests": "a measured request failed (the constraint no_flagged_requests)",
    "inconclusive": "the intervals still straddle a threshold at max_repeats; the row says how many more repeats",
    "measuring": "not settled yet; more repeats to come",
}

PointVerdict = Literal["gain", "non-inferior", "regression", "below-gain", "unsettled"]


@dataclass(frozen=True)
class PointComparison:
    """The variant against the incumbent at one point, at the look the decision was made."""

    point: str
    primary: bool
    gain_pct: float
    low_pct: float
    high_pct: float
    confidence: float  # two-sided coverage of [low_pct, high_pct]: 1 - 2 * level
    n_variant: int
    n_incumbent: int
    verdict: PointVerdict

    def to_dict(self) -> dict[str, object]:
        return {
            "point": self.point,
            "primary": self.primary,
            "gain_pct": round(self.gain_pct, 3),
            "low_pct": round(self.low_pct, 3),
            "high_pct": round(self.high_pct, 3),
            "confidence": round(self.confidence, 5),
            "n_variant": self.n_variant,
            "n_incumbent": self.n_incumbent,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Verdict:
    """A variant's decision at one look: its status, a one-line reason, and the comparisons behind it."""

    status: str
    reason: str
    settled: bool
    repeats: int
    comparisons: tuple[PointComparison, ...] = ()
    more_repeats: int | None = None  # inconclusive: further repeats that would settle it (None: no practical number)

    @property
    def accepted(self) -> bool:
        return self.status.startswith("accepted-")


def spending_of(decision: Decision) -> Spending | None:
    """The spending function of ``decision`` (None: the fixed design, one look at ``max_repeats``)."""
    return None if decision.sequential == "fixed" else decision.spending


def decide(
    decision: Decision,
    *,
    variant: str,
    points: Sequence[str],
    measured: Mapping[str, Sequence[float]],
    incumbent: Mapping[str, Sequence[float]],
) -> Verdict:
    """The decision on ``variant`` from the repeats so far.

    Args:
        decision: the campaign's policy.
        variant: the variant's name (its ``accepted-<variant>`` status).
        points: the workload's point names, in order.
        measured: per point, the variant's metric value of each repeat so far.
        incumbent: per point, the incumbent's metric value of each repeat so far (of this campaign).
    """
    repeats = min((len(measured.get(p, ())) for p in points), default=0)
    level = look_level(
        decision.alpha,
        repeats,
        min_repeats=decision.min_repeats,
        max_repeats=decision.max_repeats,
        spending=spending_of(decision),
    )
    last = repeats >= decision.max_repeats
    if (level == 0.0 and not last) or min((len(incumbent.get(p, ())) for p in points), default=0) < 2:
        return Verdict("measuring", f"{repeats} of at least {decision.min_repeats} repeats", False, repeats)
    if level == 0.0:  # past the last look's spending (cannot happen with max_repeats >= min_repeats)
        level = decision.alpha
    welch, comparisons = _compare(decision, points, measured, incumbent, level)
    by_point = {c.point: c for c in comparisons}
    shown = tuple(by_point[p] for p in points)
    regressed = next((c for c in comparisons if c.verdict == "regression"), None)
    if regressed is not None:
        return Verdict(
            f"rejected-{regressed.point}-regression",
            f"{decision.metric} at {regressed.point}: {_interval(regressed)}, wholly below the tolerated "
            f"-{decision.regression_tolerance_pct:g} %",
            True,
            repeats,
            shown,
        )
    head = by_point[decision.primary_point]
    others = [c for c in comparisons if not c.primary]
    if head.verdict == "gain" and all(c.verdict == "non-inferior" for c in others):
        rest = f"; other points within -{decision.regression_tolerance_pct:g} %" if others else ""
        return Verdict(
            f"accepted-{variant}",
            f"{decision.metric} at {head.point}: {_interval(head)} above +{decision.min_gain_pct:g} %{rest}",
            True,
            repeats,
            shown,
        )
    if head.verdict == "below-gain":
        return Verdict(
            "rejected-no-gain",
            f"{decision.metric} at {head.point}: {_interval(head)}, wholly below the minimum gain "
            f"+{decision.min_gain_pct:g} %",
            True,
            repeats,
            shown,
        )
    if not last:
        return Verdict("measuring", f"not settled after {repeats} repeats", False, repeats, shown)
    return _inconclusive(decision, welch, comparisons, level, repeats, shown)


def _compare(
    decision: Decision,
    points: Sequence[str],
    measured: Mapping[str, Sequence[float]],
    incumbent: Mapping[str, Sequence[float]],
    level: float,
) -> tuple[dict[str, LogWelch], list[PointComparison]]:
    """Each point's comparison at the look's ``level``, the primary point first."""
    higher = HIGHER_IS_BETTER[decision.metric]
    tolerance = -decision.regression_tolerance_pct
    ordered = [decision.primary_point, *[p for p in points if p != decision.primary_point]]
    trim = METHOD_TRIM[decision.method]
    welch = {p: log_welch(measured[p], incumbent[p], higher_is_better=higher, trim=trim) for p in ordered}
    comparisons: list[PointComparison] = []
    for point in ordered:
        w = welch[point]
        primary = point == decision.primary_point
        low, high = w.bounds_pct(level)
        if w.p_below(tolerance) < level:
            verdict: PointVerdict = "regression"
        elif primary and w.p_above(decision.min_gain_pct) < level:
            verdict = "gain"
        elif primary and w.p_below(decision.min_gain_pct) < level:
            verdict = "below-gain"
        elif not primary and w.p_above(tolerance) < level:
            verdict = "non-inferior"
        else:
            verdict = "unsettled"
        comparisons.append(
            PointComparison(point, primary, w.gain_pct, low, high, 1 - 2 * level, w.n_variant, w.n_incumbent, verdict)
        )
    return welch, comparisons


def _inconclusive(
    decision: Decision,
    welch: Mapping[str, LogWelch],
    comparisons: Sequence[PointComparison],
    level: float,
    repeats: int,
    shown: tuple[PointComparison, ...],
) -> Verdict:
    """At ``max_repeats`` with something unsettled: which point, and how many more repeats would settle it."""
    open_points = [c for c in comparisons if c.verdict in ("unsettled", "below-gain")]
    worst = open_points[0]
    threshold = decision.min_gain_pct if worst.primary else -decision.regression_tolerance_pct
    needed = [
        welch[c.point].repeats_to_settle(
            decision.min_gain_pct if c.primary else -decision.regression_tolerance_pct, level
        )
        for c in open_points
    ]
    more = None if any(n is None for n in needed) else max(n for n in needed if n is not None)
    settle = (
        f"about {more} more repeats would settle it if the estimates hold"
        if more is not None
        else "no practical number of repeats settles a difference this small"
    )
    return Verdict(
        "inconclusive",
        f"{decision.metric} at {worst.point}: {_interval(worst)} straddles {threshold:+g} % after {repeats} "
        f"repeats; {settle}",
        True,
        repeats,
        shown,
        more,
    )


def _interval(c: PointComparison) -> str:
    return f"{c.gain_pct:+.1f} % [{c.low_pct:+.1f}, {c.high_pct:+.1f}] ({c.confidence:.1%} interval)"
