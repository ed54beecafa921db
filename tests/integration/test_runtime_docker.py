"""The runtime against the real Docker engine and the stand-in SGLang image.

Each behaviour of ``up``/``down``/``status``/``logs`` and of the health gate is shown once here; the rules
themselves are unit-tested on the fake engine. Every container carries this session's
``servectl.test-session`` label and is removed by it after each test, passed or failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.docker import DockerSdkEngine
from servectl.errors import StartupFailed
from servectl.plan.compile import API_KEY_CONTAINER_PATH, PortBinding, docker_run_argv
from servectl.plan.resolve import resolve
from servectl.service import runtime
from servectl.service.context import Context
from servectl.standin.process import free_port
from servectl.testing.docker import TEST_SESSION_LABEL, write_test_profile

pytestmark = pytest.mark.integration

SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclass
class Runtime:
    """One test's view: its profile folder, state folder, engine, and this session's label."""

    folder: Path
    home: Path
    session: str
    tag: str
    image: str
    engine: DockerSdkEngine

    @property
    def scope(self) -> dict[str, str]:
        return {TEST_SESSION_LABEL: self.session}

    def name(self, short: str) -> str:
        return f"t{self.tag}-{short}"

    def profile(self, short: str, *, env: dict[str, str] | None = None, **sections: Any) -> tuple[str, int]:
        """A stand-in profile: 1 s startup, a free port, a unique container name, the session label."""
        name, port = self.name(short), free_port()
        engine = {"env": {"STANDIN_STARTUP_DELAY_S": "1", **(env or {})}, **sections.pop("engine", {})}
        container = {"name": f"servectl-{name}", **sections.pop("container", {})}
        write_test_profile(
            self.folder,
            name,
            port=port,
            session=self.session,
            image={"ref": self.image},
            engine=engine,
            container=container,
            **sections,
        )
        return name, port

    def environ(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": SRC,
            "SERVECTL_HOME": str(self.home),
            "SERVECTL_PROFILES": str(self.folder),
            **extra,
        }
        return env

    def cli(self, *args: str, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "servectl", *args],
            capture_output=True,
            text=True,
            env=self.environ(**extra),
            cwd=self.folder,
            timeout=timeout,
        )

    def up(self, name: str) -> runtime.UpResult:
        ctx = Context(
            docker=self.engine,
            state_dir=self.home,
            scope=self.scope,
            environ=self.environ(),
            lock_timeout_s=5,
            nvml=False,
        )
        return runtime.up(ctx, name=name)

    def containers(self) -> list[Any]:
        return self.engine.list_managed(self.scope)


@pytest.fixture
def rt(
    docker_client: Any,
    standin_image: str,
    test_session_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Runtime]:
    folder, home = tmp_path / "profiles", tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("SERVECTL_HOME", str(home))
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    # The CLI runs in ``folder`` too: from the checkout's root, ``./profiles`` (a link to the shipped profiles)
    # would resolve ``demo``'s relative model path through the link, another path than the package's own.
    monkeypatch.chdir(folder)
    engine = DockerSdkEngine(environ=os.environ, client=docker_client)
    yield Runtime(folder, home, test_session_id, os.urandom(3).hex(), standin_image, engine)
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{TEST_SESSION_LABEL}={test_session_id}"}
    ):
        container.remove(force=True)


def _assert_nothing_left(rt: Runtime) -> None:
    assert rt.containers() == []


# -- up to ready, status, logs, up twice, down -----------------------------------------------------------
def test_up_to_ready_then_status_logs_up_again_and_down(rt: Runtime) -> None:
    name, port = rt.profile(
        "ready",
        serve={"api_key_env": "T_KEY"},
        # a line SGLang 0.5.23 prints (expect_log is checked against its log catalog)
        env={"STANDIN_EXTRA_LOG": "Set DSA backends for GLM FP8 KV Cache on SM120/SM121: prefill=a, decode=b."},
        health={"expect_log": ["Set DSA backends for GLM FP8"]},
    )
    key = "sk-" + os.urandom(8).hex()
    up = rt.cli("up", name, T_KEY=key)
    assert up.returncode == 0, up.stderr
    assert f"{name} is ready at http://127.0.0.1:{port}" in up.stdout
    for phase in ("loading weights", "KV cache allocated", "capturing CUDA graphs", "warming up", "ready"):
        assert f"{name}: {phase}" in up.stderr
    assert key not in up.stdout + up.stderr

    [container] = rt.containers()
    inspect = rt.engine.client.api.inspect_container(container.id)
    assert key not in json.dumps(inspect)  # only mounted as a file, never in argv or env
    key_file = rt.home / "generated" / name / "api-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert (str(key_file), API_KEY_CONTAINER_PATH) in container.mounts

    status = rt.cli("status", "--json")
    [svc] = [s for s in json.loads(status.stdout)["services"] if s["profile"] == name]
    assert (svc["state"], svc["port"], svc["drift"], svc["container_name"]) == (
        "ready",
        port,
        False,
        f"servectl-{name}",
    )

    logs = rt.cli("logs", name)
    assert "The server is fired up and ready to roll!" in logs.stdout
    # the engine logs its server_args with the key, as SGLang does; servectl shows it redacted
    raw = rt.engine.client.api.logs(container.id).decode()
    assert key in raw
    assert key not in logs.stdout and "api_key='***'" in logs.stdout

    again = rt.cli("up", name, T_KEY=key)
    assert again.returncode == 0 and "already runs with the same plan" in again.stdout
    assert len(rt.containers()) == 1

    down = rt.cli("down", name)
    assert down.returncode == 0, down.stderr
    assert f"{name}: stopped in" in down.stdout and "(SIGTERM)" in down.stdout
    _assert_nothing_left(rt)
    assert not key_file.exists()


def test_reads_over_the_unix_socket_give_what_the_sdk_gives(rt: Runtime) -> None:
    """``status`` reads the local engine over its socket (no SDK import); the documents are the SDK's."""
    name, _ = rt.profile("socket")
    assert rt.cli("up", name).returncode == 0
    over_socket = DockerSdkEngine(
        environ=os.environ
    )  # no client given, DOCKER_HOST unset: reads go over /var/run/docker.sock
    assert over_socket._socket is not None and rt.engine._socket is None
    try:
        [container] = rt.containers()
        assert over_socket.list_managed(rt.scope) == [container]
        assert over_socket.inspect(container.id) == rt.engine.inspect(container.id) == container
        assert over_socket.container_document(container.name) == rt.engine.container_document(container.name)
        assert over_socket.image_document(rt.image) == rt.engine.image_document(rt.image)
        assert over_socket.image(rt.image) == rt.engine.image(rt.image) is not None
        assert over_socket.ping() == rt.engine.ping()
        assert over_socket.inspect("servectl-no-such-container") is None
        assert over_socket.image("no-such-image:none") is None and over_socket.image("Bad Ref!") is None
    finally:
        over_socket.close()
    assert rt.cli("down", name).returncode == 0


