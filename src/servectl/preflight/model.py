"""Preflight's data: the request (what a service needs, plain data filled in from the profile) and the report.

Preflight does not depend on the profile models: :mod:`servectl.preflight.request` fills the request in.
Every check has a stable id, a result (``pass``, ``warn``, ``fail``, ``unknown`` or ``skipped``), the measured
facts, a message and a fix. Only ``fail`` blocks a start; ``--force CHECK-ID`` turns one check into ``skipped``
and the report keeps the result it would have had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from servectl.adapters.docker import ContainerState
from servectl.adapters.gpu import MIB

if TYPE_CHECKING:
    from servectl.adapters.engine_image import ParseMemo

GIB = 1024 * MIB

Result = Literal["pass", "warn", "fail", "unknown", "skipped"]

ProfileStatus = Literal["candidate", "promoted", "retired"]

Role = Literal["bench", "production"]

NetworkMode = Literal["bridge", "host"]


@dataclass(frozen=True)
class Replacing:
    """The servectl service about to be stopped (``swap``, ``up --replace``): its use of the cards and of
    the port does not count against the new one."""

    container_id: str | None = None
    container_name: str | None = None
    pids: frozenset[int] = frozenset()
    port: int | None = None

    def matches(self, container: ContainerState | None = None, container_id: str | None = None) -> bool:
        """Whether a container (or a container id) is the one being replaced."""
        ids = {container_id} if container_id else set()
        names: set[str] = set()
        if container is not None:
            ids.add(container.id)
            names.add(container.name)
        if self.container_id and any(i and i.startswith(self.container_id) for i in ids):
            return True
        return bool(self.container_name) and self.container_name in names


@dataclass(frozen=True)
class ServiceRef:
    """A running servectl service (or an adopted one) as the command knows it: what its labels say it holds,
    and for a warm one the host RAM of its CPU copy of the weights (``backup_hold``: ``held`` now, ``to-pin`` at
    its first release and then for as long as it runs, ``on-release`` only while released)."""

    profile: str
    container_id: str
    container_name: str
    port: int | None = None
    gpus: tuple[int, ...] = ()
    backup_bytes: int = 0
    backup_hold: Literal["held", "to-pin", "on-release"] | None = None


@dataclass(frozen=True)
class StartContext:
    """What surrounds a start, as data: the servectl service it replaces, whether the declared conflicts are
    stopped first, the servectl services running now, and containers that are the profile's own; ``parses``
    is the transaction's memo of the image's parser verdicts (a swap's staging asks the same question again)."""

    replacing: Replacing | None = None
    stop_conflicts: bool = False
    services: tuple[ServiceRef, ...] = ()
    own_container_ids: frozenset[str] = frozenset()
    parses: ParseMemo | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ConflictRef:
    """A service the profile declares as a conflict: a compose file (optionally one service of it), or a
    container name."""

    kind: Literal["compose", "container"]
    ref: str
    service: str | None = None

    def label(self) -> str:
        """How the profile names it."""
        if self.kind == "compose":
            return f"compose {self.ref}" + (f" service {self.service}" if self.service else "")
        return f"container {self.ref}"


@dataclass(frozen=True)
class PreflightRequest:
    """Everything the checks need to know about the service to start; filled in by the profile compiler.

    Attributes:
        profile_name: the profile's name, for messages.
        source_file: the profile file, for messages.
        status: candidate, promoted or retired; decides how strict the image pin is.
        gpus_requested: whether the service uses GPUs at all (demo profiles on a CPU box do not).
        gpu_indices: NVML indices of the cards the profile names.
        arch: required architecture (``sm120`` = compute capability 12.0), or ``None``.
        tp: tensor-parallel size; ``tp * dp`` must equal the number of cards.
        dp: data-parallel size (the profile's ``engine.dp``).
        exclusive: whether the service needs the cards to itself.
        vram_reserve_mib: free memory each card must keep once the engine runs.
        vram_reserve_waiver: the profile's reason for waiving the reserve, or ``None``.
        mem_fraction: SGLang ``--mem-fraction-static``, for the estimate of what the engine takes.
        host_address: the host address the port is published on.
        port: the host port.
        role: bench or production.
        production_ports: ports that carry real user traffic.
        network_mode: bridge (ports published with ``-p``) or host.
        host_network_reason: the profile's reason for host networking.
        image_ref: the image reference the plan runs.
        image_digest: the pinned ``sha256:...`` (image id or repo digest), or ``None``.
        model_path: the model folder on the host.
        model_revision: the pinned Hugging Face revision (commit or ref name), or ``None``.
        ipc_host: whether the container shares the host's IPC namespace.
        shm_size_bytes: the container's ``--shm-size``, or ``None`` for Docker's 64 MiB default.
        min_shm_bytes: shared memory needed when ``tp * dp > 1``.
        cache_paths: host folders the container writes caches to.
        min_cache_free_bytes: free disk needed on each cache folder's file system.
        min_host_memory_available_bytes: available host RAM needed besides ``host_memory_extra_bytes``.
        host_memory_extra_bytes: host RAM the engine adds (e.g. a HiCache host pool, all ranks together).
        standby_warm: the profile keeps a warm standby (``swap.standby: warm``): its weights' CPU copy needs RAM.
        standby_retained: it keeps that copy's pinned buffer for as long as it runs (``standby_retain_backup``).
        standby_ram_waiver: the profile's reason for waiving the host RAM kept free beside the pinned copies
            (``swap.standby_ram_waiver``), or ``None``.
        memlock: the engine container's ``RLIMIT_MEMLOCK`` (soft, hard; -1 unlimited), or ``None`` where the plan
            sets none (the Docker engine's default applies).
        memlock_source: where ``memlock`` comes from, for messages.
        engine_env_names: the variables the plan sets in the container (they override the image's own).
        standby_breakable_graph: the engine captures CUDA graphs with the breakable backend (for the image's
            ``SGLANG_MEMORY_SAVER_CUDA_GRAPH``).
        conflicts: services the profile declares as conflicts.
        stop_conflicts: whether this run stops the conflicts (``swap``, ``up --replace``).
        replacing: the servectl service being replaced, if any.
        container_name: the container name the plan creates (``container.name`` checks it is free).
        services: the servectl services running now (the ``services`` check: none may hold the port or a card).
        own_container_ids: containers that are this profile's own (an adopted profile's), never in the way.
        engine_argv: the SGLang flags of the plan, for ``engine.parse`` (parsed by the image's own SGLang).
        entrypoint: the image's engine command (its Python runs the parse).
        image_built_here: the image is servectl's stand-in, whose parser is servectl's own catalog.
        standin_env: the plan's ``STANDIN_*`` variables, which a stand-in engine reads strictly at start.
        unset_references: ``(field, VAR)`` of each variable the service needs from servectl's environment
            (``engine.env`` references, ``serve.api_key_env``) that is not set there.
    """

    profile_name: str
    source_file: str | None = None
    status: ProfileStatus = "candidate"
    gpus_requested: bool = True
    gpu_indices: tuple[int, ...] = ()
    arch: str | None = None
    tp: int = 1
    dp: int = 1
    exclusive: bool = True
    vram_reserve_mib: int = 3072
    vram_reserve_waiver: str | None = None
    mem_fraction: float | None = None
    host_address: str = "127.0.0.1"
    port: int = 30000
    role: Role = "bench"
    production_ports: tuple[int, ...] = (8080,)
    network_mode: NetworkMode = "bridge"
    host_network_reason: str | None = None
    image_ref: str = ""
    image_digest: str | None = None
    model_path: str = ""
    model_revision: str | None = None
    ipc_host: bool = False
    shm_size_bytes: int | None = None
    min_shm_bytes: int = 4 * GIB
    cache_paths: tuple[str, ...] = ()
    min_cache_free_bytes: int = 10 * GIB
    min_host_memory_available_bytes: int = 8 * GIB
    host_memory_extra_bytes: int = 0
    standby_warm: bool = False
    standby_retained: bool = False
    standby_ram_waiver: str | None = None
    memlock: tuple[int, int] | None = None
    memlock_source: str = ""
    engine_env_names: frozenset[str] = frozenset()
    standby_breakable_graph: bool = True
    conflicts: tuple[ConflictRef, ...] = ()
    stop_conflicts: bool = False
    replacing: Replacing | None = None
    container_name: str | None = None
    services: tuple[ServiceRef, ...] = ()
    own_container_ids: frozenset[str] = frozenset()
    engine_argv: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    image_built_here: bool = False
    standin_env: tuple[tuple[str, str], ...] = ()
    unset_references: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome. ``facts`` holds the measured values (JSON-friendly)."""

    id: str
    title: str
    result: Result
    message: str
    fix: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)
    forced: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "id": self.id,
            "title": self.title,
            "result": self.result,
            "message": self.message,
            "fix": self.fix,
            "facts": dict(self.facts),
            "forced": self.forced,
        }


@dataclass(frozen=True)
class PreflightReport:
    """All checks for one request, in a stable order."""

    profile_name: str
    checks: tuple[CheckResult, ...]
    source_file: str | None = None
    started_at: float = 0.0
    duration_seconds: float = 0.0
    gpu_query_seconds: float | None = None

    @property
    def failed(self) -> bool:
        """Whether any check failed (a start must not happen)."""
        return any(check.result == "fail" for check in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, 3 otherwise."""
        return 3 if self.failed else 0

    def check(self, check_id: str) -> CheckResult:
        """The result of one check by id.

        Raises:
            KeyError: no such check in this report.
        """
        for check in self.checks:
            if check.id == check_id:
                return check
        raise KeyError(check_id)

    def counts(self) -> dict[str, int]:
        """How many checks ended with each result."""
        counts = {name: 0 for name in ("pass", "warn", "fail", "unknown", "skipped")}
        for check in self.checks:
            counts[check.result] += 1
        return counts

    def failure_summary(self) -> str:
        """One line per failed check, for :class:`~servectl.errors.PreflightFailed`."""
        return "\n".join(
            f"preflight {c.id}: {c.message}" + (f"; fix: {c.fix}" if c.fix else "")
            for c in self.checks
            if c.result == "fail"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "profile": self.profile_name,
            "source_file": self.source_file,
            "started_at": self.started_at,
            "duration_seconds": round(self.duration_seconds, 6),
            "gpu_query_seconds": None if self.gpu_query_seconds is None else round(self.gpu_query_seconds, 6),
            "failed": self.failed,
            "counts": self.counts(),
            "checks": [c.to_dict() for c in self.checks],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)
