"""The Docker engine behind one small interface: what servectl reads from it and what it does with it.

:class:`DockerEngine` is the one Protocol the runtime, the health gate, swap, conflicts and preflight take. It
speaks in plain values (:class:`ContainerState`, :class:`ImageInfo`, :class:`EngineInfo`, log lines as
``str``) and never leaks SDK objects. :class:`DockerSdkEngine` is the real one (the Docker SDK is imported
lazily, so ``servectl --help`` and ``up --dry-run`` never load it); ``servectl.testing.docker.FakeDockerEngine``
is the fake for unit tests.

The translation is pure and kept apart from the SDK calls, so unit tests pin it without an engine:
:func:`run_kwargs` / :func:`create_container_args` turn a :class:`~servectl.plan.compile.DockerRunSpec` into
the SDK's arguments (the same container as :func:`servectl.plan.compile.docker_run_argv`);
:func:`container_state_from_inspect` turns ``docker inspect`` output into a :class:`ContainerState` (including
every way a container can ask for GPUs: ``--gpus`` device requests, CDI devices, ``/dev/nvidia*`` devices and
the ``nvidia`` runtime with ``NVIDIA_VISIBLE_DEVICES``); :func:`engine_info_from_info` and
:func:`image_info_from_inspect` read the engine and image documents.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from servectl.errors import EngineUnavailable, PreflightFailed, ServectlError, ServiceConflict, StartupFailed
from servectl.plan.labels import LABEL_MANAGED, LABEL_PROFILE
from servectl.signals import critical

if TYPE_CHECKING:
    from servectl.plan.compile import DockerRunSpec

#: Label of the throwaway containers :meth:`DockerEngine.run_oneshot` starts (never servectl.managed).
LABEL_ONESHOT = "servectl.oneshot"

__all__ = [
    "COMPOSE_CONFIG_FILES_LABEL",
    "COMPOSE_SERVICE_LABEL",
    "ContainerState",
    "DockerEngine",
    "DockerSdkEngine",
    "EngineInfo",
    "GpuRequest",
    "ImageInfo",
    "LogLines",
    "OneShotResult",
    "PublishedPort",
    "container_state_from_inspect",
    "create_container_args",
    "engine_info_from_info",
    "gpu_request_from_inspect",
    "image_info_from_inspect",
    "published_ports_from_inspect",
    "run_kwargs",
    "split_log_chunks",
]

COMPOSE_CONFIG_FILES_LABEL = "com.docker.compose.project.config_files"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"

GpuRequestVia = Literal["device-request", "cdi", "device-node", "nvidia-runtime"]


# -- values ---------------------------------------------------------------------------------------------
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
class ContainerState:
    """One container as ``docker inspect`` describes it, in plain values.

    Attributes:
        status: Docker's state: "created", "running", "restarting", "paused", "exited", "removing", "dead".
        exit_code: the main process's exit code once it exited (None while it never ran or still runs).
        started_at: when it last started (epoch seconds), None if it never started.
        finished_at: when it last exited (epoch seconds), None if it has not.
        ports: published ports (host address, host port, container port, protocol).
        gpu_request: which GPUs it asked for (any of the ways Docker offers), None for none.
        pid: host pid of the container's main process while it runs.
        mounts: (host source, container destination) of each mount.
    """

    id: str
    name: str
    image: str
    status: str
    labels: Mapping[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    oom_killed: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    ports: tuple[PublishedPort, ...] = ()
    gpu_request: GpuRequest | None = None
    pid: int | None = None
    mounts: tuple[tuple[str, str], ...] = ()
    created_at: float | None = None
    network_mode: str = ""

    @property
    def managed(self) -> bool:
        """Whether servectl started this container (it carries ``servectl.managed=1``)."""
        return self.labels.get(LABEL_MANAGED) == "1"

    @property
    def servectl_profile(self) -> str | None:
        """The profile name when servectl started this container."""
        return self.labels.get(LABEL_PROFILE)

    @property
    def running(self) -> bool:
        return self.status in ("running", "restarting", "paused")

    @property
    def short_id(self) -> str:
        """The 12-character id ``docker ps`` shows."""
        return self.id[:12]

    @property
    def device_ids(self) -> tuple[str, ...]:
        """The GPUs it asked for: indices or UUIDs, ``("all",)`` for all of them, ``()`` for none."""
        if self.gpu_request is None:
            return ()
        return ("all",) if self.gpu_request.all_gpus else self.gpu_request.device_ids


class LogLines(Iterator[str], Protocol):
    """Log lines of a container, oldest first; ``close()`` ends a followed stream from another thread."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class OneShotResult:
    """What a throwaway container printed and how it ended (see :meth:`DockerEngine.run_oneshot`)."""

    exit_code: int | None  # None when it was killed at the time limit
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    not_found: str | None = None  # the engine could not start the command: its message (no such file...)


