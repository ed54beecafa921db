"""The state, profile and catalog folders are functions of the environment given, not of the process's.

``platformdirs`` reads the process's ``XDG_*`` and ``HOME``: a host built with another environment (a FakeHost,
a library caller's ``Host(environ=...)``) that set only ``XDG_CACHE_HOME`` got this process's catalog folder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import platformdirs
import pytest

from servectl.paths import catalog_cache_dir, state_dir, user_profiles_dir

pytestmark = pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG folders of Linux and the BSDs")


def test_each_folder_follows_the_xdg_variables_of_the_environment_given(tmp_path: Path) -> None:
    environ = {
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    assert catalog_cache_dir(environ) == tmp_path / "cache" / "servectl" / "catalogs"
    assert state_dir(environ) == tmp_path / "state" / "servectl"
    assert user_profiles_dir(environ) == tmp_path / "config" / "servectl" / "profiles"


def test_without_xdg_variables_the_folders_are_below_the_home_given(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "XDG_CACHE_HOME": "relative/not/used"}
    assert catalog_cache_dir(environ) == tmp_path / ".cache" / "servectl" / "catalogs"
    assert state_dir(environ) == tmp_path / ".local" / "state" / "servectl"
    assert user_profiles_dir(environ) == tmp_path / ".config" / "servectl" / "profiles"


def test_servectl_home_and_the_catalog_variable_come_first(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "SERVECTL_HOME": str(tmp_path / "sv")}
    assert state_dir(environ) == tmp_path / "sv"
    assert catalog_cache_dir({**environ, "SERVECTL_CATALOG_CACHE": str(tmp_path / "cat")}) == tmp_path / "cat"


@pytest.mark.parametrize(
    ("function", "ours", "below"),
    [
        ("user_cache_dir", catalog_cache_dir, "catalogs"),
        ("user_state_dir", state_dir, ""),
        ("user_config_dir", user_profiles_dir, "profiles"),
    ],
)
def test_in_the_process_environment_the_folders_are_platformdirs_own(
    function: str,
    ours: Callable[[Mapping[str, str]], Path],
    below: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given the process's own environment, the answer is platformdirs' (with and without XDG variables)."""
    monkeypatch.delenv("SERVECTL_HOME", raising=False)
    monkeypatch.delenv("SERVECTL_CATALOG_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for variable in ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(variable, raising=False)
    expected = Path(getattr(platformdirs, function)("servectl"))
    got = ours(dict(os.environ))
    assert got == expected / below
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "s"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "f"))
    expected = Path(getattr(platformdirs, function)("servectl"))
    got = ours(dict(os.environ))
    assert got == expected / below
