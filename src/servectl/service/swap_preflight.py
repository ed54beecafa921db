"""What a swap checks before anything stops: which running service is in the way, and preflight with that
service counted as stopped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from servectl.plan.labels import LABEL_GPUS
from servectl.service.services import ServiceInfo, running_refs

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.engine_image import ParseMemo
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.host import HostProbe
    from servectl.adapters.state import HistoryLog
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport, Replacing


class Preflight(Protocol):
    """Raises :class:`PreflightFailed` (or :class:`ServiceConflict`) when ``resolved`` could not start once
    ``replacing`` is stopped; ``running`` are the servectl services running now; ``parses`` is the swap's memo
    of the image's parser verdicts, which its staging asks again."""

    def __call__(
        self,
        *,
        resolved: Resolved,
        replacing: ServiceInfo | None,
        skip: frozenset[str],
        docker: DockerEngine,
        gpus: GpuInventory,
        running: Sequence[ServiceInfo] = (),
        parses: ParseMemo | None = None,
    ) -> None: ...


def overlaps(service: ServiceInfo, resolved: Resolved) -> bool:
    """Whether ``service`` stands in the way of ``resolved``: same profile, container name, port or a card."""
    return bool(overlap_reason(service, resolved))


def overlap_reason(service: ServiceInfo, resolved: Resolved) -> str:
    """Why ``service`` stands in the way of ``resolved`` (``"port 8190"``, ``"cards 0, 1"``, ...); ``""``: not."""
    plan = resolved.plan
    # the cards as the target's container label will name them (what ServiceInfo.gpus reads back): the
    # devices it requests, or the cards a profile's container.labels places it on (the stand-in's fake cards)
    labelled = plan.docker.labels.get(LABEL_GPUS, "")
    target_gpus = {int(d) for d in (labelled.split(",") if labelled else plan.docker.device_ids) if d.isdigit()}
    shared = sorted(target_gpus & set(service.gpus))
    why = []
    if service.profile == plan.profile:
        why.append("the same profile")
    elif service.container_name == plan.docker.name:
        why.append(f"container name {plan.docker.name}")
    if service.port is not None and service.port == resolved.loaded.profile.serve.port:
        why.append(f"port {service.port}")
    if shared:
        why.append(f"card{'s' if len(shared) > 1 else ''} {', '.join(map(str, shared))}")
    return " and ".join(why)


def profile_preflight(
    *,
    history: HistoryLog,
    host: HostProbe,
    on_report: Callable[[PreflightReport], None] | None = None,
) -> Preflight:
    """servectl's preflight (:func:`servectl.preflight.request.check_start`) as a swap :class:`Preflight`.

    The service being replaced counts as stopped (its container, main pid and port) and declared conflicts
    as about to be stopped; both go to ``check_start`` as data, with the servectl services running now and,
    for an adopted profile, its own container (which holds the name and is replaced like a servectl one).
    Checks skipped with ``--force`` are recorded in the history. The swap's own Docker client and GPU
    inventory are used (no second ones).

    Args:
        history: where forced checks are recorded (the context's).
        host: the context's host probe.
        on_report: gets the full report (warnings, skipped checks) before a failure is raised.
    """

    def check(
        *,
        resolved: Resolved,
        replacing: ServiceInfo | None,
        skip: frozenset[str],
        docker: DockerEngine,
        gpus: GpuInventory,
        running: Sequence[ServiceInfo] = (),
        parses: ParseMemo | None = None,
    ) -> None:
        from servectl.preflight.model import StartContext
        from servectl.preflight.request import check_start

        check_start(
            resolved,
            docker=docker,
            gpus=gpus,
            host=host,
            context=StartContext(
                replacing=None if replacing is None else replacing_of(replacing, docker),
                stop_conflicts=True,
                services=running_refs(running),
                # an adopted profile's own container (recognised by services()): replaced like a servectl one
                own_container_ids=frozenset(
                    s.container_id for s in running if s.adopted and s.profile == resolved.name
                ),
                parses=parses,
            ),
            skip=skip,
            history=history,
            on_report=on_report,
        )

    return check


def replacing_of(service: ServiceInfo, docker: DockerEngine) -> Replacing:
    """What preflight counts as freed once ``service`` is stopped: its container, main pid and port."""
    from servectl.preflight.model import Replacing

    state = docker.inspect(service.container_id)
    pid = state.pid if state is not None else None
    return Replacing(
        container_id=service.container_id,
        container_name=service.container_name,
        pids=frozenset({pid} if pid else ()),
        port=service.port,
    )
