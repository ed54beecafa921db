"""`servectl qualify` on the command line: the summary table, --json, exit codes, and the table's fit."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_run import run_cli
from rich.console import Console

from servectl.bench.qualify import CaseResult, GateResult, QualifySettings, ServiceFacts, load_suite, suite_path
from servectl.bench.qualify.model import ClientOverhead, QualifyReport
from servectl.cli.views.qualify import summary_table
from servectl.standin.process import HostStandin

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
FAST = {"STANDIN_TOKEN_RATE": "5000", "STANDIN_STARTUP_DELAY_S": "0"}


def _report() -> QualifyReport:
    broken = CaseResult("structured json_schema #1 person", False, "structured json_schema #1 person: content [1, 2] x")
    gates = (
        GateResult("long_context", "pass", (CaseResult("needle 31,680 tokens", True, latency_s=0.5),)),
        GateResult("structured", "fail", (broken,)),
        GateResult("vram", "skipped", note="no GPU inventory (no NVML, or no cards in the profile)"),
    )
    return QualifyReport(
        settings=QualifySettings(url="http://127.0.0.1:8190", suite=load_suite(suite_path(None))),
        context=None,
        facts=ServiceFacts(),
        run_id="r",
        model="glm53-flash-ormandj-sglang-sm120-tp2-393k-c1-adaptive-mtp",
        max_model_len=None,
        gates=gates,
        overhead=ClientOverhead(1, 1.0, 0.0),
        started_at="t0",
        finished_at="t1",
    )


@pytest.mark.parametrize("width", [80, 60])
def test_the_summary_table_fits_narrow_terminals_with_whole_gate_names_and_literal_messages(width: int) -> None:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(summary_table(_report(), width=width))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    text = out.getvalue()
    assert "long_context" in text and "skipped" in text and "[1," in text  # brackets stay text, not markup


def test_qualify_url_passes_prints_counts_and_writes_the_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: quick\ngates:\n  smoke: {}\n  tools: {cases: 2}\n")
    with HostStandin(["--model-path", DEMO_MODEL, "--tool-call-parser", "glm47"], env=FAST) as engine:
        engine.wait_ready()
        qualify = ("qualify", "--url", engine.base_url, "--suite", str(suite))
        code, out, _ = run_cli(monkeypatch, capsys, *qualify, "--out", str(tmp_path / "ev"))
        assert code == 0, out
        assert "smoke 2/2, tools 2/2" in out and "evidence: " in out
        assert json.loads((tmp_path / "ev" / "qualify.json").read_text())["suite"]["name"] == "quick"
        code, out, _ = run_cli(monkeypatch, capsys, *qualify, "--json", "--out", str(tmp_path / "ev2"))
        assert code == 0 and json.loads(out)["counts"] == "smoke 2/2, tools 2/2"


def test_qualify_without_a_target_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "qualify")
    assert code == 2 and err == "error: qualify: give a profile NAME or --url http://HOST:PORT\n"


def test_a_failed_gate_exits_1_naming_the_gate_and_the_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: quick\ngates:\n  structured: {json_object: 1, json_schema: 0}\n")
    with HostStandin(["--model-path", DEMO_MODEL], env={**FAST, "STANDIN_JSON_FAULT": "invalid"}) as engine:
        engine.wait_ready()
        code, out, err = run_cli(
            monkeypatch, capsys, "qualify", "--url", engine.base_url, "--suite", str(suite), "--out", str(tmp_path)
        )
    assert code == 1
    assert "  structured json_object #1: content is not JSON" in out
    assert err == f"error: qualify: 1 of 1 gates failed (structured 0/1); see {tmp_path / 'qualify.json'}\n"


def test_via_gateway_needs_the_gateway_key_and_a_known_alias(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path))
    code, _, err = run_cli(monkeypatch, capsys, "qualify", "chat", "--via-gateway")
    assert code == 2
    assert err.strip().splitlines()[-1].endswith("give the gateway key with --api-key-env NAME or --api-key-file")
    gateway_file = tmp_path / "gateway.yaml"
    gateway_file.write_text("aliases: {chat: [demo]}\n")
    monkeypatch.setenv("GW_KEY", "k")
    monkeypatch.setattr("servectl.gateway.config.default_config_file", lambda environ=None: gateway_file)
    code, _, err = run_cli(monkeypatch, capsys, "qualify", "other", "--via-gateway", "--api-key-env", "GW_KEY")
    assert code == 2
    assert "gateway: no alias 'other' (aliases: chat)" in err
