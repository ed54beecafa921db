"""Pure translation between servectl's values and the engine's documents, pinned by unit tests without an engine.

:func:`run_kwargs` / :func:`create_container_args` turn a :class:`~servectl.plan.compile.DockerRunSpec` into
the SDK's arguments (the same container as :func:`servectl.plan.compile.docker_run_argv`);
:func:`container_state_from_inspect` turns ``docker inspect`` output into a :class:`ContainerState` (including
every way a container can ask for GPUs: ``--gpus`` device requests, CDI devices, ``/dev/nvidia*`` devices and
the ``nvidia`` runtime with ``NVIDIA_VISIBLE_DEVICES``); :func:`engine_info_from_info` and
:func:`image_info_from_inspect` read the engine and image documents; :func:`split_log_chunks` cuts raw log
chunks into lines.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from servectl.adapters.docker.values import ContainerState, EngineInfo, ImageInfo, PublishedPort
from servectl.plan.gpu_request import gpu_request_from_inspect
from servectl.redact import secret_env_values

if TYPE_CHECKING:
    from servectl.plan.compile import DockerRunSpec


def run_kwargs(spec: DockerRunSpec, *, environ: Mapping[str, str]) -> dict[str, Any]:
    """The SDK's ``containers.create``/``containers.run`` keyword arguments for ``spec``. Pure.

    Plus ``stop_timeout``, which only the low-level ``create_container`` takes (the adapter passes it there).

    The result makes the same container as ``docker run`` with :func:`servectl.plan.compile.docker_run_argv`:
    ``-e NAME`` without a value passes ``NAME`` through from ``environ`` when it is set there and is
    dropped otherwise, exactly as the Docker CLI does.
    """
    env = environ
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
    if spec.user:
        kwargs["user"] = spec.user
    if spec.group_add:
        kwargs["group_add"] = list(spec.group_add)
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
    "group_add",
)


def create_container_args(spec: DockerRunSpec, *, environ: Mapping[str, str]) -> CreateArgs:
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
        secret_env_values=secret_env_values(str(e) for e in config.get("Env") or ()),
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
        env=dict(str(item).split("=", 1) for item in (data.get("Config") or {}).get("Env") or () if "=" in str(item)),
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


__all__ = [
    "CreateArgs",
    "container_state_from_inspect",
    "create_container_args",
    "engine_info_from_info",
    "image_info_from_inspect",
    "published_ports_from_inspect",
    "run_kwargs",
    "split_log_chunks",
]
