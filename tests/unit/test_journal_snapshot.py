"""The profile document a journal keeps is loaded back like any profile: schema *and* cross-field rules."""

from __future__ import annotations

import os

import pytest

from servectl.errors import ProfileError
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile
from servectl.service.journal import PreviousService
from servectl.service.transaction.snapshot import resolved_from_snapshot


def snapshot(**changes: object) -> PreviousService:
    loaded = load_profile("demo", folders=search_path(environ=os.environ))
    data = {**loaded.data, **changes}
    return PreviousService(profile="demo", source=str(loaded.file.path), data=data, plan_hash="")


def test_the_journals_copy_compiles_to_the_plan_of_the_profile() -> None:
    assert resolved_from_snapshot(snapshot(), {}).plan.plan_hash == resolve_demo_hash()


def test_a_copy_that_breaks_a_cross_field_rule_is_refused_like_the_file_would_be() -> None:
    broken = snapshot(health={"expect_log": ["a line no SGLang build prints zzzq"]})
    with pytest.raises(ProfileError, match=r"health\.expect_log"):
        resolved_from_snapshot(broken, {})


def resolve_demo_hash() -> str:
    from servectl.plan.resolve import resolve

    return resolve("demo", environ={}).plan.plan_hash
