"""Pure halves of the Docker adapter: spec -> SDK kwargs, inspect -> ContainerState, chunks -> lines."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from servectl.adapters.docker import (
    DockerSdkEngine,
    PublishedPort,
    container_state_from_inspect,
    create_container_args,
    run_kwargs,
    split_log_chunks,
)
from servectl.plan.compile import DockerRunSpec, MountPlan, PortBinding, docker_run_argv
from servectl.plan.resolve import resolve


def kwargs_from_docker_run(argv: list[str], environ: dict[str, str]) -> dict[str, Any]:
    """Read back the ``docker run`` argv that servectl prints, as the Docker CLI would read it."""
    assert argv[:3] == ["docker", "run", "-d"]
    out: dict[str, Any] = {"labels": {}, "environment": [], "ulimits": [], "volumes": [], "init": False}
    i = 3
    while argv[i].startswith("-"):
        opt = argv[i]
        if opt == "--init":
            out["init"] = True
            i += 1
            continue
        value = argv[i + 1]
        i += 2
        if opt == "--name":
            out["name"] = value
        elif opt == "--label":
            key, _, label = value.partition("=")
            out["labels"][key] = label
        elif opt == "--gpus":
            assert value.startswith('"device=') and value.endswith('"'), value
            out["device_requests"] = [{"device_ids": value[len('"device=') : -1].split(","), "capabilities": [["gpu"]]}]
        elif opt == "--ipc":
            out["ipc_mode"] = value
        elif opt == "--shm-size":
            out["shm_size"] = value
        elif opt == "--ulimit":
            name, _, limits = value.partition("=")
            soft, _, hard = limits.partition(":")
            out["ulimits"].append({"name": name, "soft": int(soft), "hard": int(hard or soft)})
        elif opt == "--network":
            out["network_mode"] = value
        elif opt == "-p":
            host, _, container_port = value.rpartition(":")
            host_ip, _, host_port = host.rpartition(":")
            out.setdefault("ports", {})[f"{container_port}/tcp"] = (host_ip.strip("[]"), int(host_port))
        elif opt == "-v":
            out["volumes"].append(value)
        elif opt == "-e":
            if "=" in value:
                out["environment"].append(value)
            elif value in environ:  # `-e NAME` passes NAME through when it is set
                out["environment"].append(f"{value}={environ[value]}")
        elif opt == "--stop-timeout":
            out["stop_timeout"] = int(value)
        else:
            raise AssertionError(f"unexpected docker run option {opt}")
    out["image"] = argv[i]
    out["command"] = argv[i + 1 :]
    return out


def _synthetic_spec() -> DockerRunSpec:
    return DockerRunSpec(
        image="registry.example/engine:v1@sha256:" + "a" * 64,
        name="svc-x",
        command=("python3", "-m", "sglang.launch_server", "--port", "8180", "--tp-size", "2"),
        labels={"servectl.managed": "1", "servectl.profile": "x"},
        environment=(("HF_TOKEN", None), ("MISSING_VAR", None), ("NCCL_DEBUG", "WARN")),
        device_ids=("2", "3"),
        ipc_mode="host",
        shm_size="32g",
        ulimits=(("memlock", -1, -1), ("nofile", 1024, 4096)),
        network_mode="bridge",
        ports=(PortBinding("::1", 8180, 8180),),
        mounts=(MountPlan("/srv/models/x", "/model", True), MountPlan("/srv/cache", "/root/.cache", False)),
        stop_timeout_s=45,
    )


@pytest.fixture
def shipped_plans(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[DockerRunSpec]:
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SERVECTL_PROFILES", raising=False)
    return [resolve(name, environ=os.environ).plan.docker for name in ("demo", "glm53-393k")]


def test_run_kwargs_make_the_same_container_as_the_printed_docker_run(
    shipped_plans: list[DockerRunSpec],
) -> None:
    environ = {"HF_TOKEN": "hf_secret"}
    for spec in [*shipped_plans, _synthetic_spec()]:
        expected = kwargs_from_docker_run(docker_run_argv(spec), environ)
        assert run_kwargs(spec, environ=environ) == expected, spec.name


def test_run_kwargs_pass_through_variables_only_when_set() -> None:
    kwargs = run_kwargs(_synthetic_spec(), environ={"HF_TOKEN": "hf_x"})
    assert kwargs["environment"] == ["HF_TOKEN=hf_x", "NCCL_DEBUG=WARN"]
    assert run_kwargs(_synthetic_spec(), environ={})["environment"] == ["NCCL_DEBUG=WARN"]


def test_run_kwargs_request_gpus_only_when_the_spec_names_devices(shipped_plans: list[DockerRunSpec]) -> None:
    demo, glm = shipped_plans
    assert "device_requests" not in run_kwargs(demo, environ={})
    assert run_kwargs(glm, environ={})["device_requests"] == [{"device_ids": ["0", "1"], "capabilities": [["gpu"]]}]


def test_run_kwargs_publish_no_ports_with_host_networking() -> None:
    spec = DockerRunSpec(**{**_synthetic_spec().__dict__, "network_mode": "host", "ports": ()})
    kwargs = run_kwargs(spec, environ={})
    assert kwargs["network_mode"] == "host" and "ports" not in kwargs


_INSPECT: dict[str, Any] = {
    "Id": "c0ffee" * 10 + "abcd",
    "Name": "/servectl-demo",
    "Created": "2026-11-30T10:00:00.123456789Z",
    "Config": {
        "Image": "servectl-standin:latest",
        "Labels": {"servectl.managed": "1", "servectl.profile": "demo"},
    },
    "State": {
        "Status": "exited",
        "ExitCode": 137,
        "OOMKilled": True,
        "Pid": 0,
        "StartedAt": "2026-11-30T10:00:01.5Z",
        "FinishedAt": "2026-11-30T10:05:01.000000001Z",
    },
    "HostConfig": {
        "NetworkMode": "bridge",
        "PortBindings": {"8190/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8190"}]},
        "DeviceRequests": [
            {"Driver": "", "Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]},
        ],
    },
    "NetworkSettings": {"Ports": {}},
    "Mounts": [{"Type": "bind", "Source": "/srv/models/demo", "Destination": "/model"}],
}


def test_inspect_of_an_oom_killed_container_keeps_exit_code_oom_flag_ports_and_gpus() -> None:
    state = container_state_from_inspect(_INSPECT)
    assert state.name == "servectl-demo" and state.managed and not state.running
    assert (state.status, state.exit_code, state.oom_killed, state.pid) == ("exited", 137, True, None)
    assert state.ports == (PublishedPort("127.0.0.1", 8190, 8190),)
    assert state.device_ids == ("0", "1")
    assert state.mounts == (("/srv/models/demo", "/model"),)
    assert state.finished_at is not None and state.started_at is not None
    assert state.finished_at - state.started_at == pytest.approx(299.5, abs=1e-3)


def test_inspect_of_a_running_container_has_no_exit_code_and_reads_zero_time_as_none() -> None:
    data = {
        **_INSPECT,
        "State": {
            "Status": "running",
            "ExitCode": 0,
            "Pid": 4321,
            "StartedAt": "2026-11-30T10:00:01Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
        },
    }
    state = container_state_from_inspect(data)
    assert state.running and state.exit_code is None and state.pid == 4321 and state.finished_at is None


def test_inspect_reports_gpus_all_for_a_count_minus_one_request() -> None:
    host = {**_INSPECT["HostConfig"], "DeviceRequests": [{"Count": -1, "Capabilities": [["gpu"]]}]}
    assert container_state_from_inspect({**_INSPECT, "HostConfig": host}).device_ids == ("all",)


def test_log_chunks_split_into_lines_across_chunk_borders_and_progress_redraws() -> None:
    chunks = [
        b"Load weight begin\nLoading shards:  50% Comp",
        b"leted\rLoading shards: 100% Completed\r\n",
        b"KV Cache is allocated.\n\nlast line without newline",
    ]
    assert list(split_log_chunks(iter(chunks))) == [
        "Load weight begin",
        "Loading shards:  50% Completed",
        "Loading shards: 100% Completed",
        "KV Cache is allocated.",
        "last line without newline",
    ]


def test_log_chunks_with_broken_utf8_do_not_raise() -> None:
    assert list(split_log_chunks(iter([b"caf\xc3", b"\xa9 \xff\n"]))) == ["café \ufffd"]


def test_create_container_args_split_config_and_host_config_for_the_public_low_level_api(
    shipped_plans: list[DockerRunSpec],
) -> None:
    glm = next(s for s in shipped_plans if s.device_ids)
    args = create_container_args(glm, environ={})
    assert args.container["stop_timeout"] == glm.stop_timeout_s and args.container["name"] == glm.name
    assert args.container["volumes"] == [m.target for m in glm.mounts]
    assert args.host_config["binds"] == run_kwargs(glm, environ={})["volumes"]
    assert args.host_config["device_requests"] == [{"device_ids": ["0", "1"], "capabilities": [["gpu"]]}]
    assert "stop_timeout" not in args.host_config and "device_requests" not in args.container


def test_create_calls_only_the_public_sdk_api(shipped_plans: list[DockerRunSpec]) -> None:
    """The SDK client is a strict mock of docker.APIClient: a private attribute or helper would fail here."""
    docker = pytest.importorskip("docker")
    api = mock.create_autospec(docker.APIClient, instance=True)
    api.create_host_config.return_value = {"Binds": ["x"]}
    api.create_container.return_value = {"Id": "c" * 64}
    client = mock.Mock(spec=["api", "close"], api=api)
    spec = shipped_plans[0]
    assert DockerSdkEngine(environ=os.environ, client=client).create(spec, environ={}) == "c" * 64
    args = create_container_args(spec, environ={})
    api.create_host_config.assert_called_once_with(**args.host_config)
    api.create_container.assert_called_once_with(**args.container, host_config={"Binds": ["x"]})


def test_listing_asks_the_engine_for_its_default_runtime_only_for_a_container_that_names_none() -> None:
    """``status`` lists and inspects; ``docker info`` (the slowest call) only when a container's runtime is unknown."""
    docker = pytest.importorskip("docker")
    api = mock.create_autospec(docker.APIClient, instance=True)
    api.containers.return_value = [{"Id": "a" * 64}, {"Id": "b" * 64}]
    nvidia_env = {"Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    api.inspect_container.side_effect = lambda cid: {
        "Id": cid,
        "State": {"Status": "running"},
        "HostConfig": {"Runtime": "runc" if cid.startswith("a") else ""},
        **nvidia_env,
    }
    api.info.return_value = {"DefaultRuntime": "nvidia"}
    engine = DockerSdkEngine(environ=os.environ, client=mock.Mock(spec=["api", "close"], api=api))
    api.containers.return_value = [{"Id": "a" * 64}]
    [runc] = engine.list_managed()
    assert runc.gpu_request is None and api.info.call_count == 0
    api.containers.return_value = [{"Id": "a" * 64}, {"Id": "b" * 64}]
    _, unnamed = engine.list_managed()
    assert api.info.call_count == 1  # asked once, for the container that names no runtime
    assert unnamed.gpu_request is not None and unnamed.gpu_request.device_ids == ("0",)


def test_inspect_keeps_the_values_of_secret_named_variables_for_redaction_only() -> None:
    env = ["HF_TOKEN=hf_abcdefghij", "PATH=/usr/bin", "MY_API_KEY=k-123456", "SHORT_KEY=ab"]
    data = {"Id": "c1", "Name": "/svc", "State": {"Status": "running"}, "Config": {"Env": env}}
    state = container_state_from_inspect(data)
    assert state.secret_env_values == ("hf_abcdefghij", "k-123456")
    assert "hf_abcdefghij" not in repr(state)


def test_the_sdk_engine_reads_where_the_engine_is_from_the_environ_it_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """DockerSdkEngine read DOCKER_HOST from os.environ (its socket reader and its one-line error) whatever
    environment the host had; now only from the context's."""
    from servectl.errors import EngineUnavailable

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    where = f"unix://{tmp_path}/no-engine.sock"
    engine = DockerSdkEngine(environ={"DOCKER_HOST": where}, timeout_s=1)
    try:
        with pytest.raises(EngineUnavailable) as err:
            engine.ping()
    finally:
        engine.close()
    assert f"Docker engine unreachable at {where} (No such file or directory)" in str(err.value)
