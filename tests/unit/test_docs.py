"""The CLI reference is generated from --help and must match it; the README starts with the Quickstart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cli_reference_matches_the_commands_help() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_cli_docs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_readme_opens_with_a_two_command_quickstart() -> None:
    text = (REPO / "README.md").read_text()
    first_section = text.split("\n## ")[1]
    assert first_section.startswith("Quickstart")
    block = first_section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2
    assert "servectl up glm53-393k --dry-run" in commands[0] and "pip install" in commands[0]
    assert "scripts/test.sh" in commands[1]
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()
