"""Every command stays clean with any content in any state file: a result or one ServectlError line.

Runs the core of ``status``, ``up``, ``down``, ``swap``, ``rollback`` and ``recover`` on the fake engine after
writing random bytes or random JSON into the history, the journal, the record of stopped conflicts or the
lock file. No other exception may escape, and nothing may hang (hypothesis' deadline).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl.adapters.conflicts import STOPPED_CONFLICTS_FILE
from servectl.adapters.state import HISTORY_FILE, LOCK_FILE, History
from servectl.errors import ServectlError, StateDamaged
from servectl.service import runtime
from servectl.service.context import Context
from servectl.service.journal import JOURNAL_FILE, SwapJournal, status_notes
from servectl.service.recover import recover
from servectl.service.rollback import rollback
from servectl.service.services import ServiceRecords, services
from servectl.service.swap import SwapOptions, swap
from servectl.standin.process import free_port
from servectl.testing.docker import FakeDockerEngine, sglang_like_script, write_test_profile
from servectl.testing.fakes import FakeHostProbe
from servectl.testing.http import FakeHttp
from servectl.testing.swap import FakeClock, FakeConflicts, FakeRuntime

STATE_FILES = (HISTORY_FILE, JOURNAL_FILE, STOPPED_CONFLICTS_FILE, LOCK_FILE)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
JOURNAL_LIKE = st.fixed_dictionaries(
    {"pid": JSON | st.integers(), "to_profile": JSON | st.just("a"), "phase": JSON, "started_at": JSON},
    optional={"from_profile": JSON | st.just("b"), "previous": JSON, "stopped_conflicts": JSON, "kind": JSON},
)
CONTENT = (
    st.binary(max_size=120)
    | JSON.map(lambda v: json.dumps(v).encode())
    | JOURNAL_LIKE.map(lambda v: json.dumps(v).encode())
)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    folder, home = tmp_path / "profiles", tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("SERVECTL_HOME", str(home))
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    write_test_profile(folder, "a", port=free_port())
    write_test_profile(folder, "b", port=free_port())
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"}, script_for=lambda s: sglang_like_script(0.01), sleep=lambda s: None
    )
    with FakeHttp(engine.http_transport()) as http:
        yield {
            "home": home,
            "engine": engine,
            "http": http,
            "environ": {"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)},
            "runtime": FakeRuntime(FakeClock()),
        }


def host_context(world: dict[str, Any]) -> Context:
    """The context a host builds on the fake engine and an idle fake host (no GPU inventory)."""
    return Context(
        docker=world["engine"],
        http=world["http"],
        environ=world["environ"],
        state_dir=world["home"],
        nvml=False,
        probe=FakeHostProbe(model_folders_from_disk=True),
    )


def no_preflight(**kwargs: Any) -> None:
    return None


def clean(call: Any) -> None:
    """Run ``call``: it returns, or raises a ServectlError whose lines name no traceback."""
    try:
        call()
    except ServectlError as err:
        assert err.lines() and all("Traceback" not in line for line in err.lines())


@settings(max_examples=60, deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(STATE_FILES), content=CONTENT)
def test_every_command_is_clean_with_any_state_file_content(world: dict[str, Any], which: str, content: bytes) -> None:
    home: Path = world["home"]
    engine, http, environ = world["engine"], world["http"], world["environ"]
    for name in STATE_FILES:
        (home / name).unlink(missing_ok=True)
    for c in list(engine.list_managed(None)):
        engine.remove(c.id, force=True)
    world["runtime"].running.clear()
    home.mkdir(parents=True, exist_ok=True)
    (home / which).write_bytes(content)
    common = {
        "docker": engine,
        "state_dir": home,
        "lock_timeout_s": 1,
        "nvml": False,
        "probe": FakeHostProbe(model_folders_from_disk=True),
    }
    host = Context(http=http, environ=environ, **common)
    # swap, rollback and recover drive the in-memory runtime: the state files are what is under test here
    fakes = Context(
        runtime=world["runtime"],
        conflicts=FakeConflicts([]),
        docker=FakeDockerEngine(),
        state_dir=home,
        lock_timeout_s=1,
        nvml=False,
    )
    opts = SwapOptions(handle_signals=False, preflight=no_preflight)
    clean(
        lambda: services(
            docker=engine, http=http, records=ServiceRecords(home, History(home, clock=time.time)), clock=time.time
        )
    )
    notes = status_notes(state_dir=home, history=History(home, clock=time.time))  # status never fails on a state file
    assert all("\n" not in note for note in notes)
    clean(lambda: runtime.up(host, name="a"))
    clean(lambda: runtime.down(Context(**common), name=None))
    clean(lambda: swap(fakes, target="b", opts=opts))
    clean(lambda: rollback(fakes, opts=opts))
    clean(lambda: recover(fakes))


def test_up_whose_history_write_fails_removes_the_service_and_says_so(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(self: History, event: Any) -> None:
        if event.get("event") == "up":
            raise StateDamaged(f"{self.path}: cannot write the history (No space left on device)")

    monkeypatch.setattr(History, "record", fail)
    with pytest.raises(ServectlError) as info:
        runtime.up(host_context(world), name="a")
    (line,) = info.value.lines()
    assert "a passed its health gate, but servectl failed" in line and "No space left on device" in line
    assert "it was removed, nothing of it runs" in line
    assert list(world["engine"].list_managed(None)) == []
    assert not (world["home"] / JOURNAL_FILE).exists()


def test_a_killed_up_journal_is_settled_by_the_next_up_of_that_profile(world: dict[str, Any]) -> None:
    home: Path = world["home"]
    home.mkdir(parents=True, exist_ok=True)
    left = SwapJournal(pid=1, from_profile=None, to_profile="a", phase="start-target", started_at=1.0, kind="up")
    (home / JOURNAL_FILE).write_text(json.dumps(left.to_dict()))
    result = runtime.up(host_context(world), name="a")
    assert result.action == "started" and not (home / JOURNAL_FILE).exists()
