"""Promotion: a profile becomes `promoted` only on benchmark and qualification evidence that match it exactly.

Evidence is a `servectl bench` output folder (``summary.json`` plus one JSON per point) and a `servectl
qualify` evidence file (``qualify.json``, in the same folder or another). Both must be measured on the
profile's current plan hash, image digest and model revision; the qualification must have run the profile's
suite (same file content) with no failed gate. `promote` writes a
small record next to the profile (``<name>.evidence.json``), points the profile at it (``evidence:``) and sets
``status: promoted``; the profile file is edited in place line by line (comments kept), validated, and
replaced atomically, so a failed promotion never leaves a half-written profile.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.adapters.state import atomic_write_text
from servectl.errors import ProfileError, UsageError
from servectl.files import FileRefused, read_text_bounded
from servectl.plan.resolve import resolve
from servectl.profile.evidence import EVIDENCE_SCHEMA, EvidencePoint, EvidenceRecord, GateCount, load_record
from servectl.profile.loader import MAX_PROFILE_BYTES, LoadedProfile, search_path
from servectl.profile.validate import load_profile_file

if TYPE_CHECKING:
    from servectl.adapters.host import ModelDirInfo

SUMMARY_FILE = "summary.json"


def read_summary(evidence_dir: Path) -> dict[str, Any]:
    """The bench summary in ``evidence_dir``.

    Raises:
        UsageError: the folder has no readable summary.json.
    """
    path = evidence_dir / SUMMARY_FILE
    try:
        data = json.loads(read_text_bounded(path, limit_bytes=64 * 2**20, what="bench summary"))
    except FileNotFoundError:
        raise UsageError(f"{path}: not found; pass the --out folder of `servectl bench`") from None
    except (OSError, FileRefused, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: unreadable bench summary ({e}); re-run `servectl bench`") from None
    if not isinstance(data, dict) or data.get("kind") != "summary":
        raise UsageError(f"{path}: not a servectl bench summary")
    return data


def _provenance_problems(loaded: LoadedProfile, prov: dict[str, Any], *, plan_hash: str, what: str) -> list[str]:
    """Why evidence with provenance ``prov`` was not measured on this profile as it is now (``what``: its kind)."""
    p = loaded.profile
    problems = []
    redo = "benchmark it again" if what == "bench evidence" else "qualify it again"
    if prov.get("profile") != p.name:
        problems.append(f"{what} was measured on profile {prov.get('profile')!r}, not {p.name!r}")
    if prov.get("plan_hash") != plan_hash:
        problems.append(
            f"{what} plan hash {prov.get('plan_hash')} differs from the profile's current plan {plan_hash}: "
            f"the profile changed since the run; {redo}"
        )
    if p.image.digest and prov.get("image_digest") != p.image.digest:
        problems.append(f"{what} image digest {prov.get('image_digest')} is not the pinned {p.image.digest}")
    if p.model.revision and prov.get("model_revision") != p.model.revision:
        problems.append(f"{what} model revision {prov.get('model_revision')} is not the pinned {p.model.revision}")
    return problems


def check_evidence(loaded: LoadedProfile, summary: dict[str, Any], *, plan_hash: str) -> list[str]:
    """Why this bench evidence cannot promote this profile (empty when it can)."""
    p = loaded.profile
    problems = []
    if not p.image.digest:
        problems.append("image.digest: the image is not pinned by digest; pin it before promoting")
    if not p.model.revision:
        problems.append("model.revision: the model is not pinned by revision; pin it before promoting")
    problems += _provenance_problems(
        loaded, summary.get("provenance") or {}, plan_hash=plan_hash, what="bench evidence"
    )
    points = summary.get("points") or []
    good = [pt for pt in points if pt.get("requests_ok") and not pt.get("requests_flagged")]
    if not good:
        problems.append("evidence has no point with every request complete; nothing to promote on")
    return problems


def check_qualification(loaded: LoadedProfile, evidence: dict[str, Any], *, plan_hash: str) -> list[str]:
    """Why this qualification evidence cannot promote this profile (empty when it can)."""
    from servectl.bench.qualify.suite import load_suite, suite_path

    what = "qualification"
    problems = _provenance_problems(loaded, evidence.get("provenance") or {}, plan_hash=plan_hash, what=what)
    suite_file = suite_path(loaded.profile.qualify, relative_to=loaded.file.path.parent)
    expected = load_suite(suite_file)
    ran = evidence.get("suite") or {}
    if ran.get("sha256") != expected.sha256:
        problems.append(
            f"{what} ran suite {ran.get('name')!r} ({ran.get('source')}), not the profile's suite "
            f"{expected.suite.name!r} ({suite_file}) as it is now; run `servectl qualify {loaded.profile.name}`"
        )
    gates = evidence.get("gates") or []
    problems += _suite_gate_problems(expected.suite.gates.model_dump(exclude_none=True), gates, what=what)
    failed = [g for g in gates if g.get("verdict") == "fail"]
    for gate in failed:
        first = next((c.get("message") for c in gate.get("cases") or [] if not c.get("ok")), "") or gate.get("note")
        problems.append(f"{what} gate {gate.get('gate')} failed ({gate.get('count')}): {first}")
    if not any(g.get("verdict") == "pass" for g in gates):
        problems.append(f"{what} has no passed gate; nothing to promote on")
    return problems


#: Gates whose skip means "not measured" (a client not installed, a run that was not routed): never promoted on.
MEASURED_ONLY = frozenset({"clients", "routed"})


def _suite_gate_problems(wanted: dict[str, Any], gates: list[dict[str, Any]], *, what: str) -> list[str]:
    """Every gate of the suite ran; ``clients`` and ``routed`` were not skipped."""
    ran = {str(g.get("gate")): g for g in gates}
    problems = [f"{what} lacks gate {name} of the profile's suite; qualify again" for name in wanted if name not in ran]
    for name in sorted(MEASURED_ONLY & set(wanted) & set(ran)):
        if ran[name].get("verdict") == "skipped":
            problems.append(f"{what} gate {name} was skipped ({ran[name].get('note')}); it must pass to promote")
    return problems


def build_record(
    loaded: LoadedProfile,
    summary: dict[str, Any],
    *,
    plan_hash: str,
    source: Path,
    qualification: dict[str, Any] | None = None,
) -> EvidenceRecord:
    """The evidence record of a checked summary (and checked qualification evidence)."""
    from servectl.bench.qualify.model import GATE_LABELS

    def stat(point: dict[str, Any], key: str, field: str) -> float | None:
        value = (point.get(key) or {}).get(field)
        return float(value) if value is not None else None

    points = tuple(
        EvidencePoint(
            prompt_tokens_target=int(pt["prompt_tokens_target"]),
            prompt_tokens_actual_p50=stat(pt, "prompt_tokens_actual", "p50"),
            concurrency=int(pt["concurrency"]),
            decode_tok_s_p50=stat(pt, "decode_tok_s", "p50"),
            decode_tok_s_min=stat(pt, "decode_tok_s", "min"),
            decode_tok_s_max=stat(pt, "decode_tok_s", "max"),
            ttft_s_p50=stat(pt, "ttft_s", "p50"),
            repeats=int(pt.get("repeats") or 0),
        )
        for pt in summary.get("points") or []
        if pt.get("requests_ok")
    )
    vram = summary.get("free_vram_after")
    return EvidenceRecord(
        schema=EVIDENCE_SCHEMA,
        profile=loaded.profile.name,
        plan_hash=plan_hash,
        image_digest=str(loaded.profile.image.digest),
        model_revision=str(loaded.profile.model.revision),
        run_id=str(summary.get("run_id", "")),
        measured_at=str(summary.get("finished_at", "")),
        source_dir=str(source),
        points=points,
        free_vram_after_mib=tuple(int(c["memory_free_mib"]) for c in vram) if vram else None,
        gates=tuple(
            GateCount(
                gate=str(g["gate"]),
                label=GATE_LABELS.get(str(g["gate"]), str(g["gate"])),
                verdict=str(g["verdict"]),
                passed=int(g["passed"]),
                total=int(g["total"]),
            )
            for g in (qualification or {}).get("gates") or []
        ),
        qualification_run_id=str((qualification or {}).get("run_id", "")),
        qualification_suite=str(((qualification or {}).get("suite") or {}).get("name", "")),
    )


def promote(
    *,
    name: str,
    evidence_dir: Path,
    qualification_dir: Path | None = None,
    environ: Mapping[str, str],
    model_dir: Callable[[str], ModelDirInfo] | None = None,
) -> EvidenceRecord:
    """Promote profile ``name`` on the bench results in ``evidence_dir`` and its qualification evidence.

    Args:
        name: The profile.
        evidence_dir: The ``--out`` folder of `servectl bench`.
        qualification_dir: The ``--out`` folder of `servectl qualify` (default: ``evidence_dir``).
        environ: The environment (default ``os.environ``): the search path, and the state folder the plan
            hash is compiled with (:func:`servectl.plan.resolve.resolve`).
        model_dir: What the host probe tells of a model folder: the pinned revision is checked against it
            (a folder at another revision refuses; one whose revision cannot be told is recorded unverified).

    ``evidence_dir`` may also be a finding folder (`servectl report --out`): it is recounted in full
    (`servectl claims verify`) and its copies of the bench and qualify artifacts are the evidence. A run
    folder has its ``artifact-manifest.json`` checked. Either way, any file changed since it was written
    refuses the promotion.

    Raises:
        UsageError: unreadable or missing evidence. ProfileError: the evidence does not match the profile,
            does not recount, or a gate failed (every reason, one line each).
    """
    from servectl.bench.finding.verify import recount_for_promotion
    from servectl.bench.qualify.evidence import read_evidence

    resolved = resolve(name, environ=environ)
    loaded, plan_hash = resolved.loaded, resolved.plan.plan_hash
    evidence_dir, qualification_dir, problems = recount_for_promotion(evidence_dir, qualification_dir)
    summary = read_summary(evidence_dir)
    qualification = read_evidence(qualification_dir)
    problems += check_evidence(loaded, summary, plan_hash=plan_hash)
    problems += check_qualification(loaded, qualification, plan_hash=plan_hash)
    mounts = resolved.plan.docker.mounts  # the first is the model folder, as preflight reads it
    revision_check, revision_problem = _revision_check(loaded, mounts[0].source if mounts else None, model_dir)
    problems += [revision_problem] if revision_problem else []
    if problems:
        raise ProfileError("\n".join(f"{loaded.file.path}: cannot promote: {p}" for p in problems))
    record = build_record(
        loaded, summary, plan_hash=plan_hash, source=evidence_dir.resolve(), qualification=qualification
    )
    earlier = load_record(loaded)  # figures imported from elsewhere stay, labelled, never as measurements
    record = dataclasses.replace(
        record, imported=earlier.imported if earlier else (), model_revision_check=revision_check
    )
    record_path = loaded.file.path.with_name(f"{name}.evidence.json")
    original = read_text_bounded(loaded.file.path, limit_bytes=MAX_PROFILE_BYTES, what="profile")
    edited = _set_top_level(_set_top_level(original, "status", "promoted"), "evidence", record_path.name)
    _atomic_write(record_path, record.to_json())
    try:
        _atomic_write(loaded.file.path, edited)
        load_profile_file(loaded.file, folders=search_path(environ=environ))  # the edited file must still be valid
    except Exception:
        _atomic_write(loaded.file.path, original)
        record_path.unlink(missing_ok=True)
        raise
    return record


def _revision_check(
    loaded: LoadedProfile, folder: str | None, model_dir: Callable[[str], ModelDirInfo] | None
) -> tuple[str, str | None]:
    """``(what the record says of the pinned revision, why it refuses or None)``, as preflight's
    ``model.revision`` check reads the folder."""
    from servectl.adapters.host import revision_matches

    pinned = loaded.profile.model.revision
    if not pinned:
        return "", None  # check_evidence refuses an unpinned model
    if model_dir is None or not folder:
        return "unverified: no model folder was looked at", None
    info = model_dir(folder)
    if not info.exists:
        return f"unverified: {folder} is not on this host", None
    actual = info.hf_snapshot_revision or info.local_dir_revision
    if actual is None:
        return f"unverified: cannot tell the revision of {folder} (not a Hugging Face snapshot)", None
    if revision_matches(pinned, actual, info.hf_refs):
        return f"verified ({actual[:12]} in {folder})", None
    return "", (
        f"model.revision: {folder} is {actual[:12]}, the profile pins {pinned[:12]}; "
        "serve the pinned revision or re-pin and measure again"
    )


_TOP_KEY = re.compile(r"^(?P<key>[A-Za-z_][\w-]*):(?P<rest>.*)$")


def _set_top_level(text: str, key: str, value: str) -> str:
    """Set a top-level scalar key in YAML text, keeping every other line (and comments) as written."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = _TOP_KEY.match(line.rstrip("\n"))
        if match and match.group("key") == key:
            comment = ""
            if "#" in match.group("rest"):
                comment = "  #" + match.group("rest").split("#", 1)[1].rstrip()
            lines[i] = f"{key}: {value}{comment}\n"
            return "".join(lines)
    insert_at = next(
        (
            i + 1
            for i, line in enumerate(lines)
            if (m := _TOP_KEY.match(line.rstrip("\n"))) and m.group("key") == "name"
        ),
        len(lines),
    )
    lines.insert(insert_at, f"{key}: {value}\n")
    return "".join(lines)


def _atomic_write(path: Path, content: str) -> None:
    """Replace ``path`` atomically, keeping the permissions of a file that exists."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    atomic_write_text(path, content, mode=mode)