def test_up_of_a_bad_profile_fails_before_any_container_is_created(rt: Runtime) -> None:
    name, _ = rt.profile("bad", engine={"args": {"no-such-flag": 1}})
    result = rt.cli("up", name)
    assert result.returncode == 2
    assert f"{name}.yaml" in result.stderr and "--no-such-flag is not a flag" in result.stderr
    _assert_nothing_left(rt)


# -- failing fast ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("short", "env", "health", "message"),
    [
        (
            "crash",
            {"STANDIN_CRASH_AT": "kv_cache"},
            {},
            "the engine exited with code 1 while loading weights",
        ),
        (
            "never",
            {"STANDIN_NEVER_READY": "1"},
            {"startup_timeout_s": 4, "stall_timeout_s": 30},
            "not ready after 4 s (health.startup_timeout_s) while capturing CUDA graphs",
        ),
        (
            "stall",
            {"STANDIN_STALL_AT": "kv_cache"},
            {"stall_timeout_s": 1.5},
            "no new log line for 1.5 s while loading weights (health.stall_timeout_s)",
        ),
        (
            "fatal",
            {"STANDIN_FATAL_LINE": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"},
            {},
            "fatal log line while loading weights (CUDA out of memory)",
        ),
        (
            "expect",
            {},
            {"expect_log": ["Committed real weights after CUDA graph capture"]},  # real, never printed here
            "never showed health.expect_log pattern(s) 'Committed real weights after CUDA graph capture'",
        ),
    ],
)
def test_startup_failure_fails_fast_with_the_reason_and_leaves_nothing(
    rt: Runtime, short: str, env: dict[str, str], health: dict[str, float], message: str
) -> None:
    name, _ = rt.profile(short, env=env, health=health)
    t0 = time.monotonic()
    with pytest.raises(StartupFailed) as info:
        rt.up(name)
    elapsed = time.monotonic() - t0
    assert message in info.value.message
    assert info.value.message.endswith("; the container was removed")
    assert info.value.last_log_lines
    assert elapsed < 15
    if short == "crash":
        assert info.value.exit_code_of_container == 1 and not info.value.oom_killed
        assert "Scheduler hit an exception" in "\n".join(info.value.last_log_lines)
    _assert_nothing_left(rt)


def test_cli_shows_the_last_log_lines_and_exits_3_on_a_crash(rt: Runtime) -> None:
    name, _ = rt.profile("crashcli", env={"STANDIN_CRASH_AT": "weights"})
    result = rt.cli("up", name)
    assert result.returncode == 3
    assert f"last log lines of {name}:" in result.stderr and "  | " in result.stderr
    assert "error: " + name + ": the engine exited with code 1" in result.stderr
    _assert_nothing_left(rt)


