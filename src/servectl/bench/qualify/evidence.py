"""Qualification evidence as JSON: ``qualify.json`` in the run's folder (the same folder as bench's is fine).

It carries the same provenance as bench artifacts (profile, plan hash, image digest, model revision; see
:func:`servectl.bench.artifacts.provenance`), the served name, the run id and times, the suite (name, source,
sha256 and its settings), every gate with its verdict, count and cases, the client's own overhead and free
VRAM after the run. ``servectl promote`` reads it back with :func:`read_evidence`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servectl.bench.artifacts import free_vram_document, manifest_run, provenance
from servectl.bench.manifest import write_manifest
from servectl.bench.qualify.model import GateResult, QualifyReport
from servectl.errors import UsageError
from servectl.files import FileRefused, read_text_bounded, write_atomic

#: Version of the evidence layout; bump when a field changes meaning.
QUALIFY_SCHEMA = "servectl.qualify/v1"
EVIDENCE_FILE = "qualify.json"


def gate_document(gate: GateResult) -> dict[str, Any]:
    """One gate: verdict, count, note and every case."""
    return {
        "gate": gate.gate,
        "verdict": gate.verdict,
        "passed": gate.passed,
        "total": gate.total,
        "count": gate.count,
        "note": gate.note,
        "detail": dict(gate.detail),
        "cases": [
            {"case": c.case, "ok": c.ok, "message": c.message, "latency_s": c.latency_s, "detail": dict(c.detail)}
            for c in gate.cases
        ],
    }


def evidence_document(report: QualifyReport) -> dict[str, Any]:
    """The whole evidence of one run."""
    s, loaded, o = report.settings, report.settings.loaded_suite, report.overhead
    return {
        "schema": QUALIFY_SCHEMA,
        "kind": "qualification",
        "run_id": report.run_id,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "provenance": provenance(report.context),
        "server": {"url": s.url, "model": report.model, "max_model_len": report.max_model_len},
        "api_key_env": s.api_key_env,
        "suite": {
            "name": loaded.suite.name,
            "source": loaded.source,
            "sha256": loaded.sha256,
            "settings": loaded.suite.model_dump(mode="json"),
        },
        "passed": report.passed,
        "counts": report.counts,
        "gates": [gate_document(g) for g in report.gates],
        "client": {
            "versions": dict(report.client_versions),
            "requests": o.requests,
            "request_wall_s": o.wall_s,
            "client_cpu_s": o.client_cpu_s,
            "client_cpu_fraction": o.cpu_fraction,
        },
        "free_vram_after": free_vram_document(report.free_vram_after),
    }


def write_evidence(report: QualifyReport, out_dir: Path) -> Path:
    """Write ``qualify.json`` into ``out_dir`` (created), then the folder's ``artifact-manifest.json``; return
    the path of ``qualify.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / EVIDENCE_FILE
    write_atomic(path, (json.dumps(evidence_document(report), indent=2) + "\n").encode("utf-8"))
    write_manifest(out_dir, run=manifest_run("qualify", report.run_id, report.context), written=[path])
    return path


def read_evidence(evidence_dir: Path) -> dict[str, Any]:
    """The qualification evidence in ``evidence_dir``.

    Raises:
        UsageError: no readable ``qualify.json`` there.
    """
    path = evidence_dir / EVIDENCE_FILE
    try:
        data = json.loads(read_text_bounded(path, limit_bytes=64 * 2**20, what="qualification evidence"))
    except FileNotFoundError:
        raise UsageError(
            f"{path}: not found; run `servectl qualify NAME --out {evidence_dir}` (promotion needs qualification)"
        ) from None
    except (OSError, FileRefused, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: unreadable qualification evidence ({e}); re-run `servectl qualify`") from None
    if not isinstance(data, dict) or data.get("kind") != "qualification":
        raise UsageError(f"{path}: not servectl qualification evidence")
    return data
