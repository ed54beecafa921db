"""Warm standby on the real Docker engine with the stand-in: swap a -> b -> a with ``a`` on warm standby.

``a`` (``swap.standby: warm``) and ``b`` run on their own ports and, by their ``servectl.gpus`` label, on the
fake card 0 of a :class:`~servectl.testing.standin_gpu.StandinGpuInventory`, which reads each stand-in's
memory ledger (the container's main pid stands for its process, so servectl finds its container from
``/proc``). The way back must need no container start (same container id, same start time); each fault ends
in a serving service or a clear exit code with the previous service back. Every container carries this
test's label; the teardown removes them, passed or failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from _helpers import remove_labelled, servectl_popen

from servectl.adapters.docker import DockerSdkEngine
from servectl.adapters.http import StandardHttp
from servectl.adapters.standby import StandbyRecord
from servectl.adapters.state import History
from servectl.errors import SwapRolledBack
from servectl.service.context import Context
from servectl.service.fingerprint import PROMPTS
from servectl.service.journal import read_journal
from servectl.service.recover import recover
from servectl.service.rollback import rollback
from servectl.service.services import ServiceInfo, ServiceRecords, services
from servectl.service.swap import SwapResult, swap
from servectl.standin.process import free_port
from servectl.testing.standin_gpu import StandinGpuInventory, StandinOnCards

pytestmark = pytest.mark.integration

SESSION_LABEL = "servectl.test-session"
TEST_LABEL = "servectl.test-standby"
ASK = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4, "temperature": 0}


class World:
    """Two profiles, a state folder, the fake card and helpers to look at Docker."""

    def __init__(self, tmp: Path, client: Any, image: str, session: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client, self.image = client, image
        self.tid = uuid.uuid4().hex[:10]
        self.labels = {SESSION_LABEL: session, TEST_LABEL: self.tid}
        self.profiles, self.home, self.tmp = tmp / "profiles", tmp / "home", tmp
        self.profiles.mkdir()
        self.ports: dict[str, int] = {}
        self.docker = DockerSdkEngine(environ=os.environ, client=client)
        self.gpus = StandinGpuInventory(self.engines, cards=1)
        monkeypatch.setenv("SERVECTL_PROFILES", str(self.profiles))
        monkeypatch.setenv("SERVECTL_HOME", str(self.home))
        monkeypatch.setenv("SERVECTL_LOCK_TIMEOUT_S", "2")

    def profile(
        self,
        name: str,
        *,
        warm: bool = False,
        env: dict[str, str] | None = None,
        max_cycles: int | None = None,
        args: dict[str, str] | None = None,
        serve: dict[str, str] | None = None,
        **swap: bool,
    ) -> str:
        self.ports[name] = free_port()
        doc: dict[str, Any] = {
            "name": name,
            "extends": "demo",
            "rollback": None,
            "image": {"ref": self.image},
            "model": {"served_name": name},
            "serve": {"port": self.ports[name], **(serve or {})},
            "engine": {"env": {"STANDIN_STARTUP_DELAY_S": "0.6", "STANDIN_TOKEN_RATE": "2000", **(env or {})}},
            "container": {
                "name": f"standby-{self.tid}-{name}",
                "labels": {**self.labels, "servectl.gpus": "0"},  # on the fake card 0; no GPU request to Docker
                "stop_grace_s": 2,
            },
            "health": {"startup_timeout_s": 30, "stall_timeout_s": 15},
        }
        if args:
            doc["engine"]["args"] = args
        if warm:
            doc["swap"] = {
                "standby": "warm",
                **({} if max_cycles is None else {"standby_max_cycles": max_cycles}),
                **{f"standby_{key}": value for key, value in swap.items()},
            }
        (self.profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return name

    def engines(self) -> list[StandinOnCards]:
        found = self.client.containers.list(filters={"label": f"{TEST_LABEL}={self.tid}", "status": "running"})
        return [
            StandinOnCards(f"http://127.0.0.1:{c.labels['servectl.port']}", (0,), pid=int(c.attrs["State"]["Pid"]))
            for c in found
        ]

    def context(self) -> Context:
        """This test's transactions: the real engine, its scope, the stand-ins' fake card."""
        return Context(docker=self.docker, gpus=self.gpus, scope=self.labels, state_dir=self.home)

    def swap(self, target: str) -> SwapResult:
        return swap(self.context(), target=target)

    def container(self, name: str) -> tuple[str, str, str]:
        """(id, status, start time) of profile ``name``'s container."""
        c = self.client.containers.get(f"standby-{self.tid}-{name}")
        return c.id, c.status, c.attrs["State"]["StartedAt"]

    def services(self) -> list[ServiceInfo]:
        """This test's servectl services, as status sees them."""
        records = ServiceRecords(self.home, History(self.home, clock=time.time))
        return services(
            docker=self.docker, http=StandardHttp(), records=records, clock=time.time, scope=self.labels, adopted=None
        )

    def service(self, name: str) -> ServiceInfo:
        (found,) = [s for s in self.services() if s.profile == name]
        return found

    def states(self) -> dict[str, str]:
        return {s.profile: s.state for s in self.services()}

    def answer(self, name: str) -> str:
        url = f"http://127.0.0.1:{self.ports[name]}/v1/chat/completions"
        text: str = httpx.post(url, json=ASK, timeout=10).json()["choices"][0]["message"]["content"]
        return text

    def cli(self, *args: str) -> subprocess.Popen[str]:
        return servectl_popen(*args, profiles=self.profiles, home=self.home, cwd=self.tmp)

    def cleanup(self) -> None:
        remove_labelled(self.client, TEST_LABEL, self.tid)


