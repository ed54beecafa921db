"""The read model: every servectl service, derived from the labelled containers Docker reports.

Docker is the source of truth: state, port, GPUs, uptime and plan drift all come from the container's labels
and state (plus the history, which says which containers passed the health gate). Containers of adopted
profiles carry no labels; :mod:`servectl.service.adopted` recognises them by id or name and configuration,
and they are listed under their profile, marked ``adopted``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from servectl.adapters.standby import BackupHold, StandbyRecord, backup_hold
from servectl.adapters.state import GateRecord, ready_container_ids
from servectl.plan.labels import (
    LABEL_GPUS,
    LABEL_HOST,
    LABEL_PLAN_HASH,
    LABEL_PORT,
    LABEL_PROFILE,
    LABEL_SERVED_NAME,
    LABEL_STOP_GRACE,
)

if TYPE_CHECKING:
    from servectl.adapters.docker import ContainerState, DockerEngine
    from servectl.adapters.http import HttpAdapter
    from servectl.adapters.state import HistoryLog
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import ServiceRef
    from servectl.service.adopted import AdoptedMatch


ServiceState = Literal["starting", "ready", "unhealthy", "exited", "created", "standby"]
ALIVE_STATES: tuple[ServiceState, ...] = ("ready", "starting", "unhealthy")
"""Service states whose profile counts as running (and is brought back when a swap fails). A ``standby``
service (a warm standby: its container runs, its cards' memory is released) serves nothing and is in nobody's
way; a swap to its profile resumes it (:mod:`servectl.service.standby`)."""
#: How long ``status``'s ``GET /health`` of a running service may take before it counts as not answering.
HEALTH_PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class ServiceInfo:
    """One servectl service, as derived from its container's labels and state."""

    container_id: str
    container_name: str
    profile: str
    plan_hash: str
    state: ServiceState
    exit_code: int | None
    oom_killed: bool
    host: str
    port: int | None
    gpus: tuple[int, ...]
    started_at: float | None
    uptime_s: float | None
    stop_grace_s: int
    drift: bool | None
    served_name: str = ""
    image: str = ""
    running: bool = False
    adopted: bool = False  # a container servectl did not start, recognised as an adopted profile's service
    standby_host_ram_bytes: int | None = None  # on standby: host RAM its CPU copy of the weights takes
    standby_resume_s: float | None = None  # on standby: the last measured resume of its profile
    standby_release_s: float | None = None  # on standby: the last measured release of its profile
    standby_cycles: int | None = None  # on standby: release/resume cycles this container has passed
    backup_bytes: int | None = None  # a warm service: host RAM of its CPU copy of the weights (its trust record)
    backup_hold: BackupHold | None = None  # how that copy takes host RAM (adapters.standby.backup_hold)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "state": self.state,
            "exit_code": self.exit_code,
            "oom_killed": self.oom_killed,
            "host": self.host,
            "port": self.port,
            "url": self.url,
            "gpus": list(self.gpus),
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s, 1),
            "started_at": self.started_at,
            "plan_hash": self.plan_hash,
            "drift": self.drift,
            "served_name": self.served_name,
            "container_id": self.container_id,
            "container_name": self.container_name,
            "image": self.image,
            "stop_grace_s": self.stop_grace_s,
            "adopted": self.adopted,
            "standby_host_ram_bytes": self.standby_host_ram_bytes,
            "standby_resume_s": self.standby_resume_s,
            "standby_release_s": self.standby_release_s,
            "standby_cycles": self.standby_cycles,
            "backup_bytes": self.backup_bytes,
            "backup_hold": self.backup_hold,
        }


def running_refs(current: Sequence[ServiceInfo]) -> tuple[ServiceRef, ...]:
    """The running services as preflight's ``services`` check takes them (what each holds)."""
    from servectl.preflight.model import ServiceRef

    return tuple(
        ServiceRef(
            profile=s.profile,
            container_id=s.container_id,
            container_name=s.container_name,
            port=s.port,
            gpus=s.gpus,
            backup_bytes=s.backup_bytes or 0,
            backup_hold=s.backup_hold,
        )
        for s in current
        if s.running
    )


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _gpus(value: str | None) -> tuple[int, ...]:
    out: list[int] = []
    for part in (value or "").split(","):
        if part.strip().isdigit():
            out.append(int(part))
    return tuple(out)


