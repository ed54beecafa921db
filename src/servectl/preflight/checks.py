"""Preflight: prove the box is ready for a service before anything starts, and say exactly what is not.

:func:`run_preflight` gathers facts once (GPU snapshot, host probe, Docker engine) and then runs each check,
a pure function of a :class:`PreflightRequest` and those facts. Every check has a stable id, a result
(``pass``, ``warn``, ``fail``, ``unknown`` or ``skipped``), the measured facts, a message and a fix.
Only ``fail`` blocks a start; ``--force CHECK-ID`` turns one check into ``skipped`` and the report keeps the
result it would have had.

The request is plain data so that preflight does not depend on the profile models: the profile compiler
fills it in (see :class:`PreflightRequest` for what each field means).
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from servectl.adapters.docker_facts import (
    COMPOSE_CONFIG_FILES_LABEL,
    COMPOSE_SERVICE_LABEL,
    ContainerInfo,
    DockerFacts,
    EngineInfo,
    ImageInfo,
)
from servectl.adapters.gpu import MIB, GpuDevice, GpuInventory, GpuSnapshot, compute_capability_of_arch
from servectl.adapters.host import DiskSpace, HostMemory, HostProbe, Listener, ModelDirInfo, ShmInfo, addresses_overlap
from servectl.errors import EngineUnavailable, GpuUnavailable, PreflightFailed, UsageError

GIB = 1024 * MIB

Result = Literal["pass", "warn", "fail", "unknown", "skipped"]
ProfileStatus = Literal["candidate", "promoted", "retired"]
Role = Literal["bench", "production"]
NetworkMode = Literal["bridge", "host"]

UNEXPLAINED_USED_BYTES = 1024 * MIB
"""Used memory on a card beyond what its listed processes hold, above which preflight warns."""


# ---------------------------------------------------------------------------------------------------------
# Request


@dataclass(frozen=True)
class Replacing:
    """The servectl service about to be stopped (``swap``, ``up --replace``): its use of the cards and of
    the port does not count against the new one."""

    container_id: str | None = None
    container_name: str | None = None
    pids: frozenset[int] = frozenset()
    port: int | None = None

    def matches(self, container: ContainerInfo | None = None, container_id: str | None = None) -> bool:
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
        tp: tensor-parallel size; ``tp * pp`` must equal the number of cards.
        pp: pipeline-parallel size.
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
        min_shm_bytes: shared memory needed when ``tp * pp > 1``.
        cache_paths: host folders the container writes caches to.
        min_cache_free_bytes: free disk needed on each cache folder's file system.
        min_host_memory_available_bytes: available host RAM needed besides ``host_memory_extra_bytes``.
        host_memory_extra_bytes: host RAM the engine adds (e.g. a HiCache host pool, all ranks together).
        conflicts: services the profile declares as conflicts.
        stop_conflicts: whether this run stops the conflicts (``swap``, ``up --replace``).
        replacing: the servectl service being replaced, if any.
    """

    profile_name: str
    source_file: str | None = None
    status: ProfileStatus = "candidate"
    gpus_requested: bool = True
    gpu_indices: tuple[int, ...] = ()
    arch: str | None = None
    tp: int = 1
    pp: int = 1
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
    conflicts: tuple[ConflictRef, ...] = ()
    stop_conflicts: bool = False
    replacing: Replacing | None = None


# ---------------------------------------------------------------------------------------------------------
# Report


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


# ---------------------------------------------------------------------------------------------------------
# Facts gathered once


@dataclass(frozen=True)
class _Attributed:
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
        mib = "? MiB" if self.used_memory_bytes is None else f"{_mib(self.used_memory_bytes):,} MiB"
        name = f" {self.process_name}" if self.process_name else ""
        return f"card {self.card_index}: pid {self.pid}{name}{where} holds {mib}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "card": self.card_index,
            "pid": self.pid,
            "process_name": self.process_name,
            "container_id": self.container_id,
            "container_name": self.container_name,
            "used_mib": None if self.used_memory_bytes is None else _mib(self.used_memory_bytes),
            "disposition": self.disposition,
        }


@dataclass(frozen=True)
class Facts:
    """What preflight measured, once, before running the checks (also handy in tests)."""

    gpu: GpuSnapshot | None = None
    gpu_error: str | None = None
    gpu_seconds: float | None = None
    engine: EngineInfo | None = None
    engine_error: str | None = None
    containers: tuple[ContainerInfo, ...] = ()
    image: ImageInfo | None = None
    image_by_digest: ImageInfo | None = None
    listeners: tuple[Listener, ...] = ()
    processes: tuple[_Attributed, ...] = ()
    memory: HostMemory | None = None
    shm: ShmInfo | None = None
    disks: tuple[DiskSpace, ...] = ()
    model: ModelDirInfo | None = None
    executables: Mapping[str, str | None] = field(default_factory=dict)
    cdi_specs: tuple[str, ...] = ()


def _mib(n_bytes: int) -> int:
    return round(n_bytes / MIB)


def _conflict_matches(conflict: ConflictRef, container: ContainerInfo) -> bool:
    if conflict.kind == "container":
        return container.name == conflict.ref or (len(conflict.ref) >= 12 and container.id.startswith(conflict.ref))
    files = container.labels.get(COMPOSE_CONFIG_FILES_LABEL, "")
    wanted = str(Path(conflict.ref).expanduser())
    in_file = any(str(Path(f.strip()).expanduser()) == wanted for f in files.split(",") if f.strip())
    if not in_file:
        return False
    return conflict.service is None or container.labels.get(COMPOSE_SERVICE_LABEL) == conflict.service


def _to_stop(request: PreflightRequest, containers: Iterable[ContainerInfo]) -> list[ContainerInfo]:
    """Running containers that belong to the declared conflicts."""
    return [c for c in containers if any(_conflict_matches(ref, c) for ref in request.conflicts)]


