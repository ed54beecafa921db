"""State files are data that can be damaged: every read is one StateDamaged line, never a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl.adapters.conflicts import STOPPED_CONFLICTS_FILE, StoppedConflict, load_stopped, record_stopped
from servectl.adapters.state import GateRecord, History, StateLock, ready_container_ids
from servectl.errors import StateDamaged

DAMAGE: dict[str, bytes | None] = {
    "binary": b"\xff\xfe\x00\x81garbage",
    "empty": b"",
    "truncated": b'[{"event": "up", "prof',
    "not a list": b'{"event": "up"}',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "huge int": b"[" + b"9" * 5000 + b"]",
    "folder": None,
}


def damage(path: Path, content: bytes | None) -> None:
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)


def one_line(err: StateDamaged, path: Path) -> str:
    (line,) = err.lines()
    assert line.startswith(f"{path}: ")
    return line


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_history_read_is_one_line_naming_the_file_and_the_fix(tmp_path: Path, kind: str) -> None:
    history = History(tmp_path, clock=time.time)
    damage(history.path, DAMAGE[kind])
    with pytest.raises(StateDamaged) as info:
        history.events()
    assert "move it aside" in one_line(info.value, history.path)
    events, warning = history.readable_events()
    assert events == [] and warning == info.value.message


@pytest.mark.parametrize("kind", DAMAGE)
def test_writing_to_a_damaged_history_sets_it_aside_and_starts_anew(tmp_path: Path, kind: str) -> None:
    warnings: list[str] = []
    history = History(tmp_path, clock=lambda: 1000.0, warn=warnings.append)
    damage(history.path, DAMAGE[kind])
    history.record({"event": "down", "profile": "demo"})
    assert [e["event"] for e in history.events()] == ["down"]
    assert (tmp_path / "history.json.damaged-1000").exists()
    (warning,) = warnings
    assert warning.startswith(f"{history.path}: ") and "history.json.damaged-1000" in warning


def test_events_of_the_wrong_shape_are_skipped_or_trimmed(tmp_path: Path) -> None:
    history = History(tmp_path, clock=time.time)
    entries = [
        {"event": ["up"], "profile": "a"},  # unhashable event: skipped
        {"event": "up", "profile": ["a"], "container_id": {"x": 1}},  # wrong types: keys dropped
        {"event": "up", "profile": "b", "container_id": "abc", "t": "yesterday"},
        "not an event",
        None,
    ]
    history.path.write_text(json.dumps(entries))
    events = history.events()
    assert events == [{"event": "up"}, {"event": "up", "profile": "b", "container_id": "abc"}]
    assert history.last_run() == {"event": "up", "profile": "b", "container_id": "abc"}
    assert ready_container_ids(history) == {"abc"}
    assert history.previous_profile() is None


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_stopped_conflicts_record_says_to_restore_by_hand(tmp_path: Path, kind: str) -> None:
    path = tmp_path / STOPPED_CONFLICTS_FILE
    damage(path, DAMAGE[kind])
    with pytest.raises(StateDamaged) as info:
        load_stopped(tmp_path)
    assert "restore each by hand" in one_line(info.value, path)
    with pytest.raises(StateDamaged):  # recording another stop must not overwrite what it cannot read
        record_stopped(tmp_path, StoppedConflict("container", "x"))


@pytest.mark.parametrize(
    "record",
    [
        {"stopped": [{"kind": "container"}]},
        {"stopped": [{"kind": "container", "ref": ["x"]}]},
        {"stopped": [{"kind": "vm", "ref": "x"}]},
        {"stopped": [{"kind": "container", "ref": "x", "stopped_at": "noon"}]},
        {"stopped": "x"},
        {"stopped": [7]},
        [1, 2],
    ],
)
def test_malformed_stopped_conflicts_record_is_one_line(tmp_path: Path, record: object) -> None:
    path = tmp_path / STOPPED_CONFLICTS_FILE
    path.write_text(json.dumps(record))
    with pytest.raises(StateDamaged) as info:
        load_stopped(tmp_path)
    assert "malformed record of stopped conflicts" in one_line(info.value, path)


def test_lock_file_replaced_by_a_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "servectl.lock").mkdir()
    with pytest.raises(StateDamaged) as info, StateLock(tmp_path, 0.1):
        pass
    assert "the lock file is a folder" in one_line(info.value, tmp_path / "servectl.lock")


def test_lock_file_with_garbage_is_simply_taken(tmp_path: Path) -> None:
    (tmp_path / "servectl.lock").write_bytes(b"\xff" * 10_000)
    with StateLock(tmp_path, 0.1, purpose="up demo"):
        info = json.loads((tmp_path / "servectl.lock").read_text())
        assert info["purpose"] == "up demo"


def test_gate_record_keeps_passage_per_container_and_ignores_odd_ids(tmp_path: Path) -> None:
    gate = GateRecord(tmp_path)
    gate.mark("abc123")
    gate.mark("../../etc/passwd")
    assert gate.passed("abc123") and not gate.passed("def456") and not gate.passed("../../etc/passwd")
    assert [p.name for p in gate.folder.iterdir()] == ["abc123"]
    gate.prune(keep={"def456"})
    assert not gate.passed("abc123")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
EVENTISH = st.lists(
    st.fixed_dictionaries(
        {"event": st.sampled_from(["up", "swap", "rollback", "down"]) | JSON},
        optional={
            "profile": JSON,
            "replaced": JSON,
            "container_id": JSON,
            "t": JSON,
        },
    ),
    max_size=6,
)
CONTENT = (
    st.binary(max_size=200)
    | JSON.map(lambda v: json.dumps(v).encode())
    | EVENTISH.map(lambda v: json.dumps(v).encode())
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=CONTENT)
def test_any_history_content_reads_cleanly(tmp_path_factory: pytest.TempPathFactory, content: bytes) -> None:
    state = tmp_path_factory.mktemp("state")
    history = History(state, warn=lambda line: None, clock=time.time)
    history.path.write_bytes(content)
    try:
        history.last_run()
        history.previous_profile()
        ready_container_ids(history)
    except StateDamaged as err:
        one_line(err, history.path)
    history.record({"event": "down"})
    assert history.events()[-1]["event"] == "down"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=CONTENT)
def test_any_stopped_conflicts_content_reads_cleanly(tmp_path_factory: pytest.TempPathFactory, content: bytes) -> None:
    state = tmp_path_factory.mktemp("state")
    (state / STOPPED_CONFLICTS_FILE).write_bytes(content)
    try:
        for item in load_stopped(state):
            assert isinstance(item.ref, str) and item.kind in ("compose", "container")
    except StateDamaged as err:
        one_line(err, state / STOPPED_CONFLICTS_FILE)


def test_history_entries_of_the_wrong_shape_are_warned_about_not_dropped_silently(tmp_path: Path) -> None:
    """Issue 25: entries that are not events, or whose fields have the wrong type, are ignored with a warning."""
    from servectl.service.journal import status_notes

    warnings: list[str] = []
    history = History(tmp_path, clock=lambda: 1000.0, warn=warnings.append)
    history.path.write_text(
        json.dumps([{"event": "up", "profile": "a"}, 7, {"event": "swap", "profile": ["b"]}, {"event": 3}]),
        encoding="utf-8",
    )
    events, warning = history.readable_events()
    assert events == [{"event": "up", "profile": "a"}, {"event": "swap"}]
    assert (
        warning
        == f"{history.path}: 3 history entries of the wrong shape (not an event, or a field of a wrong type) ignored"
    )
    assert f"warning: {warning}" in status_notes(state_dir=tmp_path, history=History(tmp_path, clock=time.time))
    history.record({"event": "down", "profile": "a"})
    assert warnings == [f"{warning}; rewriting the history without them"]
    assert history.readable_events()[1] is None  # the rewritten history is clean


def test_a_swap_that_replaced_nothing_leaves_no_entry_of_the_wrong_shape(tmp_path: Path) -> None:
    """``replaced: null`` (a swap that started from nothing) is an absent field, not one of a wrong type."""
    warnings: list[str] = []
    history = History(tmp_path, clock=lambda: 1000.0, warn=warnings.append)
    history.record({"event": "swap", "profile": "a", "replaced": None, "outcome": "started"})
    history.record({"event": "swap", "profile": "b", "replaced": "a", "outcome": "swapped"})
    assert warnings == [] and history.malformed == 0
    assert history.events()[0] == {"t": 1000.0, "event": "swap", "profile": "a", "outcome": "started"}
    assert history.previous_profile() == "a"
