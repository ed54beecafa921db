"""``--mem-fraction-static`` has one home: the value the engine gets, however the profile wrote it (issue 38).

A recipe's ``--mem-fraction-static 0.80`` lands in ``engine.args`` as a string; the warm standby's free-memory
target and preflight's estimate read the typed field only and assumed SGLang's default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.profile.engine_args import mem_fraction_static
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile

Write = Callable[[str, str], Path]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("engine: {mem_fraction_static: 0.7}", 0.7),
        ("engine: {args: {mem-fraction-static: '0.80'}}", 0.8),  # as an adopted recipe writes it
        ("engine: {args: {mem-fraction-static: 0.75}}", 0.75),
        ("engine: {args: {mem-fraction: 0.6}}", 0.6),  # an abbreviation the engine's parser takes
        ("engine: {}", None),
    ],
)
def test_the_fraction_is_what_the_engine_gets_wherever_it_is_written(
    write_profile: Write, minimal: Callable[[str], str], extra: str, expected: float | None
) -> None:
    write_profile("_min", minimal("_min"))
    write_profile("p", f"name: p\nextends: _min\n{extra}\n")
    loaded = load_profile("p", folders=search_path(environ=os.environ))
    assert mem_fraction_static(loaded.profile, catalogs=loaded.catalogs) == expected


def test_preflight_estimates_with_the_fraction_written_in_args(
    write_profile: Write, minimal: Callable[[str], str], profile_dir: Path
) -> None:
    from servectl.plan.resolve import resolve
    from servectl.preflight.request import request_for

    write_profile("_min", minimal("_min"))
    write_profile("p", "name: p\nextends: _min\nengine: {args: {mem-fraction-static: '0.80'}}\n")
    environ = {"SERVECTL_PROFILES": str(profile_dir)}
    assert request_for(resolve("p", environ=environ)).mem_fraction == 0.8  # was None: SGLang's default assumed
