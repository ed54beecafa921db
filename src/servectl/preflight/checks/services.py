"""Checks of servectl's own services: the plan's container name is free, and no other servectl service holds
the port or a card.

Both were answered outside preflight before (``up`` raised on other services, ``swap`` on the container
name); they live here so that ``up``, ``swap``, ``rollback-check`` and ``servectl preflight`` give the same
answer. The servectl services running now come in as data
(:attr:`~servectl.preflight.model.PreflightRequest.services`, from their labels: a service on the host network
publishes no port, but its label says which it holds). When a servectl service is in the way the failed
result carries :data:`SERVECTL_HOLDER` and is raised as :class:`~servectl.errors.ServiceConflict` (exit 1):
the fix is another servectl command (``swap``, ``down``). A container servectl did not start is a plain
preflight failure (exit 3): the fix is on the box.
"""

from __future__ import annotations

from servectl.adapters.docker import ContainerState
from servectl.plan.labels import LABEL_PROFILE
from servectl.preflight.checks.base import make_result
from servectl.preflight.facts import Facts, classify_process
from servectl.preflight.model import CheckResult, PreflightRequest

SERVECTL_HOLDER = "servectl_holder"
"""The fact a failed check sets when what is in the way is a servectl service (raised as ServiceConflict)."""


def _set_aside(request: PreflightRequest, container: ContainerState) -> bool:
    """The container is this start's own, is being replaced, or is a declared conflict this start stops."""
    return classify_process(request, container, container.id, -1) != "foreign"


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
            holder = c.labels.get(LABEL_PROFILE, "?")
            return make_result(
                "container.name",
                "fail",
                f"container {name} already runs profile {holder}",
                f"use servectl swap {request.profile_name}, or set another container.name in {where}",
                container_id=c.short_id,
                **{SERVECTL_HOLDER: holder},
            )
    left = [c.short_id for c in facts.named if c.managed and not c.running and not _set_aside(request, c)]
    if left:
        return make_result(
            "container.name", "pass", f"{name}: a stopped servectl container, removed before the start", stopped=left
        )
    return make_result("container.name", "pass", f"{name} is free")


def check_services(request: PreflightRequest, facts: Facts) -> CheckResult:
    """No other servectl service holds the port or one of the cards (by what its labels declare).

    The measured view of the same resources is ``port.free`` (listeners, published ports) and
    ``gpu.exclusive`` (processes, GPU requests); those also name containers servectl did not start, whose fix
    is on the box (stop them, or declare them as conflicts), so they stay preflight failures (exit 3).
    """
    if facts.engine is None:
        return make_result("services", "unknown", "Docker unreachable, see docker.engine")
    problems, holders = _servectl_holders(request)
    out = {"holders": holders, "problems": problems}
    if not problems:
        return make_result("services", "pass", "no other servectl service holds the port or the cards", **out)
    target = holders[0] if len(holders) == 1 else "..."
    fix = f"use servectl swap {request.profile_name} to replace it (or servectl down {target} first)"
    return make_result("services", "fail", "; ".join(problems), fix, **out, **{SERVECTL_HOLDER: ", ".join(holders)})


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
