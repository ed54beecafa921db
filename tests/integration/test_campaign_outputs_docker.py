"""A campaign folder's outputs on the real Docker engine with the stand-in (issue 42's output side): the overlay
taper and Pareto figures, the README table with startup times, provenance per variant, the registry export
checked against the shipped schema, and ``claims verify`` recounting the table from the bench artifacts - and
naming an edited artifact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import StandinCli, remove_labelled

from servectl.testing.docker import TEST_SESSION_LABEL

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def world(docker_client: Any, standin_image: str, test_session_id: str, tmp_path: Path) -> Iterator[StandinCli]:
    cli = StandinCli(
        tmp_path, image=standin_image, session=test_session_id, startup_delay_s=0.2, timeout_s=300, columns=200
    )
    yield cli
    remove_labelled(docker_client, TEST_SESSION_LABEL, test_session_id)


def test_a_campaign_folder_is_drawn_exported_and_recounted_from_its_artifacts(world: StandinCli) -> None:
    base = world.profile("base", STANDIN_TOKEN_RATE="400")
    file = world.tmp / "campaign.yaml"
    file.write_text(
        f"name: out{world.tag}\n"
        f"base: {base}\n"
        "variants:\n"
        '  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "600"}}}}\n'
        '  - {name: same, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "400"}}}}\n'
        "workload:\n"
        "  points:\n"
        "    - {name: c1, prompt_tokens: 64, concurrency: 1, max_tokens: 32}\n"
        "    - {name: c2, prompt_tokens: 64, concurrency: 2, max_tokens: 32}\n"
        "decision: {primary_point: c1, min_repeats: 3, max_repeats: 4}\n"
    )
    folder = world.tmp / "run"
    ran = world.run("campaign", "run", str(file), "--out", str(folder))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    record = json.loads((folder / "campaign.json").read_text())
    statuses = {v["name"]: v["status"] for v in record["variants"]}
    assert statuses["fast"] == "accepted-fast" and not statuses["same"].startswith("accepted-"), statuses
    for v in record["variants"]:  # each variant's startup measured, its provenance recorded
        assert v["startup_s"] is not None and v["startup_s"] > 0 and v["provenance"]["plan_hash"]
    assert record["incumbent"]["startup_s"] > 0
    assert record["figures"] == ["taper.png", "pareto.png"]
    for name in record["figures"]:
        assert (folder / name).read_bytes()[:8] == PNG
    readme = (folder / "README.md").read_text()
    assert "| fast | accepted-fast |" in readme and "![pareto](pareto.png)" in readme
    assert f"The incumbent `{base}` started in" in readme

    sweep = world.tmp / "sweep.json"
    exported = world.run("campaign", "export", str(folder), "--out", str(sweep))
    assert exported.returncode == 0, exported.stderr
    rows = {(r["variant"], r["point"]): r for r in json.loads(sweep.read_text())["rows"]}
    assert rows[("incumbent", "c1")]["status"] == "measured"
    assert rows[("fast", "c2")]["status"] == "accepted-fast" and rows[("fast", "c2")]["concurrency"] == 2
    assert rows[("fast", "c1")]["decode_tok_s"] == pytest.approx(600, rel=0.1)  # the stand-in's rate, measured
    assert rows[("incumbent", "c1")]["decode_tok_s"] == pytest.approx(400, rel=0.1)

    verified = world.run("claims", "verify", str(folder))
    assert verified.returncode == 0 and "claims of the campaign table recounted" in verified.stdout, verified.stderr
    m = next(m for m in record["measurements"] if m["variant"] == "fast" and m["point"] == "c1")
    summary = folder / m["artifacts"] / "summary.json"
    document = json.loads(summary.read_text())
    document["points"][0]["decode_tok_s"]["p50"] *= 1.02
    summary.write_text(json.dumps(document))
    edited = world.run("claims", "verify", str(folder))
    assert edited.returncode != 0
    assert f"measurement fast round {m['round']} c1: {m['artifacts']}/summary.json gives" in edited.stderr
