"""`servectl claims verify DIR`: recount every claim of a finding from its raw artifacts, check every hash.

One line per claim that no longer holds, naming it and why (its artifact is missing, a different value,
rounding that overstates, a condition that disagrees with its own claim); one line per file whose bytes are
not those its manifest recorded (naming the claims resting on it, even when their values still recount);
one line when ``README.md`` is not the text the ledger generates.
Imported claims are not recounted (servectl did not measure them) and are counted apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.bench.finding.ledger import (
    LEDGER_FILE,
    ArtifactMissing,
    PointerMissing,
    artifacts_of,
    current,
    format_value,
    recount,
    ref,
    same_value,
    text_problem,
)
from servectl.bench.finding.render import render_readme
from servectl.bench.manifest import MANIFEST_FILE, read_manifest, sha256_file
from servectl.errors import UsageError
from servectl.files import FileRefused, read_text_bounded

README_FILE = "README.md"
#: No file of a finding is read past this (a finding comes from elsewhere: a FIFO or a huge file is refused).
READ_LIMIT_BYTES = 64 * 2**20


@dataclass(frozen=True)
class VerifyResult:
    """What a recount found: problems (one line each), and how many claims were recounted or imported."""

    folder: Path
    problems: tuple[str, ...]
    recounted: int
    imported: int
    what: str = "finding"  # "campaign": a campaign folder's table (imported: statuses decided before measuring)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_ledger(folder: Path) -> dict[str, Any]:
    """The ledger of the finding in ``folder``.

    Raises:
        UsageError: no readable ``claims.json`` there.
    """
    path = folder / LEDGER_FILE
    try:
        data = json.loads(read_text_bounded(path, limit_bytes=READ_LIMIT_BYTES, what="claim ledger"))
    except FileNotFoundError:
        raise UsageError(f"{path}: not found; pass the --out folder of `servectl report`") from None
    except FileRefused as e:
        raise UsageError(f"{path}: {e.reason}") from None
    except ValueError as e:
        raise UsageError(
            f"{path}: unreadable claim ledger ({e}); write the finding again with `servectl report`"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise UsageError(f"{path}: not a servectl claim ledger")
    return data


def _file_states(folder: Path, manifest: Mapping[str, Any] | None) -> dict[str, str]:
    """Manifest path -> ``ok``, ``changed`` or ``missing``."""
    states = {}
    for entry in (manifest or {}).get("files") or []:
        rel = str(entry.get("path"))
        path = folder / rel
        if not path.is_file():
            states[rel] = "missing"
        elif path.stat().st_size != entry.get("size_bytes") or sha256_file(path) != entry.get("sha256"):
            states[rel] = "changed"
        else:
            states[rel] = "ok"
    return states


class _Loader:
    """Parsed artifacts of a finding, each read once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cache: dict[str, Any] = {}

    def __call__(self, rel: str) -> Any:
        if rel not in self.cache:
            try:
                text = read_text_bounded(self.folder / rel, limit_bytes=READ_LIMIT_BYTES, what="artifact")
                self.cache[rel] = json.loads(text)
            except FileNotFoundError:
                raise ArtifactMissing(rel) from None
            except FileRefused as e:
                raise ArtifactMissing(f"{rel} ({e.reason})") from None
            except ValueError as e:
                raise ArtifactMissing(f"{rel} (not JSON: {e})") from None
        return self.cache[rel]