@pytest.fixture
def world(make_world: Callable[[type[World]], World]) -> World:
    return make_world(World)


def test_a_b_a_with_a_on_warm_standby_comes_back_without_a_container_start(world: World) -> None:
    world.profile("a", warm=True)
    world.profile("b")
    assert world.swap("a").outcome == "started"
    a_before, right = world.container("a"), world.answer("a")
    full_mib = world.gpus.used_mib(0)

    away = world.swap("b")
    assert (away.outcome, away.from_profile, away.to_profile) == ("swapped", "a", "b")
    assert world.container("a") == a_before  # still the same running container, not stopped
    assert world.states() == {"a": "standby", "b": "ready"}
    assert "!" not in world.answer("b") and world.gpus.used_mib(0) > 0
    assert any(p.phase == "stop-old" for p in away.phases)
    (released,) = [e for e in History(world.home, clock=time.time).events() if e.get("event") == "standby"]
    assert 0 < released["kept_mib"]["0"] < full_mib  # what a keeps on card 0, measured, not the whole

    back = rollback(world.context())
    assert (back.outcome, back.from_profile, back.to_profile) == ("swapped", "b", "a")
    assert world.container("a") == a_before  # same id, same start time: no container start on the way back
    assert world.states() == {"a": "ready"}
    assert world.answer("a") == right
    assert world.gpus.used_mib(0) == full_mib  # the memory came back, b's went
    assert back.target_startup_s is not None and back.target_startup_s < 5
    assert [p.phase for p in back.phases if p.phase == "resume-target"] == ["resume-target"]

    again = world.swap("b")  # and away once more: the standby record is written again
    assert again.outcome == "swapped" and world.states() == {"a": "standby", "b": "ready"}
    a_seen = world.service("a")
    assert a_seen.standby_resume_s is not None and a_seen.standby_resume_s == pytest.approx(
        back.target_startup_s, abs=0.05
    )
    assert a_seen.standby_cycles == 1 and a_seen.standby_release_s is not None  # one cycle behind it, held to
    trust = StandbyRecord(world.home).trust(a_before[0])  # the fingerprint of its first release
    assert trust is not None and len(trust.fingerprint) == len(PROMPTS)


@pytest.mark.parametrize("fault", ["fail", "wrong"])
def test_a_resume_that_fails_or_answers_wrong_falls_back_to_a_cold_start_of_the_same_profile(
    world: World, fault: str
) -> None:
    world.profile("a", warm=True, env={"STANDIN_RESUME_FAULT": fault})
    world.profile("b")
    world.swap("a")
    a_before, right = world.container("a"), world.answer("a")
    world.swap("b")
    back = world.swap("a")
    assert (back.outcome, back.to_profile) == ("swapped", "a")
    a_after = world.container("a")
    assert a_after[0] != a_before[0] and a_after[1] == "running"  # started cold, in the same transaction
    assert world.states() == {"a": "ready"} and world.answer("a") == right
    failed = [e for e in History(world.home, clock=time.time).events() if e.get("event") == "standby-resume-failed"]
    assert len(failed) == 1 and failed[0]["profile"] == "a"
    expected = {
        "fail": "a: POST /resume_memory_occupation answered 400: resume_memory_occupation failed",
        "wrong": "a resumed but its fingerprint departs from the one of its first release after 0 cycle(s): "
        "prompt 1: token 0 is '!!!!",
    }[fault]
    assert failed[0]["reason"].startswith(expected), failed[0]["reason"]


