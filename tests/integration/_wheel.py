"""servectl as a new user installs it: a wheel built from this checkout, installed without ``-e`` into a fresh venv
that cannot see the checkout (no ``PYTHONPATH``), so the shipped profiles, schema and demo model must come from the
package data.

Dependencies come from a wheelhouse under ``~/.cache/servectl-ci`` keyed by the hash of pyproject's runtime, build
and ``bench`` extra requirements: built once (network), then every run installs offline in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SERVECTL_CI_CACHE", "~/.cache/servectl-ci")).expanduser()


def _requirements() -> list[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    return [
        *project["dependencies"],
        *project["optional-dependencies"]["bench"],
        *pyproject["build-system"]["requires"],
        "wheel",
    ]


def pip(*args: str, timeout: float = 600) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # the checkout must stay invisible
    )
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def wheelhouse() -> Path:
    """Wheels of every runtime, build and bench-extra requirement, built once per requirement set and Python."""
    requirements = _requirements()
    key = hashlib.sha256(json.dumps([requirements, sys.version, sys.platform]).encode()).hexdigest()[:16]
    house = CACHE / f"wheelhouse-{key}"
    if (house / ".complete").is_file():
        return house
    partial = CACHE / f"wheelhouse-{key}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    pip("wheel", "-q", "-w", str(partial), *requirements)
    (partial / ".complete").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    try:
        partial.rename(house)
    except OSError:  # another session finished the same wheelhouse first
        shutil.rmtree(partial, ignore_errors=True)
    return house


def install_wheel(root: Path, *, extras: str = "") -> Path:
    """Build servectl's wheel into ``root/dist`` and install it (with ``extras``, e.g. ``"bench"``) into a fresh
    venv ``root/venv``, offline from the wheelhouse; the venv's bin folder."""
    house = wheelhouse()
    pip("wheel", "-q", "--no-deps", "--no-index", "--find-links", str(house), "-w", str(root / "dist"), str(REPO))
    (wheel,) = (root / "dist").glob("servectl-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    target = f"servectl[{extras}] @ {wheel.as_uri()}" if extras else str(wheel)
    pip("--python", str(python), "install", "-q", "--no-index", "--find-links", str(house), target)
    return venv / "bin"


def user_env(bin_dir: Path, *, state: Path, home: Path | None = None, columns: int = 80) -> dict[str, str]:
    """A user's environment for the installed servectl: its venv first on the PATH, nothing of the checkout or of
    this session's servectl settings, ``SERVECTL_HOME`` at ``state`` (and ``HOME`` at ``home`` when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SERVECTL_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["SERVECTL_HOME"] = str(state)
    env["COLUMNS"] = str(columns)
    if home is not None:
        env["HOME"] = str(home)
    return env


_ID_AND_SOURCE = '{{.ID}} {{.Label "servectl.source"}}'


def remove_containers_of(site: Path) -> None:
    """Remove what a failed run left: containers whose profile file lies in this venv (``site``)."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=servectl.managed", "--format", _ID_AND_SOURCE],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    ids = [
        line.split()[0] for line in out.splitlines() if len(line.split()) == 2 and line.split()[1].startswith(str(site))
    ]
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)
