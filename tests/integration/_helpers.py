"""What the integration tests' worlds share: removing their labelled containers and running the CLI as a user does."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def remove_labelled(client: Any, label: str, value: str) -> None:
    """Remove every container (running or not) that carries ``label=value``; a container already gone is fine."""
    for c in client.containers.list(all=True, filters={"label": f"{label}={value}"}):
        with contextlib.suppress(Exception):
            c.remove(force=True)


def servectl_popen(*args: str, profiles: Path, home: Path, cwd: Path) -> subprocess.Popen[str]:
    """``servectl ARGS`` of this checkout in a fresh process on these profile and state folders (output piped)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "SERVECTL_PROFILES": str(profiles),
        "SERVECTL_HOME": str(home),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "servectl", *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
