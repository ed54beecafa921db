"""`servectl qualify` against the demo profile on the real Docker engine, with the shipped default suite.

The profile extends the shipped ``demo`` (stand-in engine, reasoning parser glm45, tool parser glm47, 32K
context) with a unique name, port and the session label; `servectl up` starts it, `servectl qualify` runs
every default gate through the openai SDK. A second profile injects one fault and must fail the one gate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import StandinCli, remove_labelled

from servectl.testing.docker import TEST_SESSION_LABEL

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(docker_client: Any, standin_image: str, test_session_id: str, tmp_path: Path) -> Iterator[Any]:
    """(profile, run) of a :class:`StandinCli`; the session's containers are removed after the test."""
    world = StandinCli(
        tmp_path, image=standin_image, session=test_session_id, startup_delay_s=1, timeout_s=300, columns=None
    )
    yield world.profile, world.run
    remove_labelled(docker_client, TEST_SESSION_LABEL, test_session_id)


def test_qualify_demo_passes_every_default_gate_and_writes_the_evidence(cli: Any, tmp_path: Path) -> None:
    profile, run = cli
    name = profile("qualify")
    up = run("up", name)
    assert up.returncode == 0, up.stderr
    result = run("qualify", name, "--out", str(tmp_path / "ev"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "smoke 2/2, json 6/6, tools 20/20, reasoning 4/4, needle 2/2, endurance 60/60" in result.stdout
    evidence = json.loads((tmp_path / "ev" / "qualify.json").read_text())
    assert evidence["passed"] is True and evidence["provenance"]["profile"] == name
    assert evidence["provenance"]["plan_hash"] and evidence["server"]["model"] == "demo"
    assert evidence["suite"]["name"] == "default"
    verdicts = {g["gate"]: g["verdict"] for g in evidence["gates"]}
    assert verdicts == {
        "smoke": "pass",
        "structured": "pass",
        "tools": "pass",
        "reasoning": "pass",
        "long_context": "pass",
        "endurance": "pass",
        "vram": "skipped",  # the demo profile uses no GPU
    }
    needles = next(g for g in evidence["gates"] if g["gate"] == "long_context")["cases"]
    assert [c["detail"]["prompt_tokens_target"] for c in needles] == [8192, 32768 - 1024 - 64]


def test_qualify_fails_the_tools_gate_on_a_wrong_function_naming_the_case(cli: Any, tmp_path: Path) -> None:
    profile, run = cli
    name = profile("wrongtool", STANDIN_TOOL_FAULT="wrong_function")
    assert run("up", name).returncode == 0
    result = run("qualify", name, "--out", str(tmp_path / "ev"), "--json")
    assert result.returncode == 1
    assert "error: qualify: 1 of 7 gates failed (tools 0/20)" in result.stderr
    evidence = json.loads(result.stdout)
    tools = next(g for g in evidence["gates"] if g["gate"] == "tools")
    assert (
        tools["cases"][1]["message"]
        == "tools #2 create_event of 2 tools: called 'search_docs', expected 'create_event'"
    )


def test_the_demo_stand_in_passes_the_full_suites_coding_gate_in_the_real_sandbox(cli: Any, tmp_path: Path) -> None:
    # the demo's stand-in knows no solutions file: it answers from the shipped cases' reference solutions
    # (servectl/standin/code_solutions.json in its image); each answer runs in a real sandbox container
    profile, run = cli
    name = profile("coding")
    suite = tmp_path / "coding-suite.yaml"
    suite.write_text("name: coding-only\ngates:\n  coding: {cases: shipped, timeout_s: 10}\n")
    assert run("up", name).returncode == 0
    result = run("qualify", name, "--suite", str(suite), "--out", str(tmp_path / "ev"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "coding 16/16" in result.stdout


def test_a_promoted_stand_in_profile_exports_its_measured_sweep_as_a_registry_record(
    cli: Any, tmp_path: Path, docker_client: Any
) -> None:
    # bench -> qualify -> promote -> report --format local-ai-registry on the real engine, the stand-in image
    # pinned by its id (a local build has no repo digest); the record is checked here against the schema
    # servectl ships, as the export itself does, and its rows against the run
    import jsonschema
    import yaml

    from servectl.bench.finding.registry import SWEEP_SCHEMA_FILE

    profile, run = cli
    name = profile("registry")
    suite = tmp_path / "smoke-suite.yaml"
    suite.write_text("name: smoke-only\ngates:\n  smoke: {}\n")
    file = tmp_path / "profiles" / f"{name}.yaml"
    doc = yaml.safe_load(file.read_text())
    doc["image"]["digest"] = docker_client.images.get(doc["image"]["ref"]).id  # promotion needs both pins
    doc["model"] = {"revision": "5" * 40}
    doc["qualify"] = str(suite)
    file.write_text(yaml.safe_dump(doc))
    record = tmp_path / "sweep.json"
    refused = run("report", name, "--format", "local-ai-registry", "--out", str(record))
    assert refused.returncode == 2 and not record.exists(), refused.stdout + refused.stderr
    assert "not promoted" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    up = run("up", name)
    assert up.returncode == 0, up.stdout + up.stderr
    ev = tmp_path / "ev"
    bench = run("bench", name, "--prompt-tokens", "256,1024", "--concurrency", "1,2", "--repeats", "2",
                "--max-tokens", "16", "--out", str(ev))  # fmt: skip
    assert bench.returncode == 0, bench.stdout + bench.stderr
    qualify = run("qualify", name, "--out", str(ev))
    assert qualify.returncode == 0, qualify.stdout + qualify.stderr
    promoted = run("promote", name, "--evidence", str(ev))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    exported = run("report", name, "--format", "local-ai-registry", "--out", str(record))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    document = json.loads(record.read_text())
    jsonschema.validate(document, json.loads(SWEEP_SCHEMA_FILE.read_text()))
    rows = document["rows"]
    summary = json.loads((ev / "summary.json").read_text())
    assert len(rows) == len(summary["points"]) == 4
    assert sorted(r["concurrency"] for r in rows) == [1, 1, 2, 2]
    assert all(r["context_tokens"] > 0 and r["decode_tok_s"] > 0 and r["peak_vram_gb"] is None for r in rows)
    again = run("report", name, "--format", "local-ai-registry", "--out", str(record))
    assert again.returncode == 2 and "--force" in again.stderr  # an existing file is not replaced unasked
