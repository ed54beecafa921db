"""What ``status --watch`` and ``logs -f`` show while a model loads: each service's startup phase, each card's use.

A starting service's phase comes from its own log, read the way the health gate reads it
(:class:`~servectl.service.health.LogWatcher`), so a service started by another servectl process - or one
that is still loading after ``up`` was interrupted - shows the same phases as the ``up`` that started it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servectl.errors import GpuUnavailable, ServectlError
from servectl.service.health import LogWatcher

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.service.services import ServiceInfo

#: Log lines read back to find a starting service's phase (weights and CUDA graphs print a few hundred).
PHASE_TAIL_LINES = 400


@dataclass(frozen=True)
class CardUse:
    """One card's memory and load at one moment; None where NVML cannot tell."""

    index: int
    name: str | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization_percent: int | None


@dataclass(frozen=True)
class WatchView:
    """One refresh of ``status --watch``."""

    services: list[ServiceInfo]
    phases: dict[str, str]  # container id -> phase text, for services still starting
    cards: list[CardUse]
    cards_problem: str | None  # why there are no cards to show (no driver), else None
    taken_at: float


def phase_text(lines: Iterable[str]) -> str:
    """The startup phase the lines reach: ``loading weights 50%``, ``capturing CUDA graphs``, ``starting``."""
    watcher = LogWatcher()
    for line in lines:
        watcher.feed(line)
    parts = [watcher.phase]
    if watcher.percent is not None:
        parts.append(f"{watcher.percent}%")
    if watcher.detail:
        parts.append(f"({watcher.detail})")
    return " ".join(parts)


def phases_with_lines(lines: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    """Each line with the new phase text when this line moved startup on (else None), for ``logs -f``."""
    watcher = LogWatcher()
    shown = watcher.phase
    for line in lines:
        watcher.feed(line)
        now = watcher.phase if watcher.percent is None else f"{watcher.phase} {watcher.percent}%"
        if now != shown:
            shown = now
            yield line, now
        else:
            yield line, None


def starting_phase(docker: DockerEngine, container_id: str, *, tail: int = PHASE_TAIL_LINES) -> str:
    """The phase of a starting service, from the last ``tail`` lines of its log."""
    stream = docker.logs(container_id, follow=False, tail=tail)
    try:
        return phase_text(stream)
    finally:
        stream.close()


def card_use(gpus: GpuInventory) -> tuple[list[CardUse], str | None]:
    """Every card's memory and utilisation, or why there is none to show."""
    from servectl.adapters.gpu import reads_cards

    if not reads_cards(gpus):
        return [], "NVML unavailable (no NVIDIA driver here): no card figures"
    try:
        snapshot = gpus.snapshot()
    except GpuUnavailable as err:
        return [], err.message
    cards = [
        CardUse(d.index, d.name, d.memory_used_bytes, d.memory_total_bytes, d.utilization_percent)
        for d in snapshot.devices
    ]
    return cards, None


def watch_view(
    *,
    docker: DockerEngine,
    gpus: GpuInventory,
    list_services: Callable[[], Sequence[ServiceInfo]],
    clock: Callable[[], float],
) -> WatchView:
    """One refresh: the services, the phase of each that is starting, and the cards."""
    found = list(list_services())
    phases: dict[str, str] = {}
    for service in found:
        if service.state == "starting":
            try:
                phases[service.container_id] = starting_phase(docker, service.container_id)
            except ServectlError:  # gone between the listing and the log read
                continue
    cards, problem = card_use(gpus)
    return WatchView(found, phases, cards, problem, clock())
