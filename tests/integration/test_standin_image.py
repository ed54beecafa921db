"""The stand-in SGLang image on the real Docker engine: build, startup log, health, API, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from servectl.adapters.docker import DockerSdkEngine
from servectl.standin import READY_LINE, SPARSE_MLA_LINE
from servectl.standin.image import DEMO_MODEL_PATH, IMAGE_LABEL, build_standin_image, standin_image_ref

pytestmark = pytest.mark.integration

DEMO_MODEL = Path(__file__).parents[2] / "examples" / "demo-model"
LAUNCH = ["python3", "-m", "sglang.launch_server"]
PORT = "30000/tcp"


def logs(container: Any) -> str:
    return str(container.logs(stdout=True, stderr=True).decode())


def wait_for_log(container: Any, text: str, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = logs(container)
        if text in current:
            return current
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the container log:\n{logs(container)[-3000:]}")


def host_port(container: Any) -> int:
    container.reload()
    return int(container.ports[PORT][0]["HostPort"])


def test_image_is_small_labelled_tagged_latest_and_reused(docker_client: Any, standin_image: str) -> None:
    image = docker_client.images.get(standin_image)
    assert standin_image == standin_image_ref()
    assert image.labels[IMAGE_LABEL] == "1"
    assert image.attrs["Size"] < 150 * 1024 * 1024
    begin = time.monotonic()
    assert (
        build_standin_image(docker=DockerSdkEngine(environ=os.environ, client=docker_client)) == standin_image
    )  # found, not rebuilt
    # Checked right after the call: other worktrees sharing this engine may move `latest` to their build.
    assert docker_client.images.get("servectl-standin:latest").id == image.id
    assert time.monotonic() - begin < 2.0
    assert docker_client.images.get(standin_image).id == image.id


def test_python3_is_on_path_with_the_stdlib_the_engine_needs(run_container: Callable[..., Any]) -> None:
    probe = "import http.server, json, ssl, hashlib, sys; print('python', sys.version_info[:2] >= (3, 11))"
    container = run_container(["python3", "-c", probe])
    assert container.wait(timeout=30)["StatusCode"] == 0
    assert logs(container).strip() == "python True"


def test_container_starts_through_phases_serves_health_models_and_streaming_chat(
    run_container: Callable[..., Any],
) -> None:
    argv = [*LAUNCH, "--model-path", "/model", "--served-model-name", "glm-demo", "--host", "0.0.0.0"]
    argv += ["--port", "30000", "--context-length", "393216", "--dsa-decode-backend", "flashinfer_sparse_mla"]
    container = run_container(
        argv,
        environment={
            "STANDIN_STARTUP_DELAY_S": "2",
            "STANDIN_TOKEN_RATE": "200",
            "STANDIN_CHUNK_TOKENS": "2",
        },
        volumes={str(DEMO_MODEL): {"bind": "/model", "mode": "ro"}},
        ports={PORT: ("127.0.0.1", None)},
    )
    wait_for_log(container, "Load weight begin")
    base = f"http://127.0.0.1:{host_port(container)}"
    with httpx.Client(base_url=base, timeout=10) as client:
        statuses = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                statuses.append(client.get("/health").status_code)
            except httpx.TransportError:
                statuses.append(0)  # the published port may answer before the process listens
            if statuses[-1] == 200:
                break
            time.sleep(0.1)
        assert 503 in statuses
        assert statuses[-1] == 200
        assert statuses.index(200) > statuses.index(503)
        models = client.get("/v1/models").json()["data"]
        assert [(m["id"], m["max_model_len"]) for m in models] == [("glm-demo", 393216)]
        request = {
            "model": "glm-demo",
            "messages": [{"role": "user", "content": "Hello, world!"}],
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with client.stream("POST", "/v1/chat/completions", json=request) as response:
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (8, 6, 14)
    assert usage["spec_accept_length"] == 2.0
    log = logs(container)
    markers = [
        "server_args=ServerArgs(",
        SPARSE_MLA_LINE,
        "Load weight begin",
        "50% Completed | 2/4",
        "Load weight end",
        "KV Cache is allocated",
        "CUDA graph end",
        "Uvicorn running on",
        READY_LINE,
    ]
    positions = [log.index(marker) for marker in markers]
    assert positions == sorted(positions)


def test_baked_in_demo_model_needs_no_mount(run_container: Callable[..., Any]) -> None:
    container = run_container([*LAUNCH, "--model-path", DEMO_MODEL_PATH], environment={"STANDIN_STARTUP_DELAY_S": "0"})
    log = wait_for_log(container, READY_LINE)
    assert READY_LINE in log
    assert f"server_args=ServerArgs(model_path={DEMO_MODEL_PATH!r}" in log
    assert "Load weight end" in log and "Traceback" not in log


def test_crash_at_phase_exits_with_the_configured_code(run_container: Callable[..., Any]) -> None:
    container = run_container(
        [*LAUNCH, "--model-path", DEMO_MODEL_PATH],
        environment={
            "STANDIN_STARTUP_DELAY_S": "0.5",
            "STANDIN_CRASH_AT": "kv_cache",
            "STANDIN_CRASH_EXIT_CODE": "3",
        },
    )
    assert container.wait(timeout=30)["StatusCode"] == 3
    log = logs(container)
    assert "RuntimeError: stand-in crash injected at startup phase 'kv_cache'" in log
    assert "KV Cache is allocated" not in log


def test_bad_flag_exits_2_with_argparse_error(run_container: Callable[..., Any]) -> None:
    container = run_container([*LAUNCH, "--model-path", DEMO_MODEL_PATH, "--tp-size", "two"])
    assert container.wait(timeout=30)["StatusCode"] == 2
    last = logs(container).rstrip("\n").splitlines()[-1]
    assert last == "launch_server.py: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"


def test_sigterm_stops_the_engine_with_exit_0(run_container: Callable[..., Any]) -> None:
    container = run_container([*LAUNCH, "--model-path", DEMO_MODEL_PATH], environment={"STANDIN_STARTUP_DELAY_S": "0"})
    wait_for_log(container, READY_LINE)
    begin = time.monotonic()
    container.stop(timeout=10)
    assert time.monotonic() - begin < 3.0
    assert container.wait(timeout=10)["StatusCode"] == 0


def test_ignored_sigterm_needs_a_kill(run_container: Callable[..., Any]) -> None:
    container = run_container(
        [*LAUNCH, "--model-path", DEMO_MODEL_PATH],
        environment={"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_IGNORE_SIGTERM": "1"},
    )
    wait_for_log(container, READY_LINE)
    container.kill(signal="SIGTERM")
    time.sleep(1.0)
    container.reload()
    assert container.status == "running"
    container.stop(timeout=1)  # SIGTERM, then SIGKILL after a second
    state = container.wait(timeout=10)
    assert state["StatusCode"] == 137


def test_cli_dev_build_standin_prints_the_image_reference(standin_image: str) -> None:
    src = Path(__file__).parents[2] / "src"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-m", "servectl", "dev", "build-standin"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == standin_image


def test_the_image_serves_anthropic_and_ollama_routes_from_its_route_table(
    run_container: Callable[..., Any],
) -> None:
    argv = [*LAUNCH, "--model-path", DEMO_MODEL_PATH, "--served-model-name", "glm-demo", "--host", "0.0.0.0"]
    container = run_container(
        [*argv, "--port", "30000"],
        environment={"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_TOKEN_RATE": "500"},
        ports={PORT: ("127.0.0.1", None)},
    )
    wait_for_log(container, READY_LINE)
    base = f"http://127.0.0.1:{host_port(container)}"
    ask = {"model": "glm-demo", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=base, timeout=10) as client:
        with client.stream("POST", "/v1/messages", json=ask) as response:
            events = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
        assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
        chat = {"model": "glm-demo", "messages": ask["messages"], "stream": False, "options": {"num_predict": 2}}
        answer = client.post("/api/chat", json=chat).json()
        assert answer["done"] and answer["eval_count"] == 2
        assert [m["name"] for m in client.get("/api/tags").json()["models"]] == ["glm-demo"]
