"""`servectl report NAME --format local-ai-registry`: a promoted profile's measured sweep as a registry record.

The record is a ``local-ai-registry/v1`` speed sweep (0xSero/local-ai-registry, ``data/registry/speed-sweep``):
one row per (prompt length, concurrency) point of the bench run the profile was promoted on - concurrency,
context tokens, output tokens, prefill and decode tok/s, TTFT p50, peak VRAM, samples, status - and the run's
headline metrics. Every document is checked against the schema shipped in the package
(:data:`SWEEP_SCHEMA_FILE`, servectl's own, written after the registry's published schema; its ``$comment``
cites the file and commit) before anything is written; a record that does not validate is refused.

What a row means (the record's ``source.methodology`` says the same to its readers):

- ``context_tokens``: the median prompt tokens the server counted (``usage.prompt_tokens``).
- ``output_tokens``: completion tokens per request (the good requests' total over their count);
  ``output_tokens_total`` and ``output_tok_per_min`` are the point's totals.
- ``decode_tok_s``: at C1 the median per-stream decode rate (first to last token chunk, TTFT excluded); at
  higher concurrency the median round's completion tokens over its wall time (all streams together, as the
  registry's own concurrent rows count it); ``decode_tok_s_per_stream`` is always the per-stream median.
- ``peak_vram_gb``: the highest used memory of the service's cards while the point ran, summed over the cards,
  in GiB (per card in ``peak_vram_gb_per_card``); null when bench could not read the cards (no NVML).

Only promoted profiles are exported, from the bench run their evidence record names, on the plan they compile
to now; a point with failed requests is refused (``omit_failed`` leaves it out instead).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.errors import UsageError
from servectl.paths import DATA_DIR

#: servectl's schema of the record (package data; its ``$comment`` cites the registry file it follows).
SWEEP_SCHEMA_FILE = DATA_DIR / "schema" / "local-ai-registry-speed-sweep.schema.json"
#: The bench artifact versions whose points carry output tokens and peak VRAM.
_WITH_OUTPUT_AND_VRAM = ("servectl.bench/v2",)
_GIB = 2**30

METHODOLOGY = (
    "servectl bench: OpenAI /v1/chat/completions, streamed with usage in every chunk, fixed-length outputs "
    "(ignore_eos, min_tokens = max_tokens), one warm-up request per point; statistics over the good requests only. "
    "context_tokens = median server-counted prompt tokens; output_tokens = completion tokens per request "
    "(output_tokens_total over samples); TTFT = send to first token chunk; decode_tok_s at C1 = median per-stream "
    "(completion tokens - first chunk's) / (last - first token chunk time), at C>1 = median round's completion "
    "tokens / round wall time (all streams); decode_tok_s_per_stream = median per-stream rate; peak_vram_gb = "
    "highest used memory of the service's cards during the point (NVML, every 0.25 s), summed, GiB; null when the "
    "cards could not be read. Exported from the bench run the profile was promoted on (servectl promote: bench "
    "and qualification evidence of the same plan, image digest and model revision)."
)


@dataclass(frozen=True)
class RegistryExport:
    """A speed-sweep record built (and written, unless to stdout) by :func:`export_registry`.

    Attributes:
        document: the record, valid against :data:`SWEEP_SCHEMA_FILE`.
        text: the record as JSON text (what was written).
        path: the file written, or None when the caller prints ``text``.
        omitted: the point files left out (``omit_failed``) with why, one line each.
        notes: what a reader should know (peak VRAM not recorded), one line each.
    """

    document: Mapping[str, Any]
    text: str
    path: Path | None
    omitted: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


# -- the record (pure) --------------------------------------------------------------------------------------
def _p50(point: Mapping[str, Any], key: str) -> float | None:
    stat = point.get(key)
    value = stat.get("p50") if isinstance(stat, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def point_failure(point: Mapping[str, Any]) -> str | None:
    """Why a summary point cannot be a measured row (None when it can): skipped, or some request failed."""
    if point.get("skipped"):
        return f"skipped ({point['skipped']})"
    total, ok, flagged = (
        int(point.get("requests") or 0),
        int(point.get("requests_ok") or 0),
        point.get("requests_flagged"),
    )
    if ok == 0:
        return f"none of its {total} requests completed"
    if flagged:
        return f"{flagged} of {total} requests failed"
    return None


def _peak(point: Mapping[str, Any]) -> tuple[list[float] | None, int | None]:
    """Peak used memory per card (GiB) and summed over the cards (bytes); None when not read."""
    peak = point.get("peak_vram")
    cards = peak.get("cards") if isinstance(peak, Mapping) else None
    if not cards:
        return None, None
    used = [int(c["peak_used_bytes"]) for c in cards if c.get("peak_used_bytes") is not None]
    if len(used) != len(cards):
        return None, None
    return [round(b / _GIB, 2) for b in used], sum(used)


def sweep_row(point: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The registry row of one measured summary point, and its summed peak VRAM in bytes (None: not read)."""
    concurrency = int(point["concurrency"])
    ok = int(point["requests_ok"])
    total_out = int(point["output_tokens"])
    per_stream = _p50(point, "decode_tok_s")
    decode = per_stream if concurrency == 1 else _p50(point, "round_output_tok_s")
    actual = _p50(point, "prompt_tokens_actual")
    ttft = _p50(point, "ttft_s")
    per_card, summed = _peak(point)
    row = {
        "concurrency": concurrency,
        "context_tokens": None if actual is None else round(actual),
        "output_tokens": round(total_out / ok),
        "prefill_tok_s": _rounded(_p50(point, "prefill_tok_s"), 1),
        "decode_tok_s": _rounded(decode, 2),
        "decode_tok_s_per_stream": _rounded(per_stream, 2),
        "ttft_ms_p50": None if ttft is None else round(ttft * 1000, 1),
        "peak_vram_gb": None if summed is None else round(summed / _GIB, 2),
        "samples": ok,
        "status": "measured",
        "prompt_tokens_target": int(point["prompt_tokens_target"]),
        "output_tokens_total": total_out,
        "output_tok_per_min": _rounded(point.get("output_tok_per_min"), 1),
        "peak_vram_gb_per_card": per_card,
        "artifact": str(point.get("file") or ""),
    }
    return row, summed


