"""What the gpu tests share: a torch process holding memory on a card, nvidia-smi's rows, the numbers log.

The holder (``holder.py`` beside this file) stands in for a foreign process or an engine on the card; the
tests compare what servectl's NVML inventory reads with what nvidia-smi and torch report.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HOLDER = Path(__file__).with_name("holder.py")


@dataclass
class Holder:
    """A torch process holding memory on one card (NVML numbering)."""

    process: subprocess.Popen[str]
    pid: int
    uuid: str
    card: int
    gib: float

    def say(self, command: str) -> str:
        """Send one command to the holder; its one-line answer."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def ask(self, command: str, answer: str) -> None:
        """Send one command and check that the holder answers ``answer``."""
        said = self.say(command)
        assert said == answer, f"the holder answered {said!r} to {command!r}"

    def mem_get_info(self) -> tuple[int, int]:
        """``torch.cuda.mem_get_info`` in the holder: (free, total) bytes."""
        words = self.say("meminfo").split()
        assert words and words[0] == "meminfo", f"holder answered {words!r}"
        return int(words[1]), int(words[2])

    def stop(self) -> None:
        """End the holder and wait for it."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write("exit\n")
                self.process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_holder(card: int, gib: float) -> Holder:
    """Start a torch process that holds ``gib`` GiB on ``card``; wait until it has allocated.

    Skips the test where torch is missing; fails it where the holder does not say ``ready``.
    """
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: it is what holds memory on the card")
    process = subprocess.Popen(
        [sys.executable, str(HOLDER), "--card", str(card), "--gib", str(gib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    words = process.stdout.readline().split()
    if not words or words[0] != "ready":
        process.kill()
        process.wait(timeout=30)
        pytest.fail(f"the GPU holder did not start (said {words!r}, exit {process.poll()})")
    return Holder(process=process, pid=int(words[1]), uuid=words[2], card=card, gib=gib)


def nvidia_smi(*query: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-...=... --format=csv,noheader,nounits``, cells stripped."""
    out = subprocess.run(
        ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


def uuid_key(uuid: str | None) -> str:
    """UUIDs as NVML and torch spell them differ by a ``GPU-`` prefix."""
    return (uuid or "").lower().removeprefix("gpu-")


def record(what: str, **numbers: Any) -> None:
    """Print the compared numbers, and append them to $SERVECTL_GPU_NUMBERS when set."""
    line = json.dumps({"what": what, **numbers})
    print(line)
    path = os.environ.get("SERVECTL_GPU_NUMBERS")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")
