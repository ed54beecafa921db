"""The README runs as written: its shell and Python blocks, in order, from a plain wheel install (with the
``bench`` extra, as the Quickstart installs it), in a clean state folder (``SERVECTL_HOME``), a fresh ``HOME`` and an
empty working folder, on the stand-in engine. Each command's exit status is checked; a block that cannot run here
is marked with its reason (``<!-- readme-test: skip - REASON -->``, see ``_docblocks.py``) and counted, and the
README's Development section states the counts, so skipping a block is a visible edit. docs/cli.md's examples
marked ``<!-- readme-test: run -->`` run the same way.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _docblocks import Block, read_blocks
from _wheel import REPO, install_wheel, remove_containers_of, user_env

pytestmark = pytest.mark.integration

README = REPO / "README.md"
CLI_DOC = REPO / "docs" / "cli.md"
#: The README's sentence that counts its blocks; the test checks it against the marks.
COUNTS = re.compile(r"runs (\d+) of its blocks and skips (\d+)")


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield install_wheel(tmp_path_factory.mktemp("readme-wheel"), extras="bench")


class Reader:
    """Runs a document's blocks as a user at a terminal would, one command at a time, recording every result."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir = bin_dir
        self.work = root / "work"
        for folder in (self.work, root / "home", root / "state"):
            folder.mkdir()
        self.env = user_env(bin_dir, state=root / "state", home=root / "home", columns=100)
        self.transcript: list[str] = []
        self.failures: list[str] = []

    def run_block(self, block: Block) -> None:
        for command in block.commands:
            if block.kind == "python":
                argv = [str(self.bin_dir / "python"), "-c", command.text]
            else:
                argv = ["bash", "-o", "pipefail", "-c", command.text]
            t0 = time.monotonic()
            try:
                done = subprocess.run(
                    argv, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=300, check=False
                )
                rc, out = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as err:
                rc, out = 124, f"timed out after 300 s\n{err.stdout or ''}{err.stderr or ''}"
            where = f"{block.path.name}:{command.line}"
            first = command.text.strip().splitlines()[0]
            self.transcript.append(f"{where}: exit {rc} in {time.monotonic() - t0:.1f} s: {first}")
            if rc != 0:
                tail = "\n".join(f"    {line}" for line in out.strip().splitlines()[-12:])
                self.failures.append(f"{where}: `{first}` exited {rc}:\n{tail}")

    def clean_up(self, site: Path) -> None:
        """Stop what the document started (the gateway, the services) and remove any container left behind."""
        for args in (["gateway", "down"], ["down"]):
            subprocess.run(
                [str(self.bin_dir / "servectl"), *args],
                cwd=self.work,
                env=self.env,
                capture_output=True,
                timeout=120,
                check=False,
            )
        remove_containers_of(site)

    def verdict(self) -> str:
        return "\n".join(self.transcript) + "\n\nfailed:\n" + "\n".join(self.failures)


def test_the_readme_s_blocks_are_marked_with_a_reason_and_counted_in_the_readme() -> None:
    blocks = read_blocks(README)
    skipped = [b for b in blocks if b.mark == "skip"]
    assert [b.where for b in skipped if not b.reason] == [], "a skip mark must say why the block cannot run here"
    assert [b.where for b in blocks if b.mark != "skip" and not b.commands] == [], "a block to run has no command"
    stated = COUNTS.search(README.read_text(encoding="utf-8"))
    assert stated, f"the README's Development section must say how many blocks the test runs ({COUNTS.pattern})"
    assert (int(stated.group(1)), int(stated.group(2))) == (len(blocks) - len(skipped), len(skipped)), (
        "update the README's count: " + ", ".join(f"{b.where} skip ({b.reason})" for b in skipped)
    )


def test_every_readme_block_runs_in_order_from_a_plain_install_on_the_stand_in(
    venv_bin: Path, tmp_path: Path, docker_client: object
) -> None:
    reader = Reader(venv_bin, tmp_path)
    try:
        for block in read_blocks(README):
            if block.mark != "skip":
                reader.run_block(block)
    finally:
        reader.clean_up(venv_bin.parent)
    assert not reader.failures, reader.verdict()


def test_the_examples_of_docs_cli_md_marked_runnable_run(venv_bin: Path, tmp_path: Path, docker_client: object) -> None:
    blocks = [b for b in read_blocks(CLI_DOC) if b.mark == "run"]
    assert blocks, "docs/cli.md has no example marked <!-- readme-test: run -->"
    reader = Reader(venv_bin, tmp_path)
    try:
        for block in blocks:
            reader.run_block(block)
    finally:
        reader.clean_up(venv_bin.parent)
    assert not reader.failures, reader.verdict()
