"""Every state file and folder, damaged every way, against every command: no healthy service is stopped, no
traceback (issue 25).

A healthy service runs (``a``, which replaced ``b``), then one entry of the state folder is damaged: empty,
binary, truncated, of the wrong type, a folder where a file belongs, a file where a folder belongs, a FIFO, a
symbolic link loop. Then ``status``, ``up``, ``swap``, ``rollback``, ``recover`` and ``down`` run against it
through the real runtime on the fake engine. Each returns or raises one ``ServectlError``; until ``down``, a
service that passed its gate (the old one or its successor) serves after every command. ``status`` never
fails. The real engine runs a representative subset in ``tests/integration/test_robust_docker.py``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.conflicts import STOPPED_CONFLICTS_FILE
from servectl.adapters.state import GATE_DIR, HISTORY_FILE, LOCK_FILE, PENDING_DIR, History
from servectl.errors import ServectlError
from servectl.service import runtime
from servectl.service.clocks import Clocks
from servectl.service.container import DockerRuntime
from servectl.service.context import Context
from servectl.service.journal import JOURNAL_FILE, status_notes
from servectl.service.recover import recover
from servectl.service.rollback import rollback
from servectl.service.services import ServiceRecords, services
from servectl.service.swap import SwapOptions, swap
from servectl.standin.process import free_port
from servectl.testing.docker import FakeDockerEngine, sglang_like_script, write_test_profile
from servectl.testing.http import FakeHttp
from servectl.testing.swap import FakeConflicts

FOLDER, FIFO, LOOP, JUNK_INSIDE = "folder", "fifo", "loop", "junk-inside"
WRONG_TYPE = b'[1, "two", {"event": 3, "profile": ["a"]}, {"event": "up", "profile": 4}]'
FILE_DAMAGE: dict[str, bytes | str] = {
    "empty": b"",
    "binary": b"\xff\xfe\x00\x81junk",
    "truncated": b'[{"event": "up", "prof',
    "wrong type": WRONG_TYPE,
    "folder-for-file": FOLDER,
    "fifo": FIFO,
    "symlink loop": LOOP,
}
FOLDER_DAMAGE: dict[str, bytes | str] = {
    "file-for-folder (empty)": b"",
    "file-for-folder (binary)": b"\xff\xfe\x00\x81junk",
    "fifo": FIFO,
    "symlink loop": LOOP,
    "junk inside": JUNK_INSIDE,
}
FILES = (HISTORY_FILE, f"{HISTORY_FILE}.lock", JOURNAL_FILE, STOPPED_CONFLICTS_FILE, LOCK_FILE)
FOLDERS = (GATE_DIR, f"{GATE_DIR}/{PENDING_DIR}", "generated")
CASES = [(f, d) for f in FILES for d in FILE_DAMAGE] + [(f, d) for f in FOLDERS for d in FOLDER_DAMAGE]


def damage(path: Path, how: bytes | str) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in sorted(path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        path.rmdir()
    else:
        path.unlink(missing_ok=True)
    if how == FOLDER:
        path.mkdir()
    elif how == FIFO:
        os.mkfifo(path)
    elif how == LOOP:
        path.symlink_to(path)
    elif how == JUNK_INSIDE:
        path.mkdir()
        (path / "not-an-id").write_bytes(b"\xff\xfe")
        (path / "0123abc").mkdir()
    else:
        assert isinstance(how, bytes)
        path.write_bytes(how)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    folder, home = tmp_path / "profiles", tmp_path / "home"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_HOME", str(home))
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    shared = free_port()
    write_test_profile(folder, "a", port=shared)
    write_test_profile(folder, "b", port=shared)  # a and b replace each other
    write_test_profile(folder, "c", port=free_port())  # c runs beside them
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"}, script_for=lambda s: sglang_like_script(0.01), sleep=lambda s: None
    )
    with FakeHttp(engine.http_transport()) as http:
        yield {
            "home": home,
            "engine": engine,
            "http": http,
            "environ": {"HOME": str(tmp_path), "SERVECTL_HOME": str(home)},
        }


def no_preflight(**kwargs: Any) -> None:
    return None


def clean(call: Callable[[], object]) -> str:
    """Run ``call``: it returns, or raises one ServectlError without a traceback; the error's text or ''."""
    try:
        call()
    except ServectlError as err:
        text = str(err)
        assert err.lines() and "Traceback" not in text
        return text
    return ""


@pytest.mark.parametrize(("entry", "how"), CASES, ids=[f"{e}:{d}" for e, d in CASES])
def test_a_damaged_state_entry_never_stops_a_healthy_service_nor_shows_a_traceback(
    world: dict[str, Any], entry: str, how: str
) -> None:
    home: Path = world["home"]
    engine, http, environ = world["engine"], world["http"], world["environ"]
    common = {"docker": engine, "state_dir": home, "lock_timeout_s": 1, "nvml": False}
    up_ctx = Context(http=http, environ=environ, **common)  # as the host builds it: every part on the engine
    # the transactions: the real runtime with the fake engine's HTTP transport bound in, conflicts in memory
    rt = DockerRuntime(
        docker=engine, http=http, environ={}, state_dir=home, history=History(home, clock=time.time), clocks=Clocks()
    )
    tx_ctx = Context(runtime=rt, conflicts=FakeConflicts([]), **common)
    tx = SwapOptions(preflight=no_preflight, handle_signals=False)
    runtime.up(up_ctx, name="b")
    swap(tx_ctx, target="a", opts=tx)  # a healthy service, with history to roll back along
    damage(home / entry, (FILE_DAMAGE if entry in FILES else FOLDER_DAMAGE)[how])

    def serving() -> set[str]:
        return {c.labels.get("servectl.profile", "") for c in engine.list_managed(None) if c.running}

    assert serving() == {"a"}
    seen = [entry, how]
    # status never fails: a note per damaged file, what Docker says for the rest
    assert all("\n" not in note for note in status_notes(state_dir=home, history=History(home, clock=time.time)))
    assert {
        s.profile
        for s in services(
            docker=engine, http=http, records=ServiceRecords(home, History(home, clock=time.time)), clock=time.time
        )
    } == {"a"}
    for name, command in (
        ("up", lambda: runtime.up(up_ctx, name="c")),
        ("swap", lambda: swap(tx_ctx, target="b", opts=tx)),
        ("rollback", lambda: rollback(tx_ctx, opts=tx)),
        ("recover", lambda: recover(tx_ctx)),
    ):
        seen.append(f"{name}: {clean(command)[:160]}")
        assert serving() & {"a", "b"}, f"no healthy service after {name}: {seen}"
    down_ctx = Context(**common)  # down's own: the runtime and conflicts on the engine
    seen.append(f"down: {clean(lambda: runtime.down(down_ctx, name='c'))[:160]}")
    seen.append(f"down: {clean(lambda: runtime.down(down_ctx, name=None))[:160]}")