# -- Docker is the source of truth -----------------------------------------------------------------------
def test_status_after_docker_rm_behind_servectls_back(rt: Runtime) -> None:
    name, _ = rt.profile("gone")
    rt.up(name)
    subprocess.run(["docker", "rm", "-f", f"servectl-{name}"], check=True, capture_output=True)
    status = rt.cli("status", "--json")
    assert status.returncode == 0
    assert [s for s in json.loads(status.stdout)["services"] if s["profile"] == name] == []
    down = rt.cli("down", name)
    assert down.returncode == 0 and f"{name} is not running" in down.stdout


def test_two_ups_at_once_one_starts_the_other_waits_then_gives_up(rt: Runtime) -> None:
    name, _ = rt.profile("lock", env={"STANDIN_STARTUP_DELAY_S": "2"})
    env = rt.environ(SERVECTL_LOCK_TIMEOUT_S="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "servectl", "up", name],
            env=env,
            cwd=rt.folder,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    results = [(p.pid, *p.communicate(timeout=60), p.returncode) for p in procs]
    winners = [r for r in results if r[3] == 0]
    losers = [r for r in results if r[3] != 0]
    assert len(winners) == 1 and len(losers) == 1, results
    _, _, stderr, code = losers[0]
    assert code == 1
    assert f"another servectl process, pid {winners[0][0]} (up {name}" in stderr
    assert "waited 1 s" in stderr
    assert len(rt.containers()) == 1


def test_down_kills_an_engine_that_ignores_sigterm_after_the_grace_period(rt: Runtime) -> None:
    name, _ = rt.profile("stubborn", env={"STANDIN_IGNORE_SIGTERM": "1"}, container={"stop_grace_s": 2})
    rt.up(name)
    t0 = time.monotonic()
    down = rt.cli("down", name)
    assert down.returncode == 0, down.stderr
    assert "(SIGKILL after the grace period)" in down.stdout
    assert time.monotonic() - t0 >= 2
    _assert_nothing_left(rt)


# -- the adapter's container equals the printed docker run ----------------------------------------------
def _comparable(inspect: dict[str, Any]) -> dict[str, Any]:
    config, host = inspect["Config"], inspect["HostConfig"]
    return {
        "Image": config["Image"],
        "Cmd": config["Cmd"],
        "Env": sorted(config["Env"] or []),
        "Labels": config["Labels"],
        "StopTimeout": config.get("StopTimeout"),
        "Binds": sorted(host["Binds"] or []),
        "PortBindings": host["PortBindings"],
        "Ulimits": host["Ulimits"],
        "ShmSize": host["ShmSize"],
        "IpcMode": host["IpcMode"],
        "NetworkMode": host["NetworkMode"],
        "Init": host["Init"],
        "DeviceRequests": host["DeviceRequests"],
    }


def test_sdk_container_equals_the_one_docker_run_argv_creates(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_pass_through")
    glm = resolve("glm53-393k", environ=os.environ).plan.docker
    base = replace(
        glm,
        image=rt.image,
        labels={**glm.labels, TEST_SESSION_LABEL: rt.session},
        ports=(PortBinding("127.0.0.1", free_port(), 8180),),
        environment=(("HF_TOKEN", None), ("NCCL_DEBUG", "WARN")),
        shm_size="1g",
    )
    sdk_spec = replace(base, name=f"servectl-t{rt.tag}-sdk")
    cli_spec = replace(base, name=f"servectl-t{rt.tag}-cli")
    sdk_id = rt.engine.create(sdk_spec, environ=os.environ)  # the pass-through reads this environment
    argv = docker_run_argv(cli_spec)
    assert argv[:3] == ["docker", "run", "-d"]
    created = subprocess.run(["docker", "create", *argv[3:]], capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    sdk = _comparable(rt.engine.client.api.inspect_container(sdk_id))
    cli = _comparable(rt.engine.client.api.inspect_container(created.stdout.strip()))
    assert sdk == cli
    assert "HF_TOKEN=hf_pass_through" in sdk["Env"] and sdk["DeviceRequests"][0]["DeviceIDs"] == ["0", "1"]


# -- bench by profile name ---------------------------------------------------------------------------------
def test_bench_by_profile_name_records_the_running_plan_and_refuses_a_drifted_one(rt: Runtime, tmp_path: Path) -> None:
    name, _ = rt.profile("bench", env={"STANDIN_TOKEN_RATE": "400"})
    rt.up(name)
    out = tmp_path / "evidence"
    result = rt.cli("bench", name, "--prompt-tokens", "128", "--repeats", "1", "--max-tokens", "24", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["profile"] == name
    assert summary["provenance"]["plan_hash"] == resolve(name, environ=os.environ).plan.plan_hash
    assert summary["points"][0]["requests_ok"] == 1
    # the profile changes under the running service: its results would no longer describe the profile
    rt.profile("bench", env={"STANDIN_TOKEN_RATE": "300"})
    drifted = rt.cli("bench", name, "--prompt-tokens", "128", "--repeats", "1", "--out", str(tmp_path / "x"))
    assert drifted.returncode == 2
    assert "swap" in drifted.stderr and "Traceback" not in drifted.stderr
