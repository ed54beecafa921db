"""Benchmark results as JSON artifacts: one file per (prompt length, concurrency) and a summary.

Every file carries the full request settings (the API key only as the name of its environment variable),
the provenance (profile, resolved plan hash, image digest, model revision), the run id and timestamps, so
that a result can be checked against the profile it claims to qualify and goes stale when that changes.

File names: ``c{concurrency}-p{target}-r{repeats}.json`` (e.g. ``c1-p4096-r3.json``) and ``summary.json``.

Schema versions: ``servectl.bench/v2`` adds to every point ``output_tokens`` (completion tokens of the good
requests), ``measured_s`` (wall time of its rounds), ``output_tok_per_min`` and ``peak_vram`` (the highest
used memory per card while it ran, null when the cards could not be read). ``v1`` files, which lack them,
are still read (:data:`READABLE_ARTIFACT_SCHEMAS`); readers derive what they can from their requests.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servectl.bench.manifest import UNKNOWN_HOST, RunEntry, write_manifest
from servectl.bench.model import (
    BenchContext,
    BenchReport,
    CardFreeMemory,
    PointResult,
    RequestMeasurement,
    Stat,
    prompt_tolerance_tokens,
)
from servectl.files import write_atomic

#: Version of the artifact layout; bump when a field changes meaning.
ARTIFACT_SCHEMA = "servectl.bench/v2"
#: The versions this servectl reads: v1 (no output tokens per minute, no peak VRAM) and the current one.
READABLE_ARTIFACT_SCHEMAS: tuple[str, ...] = ("servectl.bench/v1", ARTIFACT_SCHEMA)
SUMMARY_FILE = "summary.json"


def point_file_name(point: PointResult) -> str:
    """``c1-p4096-r3.json`` for concurrency 1, a 4,096-token target and three repeats."""
    return f"c{point.concurrency}-p{point.prompt_tokens_target}-r{point.repeats}.json"


def _stat(stat: Stat | None) -> dict[str, float | int] | None:
    return None if stat is None else {"p50": stat.p50, "min": stat.min, "max": stat.max, "n": stat.n}


def _request(r: RequestMeasurement | None) -> dict[str, Any] | None:
    if r is None:
        return None
    data = dataclasses.asdict(r)
    data["ok"] = r.ok
    return data


def request_settings(report: BenchReport) -> dict[str, Any]:
    """The request as sent (minus prompts), with the API key reduced to the name of its variable."""
    s = report.settings
    return {
        "url": s.url,
        "endpoint": "/v1/chat/completions",
        "model": report.model,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": s.max_tokens,
        "ignore_eos": True if s.fixed_length else None,
        "min_tokens": s.max_tokens if s.fixed_length else None,
        "temperature": s.temperature,
        "extra_body": dict(s.extra_body),
        "api_key_env": s.api_key_env,
        "api_key": "***" if s.api_key is not None else None,
        "timeout_s": s.timeout_s,
        "http": "HTTP/1.1, one client, one connection per stream",
    }


def provenance(context: BenchContext | None) -> dict[str, str | None]:
    """The profile, plan hash and pins a result was measured on (all None for a bare URL)."""
    c = context
    return {
        "profile": c.profile_name if c else None,
        "plan_hash": c.plan_hash if c else None,
        "image_digest": c.image_digest if c else None,
        "model_revision": c.model_revision if c else None,
    }


def _header(report: BenchReport) -> dict[str, Any]:
    s, c = report.settings, report.context
    return {
        "schema": ARTIFACT_SCHEMA,
        "run_id": report.run_id,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "provenance": provenance(c),
        "server": {"url": s.url, "model": report.model, "max_model_len": report.max_model_len},
        "request_settings": request_settings(report),
        "plan": {
            "prompt_tokens_targets": list(s.prompt_tokens),
            "repeats": s.repeats,
            "concurrency": list(s.concurrency),
            "warmup": s.warmup,
            "seed": s.seed,
            **({"shared_prefix": True} if s.shared_prefix else {}),  # a warm-prefix run (cold runs say nothing)
            "prompt_tolerance": "max(64 tokens, 1 % of target)",
        },
        "calibration": dataclasses.asdict(report.calibration),
        "client": dataclasses.asdict(report.client),
    }


def peak_vram_document(point: PointResult) -> dict[str, Any] | None:
    """The peak used memory per card during a point, as the artifacts record it (None: not read)."""
    peak = point.peak_vram
    if peak is None:
        return None
    return {
        "samples": peak.samples,
        "cards": [
            {"index": c.index, "peak_used_bytes": c.peak_used_bytes, "peak_used_mib": c.peak_used_mib}
            for c in peak.cards
        ],
    }


def point_summary(point: PointResult) -> dict[str, Any]:
    """The headline numbers of one point (no per-request list)."""
    return {
        "prompt_tokens_target": point.prompt_tokens_target,
        "prompt_tokens_tolerance": prompt_tolerance_tokens(point.prompt_tokens_target),
        "concurrency": point.concurrency,
        "repeats": point.repeats,
        "prompt_words": point.prompt_words,
        "skipped": point.skipped,
        "requests": len(point.requests),
        "requests_ok": point.ok_count,
        "requests_flagged": len(point.flagged),
        "prompt_tokens_actual": _stat(point.prompt_tokens_actual),
        "prompt_tokens_within_tolerance": point.prompt_tokens_within_tolerance,
        "ttft_s": _stat(point.ttft_s),
        "prefill_tok_s": _stat(point.prefill_tok_s),
        "decode_tok_s": _stat(point.decode_tok_s),
        "round_output_tok_s": _stat(point.round_output_tok_s),
        "accept_length": _stat(point.accept_length),
        "server_accept_length": point.server_accept_length,
        "client_cpu_s": point.client_cpu_s,
        "client_cpu_fraction": point.client_cpu_fraction,
        "client_cpu_ms_per_1000_chunks": point.client_cpu_ms_per_1000_chunks,
        "wall_s": point.wall_s,
        "output_tokens": point.output_tokens,
        "measured_s": point.measured_s,
        "output_tok_per_min": point.output_tok_per_min,
        "peak_vram": peak_vram_document(point),
        "chunks": point.chunks,
        "started_at": point.started_at,
        "finished_at": point.finished_at,
        "warnings": list(point.warnings),
    }


def point_document(report: BenchReport, point: PointResult) -> dict[str, Any]:
    """The full artifact of one point: header, headline numbers, warm-up and every request."""
    doc = _header(report)
    doc["kind"] = "point"
    doc["point"] = point_summary(point)
    doc["warmup"] = _request(point.warmup)
    doc["requests"] = [_request(r) for r in point.requests]
    return doc


def free_vram_document(cards: Sequence[CardFreeMemory] | None) -> list[dict[str, Any]] | None:
    """Free memory per card after a run, as bench's summary and qualify's evidence record it."""
    if cards is None:
        return None
    return [
        {
            "index": c.index,
            "memory_free_bytes": c.memory_free_bytes,
            "memory_free_mib": None if c.memory_free_bytes is None else c.memory_free_bytes // 2**20,
        }
        for c in cards
    ]


def summary_document(report: BenchReport) -> dict[str, Any]:
    """The run's summary: header, headline numbers of every point, free VRAM after the run."""
    doc = _header(report)
    doc["kind"] = "summary"
    doc["points"] = [dict(point_summary(p), file=point_file_name(p)) for p in report.points]
    doc["free_vram_after"] = free_vram_document(report.free_vram_after)
    doc["requests_flagged"] = len(report.flagged_requests)
    doc["warnings"] = list(report.warnings)
    return doc


def manifest_run(command: str, run_id: str, context: BenchContext | None) -> RunEntry:
    """The manifest's record of a bench or qualify run: its provenance and the host facts of its context."""
    host = context.host_facts() if context is not None and context.host_facts is not None else UNKNOWN_HOST
    return RunEntry(command=command, run_id=run_id, provenance=provenance(context), host=host)


def write_artifacts(report: BenchReport, out_dir: Path) -> list[Path]:
    """Write one JSON per point and ``summary.json`` into ``out_dir`` (created), then the folder's
    ``artifact-manifest.json``; return the paths (manifest last)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for point in report.points:
        path = out_dir / point_file_name(point)
        write_atomic(path, (json.dumps(point_document(report, point), indent=2) + "\n").encode("utf-8"))
        written.append(path)
    summary = out_dir / SUMMARY_FILE
    write_atomic(summary, (json.dumps(summary_document(report), indent=2) + "\n").encode("utf-8"))
    written.append(summary)
    run = manifest_run("bench", report.run_id, report.context)
    written.append(write_manifest(out_dir, run=run, written=written))
    return written
