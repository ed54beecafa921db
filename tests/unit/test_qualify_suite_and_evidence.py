"""Suites are schema-checked with one-line errors; gate helpers judge VRAM and targets; evidence carries provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servectl.bench.model import BenchContext, CardFreeMemory
from servectl.bench.qualify import CaseResult, GateResult, gate_counts, load_suite, read_evidence, suite_path
from servectl.bench.qualify.gates.long_context import targets_for
from servectl.bench.qualify.gates.vram import judge
from servectl.bench.qualify.suite import LongContextGate, shipped_suites
from servectl.errors import ProfileError, UsageError


def test_the_shipped_full_suite_has_every_gate_and_the_default_one_the_quick_ones() -> None:
    full = load_suite(suite_path("full")).suite.gates
    assert all(getattr(full, name) is not None for name in type(full).model_fields)
    loaded = load_suite(suite_path(None))
    gates = loaded.suite.gates
    assert {"default", "full"} <= set(shipped_suites())
    assert gates.coding is None  # needs the Docker engine and minutes: full only
    assert all(getattr(gates, name) is not None for name in ("smoke", "structured", "tools", "long_context", "vram"))
    assert gates.tools is not None and gates.tools.cases == 20
    assert gates.endurance is not None and gates.endurance.requests == 60
    assert len(loaded.sha256) == 64


def test_a_suite_with_an_unknown_key_names_file_line_and_the_close_match(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: x\ngates:\n  tools:\n    case: 3\n")
    with pytest.raises(ProfileError) as err:
        load_suite(path)
    assert str(err.value) == f"{path}:4: gates.tools.case: unknown key; did you mean 'cases'?"


def test_a_suite_with_a_bad_value_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: x\ngates:\n  endurance: {requests: 4, window: 3}\n")
    with pytest.raises(ProfileError, match=r"suite.yaml:3: gates.endurance: window 3 needs at least 6 requests"):
        load_suite(path)


def test_an_unknown_suite_reference_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="qualify suite 'nope': no such file and not a shipped suite"):
        suite_path("nope")


def test_long_context_targets_add_the_ceiling_and_skip_what_does_not_fit() -> None:
    spec = LongContextGate(targets=[8192, 32768], context_headroom_tokens=1024, max_tokens=64)
    assert targets_for(spec, 32768) == ([8192, 31680], [32768])
    assert targets_for(spec, None) == ([8192, 32768], [])
    assert targets_for(LongContextGate(targets=[4096], context_headroom_tokens=None), 400_000) == ([4096], [])


def test_vram_passes_above_the_reserve_fails_below_it_and_passes_a_waiver() -> None:
    cards = [CardFreeMemory(0, 4000 * 2**20), CardFreeMemory(1, 2101 * 2**20)]
    strict = judge(cards, reserve_mib=3072, waiver=None)
    assert strict.verdict == "fail" and strict.count == "1/2"
    assert strict.failures[0].message == "vram GPU1: 2,101 MiB free after the run, below the reserve of 3,072 MiB"
    waived = judge(cards, reserve_mib=3072, waiver="model-only pair, nothing else runs here")
    assert waived.verdict == "pass" and "waived" in waived.cases[1].message


def test_gate_counts_read_like_the_promotion_summary() -> None:
    gates = [
        GateResult("tools", "pass", tuple(_ok(20))),
        GateResult("long_context", "pass", tuple(_ok(2))),
        GateResult("vram", "skipped"),
        GateResult("endurance", "fail", tuple(_ok(60)), note="drift"),
    ]
    assert gate_counts(gates) == "tools 20/20, needle 2/2, endurance 60/60 (fail)"


def _ok(n: int) -> list[CaseResult]:
    return [CaseResult(f"c{i}", True) for i in range(n)]


def test_evidence_carries_bench_provenance_and_reads_back(tmp_path: Path) -> None:
    from servectl.bench.qualify.evidence import evidence_document, write_evidence
    from servectl.bench.qualify.model import ClientOverhead, QualifyReport, ServiceFacts
    from servectl.bench.qualify.settings import QualifySettings

    context = BenchContext(
        profile_name="q", plan_hash="ab" * 8, image_digest="sha256:" + "c" * 64, model_revision="d" * 40
    )
    report = QualifyReport(
        settings=QualifySettings(url="http://127.0.0.1:1/v1", suite=load_suite(suite_path(None))),
        context=context,
        facts=ServiceFacts(),
        run_id="r1",
        model="m",
        max_model_len=4096,
        gates=(GateResult("tools", "pass", tuple(_ok(3))),),
        overhead=ClientOverhead(requests=3, wall_s=1.0, client_cpu_s=0.01),
        started_at="t0",
        finished_at="t1",
    )
    write_evidence(report, tmp_path)
    data = read_evidence(tmp_path)
    assert data == json.loads(json.dumps(evidence_document(report)))
    assert data["provenance"] == {
        "profile": "q",
        "plan_hash": "ab" * 8,
        "image_digest": "sha256:" + "c" * 64,
        "model_revision": "d" * 40,
    }
    assert data["server"] == {"url": "http://127.0.0.1:1", "model": "m", "max_model_len": 4096}
    assert data["counts"] == "tools 3/3" and data["passed"] is True
    assert data["gates"][0]["cases"][0] == {"case": "c0", "ok": True, "message": "", "latency_s": None, "detail": {}}
    assert data["client"]["client_cpu_fraction"] == pytest.approx(0.01)


def test_missing_evidence_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"qualify.json: not found; run `servectl qualify NAME --out"):
        read_evidence(tmp_path)
