"""Snapshots of rendered files for the test profiles (multi-node, API keys, host networking, dollars).

The shipped profiles' renders are committed in compose/ and k8s/ and checked by test_render_stale.py. To
accept a deliberate change here: SERVECTL_UPDATE_SNAPSHOTS=1 python -m pytest tests/unit/render, then review
the diff of tests/snapshots/render/.
"""

from __future__ import annotations

import os

import pytest
from render_support import REPO, text_of

from servectl.render.files import Target

SNAPSHOTS = REPO / "tests" / "snapshots" / "render"
CASES: list[tuple[str, Target]] = [
    ("envkey", "compose"),
    ("envkey", "k8s"),
    ("keyfile", "compose"),
    ("keyfile", "k8s"),
    ("multinode", "k8s"),
]


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}.{t}" for n, t in CASES])
def test_rendered_file_matches_its_snapshot(name: str, target: Target) -> None:
    path = SNAPSHOTS / f"{name}.{target}.yaml"
    text = text_of(name, target)
    if os.environ.get("SERVECTL_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no snapshot {path}; create it with SERVECTL_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} rendered for {target} differs from {path.relative_to(REPO)}; if the change is intended, "
        "rerun with SERVECTL_UPDATE_SNAPSHOTS=1 and review the diff"
    )
