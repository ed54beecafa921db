"""Real agent clients for the ``clients`` gate's tests: Pi (npm) and Hermes (PyPI), pinned, cached by version.

Each client is installed once per machine under ``~/.cache/servectl-ci/client-<name>-<version>`` (or
``$SERVECTL_CI_CACHE``); a ``.complete`` file written last marks a finished install, so an interrupted one is
started again. ``python3 -m servectl_ci.agent_clients`` installs both and prints, per client, the
executable and the seconds the install took (0 when cached). :func:`client_environ` gives the
``SERVECTL_CLIENT_<NAME>`` variables the gate reads.

OpenClaw is not installed here: its releases need Node >= 24, and CI machines have Node 20.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from servectl_ci.sglang_venv import cache_root


@dataclass(frozen=True)
class PinnedClient:
    """A client at one version: where it installs from and where its executable ends up."""

    name: str
    version: str
    kind: str  # "npm" or "pip"
    package: str
    executable: str  # relative to the install folder

    def folder(self, root: Path | None = None) -> Path:
        return (root or cache_root()) / f"client-{self.name}-{self.version}"

    def path(self, root: Path | None = None) -> Path:
        return self.folder(root) / self.executable


PINNED: tuple[PinnedClient, ...] = (
    PinnedClient("pi", "0.73.1", "npm", "@mariozechner/pi-coding-agent", "node_modules/.bin/pi"),
    PinnedClient("hermes", "0.19.0", "pip", "hermes-agent", "venv/bin/hermes"),
)


def ensure_client(client: PinnedClient, root: Path | None = None) -> tuple[Path, float]:
    """Install ``client`` unless cached; ``(executable, seconds spent installing)``.

    Raises:
        RuntimeError: the install failed (npm / pip output included).
    """
    target = client.folder(root)
    done = target / ".complete"
    if done.is_file() and client.path(root).is_file():
        return client.path(root), 0.0
    started = time.perf_counter()
    shutil.rmtree(target, ignore_errors=True)  # an interrupted install: start again
    target.mkdir(parents=True)
    if client.kind == "npm":
        _run(["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error",
              f"{client.package}@{client.version}"], client)  # fmt: skip
    else:  # a venv's scripts name their folder, so it is made in place; .complete marks it finished
        _run([sys.executable, "-m", "venv", str(target / "venv")], client)
        _run([str(target / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"{client.package}=={client.version}"], client)  # fmt: skip
    done.write_text(f"{client.package} {client.version}\n", encoding="utf-8")
    return client.path(root), time.perf_counter() - started


def _run(cmd: list[str], client: PinnedClient) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        raise RuntimeError(f"installing {client.name} {client.version} failed: {output}")


def installed(root: Path | None = None) -> dict[str, Path]:
    """The pinned clients already in the cache, by name."""
    return {c.name: c.path(root) for c in PINNED if (c.folder(root) / ".complete").is_file()}


def client_environ(root: Path | None = None) -> dict[str, str]:
    """``SERVECTL_CLIENT_<NAME>`` for each cached client (the gate finds them there)."""
    return {f"SERVECTL_CLIENT_{name.upper()}": str(path) for name, path in installed(root).items()}


def main() -> None:
    if shutil.which("npm") is None:
        print("npm is not installed: Pi cannot be installed (apt-get install npm)", file=sys.stderr)
    for client in PINNED:
        if client.kind == "npm" and shutil.which("npm") is None:
            continue
        path, seconds = ensure_client(client)
        print(f"{client.name} {client.version}: {path} (installed in {seconds:.0f} s)")


if __name__ == "__main__":
    main()
