"""A warm standby's release/resume cycles with SGLang's memory-saver library on a real card (issue 38).

``saver_engine.py`` holds memory as SGLang's scheduler does with ``--enable-memory-saver
--enable-weights-cpu-backup``: torch_memory_saver's ``weights`` region (with its CPU backup) and ``kv_cache``
region, under the library's preload hook. Five release/resume cycles, each read with servectl's NVML inventory
after every step and each held to the fingerprint of the first start with servectl's own comparison
(:func:`servectl.service.fingerprint.difference`); a weight written in the CPU backup while released must be
caught as corruption, and a cold start (a fresh process) must give the first fingerprint again. The library
ends a process that pauses a paused region or resumes an active one (the catalog's ``library`` lines), as it
ends SGLang's scheduler. Both the default backup (pinned memory allocated at every pause) and
``TMS_RETAIN_CPU_BACKUP=1`` (kept between cycles) are timed.

Run on a machine with an NVIDIA GPU, torch and torch_memory_saver (``pytest -m gpu tests/gpu``); skipped
otherwise. ``SERVECTL_GPU_NUMBERS=path`` appends the numbers there as JSON lines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import record, uuid_key

from servectl.adapters.gpu import MIB, NvmlInventory
from servectl.profile.memory_saver import load_memory_saver
from servectl.service.fingerprint import Fingerprint, difference

pytestmark = pytest.mark.gpu

ENGINE = Path(__file__).with_name("saver_engine.py")
FILLER_GIB = float(os.environ.get("SERVECTL_GPU_SAVER_GIB", "16"))
KV_GIB = 4.0
CYCLES = 5
#: What the released process may keep: its CUDA context and torch's workspaces outside the regions.
KEPT_LIMIT_BYTES = 3 * 2**30


@dataclass
class SaverEngine:
    process: subprocess.Popen[str]
    pid: int
    uuid: str

    def say(self, command: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def seconds(self, command: str, answer: str) -> float:
        words = self.say(command).split()
        assert words and words[0] == answer, f"{command}: the engine said {words!r}"
        return float(words[1])

    def fingerprint(self) -> tuple[Fingerprint, int]:
        words = self.say("fingerprint").split(" ", 1)
        assert words[0] == "fingerprint", words
        data = json.loads(words[1])
        return Fingerprint.from_list(data["samples"]), int(data["checksum"])

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.say("exit")
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=60)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def _popen(*extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("torch_memory_saver") is None:
        pytest.skip("torch and torch_memory_saver are what hold the memory")
    from torch_memory_saver import configure_subprocess

    with configure_subprocess():  # LD_PRELOAD of the library's hook, as SGLang starts its scheduler
        return subprocess.Popen(
            [sys.executable, str(ENGINE), "--filler-gib", str(FILLER_GIB), "--kv-gib", str(KV_GIB), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )


def start_engine(env: dict[str, str] | None = None, *extra: str) -> SaverEngine:
    """A saver engine (``extra``: more of saver_engine.py's options, e.g. ``--card 1``), once it said ready."""
    process = _popen(*extra, env=env)
    assert process.stdout is not None
    words = process.stdout.readline().split()
    if not words or words[0] != "ready":
        process.kill()
        _, err = process.communicate(timeout=60)
        pytest.fail(f"the saver engine did not start (said {words!r}): {err[-2000:]}")
    return SaverEngine(process, int(words[1]), words[2])


@pytest.fixture
def engines() -> Iterator[list[SaverEngine]]:
    started: list[SaverEngine] = []
    yield started
    for engine in started:
        engine.stop()


def card(inventory: NvmlInventory, engine: SaverEngine) -> dict[str, Any]:
    """The engine's card by NVML: its free MiB and the engine's own use."""
    snapshot = inventory.snapshot()
    device = next(d for d in snapshot.devices if uuid_key(d.uuid) == uuid_key(engine.uuid))
    assert device.memory_free_bytes is not None and device.processes is not None
    ours = [p.used_memory_bytes for p in device.processes if p.pid == engine.pid]
    return {"index": device.index, "free_bytes": device.memory_free_bytes, "pid_bytes": ours[0] if ours else None}


@pytest.mark.parametrize("retain", [False, True], ids=["default-backup", "retained-backup"])
def test_five_cycles_keep_the_fingerprint_and_a_flipped_backup_weight_is_caught(
    inventory: NvmlInventory, engines: list[SaverEngine], retain: bool
) -> None:
    env = {"TMS_RETAIN_CPU_BACKUP": "1"} if retain else {}
    engine = start_engine(env)
    engines.append(engine)
    first, checksum = engine.fingerprint()
    full = card(inventory, engine)
    held = full["pid_bytes"]
    assert held is not None and held >= (FILLER_GIB + KV_GIB) * 2**30
    regions = int((FILLER_GIB + KV_GIB) * 2**30)
    cycles = []
    for cycle in range(1, CYCLES + 1):
        release_s = engine.seconds("release", "released")
        released = card(inventory, engine)
        resume_s = engine.seconds("resume", "resumed")
        back = card(inventory, engine)
        now, now_checksum = engine.fingerprint()
        departs = difference(first, now)
        kept = released["pid_bytes"]
        cycles.append(
            {
                "cycle": cycle,
                "release_s": release_s,
                "resume_s": resume_s,
                "held_mib": held // MIB,
                "kept_mib": None if kept is None else kept // MIB,
                "back_mib": None if back["pid_bytes"] is None else back["pid_bytes"] // MIB,
                "freed_mib": (released["free_bytes"] - full["free_bytes"]) // MIB,
                "fingerprint": departs or "same",
                "filler_checksum_same": now_checksum == checksum,
            }
        )
        assert departs is None, f"cycle {cycle}: {departs}"
        assert now_checksum == checksum, f"cycle {cycle}: the filler came back different"
        assert kept is not None and kept <= KEPT_LIMIT_BYTES, f"cycle {cycle}: kept {kept} bytes"
        assert released["free_bytes"] - full["free_bytes"] >= regions - 256 * MIB
        assert back["pid_bytes"] is not None and abs(back["pid_bytes"] - held) <= 256 * MIB
    engine.seconds("release", "released")
    assert engine.say("flip") == "flipped"
    engine.seconds("resume", "resumed")
    corrupt, _ = engine.fingerprint()
    caught = difference(first, corrupt)
    assert caught is not None, "a weight flipped in the CPU backup went unnoticed"
    engine.stop()
    cold = start_engine(env)  # the way back after corruption: a cold start, weights from their source
    engines.append(cold)
    again, again_checksum = cold.fingerprint()
    assert difference(first, again) is None and again_checksum == checksum
    record(
        "memory_saver_cycles",
        retain_cpu_backup=retain,
        filler_gib=FILLER_GIB,
        kv_gib=KV_GIB,
        card=full["index"],
        cycles=cycles,
        corruption=caught,
        cold_start_fingerprint="same",
    )


@pytest.mark.parametrize("misuse", ["pause-twice", "resume-unpaused"])
def test_the_library_ends_a_process_that_pauses_twice_or_resumes_what_is_active(
    inventory: NvmlInventory, misuse: str
) -> None:
    process = _popen("--misuse", misuse)
    out, err = process.communicate(timeout=300)
    library = load_memory_saver()["library"]
    line = library["pause_paused"] if misuse == "pause-twice" else library["resume_active"]
    assert "survived" not in out and out.startswith("ready ")
    assert process.returncode == library["exit_status"] == 1
    assert line.strip() in err, err[-2000:]
    record("memory_saver_misuse", misuse=misuse, exit_status=process.returncode, line=line.strip())