def claim_problems(
    claim: Mapping[str, Any], *, load: _Loader, states: Mapping[str, str], claims: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Why one measured claim no longer holds (empty when it does)."""
    reasons = [f"{a} is not listed in {MANIFEST_FILE}" for a in artifacts_of(claim) if a not in states]
    try:
        value = recount(claim, load)
    except ArtifactMissing as e:
        return [*reasons, f"cannot recount: artifact {e.args[0]} is missing"]
    except PointerMissing as e:
        return [*reasons, f"cannot recount: {e.args[0]} is not in the artifact"]
    except ValueError as e:
        return [*reasons, f"cannot recount: {e}"]
    if not same_value(value, claim.get("value")):
        reasons.append(
            f"different value: the artifacts give {format_value(value, claim.get('format') or {})}, "
            f"the ledger says {claim.get('text')}"
        )
    elif (problem := text_problem(claim, value)) is not None:
        reasons.append(problem)
    for key, other_id in (claim.get("condition_claims") or {}).items():
        other = claims.get(str(other_id))
        stated = (claim.get("conditions") or {}).get(key)
        if other is None or not same_value(other.get("value"), stated):
            reasons.append(f"condition {key} says {stated} but claim {other_id} says {(other or {}).get('value')}")
    return reasons


def verify_finding(folder: Path) -> VerifyResult:
    """Recount every claim of the finding in ``folder`` and check every hash of its manifest.

    Raises:
        UsageError: the folder has no readable claim ledger.
    """
    ledger = read_ledger(folder)
    manifest = read_manifest(folder)
    problems: list[str] = []
    if manifest is None:
        problems.append(f"{MANIFEST_FILE}: missing or unreadable; no artifact hash can be checked")
    states = _file_states(folder, manifest)
    load = _Loader(folder)
    claims = ledger["claims"]
    now = current(claims)
    recounted = imported = 0
    for claim in claims:
        if claim.get("origin") == "imported":
            imported += 1
            if not (claim.get("source") or {}).get("url") and not (claim.get("source") or {}).get("title"):
                problems.append(f"claim {ref(claim)}: imported without a source")
            continue
        recounted += 1
        reasons = claim_problems(claim, load=load, states=states, claims=now)
        if reasons:
            which = "superseded claim" if claim.get("status") == "superseded" else "claim"
            problems.append(
                f"{which} {claim['id']} ({claim.get('text')} {claim.get('unit', '')}".rstrip()
                + f"): {'; '.join(reasons)}"
            )
    for rel, state in states.items():
        resting = [str(c["id"]) for c in claims if rel in artifacts_of(c)]
        if state == "changed":  # even where every value still recounts: these are not the bytes recorded
            on = f"; claims resting on it: {', '.join(resting)}" if resting else ""
            problems.append(f"{rel}: changed since {MANIFEST_FILE} was written{on}")
        elif state == "missing" and not resting:  # claims resting on a missing file say so themselves
            problems.append(f"{rel}: listed in {MANIFEST_FILE} but missing")
    try:
        text: str | None = read_text_bounded(folder / README_FILE, limit_bytes=READ_LIMIT_BYTES, what="README")
    except (FileNotFoundError, FileRefused):
        text = None
    if text != render_readme(ledger):
        problems.append(
            f"{README_FILE}: {'missing' if text is None else 'not the text claims.json generates (edited by hand?)'}; "
            "write a correction with `servectl report`"
        )
    return VerifyResult(folder=folder, problems=tuple(problems), recounted=recounted, imported=imported)


def recount_for_promotion(evidence_dir: Path, qualification_dir: Path | None) -> tuple[Path, Path, list[str]]:
    """What `promote` recounts before it trusts evidence, and where the bench and qualify artifacts are.

    A finding folder (``claims.json``) is verified in full and its copies of the latest edition's bench and
    qualify artifacts become the evidence; a bench or qualify run folder has its manifest checked.

    Returns:
        (bench folder, qualification folder, problems: one line each).
    """
    if (evidence_dir / LEDGER_FILE).is_file():
        result = verify_finding(evidence_dir)
        edition = int(read_ledger(evidence_dir).get("edition", 1))
        base = evidence_dir / "artifacts" / f"e{edition}"
        return base / "bench", qualification_dir or base / "qualify", [f"claims verify: {p}" for p in result.problems]
    from servectl.bench.manifest import check_manifest

    qualification = qualification_dir or evidence_dir
    folders = dict.fromkeys([evidence_dir, qualification])
    return evidence_dir, qualification, [f"evidence recount: {p}" for f in folders for p in check_manifest(f)]
