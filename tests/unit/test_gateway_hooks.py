"""swap, up and down tell a running gateway: hold and drain before anything stops, release when done.

A recording admin socket stands in for the gateway; the transaction runs on the fakes of servectl.testing.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.gateway_admin import GatewayHold, admin_socket_path, last_startup_s
from servectl.adapters.state import History
from servectl.errors import SwapRolledBack
from servectl.plan.resolve import resolve
from servectl.service.context import Clocks, Context
from servectl.service.swap import SwapOptions, swap
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.swap import FakeClock, FakeConflicts, FakeHistory, FakeLock, FakeRuntime


class RecordingGateway:
    """Answers the admin protocol like a gateway and records each message with what had happened by then."""

    def __init__(self, path: Path, seen: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen()
        self.seen = seen
        self.messages: list[tuple[dict[str, Any], Any]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as lines:
                for line in lines:
                    message = json.loads(line)
                    self.messages.append((message, self.seen()))
                    conn.sendall(json.dumps({"ok": True, "finished": 0, "cut": 0}).encode() + b"\n")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[dict[str, Any], RecordingGateway]]:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name, other in (("alpha", "beta"), ("beta", "alpha")):
        text = f"name: {name}\nextends: demo\nrollback: {other}\ncontainer:\n  name: hooktest-{name}\n"
        (profiles / f"{name}.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_PROFILES", str(profiles))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    clock = FakeClock()
    runtime = FakeRuntime(clock, stop_s=1.0)
    ctx = Context(
        docker=FakeDockerEngine(),
        nvml=False,
        clocks=Clocks(monotonic=clock, wall=lambda: 1.7e9),
        runtime=runtime,
        conflicts=FakeConflicts([]),
        history=FakeHistory(),
        lock=FakeLock(),
        state_dir=tmp_path / "home",
    )
    runtime.run(resolve("alpha", environ=os.environ), state="ready")
    gateway = RecordingGateway(admin_socket_path(tmp_path / "home"), lambda: list(runtime.calls))
    try:
        yield (ctx, runtime), gateway
    finally:
        gateway.close()


NO_PREFLIGHT = SwapOptions(preflight=lambda **_: None)


def test_a_swap_holds_the_aliases_before_stopping_and_releases_after_the_gate(
    world: tuple[tuple[Context, FakeRuntime], RecordingGateway],
) -> None:
    (ctx, _), gateway = world
    swap(ctx, target="beta", opts=NO_PREFLIGHT)
    (hold, before_hold), (release, before_release) = gateway.messages
    assert hold["op"] == "hold" and hold["profiles"] == ["alpha", "beta"] and hold["reason"] == "swap alpha -> beta"
    assert before_hold == [("ensure_image", "beta")]  # nothing stopped before the gateway drained
    assert release == {"op": "release"}
    assert before_release[-2:] == [("stop", "alpha"), ("start", "beta")]  # released once beta passed its gate


def test_a_failed_swap_releases_the_hold_once_the_old_service_is_back(
    world: tuple[tuple[Context, FakeRuntime], RecordingGateway],
) -> None:
    (ctx, runtime), gateway = world
    runtime.script("beta", failure="never ready")
    with pytest.raises(SwapRolledBack):
        swap(ctx, target="beta", opts=NO_PREFLIGHT)
    assert [m["op"] for m, _ in gateway.messages] == ["hold", "release"]
    assert gateway.messages[-1][1][-1] == ("start", "alpha")  # alpha was back before the release


def test_without_a_gateway_the_hold_does_nothing(tmp_path: Path) -> None:
    with GatewayHold(tmp_path, History(tmp_path, clock=time.time), profiles=["a"], reason="swap") as hold:
        assert hold.channel is None and hold.reply == {}
    (tmp_path / "gateway").mkdir()
    admin_socket_path(tmp_path).write_text("")  # a stale file where the socket was: nobody answers
    with GatewayHold(tmp_path, History(tmp_path, clock=time.time), profiles=["a"], reason="swap") as hold:
        assert hold.channel is None


def test_retry_after_comes_from_the_targets_last_measured_startup(tmp_path: Path) -> None:
    History(tmp_path, clock=time.time).record({"event": "up", "profile": "beta", "startup_s": 41.5})
    History(tmp_path, clock=time.time).record({"event": "swap", "profile": "alpha", "startup_s": 3.0})
    assert last_startup_s(History(tmp_path, clock=time.time), "beta") == 41.5
    assert last_startup_s(History(tmp_path, clock=time.time), "gamma") is None
