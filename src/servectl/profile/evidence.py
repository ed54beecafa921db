"""The evidence record a promoted profile points to (``<name>.evidence.json``), read for listing and `show`.

`servectl promote` (``servectl.bench.promote``) writes the record; this module only reads it. Whether the
evidence is stale needs the profile's current plan hash, which the plan layer computes and passes in.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from servectl.files import FileRefused, read_text_bounded
from servectl.profile.loader import LoadedProfile

EVIDENCE_SCHEMA = "servectl.evidence/v1"
STALE_MARK = "[stale: plan changed]"


@dataclass(frozen=True)
class EvidencePoint:
    prompt_tokens_target: int
    prompt_tokens_actual_p50: float | None
    concurrency: int
    decode_tok_s_p50: float | None
    decode_tok_s_min: float | None
    decode_tok_s_max: float | None
    ttft_s_p50: float | None
    repeats: int


@dataclass(frozen=True)
class GateCount:
    """One qualification gate in the record: ``needle 2/2`` (label, passed, total) and its verdict."""

    gate: str
    label: str
    verdict: str
    passed: int
    total: int


@dataclass(frozen=True)
class ImportedFigure:
    """A number servectl did not measure (e.g. a published finding's), kept with its source.

    Shown as ``imported`` by `profiles` and `show`; never counted as servectl's own evidence by `promote`.
    """

    claim: str  # what it is: "decode tok/s"
    value: float
    unit: str
    text: str  # as published: "112.07"
    conditions: str  # "2,969 prompt tokens; C1; p50 of three"
    source: str  # where it was published (URL)
    source_title: str = ""


@dataclass(frozen=True)
class EvidenceRecord:
    """What `promote` writes next to the profile."""

    schema: str
    profile: str
    plan_hash: str
    image_digest: str
    model_revision: str
    run_id: str
    measured_at: str
    source_dir: str
    points: tuple[EvidencePoint, ...]
    free_vram_after_mib: tuple[int, ...] | None
    # qualification (`servectl qualify`); empty in records written before promotion required it
    gates: tuple[GateCount, ...] = ()
    qualification_run_id: str = ""
    qualification_suite: str = ""
    # figures from elsewhere (never measured by servectl; a record may hold only these)
    imported: tuple[ImportedFigure, ...] = ()
    # what promotion could tell of the pinned revision in the model folder: "verified (...)" or
    # "unverified: <why>" (empty in records written before promotion looked)
    model_revision_check: str = ""

    @property
    def measured(self) -> bool:
        """Whether servectl measured anything in this record (an imported-only record did not)."""
        return bool(self.run_id and self.points)

    @property
    def gate_counts(self) -> str:
        """``tools 20/20, needle 2/2, endurance 60/60`` (skipped gates left out)."""
        return ", ".join(f"{g.label} {g.passed}/{g.total}" for g in self.gates if g.verdict != "skipped")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


#: An evidence record is a few KiB; a larger file (or a FIFO, a folder) is not one.
EVIDENCE_LIMIT_BYTES = 16 * 2**20


def load_record(loaded: LoadedProfile) -> EvidenceRecord | None:
    """The evidence record a profile points to, if any (None when missing or unreadable)."""
    ref = loaded.profile.evidence
    if not ref:
        return None
    path = Path(ref) if os.path.isabs(ref) else loaded.file.path.parent / ref
    try:
        data = json.loads(read_text_bounded(path, limit_bytes=EVIDENCE_LIMIT_BYTES, what="evidence record"))
        data["points"] = tuple(EvidencePoint(**pt) for pt in data["points"])
        vram = data.get("free_vram_after_mib")
        data["free_vram_after_mib"] = tuple(vram) if vram else None
        data["gates"] = tuple(GateCount(**g) for g in data.get("gates") or ())
        data["imported"] = tuple(ImportedFigure(**f) for f in data.get("imported") or ())
        return EvidenceRecord(**data)
    except (OSError, FileRefused, ValueError, KeyError, TypeError):
        return None


def tok_s(value: float) -> str:
    """A speed at two decimals, rounded down: a headline never shows more than was measured (112.079 -> 112.07)."""
    return f"{math.floor(value * 100 + 1e-9) / 100:.2f}"


def headline(record: EvidenceRecord, *, current_plan_hash: str | None) -> str | None:
    """E.g. ``112.07 @ 2,969 · 99.79 @ 304,491 tok/s (C1, p50); tools 20/20, needle 2/2``.

    Marked stale unless measured on the current plan; a record of imported figures only reads
    ``imported: 112.07 · 99.79 tok/s; tools 20/20`` (see :func:`imported_headline`).

    Args:
        record: the profile's evidence.
        current_plan_hash: the plan hash the profile compiles to now (None when it does not compile).
    """
    c1 = [pt for pt in record.points if pt.concurrency == 1 and pt.decode_tok_s_p50 is not None]
    chosen = c1 or [pt for pt in record.points if pt.decode_tok_s_p50 is not None]
    parts = [
        f"{tok_s(pt.decode_tok_s_p50 or 0.0)} @ {int(pt.prompt_tokens_actual_p50 or pt.prompt_tokens_target):,}"
        for pt in sorted(chosen, key=lambda pt: pt.prompt_tokens_target)
    ]
    if not parts:
        return imported_headline(record)
    text = " · ".join(parts) + f" tok/s (C{chosen[0].concurrency}, p50)"
    if record.gate_counts:
        text += f"; {record.gate_counts}"
    return text if current_plan_hash == record.plan_hash else f"{text} {STALE_MARK}"


def imported_headline(record: EvidenceRecord) -> str | None:
    """``imported: 112.07 · 99.79 tok/s; tools 20/20, endurance 60/60`` (None without imported figures)."""
    speeds = [f.text for f in record.imported if f.unit == "tok/s"]
    counts = [f"{f.claim.split()[0]} {f.text}" for f in record.imported if "/" in f.text]
    parts = ([" · ".join(speeds) + " tok/s"] if speeds else []) + ([", ".join(counts)] if counts else [])
    return "imported: " + "; ".join(parts) if parts else None


def evidence_summary_lines(loaded: LoadedProfile, *, current_plan_hash: str | None) -> list[str]:
    """Lines for `servectl show` (see :func:`headline` for ``current_plan_hash``)."""
    record = load_record(loaded)
    if loaded.profile.evidence and record is None:
        return [f"# evidence: {loaded.profile.evidence} is missing or unreadable"]
    if record is None:
        return []
    if not record.measured:
        lines = [f"# evidence: {loaded.profile.evidence}: no servectl measurement (imported figures only)"]
    else:
        lines = [f"# evidence: {loaded.profile.evidence} (run {record.run_id}, {record.measured_at})"]
    for pt in record.points:
        actual = f"{int(pt.prompt_tokens_actual_p50):,}" if pt.prompt_tokens_actual_p50 else "?"
        lines.append(
            f"#   C{pt.concurrency} {pt.prompt_tokens_target:,} target / {actual} actual: "
            f"{tok_s(pt.decode_tok_s_p50)} decode tok/s p50 (min {tok_s(pt.decode_tok_s_min)}, "
            f"max {tok_s(pt.decode_tok_s_max)})"
            if pt.decode_tok_s_p50 is not None and pt.decode_tok_s_min is not None and pt.decode_tok_s_max is not None
            else f"#   C{pt.concurrency} {pt.prompt_tokens_target:,}: no decode measurement"
        )
    if record.gates:
        lines.append(
            f"#   qualification: {record.gate_counts} (run {record.qualification_run_id}, "
            f"suite {record.qualification_suite})"
        )
    if record.free_vram_after_mib:
        lines.append("#   free VRAM after: " + ", ".join(f"{m:,} MiB" for m in record.free_vram_after_mib))
    for fig in record.imported:
        lines.append(f"#   imported (not measured by servectl): {fig.text} {fig.claim} ({fig.conditions})")
    for source in dict.fromkeys((f.source_title, f.source) for f in record.imported):
        lines.append(f"#   imported from: {source[0] or 'an outside source'} <{source[1]}>")
    head = headline(record, current_plan_hash=current_plan_hash)
    if record.measured and head and head.endswith(STALE_MARK):
        lines.append("#   STALE: the profile's plan changed since this evidence was measured")
    return lines
