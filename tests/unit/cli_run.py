"""Run ``servectl`` as a user does: in the test's own process (``run_cli``) or in a fresh one (``servectl``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, columns: int = 200
) -> tuple[int, str, str]:
    """``servectl ARGS`` through :func:`servectl.cli.app.main`, on a terminal ``columns`` wide.

    Returns (exit code, stdout, stderr); an exit with no code counts as 0.
    """
    from servectl.cli.app import main

    monkeypatch.setattr(sys, "argv", ["servectl", *args])
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out, err


def servectl(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m servectl ARGS`` in a fresh process with a bare environment (this checkout's ``src``, no
    ``SERVECTL_PROFILES``, a state folder under /tmp), 200 columns wide; ``env`` adds to it."""
    base = {
        "PYTHONPATH": str(REPO / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp/servectl-test-home",
        "SERVECTL_HOME": "/tmp/servectl-test-home/state",
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "servectl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
    )