def _classify(
    request: PreflightRequest, container: ContainerInfo | None, container_id: str | None, pid: int
) -> Literal["replacing", "conflict", "foreign"]:
    replacing = request.replacing
    if replacing is not None and (pid in replacing.pids or replacing.matches(container, container_id)):
        return "replacing"
    if (
        container is not None
        and request.stop_conflicts
        and any(_conflict_matches(ref, container) for ref in request.conflicts)
    ):
        return "conflict"
    return "foreign"


def gather_facts(*, request: PreflightRequest, gpus: GpuInventory, host: HostProbe, docker: DockerFacts) -> Facts:
    """Measure everything the checks need, once. Unreachable NVML or Docker become recorded errors."""
    snapshot: GpuSnapshot | None = None
    gpu_error: str | None = None
    gpu_seconds: float | None = None
    if request.gpus_requested:
        gpu_started = time.perf_counter()
        try:
            snapshot = gpus.snapshot()
        except GpuUnavailable as err:
            gpu_error = err.message
        gpu_seconds = time.perf_counter() - gpu_started

    engine: EngineInfo | None = None
    engine_error: str | None = None
    containers: tuple[ContainerInfo, ...] = ()
    image = image_by_digest = None
    try:
        engine = docker.ping()
        containers = docker.containers()
        if request.image_ref:
            image = docker.image(request.image_ref)
        if request.image_digest and (image is None or request.image_digest not in image.digests()):
            image_by_digest = docker.image(request.image_digest)
    except EngineUnavailable as err:
        engine_error = err.message

    by_id = {c.id: c for c in containers}
    attributed: list[_Attributed] = []
    if snapshot is not None:
        for index in request.gpu_indices:
            device = snapshot.device(index)
            if device is None or device.processes is None:
                continue
            for proc in device.processes:
                container_id = host.container_id_of(proc.pid)
                container = by_id.get(container_id) if container_id else None
                attributed.append(
                    _Attributed(
                        card_index=index,
                        pid=proc.pid,
                        used_memory_bytes=proc.used_memory_bytes,
                        process_name=host.process_name(proc.pid),
                        container_id=container_id,
                        container_name=container.name if container else None,
                        disposition=_classify(request, container, container_id, proc.pid),
                    )
                )

    disks = tuple(host.disk_space(p) for p in request.cache_paths)
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

    return Facts(
        gpu=snapshot,
        gpu_error=gpu_error,
        gpu_seconds=gpu_seconds,
        engine=engine,
        engine_error=engine_error,
        containers=containers,
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
    )


# ---------------------------------------------------------------------------------------------------------
# Checks


def _result(check_id: str, result: Result, message: str, fix: str = "", /, **facts: Any) -> CheckResult:
    return CheckResult(id=check_id, title=TITLES[check_id], result=result, message=message, fix=fix, facts=facts)


def _no_gpus(check_id: str) -> CheckResult:
    return _result(check_id, "skipped", "the profile requests no GPUs", reason="no GPUs requested")


def _gpu_unreachable(check_id: str, facts: Facts) -> CheckResult:
    return _result(check_id, "unknown", "NVML unavailable, see gpu.present", nvml_error=facts.gpu_error)


def _requested_devices(request: PreflightRequest, facts: Facts) -> list[tuple[int, GpuDevice | None]]:
    assert facts.gpu is not None
    return [(i, facts.gpu.device(i)) for i in request.gpu_indices]


