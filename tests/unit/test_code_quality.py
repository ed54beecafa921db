"""The house rules that tools check: ruff lint and format, mypy strict on src/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean() -> None:
    result = run("ruff", "check", "src", "tests", "benchmarks", "scripts")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = run("ruff", "format", "--check", "src", "tests", "benchmarks", "scripts")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean_on_src() -> None:
    result = run("mypy", "src/servectl")
    assert result.returncode == 0, result.stdout + result.stderr
