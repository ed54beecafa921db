"""What servectl reads from the Docker engine, as plain values: engine, images, running containers.

:class:`DockerFacts` is the read-only interface preflight takes; :class:`DockerSdkFacts` is the real one
(Docker SDK, imported lazily). Translating ``docker inspect`` output into :class:`ContainerInfo` is a pure
function (:func:`container_info_from_inspect`) so that unit tests cover every way a container can ask for
GPUs: ``--gpus`` device requests, CDI devices, ``/dev/nvidia*`` devices and the ``nvidia`` runtime with
``NVIDIA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from servectl.errors import EngineUnavailable

SERVECTL_PROFILE_LABEL = "servectl.profile"
"""Label that servectl puts on every container it starts; its value is the profile name."""

COMPOSE_CONFIG_FILES_LABEL = "com.docker.compose.project.config_files"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"

GpuRequestVia = Literal["device-request", "cdi", "device-node", "nvidia-runtime"]


@dataclass(frozen=True)
class EngineInfo:
    """The engine that answered a ping."""

    server_version: str
    runtimes: frozenset[str]
    default_runtime: str | None
    cdi_spec_dirs: tuple[str, ...] = ()
    cgroup_version: str | None = None


@dataclass(frozen=True)
class ImageInfo:
    """A local image: its id (``sha256:...``), repo digests (``repo@sha256:...``) and tags."""

    id: str
    repo_digests: tuple[str, ...]
    tags: tuple[str, ...]
    size_bytes: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def digests(self) -> frozenset[str]:
        """Every ``sha256:...`` this image answers to: its id and the digest part of each repo digest."""
        found = {self.id}
        found.update(d.split("@", 1)[1] for d in self.repo_digests if "@" in d)
        return frozenset(found)


@dataclass(frozen=True)
class PublishedPort:
    """A container port published on the host."""

    host_ip: str
    host_port: int
    container_port: int
    protocol: str = "tcp"


@dataclass(frozen=True)
class GpuRequest:
    """Which GPUs a container asked for. ``device_ids`` are indices (``"0"``) or UUIDs (``"GPU-..."``)."""

    all_gpus: bool
    device_ids: tuple[str, ...]
    via: GpuRequestVia

    def covers(self, index: int, uuid: str | None) -> bool:
        """Whether the card with this index/UUID is among the requested ones."""
        if self.all_gpus:
            return True
        for device_id in self.device_ids:
            card = device_id.split(":", 1)[0]  # MIG device "0:1" sits on card 0
            if card == str(index) or (uuid is not None and card.lower() == uuid.lower()):
                return True
        return False


@dataclass(frozen=True)
class ContainerInfo:
    """A container on the engine (running, paused or restarting)."""

    id: str
    name: str
    image: str
    state: str
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_request: GpuRequest | None = None
    published_ports: tuple[PublishedPort, ...] = ()
    network_mode: str | None = None
    pid: int | None = None

    @property
    def short_id(self) -> str:
        """The 12-character id ``docker ps`` shows."""
        return self.id[:12]

    @property
    def servectl_profile(self) -> str | None:
        """The profile name when servectl started this container."""
        return self.labels.get(SERVECTL_PROFILE_LABEL)


class DockerFacts(Protocol):
    """Read-only questions preflight asks the Docker engine."""

    def ping(self) -> EngineInfo:
        """Whether the engine answers, with its version, runtimes and CDI spec folders.

        Raises:
            EngineUnavailable: the engine cannot be reached.
        """
        ...

    def image(self, ref: str) -> ImageInfo | None:
        """The local image for a reference (tag, ``repo@sha256:...`` or id), or ``None``."""
        ...

    def containers(self) -> tuple[ContainerInfo, ...]:
        """Every container that is running, paused or restarting."""
        ...


# ---------------------------------------------------------------------------------------------------------
# Pure translation of `docker inspect`


_DEV_NVIDIA = re.compile(r"^/dev/nvidia(\d+)$")


def _env(config: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in config.get("Env") or ():
        key, _, value = str(item).partition("=")
        env[key] = value
    return env


def _visible_devices(value: str) -> tuple[bool, tuple[str, ...]] | None:
    """Parse ``NVIDIA_VISIBLE_DEVICES``; ``None`` when it asks for no GPU."""
    text = value.strip()
    if text in ("", "none", "void"):
        return None
    if text == "all":
        return True, ()
    return False, tuple(part.strip() for part in text.split(",") if part.strip())


def gpu_request_from_inspect(data: Mapping[str, Any], *, default_runtime: str | None = None) -> GpuRequest | None:
    """Which GPUs a container asked for, from its ``docker inspect`` data; ``None`` for none."""
    host = data.get("HostConfig") or {}
    for request in host.get("DeviceRequests") or ():
        driver = str(request.get("Driver") or "")
        ids = tuple(str(i) for i in request.get("DeviceIDs") or ())
        capabilities = {str(c) for group in request.get("Capabilities") or () for c in group}
        if driver == "cdi":
            gpu_ids = tuple(i.split("=", 1)[1] for i in ids if i.startswith("nvidia.com/gpu="))
            if gpu_ids:
                return GpuRequest(all_gpus="all" in gpu_ids, device_ids=gpu_ids, via="cdi")
            continue
        if driver not in ("", "nvidia") or (driver == "" and "gpu" not in capabilities):
            continue
        count = int(request.get("Count") or 0)
        if ids:
            return GpuRequest(all_gpus=False, device_ids=ids, via="device-request")
        if count < 0:
            return GpuRequest(all_gpus=True, device_ids=(), via="device-request")
        if count > 0:  # Docker hands out the first `count` cards
            return GpuRequest(all_gpus=False, device_ids=tuple(str(i) for i in range(count)), via="device-request")
    nodes = []
    for device in host.get("Devices") or ():
        path = str(device.get("PathOnHost") or "")
        match = _DEV_NVIDIA.match(path)
        if match:
            nodes.append(match.group(1))
    if nodes:
        return GpuRequest(all_gpus=False, device_ids=tuple(nodes), via="device-node")
    runtime = host.get("Runtime") or default_runtime
    if runtime == "nvidia":
        visible = _visible_devices(_env(data.get("Config") or {}).get("NVIDIA_VISIBLE_DEVICES", ""))
        if visible is not None:
            return GpuRequest(all_gpus=visible[0], device_ids=visible[1], via="nvidia-runtime")
    return None


def published_ports_from_inspect(data: Mapping[str, Any]) -> tuple[PublishedPort, ...]:
    """Host-published ports from ``NetworkSettings.Ports`` of ``docker inspect``."""
    ports: list[PublishedPort] = []
    for key, bindings in ((data.get("NetworkSettings") or {}).get("Ports") or {}).items():
        container_port, _, protocol = str(key).partition("/")
        for binding in bindings or ():
            host_port = str(binding.get("HostPort") or "")
            if not host_port.isdigit():
                continue
            ports.append(
                PublishedPort(
                    host_ip=str(binding.get("HostIp") or "0.0.0.0"),
                    host_port=int(host_port),
                    container_port=int(container_port),
                    protocol=protocol or "tcp",
                )
            )
    return tuple(sorted(set(ports), key=lambda p: (p.host_port, p.host_ip, p.protocol)))


def container_info_from_inspect(data: Mapping[str, Any], *, default_runtime: str | None = None) -> ContainerInfo:
    """Translate one ``docker inspect`` document into a :class:`ContainerInfo`."""
    config = data.get("Config") or {}
    state = data.get("State") or {}
    host = data.get("HostConfig") or {}
    pid = int(state.get("Pid") or 0)
    return ContainerInfo(
        id=str(data.get("Id", "")),
        name=str(data.get("Name", "")).lstrip("/"),
        image=str(config.get("Image") or data.get("Image") or ""),
        state=str(state.get("Status") or ""),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        gpu_request=gpu_request_from_inspect(data, default_runtime=default_runtime),
        published_ports=published_ports_from_inspect(data),
        network_mode=str(host.get("NetworkMode")) if host.get("NetworkMode") else None,
        pid=pid or None,
    )


# ---------------------------------------------------------------------------------------------------------
# The real engine


class DockerSdkFacts:
    """The real :class:`DockerFacts`, through the Docker SDK (imported on first use).

    Args:
        client: a ``docker.DockerClient``; ``None`` makes one from the environment (``DOCKER_HOST`` or the
            default socket) on first use.
        timeout_s: how long one API call may take.
    """

    def __init__(self, *, client: Any | None = None, timeout_s: float = 10.0) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._default_runtime: str | None = None
        self._pinged = False

    def _api(self) -> Any:
        if self._client is None:
            docker = _docker_sdk()
            try:
                self._client = docker.from_env(timeout=int(self._timeout_s))
            except docker.errors.DockerException as err:
                raise EngineUnavailable(_unreachable(err)) from err
        return self._client.api

    def ping(self) -> EngineInfo:
        """Ask the engine for its version, runtimes and CDI spec folders.

        Raises:
            EngineUnavailable: the engine cannot be reached.
        """
        api = self._api()
        docker = _docker_sdk()
        try:
            info = api.info()
        except (docker.errors.DockerException, OSError) as err:
            raise EngineUnavailable(_unreachable(err)) from err
        self._default_runtime = info.get("DefaultRuntime") or None
        self._pinged = True
        return EngineInfo(
            server_version=str(info.get("ServerVersion") or ""),
            runtimes=frozenset((info.get("Runtimes") or {}).keys()),
            default_runtime=self._default_runtime,
            cdi_spec_dirs=tuple(str(d) for d in info.get("CDISpecDirs") or ()),
            cgroup_version=str(info["CgroupVersion"]) if info.get("CgroupVersion") else None,
        )

    def image(self, ref: str) -> ImageInfo | None:
        """The local image for a reference, or ``None`` when the engine has none by that reference."""
        api = self._api()
        docker = _docker_sdk()
        try:
            data = api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as err:
            if getattr(err, "status_code", None) in (400, 404):  # malformed or unknown reference
                return None
            raise EngineUnavailable(_unreachable(err)) from err
        except (docker.errors.DockerException, OSError) as err:
            raise EngineUnavailable(_unreachable(err)) from err
        return ImageInfo(
            id=str(data.get("Id", "")),
            repo_digests=tuple(str(d) for d in data.get("RepoDigests") or ()),
            tags=tuple(str(t) for t in data.get("RepoTags") or ()),
            size_bytes=int(data["Size"]) if data.get("Size") is not None else None,
            labels={str(k): str(v) for k, v in ((data.get("Config") or {}).get("Labels") or {}).items()},
        )

    def containers(self) -> tuple[ContainerInfo, ...]:
        """Every running, paused or restarting container, inspected."""
        if not self._pinged:
            self.ping()  # the default runtime decides whether NVIDIA_VISIBLE_DEVICES hands out GPUs
        api = self._api()
        docker = _docker_sdk()
        try:
            listed = api.containers(all=False)
        except (docker.errors.DockerException, OSError) as err:
            raise EngineUnavailable(_unreachable(err)) from err
        found: list[ContainerInfo] = []
        for entry in listed:
            try:
                data = api.inspect_container(entry["Id"])
            except docker.errors.NotFound:  # removed between list and inspect
                continue
            except (docker.errors.DockerException, OSError) as err:
                raise EngineUnavailable(_unreachable(err)) from err
            found.append(container_info_from_inspect(data, default_runtime=self._default_runtime))
        return tuple(found)

    def close(self) -> None:
        """Close the SDK client's connection pool."""
        if self._client is not None:
            self._client.close()


def _docker_sdk() -> Any:
    """The Docker SDK module, imported on first use."""
    try:
        import docker  # type: ignore[import-untyped]  # the Docker SDK ships no type information
    except ImportError as err:
        raise EngineUnavailable("Docker SDK for Python is not installed; install it with: pip install docker") from err
    return docker


def _unreachable(err: Exception) -> str:
    return (
        f"Docker engine unreachable: {err}; start it (sudo systemctl start docker) or point DOCKER_HOST at "
        "a running engine"
    )
