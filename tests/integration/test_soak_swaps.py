"""Soak: consecutive swaps between two stand-in profiles with random faults, on the real engine.

Each round swaps to the other profile with one fault drawn at random (seeded, so a failure replays):
none, the target crashes while loading, the target stalls, SIGINT to a ``servectl swap`` process at a random
moment, ``kill -9`` of it at a random moment (then ``servectl recover``), or the running container removed
behind servectl's back. After every round: exactly one service runs and serves, Docker shows no other
container of this test, no journal is left, and the history's last run event names what runs.

``SERVECTL_SOAK_SWAPS`` sets the number of rounds (default 50; ``SERVECTL_SOAK_SEED`` the seed).
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from test_swap_docker import Bench, bench, settled  # noqa: F401  (the fixture, shared)

from servectl.adapters.state import RUN_EVENTS, History
from servectl.errors import StartupFailed, SwapRolledBack
from servectl.service.journal import read_journal
from servectl.service.recover import recover

pytestmark = pytest.mark.integration

ROUNDS = int(os.environ.get("SERVECTL_SOAK_SWAPS", "50"))
SEED = int(os.environ.get("SERVECTL_SOAK_SEED", "15"))
FAULTS = ("none", "crash", "stall", "sigint", "kill9", "removed")
NORMAL = {"STANDIN_STARTUP_DELAY_S": "0.3"}


def write(b: Bench, name: str, fault: str = "none") -> None:
    env = dict(NORMAL)
    if fault == "crash":
        env["STANDIN_CRASH_AT"] = "weights"  # a real startup phase (standin.settings.PHASES)
    elif fault == "stall":
        env["STANDIN_STALL_AT"] = "kv_cache"
    elif fault in ("sigint", "kill9"):
        env["STANDIN_STARTUP_DELAY_S"] = "2"  # a window to land the signal in
    # a short stall timeout only where the stall is the fault: a healthy start on a busy host can be quiet
    stall_s = 2.0 if fault == "stall" else 15.0
    b.profile(name, env=env, health={"stall_timeout_s": stall_s, "startup_timeout_s": 30})


def running_profile(b: Bench) -> str | None:
    running = settled(b.running)
    assert len(running) <= 1, f"more than one service runs: {running}"
    if not running:
        return None
    (name,) = running
    return name.rsplit("-", 1)[-1]


def test_soak_swaps_with_random_faults_leave_one_service_and_agreeing_state(
    bench: Bench,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(bench.tmp)  # in-process and CLI swaps resolve paths alike (same plan hashes)
    rng = random.Random(SEED)
    # Names unique to this test: the CLI swaps see every servectl container on the host, not only ours.
    alpha, beta = f"a{bench.tid}", f"b{bench.tid}"
    write(bench, alpha)
    write(bench, beta)
    bench.swap(alpha)
    started = time.monotonic()
    log: list[str] = []
    for round_no in range(ROUNDS):
        current = running_profile(bench)
        assert current is not None
        target = beta if current == alpha else alpha
        fault = rng.choice(FAULTS)
        write(bench, target, fault)
        expect = target
        detail = ""
        if fault in ("none", "removed"):
            if fault == "removed":
                bench.client.containers.get(bench.container_name(current)).remove(force=True)
            result = bench.swap(target)
            assert result.outcome in ("swapped", "started"), result.message
        elif fault in ("crash", "stall"):
            with pytest.raises((SwapRolledBack, StartupFailed)) as info:
                bench.swap(target)
            assert isinstance(info.value, SwapRolledBack), info.value
            # the fault itself failed the target, not a settings error of the stand-in
            cause = "stand-in crash injected" if fault == "crash" else "health.stall_timeout_s"
            assert cause in info.value.message, info.value.message
            expect = current
        else:
            proc = bench.cli("swap", target)
            time.sleep(rng.uniform(0.0, 3.5))
            proc.send_signal(signal.SIGINT if fault == "sigint" else signal.SIGKILL)
            _, err = proc.communicate(timeout=120)
            detail = f" (exit {proc.returncode}: {' / '.join(err.strip().splitlines())})"
            if fault == "sigint":
                # -2, or exit 1 with Python's own "Fatal Python error: init_import_site": SIGINT landed while the
                # interpreter was still starting (before servectl's handlers, before any import of servectl)
                in_python_startup = proc.returncode == -2 or (
                    proc.returncode == 1 and "Fatal Python error: init_import_site" in err
                )
                assert proc.returncode in (0, 4, 130) or in_python_startup, err
                assert "Traceback" not in err or in_python_startup
                expect = target if proc.returncode == 0 else current
            else:
                settled_result = recover(bench.context())
                assert "Traceback" not in err and "Traceback" not in settled_result.message
                expect = running_profile(bench) or "nothing runs"  # either is right, as long as one serves
        write(bench, target)  # back to a healthy profile for the next round
        now = running_profile(bench)
        log.append(f"{round_no}: {fault} -> {now}{detail}")
        assert now == expect, "\n".join(log[-3:])
        assert read_journal(bench.home) is None, log
        assert bench.serves(now), log
        last = next(e for e in reversed(History(bench.home, clock=time.time).events()) if e.get("event") in RUN_EVENTS)
        assert last["profile"] == now, (log, last)
        assert settled(bench.containers) == {bench.container_name(now): "running"}, log
    elapsed = time.monotonic() - started
    print(f"soak: {ROUNDS} swaps in {elapsed:.0f} s ({elapsed / max(ROUNDS, 1):.1f} s each): {' | '.join(log)}")
