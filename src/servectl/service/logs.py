"""A service's log lines, redacted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from servectl.errors import UsageError
from servectl.redact import redact
from servectl.service.services import find_services

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine


def follow_logs(
    *,
    name: str,
    docker: DockerEngine,
    follow: bool = False,
    tail: int | None = None,
    scope: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Log lines of the service of profile (or container) ``name``.

    Raises:
        UsageError: no such service.
    """
    targets = find_services(name, docker=docker, scope=scope)
    if not targets:
        raise UsageError(f"no servectl service named {name}; servectl status lists the services")
    running = [t for t in targets if t.running] or targets
    stream = docker.logs(running[0].container_id, follow=follow, tail=tail)
    try:
        for line in stream:
            yield redact(line)
    finally:
        stream.close()