def check_profile_status(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A retired profile is not started."""
    if request.status == "retired":
        return _result(
            "profile.status",
            "fail",
            f"profile {request.profile_name} is retired",
            "promote it again or start another profile",
            status=request.status,
        )
    return _result("profile.status", "pass", f"status {request.status}", status=request.status)


def check_gpu_present(request: PreflightRequest, facts: Facts) -> CheckResult:
    """NVML answers and every card the profile names exists and is healthy."""
    if not request.gpus_requested:
        return _no_gpus("gpu.present")
    if facts.gpu is None:
        return _result(
            "gpu.present",
            "fail",
            facts.gpu_error or "NVML unavailable",
            "install or load the NVIDIA driver, then check with nvidia-smi",
            nvml_error=facts.gpu_error,
        )
    snapshot = facts.gpu
    seen = [d.index for d in snapshot.devices]
    if not request.gpu_indices:
        return _result(
            "gpu.present",
            "fail",
            "the profile requests GPUs but names no device",
            "list the card indices in the profile (e.g. devices: [0, 1])",
            host_devices=seen,
        )
    missing = [i for i, d in _requested_devices(request, facts) if d is None]
    lost = [(i, d.problem) for i, d in _requested_devices(request, facts) if d is not None and d.lost]
    broken = [
        (i, d.problem) for i, d in _requested_devices(request, facts) if d is not None and not d.lost and d.problem
    ]
    facts_out = {
        "driver_version": snapshot.driver_version,
        "cuda_driver_version": ".".join(map(str, snapshot.cuda_driver_version))
        if snapshot.cuda_driver_version
        else None,
        "host_devices": [{"index": d.index, "name": d.name, "uuid": d.uuid} for d in snapshot.devices],
        "requested": list(request.gpu_indices),
    }
    if missing:
        return _result(
            "gpu.present",
            "fail",
            f"card(s) {missing} not found; this host has {len(seen)} card(s) {seen}",
            "fix the device list in the profile, or check nvidia-smi for cards that vanished",
            missing=missing,
            **facts_out,
        )
    if lost:
        text = "; ".join(f"card {i}: {p}" for i, p in lost)
        return _result(
            "gpu.present",
            "fail",
            text,
            "reset the card (nvidia-smi -r -i N) or reboot the host",
            lost=[i for i, _ in lost],
            **facts_out,
        )
    if broken:
        text = "; ".join(f"card {i}: {p}" for i, p in broken)
        return _result("gpu.present", "unknown", text, "check the card with nvidia-smi -q -i N", **facts_out)
    names = ", ".join(f"{i}={d.name}" for i, d in _requested_devices(request, facts) if d is not None)
    return _result("gpu.present", "pass", f"driver {snapshot.driver_version}; cards {names}", **facts_out)


def check_gpu_arch(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Every card has the architecture the profile was built for."""
    if not request.gpus_requested:
        return _no_gpus("gpu.arch")
    if facts.gpu is None:
        return _gpu_unreachable("gpu.arch", facts)
    seen = {i: (d.arch if d else None) for i, d in _requested_devices(request, facts)}
    if request.arch is None:
        return _result("gpu.arch", "pass", "no architecture pinned", cards=seen)
    try:
        wanted = compute_capability_of_arch(request.arch)
    except ValueError as err:
        return _result("gpu.arch", "fail", str(err), "use a name like sm120 (compute capability 12.0)")
    wrong = {
        i: d.compute_capability
        for i, d in _requested_devices(request, facts)
        if d is not None and d.compute_capability is not None and d.compute_capability != wanted
    }
    unknown = [i for i, d in _requested_devices(request, facts) if d is None or d.compute_capability is None]
    wanted_text = f"{request.arch} (compute capability {wanted[0]}.{wanted[1]})"
    if wrong:
        found = ", ".join(f"card {i} is sm{cc[0]}{cc[1]} ({cc[0]}.{cc[1]})" for i, cc in wrong.items())
        return _result(
            "gpu.arch",
            "fail",
            f"profile needs {wanted_text}; {found}",
            "run the profile on matching cards, or use an image/profile built for these",
            wanted=request.arch,
            cards=seen,
        )
    if unknown:
        return _result(
            "gpu.arch",
            "unknown",
            f"cannot read the compute capability of card(s) {unknown}",
            wanted=request.arch,
            cards=seen,
        )
    return _result("gpu.arch", "pass", f"all cards are {wanted_text}", wanted=request.arch, cards=seen)


def check_gpu_count(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The number of cards matches TP x PP."""
    if not request.gpus_requested:
        return _no_gpus("gpu.count")
    wanted = request.tp * request.pp
    n = len(request.gpu_indices)
    duplicates = sorted({i for i in request.gpu_indices if request.gpu_indices.count(i) > 1})
    found: dict[str, Any] = {"devices": list(request.gpu_indices), "tp": request.tp, "pp": request.pp}
    if duplicates:
        return _result("gpu.count", "fail", f"card(s) {duplicates} listed twice", "list each card once", **found)
    if n != wanted:
        return _result(
            "gpu.count",
            "fail",
            f"tp {request.tp} x pp {request.pp} = {wanted} ranks but {n} card(s) {list(request.gpu_indices)}",
            "make tp x pp equal the number of devices",
            **found,
        )
    return _result("gpu.count", "pass", f"{n} card(s) for tp {request.tp} x pp {request.pp}", **found)


def check_gpu_mig(request: PreflightRequest, facts: Facts) -> CheckResult:
    """MIG would hand the engine a slice of a card, not the card."""
    if not request.gpus_requested:
        return _no_gpus("gpu.mig")
    if facts.gpu is None:
        return _gpu_unreachable("gpu.mig", facts)
    modes = {i: (d.mig_enabled if d else None) for i, d in _requested_devices(request, facts)}
    enabled = [i for i, on in modes.items() if on]
    if enabled:
        return _result(
            "gpu.mig",
            "fail",
            f"MIG mode is on for card(s) {enabled}: the engine would get a slice",
            "turn MIG off: sudo nvidia-smi -i N -mig 0 (then reset the card)",
            mig_enabled=modes,
        )
    return _result("gpu.mig", "pass", "MIG off or not supported on these cards", mig_enabled=modes)


def check_gpu_exclusive(request: PreflightRequest, facts: Facts) -> CheckResult:
    """No process and no other container uses the profile's cards, except what this run will stop."""
    if not request.gpus_requested:
        return _no_gpus("gpu.exclusive")
    if facts.gpu is None:
        return _gpu_unreachable("gpu.exclusive", facts)
    foreign = [p for p in facts.processes if p.disposition == "foreign"]
    stopping = [p for p in facts.processes if p.disposition != "foreign"]
    uuid_of = {i: (d.uuid if d else None) for i, d in _requested_devices(request, facts)}
    pids_by_container: dict[str, set[int]] = {}
    for p in facts.processes:
        if p.container_id:
            pids_by_container.setdefault(p.container_id, set()).add(p.card_index)
    claimants: list[dict[str, Any]] = []
    for container in facts.containers:
        if container.gpu_request is None:
            continue
        cards = [i for i, uuid in uuid_of.items() if container.gpu_request.covers(i, uuid)]
        if not cards or _classify(request, container, container.id, -1) != "foreign":
            continue
        claimants.append(
            {
                "container_id": container.short_id,
                "container_name": container.name,
                "servectl_profile": container.servectl_profile,
                "cards": cards,
                "via": container.gpu_request.via,
                "idle": container.id not in pids_by_container,
            }
        )
    unlisted = [i for i, d in _requested_devices(request, facts) if d is not None and d.processes is None]
    unexplained: dict[int, int] = {}
    for i, d in _requested_devices(request, facts):
        if d is None or d.processes is None or d.memory_used_bytes is None:
            continue
        listed = sum(p.used_memory_bytes or 0 for p in d.processes)
        if d.memory_used_bytes - listed > UNEXPLAINED_USED_BYTES:
            unexplained[i] = _mib(d.memory_used_bytes - listed)
    out: dict[str, Any] = {
        "foreign_processes": [p.to_dict() for p in foreign],
        "will_stop_processes": [p.to_dict() for p in stopping],
        "containers_requesting_cards": claimants,
        "cards_without_process_list": unlisted,
        "unexplained_used_mib": unexplained,
        "exclusive_required": request.exclusive,
    }
    problems = [p.describe() for p in foreign]
    for c in claimants:
        kind = f"servectl service {c['servectl_profile']}" if c["servectl_profile"] else "container"
        idle = " (idle)" if c["idle"] else ""
        problems.append(f"{kind} {c['container_name']} ({c['container_id']}) requests card(s) {c['cards']}{idle}")
    if problems:
        names = sorted(
            {str(c["container_name"]) for c in claimants} | {str(p.container_name) for p in foreign if p.container_name}
        )
        pids = sorted({p.pid for p in foreign if not p.container_id})
        fixes = []
        if names:
            fixes.append(
                f"stop {', '.join(names)} (docker stop NAME), or declare it as a conflict so swap stops and restores it"
            )
        if pids:
            fixes.append(f"end pid(s) {', '.join(map(str, pids))} or pick other cards")
        if any(c["servectl_profile"] for c in claimants):
            fixes.append("use servectl swap to replace a running servectl service")
        return _result(
            "gpu.exclusive",
            "fail" if request.exclusive else "warn",
            "; ".join(problems),
            "; ".join(fixes),
            **out,
        )
    if unlisted:
        return _result(
            "gpu.exclusive",
            "unknown",
            f"the driver cannot list processes on card(s) {unlisted}; exclusive use not proven",
            "check nvidia-smi on the host (WSL2 and MIG hide per-process use)",
            **out,
        )
    if unexplained:
        text = ", ".join(f"card {i}: {mib:,} MiB" for i, mib in unexplained.items())
        return _result(
            "gpu.exclusive",
            "warn",
            f"memory in use that no listed process holds ({text})",
            "look for processes in other PID namespaces (containers, VMs) with nvidia-smi on the host",
            **out,
        )
    note = f"; will stop {len(stopping)} process(es) first" if stopping else ""
    return _result(
        "gpu.exclusive",
        "pass",
        f"no other process or container on card(s) {list(request.gpu_indices)}{note}",
        **out,
    )


def _freed_bytes(facts: Facts, index: int) -> int | None:
    total = 0
    for p in facts.processes:
        if p.card_index == index and p.disposition != "foreign":
            if p.used_memory_bytes is None:
                return None
            total += p.used_memory_bytes
    return total


def check_gpu_vram_reserve(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Each card keeps the reserve free once the engine runs (estimated from weights/TP and mem fraction)."""
    if not request.gpus_requested:
        return _no_gpus("gpu.vram_reserve")
    if facts.gpu is None:
        return _gpu_unreachable("gpu.vram_reserve", facts)
    reserve = request.vram_reserve_mib
    ranks = max(1, request.tp * request.pp)
    weights = facts.model.weights_bytes if facts.model is not None and facts.model.weights_bytes else None
    weights_per_card = weights / ranks if weights else None
    cards: list[dict[str, Any]] = []
    short: list[str] = []
    impossible: list[str] = []
    unreadable: list[int] = []
    freed_unknown: list[int] = []
    for index, d in _requested_devices(request, facts):
        if d is None or d.memory_free_bytes is None or d.memory_total_bytes is None:
            unreadable.append(index)
            continue
        freed = _freed_bytes(facts, index)
        free_after_stop = d.memory_free_bytes + (freed or 0)
        row: dict[str, Any] = {
            "card": index,
            "total_mib": _mib(d.memory_total_bytes),
            "free_mib": _mib(d.memory_free_bytes),
            "freed_by_stopping_mib": None if freed is None else _mib(freed),
            "free_before_start_mib": _mib(free_after_stop),
            "weights_per_card_mib": None if weights_per_card is None else _mib(int(weights_per_card)),
            "engine_estimate_mib": None,
            "free_after_start_mib": None,
            "reserve_mib": reserve,
        }
        left: float | None = None
        if request.mem_fraction is not None:
            # SGLang sizes weights + KV pool so that (1 - mem_fraction) x total stays free.
            left = d.memory_total_bytes * (1 - request.mem_fraction)
            row["engine_estimate_mib"] = _mib(int(max(0.0, free_after_stop - left)))
        elif weights_per_card is not None:
            row["engine_estimate_mib"] = _mib(int(weights_per_card))
            left = free_after_stop - weights_per_card
        if weights_per_card is not None and weights_per_card > free_after_stop:
            impossible.append(
                f"card {index}: weights need {_mib(int(weights_per_card)):,} MiB per card but only "
                f"{_mib(free_after_stop):,} MiB are free"
            )
        elif weights_per_card is not None and left is not None and free_after_stop - left < weights_per_card:
            impossible.append(
                f"card {index}: mem fraction {request.mem_fraction} leaves "
                f"{_mib(int(max(0.0, free_after_stop - left))):,} MiB for weights + KV cache but weights "
                f"need {_mib(int(weights_per_card)):,} MiB per card"
            )
        effective_free = free_after_stop if left is None else min(free_after_stop, int(left))
        row["free_after_start_mib"] = None if left is None else _mib(int(left))
        if freed is None:
            freed_unknown.append(index)
        if _mib(effective_free) < reserve:
            what = "free now" if left is None else "left once the engine runs (estimate)"
            short.append(f"card {index}: {_mib(effective_free):,} MiB {what} < reserve {reserve:,} MiB")
        cards.append(row)
    out: dict[str, Any] = {
        "cards": cards,
        "reserve_mib": reserve,
        "waived": request.vram_reserve_waiver is not None,
        "waiver_reason": request.vram_reserve_waiver,
        "mem_fraction": request.mem_fraction,
        "weights_mib": None if weights is None else _mib(weights),
    }
    if impossible:
        return _result(
            "gpu.vram_reserve",
            "fail",
            "; ".join(impossible),
            "lower mem fraction, raise TP, or free the cards",
            **out,
        )
    summary = "; ".join(
        f"card {r['card']}: free {r['free_before_start_mib']:,} MiB"
        + (
            f", engine ~{r['engine_estimate_mib']:,} MiB, left ~{r['free_after_start_mib']:,} MiB"
            if r["engine_estimate_mib"] is not None
            else ""
        )
        for r in cards
    )
    if short and request.vram_reserve_waiver is None:
        return _result(
            "gpu.vram_reserve",
            "fail",
            "; ".join(short),
            "free the cards, lower mem fraction, or waive the reserve in the profile with a reason",
            **out,
        )
    if unreadable:
        return _result("gpu.vram_reserve", "unknown", f"cannot read the memory of card(s) {unreadable}", **out)
    if request.vram_reserve_waiver is not None:
        return _result(
            "gpu.vram_reserve",
            "pass",
            f"reserve {reserve:,} MiB waived: {request.vram_reserve_waiver} ({summary})",
            **out,
        )
    if freed_unknown:
        return _result(
            "gpu.vram_reserve",
            "unknown",
            f"cannot tell what stopping the replaced service frees on card(s) {freed_unknown} ({summary})",
            **out,
        )
    return _result("gpu.vram_reserve", "pass", f"reserve {reserve:,} MiB kept ({summary})", **out)


def _owner_of_port(request: PreflightRequest, facts: Facts) -> tuple[list[dict[str, Any]], list[str]]:
    """Listeners and Docker published ports that collide with the wanted address and port."""
    owners: list[dict[str, Any]] = []
    problems: list[str] = []
    publishers = [
        (c, p)
        for c in facts.containers
        for p in c.published_ports
        if p.host_port == request.port and p.protocol == "tcp" and addresses_overlap(request.host_address, p.host_ip)
    ]
    publisher_ids = {c.id for c, _ in publishers}
    for c, p in publishers:
        disposition = _classify(request, c, c.id, -1)
        owners.append(
            {
                "kind": "container",
                "container_id": c.short_id,
                "container_name": c.name,
                "host_ip": p.host_ip,
                "port": p.host_port,
                "disposition": disposition,
            }
        )
        if disposition == "foreign":
            problems.append(f"container {c.name} ({c.short_id}) publishes {p.host_ip}:{p.host_port}")
    for listener in facts.listeners:
        if not addresses_overlap(request.host_address, listener.address):
            continue
        if listener.process_name == "docker-proxy" and publisher_ids:
            continue  # Docker's userland proxy for a container already named above
        replacing = request.replacing
        is_replaced = replacing is not None and listener.pid is not None and listener.pid in replacing.pids
        owners.append(
            {
                "kind": "process",
                "address": listener.address,
                "port": listener.port,
                "pid": listener.pid,
                "process_name": listener.process_name,
                "disposition": "replacing" if is_replaced else "foreign",
            }
        )
        if not is_replaced:
            who = (
                f"pid {listener.pid} {listener.process_name or '?'}"
                if listener.pid is not None
                else "a process of another user (run as root to name it)"
            )
            problems.append(f"{who} listens on {listener.address}:{listener.port}")
    return owners, problems


def check_port_free(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Nothing listens on the profile's host address and port (any listener, not only Docker's)."""
    owners, problems = _owner_of_port(request, facts)
    out = {"host_address": request.host_address, "port": request.port, "owners": owners}
    if problems:
        return _result(
            "port.free",
            "fail",
            "; ".join(problems),
            "stop that service, or choose another port in the profile",
            **out,
        )
    if facts.engine is None and facts.engine_error:
        return _result(
            "port.free",
            "pass",
            f"{request.host_address}:{request.port} has no listener (Docker unreachable: published ports not checked)",
            **out,
        )
    note = " (held by the service being replaced)" if owners else ""
    return _result("port.free", "pass", f"{request.host_address}:{request.port} is free{note}", **out)


def check_port_role(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A bench profile never takes a production port; a production profile takes one."""
    out = {"role": request.role, "port": request.port, "production_ports": list(request.production_ports)}
    on_production = request.port in request.production_ports
    if request.role == "bench" and on_production:
        return _result(
            "port.role",
            "fail",
            f"bench profile on production port {request.port}: it would take real user traffic",
            "use a bench port (e.g. 8180)",
            **out,
        )
    if request.role == "production" and not on_production:
        return _result(
            "port.role",
            "fail",
            f"production profile on port {request.port}, not a production port "
            f"{list(request.production_ports)}: clients would not reach it",
            f"use port {request.production_ports[0] if request.production_ports else 8080}",
            **out,
        )
    return _result("port.role", "pass", f"{request.role} profile on port {request.port}", **out)


def check_network_mode(request: PreflightRequest, facts: Facts) -> CheckResult:
    """SGLang's internal ports stay inside the container unless the profile asks for host networking."""
    out = {"network_mode": request.network_mode, "host_network_reason": request.host_network_reason}
    if request.network_mode == "bridge":
        return _result(
            "network.mode",
            "pass",
            f"bridge network; only {request.host_address}:{request.port} is published",
            **out,
        )
    if not request.host_network_reason:
        return _result(
            "network.mode",
            "fail",
            "host networking without a reason: SGLang's internal ports would open on the host",
            "use the bridge network, or give the profile's reason for host networking",
            **out,
        )
    return _result(
        "network.mode",
        "warn",
        f"host networking: {request.host_network_reason}; SGLang's "
        "internal ports (NCCL, scheduler, tokenizer) open on the host",
        **out,
    )


def check_image_pinned(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The image is local and is the pinned one (by image id or repo digest)."""
    strict = request.status == "promoted"
    out: dict[str, Any] = {"image_ref": request.image_ref, "pinned_digest": request.image_digest}
    if not request.image_ref:
        return _result("image.pinned", "fail", "no image in the request", "set the profile's image", **out)
    if facts.engine is None:
        return _result("image.pinned", "unknown", "Docker unreachable, see docker.engine", **out)
    image = facts.image
    if image is not None:
        out.update(image_id=image.id, repo_digests=list(image.repo_digests), tags=list(image.tags))
    if request.image_digest is None:
        if image is None:
            return _result(
                "image.pinned",
                "fail",
                f"image {request.image_ref} is not present locally",
                f"docker pull {request.image_ref} (or docker load it)",
                **out,
            )
        return _result(
            "image.pinned",
            "fail" if strict else "warn",
            f"image {request.image_ref} ({image.id[:19]}) is not pinned to a digest",
            f"pin it in the profile: image digest {image.id}",
            **out,
        )
    if image is not None and request.image_digest in image.digests():
        return _result("image.pinned", "pass", f"{request.image_ref} is {request.image_digest[:19]}", **out)
    pinned = facts.image_by_digest
    if image is None and pinned is None:
        return _result(
            "image.pinned",
            "fail",
            f"image {request.image_ref} is not present locally (pinned {request.image_digest[:19]})",
            f"docker pull the pinned image (repo@{request.image_digest}) or docker load it",
            **out,
        )
    if image is None:
        assert pinned is not None
        out.update(pinned_image_id=pinned.id, pinned_tags=list(pinned.tags))
        return _result(
            "image.pinned",
            "fail" if strict else "warn",
            f"tag {request.image_ref} is not present, but the pinned image is ({pinned.id[:19]})",
            "run the image by digest, or tag the pinned image again",
            **out,
        )
    message = f"tag {request.image_ref} now points to {image.id[:19]}, not the pinned {request.image_digest[:19]}"
    if pinned is not None:
        out.update(pinned_image_id=pinned.id, pinned_tags=list(pinned.tags))
        message += " (the pinned image is still present)"
    return _result(
        "image.pinned",
        "fail" if strict else "warn",
        message,
        "run the image by digest, or re-pin after qualifying the new image",
        **out,
    )


def check_model_present(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The model folder exists and holds config.json and weight files."""
    model = facts.model
    if model is None:
        return _result("model.present", "fail", "no model path in the request", "set the profile's model path")
    out: dict[str, Any] = {
        "path": model.path,
        "exists": model.exists,
        "has_config_json": model.has_config_json,
        "weight_files": model.weight_file_count,
        "weights_bytes": model.weights_bytes,
        "weights_gib": round(model.weights_bytes / GIB, 2),
        "hf_repo_id": model.hf_repo_id,
    }
    if not model.exists:
        return _result(
            "model.present",
            "fail",
            f"model folder {model.path} does not exist",
            "download the model there (hf download REPO --local-dir PATH) or fix the path",
            **out,
        )
    if not model.is_dir:
        return _result(
            "model.present",
            "fail",
            f"model path {model.path} is not a folder",
            "point the profile at the folder that holds config.json",
            **out,
        )
    missing = [
        what
        for what, ok in (
            ("config.json", model.has_config_json),
            ("weight files", model.weight_file_count > 0),
        )
        if not ok
    ]
    if missing:
        return _result(
            "model.present",
            "fail",
            f"model folder {model.path} has no {' and no '.join(missing)}",
            "finish the download (hf download resumes) or fix the path",
            **out,
        )
    return _result(
        "model.present",
        "pass",
        f"{model.weight_file_count} weight file(s), {model.weights_bytes / GIB:,.1f} GiB in {model.path}",
        **out,
    )


def check_model_revision(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A Hugging Face snapshot (or local-dir download) is the pinned revision."""
    model = facts.model
    pinned = request.model_revision
    if model is None or not model.exists:
        return _result("model.revision", "unknown", "no model folder, see model.present", pinned=pinned)
    actual = model.hf_snapshot_revision or model.local_dir_revision
    source = "hf cache snapshot" if model.hf_snapshot_revision else "hf local-dir metadata"
    out: dict[str, Any] = {
        "pinned": pinned,
        "actual": actual,
        "source": source if actual else None,
        "hf_refs": dict(model.hf_refs),
    }
    if pinned is None:
        result: Result = "warn" if request.status == "promoted" else "pass"
        return _result(
            "model.revision",
            result,
            "no revision pinned" + (f" (folder is {actual})" if actual else ""),
            f"pin it in the profile: revision {actual}" if actual else "",
            **out,
        )
    if actual is None:
        return _result(
            "model.revision",
            "unknown",
            f"cannot tell the revision of {model.path} (not a Hugging Face snapshot)",
            "serve from the Hugging Face cache snapshot to have the pin checked",
            **out,
        )
    from servectl.adapters.host import revision_matches

    if revision_matches(pinned, actual, model.hf_refs):
        return _result("model.revision", "pass", f"revision {actual[:12]} ({source}) matches the pin", **out)
    return _result(
        "model.revision",
        "fail",
        f"{source} is {actual[:12]}, the profile pins {pinned[:12]}",
        f"hf download {model.hf_repo_id or 'REPO'} --revision {pinned}, or re-pin after qualifying",
        **out,
    )


def check_host_shm(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Enough shared memory for NCCL between ranks when TP x PP > 1."""
    ranks = request.tp * request.pp
    shm = facts.shm
    out: dict[str, Any] = {
        "ranks": ranks,
        "ipc_host": request.ipc_host,
        "container_shm_mib": None if request.shm_size_bytes is None else _mib(request.shm_size_bytes),
        "min_shm_mib": _mib(request.min_shm_bytes),
        "host_shm_total_mib": None if shm is None else _mib(shm.total_bytes),
        "host_shm_free_mib": None if shm is None else _mib(shm.free_bytes),
    }
    if ranks <= 1 or not request.gpus_requested:
        return _result("host.shm", "pass", "single rank: no shared memory needed between ranks", **out)
    if request.ipc_host:
        if shm is None:
            return _result(
                "host.shm",
                "fail",
                "ipc host but the host has no /dev/shm",
                "mount a tmpfs on /dev/shm",
                **out,
            )
        if shm.free_bytes < request.min_shm_bytes:
            return _result(
                "host.shm",
                "fail",
                f"ipc host; /dev/shm has {_mib(shm.free_bytes):,} MiB free, needs {_mib(request.min_shm_bytes):,} MiB",
                "free /dev/shm (stale NCCL segments) or enlarge it",
                **out,
            )
        return _result("host.shm", "pass", f"ipc host; /dev/shm has {_mib(shm.free_bytes):,} MiB free", **out)
    size = request.shm_size_bytes if request.shm_size_bytes is not None else 64 * MIB
    if size < request.min_shm_bytes:
        return _result(
            "host.shm",
            "fail",
            f"{ranks} ranks with a {_mib(size):,} MiB container /dev/shm (needs {_mib(request.min_shm_bytes):,} MiB)",
            "set shm size in the profile (e.g. 32g) or use ipc host",
            **out,
        )
    return _result("host.shm", "pass", f"container /dev/shm {_mib(size):,} MiB for {ranks} ranks", **out)


def check_host_memory(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Enough available host RAM for the engine's host-side buffers."""
    mem = facts.memory
    needed = request.min_host_memory_available_bytes + request.host_memory_extra_bytes
    if mem is None:
        return _result("host.memory", "unknown", "cannot read host memory")
    out = {
        "total_mib": _mib(mem.total_bytes),
        "available_mib": _mib(mem.available_bytes),
        "needed_mib": _mib(needed),
    }
    if mem.available_bytes < needed:
        return _result(
            "host.memory",
            "fail",
            f"{_mib(mem.available_bytes):,} MiB host RAM available, needs {_mib(needed):,} MiB",
            "stop other services, or lower the host cache size in the profile",
            **out,
        )
    return _result(
        "host.memory",
        "pass",
        f"{mem.available_bytes / GIB:,.1f} GiB of {mem.total_bytes / GIB:,.1f} GiB available",
        **out,
    )


def check_host_disk(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Enough free disk where the caches go."""
    if not facts.disks:
        return _result("host.disk", "pass", "no cache folders to check")
    rows = [
        {
            "path": d.path,
            "checked_path": d.checked_path,
            "free_mib": _mib(d.free_bytes),
            "total_mib": _mib(d.total_bytes),
        }
        for d in facts.disks
    ]
    short = [d for d in facts.disks if d.free_bytes < request.min_cache_free_bytes]
    out = {"paths": rows, "min_free_mib": _mib(request.min_cache_free_bytes)}
    if short:
        text = "; ".join(f"{d.path}: {d.free_bytes / GIB:,.1f} GiB free" for d in short)
        return _result(
            "host.disk",
            "fail",
            f"{text} (needs {request.min_cache_free_bytes / GIB:,.0f} GiB)",
            "free disk space or move the cache folder",
            **out,
        )
    text = "; ".join(f"{d.path}: {d.free_bytes / GIB:,.1f} GiB free" for d in facts.disks)
    return _result("host.disk", "pass", text, **out)


def check_docker_engine(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The Docker engine answers."""
    if facts.engine is None:
        message = facts.engine_error or "Docker engine unreachable"
        fix = (
            "pip install docker"
            if "SDK" in message
            else "start the engine (sudo systemctl start docker) or set DOCKER_HOST"
        )
        return _result("docker.engine", "fail", message, fix)
    e = facts.engine
    return _result(
        "docker.engine",
        "pass",
        f"Docker {e.server_version}",
        server_version=e.server_version,
        default_runtime=e.default_runtime,
        runtimes=sorted(e.runtimes),
        cgroup_version=e.cgroup_version,
    )


def check_docker_gpu_runtime(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The NVIDIA container runtime (or a CDI spec for nvidia.com/gpu) is there when GPUs are requested."""
    if not request.gpus_requested:
        return _no_gpus("docker.gpu_runtime")
    if facts.engine is None:
        return _result("docker.gpu_runtime", "unknown", "Docker unreachable, see docker.engine")
    out = {
        "runtimes": sorted(facts.engine.runtimes),
        "executables": dict(facts.executables),
        "cdi_specs": list(facts.cdi_specs),
    }
    ways = []
    if "nvidia" in facts.engine.runtimes:
        ways.append("nvidia runtime")
    if facts.executables.get("nvidia-container-runtime-hook"):
        ways.append("nvidia-container-runtime-hook (--gpus)")
    if facts.cdi_specs:
        ways.append(f"CDI spec {facts.cdi_specs[0]}")
    if not ways:
        return _result(
            "docker.gpu_runtime",
            "fail",
            "no NVIDIA container runtime, --gpus hook or CDI spec: containers cannot get GPUs",
            "install nvidia-container-toolkit, then sudo nvidia-ctk runtime configure --runtime=docker "
            "&& sudo systemctl restart docker",
            **out,
        )
    return _result("docker.gpu_runtime", "pass", ", ".join(ways), **out)


def check_conflicts(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Declared conflicting services: stopped and restored by swap / up --replace, or blocking a plain up."""
    declared = [c.label() for c in request.conflicts]
    if not request.conflicts:
        return _result("conflicts", "pass", "no conflicts declared", declared=declared)
    if facts.engine is None:
        return _result("conflicts", "unknown", "Docker unreachable, see docker.engine", declared=declared)
    running = _to_stop(request, facts.containers)
    rows = [
        {
            "container_id": c.short_id,
            "container_name": c.name,
            "compose_file": c.labels.get(COMPOSE_CONFIG_FILES_LABEL),
            "compose_service": c.labels.get(COMPOSE_SERVICE_LABEL),
        }
        for c in running
    ]
    out = {"declared": declared, "running": rows, "stop_conflicts": request.stop_conflicts}
    if not running:
        return _result("conflicts", "pass", f"none of {len(declared)} declared conflict(s) is running", **out)
    names = ", ".join(c.name for c in running)
    if request.stop_conflicts:
        return _result("conflicts", "warn", f"will be stopped: {names} (restored afterwards)", **out)
    return _result(
        "conflicts",
        "fail",
        f"conflicting service(s) running: {names}",
        f"use servectl swap {request.profile_name} (or up --replace), which stops them and restores them afterwards",
        **out,
    )


CheckFunction = Callable[[PreflightRequest, Facts], CheckResult]

CHECKS: tuple[tuple[str, str, CheckFunction], ...] = (
    ("profile.status", "Profile status", check_profile_status),
    ("gpu.present", "GPUs present", check_gpu_present),
    ("gpu.arch", "GPU architecture", check_gpu_arch),
    ("gpu.count", "GPU count = TP x PP", check_gpu_count),
    ("gpu.mig", "MIG off", check_gpu_mig),
    ("gpu.exclusive", "Exclusive use of the cards", check_gpu_exclusive),
    ("gpu.vram_reserve", "VRAM reserve", check_gpu_vram_reserve),
    ("port.free", "Port free", check_port_free),
    ("port.role", "Port fits the role", check_port_role),
    ("network.mode", "Network isolation", check_network_mode),
    ("image.pinned", "Image pinned", check_image_pinned),
    ("model.present", "Model files", check_model_present),
    ("model.revision", "Model revision", check_model_revision),
    ("host.shm", "Shared memory", check_host_shm),
    ("host.memory", "Host memory", check_host_memory),
    ("host.disk", "Cache disk room", check_host_disk),
    ("docker.engine", "Docker engine", check_docker_engine),
    ("docker.gpu_runtime", "NVIDIA container runtime", check_docker_gpu_runtime),
    ("conflicts", "Conflicting services", check_conflicts),
)
"""Every check in report order: (id, title, function)."""

CHECK_IDS: tuple[str, ...] = tuple(check_id for check_id, _, _ in CHECKS)
TITLES: dict[str, str] = {check_id: title for check_id, title, _ in CHECKS}


def validate_skip(skip: Iterable[str]) -> frozenset[str]:
    """The check ids to skip, or a :class:`~servectl.errors.UsageError` naming an unknown one."""
    wanted = frozenset(skip)
    for check_id in sorted(wanted):
        if check_id not in TITLES:
            close = difflib.get_close_matches(check_id, CHECK_IDS, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known checks: {', '.join(CHECK_IDS)}"
            raise UsageError(f"--force {check_id}: no such preflight check{hint}")
    return wanted


def run_checks(request: PreflightRequest, facts: Facts, skip: Iterable[str] = frozenset()) -> tuple[CheckResult, ...]:
    """Run every check on already-gathered facts; skipped checks keep what they would have said."""
    skipped = validate_skip(skip)
    results: list[CheckResult] = []
    for check_id, _title, function in CHECKS:
        outcome = function(request, facts)
        if check_id in skipped:
            outcome = replace(
                outcome,
                result="skipped",
                forced=True,
                message=f"skipped with --force (would have been {outcome.result}: {outcome.message})",
                facts={**outcome.facts, "result_without_force": outcome.result},
            )
        results.append(outcome)
    return tuple(results)


def run_preflight(
    *,
    request: PreflightRequest,
    gpus: GpuInventory,
    host: HostProbe,
    docker: DockerFacts,
    skip: Iterable[str] = frozenset(),
) -> PreflightReport:
    """Measure the box and run every check for one request.

    Args:
        request: what the service needs (filled in from the profile).
        gpus: GPU inventory (NVML on a real host).
        host: host probe (psutil on a real host).
        docker: Docker engine facts.
        skip: check ids forced to ``skipped`` (``--force CHECK-ID``).

    Returns:
        The report; ``report.failed`` says whether a start must not happen.

    Raises:
        UsageError: ``skip`` names a check that does not exist.
    """
    skipped = validate_skip(skip)
    started_at = time.time()
    started = time.perf_counter()
    facts = gather_facts(request=request, gpus=gpus, host=host, docker=docker)
    checks = run_checks(request, facts, skipped)
    return PreflightReport(
        profile_name=request.profile_name,
        source_file=request.source_file,
        checks=checks,
        started_at=started_at,
        duration_seconds=time.perf_counter() - started,
        gpu_query_seconds=facts.gpu_seconds,
    )


def raise_if_failed(report: PreflightReport) -> None:
    """Raise :class:`~servectl.errors.PreflightFailed` (exit 3, one line per failed check, the report
    attached) when a check failed; ``up`` and ``swap`` call this before starting anything."""
    if report.failed:
        raise PreflightFailed(report.failure_summary(), report=report)


def preflight_on_this_host(*, request: PreflightRequest, skip: Iterable[str] = frozenset()) -> PreflightReport:
    """:func:`run_preflight` with the real adapters: NVML, psutil and the Docker engine from the environment.

    NVML and the Docker SDK are imported only here, on first use.
    """
    from servectl.adapters.docker_facts import DockerSdkFacts
    from servectl.adapters.gpu import NvmlInventory
    from servectl.adapters.host import PsutilHostProbe

    docker = DockerSdkFacts()
    with NvmlInventory() as gpus:
        try:
            return run_preflight(request=request, gpus=gpus, host=PsutilHostProbe(), docker=docker, skip=skip)
        finally:
            docker.close()
