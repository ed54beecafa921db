"""The plain values the Docker adapter speaks in: engine, image, container, ports, GPU request, log lines."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from servectl.plan.gpu_request import GpuRequest
from servectl.plan.labels import LABEL_MANAGED, LABEL_PROFILE

#: Label of the throwaway containers :meth:`DockerEngine.run_oneshot` starts (never servectl.managed).
LABEL_ONESHOT = "servectl.oneshot"
COMPOSE_CONFIG_FILES_LABEL = "com.docker.compose.project.config_files"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"


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
    env: Mapping[str, str] = field(default_factory=dict)  # its Config.Env: what a container gets unless it overrides

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
    #: The values of its environment variables named like secrets (``HF_TOKEN``, ``*_KEY``...): only to take
    #: them out of its log lines, never shown (left out of repr).
    secret_env_values: tuple[str, ...] = field(default=(), repr=False, compare=False)

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
        return () if self.gpu_request is None else self.gpu_request.ids


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


__all__ = [
    "COMPOSE_CONFIG_FILES_LABEL",
    "COMPOSE_SERVICE_LABEL",
    "LABEL_ONESHOT",
    "ContainerState",
    "EngineInfo",
    "ImageInfo",
    "LogLines",
    "OneShotResult",
    "PublishedPort",
]
