"""Where servectl keeps its files: the state folder, the user's profile folder and the data it ships.

Pure functions of the environment given (the host's, never read here), so that tests point them elsewhere with
``SERVECTL_HOME``. The shipped
profiles, the profile JSON Schema and the demo model are package data under ``servectl/data`` so that a
normal (non-editable) install has them; a source checkout links ``profiles``, ``schema`` and ``examples`` at
its root to the same folders.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

APP_NAME = "servectl"

#: Package data: ``profiles/``, ``schema/profile.schema.json``, ``examples/demo-model/``.
DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED_PROFILES_DIR = DATA_DIR / "profiles"
SCHEMA_FILE = DATA_DIR / "schema" / "profile.schema.json"
DEMO_MODEL_DIR = DATA_DIR / "examples" / "demo-model"


def source_checkout_dir() -> Path | None:
    """The source checkout servectl runs from (its ``profiles`` links to the shipped ones), else None."""
    root = DATA_DIR.parents[2]  # <checkout>/src/servectl/data
    try:
        if (root / "profiles").resolve() == SHIPPED_PROFILES_DIR:
            return root
    except OSError:
        pass
    return None


def state_dir(environ: Mapping[str, str]) -> Path:
    """The state folder: history, lock, generated files. ``SERVECTL_HOME`` overrides the platform default."""
    return _folder(environ, "user_state_dir")


def user_profiles_dir(environ: Mapping[str, str]) -> Path:
    """The user's own profile folder (last on the search path)."""
    return _folder(environ, "user_config_dir") / "profiles"


#: The variable that names the catalog cache folder itself (see :func:`catalog_cache_dir`).
CATALOG_CACHE_VAR = "SERVECTL_CATALOG_CACHE"


def catalog_cache_dir(environ: Mapping[str, str]) -> Path:
    """Flag catalogs extracted from engine images, keyed by image id (``servectl catalog extract``), with their
    route tables. ``SERVECTL_CATALOG_CACHE`` names the folder itself: the gateway container is given the host's,
    mounted read-only at its host path, since its ``SERVECTL_HOME`` is the state folder alone. The host's
    environment reaches it through the profile search (:class:`~servectl.profile.loader.ProfileSearch`), so
    ``engine.catalog: image`` is looked up where the host keeps its catalogs, not where this process would."""
    named = environ.get(CATALOG_CACHE_VAR)
    return Path(named).expanduser() if named else _folder(environ, "user_cache_dir") / "catalogs"


#: On the XDG platforms (Linux, the BSDs), each platformdirs folder servectl uses: its variable, and where it is
#: below ``$HOME`` when the variable is unset (the XDG Base Directory spec, as platformdirs reads it).
_XDG_FOLDERS = {
    "user_state_dir": ("XDG_STATE_HOME", ".local/state"),
    "user_config_dir": ("XDG_CONFIG_HOME", ".config"),
    "user_cache_dir": ("XDG_CACHE_HOME", ".cache"),
}


def _folder(environ: Mapping[str, str], platform_dir: str) -> Path:
    """``$SERVECTL_HOME`` (everything under one folder), else the platform's folder of that kind
    (``platform_dir`` names the platformdirs function).

    On the XDG platforms the folder comes from the environment given (``$XDG_CACHE_HOME``..., else below its
    ``$HOME``), as platformdirs would find it in that environment: platformdirs itself reads the process's, so
    a host built with another environment would share this process's folders. Elsewhere (Windows, macOS: no
    such variables) and where the environment names no absolute home, platformdirs decides."""
    if environ.get("SERVECTL_HOME"):
        return Path(environ["SERVECTL_HOME"]).expanduser()
    if sys.platform not in ("win32", "darwin", "ios") and platform_dir in _XDG_FOLDERS:
        variable, below_home = _XDG_FOLDERS[platform_dir]
        named, home = environ.get(variable, ""), environ.get("HOME", "")
        if os.path.isabs(named):
            return Path(named) / APP_NAME
        if os.path.isabs(home):
            return Path(home) / below_home / APP_NAME
    import platformdirs

    return Path(getattr(platformdirs, platform_dir)(APP_NAME))
