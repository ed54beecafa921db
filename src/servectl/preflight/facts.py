"""What preflight measures, once, before the checks run: GPU snapshot, host probe and Docker engine facts.

Unreachable NVML or Docker become recorded errors (the checks report them), never exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from servectl.adapters.docker import (
    COMPOSE_CONFIG_FILES_LABEL,
    COMPOSE_SERVICE_LABEL,
    ContainerState,
    DockerEngine,
    EngineInfo,
    ImageInfo,
)
from servectl.adapters.gpu import MIB, GpuInventory, GpuSnapshot, NullGpuInventory
from servectl.adapters.host import DiskSpace, HostMemory, HostProbe, Listener, ModelDirInfo, ShmInfo
from servectl.errors import EngineUnavailable, GpuUnavailable, PreflightFailed
from servectl.preflight.model import ConflictRef, PreflightRequest

if TYPE_CHECKING:
    from servectl.adapters.engine_image import ParseMemo, ParseVerdict

#: Label of servectl's stand-in engine image (``servectl.standin.image.IMAGE_LABEL``).
STANDIN_LABEL = "servectl.standin"
#: The check that parses the argv in the image (its id, here because gathering the facts runs it).
ENGINE_PARSE = "engine.parse"


@dataclass(frozen=True)
class AttributedProcess:
    """A process on a card, attributed to a container where possible."""

    card_index: int
    pid: int
    used_memory_bytes: int | None
    process_name: str | None
    container_id: str | None
    container_name: str | None
    disposition: Literal["replacing", "conflict", "foreign"]

    def describe(self) -> str:
        where = ""
        if self.container_id:
            where = f" in container {self.container_name or '?'} ({self.container_id[:12]})"
        mib = "? MiB" if self.used_memory_bytes is None else f"{to_mib(self.used_memory_bytes):,} MiB"
        name = f" {self.process_name}" if self.process_name else ""
        return f"card {self.card_index}: pid {self.pid}{name}{where} holds {mib}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "card": self.card_index,
            "pid": self.pid,
            "process_name": self.process_name,
            "container_id": self.container_id,
            "container_name": self.container_name,
            "used_mib": None if self.used_memory_bytes is None else to_mib(self.used_memory_bytes),
            "disposition": self.disposition,
        }


@dataclass(frozen=True)
class Facts:
    """What preflight measured, once, before running the checks (also handy in tests)."""

    gpu: GpuSnapshot | None = None
    gpu_error: str | None = None
    gpu_seconds: float | None = None
    gpu_not_read: bool = False  # a null inventory: no card was asked for (gpu_error says why), none failed
    engine: EngineInfo | None = None
    engine_error: str | None = None
    containers: tuple[ContainerState, ...] = ()
    named: tuple[ContainerState, ...] = ()
    image: ImageInfo | None = None
    image_by_digest: ImageInfo | None = None
    listeners: tuple[Listener, ...] = ()
    processes: tuple[AttributedProcess, ...] = ()
    memory: HostMemory | None = None
    shm: ShmInfo | None = None
    disks: tuple[DiskSpace, ...] = ()
    model: ModelDirInfo | None = None
    executables: Mapping[str, str | None] = field(default_factory=dict)
    cdi_specs: tuple[str, ...] = ()
    engine_parse: ParseVerdict | None = None
    engine_parse_error: str | None = None


def to_mib(n_bytes: int) -> int:
    return round(n_bytes / MIB)


def conflict_matches(conflict: ConflictRef, container: ContainerState) -> bool:
    if conflict.kind == "container":
        return container.name == conflict.ref or (len(conflict.ref) >= 12 and container.id.startswith(conflict.ref))
    files = container.labels.get(COMPOSE_CONFIG_FILES_LABEL, "")
    wanted = str(Path(conflict.ref).expanduser())
    in_file = any(str(Path(f.strip()).expanduser()) == wanted for f in files.split(",") if f.strip())
    if not in_file:
        return False
    return conflict.service is None or container.labels.get(COMPOSE_SERVICE_LABEL) == conflict.service


def containers_to_stop(request: PreflightRequest, containers: Iterable[ContainerState]) -> list[ContainerState]:
    """Running containers that belong to the declared conflicts."""
    return [c for c in containers if any(conflict_matches(ref, c) for ref in request.conflicts)]


def classify_process(
    request: PreflightRequest, container: ContainerState | None, container_id: str | None, pid: int
) -> Literal["replacing", "conflict", "foreign"]:
    replacing = request.replacing
    if replacing is not None and (pid in replacing.pids or replacing.matches(container, container_id)):
        return "replacing"
    if container_id is not None and container_id in request.own_container_ids:
        return "replacing"  # an adopted profile's own container: replaced like a servectl one
    if (
        container is not None
        and request.stop_conflicts
        and any(conflict_matches(ref, container) for ref in request.conflicts)
    ):
        return "conflict"
    return "foreign"


def _attribute_processes(
    request: PreflightRequest,
    snapshot: GpuSnapshot | None,
    containers: tuple[ContainerState, ...],
    host: HostProbe,
) -> list[AttributedProcess]:
    """Each process on the profile's cards, with its container and whether this start replaces or stops it."""
    by_id = {c.id: c for c in containers}
    attributed: list[AttributedProcess] = []
    if snapshot is None:
        return attributed
    for index in request.gpu_indices:
        device = snapshot.device(index)
        if device is None or device.processes is None:
            continue
        for proc in device.processes:
            container_id = host.container_id_of(proc.pid)
            container = by_id.get(container_id) if container_id else None
            attributed.append(
                AttributedProcess(
                    card_index=index,
                    pid=proc.pid,
                    used_memory_bytes=proc.used_memory_bytes,
                    process_name=host.process_name(proc.pid),
                    container_id=container_id,
                    container_name=container.name if container else None,
                    disposition=classify_process(request, container, container_id, proc.pid),
                )
            )
    return attributed


