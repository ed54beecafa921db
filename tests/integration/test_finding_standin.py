"""bench + qualify -> report -> claims verify on the real Docker engine with the stand-in engine.

One profile (extends the shipped ``demo``) with a small suite; the CLI runs every step as a user would.
The finding recounts, the short post comes from its ledger, and one number edited in a copied artifact makes
the recount fail naming the claim. The container is removed at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.standin.process import free_port
from servectl.testing.docker import TEST_SESSION_LABEL, write_test_profile

pytestmark = pytest.mark.integration

SRC = str(Path(__file__).resolve().parents[2] / "src")
SUITE = """name: small
gates:
  smoke: {max_tokens: 16}
  tools: {cases: 4, max_tokens: 256}
  endurance: {requests: 6, max_tokens: 16, window: 3}
  vram: {}
"""


@pytest.fixture
def run(docker_client: Any, standin_image: str, test_session_id: str, tmp_path: Path) -> Iterator[Any]:
    folder = tmp_path / "profiles"
    env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(tmp_path / "home"), "SERVECTL_PROFILES": str(folder)}
    name = f"t{os.urandom(3).hex()}-finding"
    path = write_test_profile(
        folder,
        name,
        port=free_port(),
        session=test_session_id,
        image={"ref": standin_image},
        engine={"env": {"STANDIN_STARTUP_DELAY_S": "1"}},
        container={"name": f"servectl-{name}"},
    )
    path.write_text(path.read_text() + "qualify: small.yaml\n")
    (folder / "small.yaml").write_text(SUITE)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "servectl", *[a.replace("NAME", name) for a in args]],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=240,
        )

    yield cli
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{TEST_SESSION_LABEL}={test_session_id}"}
    ):
        if container.name == f"servectl-{name}":
            container.remove(force=True)


def test_bench_qualify_report_verify_on_the_standin(run: Any, tmp_path: Path) -> None:
    assert (up := run("up", "NAME")).returncode == 0, up.stderr
    bench = run("bench", "NAME", "--prompt-tokens", "1024", "--repeats", "3", "--max-tokens", "32", "--out", "ev")
    assert bench.returncode == 0, bench.stdout + bench.stderr
    qualify = run("qualify", "NAME", "--out", "ev")
    assert qualify.returncode == 0, qualify.stdout + qualify.stderr
    manifest = json.loads((tmp_path / "ev" / "artifact-manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} == {"c1-p1024-r3.json", "summary.json", "qualify.json"}
    assert [r["command"] for r in manifest["runs"].values()] == ["bench", "qualify"]

    report = run("report", "NAME", "--evidence", "ev", "--out", "finding")
    assert report.returncode == 0, report.stderr
    readme = (tmp_path / "finding" / "README.md").read_text()
    assert "- smoke 2/2: pass" in readme and "- tools 4/4: pass" in readme and "- endurance 6/6: pass" in readme
    assert "host facts unknown" in readme and "median of 3 C1 requests" in readme
    verify = run("claims", "verify", "finding")
    assert verify.returncode == 0 and verify.stdout.startswith("ok: "), verify.stderr
    short = run("claims", "verify", "finding", "--format", "short")
    assert short.returncode == 0 and "smoke 2/2, tools 4/4, endurance 6/6." in short.stdout

    point = tmp_path / "finding" / "artifacts/e1/bench/c1-p1024-r3.json"
    doc = json.loads(point.read_text())
    doc["point"]["concurrency"] = 2
    point.write_text(json.dumps(doc))
    failed = run("claims", "verify", "finding")
    assert failed.returncode == 1
    assert "error: claim concurrency.c1.p1024 (1): different value: the artifacts give 2, the ledger says 1" in (
        failed.stderr.splitlines()
    )