class DockerEngine(Protocol):
    """What servectl needs from a container engine. Every method returns plain values."""

    def ping(self) -> EngineInfo:
        """The engine's version, runtimes and CDI spec folders.

        Raises:
            EngineUnavailable: the engine does not answer (the message says the fix).
        """

    def image(self, ref: str) -> ImageInfo | None:
        """The local image for a reference (tag, ``repo@sha256:...``, bare digest or id), or ``None``."""

    def image_present(self, ref: str) -> bool:
        """Whether the image (``repo:tag`` or ``repo@sha256:...``) is on this host."""

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> str:
        """Create and start the container of ``spec``; return its id.

        ``environ`` supplies the pass-through variables (``environment`` values of None); default
        ``os.environ``. If the engine creates the container but cannot start it, the container is removed
        before the error is raised.
        """

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        """Every container servectl started (running or not), optionally narrowed by more labels."""

    def running_containers(self) -> list[ContainerState]:
        """Every running, paused or restarting container, servectl's or not."""

    def containers_named(self, name: str) -> list[ContainerState]:
        """The container with exactly this name, if any (a list, empty when there is none)."""

    def inspect(self, id_or_name: str) -> ContainerState | None:
        """The container's state, or None when there is no such container."""

    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        """``docker inspect`` of the container as the engine returns it (plain data), or None."""

    def image_document(self, ref: str) -> dict[str, Any] | None:
        """``docker image inspect`` of the image as the engine returns it (plain data), or None."""

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        """Log lines (stdout and stderr), split on newlines and carriage returns.

        With ``follow`` the stream ends when the container stops (or on ``close()``).
        """

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        """Send the stop signal (SIGTERM), wait up to ``timeout_s``, then SIGKILL."""

    def kill(self, container_id: str) -> None:
        """SIGKILL now."""

    def remove(self, container_id: str, *, force: bool) -> None:
        """Remove the container (``force`` kills it first); a container already gone is not an error."""

    def start(self, container_id: str) -> None:
        """Start a stopped container again (used for conflict containers that swap restores)."""

    def run_oneshot(
        self, image: str, command: list[str], *, timeout_s: float, labels: Mapping[str, str] | None = None
    ) -> OneShotResult:
        """Run ``command`` in a throwaway container of ``image`` and remove it, whatever happens.

        The container has no network, no GPU, a read-only root file system (a small ``/tmp``), no
        capabilities, and is killed after ``timeout_s``; the image's entrypoint is not used.
        """


