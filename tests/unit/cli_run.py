"""Run ``servectl`` in the test's own process, as the console script does: exit code, stdout, stderr."""

from __future__ import annotations

import sys

import pytest


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, columns: int | None = None
) -> tuple[int, str, str]:
    """``servectl ARGS`` through :func:`servectl.cli.app.main`; ``columns`` sets the terminal width it sees.

    Returns (exit code, stdout, stderr); an exit with no code counts as 0.
    """
    from servectl.cli.app import main

    monkeypatch.setattr(sys, "argv", ["servectl", *args])
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out, err
