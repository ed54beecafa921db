"""Preflight for a profile: the bridge from a resolved profile + plan to the measured checks.

:mod:`servectl.preflight.checks` knows nothing of profiles; this module fills its request from the profile and the
launch plan (:func:`request_for`), and holds the one answer to "may this start here?" (:func:`check_start`),
which ``up``, ``swap``, ``rollback-check`` and ``preflight`` (:func:`measure_start`) all use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from servectl.adapters.conflicts import conflict_key
from servectl.plan.resolve import Resolved
from servectl.preflight.model import ConflictRef, PreflightReport, PreflightRequest, StartContext
from servectl.profile.engine_args import mem_fraction_static

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.host import HostProbe
    from servectl.adapters.state import HistoryLog

_SIZE = re.compile(r"^(\d+)([bkmgBKMG]?)$")
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_size_bytes(text: str | None) -> int | None:
    """Docker's size notation (``32g``, ``512m``) in bytes."""
    if not text:
        return None
    match = _SIZE.match(text)
    if match is None:
        return None
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _breakable_graph(resolved: Resolved) -> bool:
    """Whether a warm profile's engine captures CUDA graphs with the breakable backend (False: not warm)."""
    p = resolved.loaded.profile
    if p.swap.standby != "warm":
        return False
    from servectl.profile.rules import settings
    from servectl.profile.standby_rules import breakable_graph

    return breakable_graph(p, settings(p, resolved.loaded.catalogs))


ALONE = StartContext()
"""A start that replaces nothing, stops no conflicts and knows of no other service."""


def request_for(resolved: Resolved, context: StartContext = ALONE) -> PreflightRequest:
    """The preflight request of a resolved profile in its context (pure)."""
    p, plan = resolved.loaded.profile, resolved.plan
    model_mount = plan.docker.mounts[0]
    conflicts = tuple(ConflictRef(*conflict_key(c)) for c in p.conflicts)
    return PreflightRequest(
        profile_name=p.name,
        source_file=str(resolved.loaded.file.path),
        status=p.status,
        gpus_requested=bool(p.gpus.devices),
        gpu_indices=tuple(p.gpus.devices),
        arch=p.gpus.arch,
        tp=p.engine.tp,
        dp=p.engine.dp,
        exclusive=p.gpus.exclusive,
        vram_reserve_mib=p.gpus.vram_reserve_mib,
        vram_reserve_waiver=p.gpus.reserve_waiver,
        mem_fraction=mem_fraction_static(p, catalogs=resolved.loaded.catalogs),
        host_address=p.serve.host,
        port=p.serve.port,
        role=p.serve.role,
        production_ports=tuple(p.serve.production_ports),
        network_mode=p.serve.network,
        host_network_reason="profile sets serve.network: host" if p.serve.network == "host" else None,
        image_ref=plan.docker.image.split("@", 1)[0],
        image_digest=p.image.digest,
        model_path=model_mount.source,
        model_revision=p.model.revision,
        ipc_host=plan.docker.ipc_mode == "host",
        shm_size_bytes=parse_size_bytes(plan.docker.shm_size),
        cache_paths=tuple(m.source for m in plan.docker.mounts[1:] if not m.read_only),
        conflicts=conflicts,
        stop_conflicts=context.stop_conflicts,
        replacing=context.replacing,
        container_name=plan.docker.name,
        services=context.services,
        own_container_ids=context.own_container_ids,
        engine_argv=plan.engine_argv,
        entrypoint=tuple(p.image.entrypoint),
        image_built_here=p.image.build == "standin",
        standby_warm=p.swap.standby == "warm",
        standby_retained=p.swap.standby == "warm" and p.swap.standby_retain_backup,
        standby_ram_waiver=p.swap.standby_ram_waiver,
        memlock=next(((soft, hard) for name, soft, hard in plan.docker.ulimits if name == "memlock"), None),
        memlock_source="container.ulimits"
        if p.container.ulimits is not None
        else "SGLang's ulimits, servectl's default",
        engine_env_names=frozenset(name for name, _ in plan.docker.environment),
        standby_breakable_graph=_breakable_graph(resolved),
        standin_env=tuple((k, v) for k, v in plan.docker.environment if k.startswith("STANDIN_") and v is not None),
        unset_references=resolved.unset_references,
    )


def measure_start(
    resolved: Resolved,
    *,
    docker: DockerEngine,
    gpus: GpuInventory,
    host: HostProbe,
    context: StartContext = ALONE,
    skip: Iterable[str] = frozenset(),
) -> PreflightReport:
    """Every preflight check for ``resolved`` on this host, measured once; raises nothing for a failed check.

    Args:
        resolved: the profile and its plan.
        docker: the command's Docker client (preflight opens no second one).
        gpus: the command's GPU inventory (a null one where none answers: ``gpu.present`` reports why).
        host: the command's host probe.
        context: the service being replaced (its cards, pids and port count as free), whether the declared
            conflicts are stopped first, the servectl services running now (none may hold the port, a card
            or the container name) and containers that are the profile's own.
        skip: check ids forced to ``skipped``.
    """
    from servectl.preflight.run import run_preflight

    request = request_for(resolved, context)
    return run_preflight(request=request, gpus=gpus, host=host, docker=docker, skip=skip, parses=context.parses)


def check_start(
    resolved: Resolved,
    *,
    docker: DockerEngine,
    gpus: GpuInventory,
    host: HostProbe,
    history: HistoryLog,
    context: StartContext = ALONE,
    skip: Iterable[str] = frozenset(),
    on_report: Callable[[PreflightReport], None] | None = None,
) -> PreflightReport:
    """May ``resolved`` start here, now? The one answer ``up``, ``swap`` and ``rollback-check`` use.

    Runs :func:`measure_start` (the service being replaced, the services running now and the declared
    conflicts come in as data: ``context``), hands the report to ``on_report``, records checks skipped with
    ``--force`` in ``history`` and raises when a check failed. The image must already be on the host
    (commands call ``ensure_image`` first, once).

    Raises:
        ServiceConflict: another service holds the container name, the port or a card (``services``,
            ``container.name``; exit 1), with every failed check listed and the report attached.
        PreflightFailed: another check failed (one line per failed check, the report attached).
        UsageError: ``skip`` names a check that does not exist.
    """
    from servectl.preflight.run import raise_if_failed

    report = measure_start(resolved, docker=docker, gpus=gpus, host=host, context=context, skip=skip)
    if on_report is not None:
        on_report(report)
    forced = {c.id: c.facts.get("result_without_force") for c in report.checks if c.forced}
    if forced:
        history.record({"event": "preflight-forced", "profile": resolved.name, "checks": forced})
    raise_if_failed(report)
    return report