def test_a_release_that_frees_nothing_rolls_back_to_the_previous_service_as_it_ran(world: World) -> None:
    world.profile("a", warm=True, env={"STANDIN_RELEASE_FAULT": "keep"})
    world.profile("b")
    world.swap("a")
    a_before, right = world.container("a"), world.answer("a")
    with pytest.raises(SwapRolledBack) as raised:
        world.swap("b")
    assert raised.value.exit_code == 4
    assert "a answered the release but did not free its memory: card 0 has" in raised.value.message
    assert world.container("a") == a_before  # resumed where it ran: the same container
    assert world.states() == {"a": "ready"} and world.answer("a") == right
    with pytest.raises(Exception, match=r"NotFound|No such container"):
        world.container("b")


def test_kill_9_after_the_release_then_recover_resumes_the_standby_where_it_ran(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.profile("a", warm=True)
    world.profile("b", env={"STANDIN_STARTUP_DELAY_S": "20"})
    monkeypatch.chdir(world.tmp)  # the CLI's folder: the same paths, so the same plan (the demo's model path)
    world.swap("a")
    a_before, right = world.container("a"), world.answer("a")
    proc = world.cli("swap", "b")
    try:
        deadline = time.monotonic() + 30
        while not world.client.containers.list(filters={"name": f"standby-{world.tid}-b"}):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    journal = read_journal(world.home)
    assert journal is not None and (journal.phase, journal.standby) == ("start-target", "released")
    assert world.states()["a"] == "standby"
    result = recover(world.context())
    assert (result.outcome, result.restored) == ("restored", "a"), result.message
    assert world.container("a") == a_before  # resumed, not started again
    assert world.states() == {"a": "ready"} and world.answer("a") == right
    assert read_journal(world.home) is None


# -- servectl never sends what kills the server (issue 38) ------------------------------------------------------
def _stream_for(world: World, name: str, seconds: float, into: list[int]) -> threading.Thread:
    """A client on the engine's own port (not through any gateway): a stream of about ``seconds``."""

    def run() -> None:
        url = f"http://127.0.0.1:{world.ports[name]}/v1/chat/completions"
        body = {**ASK, "max_tokens": int(20 * seconds), "stream": True}
        try:
            with httpx.stream("POST", url, json=body, timeout=60) as response:
                for _ in response.iter_lines():
                    pass
                into.append(response.status_code)
        except httpx.TransportError:
            into.append(-1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not httpx.get(f"http://127.0.0.1:{world.ports[name]}/v1/loads", timeout=5).json()["loads"][0][
        "num_running_reqs"
    ]:
        assert time.monotonic() < deadline, "the stream never started"
        time.sleep(0.05)
    return thread


def test_a_release_waits_until_the_engine_itself_shows_no_request(world: World) -> None:
    world.profile("a", warm=True, env={"STANDIN_TOKEN_RATE": "20"})
    world.profile("b")
    world.swap("a")
    a_before = world.container("a")
    finished: list[int] = []
    client = _stream_for(world, "a", 3.0, finished)
    away = world.swap("b")  # SGLang kills a server released under a running request; servectl waits it out
    client.join(30)
    assert finished == [200]  # the client on the engine's port got its whole answer
    assert away.outcome == "swapped" and world.states() == {"a": "standby", "b": "ready"}
    assert world.container("a") == a_before  # alive: the release came once the engine was idle


def test_a_release_is_not_sent_while_the_engine_stays_busy(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("servectl.service.standby_engine.IDLE_WAIT_S", 1.0)
    world.profile("a", warm=True, env={"STANDIN_TOKEN_RATE": "20"})
    world.profile("b")
    world.swap("a")
    a_before = world.container("a")
    finished: list[int] = []
    client = _stream_for(world, "a", 6.0, finished)
    with pytest.raises(SwapRolledBack) as raised:
        world.swap("b")
    assert "a still serves 1 request(s) on http://127.0.0.1:" in raised.value.message
    assert "a release now would kill it" in raised.value.message
    client.join(30)
    assert finished == [200] and world.container("a") == a_before and world.states() == {"a": "ready"}


@pytest.mark.parametrize("call", ["release", "resume"])
def test_a_server_that_dies_on_the_call_is_a_crash_started_again_never_a_second_call(world: World, call: str) -> None:
    fault = {"STANDIN_RELEASE_FAULT": "die"} if call == "release" else {"STANDIN_RESUME_FAULT": "die"}
    world.profile("a", warm=True, env=fault)
    world.profile("b")
    world.swap("a")
    a_before, right = world.container("a"), world.answer("a")
    if call == "release":
        with pytest.raises(SwapRolledBack) as raised:
            world.swap("b")
        assert "a's server died (exit status 137)" in raised.value.message, raised.value.message
    else:
        world.swap("b")
        back = world.swap("a")  # the resume kills it: the same transaction starts a cold
        assert back.outcome == "swapped"
        failed = [e for e in History(world.home, clock=time.time).events() if e.get("event") == "standby-resume-failed"]
        assert "a's server died (exit status 137)" in failed[0]["reason"], failed
    a_after = world.container("a")
    assert a_after[0] != a_before[0] and a_after[1] == "running"  # started again from its plan
    assert world.states() == {"a": "ready"} and world.answer("a") == right
    old = world.client.containers.list(all=True, filters={"id": a_before[0]})
    assert not old  # the dead one was removed, not called again


def test_after_its_max_cycles_a_standby_is_stopped_and_the_way_back_is_cold(world: World) -> None:
    world.profile("a", warm=True, max_cycles=1)
    world.profile("b")
    world.swap("a")
    a_before, right = world.container("a"), world.answer("a")
    world.swap("b")
    world.swap("a")  # resumed: one cycle
    assert world.container("a") == a_before
    world.swap("b")  # its cycles are spent: stopped, not released
    assert world.states() == {"b": "ready"}
    with pytest.raises(Exception, match=r"NotFound|No such container"):
        world.container("a")
    world.swap("a")  # cold
    assert world.container("a")[0] != a_before[0] and world.answer("a") == right


def test_an_engine_with_an_admin_key_is_released_and_resumed_with_that_key(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's release/resume routes take only the admin key when the server has one (ADMIN_OPTIONAL): servectl
    passes the key serve.admin_api_key_env names to the engine through a 0600 file (never in argv or env) and
    sends it on release and resume, so a -> b -> a releases and resumes a (no 401, no cold start)."""
    monkeypatch.setenv("STANDBY_ADMIN_KEY", "sk-standby-admin")
    world.profile("a", warm=True, serve={"admin_api_key_env": "STANDBY_ADMIN_KEY"})
    world.profile("b")
    world.swap("a")
    inspected = world.client.containers.get(f"standby-{world.tid}-a").attrs
    assert "sk-standby-admin" not in json.dumps(inspected)  # not in its command, environment or labels
    release = httpx.post(f"http://127.0.0.1:{world.ports['a']}/release_memory_occupation", json={}, timeout=10)
    assert release.status_code == 401  # the engine did get an admin key: without it the route is shut
    a_before, right = world.container("a"), world.answer("a")  # chat needs no key: SGLang's NORMAL level
    away = world.swap("b")
    assert away.old_released and world.states() == {"a": "standby", "b": "ready"}
    back = world.swap("a")
    assert back.target_resumed and world.container("a") == a_before and world.answer("a") == right


def test_a_primed_standby_pays_its_first_release_at_start_and_every_later_one_is_fast(world: World) -> None:
    # the stand-in copies one rank's weights (16 GB) at 8 GB/s: 2 s; with the buffer retained, 1/20 of it after
    env = {"STANDIN_BACKUP_GBPS": "8", "STANDIN_RELEASE_S": "0", "STANDIN_RESUME_S": "0"}
    world.profile("a", warm=True, env=env, retain_backup=True, prime=True)
    world.profile("b")
    started = world.swap("a")
    assert [p.phase for p in started.phases if p.phase == "prime-standby"] == ["prime-standby"]
    (primed,) = [e for e in History(world.home, clock=time.time).events() if e.get("event") == "standby-primed"]
    assert primed["release_s"] >= 2.0  # the pinned buffer, paid before a was admitted
    trust = StandbyRecord(world.home).trust(world.container("a")[0])
    assert trust is not None and trust.cycles == 0  # its fingerprint, taken at its first start
    assert trust.retained and trust.pinned and trust.backup_bytes > 0  # the prime paid the pinned buffer
    held = world.service("a")
    assert (held.backup_hold, held.backup_bytes) == ("held", trust.backup_bytes)  # what preflight counts as in use
    away = world.swap("b")
    assert away.old_released and away.old_stop_s is not None and away.old_stop_s < 1.5
    released = [e for e in History(world.home, clock=time.time).events() if e.get("event") == "standby"][-1]
    assert released["release_s"] < 1.0
