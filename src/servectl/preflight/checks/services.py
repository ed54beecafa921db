"""Checks of what else runs: the plan's container name is free, and no other service holds the port or a card.

Both were answered outside preflight before (``up`` raised on servectl services and foreign containers,
``swap`` on the container name); they live here so that ``up``, ``swap``, ``rollback-check`` and
``servectl preflight`` give the same answer. The servectl services running now come in as data
(:attr:`~servectl.preflight.model.PreflightRequest.services`); containers servectl did not start come from the
Docker facts. A failure of either check is a :class:`~servectl.errors.ServiceConflict` (exit 1), not a plain
preflight failure: the fix is another command (``swap``, ``down``), not a change to the box.
"""

from __future__ import annotations

from servectl.adapters.docker import ContainerState
from servectl.plan.labels import LABEL_PROFILE
from servectl.preflight.checks.base import make_result
from servectl.preflight.facts import Facts, conflict_matches
from servectl.preflight.model import CheckResult, PreflightRequest

CONFLICT_CHECKS = ("container.name", "services")
"""Checks whose failure means another service is in the way (raised as ServiceConflict, exit 1)."""


def _set_aside(request: PreflightRequest, container: ContainerState) -> bool:
    """The container is this start's own, is being replaced, or is a declared conflict this start stops."""
    if container.id in request.own_container_ids:
        return True
    if request.replacing is not None and request.replacing.matches(container):
        return True
    return request.stop_conflicts and any(conflict_matches(ref, container) for ref in request.conflicts)


def check_container_name(request: PreflightRequest, facts: Facts) -> CheckResult:
    """No container outside this start holds the plan's container name."""
    name = request.container_name
    if not name:
        return make_result("container.name", "pass", "the plan names no container (Docker picks a free name)")
    if facts.engine is None:
        return make_result("container.name", "unknown", "Docker unreachable, see docker.engine")
    where = request.source_file or request.profile_name
    for c in facts.named:
        if _set_aside(request, c):
            continue
        if not c.managed:
            return make_result(
                "container.name",
                "fail",
                f"a container named {name} exists and servectl did not start it; servectl leaves it alone",
                f"remove or rename it yourself, or set container.name in {where}",
                container_id=c.short_id,
            )
        if c.running:
            return make_result(
                "container.name",
                "fail",
                f"container {name} already runs profile {c.labels.get(LABEL_PROFILE, '?')}",
                f"use servectl swap {request.profile_name}, or set another container.name in {where}",
                container_id=c.short_id,
            )
    left = [c.short_id for c in facts.named if c.managed and not c.running and not _set_aside(request, c)]
    if left:
        return make_result(
            "container.name", "pass", f"{name}: a stopped servectl container, removed before the start", stopped=left
        )
    return make_result("container.name", "pass", f"{name} is free")


def check_services(request: PreflightRequest, facts: Facts) -> CheckResult:
    """No other running service publishes the port or holds one of the cards."""
    if facts.engine is None:
        return make_result("services", "unknown", "Docker unreachable, see docker.engine")
    ours, holders = _servectl_holders(request)
    theirs = _foreign_holders(request, facts)
    out = {"servectl": ours, "foreign": theirs}
    if not ours and not theirs:
        return make_result("services", "pass", "no other service holds the port or the cards", **out)
    fixes = []
    if holders:
        target = holders[0] if len(holders) == 1 else "..."
        fixes.append(f"use servectl swap {request.profile_name} to replace it (or servectl down {target} first)")
    if theirs:
        fixes.append(
            "servectl never stops containers it did not start: stop it yourself (docker stop NAME), "
            "or list it under conflicts: and use servectl swap"
        )
    return make_result("services", "fail", "; ".join(ours + theirs), "; ".join(fixes), **out)


def _servectl_holders(request: PreflightRequest) -> tuple[list[str], list[str]]:
    """What the other servectl services hold of this start's port and cards: (problems, their profiles)."""
    problems: list[str] = []
    holders: list[str] = []
    replacing = request.replacing
    for svc in request.services:
        if svc.profile == request.profile_name or svc.container_id in request.own_container_ids:
            continue
        if replacing is not None and replacing.matches(container_id=svc.container_id):
            continue
        if replacing is not None and replacing.container_name == svc.container_name:
            continue
        found = []
        if svc.port is not None and svc.port == request.port:
            found.append(f"servectl service {svc.profile} holds port {svc.port}")
        shared = sorted(set(svc.gpus) & set(request.gpu_indices))
        if shared:
            found.append(f"servectl service {svc.profile} holds GPU {', '.join(map(str, shared))}")
        if found:
            problems += found
            holders.append(svc.profile)
    return problems, sorted(set(holders))


def _foreign_holders(request: PreflightRequest, facts: Facts) -> list[str]:
    """Running containers servectl did not start that publish the port or were given one of the cards."""
    known = {svc.container_id for svc in request.services}
    devices = [str(i) for i in request.gpu_indices]
    problems: list[str] = []
    for c in facts.containers:
        if c.managed or c.id in known or _set_aside(request, c):
            continue
        if any(p.host_port == request.port for p in c.ports):
            problems.append(f"container {c.name} (not started by servectl) publishes port {request.port}")
        held = devices if "all" in c.device_ids else sorted(set(devices) & set(c.device_ids))
        if devices and held:
            problems.append(f"container {c.name} (not started by servectl) uses GPU {', '.join(held)}")
    return problems
