"""``servectl campaign export DIR``: a campaign as a ``local-ai-registry/v1`` speed sweep with the rows' statuses.

One row per (side, operating point): the incumbent's rows are ``measured`` (the reference it was decided
against), each variant's carry its campaign status (``accepted-<variant>``, ``rejected-c4-regression``,
``inconclusive``, ...) and reason, the gain over the incumbent with its interval, its repeats, plan hash and
startup time; then one row per operating-point objective (``objectives.json``: ``accepted-<objective>-profile``
with the numbers of the (variant, point) it chose, or ``rejected-<objective>-unmet``), as the registry's recipe
sweeps list their operating points. The numbers of a row are those of the registry's own speed-sweep rows
(:func:`servectl.bench.finding.registry.sweep_row`), taken from the bench artifacts of every repeat of the
point and combined as the median over the repeats (counts summed). A variant never measured (invalid, failed to
start or failed a gate first) still has its rows, numbers null, as the registry's schema allows. The record is
checked against the schema servectl ships (``local-ai-registry-campaign-sweep.schema.json``, written after the
registry's, its ``$comment`` citing the file and commit) before anything is written.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.campaign.readings import Reading, read_readings
from servectl.campaign.schedule import INCUMBENT
from servectl.errors import UsageError
from servectl.files import FileRefused, read_text_bounded
from servectl.paths import DATA_DIR

CAMPAIGN_SWEEP_SCHEMA_FILE = DATA_DIR / "schema" / "local-ai-registry-campaign-sweep.schema.json"
CAMPAIGN_FILE = "campaign.json"

METHODOLOGY = (
    "servectl campaign: every variant of one base profile started on the bench port through swap and measured by "
    "servectl bench at each operating point, the incumbent re-measured in the same run, visits interleaved "
    "(rounds alternate direction, ABBA). A row's numbers are the median over the repeats of the point of the "
    "registry's own row fields (servectl report --format local-ai-registry: decode_tok_s at C1 per stream, at C>1 "
    "the round's completion tokens over its wall time); samples and output_tokens_total are summed. gain_pct is "
    "the variant over the incumbent on the campaign's metric (ratio of trimmed geometric means), [low_pct, "
    "high_pct] its interval at the level of the look that decided it (confidence), the statistics named in "
    "source.decision."
)


@dataclass(frozen=True)
class CampaignExport:
    """The record, its JSON text, where it was written (None: the caller prints it), and notes for the reader."""

    document: Mapping[str, Any]
    text: str
    path: Path | None
    notes: tuple[str, ...] = ()


def read_campaign_document(folder: Path) -> dict[str, Any]:
    """``campaign.json`` of the campaign folder ``folder``.

    Raises:
        UsageError: missing, unreadable, or not a campaign record.
    """
    path = folder / CAMPAIGN_FILE
    try:
        data = json.loads(read_text_bounded(path, limit_bytes=64 * 2**20, what="campaign record"))
    except FileNotFoundError:
        raise UsageError(
            f"{path}: not found; give the folder of `servectl campaign run --out` once the campaign has ended"
        ) from None
    except FileRefused as e:
        raise UsageError(f"{path}: {e.reason}") from None
    except ValueError as e:
        raise UsageError(f"{path}: not JSON ({e}); run `servectl campaign resume {folder}` to write it again") from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("servectl.campaign/"):
        raise UsageError(f"{path}: not a servectl campaign record")
    return data


def _median(values: Sequence[Any]) -> Any:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _row_numbers(readings: Sequence[Reading], folder: Path) -> tuple[dict[str, Any], list[str]]:
    """The registry row fields of one (side, point), the median over its repeats; notes on repeats left out."""
    from servectl.bench.finding.registry import point_failure, sweep_row

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for r in readings:
        if r.summary_point is None:
            notes.append(f"{r.variant} {r.point} round {r.round}: no bench artifact; left out of the row")
            continue
        failure = point_failure(r.summary_point)
        if failure is not None:
            notes.append(f"{folder / str(r.artifact)}: {failure}; left out of the row")
            continue
        rows.append(sweep_row(r.summary_point)[0])
    if not rows:
        keys = ("context_tokens", "output_tokens", "prefill_tok_s", "decode_tok_s", "decode_tok_s_per_stream")
        return {**dict.fromkeys(keys), "ttft_ms_p50": None, "peak_vram_gb": None, "samples": None}, notes
    out: dict[str, Any] = {}
    for key in ("prefill_tok_s", "decode_tok_s", "decode_tok_s_per_stream", "ttft_ms_p50", "peak_vram_gb"):
        value = _median([row[key] for row in rows])
        out[key] = None if value is None else round(float(value), 2)
    for key in ("context_tokens", "output_tokens"):
        value = _median([row[key] for row in rows])
        out[key] = None if value is None else round(value)
    out["output_tok_per_min"] = _median([row["output_tok_per_min"] for row in rows])
    out["samples"] = sum(int(row["samples"]) for row in rows)
    out["output_tokens_total"] = sum(int(row["output_tokens_total"]) for row in rows)
    out["prompt_tokens_target"] = int(rows[0]["prompt_tokens_target"])
    return out, notes


def _sides(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The incumbent (status ``measured``) and every variant of the record, in its order."""
    inc = document["incumbent"]
    return [
        {
            "name": INCUMBENT,
            "profile": inc["profile"],
            "status": "measured",
            "reason": "the incumbent, measured in the same campaign",
            "comparisons": [],
            "startup_s": inc.get("startup_s"),
            "provenance": inc.get("provenance") or {},
        },
        *document.get("variants", []),
    ]


