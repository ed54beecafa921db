"""The state folder: the lock between servectl processes and the history of what ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servectl.adapters.state import History, StateLock, atomic_write_text
from servectl.errors import LockTimeout, ServectlError

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _hold_lock_in_another_process(state_dir: Path, seconds: float) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {SRC!r})
        from servectl.adapters.state import StateLock
        with StateLock(__import__('pathlib').Path({str(state_dir)!r}), 5, purpose="up demo"):
            print("locked", flush=True)
            time.sleep({seconds})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    proc.stdout.close()
    assert line == "locked"
    return proc


_TRY_LOCK = """
import sys
sys.path.insert(0, {src!r})
from pathlib import Path
from servectl.errors import LockTimeout
from servectl.adapters.state import StateLock
try:
    with StateLock(Path({state_dir!r}), 0.2):
        print("locked")
except LockTimeout:
    print("LockTimeout")
"""


def test_second_process_times_out_naming_the_holder_and_what_it_does(tmp_path: Path) -> None:
    holder = _hold_lock_in_another_process(tmp_path, 5)
    try:
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info, StateLock(tmp_path, 0.3):
            pass
        assert 0.3 <= time.monotonic() - t0 < 2
        assert f"another servectl process, pid {holder.pid} (up demo, since" in info.value.message
        assert "waited 0.3 s" in info.value.message
    finally:
        holder.kill()
        holder.wait()


def test_lock_is_taken_once_the_holder_finishes_within_the_wait(tmp_path: Path) -> None:
    holder = _hold_lock_in_another_process(tmp_path, 0.3)
    try:
        with StateLock(tmp_path, 5) as lock:
            assert json.loads((tmp_path / "servectl.lock").read_text())["pid"] == os.getpid()
            assert lock.path.exists()
    finally:
        holder.wait()


def test_lock_is_reentrant_within_one_process(tmp_path: Path) -> None:
    with StateLock(tmp_path, 0.2):
        with StateLock(tmp_path, 0.2):
            pass
        # the inner exit must not release the outer hold: another process still cannot take it
        probe = subprocess.run(
            [sys.executable, "-c", _TRY_LOCK.format(src=SRC, state_dir=str(tmp_path))],
            capture_output=True,
            text=True,
        )
        assert probe.stdout.strip() == "LockTimeout", probe.stderr
    holder = _hold_lock_in_another_process(tmp_path, 0)  # released: another process can take it
    assert holder.wait() == 0


def test_history_records_events_in_order_with_a_time(tmp_path: Path) -> None:
    clock = iter([100.0, 200.0])
    history = History(tmp_path, clock=lambda: next(clock))
    history.record({"event": "up", "profile": "a"})
    history.record({"event": "down", "profile": "a"})
    assert history.events() == [
        {"t": 100.0, "event": "up", "profile": "a"},
        {"t": 200.0, "event": "down", "profile": "a"},
    ]


def test_previous_profile_is_the_last_other_profile_that_ran(tmp_path: Path) -> None:
    history = History(tmp_path, clock=time.time)
    assert history.previous_profile() is None and history.last_run() is None
    for event in [("up", "a"), ("down", "a"), ("up", "b"), ("failed", "c"), ("up", "b")]:
        history.record({"event": event[0], "profile": event[1]})
    assert history.previous_profile() == "a"
    assert history.last_run() is not None and history.last_run()["profile"] == "b"  # type: ignore[index]
    history.record({"event": "swap", "profile": "c", "replaced": "b"})
    assert history.previous_profile() == "b"
    history.record({"event": "rollback", "profile": "c", "replaced": "c"})  # names itself: the run before counts
    assert history.previous_profile() == "b"


def test_history_rejects_events_that_are_not_json_before_touching_the_file(tmp_path: Path) -> None:
    history = History(tmp_path, clock=time.time)
    history.record({"event": "up", "profile": "a"})
    with pytest.raises(TypeError):
        history.record({"event": "up", "profile": object()})
    assert len(history.events()) == 1


def test_corrupt_history_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "history.json").write_text("[{")
    with pytest.raises(ServectlError, match=r"history\.json: the history is not valid JSON"):
        History(tmp_path, clock=time.time).events()


def test_atomic_write_leaves_no_temporary_files_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "key"
    atomic_write_text(target, "secret\n", mode=0o600)
    atomic_write_text(target, "new\n", mode=0o600)
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["key"]


def test_concurrent_history_writers_lose_no_event(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from servectl.adapters.state import History
        h = History(__import__('pathlib').Path({str(tmp_path)!r}), clock=__import__('time').time)
        for i in range(20):
            h.record({{"event": "up", "profile": sys.argv[1] + str(i)}})
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, tag]) for tag in ("a", "b")]
    for proc in procs:
        assert proc.wait() == 0
    profiles = {e["profile"] for e in History(tmp_path, clock=time.time).events()}
    assert profiles == {f"{tag}{i}" for tag in "ab" for i in range(20)}
