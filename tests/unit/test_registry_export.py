"""servectl report --format local-ai-registry: a promoted profile's sweep as a schema-checked registry record."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from bench_fakes import FakeOpenAIServer, ScriptedClock
from finding_fixtures import PROFILE, context, qualify_folder

from servectl.adapters.gpu import MIB
from servectl.bench.artifacts import write_artifacts
from servectl.bench.finding.registry import (
    SWEEP_SCHEMA_FILE,
    SweepSource,
    check_document,
    export_registry,
    sweep_document,
)
from servectl.bench.promote import promote
from servectl.bench.runner import run_bench
from servectl.bench.settings import BenchSettings
from servectl.errors import UsageError
from servectl.testing.fakes import FakeGpuInventory, make_device

GIB = 2**30
USED_MIB = {0: 30_000, 1: 12_000}  # what the fake cards hold beyond the idle driver's share


def bench_run(folder: Path, *, cards: bool = True) -> Path:
    """Profile ``f``'s bench run: 2,048 and 4,096 tokens at C1 and C2, three repeats, peak VRAM read when
    ``cards``."""
    inventory = FakeGpuInventory.of(*(make_device(i, extra_used_mib=m) for i, m in USED_MIB.items()))
    ctx = context((2101, 2200))
    if cards:
        ctx = dataclasses.replace(ctx, used_vram=lambda: list(inventory.snapshot().devices))
    fake = FakeOpenAIServer(clock=ScriptedClock(), rate_tok_s=112.5, chunk_tokens=2)
    assert fake.clock is not None
    settings = BenchSettings(
        url="http://127.0.0.1:8180", prompt_tokens=(2048, 4096), concurrency=(1, 2), repeats=3, max_tokens=40
    )
    report = run_bench(settings=settings, context=ctx, transport=fake.transport(), clock=fake.clock)
    write_artifacts(report, folder)
    return folder


@pytest.fixture
def promoted(tmp_path: Path, write_profile: Callable[[str, str], Path]) -> Path:
    """Profile ``f`` promoted on a bench run with peak VRAM; returns its bench folder."""
    write_profile("f", PROFILE)
    bench = bench_run(tmp_path / "bench")
    promote(name="f", evidence_dir=bench, qualification_dir=qualify_folder(tmp_path / "qualify"), environ=os.environ)
    return bench


def summary_points(bench: Path) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = json.loads((bench / "summary.json").read_text())["points"]
    return points


def test_a_promoted_profile_exports_one_row_per_point_valid_against_the_shipped_schema(promoted: Path) -> None:
    result = export_registry(name="f", environ=os.environ)
    doc = result.document
    jsonschema.Draft202012Validator(json.loads(SWEEP_SCHEMA_FILE.read_text())).validate(doc)
    assert result.path is None and json.loads(result.text) == doc and result.notes == () and result.omitted == ()
    assert (doc["schema_version"], doc["id"], doc["recipe_id"], doc["accepted_at"]) == (
        "local-ai-registry/v1",
        "f-sweep",
        "f",
        None,
    )
    source = doc["source"]
    assert source["promoted"] is True and source["profile"] == "f" and source["image_digest"] == "sha256:" + "c" * 64
    assert source["run_id"] == json.loads((promoted / "summary.json").read_text())["run_id"]
    assert (
        source["qualification"].startswith("tools 20/20, needle 2/2")
        and "C1 = median per-stream" in (source["methodology"])
    )
    points = summary_points(promoted)
    assert [(r["prompt_tokens_target"], r["concurrency"]) for r in doc["rows"]] == [
        (p["prompt_tokens_target"], p["concurrency"]) for p in points
    ]
    assert sorted({r["concurrency"] for r in doc["rows"]}) == [1, 2] and len(doc["rows"]) == 4
    for row, point in zip(doc["rows"], points, strict=True):
        assert row["samples"] == point["requests_ok"] == 3 * point["concurrency"]
        assert row["context_tokens"] == round(point["prompt_tokens_actual"]["p50"])
        assert abs(row["context_tokens"] - point["prompt_tokens_target"]) <= 64
        assert row["output_tokens"] == 40 and row["output_tokens_total"] == 40 * row["samples"]
        assert row["ttft_ms_p50"] == round(point["ttft_s"]["p50"] * 1000, 1)
        assert row["prefill_tok_s"] == round(point["prefill_tok_s"]["p50"], 1)
        assert row["decode_tok_s_per_stream"] == round(point["decode_tok_s"]["p50"], 2)
        aggregate = point["decode_tok_s"] if point["concurrency"] == 1 else point["round_output_tok_s"]
        assert row["decode_tok_s"] == round(aggregate["p50"], 2)
        assert row["peak_vram_gb_per_card"] == [
            round(c["peak_used_bytes"] / GIB, 2) for c in point["peak_vram"]["cards"]
        ]
        summed = sum(c["peak_used_bytes"] for c in point["peak_vram"]["cards"])
        assert row["peak_vram_gb"] == round(summed / GIB, 2) and summed >= sum(USED_MIB.values()) * MIB
        assert row["status"] == "measured" and row["artifact"] == point["file"]
    metrics = doc["metrics"]
    assert metrics["point_count"] == 4 and metrics["concurrency"] == 2 and metrics["max_prompt_tokens"] == 4096
    assert metrics["peak_generation_tps"] == max(r["decode_tok_s"] for r in doc["rows"])
    assert int(metrics["peak_memory_bytes"]) == max(
        sum(c["peak_used_bytes"] for c in p["peak_vram"]["cards"]) for p in points
    )


def test_the_record_is_written_to_out_and_an_existing_file_needs_overwrite(promoted: Path, tmp_path: Path) -> None:
    out = tmp_path / "registry" / "f-sweep.json"
    result = export_registry(
        name="f", out=out, recipe_id="glm53-flash-exl3-q4-rtxpro6000-sglang-tp4", environ=os.environ
    )
    assert result.path == out and json.loads(out.read_text()) == result.document
    assert result.document["id"] == "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4-sweep"
    out.write_text("mine\n")
    with pytest.raises(UsageError) as err:
        export_registry(name="f", out=out, environ=os.environ)
    assert str(err.value) == f"report --out {out}: the file exists; pass --force to replace it, or pick another file"
    assert out.read_text() == "mine\n"
    export_registry(name="f", out=out, overwrite=True, environ=os.environ)
    assert json.loads(out.read_text())["recipe_id"] == "f"


def test_an_unpromoted_profile_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    path = write_profile("f", PROFILE)
    bench = bench_run(tmp_path / "bench")
    out = tmp_path / "f-sweep.json"
    with pytest.raises(UsageError) as err:
        export_registry(name="f", evidence_dir=bench, out=out, environ=os.environ)
    assert str(err.value) == (
        f"{path}: status: candidate, not promoted; the registry takes measured, qualified profiles only: "
        "`servectl promote f --evidence DIR` first; nothing written"
    )
    assert not out.exists()


def test_without_nvml_peak_vram_is_null_which_the_schema_allows_with_one_note_per_row(
    tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    write_profile("f", PROFILE)
    bench = bench_run(tmp_path / "bench", cards=False)
    promote(name="f", evidence_dir=bench, qualification_dir=qualify_folder(tmp_path / "qualify"), environ=os.environ)
    result = export_registry(name="f", environ=os.environ)
    assert [r["peak_vram_gb"] for r in result.document["rows"]] == [None] * 4
    assert [r["peak_vram_gb_per_card"] for r in result.document["rows"]] == [None] * 4
    assert result.document["metrics"]["peak_memory_bytes"] is None
    assert len(result.notes) == 4 and all(
        "peak VRAM not recorded" in n and "peak_vram_gb is null" in n for n in result.notes
    )
    assert result.notes[0].startswith(str(bench / "c1-p2048-r3.json"))


def test_evidence_changed_since_its_manifest_or_of_another_run_is_refused(
    promoted: Path, tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    other = bench_run(tmp_path / "other")
    with pytest.raises(UsageError, match=r"summary.json: run \S+, but the profile was promoted on run \S+ \(") as err:
        export_registry(name="f", evidence_dir=other, environ=os.environ)
    assert "pass that folder as --evidence" in str(err.value) and len(str(err.value).splitlines()) == 1
    point = promoted / "c1-p2048-r3.json"
    point.write_text(point.read_text().replace('"concurrency": 1', '"concurrency": 3', 1))
    with pytest.raises(UsageError) as err:
        export_registry(name="f", environ=os.environ)
    assert str(err.value).startswith(f"report: evidence recount: {point}: changed since artifact-manifest.json")
    point.unlink()
    with pytest.raises(UsageError, match=r"listed in artifact-manifest\.json but missing"):
        export_registry(name="f", environ=os.environ)


def test_a_v1_summary_without_output_tokens_or_peak_vram_is_refused_naming_the_file(promoted: Path) -> None:
    from servectl.bench.manifest import RunEntry, write_manifest

    summary = promoted / "summary.json"
    doc = json.loads(summary.read_text())
    doc["schema"] = "servectl.bench/v1"
    for point in doc["points"]:
        del point["output_tokens"], point["peak_vram"]
    summary.write_text(json.dumps(doc, indent=2) + "\n")
    write_manifest(promoted, run=RunEntry(command="bench", run_id=doc["run_id"], provenance={}), written=[summary])
    with pytest.raises(UsageError) as err:
        export_registry(name="f", environ=os.environ)
    assert str(err.value) == (
        f"{summary}: schema servectl.bench/v1 records no output tokens or peak VRAM per point; bench the profile "
        "again with this servectl and promote it on that run; nothing written"
    )


def test_a_profile_changed_since_its_promotion_is_refused(promoted: Path, profile_dir: Path) -> None:
    path = profile_dir / "f.yaml"
    path.write_text(path.read_text().replace("context_length: 32768", "context_length: 16384"))
    with pytest.raises(UsageError, match=r"f.yaml: evidence: promoted on plan \S+, but f compiles to \S+ now"):
        export_registry(name="f", environ=os.environ)


def source() -> SweepSource:
    return SweepSource(
        profile="f",
        recipe_id="f",
        plan_hash="p1",
        image="x/sglang:1",
        image_digest="sha256:" + "c" * 64,
        model="org/model-w4",
        model_revision="d" * 40,
        qualification="tools 20/20",
        tool="servectl 0.1.0",
    )


def test_a_point_with_failed_requests_is_refused_naming_it_or_left_out_on_request(promoted: Path) -> None:
    summary = json.loads((promoted / "summary.json").read_text())
    summary["points"][1].update(requests_ok=5, requests_flagged=1)
    summary["points"][2].update(skipped="prompt exceeds the context")
    with pytest.raises(UsageError) as err:
        sweep_document(summary, source=source(), where="ev/summary.json")
    assert str(err.value).splitlines() == [
        "ev/summary.json: points[1] (c2-p2048-r3.json): 1 of 6 requests failed; a registry row is a measurement: "
        "bench it again, or pass --omit-failed to leave it out",
        "ev/summary.json: points[2] (c1-p4096-r3.json): skipped (prompt exceeds the context); a registry row is a "
        "measurement: bench it again, or pass --omit-failed to leave it out",
    ]
    doc, omitted = sweep_document(summary, source=source(), omit_failed=True, where="ev/summary.json")
    assert [r["artifact"] for r in doc["rows"]] == ["c1-p2048-r3.json", "c2-p4096-r3.json"]
    assert [line.split(" (")[0] for line in omitted] == ["ev/summary.json: points[1]", "ev/summary.json: points[2]"]
    check_document(doc, what="")
    for point in summary["points"]:
        point.update(requests_ok=0)
    with pytest.raises(UsageError, match="no point of the run completed every request"):
        sweep_document(summary, source=source(), omit_failed=True)


def test_a_record_the_schema_rejects_is_refused_naming_the_field(promoted: Path) -> None:
    good, _ = sweep_document(json.loads((promoted / "summary.json").read_text()), source=source())
    check_document(good, what="")
    bad = copy.deepcopy(good)
    bad["rows"][0]["samples"] = 0
    bad["metrics"]["peak_memory_bytes"] = "12 GiB"
    del bad["rows"][1]["ttft_ms_p50"]
    with pytest.raises(UsageError) as err:
        check_document(bad, what="")
    lines = str(err.value).splitlines()
    assert len(lines) == 3 and all(
        line.endswith("(schema local-ai-registry-speed-sweep.schema.json); nothing written") for line in lines
    )
    assert lines[0].startswith("report --format local-ai-registry: /metrics/peak_memory_bytes: '12 GiB' does not match")
    assert lines[1].startswith("report --format local-ai-registry: /rows/0/samples: 0 is less than the minimum of 1")
    assert lines[2].startswith("report --format local-ai-registry: /rows/1: 'ttft_ms_p50' is a required property")


def test_the_shipped_schema_cites_the_registry_file_it_follows() -> None:
    schema = json.loads(SWEEP_SCHEMA_FILE.read_text())
    assert re.search(
        r"0xSero/local-ai-registry, data/registry/schema/speed-sweep\.schema\.json at commit "
        r"a908edb82734a1745dd67abe889be68936dda53c",
        schema["$comment"],
    )
    required = schema["properties"]["rows"]["items"]["required"]
    assert required == [
        "concurrency",
        "context_tokens",
        "output_tokens",
        "prefill_tok_s",
        "decode_tok_s",
        "ttft_ms_p50",
        "peak_vram_gb",
        "samples",
        "status",
    ]


def test_cli_prints_the_record_writes_it_with_out_and_refuses_in_one_line(
    promoted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_run import run_cli

    code, stdout, stderr = run_cli(monkeypatch, capsys, "report", "f", "--format", "local-ai-registry")
    assert code == 0 and stderr == ""
    assert json.loads(stdout) == export_registry(name="f", environ=os.environ).document
    out = tmp_path / "f-sweep.json"
    args = ("report", "f", "--format", "local-ai-registry", "--out", str(out), "--recipe-id", "r1")
    code, stdout, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and stdout == f"registry record: {out} (r1-sweep, 4 rows, schema-checked)\n"
    code, stdout, stderr = run_cli(monkeypatch, capsys, *args)
    assert (code, stdout) == (2, "") and stderr == (
        f"error: report --out {out}: the file exists; pass --force to replace it, or pick another file\n"
    )
    assert run_cli(monkeypatch, capsys, *args, "--force")[0] == 0
    code, _, stderr = run_cli(monkeypatch, capsys, "report", "f", "--evidence", str(promoted), "--recipe-id", "r1")
    assert code == 2 and stderr == "error: report f: --recipe-id applies to --format local-ai-registry only\n"
    code, _, stderr = run_cli(monkeypatch, capsys, "report", "f")
    assert (
        code == 2 and stderr == "error: report f: --evidence DIR is required for --format text (the --out of bench)\n"
    )