# -- pure translation ------------------------------------------------------------------------------------
def run_kwargs(spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The SDK's ``containers.create``/``containers.run`` keyword arguments for ``spec``. Pure.

    Plus ``stop_timeout``, which only the low-level ``create_container`` takes (the adapter passes it there).

    The result makes the same container as ``docker run`` with :func:`servectl.plan.compile.docker_run_argv`:
    ``-e NAME`` without a value passes ``NAME`` through from ``environ`` when it is set there and is
    dropped otherwise, exactly as the Docker CLI does.
    """
    env = os.environ if environ is None else environ
    environment: list[str] = []
    for name, value in spec.environment:
        if value is not None:
            environment.append(f"{name}={value}")
        elif name in env:
            environment.append(f"{name}={env[name]}")
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "name": spec.name,
        "labels": dict(spec.labels),
        "environment": environment,
        "ulimits": [{"name": name, "soft": soft, "hard": hard} for name, soft, hard in spec.ulimits],
        "volumes": [f"{m.source}:{m.target}" + (":ro" if m.read_only else "") for m in spec.mounts],
        "stop_timeout": spec.stop_timeout_s,
        "init": spec.init,
    }
    if spec.network_mode != "bridge":  # as `docker run` without --network: the engine's default (bridge)
        kwargs["network_mode"] = spec.network_mode
    if spec.device_ids:
        kwargs["device_requests"] = [{"device_ids": list(spec.device_ids), "capabilities": [["gpu"]]}]
    if spec.ipc_mode:
        kwargs["ipc_mode"] = spec.ipc_mode
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.restart_policy:
        policy, _, retries = spec.restart_policy.partition(":")
        kwargs["restart_policy"] = {"Name": policy, "MaximumRetryCount": int(retries or 0)}
    if spec.ports:
        ports: dict[str, list[tuple[str, int]]] = {}
        for p in spec.ports:
            ports.setdefault(f"{p.container_port}/tcp", []).append((p.host_ip, p.host_port))
        kwargs["ports"] = {key: binds[0] if len(binds) == 1 else binds for key, binds in ports.items()}
    return kwargs


@dataclass(frozen=True)
class CreateArgs:
    """The low-level ``create_container`` call: its own arguments and those of ``create_host_config``."""

    container: dict[str, Any]
    host_config: dict[str, Any]


_HOST_CONFIG_KEYS = (
    "ulimits",
    "init",
    "network_mode",
    "device_requests",
    "ipc_mode",
    "shm_size",
    "restart_policy",
)


def create_container_args(spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> CreateArgs:
    """:func:`run_kwargs` split the way the SDK's public low-level API takes them. Pure.

    ``APIClient.create_container`` takes the container's config (and ``stop_timeout``, which the high-level
    ``containers.create`` does not know); ``APIClient.create_host_config`` takes binds, port bindings and the
    host settings.
    """
    kwargs = run_kwargs(spec, environ=environ)
    host = {key: kwargs.pop(key) for key in _HOST_CONFIG_KEYS if key in kwargs}
    volumes = kwargs.pop("volumes")
    if volumes:
        host["binds"] = volumes
    ports = kwargs.pop("ports", None)
    container = dict(kwargs)
    if ports:
        host["port_bindings"] = ports
        container["ports"] = [tuple(key.split("/", 1)) for key in sorted(ports)]
    if volumes:
        container["volumes"] = [m.target for m in spec.mounts]
    return CreateArgs(container=container, host_config=host)


def _epoch(value: object) -> float | None:
    """Docker's RFC 3339 timestamps (nanoseconds, ``Z``) as epoch seconds; its zero time as None."""
    if not isinstance(value, str) or not value or value.startswith("0001-01-01"):
        return None
    text = value.replace("Z", "+00:00")
    if "." in text:  # Python parses at most microseconds
        head, rest = text.split(".", 1)
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


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
    """Host-published ports from ``docker inspect``: the live bindings of a running container
    (``NetworkSettings.Ports``), else what it asked for (``HostConfig.PortBindings``)."""
    ports: list[PublishedPort] = []
    live = (data.get("NetworkSettings") or {}).get("Ports")
    asked = (data.get("HostConfig") or {}).get("PortBindings")
    for key, bindings in (live or asked or {}).items():
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


def container_state_from_inspect(data: Mapping[str, Any], *, default_runtime: str | None = None) -> ContainerState:
    """Translate ``docker inspect`` output of one container. Pure.

    ``default_runtime`` (the engine's) decides whether ``NVIDIA_VISIBLE_DEVICES`` hands out GPUs.
    """
    state: Mapping[str, Any] = data.get("State") or {}
    config: Mapping[str, Any] = data.get("Config") or {}
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    status = str(state.get("Status") or "unknown")
    started = _epoch(state.get("StartedAt"))
    finished = _epoch(state.get("FinishedAt"))
    exit_code: int | None = None
    if status in ("exited", "dead") or (finished is not None and status not in ("running", "restarting")):
        raw = state.get("ExitCode")
        exit_code = int(raw) if isinstance(raw, int) else None
    pid = state.get("Pid")
    mounts = tuple(
        (str(m.get("Source") or m.get("Name") or ""), str(m.get("Destination") or "")) for m in data.get("Mounts") or ()
    )
    return ContainerState(
        id=str(data.get("Id") or ""),
        name=str(data.get("Name") or "").lstrip("/"),
        image=str(config.get("Image") or data.get("Image") or ""),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        status=status,
        exit_code=exit_code,
        oom_killed=bool(state.get("OOMKilled")),
        started_at=started,
        finished_at=finished,
        ports=published_ports_from_inspect(data),
        gpu_request=gpu_request_from_inspect(data, default_runtime=default_runtime),
        pid=int(pid) if isinstance(pid, int) and pid > 0 else None,
        mounts=mounts,
        created_at=_epoch(data.get("Created")),
        network_mode=str(host.get("NetworkMode") or ""),
    )


