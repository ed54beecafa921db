"""A campaign's measurements read back from its bench artifacts, pure apart from reading files.

Every repeat of a point that ``campaign run`` measured left a bench run folder (``bench/<variant>/r<round>-<point>``,
named in the measurement's ``artifacts``) with its ``summary.json``. :func:`read_readings` reads each into a
:class:`Reading` (per-request decode speed, total output throughput, TTFT, the campaign metric's value as the
decision read it), and :func:`aggregate` folds the repeats of each (variant, point) into one
:class:`PointAggregate` (geometric means, as the decision compares them). The plots, the registry export and the
claim ledger's recount read these, so what they show comes from the artifacts, not from the database alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.bench.artifacts import SUMMARY_FILE
from servectl.files import FileRefused, read_text_bounded

#: No bench summary is read past this (a campaign folder may come from elsewhere).
SUMMARY_LIMIT_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Reading:
    """One repeat of one point of one variant (or the incumbent), as its bench artifacts record it."""

    variant: str
    round: int
    point: str
    concurrency: int
    value: float | None  # the campaign metric, read from the artifact as the decision read it
    decode_tok_s: float | None  # per request: p50 of the requests' decode rates
    output_tok_s: float | None  # total: the point's output tokens per second over its wall time (all streams)
    ttft_s: float | None
    artifact: str | None  # the summary's path, relative to the campaign folder (None: no artifact)
    summary_point: Mapping[str, Any] | None = None
    provenance: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class PointAggregate:
    """A (variant, point)'s repeats together: geometric means of per-request decode speed, total throughput and
    TTFT, and the number of repeats with artifacts."""

    variant: str
    point: str
    concurrency: int
    repeats: int
    decode_tok_s: float | None
    output_tok_s: float | None
    ttft_s: float | None


def _p50(point: Mapping[str, Any], key: str) -> float | None:
    stat = point.get(key)
    value = stat.get("p50") if isinstance(stat, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric_of_summary(point: Mapping[str, Any], metric: str) -> float | None:
    """The campaign metric of a bench summary point, as :func:`servectl.campaign.lab.metric_value` reads it from
    the measured point (the same number: the summary stores the point's floats)."""
    if metric == "output_tok_per_min":
        value = point.get("output_tok_per_min")
        ok = isinstance(value, int | float) and bool(point.get("output_tokens"))
        return float(value) if ok and isinstance(value, int | float) else None
    return _p50(point, metric)


def read_summary(folder: Path, rel: str) -> dict[str, Any] | None:
    """The bench summary in ``folder / rel`` (None: missing, refused or not a bench summary)."""
    try:
        data = json.loads(read_text_bounded(folder / rel, limit_bytes=SUMMARY_LIMIT_BYTES, what="bench summary"))
    except (FileNotFoundError, FileRefused, ValueError, OSError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list) or not data["points"]:
        return None
    return data


def read_readings(folder: Path, document: Mapping[str, Any]) -> list[Reading]:
    """One :class:`Reading` per measurement of the campaign document (``campaign.json``) in ``folder``.

    A measurement whose artifacts are missing is still read (its value from the document; the other fields
    None), so the caller can say which are missing.
    """
    settings = document.get("settings") or {}
    metric = str((settings.get("decision") or {}).get("metric", "decode_tok_s"))
    concurrency = {
        str(p["name"]): int(p.get("concurrency", 1)) for p in (settings.get("workload") or {}).get("points", [])
    }
    readings: list[Reading] = []
    for m in document.get("measurements", []):
        point_name = str(m["point"])
        artifacts = m.get("artifacts")
        rel = f"{artifacts}/{SUMMARY_FILE}" if artifacts else None
        summary = read_summary(folder, rel) if rel else None
        if summary is None:
            readings.append(
                Reading(
                    str(m["variant"]),
                    int(m["round"]),
                    point_name,
                    concurrency.get(point_name, 1),
                    None,
                    None,
                    None,
                    None,
                    None,
                )
            )
            continue
        point = summary["points"][0]
        per_min = point.get("output_tok_per_min")
        readings.append(
            Reading(
                variant=str(m["variant"]),
                round=int(m["round"]),
                point=point_name,
                concurrency=int(point.get("concurrency") or concurrency.get(point_name, 1)),
                value=metric_of_summary(point, metric),
                decode_tok_s=_p50(point, "decode_tok_s"),
                output_tok_s=float(per_min) / 60.0 if isinstance(per_min, int | float) and per_min > 0 else None,
                ttft_s=_p50(point, "ttft_s"),
                artifact=rel,
                summary_point=point,
                provenance=summary.get("provenance") if isinstance(summary.get("provenance"), dict) else None,
            )
        )
    return readings


def geometric_mean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the positive values (None: there are none)."""
    kept = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in kept) / len(kept)) if kept else None


def aggregate(readings: Sequence[Reading]) -> list[PointAggregate]:
    """Each (variant, point)'s repeats together, in the order they first appear."""
    groups: dict[tuple[str, str], list[Reading]] = {}
    for r in readings:
        if r.artifact is not None:
            groups.setdefault((r.variant, r.point), []).append(r)
    return [
        PointAggregate(
            variant=variant,
            point=point,
            concurrency=rs[0].concurrency,
            repeats=len(rs),
            decode_tok_s=geometric_mean(r.decode_tok_s for r in rs),
            output_tok_s=geometric_mean(r.output_tok_s for r in rs),
            ttft_s=geometric_mean(r.ttft_s for r in rs),
        )
        for (variant, point), rs in groups.items()
    ]
