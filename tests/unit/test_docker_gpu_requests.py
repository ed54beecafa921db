"""docker inspect to ContainerState: every way a container can ask for GPUs, and published ports."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from servectl.adapters.docker import (
    DockerSdkEngine,
    GpuRequest,
    ImageInfo,
    container_state_from_inspect,
    gpu_request_from_inspect,
    published_ports_from_inspect,
)
from servectl.errors import EngineUnavailable


def inspect(**host_config: Any) -> dict[str, Any]:
    env = host_config.pop("env", [])
    return {
        "Id": "f" * 64,
        "Name": "/ds4-daily",
        "Config": {"Image": "ds4:v9", "Env": env, "Labels": {"com.docker.compose.service": "ds4"}},
        "State": {"Status": "running", "Pid": 4321},
        "HostConfig": {"NetworkMode": "bridge", **host_config},
        "NetworkSettings": {"Ports": {}},
    }


@pytest.mark.parametrize(
    ("host_config", "expected"),
    [
        # docker run --gpus all
        (
            {"DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}]},
            GpuRequest(True, (), "device-request"),
        ),
        # docker run --gpus '"device=0,1"'
        (
            {"DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]}]},
            GpuRequest(False, ("0", "1"), "device-request"),
        ),
        # docker run --gpus 2 : Docker hands out the first two cards
        (
            {"DeviceRequests": [{"Driver": "nvidia", "Count": 2, "DeviceIDs": [], "Capabilities": [["gpu"]]}]},
            GpuRequest(False, ("0", "1"), "device-request"),
        ),
        # compose: deploy.resources.reservations.devices with a UUID
        (
            {
                "DeviceRequests": [
                    {
                        "Driver": "nvidia",
                        "Count": 0,
                        "DeviceIDs": ["GPU-abc"],
                        "Capabilities": [["gpu", "utility"]],
                    }
                ]
            },
            GpuRequest(False, ("GPU-abc",), "device-request"),
        ),
        # docker run --device nvidia.com/gpu=1 (CDI)
        (
            {"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=1"]}]},
            GpuRequest(False, ("1",), "cdi"),
        ),
        (
            {"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}]},
            GpuRequest(True, (), "cdi"),
        ),
        # a CDI name given as a device (compose `devices:`), or listed in HostConfig.CDIDevices
        (
            {"Devices": [{"PathOnHost": "nvidia.com/gpu=0"}, {"PathOnHost": "nvidia.com/gpu=1"}]},
            GpuRequest(False, ("0", "1"), "cdi"),
        ),
        (
            {"CDIDevices": ["nvidia.com/gpu=all"]},
            GpuRequest(True, (), "cdi"),
        ),
        # --device /dev/nvidia1
        (
            {"Devices": [{"PathOnHost": "/dev/nvidiactl"}, {"PathOnHost": "/dev/nvidia1"}]},
            GpuRequest(False, ("1",), "device-node"),
        ),
        # --runtime nvidia -e NVIDIA_VISIBLE_DEVICES=0
        (
            {"Runtime": "nvidia", "env": ["NVIDIA_VISIBLE_DEVICES=0"]},
            GpuRequest(False, ("0",), "nvidia-runtime"),
        ),
        (
            {"Runtime": "nvidia", "env": ["NVIDIA_VISIBLE_DEVICES=all"]},
            GpuRequest(True, (), "nvidia-runtime"),
        ),
    ],
)
def test_gpu_requests_are_read_from_every_docker_spelling(host_config: dict[str, Any], expected: GpuRequest) -> None:
    assert gpu_request_from_inspect(inspect(**host_config)) == expected


@pytest.mark.parametrize(
    "host_config",
    [
        {},
        {"Runtime": "runc", "env": ["NVIDIA_VISIBLE_DEVICES=all"]},  # a CUDA image without the nvidia runtime
        {"Runtime": "nvidia", "env": ["NVIDIA_VISIBLE_DEVICES=void"]},
        {"Runtime": "nvidia"},
        {"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["vendor.com/fpga=0"]}]},
        {"DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["compute"]]}]},
    ],
)
def test_containers_without_gpus_have_no_gpu_request(host_config: dict[str, Any]) -> None:
    assert gpu_request_from_inspect(inspect(**host_config)) is None


def test_the_nvidia_default_runtime_hands_a_cuda_image_its_visible_devices() -> None:
    data = inspect(env=["NVIDIA_VISIBLE_DEVICES=all"])
    assert gpu_request_from_inspect(data, default_runtime="nvidia") == GpuRequest(True, (), "nvidia-runtime")


def test_gpu_request_covers_cards_by_index_uuid_or_mig_parent() -> None:
    request = GpuRequest(False, ("1", "GPU-ABC", "2:0"), "device-request")
    assert request.covers(1, "GPU-x")
    assert request.covers(5, "gpu-abc")
    assert request.covers(2, None)
    assert not request.covers(0, "GPU-def")
    assert GpuRequest(True, (), "cdi").covers(7, None)


def test_published_ports_are_read_with_their_host_address() -> None:
    data = inspect()
    data["NetworkSettings"]["Ports"] = {
        "8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}, {"HostIp": "::", "HostPort": "8080"}],
        "30000/tcp": None,  # exposed, not published
        "9000/udp": [{"HostIp": "127.0.0.1", "HostPort": "9000"}],
    }
    ports = published_ports_from_inspect(data)
    assert [(p.host_ip, p.host_port, p.container_port, p.protocol) for p in ports] == [
        ("0.0.0.0", 8080, 8080, "tcp"),
        ("::", 8080, 8080, "tcp"),
        ("127.0.0.1", 9000, 9000, "udp"),
    ]


def test_container_info_keeps_name_labels_state_and_pid() -> None:
    info = container_state_from_inspect(inspect())
    assert info.name == "ds4-daily" and info.short_id == "f" * 12
    assert info.status == "running" and info.pid == 4321 and info.image == "ds4:v9"
    assert info.labels["com.docker.compose.service"] == "ds4"
    assert info.servectl_profile is None and info.network_mode == "bridge"


def test_image_digests_include_the_id_and_each_repo_digest() -> None:
    image = ImageInfo(id="sha256:" + "1" * 64, repo_digests=("ghcr.io/x/y@sha256:" + "2" * 64,), tags=("y:1",))
    assert image.digests() == {"sha256:" + "1" * 64, "sha256:" + "2" * 64}


def test_a_missing_docker_sdk_is_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # makes `import docker` raise ImportError
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # not a local socket: even reads need the SDK
    with pytest.raises(EngineUnavailable) as caught:
        DockerSdkEngine(environ=os.environ).ping()
    assert caught.value.message == "Docker SDK for Python is not installed; install it with: pip install docker"


_AGREEMENT_CASES = [
    ({"DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]}, None, ["all"]),
    ({"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}]}, None, ["all"]),
    ({"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=2"]}]}, None, ["2"]),
    ({"Devices": [{"PathOnHost": "nvidia.com/gpu=1"}]}, None, ["1"]),
    ({"CDIDevices": ["nvidia.com/gpu=0"]}, None, ["0"]),
    ({"Devices": [{"PathOnHost": "/dev/nvidia3"}]}, None, ["3"]),
    ({"Runtime": "nvidia", "env": ["NVIDIA_VISIBLE_DEVICES=0,1"]}, None, ["0", "1"]),
    ({"env": ["NVIDIA_VISIBLE_DEVICES=1"]}, "nvidia", ["1"]),  # the engine's default runtime
    ({"env": ["NVIDIA_VISIBLE_DEVICES=1"]}, "runc", []),
    ({"Runtime": "runc", "env": ["NVIDIA_VISIBLE_DEVICES=1"]}, "nvidia", []),  # the container's own wins
]


@pytest.mark.parametrize(("host_config", "default_runtime", "gpus"), _AGREEMENT_CASES)
def test_the_adapter_and_the_container_match_read_the_same_gpus(
    host_config: dict[str, Any], default_runtime: str | None, gpus: list[str]
) -> None:
    """One reader: the adapter's ContainerState (preflight, swap) and container_match's fields (adopt,
    status) say the same of every spelling, CDI devices and the engine's default runtime included."""
    from servectl.plan.container_match import container_fields
    from servectl.profile.catalog import DEFAULT_CATALOG, FlagCatalog

    data = inspect(**host_config)
    state = container_state_from_inspect(data, default_runtime=default_runtime)
    fields = container_fields(data, FlagCatalog.load(DEFAULT_CATALOG), default_runtime=default_runtime)
    assert list(state.device_ids) == gpus
    assert fields["gpus"] == sorted(gpus)
    if state.gpu_request is not None and state.gpu_request.via == "nvidia-runtime":
        assert "NVIDIA_VISIBLE_DEVICES" not in fields["env"]  # the request, not an environment setting
