"""The gateway's side of the admin channel (the client is :mod:`servectl.adapters.gateway_admin`).

A unix socket, mode 0600 in a 0700 folder of the state folder: only the user servectl runs as reaches it.
Each connection may take holds; they end on ``release`` or when the connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.errors import ServectlError

if TYPE_CHECKING:
    from servectl.gateway.admission import Hold
    from servectl.gateway.proxy import Gateway

log = logging.getLogger("servectl.gateway")
MAX_LINE = 1 << 16


def _in_use(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


async def serve_admin(gateway: Gateway, path: Path) -> asyncio.AbstractServer:
    """Listen on ``path`` (a stale socket left by a killed gateway is replaced).

    Raises:
        ServectlError: another gateway answers on ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    if path.exists() or path.is_symlink():
        if _in_use(path):
            raise ServectlError(f"another gateway runs on this host ({path} answers); stop it: servectl gateway down")
        path.unlink()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _session(gateway, reader, writer)

    old = os.umask(0o177)
    try:
        server = await asyncio.start_unix_server(handle, path=str(path), limit=MAX_LINE)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    owner = path.parent.parent.stat()  # the state folder: a gateway run as root (its container) lets its user in
    if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, 0):
        os.chown(path.parent, owner.st_uid, owner.st_gid)
        os.chown(path, owner.st_uid, owner.st_gid)
    return server


async def _session(gateway: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    holds: list[Hold] = []
    try:
        while True:
            try:
                line = await reader.readline()
            except (ValueError, ConnectionError):  # a line over the limit, or the peer went away
                break
            if not line:
                break
            try:
                message = json.loads(line)
                reply = await _answer(gateway, message, holds)
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                reply = {"ok": False, "error": f"bad admin message: {err!r}"}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        if holds:
            await _release(gateway, holds, "abandoned")
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _answer(gateway: Gateway, message: dict[str, Any], holds: list[Hold]) -> dict[str, Any]:
    op = message["op"]
    if op == "hold":
        profiles = frozenset(str(p) for p in message["profiles"])
        reason = str(message.get("reason") or "changes a service")
        hold, finished, cut = await gateway.admission.hold(
            profiles, reason=reason, expect_s=float(message.get("expect_s") or 0.0)
        )
        holds.append(hold)
        gateway.metrics.swap_event("hold")
        log.info("hold: %s (%s): %d requests finished, %d cut", reason, ", ".join(sorted(profiles)), finished, cut)
        return {"ok": True, "finished": finished, "cut": cut}
    if op == "maintenance":  # a campaign: the aliases of these profiles are away until released (or closed)
        profiles = frozenset(str(p) for p in message["profiles"])
        reason = str(message.get("reason") or "maintenance")
        current = next((h for h in holds if h.maintenance), None)
        hold = gateway.admission.maintain(
            profiles, reason=reason, eta_s=float(message.get("eta_s") or 0.0), hold=current
        )
        if current is None:
            holds.append(hold)
            log.info("maintenance: %s (%s), about %d s", reason, ", ".join(sorted(profiles)), hold.left_s())
        return {"ok": True}
    if op == "release":
        await _release(gateway, holds, "release")
        return {"ok": True}
    if op == "status":
        return {"ok": True, **await status_document(gateway)}
    return {"ok": False, "error": f"unknown op {op!r}"}


async def _release(gateway: Gateway, holds: list[Hold], kind: str) -> None:
    await gateway.refresh(force=True)  # held requests go to the service that runs now
    for hold in holds:
        seconds = gateway.admission.release(hold)
        gateway.metrics.swap_event(kind, seconds)
        log.info("%s: %s after %.2f s", kind, hold.reason, seconds)
    holds.clear()


async def status_document(gateway: Gateway) -> dict[str, Any]:
    """Aliases with the profile serving each now, holds, in-flight counts (``servectl gateway status``)."""
    await gateway.refresh()
    aliases = {}
    for alias in gateway.table.names:
        route = gateway.table.route(alias, gateway.upstreams)
        held = gateway.admission.holding(alias)
        aliases[alias] = {
            "profiles": list(gateway.table.profiles(alias)),
            "profile": route.profile if route else None,
            "state": ("maintenance" if held.maintenance else "held") if held else ("ready" if route else "down"),
            "in_flight": gateway.admission.in_flight(alias),
            "held": gateway.admission.waiting.get(alias, 0),  # requests waiting for the hold to end
        }
    return {
        "listen": gateway.config.listen,
        "pid": os.getpid(),
        "aliases": aliases,
        "holds": [h.reason for h in gateway.admission.holds.values()],
        "services_error": gateway.upstreams_error,
        "keys_error": None if gateway.keys is None else gateway.keys.error,
        "config": None
        if gateway.watcher is None
        else {
            "file": None if gateway.watcher.config_file is None else str(gateway.watcher.config_file),
            "error": gateway.watcher.error,
            "reloaded_at": gateway.watcher.reloaded_at,
        },
    }
