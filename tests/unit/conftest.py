"""Unit-test helpers: write profile folders into tmp dirs and run the CLI in-process."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def profile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ./profiles folder in a fresh working directory, isolated from the shipped profiles' state."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SERVECTL_PROFILES", raising=False)
    return folder


@pytest.fixture
def write_profile(profile_dir: Path) -> Callable[[str, str], Path]:
    def write(name: str, text: str) -> Path:
        path = profile_dir / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write


MINIMAL_TEXT = """
name: {name}
image: {{ref: "example/sglang:1"}}
model: {{path: /models/m, served_name: m}}
serve: {{port: 8180, role: bench}}
"""


@pytest.fixture
def minimal() -> Callable[[str], str]:
    """A minimal valid profile document named ``name``."""
    return lambda name: MINIMAL_TEXT.format(name=name)
