"""The README's Quickstart installs what its lifecycle demo runs: ``bench --plot`` needs the bench extra."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]


def test_the_quickstart_installs_the_extra_its_plot_demo_needs() -> None:
    section = _quickstart()
    assert "--plot" in section, "the demo no longer plots: drop this test or the extra"
    installs = re.findall(r"pip install -e '?\.\[([\w,]+)\]'?", section)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    plot_extras = {name for name, deps in extras.items() if any(d.startswith("matplotlib") for d in deps)}
    assert any(plot_extras & set(group.split(",")) for group in installs), (
        f"the Quickstart runs `bench --plot` but installs none of the extras with matplotlib: {sorted(plot_extras)}"
    )
