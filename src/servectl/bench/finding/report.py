"""`servectl report NAME --evidence DIR`: a finding folder whose every number is a claim computed from
copies of the raw artifacts it carries.

Layout of a finding::

    README.md                  generated from claims.json (render.render_readme)
    claims.json                the ledger: every claim, current and superseded, and the artifact list
    artifact-manifest.json     SHA-256 and size of every artifact (README.md and claims.json are checked
                               by re-rendering and recounting instead)
    artifacts/e1/profile.json  the resolved profile; artifacts/e1/bench/..., artifacts/e1/qualify/...
    editions/1/README.md ...   the README and ledger an earlier edition published

A second report into the same folder is a correction: its artifacts go to a new ``artifacts/e<N>/``, the
earlier README and ledger are kept under ``editions/<N-1>/``, and every claim whose value or text changed
is kept in the ledger as ``superseded`` next to its new revision. Nothing already written is overwritten
except the current ``README.md``, ``claims.json`` and the manifest.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.bench.finding.build import FindingSources, build_claims
from servectl.bench.finding.ledger import LEDGER_FILE, LEDGER_SCHEMA, ref, same_value
from servectl.bench.finding.publish import FindingLimits, check_bundle, redact_artifact
from servectl.bench.finding.render import render_readme
from servectl.bench.finding.verify import README_FILE, read_ledger, verify_finding
from servectl.bench.manifest import MANIFEST_FILE, RunEntry, check_manifest, write_manifest
from servectl.errors import UsageError
from servectl.files import FileRefused, backup_copy, read_bounded, write_atomic
from servectl.redact import Publication

EDITIONS_DIR = "editions"


@dataclass(frozen=True)
class ReportResult:
    """A written finding: its folder, ledger, edition and the claims a correction superseded."""

    folder: Path
    ledger: Mapping[str, Any]
    edition: int
    superseded: tuple[str, ...] = ()


def _source_files(evidence_dir: Path, qualification_dir: Path | None) -> dict[str, Path]:
    """The raw artifacts to copy: ``bench/<file>`` and ``qualify/<file>`` -> where they are now."""
    from servectl.bench.promote import read_summary

    summary = read_summary(evidence_dir)
    files = {"bench/summary.json": evidence_dir / "summary.json"}
    for point in summary.get("points") or []:
        name = point.get("file")
        if name and (evidence_dir / name).is_file():
            files[f"bench/{name}"] = evidence_dir / name
    files["bench/" + MANIFEST_FILE] = evidence_dir / MANIFEST_FILE
    if qualification_dir is not None:
        from servectl.bench.qualify.evidence import EVIDENCE_FILE, read_evidence

        read_evidence(qualification_dir)
        files["qualify/" + EVIDENCE_FILE] = qualification_dir / EVIDENCE_FILE
        files["qualify/" + MANIFEST_FILE] = qualification_dir / MANIFEST_FILE
    return files


def _check_sources(evidence_dir: Path, qualification_dir: Path | None) -> None:
    folders = [evidence_dir] + ([qualification_dir] if qualification_dir and qualification_dir != evidence_dir else [])
    problems = [p for folder in folders for p in check_manifest(folder)]
    if problems:
        raise UsageError("\n".join(f"report: {p}; measure again rather than edit evidence" for p in problems))


def _check_provenance(loaded: Any, files: Mapping[str, Path], environ: Mapping[str, str]) -> None:
    """Refuse evidence of another profile, or of this profile before it changed: the finding's facts come
    from the profile as it is now and would not describe what was measured."""
    from servectl.plan.resolve import plan_for

    plan_hash = plan_for(loaded, environ=environ).plan_hash
    problems = []
    for rel in ("bench/summary.json", "qualify/qualify.json"):
        if rel not in files:
            continue
        prov = json.loads(read_bounded(files[rel], limit_bytes=64 * 2**20)).get("provenance") or {}
        if prov.get("profile") != loaded.profile.name:
            problems.append(
                f"report: {files[rel]}: measured on profile {prov.get('profile')!r}, not {loaded.profile.name!r}"
            )
        elif prov.get("plan_hash") != plan_hash:
            problems.append(
                f"report: {files[rel]}: measured on plan {prov.get('plan_hash')}, but {loaded.profile.name} "
                f"compiles to {plan_hash} now; measure it again (the finding's facts would not describe the run)"
            )
    if problems:
        raise UsageError("\n".join(problems))


def _edition(out: Path) -> tuple[int, dict[str, Any] | None]:
    """This report's edition number and the ledger it corrects (None for a new finding)."""
    if (out / LEDGER_FILE).is_file():
        old = read_ledger(out)
        return int(old.get("edition", 1)) + 1, old
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"report --out {out}: the folder is not empty and holds no finding; pick a new folder")
    return 1, None