def _rows(folder: Path, document: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (side, point), and notes on repeats left out."""
    points = ((document.get("settings") or {}).get("workload") or {}).get("points", [])
    by_side: dict[tuple[str, str], list[Reading]] = {}
    for r in read_readings(folder, document):
        by_side.setdefault((r.variant, r.point), []).append(r)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for side in _sides(document):
        comparisons = {c["point"]: c for c in side.get("comparisons") or []}
        for point in points:
            name = str(point["name"])
            numbers, left_out = _row_numbers(by_side.get((side["name"], name), []), folder)
            notes += left_out
            c = comparisons.get(name, {})
            measured = [r for r in by_side.get((side["name"], name), []) if r.artifact]
            rows.append(
                {
                    "concurrency": int(point.get("concurrency", 1)),
                    **numbers,
                    "status": side["status"],
                    "variant": side["name"],
                    "profile": side["profile"],
                    "point": name,
                    "prefix": point.get("prefix", "cold"),
                    "reason": side.get("reason") or "",
                    "plan_hash": (side.get("provenance") or {}).get("plan_hash"),
                    "startup_s": side.get("startup_s"),
                    "repeats": len(measured),
                    "gain_pct": c.get("gain_pct"),
                    "low_pct": c.get("low_pct"),
                    "high_pct": c.get("high_pct"),
                    "confidence": c.get("confidence"),
                    "artifact": f"bench/{side['name']}" if measured else None,
                }
            )
    return rows, notes


#: The registry fields of a row that an objective's row takes from the (variant, point) it chose.
_NUMBERS = (
    "context_tokens",
    "output_tokens",
    "prefill_tok_s",
    "decode_tok_s",
    "decode_tok_s_per_stream",
    "ttft_ms_p50",
    "peak_vram_gb",
    "samples",
    "output_tok_per_min",
    "output_tokens_total",
    "prompt_tokens_target",
)
OBJECTIVES_FILE = "objectives.json"


def _objective_rows(folder: Path, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per operating-point objective of ``objectives.json`` (the campaign's), with the registry numbers of
    the (variant, point) it chose: ``accepted-<objective>-profile`` at its concurrency, or
    ``rejected-<objective>-unmet`` (no point; numbers null). None when the campaign had no objectives."""
    try:
        data = json.loads(read_text_bounded(folder / OBJECTIVES_FILE, limit_bytes=16 * 2**20, what="objectives"))
    except (FileNotFoundError, FileRefused, ValueError):
        return []
    by_side = {(r["variant"], r["point"]): r for r in rows}
    out: list[dict[str, Any]] = []
    for o in data if isinstance(data, list) else []:
        chosen = by_side.get((o.get("variant"), o.get("point")), {})
        required, extra = _NUMBERS[:8], _NUMBERS[8:]
        row: dict[str, Any] = {key: chosen.get(key) for key in required} | {k: chosen[k] for k in extra if k in chosen}
        row.update(
            concurrency=o.get("concurrency"),
            status=str(o["status"]),
            variant=o.get("variant"),
            point=o.get("point"),
            objective=str(o["name"]),
            objective_kind=o.get("kind"),
            reason=str(o.get("reason") or ""),
            repeats=chosen.get("repeats", 0),
            artifact=chosen.get("artifact"),
        )
        if o.get("profile"):
            row["profile"] = str(o["profile"])
        if o.get("prefix") in ("cold", "warm"):
            row["prefix"] = o["prefix"]
        out.append(row)
    return out


def _decision_line(decision: Mapping[str, Any]) -> str:
    return (
        f"{decision.get('method', 'yuen-log')} on {decision.get('metric', 'decode_tok_s')}, "
        f"{decision.get('sequential', 'alpha-spending')} ({decision.get('spending', 'obrien-fleming')}), "
        f"alpha {decision.get('alpha', 0.025)}, primary {decision.get('primary_point')}, min gain "
        f"{decision.get('min_gain_pct', 0)} %, regression tolerance {decision.get('regression_tolerance_pct', 3)} "
        f"%, repeats {decision.get('min_repeats', 3)}..{decision.get('max_repeats', 8)}"
    )


def campaign_sweep(
    folder: Path, document: Mapping[str, Any], *, recipe_id: str, tool: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The speed-sweep record of the campaign ``document`` (``campaign.json``) in ``folder`` (not yet validated),
    and notes on repeats left out."""
    from servectl.plan.adopt.recipe import RECIPE_SCHEMA

    settings = document.get("settings") or {}
    rows, notes = _rows(folder, document)
    measured_rows = [r for r in rows if r["samples"] is not None]
    rows += _objective_rows(folder, rows)
    inc = document["incumbent"]
    provenance = inc.get("provenance") or {}
    last = max((str(m.get("measured_at", "")) for m in document.get("measurements", [])), default="") or None

    def largest(key: str) -> Any:
        known = [r[key] for r in measured_rows if r.get(key) is not None]
        return max(known) if known else None

    record: dict[str, Any] = {
        "schema_version": RECIPE_SCHEMA,
        "id": f"{recipe_id}-campaign-{document['campaign']}",
        "recipe_id": recipe_id,
        "measured_at": str(document.get("finished_at") or last or ""),
        "accepted_at": None,
        "source": {
            "kind": "servectl-campaign",
            "tool": tool,
            "campaign": str(document["campaign"]),
            "base": str(settings.get("base", inc["profile"])),
            "incumbent": str(inc["profile"]),
            "winner": document.get("winner"),
            "plan_hash": str(provenance.get("plan_hash") or "unknown"),
            "image": provenance.get("image"),
            "image_digest": provenance.get("image_digest"),
            "model_revision": provenance.get("model_revision"),
            "decision": _decision_line(settings.get("decision") or {}),
            "methodology": METHODOLOGY,
        },
        "metrics": {
            "inference_engine_version": provenance.get("image"),
            "concurrency": largest("concurrency"),
            "point_count": len(measured_rows),
            "max_prompt_tokens": largest("prompt_tokens_target"),
            "max_context_tokens": largest("context_tokens"),
            "peak_generation_tps": largest("decode_tok_s"),
            "peak_prompt_tps": largest("prefill_tok_s"),
            "peak_memory_bytes": None,
            "latest_point_at": None,
        },
        "rows": rows,
    }
    return record, tuple(notes)


def schema_problems(record: Mapping[str, Any]) -> list[str]:
    """Where ``record`` breaks the shipped campaign-sweep schema (``/rows/3/status: ...``), one line each."""
    from servectl.bench.finding.registry import schema_problems as problems

    return problems(record, schema_file=CAMPAIGN_SWEEP_SCHEMA_FILE)


def export_campaign(
    folder: Path, *, out: Path | None = None, overwrite: bool = False, recipe_id: str | None = None
) -> CampaignExport:
    """Build the speed sweep of the campaign in ``folder``, validate it, and write it to ``out`` (None: only
    returned).

    Raises:
        UsageError: no campaign record there; the record does not validate; ``out`` exists without
            ``overwrite``. One line each; nothing is written.
    """
    from servectl.version import __version__

    document = read_campaign_document(folder)
    if out is not None and out.exists() and not overwrite:
        raise UsageError(
            f"campaign export --out {out}: the file exists; pass --force to replace it, or pick another file"
        )
    record, notes = campaign_sweep(
        folder,
        document,
        recipe_id=recipe_id or str(document["incumbent"]["profile"]),
        tool=f"servectl {__version__}",
    )
    problems = schema_problems(record)
    if problems:
        raise UsageError(
            "\n".join(
                f"campaign export {folder}: {p} (schema {CAMPAIGN_SWEEP_SCHEMA_FILE.name}); nothing written"
                for p in problems
            )
        )
    text = json.dumps(record, indent=2) + "\n"
    if out is not None:
        from servectl.adapters.state import atomic_write_text

        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
    return CampaignExport(record, text, out, notes)
