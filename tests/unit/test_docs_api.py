"""docs/api.md's example (a library user's up, swap, status and down on the fakes) runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- docs-test: run -->"


def runnable_blocks(text: str) -> list[str]:
    """The ```python blocks right after a ``docs-test: run`` mark."""
    return re.findall(re.escape(MARK) + r"\s*```python\n(.*?)```", text, re.S)


def test_docs_api_example_runs_on_the_fakes(profile_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    [block] = runnable_blocks(text)
    assert "host.up(" in block and "host.swap(" in block and "host.status()" in block
    namespace: dict[str, object] = {}
    exec(compile(block, "docs/api.md", "exec"), namespace)  # our own docs, on purpose
    status = namespace["status"]
    assert [s.profile for s in status.services] == ["demo-rollback"]  # type: ignore[attr-defined]


def test_a_broken_example_fails_the_docs_test() -> None:
    """The test of the test: a marked block whose assertion does not hold raises."""
    broken = MARK + "\n```python\nfrom servectl.testing import FakeHost\nassert FakeHost is None\n```\n"
    [block] = runnable_blocks(broken)
    with pytest.raises(AssertionError):
        exec(compile(block, "broken.md", "exec"), {})
