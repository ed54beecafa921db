"""The two steps of loading: the profile layer checks the schema, profile.validate adds the cross-field rules."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.errors import ProfileError
from servectl.profile.loader import read_profile, search_path
from servectl.profile.validate import load_profile

Write = Callable[[str, str], Path]
Minimal = Callable[[str], str]


def test_reading_checks_the_schema_only_and_validating_adds_the_rules(write_profile: Write, minimal: Minimal) -> None:
    # context longer than the total token budget: schema-valid, broken by the engine.context rule
    write_profile("p", minimal("p") + "engine: {context_length: 9000, max_total_tokens: 8000}\n")
    assert read_profile("p", folders=search_path(environ=os.environ)).profile.engine.context_length == 9000
    with pytest.raises(ProfileError) as info:
        load_profile("p", folders=search_path(environ=os.environ))
    (line,) = info.value.lines()
    assert line.startswith("profiles/p.yaml:5: engine.context_length: 9000 exceeds max_total_tokens 8000")


def test_schema_problems_stop_before_the_rules_run(write_profile: Write, minimal: Minimal) -> None:
    write_profile("p", minimal("p") + "engine: {tp: zero, context_length: 9000, max_total_tokens: 8000}\n")
    with pytest.raises(ProfileError) as info:
        load_profile("p", folders=search_path(environ=os.environ))
    (line,) = info.value.lines()
    assert "engine.tp" in line and "'zero'" in line


def test_profiles_are_listed_and_validated_in_natural_order(
    write_profile: Write, minimal: Minimal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``demo`` before ``demo-rollback`` (file order put ``-`` before ``.``), ``x-9`` before ``x-10``."""
    from servectl.plan.inventory import list_profiles, validations

    monkeypatch.setenv("SERVECTL_PROFILES", str(Path.cwd() / "profiles"))
    for name in ("x-10", "demo-rollback", "x-9", "demo"):
        write_profile(name, minimal(name))
    expected = ["demo", "demo-rollback", "x-9", "x-10"]
    assert [
        v.name for v in validations(None, folders=search_path(environ=os.environ)) if v.name in expected
    ] == expected
    assert [r.name for r in list_profiles(environ=os.environ) if r.name in expected] == expected
