"""Promotion needs bench and qualification evidence measured on the profile's current plan and pins."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.adapters.host import ModelDirInfo
from servectl.bench.manifest import RunEntry, write_manifest
from servectl.bench.model import BenchContext
from servectl.bench.promote import promote
from servectl.bench.qualify import CaseResult, GateResult, QualifySettings, ServiceFacts, load_suite, suite_path
from servectl.bench.qualify.evidence import evidence_document
from servectl.bench.qualify.model import ClientOverhead, QualifyReport
from servectl.errors import ProfileError
from servectl.plan.inventory import evidence_headline, evidence_lines
from servectl.plan.resolve import plan_for
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile

DIGEST = "sha256:" + "c" * 64
REVISION = "d" * 40
PROFILE = f"""# yaml-language-server: $schema=../schema/profile.schema.json
name: q
status: candidate   # bench first
image: {{ref: "x/sglang:1", digest: "{DIGEST}"}}
model: {{path: /models/m, served_name: m, revision: {REVISION}}}
serve: {{port: 8180, role: bench}}
"""


def summary(plan_hash: str, **provenance: str) -> dict[str, object]:
    point = {
        "prompt_tokens_target": 4096,
        "concurrency": 1,
        "repeats": 3,
        "requests_ok": 3,
        "requests_flagged": 0,
        "prompt_tokens_actual": {"p50": 2969, "min": 2969, "max": 2969, "n": 3},
        "decode_tok_s": {"p50": 112.07, "min": 111.0, "max": 113.0, "n": 3},
        "ttft_s": {"p50": 0.5, "min": 0.4, "max": 0.6, "n": 3},
    }
    prov = {
        "profile": "q",
        "plan_hash": plan_hash,
        "image_digest": DIGEST,
        "model_revision": REVISION,
        **provenance,
    }
    return {
        "kind": "summary",
        "run_id": "r1",
        "finished_at": "2026-11-30T12:00:00Z",
        "provenance": prov,
        "points": [point],
        "free_vram_after": [{"index": 0, "memory_free_bytes": 2101 * 2**20, "memory_free_mib": 2101}],
    }


def gate(name: str, passed: int, total: int) -> GateResult:
    cases = [
        CaseResult(f"{name} #{i + 1}", i < passed, "" if i < passed else f"{name} #{i + 1}: broke")
        for i in range(total)
    ]
    return GateResult.of(name, cases)


#: The default suite's gates: three with counts, the others skipped as they legitimately can be.
PASSING = (
    gate("tools", 20, 20),
    gate("long_context", 2, 2),
    gate("endurance", 60, 60),
    *(GateResult(g, "skipped", note="no GPU") for g in ("smoke", "structured", "reasoning", "vram")),
)


def qualification(
    plan_hash: str, gates: tuple[GateResult, ...] = PASSING, suite: str = "default", **prov: str
) -> dict[str, object]:
    """A qualify.json as `servectl qualify` writes it."""
    values = {"profile": "q", "plan_hash": plan_hash, "image_digest": DIGEST, "model_revision": REVISION, **prov}
    context = BenchContext(
        profile_name=values["profile"],
        plan_hash=values["plan_hash"],
        image_digest=values["image_digest"],
        model_revision=values["model_revision"],
    )
    report = QualifyReport(
        settings=QualifySettings(url="http://127.0.0.1:8180", suite=load_suite(suite_path(suite))),
        context=context,
        facts=ServiceFacts(known=True),
        run_id="q1",
        model="m",
        max_model_len=None,
        gates=gates,
        overhead=ClientOverhead(requests=1, wall_s=1.0, client_cpu_s=0.01),
        started_at="t0",
        finished_at="t1",
    )
    return evidence_document(report)


@pytest.fixture
def evidence(tmp_path: Path, write_profile: Callable[[str, str], Path]) -> Callable[..., Path]:
    write_profile("q", PROFILE)

    def make(*, qualify: dict[str, object] | None = None, with_qualify: bool = True, **provenance: str) -> Path:
        folder = tmp_path / "ev"
        folder.mkdir(exist_ok=True)
        plan_hash = plan_for(load_profile("q", folders=search_path(environ=os.environ)), environ=os.environ).plan_hash
        (folder / "summary.json").write_text(json.dumps(summary(provenance.pop("plan_hash", plan_hash), **provenance)))
        if with_qualify:
            (folder / "qualify.json").write_text(json.dumps(qualify or qualification(plan_hash)))
        write_manifest(folder, run=RunEntry("bench", "r1", {}), written=list(folder.iterdir()))
        return folder

    return make


def test_matching_evidence_promotes_keeps_comments_and_records_the_headline(
    evidence: Callable[..., Path], profile_dir: Path
) -> None:
    record = promote(name="q", evidence_dir=evidence(), environ=os.environ)
    text = (profile_dir / "q.yaml").read_text()
    assert "status: promoted  # bench first" in text and "evidence: q.evidence.json" in text
    assert text.startswith("# yaml-language-server")
    loaded = load_profile("q", folders=search_path(environ=os.environ))
    assert loaded.profile.status == "promoted"
    assert record.points[0].decode_tok_s_p50 == 112.07
    assert (
        evidence_headline(loaded, environ=os.environ)
        == "112.07 @ 2,969 tok/s (C1, p50); tools 20/20, needle 2/2, endurance 60/60"
    )
    assert record.qualification_run_id == "q1" and record.qualification_suite == "default"
    assert evidence_lines(loaded, environ=os.environ)[0].startswith("# evidence: q.evidence.json (run ")
    assert "#   qualification: tools 20/20, needle 2/2, endurance 60/60 (run q1, suite default)" in evidence_lines(
        loaded, environ=os.environ
    )
    assert not any("STALE" in line for line in evidence_lines(loaded, environ=os.environ))


@pytest.mark.parametrize(
    ("provenance", "reason"),
    [
        ({"plan_hash": "0" * 16}, "the profile changed since the run"),
        ({"image_digest": "sha256:" + "e" * 64}, "is not the pinned"),
        ({"model_revision": "f" * 40}, "is not the pinned"),
        ({"profile": "other"}, "measured on profile 'other'"),
    ],
)
def test_mismatched_evidence_is_refused_and_the_profile_is_untouched(
    evidence: Callable[..., Path], profile_dir: Path, provenance: dict[str, str], reason: str
) -> None:
    folder = evidence(**provenance)
    before = (profile_dir / "q.yaml").read_text()
    with pytest.raises(ProfileError, match=reason):
        promote(name="q", evidence_dir=folder, environ=os.environ)
    assert (profile_dir / "q.yaml").read_text() == before
    assert not (profile_dir / "q.evidence.json").exists()


def test_changing_the_profile_after_promotion_marks_the_headline_stale(
    evidence: Callable[..., Path], profile_dir: Path
) -> None:
    promote(name="q", evidence_dir=evidence(), environ=os.environ)
    path = profile_dir / "q.yaml"
    path.write_text(path.read_text() + "engine: {context_length: 8192}\n")
    loaded = load_profile("q", folders=search_path(environ=os.environ))
    assert (evidence_headline(loaded, environ=os.environ) or "").endswith("[stale: plan changed]")
    assert (
        evidence_lines(loaded, environ=os.environ)[-1]
        == "#   STALE: the profile's plan changed since this evidence was measured"
    )


def test_promotion_is_refused_without_qualification_evidence(evidence: Callable[..., Path], profile_dir: Path) -> None:
    from servectl.errors import UsageError

    with pytest.raises(UsageError, match=r"qualify.json: not found; run `servectl qualify NAME --out"):
        promote(name="q", evidence_dir=evidence(with_qualify=False), environ=os.environ)
    assert "status: candidate" in (profile_dir / "q.yaml").read_text()


def _plan() -> str:
    return plan_for(load_profile("q", folders=search_path(environ=os.environ)), environ=os.environ).plan_hash


@pytest.mark.parametrize(
    ("make_qualification", "reason"),
    [
        (
            lambda: qualification(_plan(), gates=(gate("tools", 18, 20), gate("endurance", 60, 60))),
            "cannot promote: qualification gate tools failed [(]18/20[)]: tools #19: broke",
        ),
        (lambda: qualification("0" * 16), "qualification plan hash 0000000000000000 differs .* qualify it again"),
        (lambda: qualification(_plan(), model_revision="f" * 40), "qualification model revision f+ is not the pinned"),
        (lambda: qualification(_plan(), gates=(GateResult("vram", "skipped"),)), "qualification has no passed gate"),
    ],
)
def test_promotion_is_refused_on_failed_or_stale_qualification(
    evidence: Callable[..., Path], profile_dir: Path, make_qualification: Callable[[], dict[str, object]], reason: str
) -> None:
    folder = evidence(qualify=make_qualification())
    with pytest.raises(ProfileError, match=reason):
        promote(name="q", evidence_dir=folder, environ=os.environ)
    assert "status: candidate" in (profile_dir / "q.yaml").read_text()
    assert not (profile_dir / "q.evidence.json").exists()


def test_promotion_needs_every_gate_of_the_suite_and_a_measured_clients_and_routed_gate(
    evidence: Callable[..., Path], profile_dir: Path
) -> None:
    suite = profile_dir / "agents.yaml"
    gates = "  tools: {cases: 20}\n  routed: {}\n  coding: {}\n  image: {}\n  clients: {clients: [pi]}\n"
    suite.write_text(f"name: agents\ngates:\n{gates}")
    path = profile_dir / "q.yaml"
    path.write_text(path.read_text() + "qualify: agents.yaml\n")
    skipped_clients = GateResult("clients", "skipped", note="not installed (skipped, never passed): pi")
    document = qualification(
        _plan(), gates=(gate("tools", 20, 20), gate("coding", 16, 16), gate("image", 13, 13), skipped_clients)
    )
    document["suite"] = {**document["suite"], "sha256": load_suite(suite).sha256}  # type: ignore[dict-item]
    with pytest.raises(ProfileError) as err:
        promote(name="q", evidence_dir=evidence(qualify=document), environ=os.environ)
    lines = [line.split("cannot promote: ")[1] for line in err.value.lines()]
    assert lines == [
        "qualification lacks gate routed of the profile's suite; qualify again",
        "qualification gate clients was skipped (not installed (skipped, never passed): pi); it must pass to promote",
    ]
    passing = (gate("tools", 20, 20), gate("routed", 6, 6), gate("coding", 16, 16), gate("image", 13, 13),
               gate("clients", 1, 1))  # fmt: skip
    document = qualification(_plan(), gates=passing)
    document["suite"] = {**document["suite"], "sha256": load_suite(suite).sha256}  # type: ignore[dict-item]
    record = promote(name="q", evidence_dir=evidence(qualify=document), environ=os.environ)
    assert record.gate_counts == "tools 20/20, routed 6/6, coding 16/16, image/OCR 13/13, clients 1/1"


def test_promotion_needs_the_suite_the_profile_names(evidence: Callable[..., Path], profile_dir: Path) -> None:
    suite = profile_dir / "vision.yaml"
    suite.write_text("name: vision\ngates:\n  tools: {cases: 20}\n")
    path = profile_dir / "q.yaml"
    path.write_text(path.read_text() + "qualify: vision.yaml\n")
    folder = evidence()  # the plan does not depend on the suite: same evidence, other suite
    with pytest.raises(ProfileError, match=r"qualification ran suite 'default' .* not the profile's suite 'vision'"):
        promote(name="q", evidence_dir=folder, environ=os.environ)


def test_a_hosts_promote_and_its_listings_compile_the_plan_in_the_hosts_environment(
    tmp_path: Path, write_profile: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ${MODELS} is set in the host's environ only: compiled in the process's environment the plan fails
    from servectl.host import Host

    write_profile("q", PROFILE.replace("path: /models/m", 'path: "${MODELS}/m"'))
    monkeypatch.delenv("MODELS", raising=False)
    environ = {**__import__("os").environ, "MODELS": "/host"}
    with pytest.raises(ProfileError, match="MODELS"):
        plan_for(load_profile("q", folders=search_path(environ=os.environ)), environ=os.environ)
    plan_hash = plan_for(load_profile("q", folders=search_path(environ=os.environ)), environ=environ).plan_hash
    folder = tmp_path / "ev"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary(plan_hash)))
    (folder / "qualify.json").write_text(json.dumps(qualification(plan_hash)))
    write_manifest(folder, run=RunEntry("bench", "r1", {}), written=list(folder.iterdir()))
    with Host(environ=environ) as host:
        host.promote(name="q", evidence_dir=folder)
        [row] = [r for r in host.profiles() if r.name == "q"]
        assert row.headline is not None and "stale" not in row.headline  # the plan in the host's env is unchanged
        assert not [line for line in host.show(name="q").evidence() if "STALE" in line]
        path = tmp_path / "profiles" / "q.yaml"
        path.write_text(path.read_text() + "engine: {context_length: 8192}\n")  # the plan changes
        [row] = [r for r in host.profiles() if r.name == "q"]
        assert (row.headline or "").endswith("[stale: plan changed]")  # compared with the plan in the host's env
        assert host.show(name="q").evidence()[-1].startswith("#   STALE")


def _folder(revision: str | None) -> Callable[[str], ModelDirInfo]:
    def model_dir(path: str) -> ModelDirInfo:
        return ModelDirInfo(path, True, True, True, 1, 1, hf_snapshot_revision=revision)

    return model_dir


def test_promotion_records_whether_the_pinned_revision_was_verified_in_the_model_folder(
    evidence: Callable[..., Path], profile_dir: Path
) -> None:
    """Promotion took a revision preflight could not verify and recorded nothing of it (issue 44)."""
    record = promote(name="q", evidence_dir=evidence(), model_dir=_folder(REVISION), environ=os.environ)
    assert record.model_revision_check == f"verified ({REVISION[:12]} in /models/m)"
    record = promote(name="q", evidence_dir=evidence(), model_dir=_folder(None), environ=os.environ)
    assert (
        record.model_revision_check == "unverified: cannot tell the revision of /models/m (not a Hugging Face snapshot)"
    )
    written = json.loads((profile_dir / "q.evidence.json").read_text())
    assert written["model_revision_check"].startswith("unverified: cannot tell")


def test_a_model_folder_at_another_revision_refuses_the_promotion(
    evidence: Callable[..., Path], profile_dir: Path
) -> None:
    before = (profile_dir / "q.yaml").read_text()
    with pytest.raises(
        ProfileError, match=r"cannot promote: model\.revision: /models/m is ffffffffffff, the profile pins"
    ):
        promote(name="q", evidence_dir=evidence(), model_dir=_folder("f" * 40), environ=os.environ)
    assert (profile_dir / "q.yaml").read_text() == before and not (profile_dir / "q.evidence.json").exists()
