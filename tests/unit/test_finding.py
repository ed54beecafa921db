"""servectl report / claims verify: a finding whose every number is a claim recounted from its raw artifacts."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli
from finding_fixtures import bench_folder, evidence, qualify_folder

from servectl.bench.finding.ledger import LEDGER_FILE, artifacts_of
from servectl.bench.finding.publish import FindingLimits
from servectl.bench.finding.render import render_readme, render_short
from servectl.bench.finding.report import ReportResult, write_report
from servectl.bench.finding.verify import verify_finding
from servectl.errors import UsageError
from servectl.profile.loader import search_path
from servectl.redact import Publication

#: The sections of the promotion seed's finding (000_c6e6fc36dd901bef), in its order.
SEED_SECTIONS = [
    "Canonical facts",
    "Headline",
    "Capability results",
    "Caveats",
    "Decision",
    "Not qualified",
    "Artifacts",
    "Claim ledger",
]

#: The counts of the fixture's qualification (finding_fixtures.qualify_folder), in its gate order.
ALL_GATES = "tools 20/20, needle 2/2, endurance 60/60, smoke 1/1, json 6/6, reasoning 2/2, vram 2/2"


@pytest.fixture
def finding(tmp_path: Path, write_profile: Callable[[str, str], Path]) -> ReportResult:
    bench, qualify = evidence(tmp_path, write_profile)
    return write_report(
        name="f",
        evidence_dir=bench,
        qualification_dir=qualify,
        out_dir=tmp_path / "finding",
        publication=Publication(),
        environ=os.environ,
    )


def ledger(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / LEDGER_FILE).read_text())
    return data


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def test_bench_and_qualify_report_and_verify_pass_with_the_seeds_sections(finding: ReportResult) -> None:
    result = verify_finding(finding.folder)
    assert result.ok, result.problems
    assert result.recounted == len(finding.ledger["claims"]) and result.imported == 0
    readme = (finding.folder / "README.md").read_text()
    assert re.findall(r"^## (.+)$", readme, re.M) == SEED_SECTIONS
    assert "- tools 20/20: pass" in readme and "- needle 2/2: pass" in readme and "endurance 60/60" in readme
    assert "The 3,072 MiB/card VRAM reserve is waived" in readme
    assert "2,101 MiB/card after the benchmark and 2,543 MiB/card after qualification" in readme
    assert "- Rollback target: f-old" in readme and "- image/OCR: not run (the suite asks for no image cases)" in readme
    assert "power cap 250 W (lowest card)" in readme and "NVIDIA driver 580.95.05" in readme
    decode = finding.ledger["claims"][[c["id"] for c in finding.ledger["claims"]].index("decode.c1.p4096")]
    assert decode["conditions"] == {
        "prompt_tokens_target": 4096,
        "prompt_tokens_actual": decode["conditions"]["prompt_tokens_actual"],
        "concurrency": 1,
        "statistic": "p50",
        "n": 3,
    }
    assert abs(decode["conditions"]["prompt_tokens_actual"] - 4096) <= 64
    assert decode["compute"]["sources"][0] == {
        "artifact": "artifacts/e1/bench/c1-p4096-r3.json",
        "pointer": "/requests/0/decode_tok_s",
    }
    assert f"{decode['text']} decode tok/s at " in readme
    short = render_short(finding.ledger)
    assert short.startswith("f, 2 x NVIDIA RTX PRO 6000") and "tools 20/20" in short and "\n" not in short.rstrip()


def test_every_number_in_the_text_is_a_claim(finding: ReportResult) -> None:
    """Rendered with claims marked, the prose outside code spans has no digit left: nothing was typed in."""
    for text in (render_readme(finding.ledger, mark=True), render_short(finding.ledger, mark=True)):
        prose = re.sub(r"`[^`]*`|⟦[^⟧]*⟧", "", text)
        assert not re.findall(r".{0,30}\d.{0,30}", prose)
    assert "⟦decode.c1.p4096⟧" in render_readme(finding.ledger, mark=True)


def test_editing_one_number_in_an_artifact_fails_naming_the_claim(finding: ReportResult) -> None:
    qualify = finding.folder / "artifacts/e1/qualify/qualify.json"
    edit_json(qualify, lambda d: d["free_vram_after"][0].update(memory_free_mib=2700))
    problems = verify_finding(finding.folder).problems
    assert [p for p in problems if p.startswith("claim ")] == [
        "claim vram.free_after_qualify (2,543 MiB/card): different value: the artifacts give 2,600, "
        "the ledger says 2,543"
    ]
    assert [p.split(":")[0] for p in problems if not p.startswith("claim ")] == ["artifacts/e1/qualify/qualify.json"]


def test_a_changed_file_fails_even_when_every_value_still_recounts(finding: ReportResult) -> None:
    summary = finding.folder / "artifacts/e1/bench/summary.json"
    summary.write_text(summary.read_text() + " ")
    (problem,) = verify_finding(finding.folder).problems
    assert problem.startswith("artifacts/e1/bench/summary.json: changed since artifact-manifest.json was written; ")
    assert "claims resting on it: fact.profile, fact.model_revision" in problem


def test_deleting_an_artifact_fails_one_line_per_claim_resting_on_it(finding: ReportResult) -> None:
    point = "artifacts/e1/bench/c1-p8192-r3.json"
    (finding.folder / point).unlink()
    problems = verify_finding(finding.folder).problems
    resting = [c["id"] for c in finding.ledger["claims"] if point in artifacts_of(c)]
    assert len(resting) == 6
    assert [p.split(" ")[1] for p in problems] == resting
    assert all(p.endswith(f"cannot recount: artifact {point} is missing") for p in problems)


def test_changing_a_claims_rounding_fails_naming_the_claim(finding: ReportResult) -> None:
    def overstate(data: Any) -> None:
        claim = next(c for c in data["claims"] if c["id"] == "vram.free_after_bench")
        claim["text"], claim["value"] = "2,110", 2101  # "about 2,110": more free VRAM than measured
        ttft = next(c for c in data["claims"] if c["id"] == "ttft.c1.p4096")
        ttft["text"] = "0.01"  # a time to first token below the measured one

    edit_json(finding.folder / LEDGER_FILE, overstate)
    problems = verify_finding(finding.folder).problems
    assert problems[0] == (
        "claim ttft.c1.p4096 (0.01 s): rounding overstates: the text says 0.01, less than the measured "
        f"{next(c for c in finding.ledger['claims'] if c['id'] == 'ttft.c1.p4096')['value']:g}"
    )
    assert problems[1] == (
        "claim vram.free_after_bench (2,110 MiB/card): rounding overstates: the text says 2,110, "
        "more than the measured 2101"
    )
    assert problems[2].startswith("README.md: not the text claims.json generates")


def test_a_hand_edited_readme_fails(finding: ReportResult) -> None:
    readme = finding.folder / "README.md"
    readme.write_text(readme.read_text().replace("tools 20/20", "tools 21/20"))
    assert [p.split(":")[0] for p in verify_finding(finding.folder).problems] == ["README.md"]


def test_a_correction_writes_new_files_and_keeps_the_old_claims_as_superseded(
    finding: ReportResult, tmp_path: Path
) -> None:
    faster = bench_folder(tmp_path / "bench2", rate_tok_s=130.25)
    first = (finding.folder / "README.md").read_text()
    corrected = write_report(
        name="f",
        evidence_dir=faster,
        qualification_dir=tmp_path / "qualify",
        out_dir=finding.folder,
        publication=Publication(),
        environ=os.environ,
    )
    assert corrected.edition == 2 and "decode.c1.p4096#1" in corrected.superseded
    assert (finding.folder / "editions/1/README.md").read_text() == first
    assert (finding.folder / "artifacts/e1/bench/c1-p4096-r3.json").is_file()  # never overwritten
    claims = ledger(finding.folder)["claims"]
    old = next(c for c in claims if c["id"] == "decode.c1.p4096" and c["status"] == "superseded")
    new = next(c for c in claims if c["id"] == "decode.c1.p4096" and c["status"] == "current")
    assert old["superseded_by"] == "decode.c1.p4096#2" and new["revision"] == 2 and new["text"] != old["text"]
    unchanged = next(c for c in claims if c["id"] == "gate.tools.passed")
    assert unchanged["revision"] == 1
    assert verify_finding(finding.folder).ok
    assert "Superseded claims" in (finding.folder / "README.md").read_text()


def test_size_limits_refuse_before_writing_anything(tmp_path: Path, write_profile: Callable[[str, str], Path]) -> None:
    bench, qualify = evidence(tmp_path, write_profile)
    out = tmp_path / "finding"
    with pytest.raises(UsageError) as err:
        write_report(
            name="f",
            evidence_dir=bench,
            qualification_dir=qualify,
            out_dir=out,
            publication=Publication(),
            limits=FindingLimits(max_file_bytes=4000),
            environ=os.environ,
        )
    assert re.search(
        r"report: artifacts/e1/bench/c1-p4096-r3\.json would be 0\.\d MiB, over the per-file limit", str(err.value)
    )
    with pytest.raises(UsageError, match=r"over the per-bundle limit of 0\.0 MiB; raise --max-bundle-mib"):
        write_report(
            name="f",
            evidence_dir=bench,
            qualification_dir=qualify,
            out_dir=out,
            publication=Publication(),
            limits=FindingLimits(max_bundle_bytes=30_000),
            environ=os.environ,
        )
    assert not out.exists()


def test_report_refuses_evidence_changed_since_it_was_written(
    tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    bench, qualify = evidence(tmp_path, write_profile)
    edit_json(bench / "summary.json", lambda d: d.update(run_id="edited"))
    with pytest.raises(UsageError, match=r"summary\.json: changed since artifact-manifest\.json was written"):
        write_report(
            name="f", evidence_dir=bench, qualification_dir=qualify, out_dir=tmp_path / "x", environ=os.environ
        )


def test_a_folder_that_is_not_a_finding_is_never_written_into(
    tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    bench, qualify = evidence(tmp_path, write_profile)
    with pytest.raises(UsageError, match="the folder is not empty and holds no finding"):
        write_report(name="f", evidence_dir=bench, qualification_dir=qualify, out_dir=bench, environ=os.environ)


def test_qualify_in_the_bench_folder_is_found_and_a_failed_gate_is_reported(
    tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    from finding_fixtures import gate

    bench, _ = evidence(tmp_path, write_profile)
    qualify_folder(bench, gates=(gate("tools", 19, 20), gate("coding", 15, 15)))
    result = write_report(
        name="f", evidence_dir=bench, out_dir=tmp_path / "fin", publication=Publication(), environ=os.environ
    )
    readme = (result.folder / "README.md").read_text()
    assert "- not eligible for promotion: tools 19/20 (fail)" in readme and "- coding 15/15: pass" in readme
    assert verify_finding(result.folder).ok


PLANTED = {
    "api key": "sk-live0123456789abcdefABCDEF",
    "bearer token": "tok.4f9a8b7c6d5e",
    "secret from the environment": "s3cr3t-value-xyz",
    "hugging face token": "hf_abcdefghijklmnopqrstuvwxyz012345",
    "hostname": "gpu-box-7",
    "user name": "alice",
    "home path": "/home/alice",
    "another home": "/Users/bob",
    "url host": "evals.internal.example",
}


def test_redaction_leaves_no_planted_secret_hostname_user_or_home_path_in_the_finding(
    tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    from servectl.bench.manifest import RunEntry, write_manifest

    bench, qualify = evidence(tmp_path, write_profile)

    def plant(doc: Any) -> None:
        doc["request_settings"]["api_key"] = PLANTED["api key"]  # as a careless writer would have kept it
        doc["server"]["url"] = f"http://{PLANTED['url host']}:8180"
        doc["warnings"] = [
            f"Authorization: Bearer {PLANTED['bearer token']}",
            f"--api-key={PLANTED['secret from the environment']} and {PLANTED['hugging face token']}",
            f"weights read from {PLANTED['home path']}/models/m by {PLANTED['user name']} on {PLANTED['hostname']}",
            f"a copy in {PLANTED['another home']}/models/m",
        ]

    edit_json(bench / "summary.json", plant)
    write_manifest(bench, run=RunEntry("bench", "planted", {}), written=[bench / "summary.json"])
    publication = Publication(
        secrets=(PLANTED["secret from the environment"],),
        hostnames=(PLANTED["hostname"],),
        users=(PLANTED["user name"],),
        homes=(PLANTED["home path"],),
    )
    result = write_report(
        name="f",
        evidence_dir=bench,
        qualification_dir=qualify,
        out_dir=tmp_path / "pub",
        publication=publication,
        environ=os.environ,
    )
    everything = "\n".join(p.read_text() for p in sorted(result.folder.rglob("*")) if p.is_file())
    survived = [what for what, value in PLANTED.items() if value in everything]
    assert survived == []
    assert "~/models/m by redacted-user on redacted-host" in everything  # the text around stays readable
    assert verify_finding(result.folder).ok  # redaction changed no number a claim rests on


def test_the_bundle_check_refuses_anything_private_that_survives() -> None:
    from servectl.bench.finding.publish import check_bundle

    publication = Publication(hostnames=("gpu-box-7",), users=("alice",))
    with pytest.raises(UsageError) as err:
        check_bundle(
            {"README.md": "measured on gpu-box-7 by alice, key sk-abcdefghijklmnopqrstuvwx"},
            limits=FindingLimits(),
            existing_bytes=0,
            publication=publication,
        )
    assert str(err.value).splitlines() == [
        "report: README.md still carries token sk-abc... after redaction; remove it from the evidence",
        "report: README.md still carries hostname gpu-box-7 after redaction; remove it from the evidence",
        "report: README.md still carries user alice after redaction; remove it from the evidence",
    ]


def test_this_hosts_publication_names_its_hostname_user_home_and_secret_variables() -> None:
    import socket

    publication = Publication.of_this_host({"USER": "carol", "HOME": "/home/carol", "HF_TOKEN": "hf_secretvalue123"})
    assert socket.gethostname() in publication.hostnames or len(socket.gethostname()) < 3
    assert "carol" in publication.users and "hf_secretvalue123" in publication.secrets


def test_promote_recounts_a_finding_and_promotes_on_its_copies(finding: ReportResult, profile_dir: Path) -> None:
    from servectl.bench.promote import promote

    record = promote(name="f", evidence_dir=finding.folder, environ=os.environ)
    assert record.gate_counts == ALL_GATES
    assert record.source_dir.endswith("artifacts/e1/bench")
    assert "status: promoted" in (profile_dir / "f.yaml").read_text()


def test_promote_refuses_a_finding_that_no_longer_recounts(finding: ReportResult, profile_dir: Path) -> None:
    from servectl.bench.promote import promote
    from servectl.errors import ProfileError

    edit_json(
        finding.folder / "artifacts/e1/qualify/qualify.json", lambda d: d["gates"][0]["cases"][3].update(ok=False)
    )
    with pytest.raises(ProfileError) as err:
        promote(name="f", evidence_dir=finding.folder, environ=os.environ)
    lines = str(err.value).splitlines()
    assert any(
        "cannot promote: claims verify: claim gate.tools.passed (20 cases): different value: "
        "the artifacts give 19, the ledger says 20" in line
        for line in lines
    )
    assert "status: candidate" in (profile_dir / "f.yaml").read_text()


def test_promote_refuses_a_run_folder_with_a_file_changed_since_its_manifest(
    tmp_path: Path, write_profile: Callable[[str, str], Path], profile_dir: Path
) -> None:
    from servectl.bench.promote import promote
    from servectl.errors import ProfileError

    bench, qualify = evidence(tmp_path, write_profile)
    edit_json(bench / "summary.json", lambda d: d["points"][0]["decode_tok_s"].update(p50=150.0))
    with pytest.raises(ProfileError, match=r"cannot promote: evidence recount: .*summary\.json: changed since"):
        promote(name="f", evidence_dir=bench, qualification_dir=qualify, environ=os.environ)


IMPORTED = {
    "claim": "decode tok/s",
    "value": 112.07,
    "unit": "tok/s",
    "text": "112.07",
    "conditions": "2,969 prompt tokens; C1; p50 of three",
    "source": "https://example.org/finding/",
    "source_title": "a published finding",
}


def test_imported_figures_stay_labelled_and_never_count_as_servectls_evidence(
    tmp_path: Path, write_profile: Callable[[str, str], Path], profile_dir: Path
) -> None:
    from finding_fixtures import PROFILE

    from servectl.bench.promote import promote
    from servectl.profile.evidence import evidence_summary_lines, headline, load_record
    from servectl.profile.validate import load_profile

    bench, qualify = evidence(tmp_path, write_profile)
    write_profile("f", PROFILE.replace("status: candidate", "status: candidate\nevidence: f.evidence.json"))
    imported_only = {
        "schema": "servectl.evidence/v1",
        "profile": "f",
        "plan_hash": "",
        "image_digest": "",
        "model_revision": "",
        "run_id": "",
        "measured_at": "",
        "source_dir": "",
        "points": [],
        "free_vram_after_mib": None,
        "imported": [IMPORTED],
    }
    (profile_dir / "f.evidence.json").write_text(json.dumps(imported_only))
    loaded = load_profile("f", folders=search_path(environ=os.environ))
    record = load_record(loaded)
    assert record is not None and not record.measured
    assert headline(record, current_plan_hash="x") == "imported: 112.07 tok/s"  # never marked as a measurement
    lines = evidence_summary_lines(loaded, current_plan_hash="x")
    assert lines[0].endswith("no servectl measurement (imported figures only)")
    assert (
        "#   imported (not measured by servectl): 112.07 decode tok/s (2,969 prompt tokens; C1; p50 of three)" in lines
    )

    result = write_report(
        name="f",
        evidence_dir=bench,
        qualification_dir=qualify,
        out_dir=tmp_path / "fin",
        publication=Publication(),
        environ=os.environ,
    )
    imported = [c for c in result.ledger["claims"] if c["origin"] == "imported"]
    assert [(c["text"], c["source"]["url"]) for c in imported] == [("112.07", "https://example.org/finding/")]
    assert "## Imported figures (not measured by servectl)" in (result.folder / "README.md").read_text()
    check = verify_finding(result.folder)
    assert check.ok and check.imported == 1 and check.recounted == len(result.ledger["claims"]) - 1

    promoted = promote(name="f", evidence_dir=bench, qualification_dir=qualify, environ=os.environ)
    assert promoted.measured and promoted.imported == record.imported  # kept, labelled, apart from the points
    assert all(pt.decode_tok_s_p50 != 112.07 for pt in promoted.points)


def test_cli_report_verify_and_short_post(
    tmp_path: Path,
    write_profile: Callable[[str, str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench, qualify = evidence(tmp_path, write_profile)
    out = tmp_path / "finding"
    code, stdout, _ = run_cli(
        monkeypatch, capsys, "report", "f", "--evidence", str(bench), "--qualification", str(qualify), "--out", str(out)
    )
    assert code == 0 and stdout.startswith(f"finding: {out} (edition 1, ")
    code, stdout, _ = run_cli(monkeypatch, capsys, "claims", "verify", str(out))
    assert code == 0 and re.fullmatch(
        r"ok: \d+ claims recounted from the artifacts, 0 imported \(not recounted\)\n", stdout
    )
    code, stdout, _ = run_cli(monkeypatch, capsys, "claims", "verify", str(out), "--format", "short")
    assert code == 0 and stdout.count("\n") == 1 and f"{ALL_GATES}." in stdout
    (out / "artifacts/e1/bench/c1-p4096-r3.json").unlink()
    code, stdout, stderr = run_cli(monkeypatch, capsys, "claims", "verify", str(out), "--format", "short")
    assert code == 1 and stdout == ""  # no post from a finding that does not recount
    assert len(stderr.splitlines()) == 6 and stderr.startswith(
        "error: claim prompt_tokens_target.c1.p4096 (4,096 tokens)"
    )
    code, _, stderr = run_cli(monkeypatch, capsys, "claims", "verify", str(tmp_path))
    assert (
        code == 2
        and stderr == f"error: {tmp_path / 'claims.json'}: not found; pass the --out folder of `servectl report`\n"
    )


def test_the_profiles_headline_never_rounds_a_speed_up() -> None:
    from servectl.profile.evidence import tok_s

    assert [tok_s(v) for v in (112.079, 99.79, 100.0, 0.999)] == ["112.07", "99.79", "100.00", "0.99"]


def test_report_refuses_evidence_of_another_plan(tmp_path: Path, write_profile: Callable[[str, str], Path]) -> None:
    from finding_fixtures import PROFILE

    bench, qualify = evidence(tmp_path, write_profile)
    write_profile("f", PROFILE.replace("context_length: 32768", "context_length: 16384"))  # changed after the run
    with pytest.raises(UsageError) as err:
        write_report(
            name="f", evidence_dir=bench, qualification_dir=qualify, out_dir=tmp_path / "x", environ=os.environ
        )
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and all(
        "measure it again (the finding's facts would not describe the run)" in x for x in lines
    )


def test_a_fifo_in_place_of_an_artifact_is_refused_without_blocking(finding: ReportResult) -> None:
    import os

    point = finding.folder / "artifacts/e1/bench/c1-p8192-r3.json"
    point.unlink()
    os.mkfifo(point)
    problems = verify_finding(finding.folder).problems
    assert len(problems) == 6 and all("a FIFO (named pipe), not a regular file" in p for p in problems)


def test_the_readme_renders_with_the_gate_names_of_the_ledger(finding: ReportResult) -> None:
    """A later servectl that renames a gate's label still renders an earlier finding's text as written."""
    assert finding.ledger["gate_labels"]["long_context"] == "needle"
    renamed = {**finding.ledger, "gate_labels": {**finding.ledger["gate_labels"], "long_context": "haystack"}}
    assert "- haystack 2/2: pass" in render_readme(renamed)
