"""A root-owned state folder shared with the gateway's non-root user (uid and gid 65532) through its group.

The gateway container swaps on request: it takes the same state lock and writes the same history as root's
CLI. These tests play the gateway in a forked child that drops to 65532 (they need root, as Docker does).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servectl.adapters.state import History, StateLock, atomic_write_text
from servectl.adapters.state_sharing import SHARED_GID, make_folder, share_state_folder
from servectl.errors import StateAccessDenied

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sharing with another uid needs root")


@pytest.fixture
def state() -> Iterator[Path]:
    # Not under tmp_path: pytest's base folder is 0700, which uid 65532 cannot enter.
    base = Path(tempfile.mkdtemp(prefix="servectl-share-"))
    base.chmod(0o755)
    try:
        yield base / "home"
    finally:
        shutil.rmtree(base)


def _as_gateway(action: Callable[[], str]) -> str:
    """``action()`` run in a child process as uid:gid 65532: its return value, or ``error: <message>``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(SHARED_GID)
            os.setuid(SHARED_GID)
            out = action()
        except Exception as err:  # reported to the parent, which asserts on it
            out = f"error: {type(err).__name__}: {err}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return text


def _swap_steps(state: Path) -> Callable[[], str]:
    def steps() -> str:
        with StateLock(state, 1, purpose="gateway swap"):
            History(state, clock=time.time).record({"event": "swap", "profile": "b"})
            atomic_write_text(state / "standby" / "b.json", "{}\n")
        return "ok"

    return steps


def test_the_gateways_user_cannot_take_a_root_made_lock_and_the_message_says_whose_it_is(state: Path) -> None:
    with StateLock(state, 1):
        pass
    History(state, clock=time.time).record({"event": "up", "profile": "a"})
    out = _as_gateway(_swap_steps(state))
    assert out.startswith("error: StateAccessDenied: "), out
    assert f"{state / 'servectl.lock'}: the lock file is owned by uid 0, gid 0, -rw-r--r--" in out
    assert "servectl runs as uid 65532, gid 65532" in out and "servectl gateway up` as root" in out
    assert "remove it" not in out  # a permission problem is not damage
    assert (state / "servectl.lock").exists()


def test_a_shared_state_folder_lets_the_gateway_swap_and_stays_shared_for_what_root_creates_later(
    state: Path,
) -> None:
    with StateLock(state, 1):
        pass
    History(state, clock=time.time).record({"event": "up", "profile": "a"})
    (state / "profiles").mkdir()
    (state / "profiles" / "a.yaml").write_text("name: a\n")
    share_state_folder(state, keep=[state / "profiles"])
    assert stat.S_IMODE(state.stat().st_mode) & 0o2070 == 0o2070 and state.stat().st_gid == SHARED_GID
    assert (state / "profiles").stat().st_gid == 0  # the user's profiles stay theirs
    assert stat.S_IMODE((state / "profiles" / "a.yaml").stat().st_mode) & 0o020 == 0

    make_folder(state / "gate-passed" / "pending")  # root's CLI, after the share
    History(state, clock=time.time).record({"event": "up", "profile": "a"})
    for folder in (state / "gate-passed", state / "gate-passed" / "pending"):
        assert folder.stat().st_gid == SHARED_GID and stat.S_IMODE(folder.stat().st_mode) & 0o2070 == 0o2070
    assert stat.S_IMODE((state / "history.json.lock").stat().st_mode) & 0o060 == 0o060

    assert _as_gateway(_swap_steps(state)) == "ok"
    events = History(state, clock=time.time).events()
    assert [e["event"] for e in events] == ["up", "up", "swap"]
    assert json.loads((state / "standby" / "b.json").read_text()) == {}
    with StateLock(state, 1):  # root takes the lock file the gateway wrote its note in
        pass
    assert (state / "standby").stat().st_uid == SHARED_GID  # made by the gateway, shared with root's group


def test_a_state_folder_shared_again_is_unchanged_and_a_plain_one_keeps_its_modes(state: Path) -> None:
    atomic_write_text(state / "journal.json", "{}\n")
    assert stat.S_IMODE((state / "journal.json").stat().st_mode) == 0o644  # not shared: as before
    share_state_folder(state)
    before = {p: p.stat() for p in state.rglob("*")}
    share_state_folder(state)
    assert {p: p.stat() for p in state.rglob("*")} == before
    atomic_write_text(state / "journal.json", "{}\n", mode=0o600)
    assert stat.S_IMODE((state / "journal.json").stat().st_mode) == 0o660


def test_a_lock_the_gateway_cannot_open_is_access_denied_not_damage(state: Path) -> None:
    state.mkdir(mode=0o755)
    (state / "servectl.lock").write_text("")
    (state / "servectl.lock").chmod(0o600)
    out = _as_gateway(lambda: str(StateLock(state, 1).acquire()))
    assert out.startswith("error: StateAccessDenied: ") and "-rw-------" in out, out
    assert StateAccessDenied.exit_code == 1
