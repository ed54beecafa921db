"""Bench runs and typed references side by side: decode tok/s (and TTFT) at matched prompt lengths.

:func:`compare_series` is pure: it takes :class:`Series` (read from ``bench --out`` folders and reference CSVs
by :mod:`servectl.bench.compare_inputs`) and returns a :class:`Comparison`, one :class:`CompareRow` per
(matched prompt length, series). Matching rules:

* points match on **actual** prompt tokens (the p50 of a run's point; a reference's typed value) when they are
  within ``tolerance`` (a fraction, 5 % by default) of the row's anchor: the baseline's point where it has one,
  else the first point that opened the row. Nothing is interpolated: a series without a point at a length has
  no row there, and a row without a baseline point has no ratio.
* the baseline (the first run unless named) gives each row its anchor and the denominator of the ratios.
* concurrency: a point goes to the baseline's row of the same concurrency; a series without that level is
  set beside the nearest level the baseline has, and the row says so (not comparable). Unknown concurrency (a
  reference without the column) matches anything and is never flagged.
* not comparable, per row: a different concurrency, max tokens or statistic than the baseline's point, or a
  point (its own or the baseline's) with flagged requests (short completions, broken streams) or skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servectl.bench.model import Stat
from servectl.errors import UsageError

#: Version of the ``bench compare --json`` document; bump when a field changes meaning.
COMPARE_SCHEMA = "servectl.bench.compare/v1"
#: Default matching tolerance: actual prompt tokens within 5 % of the row's anchor.
DEFAULT_TOLERANCE = 0.05
#: The note of a row that has no baseline point to divide by (no ratio, but nothing unfair either).
NO_BASELINE = "no baseline point"

SeriesKind = Literal["run", "reference"]

#: Provenance fields that, when they differ between runs, describe what the comparison is about.
DIFFERENCE_FIELDS: dict[str, str] = {
    "profile": "profile",
    "plan_hash": "plan",
    "image_digest": "image",
    "model": "model",
}


@dataclass(frozen=True)
class SeriesPoint:
    """One prompt length of a series.

    Attributes:
        prompt_tokens: Actual prompt tokens (a run's p50; a reference's typed value); the target when a run's
            point has no measurement.
        decode_tok_s: Decode tok/s per stream (p50, min, max over the good requests); None when unmeasured.
        ttft_s: Time to first token, when known.
        concurrency: Simultaneous streams; None when a reference does not say.
        prompt_tokens_target: A run's target length (None for references).
        flagged_requests: Requests flagged and left out of the point (short completions, broken streams).
        flagged_kinds: Their failure kinds, when the point's artifact names them.
        skipped: Why a run skipped the point (prompt + completion over the served context).
        source: Where the point comes from: a point file name, or ``FILE:LINE`` of a reference.
    """

    prompt_tokens: float
    decode_tok_s: Stat | None
    ttft_s: Stat | None = None
    concurrency: int | None = None
    prompt_tokens_target: int | None = None
    flagged_requests: int = 0
    flagged_kinds: tuple[str, ...] = ()
    skipped: str | None = None
    source: str = ""


@dataclass(frozen=True)
class Series:
    """A run (``bench --out`` folder) or a reference (typed CSV): its points and what it was measured on."""

    label: str
    kind: SeriesKind
    path: Path
    points: tuple[SeriesPoint, ...]
    profile: str | None = None
    plan_hash: str | None = None
    image_digest: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    statistic: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    note: str | None = None  # a reference's ``# source:`` line


@dataclass(frozen=True)
class CompareRow:
    """One series at one matched prompt length.

    Attributes:
        group: Index of the matched length (rows of one group share ``anchor_tokens`` and ``lane``).
        anchor_tokens: The length the group is matched on (the baseline's actual prompt tokens where it has one).
        lane: The baseline concurrency level the group belongs to (None: unknown).
        series: Label of the series.
        point: The series' point.
        decode_ratio: Decode tok/s p50 / the baseline's at this length (None without both).
        ttft_ratio: TTFT p50 / the baseline's (None unless both have a TTFT).
        is_baseline: This row is the baseline's own.
        notes: Why the row is not comparable, or what is missing; empty when it is clean.
        comparable: A ratio exists and nothing in ``notes`` makes it unfair.
    """

    @property
    def unfair(self) -> bool:
        """The row has a reason besides a missing baseline point (another setting, flagged requests)."""
        return any(note != NO_BASELINE for note in self.notes)

    group: int
    anchor_tokens: float
    lane: int | None
    series: str
    point: SeriesPoint
    decode_ratio: float | None
    ttft_ratio: float | None
    is_baseline: bool
    notes: tuple[str, ...] = ()
    comparable: bool = True


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare_series`."""

    series: tuple[Series, ...]
    baseline: str
    tolerance: float
    rows: tuple[CompareRow, ...]
    differences: tuple[tuple[str, tuple[str | None, ...]], ...] = field(default=())

    @property
    def runs(self) -> tuple[Series, ...]:
        """The series that are bench runs (not references)."""
        return tuple(s for s in self.series if s.kind == "run")


@dataclass
class _Group:
    lane: int | None
    anchor: float
    cells: dict[str, SeriesPoint]


def _within(tokens: float, anchor: float, tolerance: float) -> bool:
    return abs(tokens - anchor) <= tolerance * anchor


def _lanes_for(series: Series, base_levels: Sequence[int | None]) -> dict[int | None, int | None]:
    """Map each concurrency level of ``series`` to the baseline level its points are compared with.

    Exact levels first; then an unknown baseline level takes any one level; then the nearest free numeric
    level; a level with none left keeps its own lane (rows without a baseline point).
    """
    levels = sorted({p.concurrency for p in series.points}, key=lambda c: (c is not None, c or 0))
    taken: dict[int | None, int | None] = {}
    for level in levels:
        if level in base_levels or level is None:
            taken[level] = level if level in base_levels else _lowest(base_levels)
    for level in levels:
        if level in taken:
            continue
        used = set(taken.values())
        if None in base_levels and None not in used:
            taken[level] = None
            continue
        free = [b for b in base_levels if b is not None and b not in used]
        taken[level] = min(free, key=lambda b: (abs(b - level), b)) if free and level is not None else level
    return taken


def _lowest(levels: Sequence[int | None]) -> int | None:
    known = [c for c in levels if c is not None]
    return min(known) if known else None


def _pick_baseline(series: Sequence[Series], baseline: str | None) -> Series:
    runs = [s for s in series if s.kind == "run"]
    if baseline is None:
        return runs[0] if runs else series[0]
    for s in series:
        if baseline in (s.label, str(s.path)):
            return s
    names = ", ".join(s.label for s in series)
    raise UsageError(f"--baseline {baseline}: no such run or reference; give one of: {names}")


def _groups(series: Sequence[Series], base: Series, tolerance: float) -> list[_Group]:
    base_levels = sorted({p.concurrency for p in base.points}, key=lambda c: (c is not None, c or 0))
    groups = [_Group(p.concurrency, p.prompt_tokens, {base.label: p}) for p in base.points]
    for s in series:
        if s is base:
            continue
        lanes = _lanes_for(s, base_levels)
        # closest pairs first, so that a point never takes a row a nearer point of the same series fits better
        pairs = sorted(
            (abs(g.anchor - p.prompt_tokens), i, j)
            for i, p in enumerate(s.points)
            for j, g in enumerate(groups)
            if g.lane == lanes[p.concurrency] and _within(p.prompt_tokens, g.anchor, tolerance)
        )
        placed: set[int] = set()
        for _, i, j in pairs:
            if i not in placed and s.label not in groups[j].cells:
                groups[j].cells[s.label] = s.points[i]
                placed.add(i)
        for i, point in sorted(enumerate(s.points), key=lambda item: item[1].prompt_tokens):
            if i not in placed:
                groups.append(_Group(lanes[point.concurrency], point.prompt_tokens, {s.label: point}))
    groups.sort(key=lambda g: (g.lane is not None, g.lane or 0, g.anchor))
    return groups


def _ratio(value: Stat | None, base: Stat | None) -> float | None:
    if value is None or base is None or base.p50 <= 0:
        return None
    return value.p50 / base.p50


def _own_notes(point: SeriesPoint) -> list[str]:
    notes: list[str] = []
    if point.skipped:
        notes.append(f"skipped: {point.skipped}")
    if point.flagged_requests:
        kinds = f" ({', '.join(point.flagged_kinds)})" if point.flagged_kinds else ""
        notes.append(f"{point.flagged_requests} flagged{kinds}")
    if not notes and point.decode_tok_s is None:
        notes.append("no decode measurement")
    return notes


def _mismatches(s: Series, point: SeriesPoint, base: Series, base_point: SeriesPoint) -> list[str]:
    notes: list[str] = []
    c, base_c = point.concurrency, base_point.concurrency
    if c is not None and base_c is not None and c != base_c:
        notes.append(f"C{c} vs C{base_c}")
    if s.max_tokens is not None and base.max_tokens is not None and s.max_tokens != base.max_tokens:
        notes.append(f"{s.max_tokens} vs {base.max_tokens} output tokens")
    if s.statistic is not None and base.statistic is not None and s.statistic != base.statistic:
        notes.append(f"{s.statistic} vs {base.statistic}")
    return notes


def _row(group_index: int, group: _Group, s: Series, base: Series) -> CompareRow:
    point = group.cells[s.label]
    notes = _own_notes(point)
    base_point = group.cells.get(base.label)
    if s is base:
        return CompareRow(
            group=group_index,
            anchor_tokens=group.anchor,
            lane=group.lane,
            series=s.label,
            point=point,
            decode_ratio=1.0 if point.decode_tok_s is not None else None,
            ttft_ratio=1.0 if point.ttft_s is not None else None,
            is_baseline=True,
            notes=tuple(notes),
            comparable=not notes,
        )
    if base_point is None:
        notes.append(NO_BASELINE)
    else:
        notes = _mismatches(s, point, base, base_point) + notes
        if base_point.flagged_requests or base_point.skipped:
            notes.append("baseline point flagged" if base_point.flagged_requests else "baseline point skipped")
    decode_ratio = _ratio(point.decode_tok_s, base_point.decode_tok_s if base_point else None)
    return CompareRow(
        group=group_index,
        anchor_tokens=group.anchor,
        lane=group.lane,
        series=s.label,
        point=point,
        decode_ratio=decode_ratio,
        ttft_ratio=_ratio(point.ttft_s, base_point.ttft_s if base_point else None),
        is_baseline=False,
        notes=tuple(notes),
        comparable=decode_ratio is not None and not notes,
    )


def run_differences(series: Sequence[Series]) -> tuple[tuple[str, tuple[str | None, ...]], ...]:
    """What differs between the runs (profile, plan_hash, image_digest, model): ``(field, value per run)``."""
    runs = [s for s in series if s.kind == "run"]
    out: list[tuple[str, tuple[str | None, ...]]] = []
    for attr in DIFFERENCE_FIELDS:
        values = tuple(getattr(s, attr) for s in runs)
        if len(set(values)) > 1:
            out.append((attr, values))
    return tuple(out)


def compare_series(
    series: Sequence[Series], *, baseline: str | None = None, tolerance: float = DEFAULT_TOLERANCE
) -> Comparison:
    """Match the series' points on actual prompt tokens and rate each against the baseline.

    Args:
        series: Runs and references, each with a unique label; the table follows this order.
        baseline: Label (or path) of the series the ratios divide by; default the first run.
        tolerance: How far (fraction of the anchor length) a point may be from a row's anchor to match it.

    Returns:
        The comparison: one row per (matched length, series that has a point there).

    Raises:
        UsageError: no series, two with one label, an unknown baseline, or a tolerance outside (0, 0.5].
    """
    if not series:
        raise UsageError("bench compare: give at least one RUN folder or --reference file")
    labels = [s.label for s in series]
    duplicated = sorted({label for label in labels if labels.count(label) > 1})
    if duplicated:
        raise UsageError(f"bench compare: {', '.join(duplicated)} given more than once; give each run once")
    if not 0 < tolerance <= 0.5:
        raise UsageError(f"--tolerance {100 * tolerance:g}: give a percentage above 0 and at most 50, e.g. 5")
    base = _pick_baseline(series, baseline)
    ordered = [base, *(s for s in series if s is not base)]
    rows: list[CompareRow] = []
    for index, group in enumerate(_groups(ordered, base, tolerance)):
        rows.extend(_row(index, group, s, base) for s in ordered if s.label in group.cells)
    return Comparison(
        series=tuple(ordered),
        baseline=base.label,
        tolerance=tolerance,
        rows=tuple(rows),
        differences=run_differences(series),
    )


def short_value(attr: str, value: str | None) -> str:
    """A provenance value short enough for a title: hashes and digests cut to 12 characters."""
    if value is None:
        return "-"
    if attr in ("plan_hash", "image_digest"):
        return value.removeprefix("sha256:")[:12]
    return value


def describe_differences(comparison: Comparison) -> str:
    """One line saying what differs between the runs, e.g. ``profile demo vs demo-taper; plan 1a2b.. vs 3c4d..``."""
    runs = comparison.runs
    if len(runs) < 2:
        return runs[0].profile or runs[0].label if runs else "references only"
    if not comparison.differences:
        if all(getattr(s, attr) is None for s in runs for attr in ("profile", "plan_hash", "image_digest")):
            return "runs measured by URL: no profile, plan or image recorded"
        return "same profile, plan, image and model"
    return "; ".join(
        f"{DIFFERENCE_FIELDS[attr]} {' vs '.join(short_value(attr, v) for v in values)}"
        for attr, values in comparison.differences
    )


def _stat_document(stat: Stat | None) -> dict[str, float | int] | None:
    return None if stat is None else {"p50": stat.p50, "min": stat.min, "max": stat.max, "n": stat.n}


def comparison_document(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON for scripts (``bench compare --json``)."""
    return {
        "schema": COMPARE_SCHEMA,
        "baseline": comparison.baseline,
        "tolerance_fraction": comparison.tolerance,
        "matching": "actual prompt tokens within the tolerance of the row's anchor; never interpolated",
        "differences": {name: list(values) for name, values in comparison.differences},
        "series": [
            {
                "label": s.label,
                "kind": s.kind,
                "path": str(s.path),
                "profile": s.profile,
                "plan_hash": s.plan_hash,
                "image_digest": s.image_digest,
                "model": s.model,
                "max_tokens": s.max_tokens,
                "statistic": s.statistic,
                "run_id": s.run_id,
                "started_at": s.started_at,
                "source": s.note,
            }
            for s in comparison.series
        ],
        "rows": [
            {
                "group": r.group,
                "anchor_prompt_tokens": r.anchor_tokens,
                "lane_concurrency": r.lane,
                "series": r.series,
                "baseline": r.is_baseline,
                "prompt_tokens": r.point.prompt_tokens,
                "prompt_tokens_target": r.point.prompt_tokens_target,
                "concurrency": r.point.concurrency,
                "decode_tok_s": _stat_document(r.point.decode_tok_s),
                "ttft_s": _stat_document(r.point.ttft_s),
                "decode_ratio": r.decode_ratio,
                "ttft_ratio": r.ttft_ratio,
                "comparable": r.comparable,
                "notes": list(r.notes),
                "source": r.point.source,
            }
            for r in comparison.rows
        ],
    }