def _largest(values: Sequence[float | int | str | None]) -> Any:
    known = [v for v in values if v is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class SweepSource:
    """What the record says about where it came from: the promoted profile and its evidence."""

    profile: str
    recipe_id: str
    plan_hash: str
    image: str
    image_digest: str
    model: str
    model_revision: str
    qualification: str
    tool: str


def sweep_document(
    summary: Mapping[str, Any], *, source: SweepSource, omit_failed: bool = False, where: str = "summary.json"
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The speed-sweep record of a bench summary (not yet validated) and the points left out.

    Args:
        summary: a ``servectl.bench/v2`` summary (``summary.json``).
        source: the promoted profile the summary was measured on.
        omit_failed: leave out points with failed requests instead of refusing them.
        where: the summary's path, for the error lines.

    Raises:
        UsageError: a point with failed requests (without ``omit_failed``), or no measured point; one line each.
    """
    from servectl.plan.adopt.recipe import RECIPE_SCHEMA

    rows: list[dict[str, Any]] = []
    peaks: list[int | None] = []
    problems: list[str] = []
    omitted: list[str] = []
    points = summary.get("points") or []
    for i, point in enumerate(points):
        failure = point_failure(point)
        if failure is not None:
            line = f"{where}: points[{i}] ({point.get('file')}): {failure}"
            if omit_failed:
                omitted.append(line)
            else:
                problems.append(
                    f"{line}; a registry row is a measurement: bench it again, or pass --omit-failed to leave it out"
                )
            continue
        row, peak = sweep_row(point)
        rows.append(row)
        peaks.append(peak)
    if problems:
        raise UsageError("\n".join(problems))
    if not rows:
        raise UsageError(f"{where}: no point of the run completed every request; bench the profile again")
    finished = str(summary.get("finished_at") or "")
    peak = _largest(peaks)
    document: dict[str, Any] = {
        "schema_version": RECIPE_SCHEMA,
        "id": f"{source.recipe_id}-sweep",
        "recipe_id": source.recipe_id,
        "measured_at": finished,
        "accepted_at": None,
        "source": {
            "kind": "servectl",
            "tool": source.tool,
            "profile": source.profile,
            "promoted": True,
            "plan_hash": source.plan_hash,
            "image": source.image,
            "image_digest": source.image_digest,
            "model": source.model,
            "model_revision": source.model_revision,
            "run_id": str(summary.get("run_id") or ""),
            "qualification": source.qualification,
            "methodology": METHODOLOGY,
        },
        "metrics": {
            "inference_engine_version": f"{source.image}@{source.image_digest}",
            "concurrency": _largest([r["concurrency"] for r in rows]),
            "point_count": len(rows),
            "max_prompt_tokens": _largest([r["prompt_tokens_target"] for r in rows]),
            "max_context_tokens": _largest([r["context_tokens"] for r in rows]),
            "peak_generation_tps": _largest([r["decode_tok_s"] for r in rows]),
            "peak_prompt_tps": _largest([r["prefill_tok_s"] for r in rows]),
            "peak_memory_bytes": None if peak is None else str(peak),
            "latest_point_at": _largest([str(p.get("finished_at")) for p in points if p.get("finished_at")]),
        },
        "rows": rows,
    }
    return document, tuple(omitted)


def schema_problems(document: Mapping[str, Any], *, schema_file: Path = SWEEP_SCHEMA_FILE) -> list[str]:
    """Where ``document`` breaks the shipped speed-sweep schema: ``/rows/0/samples: 0 is less than 1``."""
    import jsonschema  # type: ignore[import-untyped]  # no stubs in the CI image; only Draft202012Validator is used

    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    return ["/" + "/".join(str(p) for p in e.absolute_path) + f": {e.message}" for e in errors]


def check_document(document: Mapping[str, Any], *, what: str) -> None:
    """Refuse a record the shipped schema rejects (one line per problem, naming the field).

    Raises:
        UsageError: the record does not validate; nothing should be written.
    """
    problems = schema_problems(document)
    if problems:
        raise UsageError(
            "\n".join(
                f"report --format local-ai-registry: {what}{p} (schema {SWEEP_SCHEMA_FILE.name}); nothing written"
                for p in problems
            )
        )


# -- the evidence and the file (I/O) ------------------------------------------------------------------------
def _bench_folder(evidence_dir: Path) -> tuple[Path, list[str]]:
    """The bench run folder to read and what is wrong with its files: a run folder has its manifest checked, a
    finding (also when named by its ``artifacts/eN/bench`` copy, as promoting on a finding records) is recounted
    in full."""
    from servectl.bench.finding.ledger import LEDGER_FILE
    from servectl.bench.finding.verify import recount_for_promotion

    finding = evidence_dir.parent.parent.parent
    if evidence_dir.parent.parent.name == "artifacts" and (finding / LEDGER_FILE).is_file():
        evidence_dir = finding
    bench, _, problems = recount_for_promotion(evidence_dir, None)
    return bench, problems


def _promoted(name: str, environ: Mapping[str, str]) -> tuple[Any, Any, str]:
    """The loaded profile, its evidence record and its plan hash now (on the search path and state folder of
    ``environ``), or a one-line refusal."""
    from servectl.plan.resolve import plan_for
    from servectl.profile.evidence import load_record
    from servectl.profile.loader import search_path
    from servectl.profile.validate import load_profile

    loaded = load_profile(name, folders=search_path(environ=environ))
    path = loaded.file.path
    status = loaded.profile.status
    if status != "promoted":
        raise UsageError(
            f"{path}: status: {status}, not promoted; the registry takes measured, qualified profiles only: "
            f"`servectl promote {name} --evidence DIR` first; nothing written"
        )
    record = load_record(loaded)
    if record is None or not record.measured:
        raise UsageError(
            f"{path}: evidence: {loaded.profile.evidence!r} is missing, unreadable or holds no servectl measurement; "
            f"promote the profile again; nothing written"
        )
    plan_hash = plan_for(loaded, environ=environ).plan_hash
    if record.plan_hash != plan_hash:
        raise UsageError(
            f"{path}: evidence: promoted on plan {record.plan_hash}, but {name} compiles to {plan_hash} now; "
            f"bench, qualify and promote it again; nothing written"
        )
    return loaded, record, plan_hash


def _read_summary(bench: Path, *, run_id: str, source_dir: str) -> dict[str, Any]:
    from servectl.bench.promote import read_summary

    summary = read_summary(bench)
    path = bench / "summary.json"
    schema = summary.get("schema")
    if schema not in _WITH_OUTPUT_AND_VRAM:
        raise UsageError(
            f"{path}: schema {schema} records no output tokens or peak VRAM per point; bench the profile again "
            f"with this servectl and promote it on that run; nothing written"
        )
    if summary.get("run_id") != run_id:
        raise UsageError(
            f"{path}: run {summary.get('run_id')}, but the profile was promoted on run {run_id} ({source_dir}); "
            f"pass that folder as --evidence, or promote on this one; nothing written"
        )
    return summary


def export_registry(
    *,
    name: str,
    evidence_dir: Path | None = None,
    out: Path | None = None,
    overwrite: bool = False,
    recipe_id: str | None = None,
    omit_failed: bool = False,
    environ: Mapping[str, str],
) -> RegistryExport:
    """Build the ``local-ai-registry/v1`` speed sweep of promoted profile ``name``, validate it, write it.

    Args:
        name: a promoted profile.
        evidence_dir: the bench run (or finding) it was promoted on; default: the folder its evidence record names.
        out: the JSON file to write; None: write nothing (the caller prints :attr:`RegistryExport.text`).
        overwrite: replace an existing ``out``.
        recipe_id: the registry recipe the sweep belongs to (default: the profile's name, which
            ``adopt --recipe`` takes from the recipe id).
        omit_failed: leave out points with failed requests instead of refusing the export.
        environ: the environment (default ``os.environ``): the search path and the state folder of the plan hash.

    Raises:
        UsageError: the profile is not promoted or changed since; the evidence is missing, changed since it was
            written, of another run or of an older bench format; a point failed; the record does not validate;
            ``out`` exists without ``overwrite``. One line each; nothing is written.
    """
    from servectl.version import __version__

    loaded, record, plan_hash = _promoted(name, environ)
    if out is not None and out.exists() and not overwrite:
        raise UsageError(f"report --out {out}: the file exists; pass --force to replace it, or pick another file")
    bench, problems = _bench_folder(evidence_dir if evidence_dir is not None else Path(record.source_dir))
    if problems:
        raise UsageError("\n".join(f"report: {p}; measure again rather than edit evidence" for p in problems))
    summary = _read_summary(bench, run_id=record.run_id, source_dir=record.source_dir)
    p = loaded.profile
    source = SweepSource(
        profile=name,
        recipe_id=recipe_id or name,
        plan_hash=plan_hash,
        image=str(p.image.ref),
        image_digest=str(record.image_digest),
        model=str(p.model.repo or p.model.served_name or p.model.path),
        model_revision=str(record.model_revision),
        qualification=f"{record.gate_counts} (suite {record.qualification_suite})" if record.gates else "",
        tool=f"servectl {__version__}",
    )
    document, omitted = sweep_document(
        summary, source=source, omit_failed=omit_failed, where=str(bench / "summary.json")
    )
    check_document(document, what="")
    text = json.dumps(document, indent=2) + "\n"
    notes = tuple(
        f"{bench / str(row['artifact'])}: peak VRAM not recorded (the cards could not be read during bench): "
        "peak_vram_gb is null; bench on the GPU host with NVML to fill it"
        for row in document["rows"]
        if row["peak_vram_gb"] is None
    )
    if out is not None:
        from servectl.adapters.state import atomic_write_text

        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
    return RegistryExport(document=document, text=text, path=out, omitted=omitted, notes=notes)
