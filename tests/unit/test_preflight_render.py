"""The preflight table and summary line, and that the preflight modules load no heavy SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console

import servectl
from servectl.cli.views.preflight import render_report, summary_line
from servectl.preflight.model import PreflightReport, PreflightRequest
from servectl.preflight.run import run_preflight
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe, fake_model_dir


def _report(scenario: str, skip: frozenset[str] = frozenset()) -> PreflightReport:
    request = PreflightRequest(
        profile_name="demo",
        source_file="profiles/demo.yaml",
        gpu_indices=(0, 1),
        tp=2,
        ipc_host=True,
        image_ref="img:1",
        image_digest=None,
        model_path="/m",
    )
    host = FakeHostProbe(models={"/m": fake_model_dir("/m", weights_bytes=10**9)})
    return run_preflight(
        request=request,
        gpus=FakeGpuInventory.scenario(scenario),
        host=host,
        docker=FakeDockerEngine(),
        skip=skip,
    )


def test_the_table_shows_each_check_its_result_finding_and_fix() -> None:
    console = Console(record=True, width=200)
    render_report(_report("foreign_pid"), console)
    text = console.export_text()
    assert "preflight demo (profiles/demo.yaml)" in text
    assert "gpu.exclusive" in text and "card 0: pid 4242 holds 20,480 MiB" in text
    assert "end pid(s) 4242 or pick other cards" in text
    assert "image img:1 is not present locally" in text
    assert text.rstrip().splitlines()[-1].startswith("2 fail, ")
    assert text.rstrip().endswith("nothing may start")


def test_forced_checks_are_marked_in_the_table() -> None:
    console = Console(record=True, width=200)
    render_report(_report("foreign_pid", frozenset({"gpu.exclusive", "image.pinned"})), console)
    text = console.export_text()
    assert "skipped (--force)" in text
    assert text.rstrip().endswith("ready")


def test_the_summary_counts_results() -> None:
    report = _report("two_free_sm120")
    assert summary_line(report).startswith("1 fail, ")
    counts = Counter(c.result for c in report.checks)
    parts = [f"{counts[r]} {r}" for r in ("fail", "warn", "unknown", "skipped", "pass") if counts[r]]
    assert summary_line(report) == f"{', '.join(parts)} in {report.duration_seconds:.2f} s: nothing may start"
    assert summary_line(_report("two_free_sm120", skip=frozenset({"image.pinned"}))).endswith(": ready")


def test_preflight_modules_import_neither_nvml_nor_the_docker_sdk() -> None:
    code = (
        "import sys\n"
        "import servectl.preflight.checks, servectl.cli.views.preflight, servectl.testing.fakes\n"
        "import servectl.adapters.gpu, servectl.adapters.host, servectl.adapters.docker\n"
        "heavy = sorted(m for m in ('pynvml', 'docker', 'psutil') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    src = str(Path(servectl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == ""
