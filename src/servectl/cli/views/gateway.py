"""The gateway's lines in ``servectl status`` and ``servectl gateway status|up``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def gateway_lines(live: Mapping[str, Any]) -> list[str]:
    """``servectl status``'s gateway section: the address, then each alias -> profile -> state."""
    lines = [f"gateway http://{live.get('listen', '?')} (pid {live.get('pid', '?')})"]
    for alias, row in sorted((live.get("aliases") or {}).items()):
        lines.append(
            f"  {alias} -> {row.get('profile') or ' | '.join(row.get('profiles') or [])} -> {row.get('state')}"
        )
    if live.get("services_error"):
        lines.append(f"  cannot list the services: {live['services_error']}")
    if live.get("keys_error"):
        lines.append(f"  key file unreadable (only the keys read before pass): {live['keys_error']}")
    if (live.get("config") or {}).get("error"):
        lines.append(f"  configuration edit refused: {live['config']['error']}")
    return lines


def container_line(container_id: str, image: str, state: str) -> list[str]:
    """The gateway container's line, and how to start it again when it does not run (a ``docker kill`` or an
    engine restart leaves it exited: ``unless-stopped`` does not restart what was stopped by hand)."""
    lines = [f"gateway container {container_id[:12]} ({image}) {state}"]
    if state not in ("running", "restarting"):
        lines.append(f"  the gateway container is {state}, not serving; start it again: servectl gateway up")
    return lines