def engine_info_from_info(info: Mapping[str, Any]) -> EngineInfo:
    """Translate ``docker info`` output. Pure."""
    return EngineInfo(
        server_version=str(info.get("ServerVersion") or ""),
        runtimes=frozenset((info.get("Runtimes") or {}).keys()),
        default_runtime=info.get("DefaultRuntime") or None,
        cdi_spec_dirs=tuple(str(d) for d in info.get("CDISpecDirs") or ()),
        cgroup_version=str(info["CgroupVersion"]) if info.get("CgroupVersion") else None,
    )


def image_info_from_inspect(data: Mapping[str, Any]) -> ImageInfo:
    """Translate ``docker image inspect`` output. Pure."""
    return ImageInfo(
        id=str(data.get("Id", "")),
        repo_digests=tuple(str(d) for d in data.get("RepoDigests") or ()),
        tags=tuple(str(t) for t in data.get("RepoTags") or ()),
        size_bytes=int(data["Size"]) if data.get("Size") is not None else None,
        labels={str(k): str(v) for k, v in ((data.get("Config") or {}).get("Labels") or {}).items()},
    )


def split_log_chunks(chunks: Iterator[bytes]) -> Iterator[str]:
    """Whole lines from raw log chunks: split on ``\\n`` and ``\\r`` (progress bars redraw with ``\\r``)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two chunks
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        pending = pending.replace("\r\n", "\n")
        *lines, pending = pending.replace("\r", "\n").split("\n")
        for line in lines:
            if line:
                yield line
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


# -- the real engine ------------------------------------------------------------------------------------
UNREACHABLE_FIX = "start it (sudo systemctl start docker; without systemd: sudo dockerd &) or point DOCKER_HOST at it"
SDK_FIX = "pip install docker"


def unreachable_fix(message: str) -> str:
    """The fix to show beside an :class:`EngineUnavailable` message (doctor, preflight): none when the message
    already ends with it, as every one this adapter raises does."""
    if UNREACHABLE_FIX in message or SDK_FIX in message:
        return ""
    return SDK_FIX if "SDK" in message else UNREACHABLE_FIX


def _sdk() -> Any:
    """The Docker SDK module, imported on first use (``docker.errors`` comes with it)."""
    try:
        import docker  # type: ignore[import-untyped]  # the SDK ships no type hints
    except ImportError as err:
        raise EngineUnavailable(f"Docker SDK for Python is not installed; install it with: {SDK_FIX}") from err
    return docker


@contextmanager
def _sdk_errors(action: str) -> Iterator[None]:
    """Wrap SDK and transport errors in servectl's tree, ``from`` the original."""
    docker = _sdk()

    try:
        yield
    except ServectlError:
        raise
    except docker.errors.APIError as e:  # NotFound and ImageNotFound included
        raise ServectlError(f"docker: {action}: {_explanation(e)}") from e
    except OSError as e:  # requests' connection errors and timeouts are OSErrors too
        raise EngineUnavailable(_unreachable(e)) from e
    except docker.errors.DockerException as e:
        if "Error while fetching server API version" in str(e):
            raise EngineUnavailable(_unreachable(e)) from e
        raise EngineUnavailable(f"docker: {action}: {e}; {UNREACHABLE_FIX}") from e


_REASONS = ("No such file or directory", "Connection refused", "Permission denied", "timed out")


T = TypeVar("T")


def _or_none(action: str, call: Callable[[], T]) -> T | None:
    """``call()`` with SDK errors wrapped (see :func:`_sdk_errors`); None when the engine has no such object."""
    docker = _sdk()

    with _sdk_errors(action):
        try:
            return call()
        except docker.errors.NotFound:  # ImageNotFound included
            return None