def _nvidia_support(
    request: PreflightRequest, engine: EngineInfo | None, host: HostProbe
) -> tuple[dict[str, str | None], list[str]]:
    """The NVIDIA container tools on the host and the CDI spec files (only when GPUs are requested)."""
    executables: dict[str, str | None] = {}
    cdi_specs: list[str] = []
    if request.gpus_requested:
        for name in ("nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-ctk"):
            executables[name] = host.find_executable(name)
        spec_dirs = engine.cdi_spec_dirs if engine and engine.cdi_spec_dirs else ("/etc/cdi", "/var/run/cdi")
        for folder in spec_dirs:
            for name in ("nvidia.yaml", "nvidia.json"):
                candidate = f"{folder.rstrip('/')}/{name}"
                if host.path_exists(candidate):
                    cdi_specs.append(candidate)
    return executables, cdi_specs


def gather_facts(
    *,
    request: PreflightRequest,
    gpus: GpuInventory,
    host: HostProbe,
    docker: DockerEngine,
    skipped: frozenset[str] = frozenset(),
    parses: ParseMemo | None = None,
) -> Facts:
    """Measure everything the checks need, once. Unreachable NVML or Docker become recorded errors.

    Unless ``engine.parse`` is skipped, the plan's argv is parsed by the image's own SGLang in
    a throwaway container when the image is on this host.
    """
    snapshot: GpuSnapshot | None = None
    gpu_error: str | None = None
    gpu_seconds: float | None = None
    if isinstance(gpus, NullGpuInventory):  # no card is read here by choice: nothing to ask a driver
        gpu_error = gpus.reason if request.gpus_requested else None
    elif request.gpus_requested:
        gpu_started = time.perf_counter()
        try:
            snapshot = gpus.snapshot()
        except GpuUnavailable as err:
            gpu_error = err.message
        gpu_seconds = time.perf_counter() - gpu_started

    engine: EngineInfo | None = None
    engine_error: str | None = None
    containers: tuple[ContainerState, ...] = ()
    named: tuple[ContainerState, ...] = ()
    image = image_by_digest = None
    try:
        engine = docker.ping()
        containers = tuple(docker.running_containers())
        if request.container_name:
            named = tuple(docker.containers_named(request.container_name))
        if request.image_ref:
            image = docker.image(request.image_ref)
        if request.image_digest and (image is None or request.image_digest not in image.digests()):
            image_by_digest = docker.image(request.image_digest)
    except EngineUnavailable as err:
        engine_error = err.message

    attributed = _attribute_processes(request, snapshot, containers, host)

    disks = tuple(host.disk_space(p) for p in request.cache_paths)
    executables, cdi_specs = _nvidia_support(request, engine, host)

    local = image or image_by_digest
    standin = local is not None and STANDIN_LABEL in local.labels  # its parser is servectl's own catalog
    engine_parse, engine_parse_error = _parse_in_image(
        request, docker, skipped, present=local is not None and not standin, parses=parses
    )
    return Facts(
        gpu=snapshot,
        gpu_error=gpu_error,
        gpu_seconds=gpu_seconds,
        gpu_not_read=isinstance(gpus, NullGpuInventory),
        engine=engine,
        engine_error=engine_error,
        containers=containers,
        named=named,
        image=image,
        image_by_digest=image_by_digest,
        listeners=host.listeners(request.port),
        processes=tuple(attributed),
        memory=host.memory(),
        shm=host.shm(),
        disks=disks,
        model=host.model_dir(request.model_path) if request.model_path else None,
        executables=executables,
        cdi_specs=tuple(cdi_specs),
        engine_parse=engine_parse,
        engine_parse_error=engine_parse_error,
    )


def _parse_in_image(
    request: PreflightRequest,
    docker: DockerEngine,
    skipped: frozenset[str],
    *,
    present: bool,
    parses: ParseMemo | None = None,
) -> tuple[ParseVerdict | None, str | None]:
    """The image's own verdict on the argv (``engine.parse``), or why it could not be had."""
    if ENGINE_PARSE in skipped or request.image_built_here or not request.engine_argv:
        return None, None
    if not present:
        return None, None
    from servectl.adapters.engine_image import ImageProbeError, parse_in_image

    image = f"{request.image_ref}@{request.image_digest}" if request.image_digest else request.image_ref
    try:
        ask = parse_in_image if parses is None else parses.parse
        verdict = ask(image=image, argv=request.engine_argv, engine=docker, entrypoint=request.entrypoint or None)
    except (ImageProbeError, PreflightFailed, EngineUnavailable) as err:
        return None, err.message
    return verdict, None
