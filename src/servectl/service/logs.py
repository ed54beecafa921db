"""A service's log lines, redacted: the secrets its profile references, key spellings and token shapes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from servectl.errors import UsageError
from servectl.plan.labels import LABEL_PROFILE
from servectl.redact import MIN_SECRET_LEN, SECRET_NAME, redact
from servectl.service.host_files import read_secret
from servectl.service.services import find_services

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.plan.compile import LaunchPlan


def referenced_secrets(plan: LaunchPlan, environ: Mapping[str, str]) -> list[str]:
    """The secret values ``plan`` references: its API and admin keys (from a variable or file) and the value of every
    engine variable named like a secret (``HF_TOKEN``, ``*_KEY``...), passed by reference or written."""
    values: list[str | None] = []
    for ref in plan.secrets:
        with contextlib.suppress(UsageError, OSError):  # unset or unreadable here: the shapes are still redacted
            values.append(read_secret(plan, ref, environ))
    for name, value in plan.docker.environment:
        if SECRET_NAME.search(name):
            values.append(environ.get(name) if value is None else value)
    return [v for v in dict.fromkeys(values) if v and len(v) >= MIN_SECRET_LEN]


def follow_logs(
    *,
    name: str,
    docker: DockerEngine,
    follow: bool = False,
    tail: int | None = None,
    scope: Mapping[str, str] | None = None,
    secrets: Callable[[str], Sequence[str]] | None = None,
) -> Iterator[str]:
    """Log lines of the service of profile (or container) ``name``.

    ``secrets``: the secret values of a profile (:func:`referenced_secrets` of its plan), taken out of each line
    besides the key spellings and token shapes.

    Raises:
        UsageError: no such service.
    """
    targets = find_services(name, docker=docker, scope=scope)
    if not targets:
        raise UsageError(f"no servectl service named {name}; servectl status lists the services")
    running = [t for t in targets if t.running] or targets
    hidden = list(secrets(running[0].labels.get(LABEL_PROFILE, ""))) if secrets is not None else []
    # The values the container itself was given (what a gateway, without the host's environment, can know too)
    state = docker.inspect(running[0].id)
    hidden += state.secret_env_values if state is not None else ()
    stream = docker.logs(running[0].id, follow=follow, tail=tail)
    try:
        for line in stream:
            yield redact(line, hidden)
    finally:
        stream.close()