def _unreachable(err: Exception) -> str:
    """One line: where the engine was expected, why it did not answer, and the fix."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    text = str(err)
    reason = next((r for r in _REASONS if r.lower() in text.lower()), text[:160])
    return f"Docker engine unreachable at {where} ({reason}); {UNREACHABLE_FIX}"


def _explanation(err: Any) -> str:
    text = getattr(err, "explanation", None) or str(err)
    return str(text).strip()


class _SdkLogLines:
    """Lines of a (possibly followed) SDK log stream; ``close()`` unblocks a reader in another thread."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lines = split_log_chunks(iter(stream))

    def __iter__(self) -> _SdkLogLines:
        return self

    def __next__(self) -> str:
        try:
            return next(self._lines)
        except StopIteration:
            self.close()
            raise
        except (OSError, ValueError, AttributeError):
            # The stream was closed under us (close() from another thread): that ends it.
            self.close()
            raise StopIteration from None

    def close(self) -> None:
        """Unblock a reader (shut the socket down), then close the HTTP response so its socket is freed."""
        with contextlib.suppress(Exception):  # its socket may already be gone
            self._stream.close()
        response = getattr(self._stream, "_response", None)  # CancellableStream keeps the requests response
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


class DockerSdkEngine:
    """:class:`DockerEngine` on the Docker SDK (``docker`` is imported on first use).

    Args:
        client: a ``docker.DockerClient`` to use (tests); default ``docker.from_env()``.
        timeout_s: HTTP timeout of each engine call (stop adds its grace period to it).
    """

    def __init__(self, *, client: Any | None = None, timeout_s: float = 30.0) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._engine: EngineInfo | None = None

    @property
    def client(self) -> Any:
        """The SDK client (created on first use)."""
        if self._client is None:
            docker = _sdk()

            with _sdk_errors("connect"):
                self._client = docker.from_env(timeout=int(self._timeout_s))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def ping(self) -> EngineInfo:
        with _sdk_errors("ping"):
            self._engine = engine_info_from_info(self.client.api.info())
        return self._engine

    def _default_runtime(self) -> str | None:
        """The engine's default runtime (asked once): it decides whether ``NVIDIA_VISIBLE_DEVICES`` hands out GPUs."""
        return (self._engine or self.ping()).default_runtime

    def image(self, ref: str) -> ImageInfo | None:
        docker = _sdk()

        with _sdk_errors(f"inspect image {ref}"):
            try:
                return image_info_from_inspect(self.client.api.inspect_image(ref))
            except docker.errors.NotFound:  # ImageNotFound included
                return None
            except docker.errors.APIError as e:
                if e.status_code == 400:  # a malformed reference names no image here
                    return None
                raise

    def image_present(self, ref: str) -> bool:
        return self.image(ref) is not None

    def create(self, spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> str:
        """Create (not start) the container of ``spec``; return its id."""
        docker = _sdk()

        args = create_container_args(spec, environ=environ)
        with _sdk_errors(f"create container {spec.name}"):
            api = self.client.api
            try:
                created = api.create_container(**args.container, host_config=api.create_host_config(**args.host_config))
            except docker.errors.ImageNotFound as e:
                raise PreflightFailed(
                    f"image {spec.image} is not on this host: docker pull {spec.image} (or docker load -i FILE)"
                ) from e
            except docker.errors.APIError as e:
                if e.status_code == 409:
                    raise ServiceConflict(
                        f"a container named {spec.name} already exists: {_explanation(e)}; "
                        f"remove it (docker rm {spec.name}) or set container.name in the profile"
                    ) from e
                raise
        return str(created["Id"])

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> str:
        container_id = self.create(spec, environ=environ)
        try:
            with _sdk_errors(f"start container {spec.name}"):
                self.client.api.start(container_id)
        except ServectlError as e:
            self.remove(container_id, force=True)
            raise StartupFailed(f"docker could not start container {spec.name}: {e.message}") from e
        return container_id

    def _inspect_all(self, filters: Mapping[str, Any], *, all_states: bool) -> list[ContainerState]:
        docker = _sdk()

        with _sdk_errors("list containers"):
            rows = self.client.api.containers(all=all_states, filters=dict(filters))
        states: list[ContainerState] = []
        for row in rows:
            try:
                with _sdk_errors("inspect container"):
                    data = self.client.api.inspect_container(row["Id"])
            except ServectlError as e:  # removed between list and inspect
                if isinstance(e.__cause__, docker.errors.NotFound):
                    continue
                raise
            states.append(container_state_from_inspect(data, default_runtime=self._default_runtime()))
        return states

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        labels = [f"{LABEL_MANAGED}=1", *(f"{k}={v}" for k, v in (label_filter or {}).items())]
        return self._inspect_all({"label": labels}, all_states=True)

    def running_containers(self) -> list[ContainerState]:
        return self._inspect_all({}, all_states=False)

    def containers_named(self, name: str) -> list[ContainerState]:
        return self._inspect_all({"name": f"^/{name}$"}, all_states=True)

    def inspect(self, id_or_name: str) -> ContainerState | None:
        data = _or_none(f"inspect container {id_or_name}", lambda: self.client.api.inspect_container(id_or_name))
        return None if data is None else container_state_from_inspect(data, default_runtime=self._default_runtime())

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        with _sdk_errors(f"logs of {container_id[:12]}"):
            stream = self.client.api.logs(
                container_id,
                stream=True,
                follow=follow,
                tail="all" if tail is None else int(tail),
                since=since,
            )
        return _SdkLogLines(stream)

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        seconds = int(timeout_s)  # a container already gone counts as stopped
        _or_none(f"stop container {container_id[:12]}", lambda: self.client.api.stop(container_id, timeout=seconds))

    def kill(self, container_id: str) -> None:
        docker = _sdk()

        with _sdk_errors(f"kill container {container_id[:12]}"):
            try:
                self.client.api.kill(container_id)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as e:
                if e.status_code == 409:  # not running
                    return
                raise

    def remove(self, container_id: str, *, force: bool) -> None:
        docker = _sdk()

        with _sdk_errors(f"remove container {container_id[:12]}"):
            try:
                self.client.api.remove_container(container_id, force=force)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as e:
                if e.status_code == 409 and "already in progress" in _explanation(e):
                    return
                raise

    def start(self, container_id: str) -> None:
        with _sdk_errors(f"start container {container_id[:12]}"):
            self.client.api.start(container_id)

    # -- raw documents (``servectl adopt`` translates them with servectl.plan.adopt) ------------------------
    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        """``docker inspect`` of one container as the engine returns it; None when there is none."""
        return _or_none(f"inspect container {id_or_name}", lambda: dict(self.client.api.inspect_container(id_or_name)))

    def image_document(self, ref: str) -> dict[str, Any] | None:
        """``docker image inspect`` of one image; None when it is not on this host."""
        return _or_none(f"inspect image {ref}", lambda: dict(self.client.api.inspect_image(ref)))

    def volume_folder(self, name: str) -> str | None:
        """The host folder of a named volume (its Mountpoint); None when there is no such volume."""
        volume = _or_none(f"inspect volume {name}", lambda: self.client.api.inspect_volume(name))
        return str(volume.get("Mountpoint") or "") or None if volume is not None else None

    def run_oneshot(
        self, image: str, command: list[str], *, timeout_s: float, labels: Mapping[str, str] | None = None
    ) -> OneShotResult:
        docker = _sdk()
        started = time.perf_counter()
        box: list[Any] = []  # the container, once the engine made it (a signal meanwhile is held until then)
        with _sdk_errors(f"run a throwaway container of {image}"):
            try:
                with critical():  # interrupted halfway, the engine would still make a container we never remove
                    box.append(self._create_oneshot(image, command, labels))
                return self._run_created(box[0], timeout_s=timeout_s, started=started)
            except docker.errors.ImageNotFound as e:
                raise PreflightFailed(f"image {image} is not on this host: docker pull {image}") from e
            finally:
                for container in box:
                    with contextlib.suppress(docker.errors.APIError):
                        container.remove(force=True)

    def _create_oneshot(self, image: str, command: list[str], labels: Mapping[str, str] | None) -> Any:
        return self.client.containers.create(
            image,
            command=command,
            entrypoint=[],
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": "rw,size=64m"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            environment={"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
            labels={LABEL_ONESHOT: "1", **(labels or {})},
            detach=True,
        )

    @staticmethod
    def _run_created(container: Any, *, timeout_s: float, started: float) -> OneShotResult:
        docker = _sdk()
        try:
            container.start()
        except docker.errors.APIError as e:  # the command's executable is not in the image
            return OneShotResult(None, "", "", time.perf_counter() - started, not_found=_explanation(e))
        timed_out = False
        try:
            status = container.wait(timeout=timeout_s)
            exit_code: int | None = int(status.get("StatusCode", -1))
        except Exception:  # requests' read timeout: the time limit passed
            timed_out, exit_code = True, None
            with contextlib.suppress(docker.errors.APIError):
                container.kill()
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return OneShotResult(exit_code, stdout, stderr, time.perf_counter() - started, timed_out=timed_out)
