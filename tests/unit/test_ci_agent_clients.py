"""The CI client installer's cache rules and OpenClaw's launcher, without the registry (fake Node and client).

The real install (npm, the ``node`` package, OpenClaw) runs in scripts/test.sh; here a shell script stands in
for the Node binary, so what the launcher hands it can be read back.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from servectl_ci.agent_clients import NODE, PINNED, _write_launcher, client_environ, installed

OPENCLAW = next(c for c in PINNED if c.name == "openclaw")


def fake_node(root: Path) -> None:
    node = NODE.path(root)
    node.parent.mkdir(parents=True)
    node.write_text('#!/bin/sh\necho "PATH=$PATH"\necho "ARGS=$*"\n')
    node.chmod(0o755)


def test_the_launcher_runs_the_entry_on_the_pinned_node_first_on_path(tmp_path: Path) -> None:
    fake_node(tmp_path)
    entry = OPENCLAW.folder(tmp_path) / OPENCLAW.entry
    entry.parent.mkdir(parents=True)
    entry.write_text("// openclaw\n")
    _write_launcher(OPENCLAW, NODE, tmp_path)
    out = subprocess.run(
        [str(OPENCLAW.path(tmp_path)), "agent", "exec", "say 'hi'"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    assert f"PATH={NODE.bin_dir(tmp_path)}:/usr/bin:/bin\n" in out
    assert f"ARGS={entry} agent exec say 'hi'\n" in out


def test_only_a_finished_install_of_the_same_pin_counts_as_cached(tmp_path: Path) -> None:
    for client in PINNED:
        client.folder(tmp_path).mkdir(parents=True)
    (OPENCLAW.folder(tmp_path) / ".complete").write_text(OPENCLAW.marker())
    pi = next(c for c in PINNED if c.name == "pi")
    (pi.folder(tmp_path) / ".complete").write_text(f"{pi.package} 0.0.1\n")  # another pin, same folder name
    assert set(installed(tmp_path)) == {"openclaw"}
    assert client_environ(tmp_path) == {"SERVECTL_CLIENT_OPENCLAW": str(OPENCLAW.path(tmp_path))}
    assert OPENCLAW.marker() == f"openclaw {OPENCLAW.version} on node {NODE.version}\n"