def service_from_container(
    container: ContainerState,
    *,
    now: float,
    answers_health: bool | None,
    passed_gate: bool,
    current_plan_hash: str | None,
) -> ServiceInfo:
    """A service from its container. Pure.

    Args:
        container: a servectl-managed container.
        now: epoch seconds (for the uptime).
        answers_health: whether ``/health`` answers 200 now (None: not probed).
        passed_gate: whether this container passed the health gate (its gate record or the history says
            so). One that never passed is never "ready", even when ``/health`` answers: servectl was
            stopped while it started, and the gate checks more than ``/health``.
        current_plan_hash: the plan hash of the profile as it is now (None: profile unreadable).
    """
    labels = container.labels
    state: ServiceState
    if container.status == "created":
        state = "created"
    elif not container.running:
        state = "exited"
    elif passed_gate and answers_health is not False:
        state = "ready"
    elif passed_gate:
        state = "unhealthy"
    else:
        state = "starting"
    plan_hash = labels.get(LABEL_PLAN_HASH, "")
    uptime = now - container.started_at if container.running and container.started_at else None
    return ServiceInfo(
        container_id=container.id,
        container_name=container.name,
        profile=labels.get(LABEL_PROFILE, "?"),
        plan_hash=plan_hash,
        state=state,
        exit_code=container.exit_code if state == "exited" else None,
        oom_killed=container.oom_killed,
        host=labels.get(LABEL_HOST, "127.0.0.1"),
        port=_int(labels.get(LABEL_PORT)),
        gpus=_gpus(labels.get(LABEL_GPUS)),
        started_at=container.started_at,
        uptime_s=uptime,
        stop_grace_s=_int(labels.get(LABEL_STOP_GRACE)) or 0,
        drift=None if current_plan_hash is None else current_plan_hash != plan_hash,
        served_name=labels.get(LABEL_SERVED_NAME, ""),
        image=container.image,
        running=container.running,
    )


def service_from_adopted(match: AdoptedMatch, *, now: float, answers_health: bool | None) -> ServiceInfo:
    """A service from a container recognised as an adopted profile's (its settings come from the profile). Pure."""
    from servectl.adapters.docker import container_state_from_inspect

    container = container_state_from_inspect(match.document)
    profile, plan = match.resolved.loaded.profile, match.resolved.plan
    state: ServiceState
    if container.status == "created":
        state = "created"
    elif not container.running:
        state = "exited"
    elif answers_health is False:
        state = "unhealthy"
    else:
        state = "ready"
    return ServiceInfo(
        container_id=container.id,
        container_name=container.name,
        profile=profile.name,
        plan_hash=plan.plan_hash,
        state=state,
        exit_code=container.exit_code if state == "exited" else None,
        oom_killed=container.oom_killed,
        host=profile.serve.host,
        port=profile.serve.port,
        gpus=tuple(profile.gpus.devices),
        started_at=container.started_at,
        uptime_s=now - container.started_at if container.running and container.started_at else None,
        stop_grace_s=profile.container.stop_grace_s,
        drift=False,  # it matched the profile's plan field by field
        served_name=profile.model.served_name,
        image=container.image,
        running=container.running,
        adopted=True,
    )


def on_standby(service: ServiceInfo, record: StandbyRecord) -> ServiceInfo:
    """``service`` as ``standby`` when a swap released it (its record in the state folder), else unchanged but
    for the host RAM of a warm service's CPU copy of the weights (its trust record, for preflight)."""
    entry = record.entry(service.container_id)
    trust = record.trust(service.container_id)
    hold = backup_hold(trust, entry)
    if hold is not None:
        service = replace(service, backup_bytes=hold[0], backup_hold=hold[1])
    if entry is None:
        return service
    return replace(
        service,
        state="standby",
        standby_host_ram_bytes=entry.host_ram_bytes,
        standby_resume_s=record.last_resume_s(service.profile),
        standby_release_s=record.last_release_s(service.profile),
        standby_cycles=None if trust is None else trust.cycles,
    )


