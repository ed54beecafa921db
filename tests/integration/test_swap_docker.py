"""swap on the real Docker engine with the stand-in engine image.

Every case checks what runs afterwards, that no container is left over, and the message. Each test gets its
own label value (``servectl.test-swap``) on every container it makes, the swaps only see those (``scope``),
and the teardown removes whatever carries it, passed or failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _helpers import remove_labelled, servectl_popen

from servectl.adapters.conflicts import ConflictHandler, DockerConflicts, detect_compose, load_stopped
from servectl.adapters.docker import DockerSdkEngine
from servectl.errors import LockTimeout, SwapFailed, SwapRolledBack
from servectl.service.context import Context
from servectl.service.journal import read_journal
from servectl.service.rollback import rollback
from servectl.service.runtime import down
from servectl.service.swap import SwapOptions, SwapResult, swap
from servectl.standin.process import free_port

pytestmark = pytest.mark.integration

SESSION_LABEL = "servectl.test-session"
TEST_LABEL = "servectl.test-swap"


def settled(look: Callable[[], dict[str, str]]) -> dict[str, str]:
    """``look()`` once removals in flight are done (listing containers races them: NotFound)."""
    import docker.errors

    for _ in range(50):
        try:
            return look()
        except docker.errors.NotFound:
            time.sleep(0.1)
    return look()


class Bench:
    """One test's world: a profile folder, a state folder, a port, labels, and helpers to look at Docker."""

    def __init__(self, tmp: Path, client: Any, image: str, session: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = client
        self.image = image
        self.tid = uuid.uuid4().hex[:10]
        self.labels = {SESSION_LABEL: session, TEST_LABEL: self.tid}
        self.scope = dict(self.labels)
        self.port = free_port()
        self.profiles = tmp / "profiles"
        self.profiles.mkdir()
        self.home = tmp / "home"
        self.tmp = tmp
        self.docker = DockerSdkEngine(environ=os.environ, client=client)
        monkeypatch.setenv("SERVECTL_PROFILES", str(self.profiles))
        monkeypatch.setenv("SERVECTL_HOME", str(self.home))
        monkeypatch.setenv("SERVECTL_LOCK_TIMEOUT_S", "2")

    def container_name(self, profile: str) -> str:
        return f"swapit-{self.tid}-{profile}"

    def profile(
        self,
        name: str,
        *,
        env: dict[str, str] | None = None,
        health: dict[str, Any] | None = None,
        rollback: str | None = None,
        conflicts: list[dict[str, str]] | None = None,
        stop_grace_s: int = 2,
    ) -> str:
        doc: dict[str, Any] = {
            "name": name,
            "extends": "demo",
            "rollback": rollback,
            "image": {"ref": self.image},
            "model": {"served_name": name},
            "serve": {"port": self.port},
            "engine": {"env": {"STANDIN_STARTUP_DELAY_S": "0.6", **(env or {})}},
            "container": {
                "name": self.container_name(name),
                "labels": self.labels,
                "stop_grace_s": stop_grace_s,
            },
            "health": {"startup_timeout_s": 30, "stall_timeout_s": 15, **(health or {})},
        }
        if conflicts:
            doc["conflicts"] = conflicts
        (self.profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return name

    def context(self, **given: Any) -> Context:
        """The context of this test's transactions: the real engine, its session scope, no GPU inventory."""
        return Context(docker=self.docker, scope=self.scope, state_dir=self.home, nvml=False, **given)

    def swap(
        self, target: str | None, *, lock_timeout_s: float | None = None, conflicts: ConflictHandler | None = None
    ) -> SwapResult:
        return swap(self.context(conflicts=conflicts), target=target, opts=SwapOptions(lock_timeout_s=lock_timeout_s))

    def containers(self) -> dict[str, str]:
        """This test's containers: name -> status.

        One list call (the low-level API): `containers.list` inspects each container it lists, and one that a
        swap removes in between made it raise NotFound.
        """
        found = self.client.api.containers(all=True, filters={"label": f"{TEST_LABEL}={self.tid}"})
        return {c["Names"][0].lstrip("/"): c["State"] for c in found}

    def running(self) -> dict[str, str]:
        return {n: s for n, s in self.containers().items() if s == "running"}

    def serves(self, name: str) -> bool:
        import httpx

        try:
            models = httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        return [m["id"] for m in models.get("data", [])] == [name]

    def cli(self, *args: str) -> subprocess.Popen[str]:
        return servectl_popen(*args, profiles=self.profiles, home=self.home, cwd=self.tmp)

    def wait_for_container(self, name: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.containers().get(name) != "running":
            if time.monotonic() > deadline:
                raise AssertionError(f"container {name} did not appear; have {self.containers()}")
            time.sleep(0.05)

    def cleanup(self) -> None:
        remove_labelled(self.client, TEST_LABEL, self.tid)


@pytest.fixture
def bench(make_world: Callable[[type[Bench]], Bench]) -> Bench:
    return make_world(Bench)


@pytest.fixture
def alpha_running(bench: Bench) -> Bench:
    """``alpha`` serves (started by a swap from nothing); ``beta`` is its rollback target."""
    bench.profile("alpha", rollback="beta")
    started = bench.swap("alpha")
    assert started.outcome == "started"
    return bench


# -- the happy paths ------------------------------------------------------------------------------------
def test_swap_replaces_the_running_service_and_reports_downtime(alpha_running: Bench) -> None:
    b = alpha_running
    b.profile("beta", rollback="alpha")
    result = b.swap(None)  # alpha's rollback: beta
    assert (result.outcome, result.from_profile, result.to_profile) == ("swapped", "alpha", "beta")
    assert b.containers() == {b.container_name("beta"): "running"}
    assert b.serves("beta")
    assert result.downtime_s is not None and result.old_stop_s is not None and result.target_startup_s is not None
    assert result.downtime_s >= result.old_stop_s + result.target_startup_s
    assert (
        f"beta is up (http://127.0.0.1:{b.port}), replacing alpha (it held port {b.port}); downtime" in result.message
    )
    back = rollback(b.context())
    assert (back.from_profile, back.to_profile) == ("beta", "alpha")
    assert b.containers() == {b.container_name("alpha"): "running"} and b.serves("alpha")


def test_swap_when_nothing_runs_acts_like_up(bench: Bench) -> None:
    bench.profile("beta")
    result = bench.swap("beta")
    assert (result.outcome, result.from_profile, result.downtime_s) == ("started", None, None)
    assert bench.containers() == {bench.container_name("beta"): "running"} and bench.serves("beta")


def test_swap_to_the_running_profile_is_a_no_op(alpha_running: Bench) -> None:
    before = alpha_running.client.containers.get(alpha_running.container_name("alpha")).id
    result = alpha_running.swap("alpha")
    assert result.outcome == "noop" and "alpha already runs" in result.message
    assert alpha_running.client.containers.get(alpha_running.container_name("alpha")).id == before
    assert alpha_running.containers() == {alpha_running.container_name("alpha"): "running"}


def test_an_old_service_that_ignores_sigterm_is_killed_after_its_grace(bench: Bench) -> None:
    bench.profile("alpha", env={"STANDIN_IGNORE_SIGTERM": "1"}, stop_grace_s=1)
    bench.swap("alpha")
    bench.profile("beta")
    result = bench.swap("beta")
    assert result.outcome == "swapped" and result.forced_stop is True
    assert result.old_stop_s is not None and result.old_stop_s >= 1.0
    assert bench.containers() == {bench.container_name("beta"): "running"}


# -- target failures: the previous service comes back -----------------------------------------------------
FAILURES = {
    "crash": (
        {"env": {"STANDIN_CRASH_AT": "weights", "STANDIN_CRASH_EXIT_CODE": "3"}},
        [r"beta failed: the engine exited with code 3", "stand-in crash injected"],
    ),
    "never-ready": (
        {"env": {"STANDIN_NEVER_READY": "1"}, "health": {"startup_timeout_s": 3}},
        [r"beta failed: not ready after 3 s \(health\.startup_timeout_s\)"],
    ),
    "stall": (
        {"env": {"STANDIN_STALL_AT": "kv_cache"}, "health": {"stall_timeout_s": 2}},
        [r"beta failed: no new log line for 2 s .*\(health\.stall_timeout_s\)"],
    ),
    "fatal-line": (
        {"env": {"STANDIN_FATAL_LINE": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}},
        [r"beta failed: fatal log line .*\(CUDA out of memory\): torch\.OutOfMemoryError"],
    ),
    "expect-log": (
        # a line SGLang prints (so validation passes) that the stand-in never prints
        {"health": {"expect_log": ["Committed real weights after CUDA graph capture"]}},
        [r"beta failed: .*never showed health\.expect_log pattern\(s\) 'Committed real weights after CUDA graph"],
    ),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failing_target_is_removed_and_the_previous_service_comes_back(alpha_running: Bench, case: str) -> None:
    b = alpha_running
    settings, patterns = FAILURES[case]
    b.profile("beta", **settings)
    with pytest.raises(SwapRolledBack) as caught:
        b.swap("beta")
    message = caught.value.message
    assert caught.value.exit_code == 4
    for pattern in patterns:
        assert re.search(pattern, message), (pattern, message)
    assert "beta was removed and the previous service alpha is back (it passed the health gate" in message
    assert b.containers() == {b.container_name("alpha"): "running"}
    assert b.serves("alpha")
    assert read_journal(b.home) is None


def test_when_the_previous_service_fails_too_nothing_is_left(alpha_running: Bench) -> None:
    b = alpha_running
    b.profile("beta", env={"STANDIN_CRASH_AT": "kv_cache"})
    b.profile("alpha", rollback="beta", env={"STANDIN_CRASH_AT": "weights", "STANDIN_CRASH_EXIT_CODE": "9"})
    with pytest.raises(SwapFailed) as caught:
        b.swap("beta")
    message = caught.value.message
    assert caught.value.exit_code == 5
    assert "the previous service alpha did not come back either: the engine exited with code 9" in message
    assert "Nothing of servectl runs now" in message and "`servectl up alpha`" in message
    assert "last log lines of beta" in message and "last log lines of alpha" in message
    assert b.containers() == {}


# -- signals and the lock ------------------------------------------------------------------------------------
def test_sigint_to_servectl_mid_swap_removes_the_target_and_restores_the_previous(
    alpha_running: Bench,
) -> None:
    b = alpha_running
    b.profile("beta", env={"STANDIN_STARTUP_DELAY_S": "8"})
    proc = b.cli("swap", "beta")
    try:
        b.wait_for_container(b.container_name("beta"))
        time.sleep(0.5)  # inside the health gate
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, err
    assert "interrupted (SIGINT) during start-target" in err
    assert "previous service alpha is back" in err
    assert b.containers() == {b.container_name("alpha"): "running"} and b.serves("alpha")
    assert read_journal(b.home) is None


def test_a_second_swap_waits_on_the_lock_then_refuses(alpha_running: Bench) -> None:
    b = alpha_running
    b.profile("beta", env={"STANDIN_STARTUP_DELAY_S": "4"})
    b.profile("gamma")
    proc = b.cli("swap", "beta")
    try:
        b.wait_for_container(b.container_name("beta"))
        began = time.monotonic()
        with pytest.raises(LockTimeout) as caught:
            b.swap("gamma", lock_timeout_s=1.0)
        waited = time.monotonic() - began
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert 1.0 <= waited < 10
    assert f"pid {proc.pid}" in caught.value.message and "swap beta" in caught.value.message
    assert "let it finish, then try again" in caught.value.message
    assert proc.returncode == 0, err
    assert b.containers() == {b.container_name("beta"): "running"}


# -- conflicts -----------------------------------------------------------------------------------------------
@pytest.fixture
def conflict(bench: Bench) -> str:
    """A running container servectl did not start (no servectl.managed label), from the stand-in image."""
    name = f"swapit-{bench.tid}-daily"
    bench.client.containers.run(
        bench.image,
        ["python3", "-c", "import time; time.sleep(3600)"],
        name=name,
        labels=bench.labels,
        detach=True,
        init=True,  # PID 1 of its own would ignore SIGTERM and make every stop wait out the grace period
    )
    return name


def test_a_conflict_container_is_stopped_and_restored_when_the_target_fails(
    alpha_running: Bench, conflict: str
) -> None:
    b = alpha_running
    b.profile("beta", env={"STANDIN_CRASH_AT": "weights"}, conflicts=[{"container": conflict}])
    with pytest.raises(SwapRolledBack, match=f"restored container {conflict}"):
        b.swap("beta")
    assert b.running() == {b.container_name("alpha"): "running", conflict: "running"}
    assert load_stopped(b.home) == []


def test_a_conflict_stays_stopped_after_a_swap_and_comes_back_after_down(alpha_running: Bench, conflict: str) -> None:
    b = alpha_running
    b.profile("beta", conflicts=[{"container": conflict}])
    result = b.swap("beta")
    assert [s.ref for s in result.stopped_conflicts] == [conflict]
    assert b.containers() == {b.container_name("beta"): "running", conflict: "exited"}
    result = down(b.context(), name="beta")
    assert [s.profile for s in result.stopped] == ["beta"]
    assert result.restored is not None and [s.ref for s in result.restored.restored] == [conflict]
    assert b.containers() == {conflict: "running"}


COMPOSE = detect_compose()


@pytest.mark.skipif(COMPOSE is None, reason="no compose CLI (`docker compose` or `docker-compose`) on this host")
def test_a_compose_conflict_is_brought_down_and_up_again(alpha_running: Bench) -> None:
    b = alpha_running
    compose_file = b.tmp / f"daily-{b.tid}" / "compose.yml"
    compose_file.parent.mkdir()
    service = {
        "image": b.image,
        "command": ["python3", "-c", "import time; time.sleep(3600)"],
        "labels": b.labels,
        "init": True,
    }
    compose_file.write_text(yaml.safe_dump({"services": {"daily": service}}), encoding="utf-8")
    assert COMPOSE is not None
    try:
        COMPOSE.up(str(compose_file))
        assert wait(lambda: len(b.running()) == 2), b.containers()
        b.profile("beta", env={"STANDIN_CRASH_AT": "weights"}, conflicts=[{"compose_file": str(compose_file)}])
        handler = DockerConflicts(docker=b.docker, compose=COMPOSE, clock=time.time)
        with pytest.raises(SwapRolledBack, match=r"restored compose file .*compose\.yml"):
            b.swap("beta", conflicts=handler)
        assert wait(lambda: len(b.running()) == 2), b.containers()  # alpha and the recreated daily
        assert b.container_name("alpha") in b.running()
        b.profile("beta", conflicts=[{"compose_file": str(compose_file)}])
        result = b.swap("beta", conflicts=handler)
        assert [s.kind for s in result.stopped_conflicts] == ["compose"]
        assert b.containers() == {b.container_name("beta"): "running"}  # `down` removed daily's container
    finally:
        with contextlib.suppress(Exception):
            COMPOSE.down(str(compose_file))


def wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
