"""Where servectl keeps its files: the state folder and the user's profile folder.

Pure functions of the environment, so that tests point them elsewhere with ``SERVECTL_HOME``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

APP_NAME = "servectl"


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The state folder: history, lock, generated files. ``SERVECTL_HOME`` overrides the platform default."""
    env = os.environ if environ is None else environ
    if env.get("SERVECTL_HOME"):
        return Path(env["SERVECTL_HOME"]).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir(APP_NAME))


def user_profiles_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user's own profile folder (last on the search path)."""
    env = os.environ if environ is None else environ
    if env.get("SERVECTL_HOME"):
        return Path(env["SERVECTL_HOME"]).expanduser() / "profiles"
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME)) / "profiles"