def adopted_in(environ: Mapping[str, str]) -> Sequence[Resolved]:
    """The adopted profiles of ``environ``'s search path (see :func:`servectl.service.adopted.adopted_profiles`)."""
    from servectl.service.adopted import adopted_profiles

    return adopted_profiles(environ)


@dataclass(frozen=True)
class ServiceRecords:
    """What the state folder says of the services: the gate records and the standby record under
    ``state_dir``, and ``history`` (which containers passed the gate before gate records existed)."""

    state_dir: Path
    history: HistoryLog


def services(
    *,
    docker: DockerEngine,
    http: HttpAdapter,
    probe: bool = True,
    plan_hash_of: Callable[[str], str | None] | None = None,
    records: ServiceRecords,
    scope: Mapping[str, str] | None = None,
    clock: Callable[[], float],
    adopted: Callable[[], Sequence[Resolved]] | None = None,
) -> list[ServiceInfo]:
    """Every servectl service, derived from labelled containers (Docker is the source of truth).

    Args:
        docker: the engine.
        http: the HTTP adapter that probes ``/health`` of running services (the Context's: on the standard
            library's socket, so ``status`` imports no httpx).
        probe: probe ``/health`` to tell ready from starting/unhealthy; without it a running service that
            passed the gate counts as ready.
        plan_hash_of: profile name -> its plan hash now, for drift; None skips drift (reported as None).
        records: the state folder's gate and standby records and the history.
        scope: only containers that also carry these labels (tests use a per-session label).
        clock: epoch seconds (the context's wall clock).
        adopted: the adopted profiles whose containers to look for (None: none).
    """
    containers = docker.list_managed(scope)
    passed = passed_gate_ids(records, [(c.id, c.name) for c in containers]) if containers else set()

    def answers_health(url: str) -> bool:
        return http.status_code(f"{url}/health", timeout_s=HEALTH_PROBE_TIMEOUT_S) == 200

    hashes: dict[str, str | None] = {}
    out: list[ServiceInfo] = []
    standby = StandbyRecord(records.state_dir)
    for c in sorted(containers, key=lambda c: (c.labels.get(LABEL_PROFILE, ""), c.name)):
        profile = c.labels.get(LABEL_PROFILE, "")
        if plan_hash_of is not None and profile not in hashes:
            hashes[profile] = plan_hash_of(profile)
        answers: bool | None = None
        if probe and c.running:
            port = _int(c.labels.get(LABEL_PORT))
            host = c.labels.get(LABEL_HOST, "127.0.0.1")
            host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            answers = port is not None and answers_health(f"http://{_bracket(host)}:{port}")
        service = service_from_container(
            c, now=clock(), answers_health=answers, passed_gate=c.id in passed, current_plan_hash=hashes.get(profile)
        )
        out.append(on_standby(service, standby) if c.running else service)
    if adopted is not None:
        from servectl.service.adopted import find_adopted

        for match in find_adopted(docker, adopted(), scope=scope):
            running = ((match.document.get("State") or {}).get("Status")) == "running"
            answers = answers_health(match.resolved.plan.url) if probe and running else None
            out.append(service_from_adopted(match, now=clock(), answers_health=answers))
    return out


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def find_services(
    name: str | None, *, docker: DockerEngine, scope: Mapping[str, str] | None = None
) -> list[ContainerState]:
    """The containers of the services of profile (or container) ``name``; all of them when ``name`` is None."""
    containers = docker.list_managed(scope)
    if name is None:
        return containers
    return [c for c in containers if name in (c.labels.get(LABEL_PROFILE, ""), c.name)]


def passed_gate_ids(records: ServiceRecords, containers: Sequence[tuple[str, str]]) -> set[str]:
    """Which of ``container_ids`` passed the health gate: their gate record, or a run event in the history.

    A damaged history counts as no events (``status`` says so in a note), so reading never fails here.
    """
    container_ids = [cid for cid, _ in containers]
    gate = GateRecord(records.state_dir)
    # Never passed = servectl started it and its gate has not passed; a container servectl did not start
    # (`docker compose up` of a rendered file) has no record and is judged by its health probe.
    passed = {cid for cid, name in containers if gate.passed(cid) or not gate.pending(name)}
    if len(passed) < len(container_ids):  # older services, started before gate records existed
        passed |= ready_container_ids(records.history)
    return passed & set(container_ids)