def _merge(new: Sequence[dict[str, Any]], old: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The new ledger's claims: unchanged claims keep their revision; changed ones supersede the old."""
    if old is None:
        return list(new), []
    previous = [dict(c) for c in old.get("claims") or []]
    current_old = {c["id"]: c for c in previous if c.get("status", "current") == "current"}
    merged: list[dict[str, Any]] = []
    superseded: list[str] = []
    for claim in new:
        before = current_old.pop(claim["id"], None)
        if (
            before is not None
            and same_value(before.get("value"), claim["value"])
            and before.get("text") == claim["text"]
        ):
            claim = {**claim, "revision": before.get("revision", 1)}
            previous.remove(before)
        elif before is not None:
            claim = {**claim, "revision": int(before.get("revision", 1)) + 1}
            before.update(status="superseded", superseded_by=ref(claim))
            superseded.append(ref(before))
        merged.append(claim)
    for withdrawn in current_old.values():
        withdrawn.update(status="superseded", superseded_by=None)
        superseded.append(ref(withdrawn))
    return merged + [c for c in previous if c.get("status") == "superseded"], superseded


def _imported_claims(loaded: Any) -> list[dict[str, Any]]:
    """Figures the profile's evidence record imports from elsewhere, as imported claims."""
    from servectl.profile.evidence import load_record

    record = load_record(loaded)
    return [
        {
            "id": f"imported.{i + 1}",
            "revision": 1,
            "status": "current",
            "origin": "imported",
            "label": f"{fig.claim} ({fig.conditions})",
            "unit": fig.unit,
            "value": fig.value,
            "text": fig.text,
            "source": {"title": fig.source_title, "url": fig.source},
        }
        for i, fig in enumerate(record.imported if record else ())
    ]


def _read_source(path: Path, limits: FindingLimits) -> bytes:
    try:
        # the per-file limit is checked on the redacted text (check_bundle); no file can exceed the bundle
        return read_bounded(path, limit_bytes=max(limits.max_file_bytes, limits.max_bundle_bytes), what="artifact")
    except (FileNotFoundError, FileRefused) as e:
        reason = e.reason if isinstance(e, FileRefused) else "not found"
        raise UsageError(f"report: {path}: {reason} (limits: --max-file-mib, --max-bundle-mib)") from None


def _documents(
    loaded: Any, files: Mapping[str, Path], prefix: str, publication: Publication, limits: FindingLimits
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Redacted texts of the artifacts (and the resolved profile) by finding path; their ledger entries."""
    texts: dict[str, str] = {}
    entries: list[dict[str, Any]] = []
    profile = json.dumps(loaded.profile.model_dump(mode="json"), indent=2) + "\n"
    sources = {f"{prefix}/profile.json": (profile.encode("utf-8"), "profile (resolved)")}
    sources |= {f"{prefix}/{rel}": (_read_source(path, limits), rel) for rel, path in files.items()}
    for path, (raw, origin) in sources.items():
        redacted = redact_artifact(raw, publication)
        texts[path] = redacted.text
        entries.append(
            {
                "path": path,
                "sha256": hashlib.sha256(redacted.text.encode("utf-8")).hexdigest(),
                "size_bytes": len(redacted.text.encode("utf-8")),
                "from": origin,
                "source_sha256": hashlib.sha256(raw).hexdigest(),
                "redactions": redacted.replacements,
            }
        )
    return texts, entries


def _write_new(out: Path, texts: Mapping[str, str]) -> None:
    for rel, text in texts.items():
        path = out / rel
        if path.exists():
            raise UsageError(f"report: {path} exists; a finding never overwrites an artifact")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode("utf-8"))


#: The README and ledger of an edition are text servectl wrote; a bound keeps a planted giant out of the copy.
_EDITION_FILE_LIMIT = 64 * 2**20


def _keep_edition(out: Path, edition: int) -> None:
    """Move the README and ledger of the edition being corrected to ``editions/<N>/`` (new files)."""
    keep = out / EDITIONS_DIR / str(edition)
    if keep.exists():
        raise UsageError(f"report: {keep} exists; a finding never overwrites an earlier edition")
    keep.mkdir(parents=True)
    for name in (README_FILE, LEDGER_FILE):
        if (out / name).is_file():
            backup_copy(out / name, keep / name, limit_bytes=_EDITION_FILE_LIMIT)


def gate_labels(claims: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The short name of every gate the claims mention, as this servectl writes it."""
    from servectl.bench.qualify.model import GATE_LABELS

    gates = dict.fromkeys(str(c["id"]).split(".")[1] for c in claims if str(c["id"]).startswith("gate."))
    return {g: GATE_LABELS.get(g, g) for g in gates}


def default_out(name: str, environ: Mapping[str, str]) -> Path:
    """``STATE/findings/NAME``: a later report of the same profile corrects the earlier one."""
    from servectl.paths import state_dir

    return state_dir(environ) / "findings" / name


def write_report(
    *,
    name: str,
    evidence_dir: Path,
    qualification_dir: Path | None = None,
    out_dir: Path | None = None,
    publication: Publication | None = None,
    limits: FindingLimits | None = None,
    environ: Mapping[str, str],
) -> ReportResult:
    """Write (or correct) the finding of profile ``name`` from its bench and qualification evidence.

    Args:
        name: The profile the evidence was measured on.
        evidence_dir: The ``--out`` folder of `servectl bench`.
        qualification_dir: The ``--out`` folder of `servectl qualify` (default: ``evidence_dir`` when it
            holds a ``qualify.json``).
        out_dir: The finding folder (default: :func:`default_out`); one holding a finding gets a correction.
        publication: What redaction takes out (default: this host's names, user, home and secrets).
        limits: Per-file and per-bundle size limits (default: :class:`FindingLimits`).
        environ: Environment for the state folder and the secrets to redact.

    Raises:
        UsageError: unreadable evidence, evidence changed since its manifest was written or measured on another
            profile or plan, an output folder
            that is not a finding, a file or bundle over its size limit, or something private that survived.
    """
    from servectl.profile.loader import search_path
    from servectl.profile.validate import load_profile

    env = environ
    loaded = load_profile(name, folders=search_path(environ=env))
    if qualification_dir is None and (evidence_dir / "qualify.json").is_file():
        qualification_dir = evidence_dir
    files = _source_files(evidence_dir, qualification_dir)
    _check_sources(evidence_dir, qualification_dir)
    _check_provenance(loaded, files, env)
    out = out_dir or default_out(name, env)
    edition, old = _edition(out)
    prefix = f"artifacts/e{edition}"
    pub = publication if publication is not None else Publication.of_this_host(env)
    limits = limits or FindingLimits()
    texts, entries = _documents(loaded, files, prefix, pub, limits)
    docs = {path: json.loads(text) for path, text in texts.items()}
    sources = FindingSources(
        docs=docs,
        profile=f"{prefix}/profile.json",
        summary=f"{prefix}/bench/summary.json",
        points=[p for p in docs if p.startswith(f"{prefix}/bench/c")],
        qualification=f"{prefix}/qualify/qualify.json" if qualification_dir else None,
        bench_manifest=f"{prefix}/bench/{MANIFEST_FILE}",
    )
    claims, superseded = _merge([*build_claims(sources), *_imported_claims(loaded)], old)
    ledger = {
        "schema": LEDGER_SCHEMA,
        "kind": "finding",
        "profile": name,
        "edition": edition,
        "written_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "artifacts": [*(old or {}).get("artifacts", []), *entries],
        "gate_labels": gate_labels(claims),  # the text renders the same under a later servectl's names
        "claims": claims,
    }
    readme = render_readme(ledger)
    existing = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.exists() else 0
    check_bundle({**texts, README_FILE: readme}, limits=limits, existing_bytes=existing, publication=pub)
    out.mkdir(parents=True, exist_ok=True)
    if old is not None:
        _keep_edition(out, edition - 1)
    _write_new(out, texts)
    write_atomic(out / LEDGER_FILE, (json.dumps(ledger, indent=2) + "\n").encode("utf-8"))
    write_atomic(out / README_FILE, readme.encode("utf-8"))
    run = RunEntry(command="report", run_id=f"report-e{edition}", provenance={"profile": name})
    write_manifest(out, run=run, written=[out / p for p in texts], exclude=(README_FILE, LEDGER_FILE))
    result = verify_finding(out)
    if not result.ok:  # the finding must recount as written; anything else is a servectl bug
        raise UsageError("\n".join(f"report: {out}: {p}" for p in result.problems))
    return ReportResult(folder=out, ledger=ledger, edition=edition, superseded=tuple(superseded))
